#include "observer/observer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <map>
#include <mutex>

#include "base/address.h"
#include "base/clock.h"
#include "base/log.h"
#include "host/cgroup.h"
#include "observe.skel.h"

namespace lossd {
namespace {

// Every TCP socket's sockops program run looks its namespace up in
// obs_netns_set (kSet): bounded by OBS_MAX_WATCHED_NETNS.
constexpr auto kPruneEvery = std::chrono::seconds(10);
constexpr uint64_t kCommitMargin = 1000000;  // ns, see Run()

}  // namespace

Result<NetnsWatch> ParseNetnsWatch(const std::string& text) {
  NetnsWatch w;
  if (text == "own" || text.empty()) return w;
  if (text == "all") {
    w.mode = NetnsWatch::Mode::kAll;
    return w;
  }
  w.mode = NetnsWatch::Mode::kSet;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string p = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (p.empty()) return InvalidArgument("--observe-netns: an empty path in '" + text + "'");
    if (p == "all") return InvalidArgument("--observe-netns: 'all' cannot be part of a list");
    if (p != "own" && p[0] != '/')
      return InvalidArgument("--observe-netns: '" + p +
                             "' is not own, all nor an absolute path (/proc/PID/ns/net, "
                             "/run/netns/NAME)");
    if (p.size() > 4096) return InvalidArgument("--observe-netns: a path longer than 4096 bytes");
    w.paths.push_back(p);
    if (w.paths.size() > OBS_MAX_WATCHED_NETNS)
      return InvalidArgument("--observe-netns: at most " + std::to_string(OBS_MAX_WATCHED_NETNS) +
                             " namespaces (or all)");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return w;
}

std::string NetnsWatchText(const NetnsWatch& w) {
  switch (w.mode) {
    case NetnsWatch::Mode::kOwn: return "own";
    case NetnsWatch::Mode::kAll: return "all";
    case NetnsWatch::Mode::kSet: break;
  }
  std::string s;
  for (const auto& p : w.paths) s += (s.empty() ? "" : ",") + p;
  return s;
}

const char* CaStateName(int state) {
  static const char* kNames[OBS_CA_STATES] = {"open", "disorder", "cwr", "recovery", "loss"};
  return state >= 0 && state < OBS_CA_STATES ? kNames[state] : "?";
}

const char* RtxTypeName(int type) {
  switch (type) {
    case OBS_RTX_FAST: return "fast";
    case OBS_RTX_RTO: return "rto";
    case OBS_RTX_LOSS: return "loss";
    case OBS_RTX_TLP: return "tlp";
    case OBS_RTX_SYN: return "syn";
    case OBS_RTX_SYNACK: return "synack";
    case OBS_RTX_PROBE0: return "probe0";
    case OBS_RTX_UNKNOWN: return "unknown";
  }
  return "?";
}

const char* OutcomeName(int outcome) {
  switch (outcome) {
    case OBS_SENT: return "sent";
    case OBS_FAILED: return "failed";
  }
  return "?";
}

uint64_t RetransSegsOf(const RtxTotals& by_type) {
  uint64_t segs = 0;
  for (int t = 0; t < OBS_RTX_MAX; t++)
    segs += by_type[t][OBS_SENT].segs + by_type[t][OBS_FAILED].segs;
  return segs;
}

void Observer::SkelDeleter::operator()(observe_bpf* s) const {
  observe_bpf__destroy(s);
}

Result<std::unique_ptr<Observer>> Observer::Create(const ObserverOptions& opts,
                                                   const std::atomic<bool>* cancel) {
  std::unique_ptr<Observer> o(new Observer());
  LOSSD_RETURN_IF_ERROR(o->Load(opts, cancel));
  // What a stream reports as the kernel ring's losses (StreamSubscription).
  o->hub_.SetRingLost([p = o.get()] { return p->Totals().counters[OBS_CNT_RING_LOST]; });
  o->thread_ = std::thread([p = o.get()] { p->Run(); });
  return o;
}

bpf_program* Observer::Program(const char* name) const {
  for (const auto& [n, p] : progs_)
    if (n == name) return p;
  return nullptr;
}

Result<bpf_program*> Observer::LoadProgram(const char* name) {
  std::unique_ptr<observe_bpf, SkelDeleter> obj(observe_bpf__open());
  if (!obj)
    return Status::FromErrno(errno, std::string("open the observer's BPF object for ") + name);
  LOSSD_RETURN_IF_ERROR(ReuseMapsLoadOnly(obj->obj, skel_->obj, name));
  uint64_t t0 = MonotonicNs();
  int err = observe_bpf__load(obj.get());
  if (err)
    return Status::FromErrno(-err, std::string("load ") + name + " (see the libbpf log above)");
  bpf_program* p = bpf_object__find_program_by_name(obj->obj, name);
  ProgLoadStats ps;
  FillProgInfo(bpf_program__fd(p), &ps);
  LOG_INFO("observer: loaded %s: %u instructions verified in %.0f ms", name, ps.verified_insns,
           (MonotonicNs() - t0) / 1e6);
  std::lock_guard<std::mutex> lock(load_mu_);
  prog_objs_.push_back(std::move(obj));
  progs_.emplace_back(name, p);
  return p;
}

// Loads every program, two at a time; the ones that failed in *load_errors
// (obs_sockops failing fails the observer: it needs it).
Status Observer::LoadPrograms(const std::atomic<bool>* cancel,
                              std::map<std::string, std::string>* load_errors) {
  auto cancelled = [&] { return cancel && cancel->load(); };
  const Status kCancelled(Code::kUnavailable, "cancelled");
  // Loaded before anything attaches: sockops first (the observer needs it),
  // the iterator, then the tracepoints (each may fail on its own).
  const char* names[] = {"obs_sockops", "obs_iter_tcp",   "obs_retransmit_synack",
                         "obs_probe",   "obs_cong_state", "obs_set_state",
                         "obs_sendmsg"};
  // Each program verifies on its own, so two threads verify two at once
  // (these machines have 2 cores); nothing attaches until all are loaded.
  constexpr size_t kPrograms = sizeof(names) / sizeof(names[0]);
  std::array<Status, kPrograms> results;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; !cancelled() && (i = next++) < kPrograms;) {
      auto p = LoadProgram(names[i]);
      if (!p.ok()) results[i] = p.status();
    }
  };
  unsigned threads = std::max(1u, std::min(2u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; t++) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (cancelled()) return kCancelled;
  for (size_t i = 0; i < kPrograms; i++) {
    if (results[i].ok()) continue;
    if (i == 0) return results[i];  // obs_sockops: the observer needs it
    (*load_errors)[names[i]] = results[i].message();
    LOG_WARN("observer: %s", results[i].message().c_str());
  }
  return Status::Ok();
}

