#include "injector/injector.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "common/bpf_objects.h"
#include "common/clock.h"
#include "common/log.h"
#include "host/cgroup.h"
#include "host/interface.h"
#include "host/netlink.h"
#include "host/targets.h"
#include "injector/guard.h"
#include "loss.skel.h"

namespace lossd {
const char* LossHookName(int hook) {
  switch (hook) {
    case LOSS_HOOK_XDP: return "xdp";
    case LOSS_HOOK_TC_INGRESS: return "tc_ingress";
    case LOSS_HOOK_TC_EGRESS: return "tc_egress";
    case LOSS_HOOK_CGROUP_INGRESS: return "cgroup_ingress";
    case LOSS_HOOK_CGROUP_EGRESS: return "cgroup_egress";
  }
  return "?";
}

namespace {

// The hook a rule runs in (hook auto chosen: docs/architecture.md#hook-choice).
Hook ChooseHook(const RuleSpec& spec) {
  if (spec.hook != Hook::kAuto) return spec.hook;
  if (NamesCgroup(spec)) return Hook::kCgroup;
  if (spec.dir == Direction::kIngress && !IsVirtualInterface(spec.iface))
    return Hook::kXdp;  // physical NIC: drop before any skb exists
  return Hook::kTc;     // veth/virtual: tcx costs nothing measurable there
}

// The programs (enum loss_hook) a rule on `hook` in direction `dir` runs in.
std::vector<int> HookKinds(Hook hook, Direction dir) {
  bool ingress = dir != Direction::kEgress;
  bool egress = dir != Direction::kIngress;
  std::vector<int> kinds;
  switch (hook) {
    case Hook::kXdp: kinds.push_back(LOSS_HOOK_XDP); break;
    case Hook::kTc:
      if (ingress) kinds.push_back(LOSS_HOOK_TC_INGRESS);
      if (egress) kinds.push_back(LOSS_HOOK_TC_EGRESS);
      break;
    case Hook::kCgroup:
      if (ingress) kinds.push_back(LOSS_HOOK_CGROUP_INGRESS);
      if (egress) kinds.push_back(LOSS_HOOK_CGROUP_EGRESS);
      break;
    case Hook::kAuto: break;
  }
  return kinds;
}

const char* ProgName(int hook) {
  switch (hook) {
    case LOSS_HOOK_XDP: return "lossd_xdp";
    case LOSS_HOOK_TC_INGRESS: return "lossd_tc_in";
    case LOSS_HOOK_TC_EGRESS: return "lossd_tc_out";
    case LOSS_HOOK_CGROUP_INGRESS: return "lossd_cg_in";
    case LOSS_HOOK_CGROUP_EGRESS: return "lossd_cg_out";
  }
  return "";
}

RuleCounters Sum(const RuleCounters& a, const RuleCounters& b) {
  RuleCounters s;
  s.matched_pkts = a.matched_pkts + b.matched_pkts;
  s.matched_segs = a.matched_segs + b.matched_segs;
  s.matched_bytes = a.matched_bytes + b.matched_bytes;
  s.dropped_pkts = a.dropped_pkts + b.dropped_pkts;
  s.dropped_segs = a.dropped_segs + b.dropped_segs;
  s.dropped_bytes = a.dropped_bytes + b.dropped_bytes;
  s.logged_pkts = a.logged_pkts + b.logged_pkts;
  return s;
}

// A pass-only program of `type` named `name` (2 instructions: r0 = ret;
// exit), for probing attach modes without loading the injector's programs.
UniqueFd PassProgram(enum bpf_prog_type type, const char* name, int ret) {
  struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, ret},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  return UniqueFd(bpf_prog_load(type, name, "Dual BSD/GPL", insns, 2, nullptr));
}

}  // namespace

void Injector::SkelDeleter::operator()(loss_bpf* s) const {
  loss_bpf__destroy(s);
}

Injector::Injector(const InjectorOptions& opts) : opts_(opts), guard_(opts.limits.protected_ports) {
  for (auto& fd : prog_fds_) fd = -1;
}

Status Injector::CheckOptions(const InjectorOptions& opts) {
  // One slot stays free for Replace, which publishes before it withdraws.
  if (opts.limits.max_rules == 0 || opts.limits.max_rules >= LOSS_MAX_RULES)
    return InvalidArgument("max rules must lie between 1 and " +
                           std::to_string(LOSS_MAX_RULES - 1));
  return Status::Ok();
}

Result<std::unique_ptr<Injector>> Injector::Create(const InjectorOptions& opts) {
  LOSSD_RETURN_IF_ERROR(CheckOptions(opts));
  std::unique_ptr<Injector> inj(new Injector(opts));
  LOSSD_RETURN_IF_ERROR(inj->Load());
  int stale = RemoveStaleClsactFilters();
  if (stale) LOG_INFO("removed %d stale clsact filter(s) of a previous lossd", stale);
  if (!opts.state_dir.empty()) {
    mkdir(opts.state_dir.c_str(), 0700);
    RestoreOffloads(opts.state_dir + "/offloads");
  }
  inj->Tick();
  if (opts.background) {
    // The watch first: a link that goes from here on is seen.
    auto links = OpenLinkEvents();
    if (!links.ok()) return links.status();
    inj->stop_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!inj->stop_fd_.valid()) return Status::FromErrno(errno, "eventfd");
    inj->lease_thread_ = std::thread([p = inj.get()] { p->RunLease(); });
    inj->watch_thread_ = std::thread(
        [p = inj.get(), fd = std::move(*links)]() mutable { p->RunWatch(std::move(fd)); });
  }
  return inj;
}

