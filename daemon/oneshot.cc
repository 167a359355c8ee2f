#include "oneshot.h"

#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/json.h"
#include "common/log.h"
#include "host/state_dir.h"
#include "observer/format.h"

namespace lossd {
namespace {

double Now() {
  return UnixNs() / 1e9;
}  // for the reports' "time"
double Elapsed() {
  return MonotonicNs() / 1e9;
}  // for --duration: no clock steps

void Print(const Json& j) {
  printf("%s\n", JsonLine(j).c_str());
}

// final_counters: the counters Remove() returned (the rule is gone by then).
void Report(const Injector& inj, uint32_t id, bool json, bool final,
            const RuleCounters* final_counters = nullptr) {
  Result<RuleCounters> c =
      final_counters ? Result<RuleCounters>(*final_counters) : inj.Counters(id);
  if (json) {
    Json hooks = Json::object();
    for (int i = 0; i < LOSS_HOOK_MAX; i++) {
      HookCounters h = inj.HookTotals(i);
      hooks[LossHookName(i)] = {{"seen", h.seen},
                                {"passed", h.passed},
                                {"dropped", h.dropped},
                                {"unparsable", h.unparsable},
                                {"always_pass", h.always_pass},
                                {"lease_expired", h.lease_expired}};
    }
    Json j = {{"event", final ? "final" : "counters"},
              {"time", std::round(Now() * 1000) / 1000},  // ms, as before
              {"rule", id}};
    if (c.ok()) {
      j["matched_pkts"] = c->matched_pkts;
      j["matched_segs"] = c->matched_segs;
      j["matched_bytes"] = c->matched_bytes;
      j["dropped_pkts"] = c->dropped_pkts;
      j["dropped_segs"] = c->dropped_segs;
      j["dropped_bytes"] = c->dropped_bytes;
    } else {
      j["status"] = "gone";
    }
    j["hooks"] = std::move(hooks);
    Print(j);
  } else if (c.ok()) {
    double rate = c->matched_segs ? 100.0 * c->dropped_segs / c->matched_segs : 0;
    printf(
        "rule %u: matched %llu pkts / %llu segs, dropped %llu pkts / %llu segs (%.4f%% of "
        "segments)\n",
        id, c->matched_pkts, c->matched_segs, c->dropped_pkts, c->dropped_segs, rate);
  } else {
    printf("rule %u: %s\n", id, c.status().message().c_str());
  }
  fflush(stdout);
}

// The observer with, for --events, the thread printing its events.
class ObserverRun {
 public:
  static Result<std::unique_ptr<ObserverRun>> Start(const OneShotOptions& o) {
    ObserverOptions oo;
    oo.filters = o.filters;
    auto obs = Observer::Create(oo);
    if (!obs.ok()) return obs.status();
    std::unique_ptr<ObserverRun> run(new ObserverRun(std::move(*obs)));
    for (const auto& h : run->obs_->hooks())
      if (!h.attached) LOG_WARN("observer: %s not attached: %s", h.name.c_str(), h.error.c_str());
    if (o.events) {
      run->sub_ = run->obs_->hub().Subscribe(1 << 16);
      run->printer_ = std::thread([r = run.get()] { r->PrintEvents(); });
    }
    return run;
  }
  ~ObserverRun() { StopPrinter(); }

  // At exit: every event printed, then the totals, the subscriber's
  // delivered/lost counts, and every flow.
  void Finish() {
    obs_->Drain();
    StopPrinter();
    Print(TotalsJson(obs_->Totals(), obs_->hooks()));
    if (sub_)
      Print({{"event", "subscriber"}, {"delivered", sub_->delivered()}, {"lost", sub_->lost()}});
    for (const auto& fl : obs_->Flows()) Print({{"event", "flow"}, {"flow", FlowJson(fl)}});
  }

 private:
  explicit ObserverRun(std::unique_ptr<Observer> obs) : obs_(std::move(obs)) {}

  void PrintEvents() {
    for (;;) {
      auto e = sub_->Next(std::chrono::milliseconds(100));
      if (e)
        Print(EventJson(*e));
      else if (!printing_)
        break;
    }
    fflush(stdout);
  }