// Retransmissions are counted by a sock_ops program on the root cgroup
// (every socket of the host; it keeps those of the namespace). It must be
// in place before the iterator arms the sockets that already exist.
Status Observer::AttachSockops() {
  ObsHookStatus so;
  so.name = "sockops/retransmit";
  {
    Result<UniqueFd> root = OpenCgroup2Root();
    if (!root.ok()) {
      so.error = root.status().message();
    } else {
      bpf_link* l = bpf_program__attach_cgroup(Program("obs_sockops"), root->get());
      if (!l) {
        so.error = std::string("attach sockops to the root cgroup: ") + strerror(errno);
      } else {
        so.attached = true;
        links_.emplace_back(l);
      }
    }
  }
  hooks_.push_back(so);
  if (!so.attached)
    return FailedPrecondition("the observer cannot see retransmissions: " + so.error);
  return Status::Ok();
}

// Existing flows next: this arms their retransmission callback, and once
// the tracepoints run, a flow's next ACK would create its record and the
// iterator would no longer mark it preexisting. iter/tcp walks the sockets of
// the namespace of the thread that creates the iterator, so this thread
// enters each watched namespace in turn to create and read one.
void Observer::PickUpExisting(bool enabled, const std::string& load_error) {
  ObsHookStatus it;
  it.name = "iter/tcp";
  if (enabled && !Program("obs_iter_tcp")) {
    it.error = load_error;
  } else if (enabled) {
    BpfLink l(bpf_program__attach_iter(Program("obs_iter_tcp"), nullptr));
    if (!l) {
      it.error = std::string("attach iter/tcp: ") + strerror(errno);
    } else {
      // The namespaces to walk: lossd's own (if watched) first, then the others.
      std::vector<std::pair<uint64_t, std::string>> todo;
      if (Watches(own_ino_)) todo.emplace_back(own_ino_, "");
      if (watch_.mode == NetnsWatch::Mode::kAll) {
        for (const auto& [ino, path] : ListNetns(OBS_MAX_NETNS))
          if (ino != own_ino_) todo.emplace_back(ino, path);
      } else {
        for (const Netns& n : held_)
          if (n.ino != own_ino_) todo.emplace_back(n.ino, n.where);
      }
      size_t walked = 0, failed = 0;
      std::string first_error;
      for (const auto& [ino, path] : todo) {
        Status st = Status::Ok();
        if (path.empty()) {
          st = WalkExisting(l.get());
        } else {
          auto ns = OpenNetns(path);  // a process may have gone since the listing
          if (!ns.ok()) {
            st = ns.status();
          } else if (ns->ino != ino) {
            continue;  // that process is in another namespace by now
          } else {
            EnterNetns in(*ns);
            st = in.ok() ? WalkExisting(l.get()) : in.status();
          }
        }
        if (st.ok()) {
          walked++;
        } else {
          failed++;
          if (first_error.empty()) first_error = st.message();
        }
      }
      it.attached = walked > 0 || todo.empty();
      if (failed)
        it.error = std::to_string(failed) + " of " + std::to_string(todo.size()) +
                   " namespaces not walked: " + first_error;
      LOG_INFO("observer: existing flows picked up in %zu network namespaces", walked);
    }
    if (!it.attached)
      LOG_WARN("observer: %s (existing flows not picked up; their retransmissions are not counted)",
               it.error.c_str());
  } else {
    it.error = "disabled";
  }
  hooks_.push_back(it);
}

