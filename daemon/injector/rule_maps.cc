#include "injector/rule_maps.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/log.h"
#include "injector/encode.h"
#include "rules/model.h"

namespace lossd {

RuleMaps::RuleMaps(std::unique_ptr<LossMaps> maps) : maps_(std::move(maps)) {
  for (uint32_t s = LOSS_MAX_RULES; s > 0; s--) free_slots_.push_back(s - 1);
}

Status RuleMaps::WriteConfig() {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.n_port_rules = index_.port_rules();
  cfg_.n_dhost_rules = index_.dhost_rules();
  cfg_.n_shost_rules = index_.shost_rules();
  const auto& scan = index_.scan();
  cfg_.n_scan = static_cast<uint32_t>(scan.size());
  for (size_t i = 0; i < LOSS_SCAN_MAX; i++) cfg_.scan[i] = i < scan.size() ? scan[i].slot : 0;
  return maps_->WriteConfig(cfg_);
}

void RuleMaps::RenewLease(uint64_t until_ns) {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  cfg_.lease_until_ns = until_ns;
  Status st = maps_->WriteConfig(cfg_);
  if (!st.ok()) LOG_ERROR("renew lease: %s", st.message().c_str());
}

uint64_t RuleMaps::LeaseUntilNs() const {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  return cfg_.lease_until_ns;
}

Status RuleMaps::CheckFreeSlot() const {
  if (free_slots_.empty())
    return ResourceExhausted("all " + std::to_string(LOSS_MAX_RULES) + " rule slots are in use");
  return Status::Ok();
}

Result<uint32_t> RuleMaps::Publish(const RuleSpec& spec, struct loss_rule rule) {
  LOSSD_RETURN_IF_ERROR(CheckFreeSlot());
  uint32_t slot = free_slots_.back();
  rule.generation = ++generation_[slot];
  // A failure leaves the slot free and nothing of the rule in the maps: its
  // entry written with no flags, its guard and ramp entries deleted.
  auto undo = [&]() {
    rule.flags = 0;
    maps_->WriteRule(slot, rule);
    Watch(slot, 0);
    maps_->DeleteGuard(slot);
    maps_->DeleteRamp(slot);
  };
  Status st = maps_->ResetCounters(slot);
  // (a free slot holds no guard or ramp: Withdraw, Free and undo delete them)
  if (st.ok() && (rule.flags & LOSS_RULE_GUARDED))
    st = maps_->WriteGuard(slot, EncodeGuard(spec.guard, rule));
  if (st.ok() && (rule.flags & LOSS_RULE_GUARDED) && spec.guard.watch_port)
    st = Watch(slot, spec.guard.watch_port);
  if (st.ok() && rule.model == LOSS_MODEL_RAMP)
    st = maps_->WriteRamp(slot, EncodeRamp(spec.model, rule.generation));
  if (st.ok()) st = maps_->WriteRule(slot, rule);
  if (!st.ok()) {
    undo();
    return st;
  }
  auto placed = index_.Insert(slot, spec);
  if (!placed.ok()) {
    undo();
    return placed.status();
  }
  st = WriteLists(*placed);
  if (!st.ok()) {
    WriteLists(index_.Remove(slot));
    undo();
    return st;
  }
  free_slots_.pop_back();
  return slot;
}

Status RuleMaps::Withdraw(uint32_t slot) {
  Status st = WriteLists(index_.Remove(slot));
  struct loss_rule off;
  std::memset(&off, 0, sizeof(off));
  off.generation = generation_[slot];
  Status st2 = maps_->WriteRule(slot, off);
  Status st3 = Watch(slot, 0);
  Status st4 = maps_->DeleteGuard(slot);
  return !st.ok() ? st : !st2.ok() ? st2 : !st3.ok() ? st3 : st4;
}

Status RuleMaps::Watch(uint32_t slot, uint32_t port) {
  // where it watched before (a slot watches one port at most)
  for (auto it = watchers_.begin(); it != watchers_.end(); ++it) {
    auto& slots = it->second;
    auto at = std::find(slots.begin(), slots.end(), slot);
    if (at == slots.end()) continue;
    if (it->first == port) return Status::Ok();
    slots.erase(at);
    struct loss_guard_watch w {};
    w.n = static_cast<uint32_t>(slots.size());
    std::copy(slots.begin(), slots.end(), w.slots);
    Status st = maps_->WriteWatch(it->first, w);
    if (slots.empty()) watchers_.erase(it);
    LOSSD_RETURN_IF_ERROR(st);
    break;
  }
  if (!port) return Status::Ok();
  auto& slots = watchers_[port];
  if (slots.size() >= LOSS_WATCH_GUARDS || watchers_.size() > LOSS_WATCH_PORTS) {
    if (slots.empty()) watchers_.erase(port);
    return ResourceExhausted(slots.size() >= LOSS_WATCH_GUARDS
                                 ? "at most " + std::to_string(LOSS_WATCH_GUARDS) +
                                       " guards watch port " + std::to_string(port) + " at once"
                                 : "at most " + std::to_string(LOSS_WATCH_PORTS) +
                                       " ports watched by guards at once");
  }
  slots.push_back(slot);
  struct loss_guard_watch w {};
  w.n = static_cast<uint32_t>(slots.size());
  std::copy(slots.begin(), slots.end(), w.slots);
  Status st = maps_->WriteWatch(port, w);
  if (!st.ok()) {
    slots.pop_back();
    if (slots.empty()) watchers_.erase(port);
  }
  return st;
}

Status RuleMaps::ArmGuardAll(const Guard& g) {
  struct loss_rule none;
  std::memset(&none, 0, sizeof(none));  // rule_id 0: any rule's drops
  LOSSD_RETURN_IF_ERROR(maps_->WriteGuard(LOSS_GUARD_ALL, EncodeGuard(g, none)));
  std::lock_guard<std::mutex> lock(cfg_mu_);
  if (cfg_.guard_all) return Status::Ok();
  cfg_.guard_all = 1;
  return maps_->WriteConfig(cfg_);
}

void RuleMaps::Free(uint32_t slot) {
  Status st = maps_->DeleteRamp(slot);  // its steps' counters were read by then
  if (!st.ok()) LOG_WARN("%s", st.message().c_str());
  free_slots_.push_back(slot);
}

Result<FlowDrops> RuleMaps::DropsOf(const loss_drop_key& key) const {
  loss_drop_log log;
  FlowDrops out;
  auto found = maps_->ReadDrops(key, &log);
  if (!found.ok()) return found.status();
  if (!*found) return out;
  out.total = log.drops;
  uint64_t kept = std::min<uint64_t>(log.drops, LOSS_DROP_RANGES);
  out.ranges.reserve(kept);
  for (uint64_t i = log.drops - kept; i < log.drops; i++)
    out.ranges.push_back(log.ranges[i % LOSS_DROP_RANGES]);
  return out;
}

// Counts one more (or one fewer) host anchored on addr's pre-filter bit and
// writes the word when the bit changes.
Status RuleMaps::BloomRef(uint32_t kind, const uint32_t* addr, int delta) {
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
  return maps_->WriteBloomWord(word, bloom_words_[word]);
}

// A host anchor's list: published before the pre-filter opens for it, and
// the pre-filter closed before it goes.
Status RuleMaps::WriteHostList(const AnchorKey& k, const struct loss_bucket& b) {
  struct loss_host_key hk;
  std::memset(&hk, 0, sizeof(hk));
  hk.kind = k.kind == AnchorKey::kDhost ? LOSS_ANCHOR_DHOST : LOSS_ANCHOR_SHOST;
  hk.family = static_cast<uint32_t>(k.family);
  std::memcpy(hk.addr, k.addr.data(), 16);
  bool present = b.n > 0, was = hosts_present_.count(k) > 0;
  if (present && !was) {
    LOSSD_RETURN_IF_ERROR(maps_->WriteHostList(hk, b));
    hosts_present_.insert(k);
    return BloomRef(hk.kind, hk.addr, +1);
  }
  if (!present && was) {
    hosts_present_.erase(k);
    LOSSD_RETURN_IF_ERROR(BloomRef(hk.kind, hk.addr, -1));
    return maps_->DeleteHostList(hk);
  }
  return present ? maps_->WriteHostList(hk, b) : Status::Ok();
}

// Writes the candidate lists of `keys`, then the config (its counts tell the
// data plane which indexes to consult; it holds the scan list).
Status RuleMaps::WriteLists(const std::vector<AnchorKey>& keys) {
  for (const auto& k : keys) {
    const auto& list = index_.List(k);
    struct loss_bucket b;
    std::memset(&b, 0, sizeof(b));
    b.n = static_cast<uint32_t>(std::min<size_t>(list.size(), LOSS_BUCKET_SLOTS));
    for (uint32_t i = 0; i < b.n; i++) b.slot[i] = list[i].slot;
    switch (k.kind) {
      case AnchorKey::kDport:
      case AnchorKey::kSport:
        LOSSD_RETURN_IF_ERROR(maps_->WritePortList(uint32_t(k.kind) * 65536 + k.port, b));
        break;
      case AnchorKey::kDhost:
      case AnchorKey::kShost: LOSSD_RETURN_IF_ERROR(WriteHostList(k, b)); break;
      case AnchorKey::kScan: break;
    }
  }
  return WriteConfig();
}

std::optional<DropExpectation> RuleMaps::Expect(const LossModel& model, uint32_t slot,
                                                uint32_t generation,
                                                const RuleCounters* final_counts) const {
  auto read = [&]() -> Result<RuleCounters> {
    if (final_counts) return *final_counts;
    return Counters(slot);
  };
  for (int attempt = 0; attempt < 5; attempt++) {
    auto c0 = read();
    if (!c0.ok()) return std::nullopt;
    auto counts = FlowCounts(slot, generation);
    if (!counts.ok()) return std::nullopt;
    auto c1 = read();
    if (!c1.ok()) return std::nullopt;
    if (c1->matched_pkts != c0->matched_pkts) continue;
    DropExpectation e;
    uint64_t seen = 0;
    for (uint64_t n : *counts) {
      seen += n;
      e.expected += ModelExpectedDrops(model, n);
    }
    // The data plane counts a flow's packet a moment before the rule's: a packet
    // between the two, or a flow evicted, and they differ. Read again.
    if (seen != c0->matched_pkts) continue;
    e.matched = c0->matched_pkts;
    e.dropped = c0->dropped_pkts;
    e.flows = counts->size();
    return e;
  }
  return std::nullopt;
}

}  // namespace lossd
