// What the services serve from, and how far each part has loaded. The daemon
// serves before its parts are loaded (docs/architecture.md#start-up): the
// injector (its maps, the lease, stale-state clean-up; its hook programs load
// on first use) and then the observer load on a thread of their own, and
// publish themselves here when ready. An RPC that needs a part not yet ready
// answers UNAVAILABLE "... loading ..."; one that failed or was disabled,
// FAILED_PRECONDITION. The parts are owned by the daemon (daemon.cc), which
// outlives the server; this only points at them.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "common/stream_budget.h"
#include "effects/effects.h"
#include "injector/injector.h"
#include "observer/observer.h"

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

  // The injector, its capabilities and the effect tracker, all at once.
  void InjectorReady(Injector* inj, const Capabilities& caps, EffectTracker* effects) {
    std::lock_guard<std::mutex> lock(mu_);
    caps_ = caps;
    effects_.store(effects);
    injector_.store(inj);  // before READY: a client told READY finds it
    injector_status_ = {ComponentState::kReady,
                        "ready; each hook's program loads with the first rule that needs it",
                        MonotonicNs() - start_ns_};
  }
  void ObserverReady(Observer* obs) {
    std::lock_guard<std::mutex> lock(mu_);
    observer_.store(obs);
    observer_status_ = {ComponentState::kReady, "ready", MonotonicNs() - start_ns_};
  }
  void InjectorFailed(const std::string& why) { Fail(&injector_status_, why); }
  void ObserverFailed(const std::string& why) { Fail(&observer_status_, why); }

  // Null until ready.
  Injector* injector() const { return injector_.load(); }
  Observer* observer() const { return observer_.load(); }
  EffectTracker* effects() const { return effects_.load(); }

  // The part, or why an RPC cannot have it (UNAVAILABLE while loading).
  Result<Injector*> NeedInjector() const {
    if (Injector* i = injector()) return i;
    return Why("the injector", injector_status());
  }
  Result<Observer*> NeedObserver() const {
    if (Observer* o = observer()) return o;
    return Why("the TCP observer", observer_status());
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

 private:
  void Fail(ComponentStatus* s, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    *s = {ComponentState::kFailed, why, MonotonicNs() - start_ns_};
  }
  static Status Why(const std::string& what, const ComponentStatus& s) {
    switch (s.state) {
      case ComponentState::kLoading:
        return Status(Code::kUnavailable,
                      what +
                          " is still loading (lossd started moments ago; retry, "
                          "or wait until GetHealth reports it READY)");
      case ComponentState::kFailed:
        return FailedPrecondition(what + " failed to start on this daemon: " + s.message);
      case ComponentState::kReady:  // cannot be: published before READY
      case ComponentState::kDisabled: break;
    }
    return FailedPrecondition(what + " is not running on this daemon: " + s.message);
  }

  const RuleLimits limits_;
  const ApiLimits api_;
  mutable StreamBudget streams_;
  const uint64_t start_ns_;
  mutable std::mutex mu_;
  ComponentStatus injector_status_, observer_status_;
  Capabilities caps_;
  std::atomic<Injector*> injector_{nullptr};
  std::atomic<Observer*> observer_{nullptr};
  std::atomic<EffectTracker*> effects_{nullptr};
};

}  // namespace lossd