Status Observer::WalkExisting(bpf_link* link) {
  int fd = bpf_iter_create(bpf_link__fd(link));
  if (fd < 0) return Status::FromErrno(errno, "create tcp iterator");
  UniqueFd iter(fd);
  char buf[4096];
  ssize_t n;
  while ((n = read(iter.get(), buf, sizeof(buf))) > 0) {
  }
  if (n < 0) return Status::FromErrno(errno, "read tcp iterator");
  return Status::Ok();
}

bool Observer::Watches(uint64_t ino) const {
  switch (watch_.mode) {
    case NetnsWatch::Mode::kAll: return true;
    case NetnsWatch::Mode::kOwn: return ino == cfg_.netns_ino || cfg_.netns_ino == 0;
    case NetnsWatch::Mode::kSet: break;
  }
  for (const Netns& n : held_)
    if (n.ino == ino) return true;
  return false;
}

Status Observer::AddNetnsTotals(uint64_t ino) {
  std::vector<obs_ns_total> zero(static_cast<size_t>(ncpus_));
  std::memset(zero.data(), 0, zero.size() * sizeof(obs_ns_total));
  int err = bpf_map_update_elem(bpf_map__fd(skel_->maps.obs_ns_totals), &ino, zero.data(),
                                BPF_NOEXIST);
  if (err && errno != EEXIST)
    return Status::FromErrno(errno, "add the totals of network namespace " + std::to_string(ino));
  return Status::Ok();
}

