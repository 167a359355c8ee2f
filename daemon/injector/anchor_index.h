// Where each rule is anchored so the data plane finds its candidates with
// one or two cheap lookups instead of a scan of every rule: a port (array
// indexed by port), an exact host address (hash), or, for rules with
// neither, a short scan list. Pure bookkeeping: the injector writes the
// lists this class reports changed into the BPF maps.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "rules/rule.h"

namespace lossd {

struct AnchorKey {
  enum Kind { kDport = LOSS_ANCHOR_DPORT, kSport = LOSS_ANCHOR_SPORT, kDhost, kShost, kScan };
  Kind kind = kScan;
  uint16_t port = 0;               // kDport / kSport
  int family = 0;                  // kDhost / kShost
  std::array<uint8_t, 16> addr{};  // kDhost / kShost, network byte order

  bool operator<(const AnchorKey& o) const {
    return std::tie(kind, port, family, addr) < std::tie(o.kind, o.port, o.family, o.addr);
  }
  bool operator==(const AnchorKey& o) const { return !(*this < o) && !(o < *this); }
};

// A candidate list entry; lists are kept sorted best first.
struct Candidate {
  uint32_t priority;
  uint32_t slot;
  bool operator<(const Candidate& o) const {  // "better than"
    return priority != o.priority ? priority > o.priority : slot < o.slot;
  }
};

class AnchorIndex {
 public:
  // Port ranges up to this many ports are anchored port by port.
  static constexpr uint32_t kMaxPortSpan = 64;

  // Anchors rule `slot`. Returns the keys whose lists changed, or
  // kResourceExhausted when every list the rule could go into is full.
  Result<std::vector<AnchorKey>> Insert(uint32_t slot, const RuleSpec& spec);
  // Removes rule `slot`; returns the keys whose lists changed.
  std::vector<AnchorKey> Remove(uint32_t slot);

  // The sorted candidates of a key (empty if none).
  const std::vector<Candidate>& List(const AnchorKey& key) const;

  uint32_t port_rules() const { return port_rules_; }
  uint32_t dhost_rules() const { return dhost_rules_; }
  uint32_t shost_rules() const { return shost_rules_; }
  const std::vector<Candidate>& scan() const { return List(AnchorKey{}); }

 private:
  size_t Capacity(AnchorKey::Kind kind) const {
    return kind == AnchorKey::kScan ? LOSS_SCAN_MAX : LOSS_BUCKET_SLOTS;
  }

  std::map<AnchorKey, std::vector<Candidate>> lists_;
  std::map<uint32_t, std::vector<AnchorKey>> placed_;
  uint32_t port_rules_ = 0;
  uint32_t dhost_rules_ = 0;
  uint32_t shost_rules_ = 0;
};

}  // namespace lossd