Status Injector::Load() {
  loss_bpf* skel = loss_bpf__open();
  if (!skel) return Status::FromErrno(errno, "open BPF object");
  skel_.reset(skel);
  AutoloadNone(skel->obj);  // the maps only; programs load on first use
  int err = loss_bpf__load(skel);
  if (err)
    return Status::FromErrno(-err, "create the injector's BPF maps (see the libbpf log above)");
  int n = libbpf_num_possible_cpus();
  if (n <= 0) return Status::FromErrno(-n, "count possible CPUs");
  ncpus_ = n;
  for (uint32_t s = LOSS_MAX_RULES; s > 0; s--) free_slots_.push_back(s - 1);
  return WriteConfig();
}

Injector::~Injector() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (stop_fd_.valid()) {
    uint64_t one = 1;
    if (write(stop_fd_.get(), &one, sizeof(one)) < 0) LOG_WARN("wake the watch thread: %m");
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  Clear();
  // Attachments and offload guards are gone with the rules; the qdiscs lossd
  // created go with qdiscs_, the skeleton (maps, programs) last.
}

void Injector::SetListener(RuleListener* listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = listener;
}

// Renews the lease every lease/3, taking only cfg_mu_: a rule change
// (attaching, netlink, ethtool, a long ClearRules) holds mu_, never it.
void Injector::RunLease() {
  auto period = opts_.lease.count() > 0 ? opts_.lease / 3 : std::chrono::milliseconds(500);
  if (period < std::chrono::milliseconds(50)) period = std::chrono::milliseconds(50);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) RenewLease();
}

// Reaps expired rules and checks the attachments every lease/3, and at once
// when a link of the namespace changes (a cgroup's removal is seen at the
// next period).
void Injector::RunWatch(UniqueFd links) {
  auto period = opts_.lease.count() > 0 ? opts_.lease / 3 : std::chrono::milliseconds(500);
  if (period < std::chrono::milliseconds(50)) period = std::chrono::milliseconds(50);
  auto next = std::chrono::steady_clock::now() + period;
  for (;;) {
    struct pollfd fds[2] = {{links.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        next - std::chrono::steady_clock::now());
    int n = poll(fds, 2, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n < 0 && errno != EINTR) {  // never seen; the period's checks go on regardless
      LOG_ERROR("poll link events: %m");
      std::this_thread::sleep_for(period);
      continue;
    }
    if (fds[1].revents) return;
    bool changed = fds[0].revents && DrainLinkEvents(links.get()) > 0;
    bool due = std::chrono::steady_clock::now() >= next;
    if (due) {
      std::lock_guard<std::mutex> lock(mu_);
      ReapLocked();
      next = std::chrono::steady_clock::now() + period;
    }
    if (changed || due) CheckAttachments();
  }
}

void Injector::Tick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
  }
  CheckAttachments();
  RenewLease();
}

void Injector::ReapLocked() {
  uint64_t now = MonotonicNs();
  for (auto& [id, rule] : rules_) {
    bool waiting = !rule.live && !rule.info.expired && rule.retired_ns == 0;  // to re-attach
    if ((rule.live || waiting) && rule.expires_ns && now >= rule.expires_ns) {
      LOG_INFO("rule %u expired", id);
      if (rule.live) {
        Status st = Retire(rule);
        if (!st.ok()) LOG_ERROR("retire expired rule %u: %s", id, st.message().c_str());
      }
      rule.info.expired = true;
      rule.info.failed.clear();
      rule.retired_ns = now;
      expired_.push_back(id);
      if (listener_ && !waiting) listener_->RuleRetired(id);
    }
  }
  // Keep a bounded history of expired and failed rules (their final
  // counters): at most keep_retired_max, none longer than keep_retired.
  while (!expired_.empty()) {
    uint32_t id = expired_.front();
    auto it = rules_.find(id);
    bool old =
        it == rules_.end() || now - it->second.retired_ns >= uint64_t(opts_.keep_retired.count());
    if (expired_.size() <= opts_.keep_retired_max && !old) break;
    rules_.erase(id);
    expired_.pop_front();
    if (listener_) listener_->RuleForgotten(id);
  }
}

void Injector::RenewLease() {
  uint64_t now = MonotonicNs();
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.lease_until_ns =
      opts_.lease.count() > 0 ? now + uint64_t(opts_.lease.count()) * 1000000ull : 0;
  uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_cfg), &zero, &cfg_, BPF_ANY))
    LOG_ERROR("renew lease: write loss_cfg: %m");
}