// Which namespaces the programs watch, and an entry of totals for each
// named one (and lossd's own): those are never in the "other" bucket.
Status Observer::SetUpNetns(const ObserverOptions& opts) {
  watch_ = opts.netns;
  own_ino_ = ThreadNetnsIno();
  if (!own_ino_) return Status::FromErrno(errno, "stat /proc/thread-self/ns/net");
  if (opts.netns_ino) {  // one namespace by inode (tests, tools)
    watch_ = NetnsWatch{};
    cfg_.netns_mode = OBS_NETNS_ONE;
    cfg_.netns_ino = opts.netns_ino;
  } else if (watch_.mode == NetnsWatch::Mode::kOwn) {
    cfg_.netns_mode = OBS_NETNS_ONE;
    cfg_.netns_ino = own_ino_;
  } else if (watch_.mode == NetnsWatch::Mode::kAll) {
    cfg_.netns_mode = OBS_NETNS_ALL;
  } else {
    cfg_.netns_mode = OBS_NETNS_SET;
    for (const std::string& p : watch_.paths) {
      auto ns = p == "own" ? OwnNetns() : OpenNetns(p);
      if (!ns.ok())
        return Status(ns.status().code(), "--observe-netns: " + ns.status().message());
      uint32_t one = 1;
      if (bpf_map_update_elem(bpf_map__fd(skel_->maps.obs_netns_set), &ns->ino, &one, BPF_ANY))
        return Status::FromErrno(errno, "watch network namespace " + p);
      if (p == "own") ns->where = "/proc/" + std::to_string(getpid()) + "/ns/net";
      held_.push_back(std::move(*ns));
    }
  }
  LOSSD_RETURN_IF_ERROR(AddNetnsTotals(own_ino_));
  {
    std::lock_guard<std::mutex> lock(paths_mu_);
    paths_[own_ino_] = "/proc/" + std::to_string(getpid()) + "/ns/net";
    for (const Netns& n : held_) paths_[n.ino] = n.where;
  }
  for (const Netns& n : held_) LOSSD_RETURN_IF_ERROR(AddNetnsTotals(n.ino));
  if (cfg_.netns_mode == OBS_NETNS_ONE && cfg_.netns_ino != own_ino_)
    LOSSD_RETURN_IF_ERROR(AddNetnsTotals(cfg_.netns_ino));
  return Status::Ok();
}

namespace {
// The namespaces obs_ns_totals has entries of (bounded: the map's size twice).
std::vector<uint64_t> NetnsKeys(int fd) {
  std::vector<uint64_t> keys;
  uint64_t key, next;
  uint64_t* prev = nullptr;
  while (keys.size() < 2 * OBS_MAX_NETNS && bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    key = next;
    prev = &key;
  }
  return keys;
}

}  // namespace

void Observer::PruneNetns() {
  int fd = bpf_map__fd(skel_->maps.obs_ns_totals);
  std::vector<uint64_t> keys = NetnsKeys(fd);
  bool unnamed = false;
  {
    std::lock_guard<std::mutex> lock(paths_mu_);
    for (uint64_t k : keys) unnamed |= !paths_.count(k);
  }
  bool full = keys.size() > OBS_MAX_NETNS / 2;
  if (!unnamed && !full) return;
  std::map<uint64_t, std::string> alive = ListNetns(4 * OBS_MAX_NETNS);
  std::lock_guard<std::mutex> lock(paths_mu_);
  for (uint64_t k : keys) {
    auto it = alive.find(k);
    if (it != alive.end()) {
      if (!paths_.count(k) || k != own_ino_) paths_[k] = it->second;
      continue;
    }
    bool held = k == own_ino_ || k == cfg_.netns_ino;
    for (const Netns& n : held_) held |= n.ino == k;
    if (held) continue;
    paths_.erase(k);
    // Gone (no process in it, no bind mount): once the table is half full
    // its totals are forgotten, so that it does not fill up with the dead.
    if (full) bpf_map_delete_elem(fd, &k);
  }
}

// Attaches each tracing program on its own: reports, does not fail, on what is missing.
void Observer::AttachTracepoints(std::map<std::string, std::string>& load_errors) {
  struct {
    const char* prog;
    const char* name;
  } progs[] = {
      {"obs_retransmit_synack", "tp_btf/tcp_retransmit_synack"},
      {"obs_probe", "tp_btf/tcp_probe"},
      {"obs_cong_state", "tp_btf/tcp_cong_state_set"},
      {"obs_set_state", "tp_btf/inet_sock_set_state"},
      {"obs_sendmsg", "tp_btf/tcp_sendmsg_locked"},
  };
  for (const auto& p : progs) {
    ObsHookStatus hs;
    hs.name = p.name;
    if (!Program(p.prog)) {
      hs.error = load_errors[p.prog];
      hooks_.push_back(hs);
      continue;
    }
    bpf_link* l = bpf_program__attach(Program(p.prog));
    if (!l) {
      hs.error = std::string("attach ") + p.name + ": " + strerror(errno);
      LOG_WARN("observer: %s", hs.error.c_str());
    } else {
      hs.attached = true;
      links_.emplace_back(l);
    }
    hooks_.push_back(hs);
  }
}

