// What the services serve from, and how far each part has loaded. The daemon
// serves before its parts are loaded (docs/architecture.md#start-up): the
// injector (its maps, the lease, stale-state clean-up; its hook programs load
// on first use) and then the observer load on a thread of their own, and
// publish themselves here when ready. An RPC that needs a part not yet ready
// waits for it within its deadline (at most kMaxLoadWait): DEADLINE_EXCEEDED
// if the deadline passes first, UNAVAILABLE if the wait's cap does; one that
// failed or was disabled answers FAILED_PRECONDITION at once. Each of those
// carries its reason (PART_LOADING, PART_FAILED, PART_DISABLED) as the
// call's ErrorInfo (lossd.proto, "Errors"). Whoever must
// follow the parts (the gRPC health service) is told of every change. The parts are owned by the daemon (daemon.cc), which
// outlives the server; this only points at them.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/stop_token.h"
#include "common/stream_budget.h"
#include "effects/effects.h"
#include "injector/injector.h"
#include "observer/observer.h"
#include "scenario/runner.h"

namespace lossd {

// Bounds on what one client may ask of the API (docs/architecture.md#limits).
// A request past one is INVALID_ARGUMENT naming the limit and its flag; a
// stream past the StreamBudget, RESOURCE_EXHAUSTED.
struct ApiLimits {
  StreamLimits streams;
  uint32_t max_filters = 1024;     // --max-filters: filters (allow + deny) of one request
  uint32_t max_labels = 32;        // --max-labels: labels of one rule (or of ListRules)
  uint32_t max_label_bytes = 256;  // --max-label-bytes: one label's key or value
  uint32_t max_batch = 10000;  // --max-batch: specs of one CreateRules, ids of WatchRuleCounters
  uint32_t max_message_bytes = 4u << 20;  // --max-message-bytes: a request (gRPC receive limit)
};

enum class ComponentState { kLoading, kReady, kFailed, kDisabled };

// How long an RPC without a deadline waits for a loading part (the injector
// loads in ~0.1 s, the observer in ~5 s here).
constexpr std::chrono::seconds kMaxLoadWait{30};

struct ComponentStatus {
  ComponentState state = ComponentState::kLoading;
  std::string message;
  uint64_t ready_after_ns = 0;  // start to READY / FAILED
};

class Components {
 public:
  explicit Components(RuleLimits limits, bool observer_wanted, ApiLimits api = {})
      : limits_(std::move(limits)), api_(api), streams_(api.streams), start_ns_(MonotonicNs()) {
    injector_status_.message =
        "loading: creating the BPF maps, clearing what a previous lossd left";
    if (observer_wanted) {
      observer_status_.message = "loading: verifying the TCP observer's BPF programs";
    } else {
      observer_status_.state = ComponentState::kDisabled;
      observer_status_.message = "disabled (--no-observer)";
    }
  }