namespace {
// The id of the cgroup directory at `path` now; 0 if there is none.
uint64_t CgroupIdAt(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  return st.st_ino;
}
}  // namespace

uint64_t Injector::LeaseRemainingNs() const {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  uint64_t now = MonotonicNs();
  return cfg_.lease_until_ns > now ? cfg_.lease_until_ns - now : 0;
}

int Injector::ProgFd(int hook) const {
  if (hook < 0 || hook >= LOSS_HOOK_MAX) return -1;
  Status st = LoadProgram(hook);
  if (!st.ok()) {
    LOG_ERROR("%s", st.message().c_str());
    return -1;
  }
  return prog_fds_[hook];
}

Status Injector::LoadProgram(int hook) const {
  if (hook < 0 || hook >= LOSS_HOOK_MAX) return Internal("unknown hook " + std::to_string(hook));
  if (prog_fds_[hook] >= 0) return Status::Ok();
  std::lock_guard<std::mutex> load(load_mu_);
  if (prog_fds_[hook] >= 0) return Status::Ok();
  const char* name = ProgName(hook);
  uint64_t t0 = MonotonicNs();
  std::unique_ptr<loss_bpf, SkelDeleter> obj(loss_bpf__open());
  if (!obj) return Status::FromErrno(errno, std::string("open BPF object for ") + name);
  LOSSD_RETURN_IF_ERROR(ReuseMapsLoadOnly(obj->obj, skel_->obj, name));
  int err = loss_bpf__load(obj.get());
  if (err)  // not the request's fault, whatever errno the kernel chose
    return Internal(std::string("lossd could not load its ") + LossHookName(hook) +
                    " program: " + strerror(-err) + " (the daemon's log has libbpf's account)");
  ProgLoadStats ps;
  ps.name = name;
  ps.load_ns = MonotonicNs() - t0;
  int fd = bpf_program__fd(bpf_object__find_program_by_name(obj->obj, name));
  FillProgInfo(fd, &ps);
  LOG_INFO("loaded the %s program: %u instructions verified in %.0f ms", LossHookName(hook),
           ps.verified_insns, ps.load_ns / 1e6);
  {
    std::lock_guard<std::mutex> lock(prog_mu_);
    progs_[hook] = std::move(obj);
    prog_stats_[hook] = ps;
  }
  prog_fds_[hook] = fd;
  return Status::Ok();
}

Status Injector::LoadAllPrograms() const {
  for (int h = 0; h < LOSS_HOOK_MAX; h++) LOSSD_RETURN_IF_ERROR(LoadProgram(h));
  return Status::Ok();
}

std::vector<ProgLoadStats> Injector::LoadedPrograms() const {
  std::lock_guard<std::mutex> lock(prog_mu_);
  std::vector<ProgLoadStats> out;
  for (int h = 0; h < LOSS_HOOK_MAX; h++)
    if (progs_[h]) out.push_back(prog_stats_[h]);
  return out;
}

// The programs a rule needs, loaded before the rules' lock is taken: the
// verifier takes a while, and the lease must not wait for it.
Status Injector::LoadProgramsFor(const RuleSpec& spec) const {
  for (int kind : HookKinds(ChooseHook(spec), spec.dir)) LOSSD_RETURN_IF_ERROR(LoadProgram(kind));
  return Status::Ok();
}

Status Injector::WriteConfig() {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  uint32_t zero = 0;
  cfg_.n_port_rules = index_.port_rules();
  cfg_.n_dhost_rules = index_.dhost_rules();
  cfg_.n_shost_rules = index_.shost_rules();
  const auto& scan = index_.scan();
  cfg_.n_scan = static_cast<uint32_t>(scan.size());
  for (size_t i = 0; i < LOSS_SCAN_MAX; i++) cfg_.scan[i] = i < scan.size() ? scan[i].slot : 0;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_cfg), &zero, &cfg_, BPF_ANY))
    return Status::FromErrno(errno, "write loss_cfg");
  return Status::Ok();
}

Status Injector::WriteRule(uint32_t slot, const struct loss_rule& r) {
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_rules), &slot, &r, BPF_ANY))
    return Status::FromErrno(errno, "write rule slot " + std::to_string(slot));
  return Status::Ok();
}

Status Injector::ResetCounters(uint32_t slot) {
  std::vector<struct loss_rule_stats> zero(ncpus_);
  std::memset(zero.data(), 0, zero.size() * sizeof(zero[0]));
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_rule_stats), &slot, zero.data(), BPF_ANY))
    return Status::FromErrno(errno, "reset counters of slot " + std::to_string(slot));
  return Status::Ok();
}