namespace {

// The maps of bpf/lib/shared_maps.h: the injector's, or (none running) the
// smallest of our own, which nothing writes.
Status ShareInjectorMaps(observe_bpf* skel, const ObserverOptions& opts) {
  for (auto [map, fd] : {std::make_pair(skel->maps.loss_drops, opts.shared_drops_fd),
                         std::make_pair(skel->maps.loss_guards, opts.shared_guards_fd),
                         std::make_pair(skel->maps.loss_guard_watch, opts.shared_watch_fd)}) {
    int err = fd >= 0 ? bpf_map__reuse_fd(map, fd) : bpf_map__set_max_entries(map, 1);
    if (err)
      return Status::FromErrno(-err, std::string(fd >= 0 ? "share the injector's " : "size ") +
                                         bpf_map__name(map));
  }
  return Status::Ok();
}

}  // namespace

Status Observer::Load(const ObserverOptions& opts, const std::atomic<bool>* cancel) {
  // The maps first, then one program at a time (docs/architecture.md#start-up).
  observe_bpf* skel = observe_bpf__open();
  if (!skel) return Status::FromErrno(errno, "open the TCP observer's BPF object");
  skel_.reset(skel);
  AutoloadNone(skel->obj);
  LOSSD_RETURN_IF_ERROR(ShareInjectorMaps(skel, opts));
  int err = observe_bpf__load(skel);
  if (err) return Status::FromErrno(-err, "create the TCP observer's BPF maps");
  std::map<std::string, std::string> load_errors;
  LOSSD_RETURN_IF_ERROR(LoadPrograms(cancel, &load_errors));
  int n = libbpf_num_possible_cpus();
  if (n <= 0) return Status::FromErrno(-n, "count possible CPUs");
  ncpus_ = n;

  LOSSD_RETURN_IF_ERROR(SetUpNetns(opts));
  if (opts.stall_min_ns == 0 || opts.stall_rtts == 0)
    return InvalidArgument("the stall threshold's floor and RTT multiple must be positive");
  cfg_.stall_min_ns = opts.stall_min_ns;
  cfg_.stall_rtts = opts.stall_rtts;
  LOSSD_RETURN_IF_ERROR(SetFilters(opts.filters));

  LOSSD_RETURN_IF_ERROR(AttachSockops());
  PickUpExisting(opts.pick_up_existing, load_errors["obs_iter_tcp"]);
  AttachTracepoints(load_errors);

  ring_.reset(
      ring_buffer__new(bpf_map__fd(skel->maps.obs_ring), &Observer::OnEvent, this, nullptr));
  if (!ring_) return Status::FromErrno(errno, "open the observer's ring buffer");
  return Status::Ok();
}

Observer::~Observer() {
  StopReader();
  hub_.CloseAll();
}

void Observer::StopReader() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

int Observer::OnEvent(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Observer*>(ctx);
  ObsEvent e;
  std::memcpy(&e.data, data, std::min(size, sizeof(e.data)));
  self->batch_.push_back(e);
  // Publish in batches (one hub lock and one wakeup per subscriber per
  // batch); the reader flushes what is left after each poll.
  if (self->batch_.size() >= 256) self->Flush();
  return 0;
}

void Observer::Flush() {
  consumed_ += batch_.size();
  hub_.PublishAll(&batch_);
  batch_.clear();
}

