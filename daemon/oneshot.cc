#include "oneshot.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "host/state_dir.h"
#include "rules/proto.h"
#include "service/convert.h"

namespace lossd {
namespace {

double Elapsed() {
  return MonotonicNs() / 1e9;
}  // for --duration: no clock steps

// After a signal, stdout gets every line still to print as long as its
// reader takes them; a reader that takes nothing for kExitStallNs (stopped,
// or gone without closing) is given up on, once for the queued events and
// once for the final report, so such a reader holds lossd at most twice that.
// A second signal gives up at once. What was not written is counted on stderr.
constexpr uint64_t kExitStallNs = 1'500'000'000;

// stdout, line by line, from the printer and the main thread: write(2) only
// after poll says the fd takes it, in chunks a pipe takes whole (PIPE_BUF),
// so that no write blocks for longer than a poll.
class Stdout {
 public:
  // From now on, give up on a reader that takes nothing for stall_ns.
  void Exiting(uint64_t stall_ns) {
    stall_ns_ = stall_ns;
    progress_ns_ = MonotonicNs();
    abandoned_ = false;
  }
  // For good (a second signal): no Exiting() takes it back.
  void Abandon() { forced_ = abandoned_ = true; }
  // False if the line was not (wholly) written: given up on, or a reader gone.
  bool Line(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) return Unwritten();
    std::string buf = text + "\n";
    size_t off = 0;
    while (off < buf.size()) {
      if (abandoned_ || forced_) return Unwritten();
      if (uint64_t stall = stall_ns_; stall && MonotonicNs() - progress_ns_ > stall) {
        abandoned_ = true;
        return Unwritten();
      }
      struct pollfd p = {STDOUT_FILENO, POLLOUT, 0};
      int r = poll(&p, 1, 100);  // Exiting() and Abandon() are seen within this
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return Broken();
      if (r == 0) continue;
      ssize_t n =
          write(STDOUT_FILENO, buf.data() + off, std::min<size_t>(buf.size() - off, PIPE_BUF));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return Broken();
      off += static_cast<size_t>(n);
      progress_ns_ = MonotonicNs();
    }
    return true;
  }
  // Whoever read stdout is gone (`| head` exited, the terminal closed): a
  // write failed (SIGPIPE is ignored), or the pipe or tty reports an error or
  // hang-up. Takes no lock: a writer may wait in Line().
  bool Gone() const {
    struct pollfd p = {STDOUT_FILENO, 0, 0};
    return broken_ || (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)));
  }
  uint64_t unwritten() const { return unwritten_; }

 private:
  bool Unwritten() {
    unwritten_++;
    return false;
  }
  bool Broken() {
    broken_ = true;
    return Unwritten();
  }
  std::mutex mu_;                         // one line at a time (held while a line waits for the fd)
  std::atomic<uint64_t> stall_ns_{0};     // 0: wait for the reader for ever (until exiting)
  std::atomic<uint64_t> progress_ns_{0};  // the last write that took bytes
  std::atomic<bool> abandoned_{false};    // this window's reader is given up on
  std::atomic<bool> forced_{false};       // every window's
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> unwritten_{0};
};

Stdout g_out;

void Print(const Json& j) {
  g_out.Line(JsonLine(j));
}

// --json: one object per line, "event" first naming what it is; what the API
// has is in the API's JSON (rules/proto.h ToJson: the names and enum
// spellings of lossctl -o json); the one-shot's own diagnostics (hooks,
// observer, subscriber) are plain numbers. docs/observer.md#one-shot-json.

// {"event": kind, ...the fields of m}.
std::string Tagged(const char* kind, const google::protobuf::Message& m) {
  std::string body = ToJson(m);
  std::string line = std::string("{\"event\":\"") + kind + "\"";
  if (body.size() > 2 && body.front() == '{') return line + "," + body.substr(1);
  return line + "}";
}