// Counts one more (or one fewer) host anchored on addr's pre-filter bit and
// writes the word when the bit changes.
Status Injector::BloomRef(uint32_t kind, const uint32_t* addr, int delta) {
  uint32_t bit = loss_addr_hash(addr) & (LOSS_BLOOM_BITS - 1);
  uint32_t ref = kind * LOSS_BLOOM_BITS + bit;
  auto it = bloom_refs_.find(ref);
  const uint32_t before = it == bloom_refs_.end() ? 0 : it->second;
  const uint32_t n = delta > 0 ? before + 1 : (before ? before - 1 : 0);
  // The count by value: erasing the entry must not leave a reference to it.
  if (n == 0) {
    if (it != bloom_refs_.end()) bloom_refs_.erase(it);
  } else {
    bloom_refs_[ref] = n;
  }
  if ((before == 0) == (n == 0)) return Status::Ok();
  uint32_t word = kind * LOSS_BLOOM_WORDS + bit / 64;
  if (n)
    bloom_words_[word] |= 1ULL << (bit % 64);
  else
    bloom_words_[word] &= ~(1ULL << (bit % 64));
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_host_bloom), &word, &bloom_words_[word],
                          BPF_ANY))
    return Status::FromErrno(errno, "write host pre-filter");
  return Status::Ok();
}

// Writes the candidate lists of `keys`, then the config (its counts tell the
// data plane which indexes to consult; it holds the scan list).
Status Injector::WriteLists(const std::vector<AnchorKey>& keys) {
  for (const auto& k : keys) {
    const auto& list = index_.List(k);
    struct loss_bucket b;
    std::memset(&b, 0, sizeof(b));
    b.n = static_cast<uint32_t>(std::min<size_t>(list.size(), LOSS_BUCKET_SLOTS));
    for (uint32_t i = 0; i < b.n; i++) b.slot[i] = list[i].slot;
    switch (k.kind) {
      case AnchorKey::kDport:
      case AnchorKey::kSport: {
        uint32_t key = uint32_t(k.kind) * 65536 + k.port;
        if (bpf_map_update_elem(bpf_map__fd(skel_->maps.loss_port_idx), &key, &b, BPF_ANY))
          return Status::FromErrno(errno, "write port index");
        break;
      }
      case AnchorKey::kDhost:
      case AnchorKey::kShost: {
        struct loss_host_key hk;
        std::memset(&hk, 0, sizeof(hk));
        hk.kind = k.kind == AnchorKey::kDhost ? LOSS_ANCHOR_DHOST : LOSS_ANCHOR_SHOST;
        hk.family = static_cast<uint32_t>(k.family);
        std::memcpy(hk.addr, k.addr.data(), 16);
        int fd = bpf_map__fd(skel_->maps.loss_host_idx);
        bool present = b.n > 0, was = hosts_present_.count(k) > 0;
        if (present && !was) {
          // Publish the bucket, then open the pre-filter for it.
          if (bpf_map_update_elem(fd, &hk, &b, BPF_ANY))
            return Status::FromErrno(errno, "write host index");
          hosts_present_.insert(k);
          LOSSD_RETURN_IF_ERROR(BloomRef(hk.kind, hk.addr, +1));
        } else if (!present && was) {
          hosts_present_.erase(k);
          LOSSD_RETURN_IF_ERROR(BloomRef(hk.kind, hk.addr, -1));
          if (bpf_map_delete_elem(fd, &hk) && errno != ENOENT)
            return Status::FromErrno(errno, "delete host index entry");
        } else if (present && bpf_map_update_elem(fd, &hk, &b, BPF_ANY)) {
          return Status::FromErrno(errno, "write host index");
        }
        break;
      }
      case AnchorKey::kScan: break;
    }
  }
  return WriteConfig();
}

Status Injector::Acquire(const AttachKey& key, const RuleSpec& spec, const Target& target) {
  auto it = attached_.find(key);
  if (it != attached_.end()) {
    it->second.refs++;
    return Status::Ok();
  }
  Result<std::unique_ptr<Attachment>> a = Status();
  int fd = prog_fds_[key.kind];  // loaded before mu_ was taken (LoadProgramsFor)
  if (fd < 0)
    return Internal(std::string("the ") + LossHookName(key.kind) + " program is not loaded");
  const int ifindex = target.ifindex;
  const std::string& cgroup = target.cgroup.path;
  switch (key.kind) {
    case LOSS_HOOK_XDP: a = AttachXdp(fd, ifindex, spec.iface, opts_.xdp_mode); break;
    case LOSS_HOOK_TC_INGRESS: a = AttachTcxIngress(fd, ifindex, spec.iface); break;
    case LOSS_HOOK_TC_EGRESS: a = AttachClsactEgress(fd, ifindex, spec.iface, &qdiscs_); break;
    case LOSS_HOOK_CGROUP_INGRESS:
    case LOSS_HOOK_CGROUP_EGRESS:
      a = AttachCgroup(fd, cgroup, key.kind == LOSS_HOOK_CGROUP_EGRESS,
                       bpf_map__fd(skel_->maps.loss_cg_self));
      break;
    default: return Internal("unknown hook");
  }
  if (!a.ok()) return a.status();
  LOG_INFO("attached %s", (*a)->Describe().c_str());
  attached_[key] = Attached{std::move(*a), 1};
  return Status::Ok();
}

void Injector::Release(const AttachKey& key) {
  auto it = attached_.find(key);
  if (it == attached_.end()) return;
  if (--it->second.refs > 0) return;
  LOG_INFO("detaching %s", it->second.attachment->Describe().c_str());
  attached_.erase(it);
}

