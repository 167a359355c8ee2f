// Cause beside effect: attributes every retransmission the observer sees to
// the rules whose match covers its flow, so a rule's drops can be shown next
// to the retransmissions (by type) on the flows it matched. Fed by its own
// hub subscription; keeps per-rule totals and a per-flow cache.
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

#include "rules/rule.h"
#include "observer/observer.h"

namespace lossd {

struct RuleEffectTotals {
  std::array<uint64_t, OBS_RTX_MAX> segs{};  // sent or failed after counting
  std::set<uint64_t> flows;                   // socket cookies
};

class EffectTracker {
 public:
  explicit EffectTracker(Observer* obs);
  ~EffectTracker();

  // The current rules (id -> spec); called on every rule change.
  void SetRules(const std::map<uint32_t, RuleSpec>& rules);
  RuleEffectTotals Totals(uint32_t id) const;
  // Rules covering a flow tuple (cached per cookie).
  std::vector<uint32_t> RulesFor(uint64_t cookie, const obs_tuple& t);
  uint64_t lost() const { return sub_ ? sub_->lost() : 0; }

 private:
  void Run();

  Observer* obs_;
  std::shared_ptr<Subscription> sub_;
  mutable std::mutex mu_;
  std::map<uint32_t, RuleSpec> rules_;
  uint64_t generation_ = 0;
  struct CacheEntry {
    uint64_t generation;
    std::vector<uint32_t> rules;
  };
  std::unordered_map<uint64_t, CacheEntry> cache_;
  std::map<uint32_t, RuleEffectTotals> totals_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lossd