// The BPF side wakes this thread at most once per OBS_WAKEUP_NS (or when a
// batch waits), so while events flow the ring is also read on a short timeout
// (an event waits at most ~2 ms); after a quiet second the thread polls every
// 100 ms. An event after a quiet millisecond always wakes it.
void Observer::Run() {
  int quiet_polls = 0;
  auto next_prune = std::chrono::steady_clock::now() + kPruneEvery;
  while (!stop_) {
    if (std::chrono::steady_clock::now() >= next_prune) {
      PruneNetns();
      next_prune = std::chrono::steady_clock::now() + kPruneEvery;
    }
    int timeout_ms = quiet_polls < 500 ? 2 : 100;
    // What was committed before `read_from` is read by the poll (it consumes
    // all a woken ring holds) or by the consume after a timeout.
    uint64_t read_from = MonotonicNs();
    int n = ring_buffer__poll(ring_.get(), timeout_ms);
    // On a timeout ring_buffer__poll reads nothing: records submitted without
    // a wakeup since the last one are read here.
    if (n == 0) {
      read_from = MonotonicNs();
      n = ring_buffer__consume(ring_.get());
    }
    Flush();
    // An event is stamped a few microseconds before it is committed (the
    // BPF program runs on, not preempted): a millisecond's margin.
    if (n >= 0 && read_from > kCommitMargin) hub_.SetComplete(read_from - kCommitMargin);
    if (n < 0 && n != -EINTR) {
      LOG_ERROR("observer: ring buffer poll: %s", strerror(-n));
      break;
    }
    quiet_polls = n > 0 ? 0 : quiet_polls + 1;
  }
  if (!stop_) hub_.SetComplete(UINT64_MAX);  // the reader failed: nothing more comes
}

// The reader thread owns the ring while it runs (ring_buffer__poll/consume are
// not thread-safe): it is stopped and joined first, so nothing here waits on
// it for longer than one poll (at most 100 ms).
void Observer::StopAndDrain() {
  StopReader();
  ring_buffer__consume(ring_.get());
  Flush();
  hub_.SetComplete(UINT64_MAX);
}

Status Observer::WriteConfigLocked() {
  uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.obs_cfg), &zero, &cfg_, BPF_ANY))
    return Status::FromErrno(errno, "write observer config");
  return Status::Ok();
}

Result<std::unique_ptr<FlowTrace>> Observer::Trace(uint64_t cookie) {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  auto it = traced_.find(cookie);
  if (it != traced_.end()) {
    it->second++;
  } else {
    if (traced_.size() >= OBS_MAX_TRACED)
      return ResourceExhausted("at most " + std::to_string(OBS_MAX_TRACED) +
                               " flows traced at once");
    uint32_t one = 1;
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.obs_traced), &cookie, &one, BPF_ANY))
      return Status::FromErrno(errno, "mark flow " + std::to_string(cookie) + " traced");
    traced_[cookie] = 1;
    cfg_.n_traced = static_cast<uint32_t>(traced_.size());
    LOSSD_RETURN_IF_ERROR(WriteConfigLocked());
  }
  return std::unique_ptr<FlowTrace>(new FlowTrace(this, cookie));
}

void Observer::Untrace(uint64_t cookie) {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  auto it = traced_.find(cookie);
  if (it == traced_.end() || --it->second > 0) return;
  traced_.erase(it);
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.obs_traced), &cookie))
    LOG_WARN("observer: untrace flow %llu: %s", static_cast<unsigned long long>(cookie),
             strerror(errno));
  cfg_.n_traced = static_cast<uint32_t>(traced_.size());
  Status st = WriteConfigLocked();
  if (!st.ok()) LOG_WARN("observer: %s", st.message().c_str());
}

FlowTrace::~FlowTrace() {
  obs_->Untrace(cookie_);
}

Result<std::unique_ptr<OpenWatch>> Observer::WatchOpens() {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.open_waiters++;
  Status st = WriteConfigLocked();
  if (!st.ok()) {
    cfg_.open_waiters--;
    return st;
  }
  return std::unique_ptr<OpenWatch>(new OpenWatch(this));
}

void Observer::UnwatchOpens() {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.open_waiters--;
  Status st = WriteConfigLocked();
  if (!st.ok()) LOG_WARN("observer: %s", st.message().c_str());
}

OpenWatch::~OpenWatch() {
  obs_->UnwatchOpens();
}