void Injector::ReleaseOffload(const std::string& ifname) {
  auto it = offloads_.find(ifname);
  if (it == offloads_.end()) return;
  if (--it->second.refs > 0) return;
  offloads_.erase(it);  // the guard restores the interface
}

Status Injector::Check(const RuleSpec& spec, Target* target) const {
  LOSSD_RETURN_IF_ERROR(Validate(spec));
  const RuleLimits& l = opts_.limits;
  if (l.max_ttl_ns) {
    uint64_t ttl = static_cast<uint64_t>(spec.ttl.count());
    if (ttl == 0 || ttl > l.max_ttl_ns)
      return InvalidArgument("ttl_ns: this daemon allows rules of at most " +
                             std::to_string(l.max_ttl_ns / 1000000000ull) +
                             " s (--max-ttl); give a ttl within it");
  }
  // The target, once, before any program loads for it (a mistyped interface
  // is NOT_FOUND without a verifier run).
  if (!spec.iface.empty()) {
    auto idx = IfIndex(spec.iface);
    if (!idx.ok()) return idx.status();
    target->ifindex = *idx;
  }
  if (NamesCgroup(spec)) {
    std::string path = spec.cgroup;
    if (spec.service.Any()) {  // a service: its cgroup (host/targets.cc)
      std::string mount = Cgroup2Mount();
      if (mount.empty())
        return FailedPrecondition(
            spec.service.Describe() +
            ": no cgroup v2 hierarchy is mounted, so no service can be found");
      auto p = ResolveServiceCgroup(spec.service, mount);
      if (!p.ok()) return p.status();
      path = *p;
    }
    auto cg = ResolveCgroup(path);
    if (!cg.ok()) {
      if (!spec.service.Any()) return cg.status();
      return Status(cg.status().code(), spec.service.Describe() + ": " + cg.status().message());
    }
    target->cgroup = *cg;
  }
  return guard_.Check(spec, target->cgroup.path, target->cgroup.mount);
}

Result<uint32_t> Injector::Add(const RuleSpec& spec) {
  Target target;
  LOSSD_RETURN_IF_ERROR(Check(spec, &target));
  LOSSD_RETURN_IF_ERROR(LoadProgramsFor(spec));
  std::lock_guard<std::mutex> lock(mu_);
  if (LiveLocked() >= opts_.limits.max_rules)
    return ResourceExhausted("rule limit reached (" + std::to_string(opts_.limits.max_rules) +
                             " rules, --max-rules): delete rules first");
  auto id = AddLocked(spec, target);
  if (!id.ok()) return id;
  Rule& r = rules_[*id];
  r.info.created_unix_ns = UnixNs();
  if (spec.ttl.count() > 0)
    r.info.expires_unix_ns = r.info.created_unix_ns + uint64_t(spec.ttl.count());
  if (listener_) listener_->RulePublished(*id, r.info.spec);
  return id;
}

// Attaches and publishes; the caller holds mu_ and has checked (and
// resolved the target).
Result<uint32_t> Injector::AddLocked(const RuleSpec& spec, const Target& target,
                                     uint64_t expires_ns, uint32_t final_id) {
  const int ifindex = target.ifindex;
  const CgroupInfo& cg = target.cgroup;
  bool ingress = spec.dir != Direction::kEgress;
  Hook hook = ChooseHook(spec);
  if (spec.per_segment && ingress && DriverName(spec.iface) == "veth")
    return FailedPrecondition(
        "per-segment loss at a veth's ingress cannot be had there: the sending side builds the "
        "multi-segment packets. Put the rule on the sender's interface with direction egress, "
        "or set `ip link set <peer> gso_max_segs 1` on the peer");
  if (hook == Hook::kTc && NamesCgroup(spec) && ingress)
    return InvalidArgument(
        "a cgroup match at tc ingress never matches (no socket yet): use hook cgroup, or "
        "direction egress");

  std::vector<AttachKey> keys;
  uint8_t mask = 0;
  auto want = [&](int kind, uint64_t target) {
    keys.push_back(AttachKey{kind, target});
    mask |= uint8_t(1u << kind);
  };
  for (int kind : HookKinds(hook, spec.dir))
    want(kind, hook == Hook::kCgroup ? cg.id : uint64_t(ifindex));

  if (free_slots_.empty())
    return ResourceExhausted("all " + std::to_string(LOSS_MAX_RULES) + " rule slots are in use");
  uint32_t slot = free_slots_.back();

  // Attach (shared, reference-counted), then change offloads, then publish.
  size_t acquired = 0;
  Status st;
  for (; acquired < keys.size(); acquired++) {
    st = Acquire(keys[acquired], spec, target);
    if (!st.ok()) break;
  }
  auto undo_attach = [&] {
    for (size_t i = 0; i < acquired; i++) Release(keys[i]);
  };
  if (!st.ok()) {
    undo_attach();
    return st;
  }
  if (spec.per_segment) {
    auto& off = offloads_[spec.iface];
    if (!off.guard) {
      auto g = OffloadGuard::Disable(spec.iface,
                                     opts_.state_dir.empty() ? "" : opts_.state_dir + "/offloads");
      if (!g.ok()) {
        offloads_.erase(spec.iface);
        undo_attach();
        return g.status();
      }
      off.guard = std::move(*g);
      LOG_INFO("GRO/GSO/TSO off on %s while per-segment rules use it", spec.iface.c_str());
    }
    off.refs++;
  }
  auto undo = [&] {
    if (spec.per_segment) ReleaseOffload(spec.iface);
    undo_attach();
  };

  uint64_t expires = expires_ns             ? expires_ns
                     : spec.ttl.count() > 0 ? MonotonicNs() + uint64_t(spec.ttl.count())
                                            : 0;
  uint32_t gen = ++generation_[slot];
  struct loss_rule enc =
      Encode(spec, static_cast<uint32_t>(ifindex), cg.id, cg.level, expires, gen);
  enc.m.hook_mask = mask;
  enc.id = final_id ? final_id : next_id_;  // what the drop log records
  st = ResetCounters(slot);
  if (st.ok()) st = WriteRule(slot, enc);
  if (!st.ok()) {
    undo();
    return st;
  }
  auto placed = index_.Insert(slot, spec);
  if (!placed.ok()) {
    enc.flags = 0;
    WriteRule(slot, enc);
    undo();
    return placed.status();
  }
  st = WriteLists(*placed);
  if (!st.ok()) {
    WriteLists(index_.Remove(slot));
    enc.flags = 0;
    WriteRule(slot, enc);
    undo();
    return st;
  }

  free_slots_.pop_back();
  Rule rule;
  rule.info.id = next_id_++;
  rule.info.spec = spec;
  rule.info.spec.hook = hook;
  if (NamesCgroup(spec)) {
    rule.info.cgroup = cg.path;
    rule.info.cgroup_mount = cg.mount;
    rule.info.cgroup_id = cg.id;
  }
  for (const auto& k : keys) rule.info.hooks.push_back(attached_[k].attachment->Describe());
  rule.slot = slot;
  rule.attach = keys;
  rule.target = target;
  rule.offload_iface = spec.per_segment ? spec.iface : "";
  rule.expires_ns = expires;
  rule.live = true;
  uint32_t id = rule.info.id;
  rules_[id] = std::move(rule);
  return id;
}

