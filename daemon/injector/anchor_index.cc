#include "injector/anchor_index.h"

#include <algorithm>

namespace lossd {

Result<std::vector<AnchorKey>> AnchorIndex::Insert(uint32_t slot, const RuleSpec& spec) {
  if (placed_.count(slot))
    return Internal("anchor index: slot " + std::to_string(slot) + " in use");

  // Options in order of preference; the first whose lists all have room wins.
  std::vector<std::vector<AnchorKey>> options;
  auto ports = [&](AnchorKey::Kind kind, const PortRange& r) {
    if (r.Any() || r.Size() > kMaxPortSpan) return;
    std::vector<AnchorKey> keys;
    for (uint32_t p = r.lo; p <= r.hi; p++) {
      AnchorKey k;
      k.kind = kind;
      k.port = static_cast<uint16_t>(p);
      keys.push_back(k);
    }
    options.push_back(std::move(keys));
  };
  auto host = [&](AnchorKey::Kind kind, const std::optional<Cidr>& c) {
    if (!c || !c->IsHost()) return;
    AnchorKey k;
    k.kind = kind;
    k.family = c->family;
    k.addr = c->addr;
    options.push_back({k});
  };
  ports(AnchorKey::kDport, spec.dport);
  ports(AnchorKey::kSport, spec.sport);
  host(AnchorKey::kDhost, spec.dst);
  host(AnchorKey::kShost, spec.src);
  options.push_back({AnchorKey{}});

  for (const auto& keys : options) {
    bool room = std::all_of(keys.begin(), keys.end(), [&](const AnchorKey& k) {
      auto it = lists_.find(k);
      return it == lists_.end() || it->second.size() < Capacity(k.kind);
    });
    if (!room) continue;
    Candidate c{spec.priority, slot};
    for (const auto& k : keys) {
      auto& list = lists_[k];
      list.insert(std::upper_bound(list.begin(), list.end(), c), c);
    }
    AnchorKey::Kind kind = keys.front().kind;
    if (kind == AnchorKey::kDport || kind == AnchorKey::kSport) port_rules_++;
    if (kind == AnchorKey::kDhost) dhost_rules_++;
    if (kind == AnchorKey::kShost) shost_rules_++;
    placed_[slot] = keys;
    return keys;
  }
  return ResourceExhausted("no room for the rule: its port/host lists hold " +
                           std::to_string(LOSS_BUCKET_SLOTS) +
                           " rules each and the list of rules without a port or host holds " +
                           std::to_string(LOSS_SCAN_MAX) +
                           "; narrow the rule (a port or a host address) or remove others");
}

std::vector<AnchorKey> AnchorIndex::Remove(uint32_t slot) {
  auto it = placed_.find(slot);
  if (it == placed_.end()) return {};
  std::vector<AnchorKey> keys = std::move(it->second);
  placed_.erase(it);
  for (const auto& k : keys) {
    auto lit = lists_.find(k);
    if (lit == lists_.end()) continue;
    auto& list = lit->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Candidate& c) { return c.slot == slot; }),
               list.end());
    if (list.empty()) lists_.erase(lit);
  }
  AnchorKey::Kind kind = keys.front().kind;
  if (kind == AnchorKey::kDport || kind == AnchorKey::kSport) port_rules_--;
  if (kind == AnchorKey::kDhost) dhost_rules_--;
  if (kind == AnchorKey::kShost) shost_rules_--;
  return keys;
}

const std::vector<Candidate>& AnchorIndex::List(const AnchorKey& key) const {
  static const std::vector<Candidate> kEmpty;
  auto it = lists_.find(key);
  return it == lists_.end() ? kEmpty : it->second;
}

}  // namespace lossd