// SIGINT, SIGTERM and SIGHUP, taken by a thread of their own from the start,
// so that one during a load cancels it (the observer's load checks the flag
// between programs) and one at any other time ends the wait at once.
class Signals {
 public:
  // Blocks the signals in the calling thread (and the threads it starts).
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] { Watch(); });
  }
  ~Signals() {
    done_ = true;
    thread_.join();
  }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

  const std::atomic<bool>* flag() const { return &stop_; }
  bool stopped() const { return stop_; }
  // Sleeps `ns`; false if a signal came (before or during it).
  bool Sleep(uint64_t ns) {
    std::unique_lock<std::mutex> lock(mu_);
    return !cv_.wait_for(lock, std::chrono::nanoseconds(ns), [this] { return stop_.load(); });
  }

 private:
  void Watch() {
    struct timespec ts = {0, 100 * 1000 * 1000};
    while (!done_) {
      int sig = sigtimedwait(&set_, nullptr, &ts);
      if (sig <= 0) continue;
      if (stop_) {  // a second one: stop waiting for stdout's reader
        LOG_INFO("signal %d again: not waiting for stdout", sig);
        g_out.Abandon();
        continue;
      }
      LOG_INFO("signal %d: detaching", sig);
      g_out.Exiting(kExitStallNs);  // a report blocked on stdout now gives up in time
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
    }
  }
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A counters report: a RuleCountersUpdate (its rule as GetRule has it, or
// for "final" as Remove() returned it) and the hooks' totals.
void Report(const Injector& inj, uint32_t id, bool json, bool final,
            const RuleInfo* removed = nullptr) {
  static uint64_t seq = 0;  // the main thread's
  Result<RuleInfo> r = removed ? Result<RuleInfo>(*removed) : inj.Get(id);
  if (json) {
    v1::RuleCountersUpdate u;
    u.set_seq(++seq);
    u.set_time_unix_ns(UnixNs());
    if (r.ok()) RuleToProto(*r, u.add_rules());
    Json j = {{"event", final ? "final" : "counters"}};
    Json update = JsonOf(u);
    for (auto& [k, v] : update.items()) j[k] = v;
    if (!r.ok()) {
      j["rule_id"] = id;
      j["error"] = r.status().message();
    }
    Json hooks = Json::object();
    for (int i = 0; i < LOSS_HOOK_MAX; i++) {
      HookCounters h = inj.HookTotals(i);
      hooks[LossHookName(i)] = {{"seen", h.seen},
                                {"passed", h.passed},
                                {"dropped", h.dropped},
                                {"unparsable", h.unparsable},
                                {"always_pass", h.always_pass},
                                {"lease_expired", h.lease_expired},
                                {"copies", h.copies}};
    }
    j["hooks"] = std::move(hooks);
    Print(j);
  } else if (r.ok()) {
    const RuleCounters& c = r->counters;
    double rate = c.matched_segs ? 100.0 * c.dropped_segs / c.matched_segs : 0;
    char line[256];
    snprintf(line, sizeof(line),
             "rule %u: matched %llu pkts / %llu segs, dropped %llu pkts / %llu segs (%.4f%% of "
             "segments)",
             id, c.matched_pkts, c.matched_segs, c.dropped_pkts, c.dropped_segs, rate);
    std::string text = line;
    Action action = r->spec.action;
    if (action != Action::kDrop) {
      snprintf(line, sizeof(line), ", %s %llu pkts / %llu segs, %llu passed unchanged",
               ActedName(action), static_cast<unsigned long long>(c.acted_pkts),
               static_cast<unsigned long long>(c.acted_segs),
               static_cast<unsigned long long>(c.unacted_pkts));
      text += line;
    }
    g_out.Line(text);
  } else {
    g_out.Line("rule " + std::to_string(id) + ": " + r.status().message());
  }
}

// The observer's totals: lossd's own namespace's as the API's NetnsTotals,
// with the observer's own counters and hooks.
Json TotalsJson(const Observer& obs) {
  ObsTotals t = obs.Totals();
  NetnsTotals own;
  own.ino = obs.own_netns();
  own.own = true;
  own.by_type = t.by_type;
  v1::NetnsTotals nt;
  NetnsTotalsToProto(own, &nt);
  Json hooks = Json::array();
  for (const auto& h : obs.hooks()) {
    v1::HookAvailability a;
    a.set_name(h.name);
    a.set_available(h.attached);
    a.set_reason(h.error);
    hooks.push_back(JsonOf(a));
  }
  return {{"event", "observer_totals"},
          {"totals", JsonOf(nt)},
          {"observer",
           {{"ring_lost", t.counters[OBS_CNT_RING_LOST]},
            {"filtered", t.counters[OBS_CNT_FILTERED]},
            {"flows_opened", t.counters[OBS_CNT_FLOWS_OPENED]},
            {"flows_closed", t.counters[OBS_CNT_FLOWS_CLOSED]},
            {"ring_consumed", t.ring_consumed},
            {"hub_published", t.hub_published},
            {"recursion_misses", t.recursion_misses},
            {"flow_table_full", t.counters[OBS_CNT_FLOW_TABLE_FULL]},
            {"arm_failed", t.counters[OBS_CNT_ARM_FAILED]},
            {"armed_existing", t.counters[OBS_CNT_ARMED_EXISTING]},
            {"stalls", t.counters[OBS_CNT_STALLS]},
            {"samples", t.counters[OBS_CNT_SAMPLES]},
            {"dsacks", t.counters[OBS_CNT_DSACKS]}}},
          {"hooks", std::move(hooks)}};
}

Json NetnsTotalsJson(const NetnsTotals& n) {
  v1::NetnsTotals nt;
  NetnsTotalsToProto(n, &nt);
  return {{"event", "netns_totals"}, {"totals", JsonOf(nt)}};
}

// The observer with, for --events, the thread printing its events.
class ObserverRun {
 public:
  static Result<std::unique_ptr<ObserverRun>> Start(const OneShotOptions& o, const Injector* inj,
                                                    const std::atomic<bool>* cancel) {
    ObserverOptions oo;
    oo.filters = o.filters;
    oo.netns = o.netns;
    if (inj) {  // a guarded rule is stopped by the observer's program
      oo.shared_drops_fd = inj->SharedDropsFd();
      oo.shared_guards_fd = inj->SharedGuardsFd();
      oo.shared_watch_fd = inj->SharedWatchFd();
    }
    auto obs = Observer::Create(oo, cancel);
    if (!obs.ok()) return obs.status();
    std::unique_ptr<ObserverRun> run(new ObserverRun(std::move(*obs)));
    for (const auto& h : run->obs_->hooks())
      if (!h.attached) LOG_WARN("observer: %s not attached: %s", h.name.c_str(), h.error.c_str());
    if (o.events) {
      // The kinds it prints (a D-SACK is counted in the totals, not printed).
      SubscribeOptions so;
      so.queue = 1 << 16;
      so.kinds = KindBit(OBS_EV_RETRANSMIT) | KindBit(OBS_EV_STALL) | KindBit(OBS_EV_FLOW_CLOSE) |
                 KindBit(OBS_EV_SAMPLE);
      auto sub = run->obs_->hub().Subscribe(std::move(so));
      if (!sub.ok()) return sub.status();
      run->sub_ = std::move(*sub);
      run->printer_ = std::thread([r = run.get()] { r->PrintEvents(); });
    }
    return run;
  }
  ~ObserverRun() { StopPrinter(); }

  // At exit: the reader stops, every event read is printed (unless stdout
  // stalls: kExitStallNs), then the totals, the subscriber's delivered/lost
  // counts (and how many delivered events were not printed) and every flow.
  void Finish() {
    obs_->StopAndDrain();
    g_out.Exiting(kExitStallNs);
    StopPrinter();
    g_out.Exiting(kExitStallNs);
    PrintGap();  // what the subscriber lost after the last event printed
    Print(TotalsJson(*obs_));
    // Watching more than its own namespace: each one's totals (observer_totals
    // are lossd's own namespace's).
    if (obs_->netns_watch().mode != NetnsWatch::Mode::kOwn) {
      NetnsTotals other;
      for (const NetnsTotals& n : obs_->TotalsByNetns(0, &other)) Print(NetnsTotalsJson(n));
      Print(NetnsTotalsJson(other));
    }
    if (sub_)
      Print({{"event", "subscriber"},
             {"delivered", sub_->delivered()},
             {"lost", sub_->lost()},
             {"unprinted", unprinted_.load()}});
    for (const auto& fl : obs_->Flows()) {
      v1::Flow f;
      FlowToProto(fl.cookie, fl.flow, &obs_->owners(), &f);
      Print({{"event", "flow"}, {"flow", JsonOf(f)}});
    }
  }

 private:
  explicit ObserverRun(std::unique_ptr<Observer> obs) : obs_(std::move(obs)) {}

  // --events: each event as a TraceMessage item (its "seq" from 1, no gaps:
  // a Gap item says where the subscriber's queue lost events), "event" naming
  // its oneof field: retransmit, stall, closed (a flow's closing summary), gap.
  void PrintEvents() {
    for (;;) {
      auto e = sub_->Next(std::chrono::milliseconds(100));
      if (e) {
        PrintGap();
        if (!PrintEvent(*e)) unprinted_++;
      } else if (!printing_) {
        break;
      }
    }
  }

  bool PrintEvent(const ObsEvent& e) {
    v1::TraceMessage m;
    const char* kind = nullptr;
    switch (e.data.ev.kind) {
      case OBS_EV_RETRANSMIT:
        EventToProto(e.data.ev, &obs_->owners(), m.mutable_retransmit());
        kind = "retransmit";
        break;
      case OBS_EV_STALL:
        StallToProto(e.As<obs_stall_event>(), &obs_->owners(), m.mutable_stall());
        kind = "stall";
        break;
      case OBS_EV_FLOW_CLOSE:
        FlowToProto(e.data.ev.cookie, e.data.flow, &obs_->owners(), m.mutable_closed(),
                    std::max<uint64_t>(e.data.closed_ns, 1));
        kind = "closed";
        break;
      case OBS_EV_SAMPLE:
        SampleToProto(e.As<obs_sample_event>(), m.mutable_sample());
        kind = "sample";
        break;
      default: return true;  // a kind this build does not print
    }
    m.set_seq(++seq_);
    return g_out.Line(Tagged(kind, m));
  }

  // A Gap item for the events the subscriber lost since the last one.
  void PrintGap() {
    if (!sub_) return;
    uint64_t lost = sub_->lost();
    if (lost == gap_reported_) return;
    v1::TraceMessage m;
    m.set_seq(++seq_);
    m.mutable_gap()->set_source(v1::GAP_SOURCE_SUBSCRIBER);
    m.mutable_gap()->set_count(lost - gap_reported_);
    gap_reported_ = lost;
    if (!g_out.Line(Tagged("gap", m))) unprinted_++;
  }

  void StopPrinter() {
    if (!printer_.joinable()) return;
    printing_ = false;  // the printer empties its queue (or gives up on stdout), then stops
    printer_.join();
    if (unprinted_)
      LOG_WARN("%" PRIu64 " events not printed: stdout was not read in time", unprinted_.load());
  }

  std::unique_ptr<Observer> obs_;
  std::shared_ptr<Subscription> sub_;
  std::thread printer_;
  std::atomic<bool> printing_{true};
  std::atomic<uint64_t> unprinted_{0};
  uint64_t seq_ = 0;            // the printer's (Finish's once it stopped)
  uint64_t gap_reported_ = 0;   // sub_->lost() as of the last Gap item
};

// Sleeps until the next report is due; false at a signal (INT, TERM, HUP),
// when stdout's reader is gone, or at the end of the duration.
bool WaitForReport(Signals& sigs, const OneShotOptions& o, double start) {
  if (g_out.Gone()) {
    LOG_INFO("stdout closed: detaching");
    return false;
  }
  auto wait = o.interval;
  if (o.duration.count() > 0) {
    double left = start + o.duration.count() / 1e9 - Elapsed();
    if (left <= 0) return false;
    if (left < wait.count() / 1e9) wait = std::chrono::nanoseconds(int64_t(left * 1e9));
  }
  return sigs.Sleep(static_cast<uint64_t>(wait.count()));
}

int Failed(const Status& st) {
  fprintf(stderr, "lossd: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int RunOneShot(const OneShotOptions& o) {
  // Signals go to a thread of their own, from before any other thread starts.
  Signals sigs;
  // A closed stdout must not kill the run before it detaches (see Stdout::Gone).
  signal(SIGPIPE, SIG_IGN);

  // The injector only for a rule: --observe alone leaves the data plane, its
  // state dir and a running daemon's offload records alone.
  std::unique_ptr<StateDirLock> state_lock;  // one lossd per state dir (outlives inj)
  std::unique_ptr<Injector> inj;
  if (o.rule && o.rule->guard.InKernel() && !o.observe) {
    fprintf(stderr, "lossd: --guard: it is decided by the TCP observer's program: add --observe\n");
    return 2;
  }
  if (o.rule) {
    auto l = StateDirLock::Acquire(o.injector.state_dir);
    if (!l.ok()) {
      fprintf(stderr, "lossd: %s\n", l.status().message().c_str());
      return 1;
    }
    state_lock = std::move(*l);
    auto r = Injector::Create(o.injector);
    if (!r.ok()) return Failed(r.status());
    inj = std::move(*r);
  }
  std::unique_ptr<ObserverRun> obs;
  if (o.observe && !sigs.stopped()) {
    auto r = ObserverRun::Start(o, inj.get(), sigs.flag());
    if (!r.ok() && !sigs.stopped()) return Failed(r.status());
    if (r.ok()) obs = std::move(*r);
  }
  if (sigs.stopped()) {  // signalled while loading: nothing was attached to report on
    LOG_INFO("stopped before ready");
    return 0;
  }

  uint32_t id = 0;
  if (o.rule) {
    auto r = inj->Add(*o.rule);
    if (!r.ok()) return Failed(r.status());
    id = *r;
    auto info = inj->Get(id);
    if (!info.ok()) return Failed(info.status());
    if (o.json) {
      v1::Rule rule;
      RuleToProto(*info, &rule);
      Print({{"event", "ready"}, {"pid", getpid()}, {"rule", JsonOf(rule)}});
    } else {
      std::string hooks;
      for (const auto& h : info->hooks) hooks += (hooks.empty() ? "" : ", ") + h;
      g_out.Line("rule " + std::to_string(id) + " active: " + hooks);
    }
  } else if (o.json) {  // --observe alone
    Print({{"event", "ready"}, {"pid", getpid()}});
  }

  double start = Elapsed();
  while (WaitForReport(sigs, o, start))
    if (id) Report(*inj, id, o.json, false);
  if (obs) obs->Finish();
  if (id) {
    // Detach first, then report: no drop can happen after the final count.
    auto gone = inj->Remove(id);
    g_out.Exiting(kExitStallNs);
    Report(*inj, id, o.json, true, gone.ok() ? &*gone : nullptr);
  }
  if (g_out.unwritten())
    LOG_WARN("%" PRIu64 " lines not written: stdout was not read in time", g_out.unwritten());
  return 0;  // the injector's destructor detaches everything
}

}  // namespace lossd