// Takes a live rule out of the kernel: unpublish, deactivate, detach what
// nothing else uses, restore offloads; then reads its final counters (no
// packet can reach it any more) and frees its slot.
Status Injector::Retire(Rule& r) {
  Status st = WriteLists(index_.Remove(r.slot));
  struct loss_rule off;
  std::memset(&off, 0, sizeof(off));
  off.generation = generation_[r.slot];
  Status st2 = WriteRule(r.slot, off);
  for (const auto& k : r.attach) Release(k);
  if (!r.offload_iface.empty()) ReleaseOffload(r.offload_iface);
  auto c = ReadCounters(r.slot);
  if (c.ok()) r.info.counters = Sum(r.before, *c);
  free_slots_.push_back(r.slot);
  r.live = false;
  if (!st.ok()) return st;
  if (!st2.ok()) return st2;
  return c.ok() ? Status::Ok() : c.status();
}

Result<RuleInfo> Injector::RemoveLocked(uint32_t id) {
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  Rule& r = it->second;
  Status st = r.live ? Retire(r) : Status::Ok();
  RuleInfo info = r.info;
  if (r.retired_ns) expired_.erase(std::find(expired_.begin(), expired_.end(), id));
  rules_.erase(it);
  if (listener_) listener_->RuleForgotten(id);
  if (!st.ok()) return st;
  return info;
}

Status Injector::Replace(uint32_t id, const RuleSpec& spec) {
  Target target;
  LOSSD_RETURN_IF_ERROR(Check(spec, &target));
  LOSSD_RETURN_IF_ERROR(LoadProgramsFor(spec));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  // Replacing an expired rule makes it live again: a new rule as far as the limit goes.
  if (it->second.retired_ns && LiveLocked() >= opts_.limits.max_rules)
    return ResourceExhausted("rule limit reached (" + std::to_string(opts_.limits.max_rules) +
                             " rules, --max-rules): delete rules first");
  auto nid = AddLocked(spec, target, 0, id);
  if (!nid.ok()) return nid.status();
  Rule& old = rules_.find(id)->second;
  Status st = old.live ? Retire(old) : Status::Ok();
  if (old.retired_ns) expired_.erase(std::find(expired_.begin(), expired_.end(), id));
  MoveRuleLocked(*nid, id);
  RuleInfo& info = rules_[id].info;
  info.expires_unix_ns = spec.ttl.count() > 0 ? UnixNs() + uint64_t(spec.ttl.count()) : 0;
  if (listener_) listener_->RulePublished(id, info.spec);
  return st;
}

Result<RuleInfo> Injector::Remove(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return RemoveLocked(id);
}

uint32_t Injector::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> ids;
  for (const auto& [id, r] : rules_) ids.push_back(id);
  uint32_t n = 0;
  for (uint32_t id : ids)
    if (RemoveLocked(id).ok()) n++;
  return n;
}