  void StopPrinter() {
    if (!printer_.joinable()) return;
    printing_ = false;  // the printer empties its queue, then stops
    printer_.join();
  }

  std::unique_ptr<Observer> obs_;
  std::shared_ptr<Subscription> sub_;
  std::thread printer_;
  std::atomic<bool> printing_{true};
};

// Whoever read stdout is gone (`| head` exited, the terminal closed): a write
// failed (SIGPIPE is ignored), or the pipe or tty reports an error or hang-up.
bool StdoutGone() {
  struct pollfd p = {STDOUT_FILENO, 0, 0};
  return ferror(stdout) || (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)));
}

// Sleeps until the next report is due; false at a signal (INT, TERM, HUP),
// when stdout's reader is gone, or at the end of the duration.
bool WaitForReport(const sigset_t& sigs, const OneShotOptions& o, double start) {
  if (StdoutGone()) {
    LOG_INFO("stdout closed: detaching");
    return false;
  }
  auto wait = o.interval;
  if (o.duration.count() > 0) {
    double left = start + o.duration.count() / 1e9 - Elapsed();
    if (left <= 0) return false;
    if (left < wait.count() / 1e9) wait = std::chrono::nanoseconds(int64_t(left * 1e9));
  }
  struct timespec ts = {static_cast<time_t>(wait.count() / 1000000000),
                        static_cast<long>(wait.count() % 1000000000)};
  int sig = sigtimedwait(&sigs, nullptr, &ts);
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    LOG_INFO("signal %d: detaching", sig);
    return false;
  }
  return true;
}

}  // namespace

int RunOneShot(const OneShotOptions& o) {
  // Signals are taken synchronously in the loop below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A closed stdout must not kill the run before it detaches (see StdoutGone).
  signal(SIGPIPE, SIG_IGN);

  // The injector only for a rule: --observe alone leaves the data plane, its
  // state dir and a running daemon's offload records alone.
  std::unique_ptr<StateDirLock> state_lock;  // one lossd per state dir (outlives inj)
  std::unique_ptr<Injector> inj;
  if (o.rule) {
    auto l = StateDirLock::Acquire(o.injector.state_dir);
    if (!l.ok()) {
      fprintf(stderr, "lossd: %s\n", l.status().message().c_str());
      return 1;
    }
    state_lock = std::move(*l);
    auto r = Injector::Create(o.injector);
    if (!r.ok()) {
      fprintf(stderr, "lossd: %s\n", r.status().ToString().c_str());
      return 1;
    }
    inj = std::move(*r);
  }
  std::unique_ptr<ObserverRun> obs;
  if (o.observe) {
    auto r = ObserverRun::Start(o);
    if (!r.ok()) {
      fprintf(stderr, "lossd: %s\n", r.status().ToString().c_str());
      return 1;
    }
    obs = std::move(*r);
  }

  uint32_t id = 0;
  if (o.rule) {
    auto r = inj->Add(*o.rule);
    if (!r.ok()) {
      fprintf(stderr, "lossd: %s\n", r.status().ToString().c_str());
      return 1;
    }
    id = *r;
    auto info = inj->Get(id);
    std::string hooks;
    for (const auto& h : info->hooks) hooks += (hooks.empty() ? "" : ", ") + h;
    if (o.json)
      Print({{"event", "ready"},
             {"rule", id},
             {"pid", getpid()},
             {"hooks", hooks},
             {"cgroup", info->cgroup},
             {"cgroup_id", info->cgroup_id}});
    else
      printf("rule %u active: %s\n", id, hooks.c_str());
  } else if (o.json) {  // --observe alone
    Print({{"event", "ready"}, {"pid", getpid()}});
  }
  fflush(stdout);

  double start = Elapsed();
  while (WaitForReport(sigs, o, start))
    if (id) Report(*inj, id, o.json, false);
  if (obs) obs->Finish();
  if (id) {
    // Detach first, then report: no drop can happen after the final count.
    auto gone = inj->Remove(id);
    Report(*inj, id, o.json, true, gone.ok() ? &gone->counters : nullptr);
  }
  fflush(stdout);
  return 0;  // the injector's destructor detaches everything
}

}  // namespace lossd