  // The injector, its capabilities, the effect tracker and the scenario
  // runner (both over the injector), all at once.
  void InjectorReady(Injector* inj, const Capabilities& caps, EffectTracker* effects,
                     ScenarioRunner* scenarios) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      caps_ = caps;
      effects_.store(effects);
      scenarios_.store(scenarios);
      injector_.store(inj);  // before READY: a client told READY finds it
      injector_status_ = {ComponentState::kReady,
                          "ready; each hook's program loads with the first rule that needs it",
                          MonotonicNs() - start_ns_};
    }
    Changed();
  }
  void ObserverReady(Observer* obs) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      observer_.store(obs);
      observer_status_ = {ComponentState::kReady, "ready", MonotonicNs() - start_ns_};
    }
    Changed();
  }
  // Called (on the loading thread) after every change of a part's state;
  // register before the parts load.
  void OnChange(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    listeners_.push_back(std::move(fn));
  }
  void InjectorFailed(const std::string& why) { Fail(&injector_status_, why); }
  void ObserverFailed(const std::string& why) { Fail(&observer_status_, why); }

  // Null until ready.
  Injector* injector() const { return injector_.load(); }
  Observer* observer() const { return observer_.load(); }
  EffectTracker* effects() const { return effects_.load(); }
  ScenarioRunner* scenarios() const { return scenarios_.load(); }

  // The part, waiting while it loads until `deadline` (the call's; at most
  // kMaxLoadWait from now), or why an RPC cannot have it.
  using Deadline = std::chrono::system_clock::time_point;
  Result<Injector*> NeedInjector(Deadline deadline = Deadline::max()) const {
    if (Injector* i = injector()) return i;
    Waited w = Await(&injector_status_, deadline);
    if (Injector* i = injector()) return i;
    return Why("the injector", "injector", w);
  }
  Result<Observer*> NeedObserver(Deadline deadline = Deadline::max()) const {
    if (Observer* o = observer()) return o;
    Waited w = Await(&observer_status_, deadline);
    if (Observer* o = observer()) return o;
    return Why("the TCP observer", "observer", w);
  }

  ComponentStatus injector_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injector_status_;
  }
  ComponentStatus observer_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return observer_status_;
  }
  Capabilities caps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return caps_;
  }
  const RuleLimits& limits() const { return limits_; }
  const ApiLimits& api() const { return api_; }
  // Every client stream's budget (gRPC and HTTP; the observer's hub uses it).
  StreamBudget& streams() const { return streams_; }
  // Set when the server shuts down: every stream's producer ends its stream.
  const StopToken& stream_stop() const { return stream_stop_; }
  void StopStreams() { stream_stop_.Stop(); }

 private:
  void Fail(ComponentStatus* s, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      *s = {ComponentState::kFailed, why, MonotonicNs() - start_ns_};
    }
    Changed();
  }
  void Changed() {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fns = listeners_;
    }
    changed_.notify_all();
    for (const auto& fn : fns) fn();
  }
  // The part's status once it is no longer loading, or at the deadline.
  struct Waited {
    ComponentStatus status;
    bool deadline_passed = false;  // the caller's deadline (not the cap) ended the wait
  };
  // A caller's wait ends kAnswerMargin (at most a quarter of the time left)
  // before its deadline, so that lossd's answer, with its reason, reaches the
  // caller before the caller's own deadline ends the call without one (the
  // server's deadline is the client's plus the time the request took to come,
  // a new connection's set-up included).
  static constexpr std::chrono::milliseconds kAnswerMargin{100};
  Waited Await(const ComponentStatus* s, Deadline deadline) const {
    const auto now = std::chrono::system_clock::now();
    const Deadline cap = now + kMaxLoadWait;
    const bool callers = deadline < cap;
    using Duration = std::chrono::system_clock::duration;
    Deadline until = cap;
    if (callers)
      until = deadline - std::min<Duration>(kAnswerMargin,
                                            deadline > now ? (deadline - now) / 4 : Duration::zero());
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_until(lock, until, [&] { return s->state != ComponentState::kLoading; });
    return {*s, callers && s->state == ComponentState::kLoading};
  }
  // Why the call cannot have the part: its code and message, and the reason
  // (PART_LOADING, PART_FAILED, PART_DISABLED) with metadata {part, state}.
  static Status Why(const std::string& what, const char* part, const Waited& w) {
    const ComponentStatus& s = w.status;
    auto reason = [part](Status st, const char* r, const char* state) {
      return std::move(st).WithReason(r, {{"part", part}, {"state", state}});
    };
    switch (s.state) {
      case ComponentState::kLoading:
        if (w.deadline_passed)
          return reason(Status(Code::kDeadlineExceeded,
                               "the call's deadline passed while " + what + " was still loading"),
                        "PART_LOADING", "loading");
        return reason(Status(Code::kUnavailable, what + " is still loading after " +
                                                     std::to_string(kMaxLoadWait.count()) +
                                                     " s (GetHealth says what it is doing)"),
                      "PART_LOADING", "loading");
      case ComponentState::kFailed:
        return reason(FailedPrecondition(what + " failed to start on this daemon: " + s.message),
                      "PART_FAILED", "failed");
      case ComponentState::kReady:  // published before READY: the caller reads it again
      case ComponentState::kDisabled: break;
    }
    return reason(FailedPrecondition(what + " is not running on this daemon: " + s.message),
                  "PART_DISABLED", "disabled");
  }

  const RuleLimits limits_;
  const ApiLimits api_;
  mutable StreamBudget streams_;
  StopToken stream_stop_;
  const uint64_t start_ns_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<std::function<void()>> listeners_;
  ComponentStatus injector_status_, observer_status_;
  Capabilities caps_;
  std::atomic<Injector*> injector_{nullptr};
  std::atomic<Observer*> observer_{nullptr};
  std::atomic<EffectTracker*> effects_{nullptr};
  std::atomic<ScenarioRunner*> scenarios_{nullptr};
};

}  // namespace lossd