size_t Injector::LiveCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LiveLocked();
}

RuleInfo Injector::Snapshot(const Rule& r) const {
  RuleInfo info = r.info;
  if (r.live) {
    auto c = ReadCounters(r.slot);
    if (c.ok()) info.counters = Sum(r.before, *c);
    // Never ACTIVE while its cgroup is not the one it is attached to (deleted,
    // or recreated and not yet re-attached by the watch thread's next check).
    if (!r.target.cgroup.path.empty()) {
      uint64_t now_id = CgroupIdAt(r.target.cgroup.path);
      std::string was =
          "cgroup " + r.target.cgroup.path + " (id " + std::to_string(r.target.cgroup.id) + ")";
      if (now_id == 0)
        info.failed = was + " was deleted: the rule applies again when it is recreated";
      else if (now_id != r.target.cgroup.id)
        info.failed = was + " was recreated (id " + std::to_string(now_id) + "): re-attaching";
      if (!info.failed.empty()) info.hooks.clear();  // attached to a cgroup that is gone
    }
  }
  return info;
}

void Injector::MoveRuleLocked(uint32_t fresh, uint32_t id) {
  auto f = rules_.find(fresh);
  Rule& old = rules_[id];
  uint64_t created = old.info.created_unix_ns;
  old = std::move(f->second);
  rules_.erase(f);
  old.info.id = id;
  old.info.created_unix_ns = created;
}

// Takes the rule out of the kernel (what is left of it) and keeps it, FAILED
// with the reason: in the history, or waiting for its interface (reattach).
void Injector::FailLocked(uint32_t id, Rule& r, const std::string& reason) {
  LOG_WARN("rule %u failed: %s", id, reason.c_str());
  Status st = Retire(r);
  if (!st.ok()) LOG_WARN("rule %u: take it out of the maps: %s", id, st.message().c_str());
  r.before = r.info.counters;
  r.info.failed = reason;
  r.info.hooks.clear();
  // It waits for its target (a cgroup rule always, an interface rule with
  // reattach), or joins the history of retired rules.
  if (r.info.spec.hook != Hook::kCgroup && !r.info.spec.reattach) {
    r.retired_ns = MonotonicNs();
    expired_.push_back(id);
  }
  if (listener_) listener_->RuleRetired(id);
}

void Injector::CheckAttachments() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<AttachKey> dead;
  for (const auto& [key, a] : attached_)
    if (!a.attachment->Attached()) dead.insert(key);
  for (auto& [id, r] : rules_) {
    if (!r.live) continue;
    for (const AttachKey& k : r.attach) {
      if (!dead.count(k)) continue;
      std::string what = attached_[k].attachment->Describe();
      std::string reason;
      if (k.kind == LOSS_HOOK_CGROUP_INGRESS || k.kind == LOSS_HOOK_CGROUP_EGRESS) {
        reason = "cgroup " + r.target.cgroup.path + " (id " + std::to_string(r.target.cgroup.id) +
                 ") was deleted (" + what + " is gone)";
      } else {
        auto now = IfIndex(r.info.spec.iface);
        reason = now.ok() && *now == r.target.ifindex
                     ? what + " was detached by something other than lossd"
                     : "interface '" + r.info.spec.iface + "' (ifindex " +
                           std::to_string(r.target.ifindex) + ") was deleted";
      }
      if (r.info.spec.hook == Hook::kCgroup)
        reason += "; the rule applies again when it is recreated";
      else if (r.info.spec.reattach)
        reason += "; waiting for an interface of that name to re-attach";
      FailLocked(id, r, reason);
      break;
    }
  }
  // Failed rules waiting for their target re-attach when it is back: a
  // cgroup rule to a cgroup recreated at its path (a new id: the service
  // restarted), an interface rule that asked for it to an interface of its
  // name (a new ifindex).
  std::vector<uint32_t> waiting;
  for (const auto& [id, r] : rules_)
    if (!r.live && !r.info.expired && r.retired_ns == 0) waiting.push_back(id);
  for (uint32_t id : waiting) {
    Rule& r = rules_[id];
    Target t = r.target;
    std::string where;
    if (r.info.spec.hook == Hook::kCgroup) {
      auto cg = ResolveCgroup(r.target.cgroup.path);
      if (!cg.ok() || cg->id == r.target.cgroup.id) continue;
      t.cgroup = *cg;
      where = "cgroup " + cg->path + " was recreated (id " + std::to_string(r.target.cgroup.id) +
              " -> " + std::to_string(cg->id) + ")";
    } else {
      auto idx = IfIndex(r.info.spec.iface);
      if (!idx.ok() || *idx == r.target.ifindex) continue;
      t.ifindex = *idx;
      where = "interface '" + r.info.spec.iface + "' was recreated (ifindex " +
              std::to_string(r.target.ifindex) + " -> " + std::to_string(*idx) + ")";
    }
    auto fresh = AddLocked(r.info.spec, t, r.expires_ns, id);
    if (!fresh.ok()) {
      std::string reason =
          where + ", but re-attaching failed (retried): " + fresh.status().message();
      if (reason != r.info.failed) LOG_WARN("rule %u: %s", id, reason.c_str());
      r.info.failed = reason;
      continue;
    }
    RuleCounters before = r.before;
    uint64_t expires_unix = r.info.expires_unix_ns;
    MoveRuleLocked(*fresh, id);
    Rule& now = rules_[id];
    now.before = before;
    now.info.expires_unix_ns = expires_unix;
    now.info.note = where + ": re-attached";
    LOG_INFO("rule %u %s", id, now.info.note.c_str());
    if (listener_) listener_->RulePublished(id, now.info.spec);
  }
}

