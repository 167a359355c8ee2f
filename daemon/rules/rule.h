// A loss rule as a user states it (RuleSpec), the parsers for the human
// forms of its fields ("10.0.0.0/24", "8000-8100", "0.005%", "30s"), its
// validation, and its encoding into the BPF ABI (struct loss_rule).
// Pure logic: no kernel calls, unit-tested without privileges.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "loss_abi.h"

namespace lossd {

// Where the injector runs. kAuto: cgroup_skb when a cgroup is named, else
// tc (tcx) on virtual interfaces (veth, bridges...) and XDP on physical NICs
// for ingress, clsact egress for egress (docs/architecture.md#hook-choice, #egress-verdicts).
enum class Hook { kAuto, kXdp, kTc, kCgroup };

enum class Direction { kIngress, kEgress, kBoth };

struct Cidr {
  int family = 0;                     // 4 or 6
  std::array<uint8_t, 16> addr{};     // network byte order; IPv4 in [0..3]
  int prefix = 0;                     // bits
  bool IsHost() const { return prefix == (family == 4 ? 32 : 128); }
  std::string ToString() const;
};

struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 65535;
  bool Any() const { return lo == 0 && hi == 65535; }
  uint32_t Size() const { return uint32_t(hi) - lo + 1; }
};

struct LossModel {
  enum class Kind { kBernoulli, kGilbertElliott, kEveryNth, kFirstK };
  Kind kind = Kind::kBernoulli;
  double p = 0;          // Bernoulli rate; GE: P(good -> bad)
  double r = 0;          // GE: P(bad -> good)
  double bad_loss = 1;   // GE: loss probability in the bad state (1-h)
  double good_loss = 0;  // GE: loss probability in the good state (1-k)
  uint32_t n = 0;        // every n-th packet / first k packets
};

struct RuleSpec {
  // Target.
  std::string iface;   // interface name; required unless a cgroup is named
  std::string cgroup;  // cgroup v2 path (absolute, or relative to the v2 mount)
  Hook hook = Hook::kAuto;
  Direction dir = Direction::kIngress;
  // Match (any subset).
  std::optional<Cidr> src, dst;
  PortRange sport, dport;
  int l4proto = 0;  // 0 any, 6 tcp, 17 udp, 1 icmp, 58 icmpv6
  uint8_t tcp_flags_mask = 0, tcp_flags_value = 0;
  int payload = LOSS_PAYLOAD_ANY;
  int family = 0;  // 0 any, 4, 6 (implied by addresses)
  // Loss.
  LossModel model;
  std::optional<uint64_t> seed;
  uint32_t priority = 0;
  std::chrono::nanoseconds ttl{0};  // 0 = no expiry
  bool per_segment = false;  // make each skb one wire segment on the interface
  // The user's own: labels to find the rule by, and force (skip host protection).
  std::map<std::string, std::string> labels;
  bool force = false;
};

constexpr uint32_t kMaxPriority = 1000000;

// Parsers: each returns kInvalidArgument with a message naming the input.
Result<Cidr> ParseCidr(const std::string& text);
Result<PortRange> ParsePortRange(const std::string& text);
// "1%", "0.005%", "0.01" (a fraction), "1e-4".
Result<double> ParseRate(const std::string& text);
Result<int> ParseProtocol(const std::string& text);  // tcp udp icmp icmpv6 any <number>
// "SYN", "SYN,!ACK", "syn|ack": set flags must be set, "!" flags must be clear.
Status ParseTcpFlags(const std::string& text, uint8_t* mask, uint8_t* value);
// "500ms", "30s", "5m", "1h", or a plain number of seconds.
Result<std::chrono::nanoseconds> ParseDuration(const std::string& text);
// "p,r,1-h,1-k" as netem's gemodel (rates as above; r, 1-h, 1-k optional with
// netem's defaults r = 1-p, 1-h = 1, 1-k = 0).
Result<LossModel> ParseGilbertElliott(const std::string& text);

const char* HookName(Hook hook);
const char* DirectionName(Direction dir);

// Checks a rule for consistency. Does not look at the kernel (interfaces
// and cgroups are resolved by the injector).
Status Validate(const RuleSpec& spec);

}  // namespace lossd