Status Observer::SetFilters(const std::vector<ObsFilterSpec>& filters) {
  if (filters.size() > OBS_MAX_FILTERS)
    return InvalidArgument("at most " + std::to_string(OBS_MAX_FILTERS) + " observer filters");
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.n_filters = static_cast<uint32_t>(filters.size());
  for (size_t i = 0; i < OBS_MAX_FILTERS; i++) {
    obs_filter& f = cfg_.filters[i];
    std::memset(&f, 0, sizeof(f));
    if (i >= filters.size()) continue;
    const ObsFilterSpec& s = filters[i];
    f.port_lo = s.ports.lo;
    f.port_hi = s.ports.hi;
    f.cgroup_id = s.cgroup_id;
    int fam = s.family ? s.family : s.addr ? s.addr->family : 0;
    if (fam && fam != 4 && fam != 6) return InvalidArgument("filter family must be 4 or 6");
    f.family = AfOfVersion(fam);
    if (s.addr) {
      const auto m = PrefixMask(s.addr->prefix);
      for (int b = 0; b < 16; b++) reinterpret_cast<uint8_t*>(f.addr)[b] = s.addr->addr[b] & m[b];
      std::memcpy(f.mask, m.data(), 16);
    }
  }
  return WriteConfigLocked();
}

namespace {

// One namespace's per-CPU totals, summed.
bool ReadNsTotals(int fd, const void* key, int ncpus, RtxTotals* out) {
  std::vector<obs_ns_total> v(static_cast<size_t>(ncpus));
  if (bpf_map_lookup_elem(fd, key, v.data())) return false;
  for (const obs_ns_total& cpu : v) {
    for (uint32_t i = 0; i < OBS_TOTALS; i++) {
      obs_total& o = (*out)[i / OBS_OUTCOME_MAX][i % OBS_OUTCOME_MAX];
      o.events += cpu.t[i].events;
      o.segs += cpu.t[i].segs;
    }
  }
  return true;
}

}  // namespace

std::vector<NetnsTotals> Observer::TotalsByNetns(uint64_t ino, NetnsTotals* other) const {
  std::vector<NetnsTotals> out;
  int fd = bpf_map__fd(skel_->maps.obs_ns_totals);
  std::vector<uint64_t> keys;
  if (ino) {
    keys.push_back(ino);
  } else {
    keys = NetnsKeys(fd);
    std::sort(keys.begin(), keys.end());
  }
  for (uint64_t k : keys) {
    NetnsTotals n;
    n.ino = k;
    n.own = k == own_ino_;
    if (!ReadNsTotals(fd, &k, ncpus_, &n.by_type)) continue;  // gone since the listing
    out.push_back(std::move(n));
  }
  {
    std::lock_guard<std::mutex> lock(paths_mu_);
    for (NetnsTotals& n : out) {
      auto it = paths_.find(n.ino);
      if (it != paths_.end()) n.path = it->second;
    }
  }
  if (other) {
    *other = NetnsTotals{};
    uint32_t zero = 0;
    ReadNsTotals(bpf_map__fd(skel_->maps.obs_ns_other), &zero, ncpus_, &other->by_type);
  }
  return out;
}

ObsTotals Observer::Totals() const {
  ObsTotals t;
  // lossd's own namespace (its entry exists from the start).
  ReadNsTotals(bpf_map__fd(skel_->maps.obs_ns_totals), &own_ino_, ncpus_, &t.by_type);
  for (uint32_t i = 0; i < OBS_CNT_MAX; i++)
    AddPerCpu(bpf_map__fd(skel_->maps.obs_counters), i, ncpus_, &t.counters[i]);
  t.ring_consumed = consumed_;
  t.hub_published = hub_.published();
  for (const auto& [name, p] : progs_) {
    if (name == "obs_sockops" || name == "obs_iter_tcp") continue;  // as before: the tracepoints
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len) == 0) {
      t.recursion_misses += info.recursion_misses;
      t.skipped_runs[name] = info.recursion_misses;
    }
  }
  return t;
}

std::optional<ObsFlow> Observer::FlowOf(uint64_t cookie) const {
  ObsFlow f;
  f.cookie = cookie;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.obs_flows), &cookie, &f.flow)) return std::nullopt;
  return f;
}

std::vector<ObsFlow> Observer::Flows() const {
  std::vector<ObsFlow> out;
  int fd = bpf_map__fd(skel_->maps.obs_flows);
  uint64_t key, next;
  uint64_t* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    ObsFlow f;
    f.cookie = next;
    if (bpf_map_lookup_elem(fd, &next, &f.flow) == 0) out.push_back(f);
    key = next;
    prev = &key;
  }
  return out;
}

}  // namespace lossd
