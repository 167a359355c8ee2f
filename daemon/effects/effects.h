// Cause beside effect: attributes every retransmission the observer sees to
// the rules whose match covers its flow, so a rule's drops can be shown next
// to the retransmissions (by type) on the flows it matched. Learns of rules
// from their owner (the injector, as its RuleListener), of retransmissions
// from its own hub subscription; keeps per-rule totals and a per-flow cache.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "injector/injector.h"
#include "observer/observer.h"
#include "rules/rule.h"

namespace lossd {

struct RuleEffectTotals {
  std::array<uint64_t, OBS_RTX_MAX> segs{};  // sent or failed after counting
  std::set<uint64_t> flows;                  // socket cookies
};

// A rule's drops held against its configured rate, and what they caused.
struct RuleEffect {
  double configured = 0;           // the model's mean rate; -1: none (first-k)
  double measured = 0;             // dropped / matched segments
  double ci_low = 0, ci_high = 1;  // 99.9 % interval of the per-skb drop rate
  bool configured_within_ci = false;
  RuleEffectTotals caused;  // retransmissions on the flows it matched
};

class EffectTracker final : public RuleListener {
 public:
  // Registers with `inj` (which must outlive it) for rule changes; `obs` may
  // be null (no observer: nothing is attributed).
  EffectTracker(Injector* inj, Observer* obs);
  ~EffectTracker() override;
  // The observer, when it comes later than the injector (the daemon loads
  // it in the background); once, and only if none was given.
  void AttachObserver(Observer* obs);

  void RulePublished(uint32_t id, const RuleSpec& spec) override;
  void RuleRetired(uint32_t id) override;
  void RuleForgotten(uint32_t id) override;

  RuleEffectTotals Totals(uint32_t id) const;
  RuleEffect Effect(const RuleInfo& rule) const;
  // Rules covering a flow tuple (cached per cookie and tuple: a listener's
  // SYN-ACK events carry the listener's cookie with each client's tuple).
  std::vector<uint32_t> RulesFor(uint64_t cookie, const obs_tuple& t);
  uint64_t lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sub_ ? sub_->lost() : 0;
  }

 private:
  void Run();

  Injector* inj_;
  Observer* obs_ = nullptr;  // set once (constructor or AttachObserver)
  std::shared_ptr<Subscription> sub_;
  mutable std::mutex mu_;
  std::map<uint32_t, RuleSpec> rules_;  // the live ones
  uint64_t generation_ = 0;
  struct CacheEntry {
    uint64_t generation;
    obs_tuple tuple;
    std::vector<uint32_t> rules;
  };
  std::unordered_map<uint64_t, CacheEntry> cache_;
  std::map<uint32_t, RuleEffectTotals> totals_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lossd