std::vector<RuleInfo> Injector::Rules() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RuleInfo> out;
  out.reserve(rules_.size());
  for (const auto& [id, r] : rules_) out.push_back(Snapshot(r));
  return out;
}

Result<RuleInfo> Injector::Get(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  return Snapshot(it->second);
}

Result<RuleCounters> Injector::ReadCounters(uint32_t slot) const {
  RuleCounters c;
  Status st =
      AddPerCpu<loss_rule_stats>(bpf_map__fd(skel_->maps.loss_rule_stats), slot, ncpus_, &c);
  if (!st.ok())
    return Status(st.code(), "counters of slot " + std::to_string(slot) + ": " + st.message());
  return c;
}

Result<RuleCounters> Injector::Counters(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  if (!it->second.live) return it->second.info.counters;
  auto c = ReadCounters(it->second.slot);
  if (!c.ok()) return c;
  return Sum(it->second.before, *c);
}

HookCounters Injector::HookTotals(int hook) const {
  HookCounters c;
  if (hook < 0 || hook >= LOSS_HOOK_MAX) return c;
  AddPerCpu<loss_hook_stats>(bpf_map__fd(skel_->maps.loss_hook_stats), static_cast<uint32_t>(hook),
                             ncpus_, &c);
  return c;
}

loss_drop_key DropKey(int family, const uint32_t src[4], uint16_t sport, const uint32_t dst[4],
                      uint16_t dport) {
  loss_drop_key k;
  std::memset(&k, 0, sizeof(k));
  std::memcpy(k.saddr, src, sizeof(k.saddr));
  std::memcpy(k.daddr, dst, sizeof(k.daddr));
  k.sport = sport;
  k.dport = dport;
  k.family = static_cast<uint16_t>(family);
  return k;
}

Result<FlowDrops> Injector::DropsOf(const loss_drop_key& key) const {
  loss_drop_log log;
  FlowDrops out;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.loss_drops), &key, &log)) {
    if (errno == ENOENT) return out;
    return Status::FromErrno(errno, "read the drop log");
  }
  out.total = log.drops;
  uint64_t kept = std::min<uint64_t>(log.drops, LOSS_DROP_RANGES);
  out.ranges.reserve(kept);
  for (uint64_t i = log.drops - kept; i < log.drops; i++)
    out.ranges.push_back(log.ranges[i % LOSS_DROP_RANGES]);
  return out;
}

Capabilities Injector::Probe() const {
  Capabilities c;
  struct utsname u;
  if (uname(&u) == 0) c.kernel = u.release;
  struct stat st;
  c.btf = stat("/sys/kernel/btf/vmlinux", &st) == 0;
  c.xdp = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_XDP, nullptr) == 1;
  c.tc = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SCHED_CLS, nullptr) == 1;
  c.cgroup_skb = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SKB, nullptr) == 1;
  c.cgroup2 = Cgroup2Mount();
  if (c.cgroup2.empty()) c.notes.push_back("no cgroup v2 mount: cgroup targets unavailable");

  // tcx and clsact: attach pass-only programs to loopback and detach again. Loopback is ifindex 1
  // in every network namespace.
  const int lo = 1;
  std::lock_guard<std::mutex> lock(mu_);
  if (!attached_.empty()) {
    c.notes.push_back("tcx/clsact not probed: attachments in use");
    return c;
  }
  // Pass-only programs, not the injector's (which load on first use). A
  // clsact probe filter left behind by a crash is removed by the next start
  // (RemoveStaleClsactFilters); a live lossd's rule on lo never is.
  UniqueFd pass_in = PassProgram(BPF_PROG_TYPE_SCHED_CLS, kProbeProgName, -1 /* TCX_NEXT */);
  UniqueFd pass_out = PassProgram(BPF_PROG_TYPE_SCHED_CLS, kProbeProgName, 0 /* TC_ACT_OK */);
  if (!pass_in.valid() || !pass_out.valid()) {
    c.notes.push_back(std::string("tcx/clsact not probed: load a probe program: ") +
                      strerror(errno));
    return c;
  }
  {
    auto a = AttachTcxIngress(pass_in.get(), lo, "lo");
    c.tcx = a.ok();
    if (!a.ok()) c.notes.push_back("tcx: " + a.status().message());
  }
  {
    auto a = AttachClsactEgress(pass_out.get(), lo, "lo", &qdiscs_);
    c.clsact = a.ok();
    if (!a.ok()) c.notes.push_back("clsact: " + a.status().message());
  }
  return c;
}

}  // namespace lossd
