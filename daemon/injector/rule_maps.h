// The map side of the rules: which slot each rule has (and its generation),
// where it is anchored (AnchorIndex) and so the candidate lists, the host
// pre-filter's bits, and the config with the lease, each written through
// LossMaps in the order the data plane needs (a rule's entry before the
// lists that name it, a list before the pre-filter bit that opens it, the
// lists before the config that counts them).
//
// Not thread-safe: the injector calls it under its rules' lock, except the
// lease (RenewLease, LeaseUntilNs), which takes only the config's own lock
// (held for one map write), and the reads of hook totals and the drop log.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "base/status.h"
#include "injector/anchor_index.h"
#include "injector/maps.h"
#include "loss_abi.h"
#include "rules/rule.h"

namespace lossd {

// What a deterministic model (first-k, every-n-th: rules/model.h) drops of the
// packets each flow of a rule sent, as the data plane counted them per flow,
// beside what the rule matched and dropped at that same moment.
struct DropExpectation {
  uint64_t expected = 0, matched = 0, dropped = 0, flows = 0;
};

class RuleMaps {
 public:
  explicit RuleMaps(std::unique_ptr<LossMaps> maps);

  // Writes the config as it stands (at creation: no rule, no lease).
  Status WriteConfig();
  // ResourceExhausted when every slot is taken (asked before attaching).
  Status CheckFreeSlot() const;
  // Puts `rule` (encoded; its generation is set here) in a free slot: its
  // counters zeroed, the entry written, anchored, the lists and the config
  // written; live from that last write. Returns the slot. On failure nothing
  // of it matches any more (its entry is written with no flags) and the
  // slot stays free.
  Result<uint32_t> Publish(const RuleSpec& spec, struct loss_rule rule);
  // Takes the rule in `slot` out of the lists and the config, then zeroes
  // its entry (keeping the generation). The slot stays taken, its counters
  // readable, until Free.
  Status Withdraw(uint32_t slot);
  void Free(uint32_t slot);
  Result<RuleCounters> Counters(uint32_t slot) const { return maps_->ReadCounters(slot); }
  // The generation of the rule published in `slot` (its flow state's key).
  uint32_t Generation(uint32_t slot) const { return generation_[slot]; }
  Result<std::vector<uint64_t>> FlowCounts(uint32_t slot, uint32_t generation) const {
    return maps_->ReadFlowCounts(slot, generation);
  }
  // The expectation of `model` for the rule published in `slot` under
  // `generation`: its counters read live, or `final_counts` once retired.
  // The per-flow counts and the counters are read apart: nullopt when they do
  // not add up in five reads (traffic that would not hold still, a flow's
  // state evicted). Reads the maps only (callable without the rules' lock).
  std::optional<DropExpectation> Expect(const LossModel& model, uint32_t slot, uint32_t generation,
                                        const RuleCounters* final_counts) const;

  // The lease: the data plane drops nothing after `until_ns`
  // (CLOCK_MONOTONIC; 0: no lease).
  void RenewLease(uint64_t until_ns);
  // lossd's own network namespace (its cookie), written with the next
  // config: rules bound to an interface match only there.
  void SetNetnsCookie(uint64_t cookie) {
    std::lock_guard<std::mutex> lock(cfg_mu_);
    cfg_.netns_cookie = cookie;
  }
  uint64_t LeaseUntilNs() const;

  // A ramp's steps' counters (the first `steps`), until Free.
  Result<std::vector<StepCounters>> RampCounters(uint32_t slot, size_t steps) const {
    return maps_->ReadRampStats(slot, steps);
  }
  // The guard of the rule in `slot` as the kernel left it (false: none).
  Result<bool> ReadGuard(uint32_t slot, struct loss_guard* g) const {
    return maps_->ReadGuard(slot, g);
  }
  // The daemon's guard (loss_guards[LOSS_GUARD_ALL], rule_id 0), fresh, and
  // loss_config.guard_all set.
  Status ArmGuardAll(const Guard& g);
  int DropsFd() const { return maps_->DropsFd(); }
  int GuardsFd() const { return maps_->GuardsFd(); }
  int WatchFd() const { return maps_->WatchFd(); }
  HookCounters HookTotals(uint32_t hook) const { return maps_->ReadHookTotals(hook); }
  Result<FlowDrops> DropsOf(const loss_drop_key& key) const;

 private:
  Status WriteLists(const std::vector<AnchorKey>& keys);
  Status WriteHostList(const AnchorKey& k, const struct loss_bucket& b);
  Status BloomRef(uint32_t kind, const uint32_t* addr, int delta);
  // The guard in `slot` watches `port` (loss_guard_watch), or (port 0) no longer.
  Status Watch(uint32_t slot, uint32_t port);

  std::unique_ptr<LossMaps> maps_;
  AnchorIndex index_;
  std::vector<uint32_t> free_slots_;
  std::array<uint32_t, LOSS_MAX_RULES> generation_{};
  // Host pre-filter: rules per bit, and the words as written to the map.
  std::map<uint32_t, uint32_t> bloom_refs_;  // kind * LOSS_BLOOM_BITS + bit
  std::vector<uint64_t> bloom_words_ = std::vector<uint64_t>(2 * LOSS_BLOOM_WORDS);
  std::set<AnchorKey> hosts_present_;
  // The guards watching each port, as written to loss_guard_watch.
  std::map<uint32_t, std::vector<uint32_t>> watchers_;
  // The config as written to loss_cfg, and its write: under cfg_mu_, which
  // the lease thread takes alone.
  mutable std::mutex cfg_mu_;
  struct loss_config cfg_ {};
};

}  // namespace lossd
