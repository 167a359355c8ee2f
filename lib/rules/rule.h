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
#include <vector>

#include "base/status.h"
#include "loss_abi.h"

namespace lossd {

// Where the injector runs. kAuto: cgroup_skb when a cgroup is named, else
// tc (tcx) on virtual interfaces (veth, bridges...) and XDP on physical NICs
// for ingress, clsact egress for egress (docs/architecture.md#hook-choice, #egress-verdicts).
enum class Hook { kAuto, kXdp, kTc, kCgroup };

enum class Direction { kIngress, kEgress, kBoth };

// What a rule does to the packets its model picks (enum loss_action; docs/
// architecture.md#impairments). All but kDrop change or copy the packet, which
// only tc can: they run at tc on an interface or a cgroup target's egress.
enum class Action {
  kDrop = LOSS_ACTION_DROP,
  kCorrupt = LOSS_ACTION_CORRUPT,                 // the receiver's checksum check discards it
  kCorruptPayload = LOSS_ACTION_CORRUPT_PAYLOAD,  // wrong bytes, valid checksums
  kDuplicate = LOSS_ACTION_DUPLICATE,             // sent twice
  kEcn = LOSS_ACTION_ECN,                         // ECT marked CE, non-ECT dropped
  kEcnPass = LOSS_ACTION_ECN_PASS,                // ECT marked CE, non-ECT passes
};

struct Cidr {
  int family = 0;                  // 4 or 6
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 in [0..3]
  int prefix = 0;                  // bits
  bool IsHost() const { return prefix == (family == 4 ? 32 : 128); }
  std::string ToString() const;
};

struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 65535;
  bool Any() const { return lo == 0 && hi == 65535; }
  uint32_t Size() const { return uint32_t(hi) - lo + 1; }
  bool Contains(uint16_t port) const { return lo <= port && port <= hi; }
};

// One step of a ramp: this Bernoulli rate for this long.
struct RampStep {
  double rate = 0;
  std::chrono::nanoseconds duration{0};
  bool operator==(const RampStep& o) const { return rate == o.rate && duration == o.duration; }
};

struct LossModel {
  enum class Kind { kBernoulli, kGilbertElliott, kEveryNth, kFirstK, kRamp, kMarkov4, kPolice };
  Kind kind = Kind::kBernoulli;
  double p = 0;          // Bernoulli rate; GE: P(good -> bad)
  double r = 0;          // GE: P(bad -> good)
  double bad_loss = 1;   // GE: loss probability in the bad state (1-h)
  double good_loss = 0;  // GE: loss probability in the good state (1-k)
  uint32_t n = 0;        // every n-th packet / first k packets
  // Markov4 (netem "loss state"; lossd.v1 Markov4): the transition probabilities.
  double p13 = 0, p31 = 0, p32 = 0, p23 = 0, p14 = 0;
  // Police (lossd.v1 Police): the token bucket.
  uint64_t rate_bps = 0;     // bits per second, kMinPoliceBps .. kMaxPoliceBps
  uint64_t burst_bytes = 0;  // 1 .. kMaxPoliceBurst
  // One bucket per flow (the rule's per-flow state, per 5-tuple) instead of one
  // per rule (lossd.v1 Police.per_flow; docs/architecture.md#police).
  bool police_per_flow = false;
  // Ramp: Bernoulli at each step's rate in turn, from the rule's start (its
  // schedule's origin); the rule ends (EXPIRED) after the last.
  std::vector<RampStep> steps;
  // The steps' total time (0 for other models).
  std::chrono::nanoseconds RampSpan() const {
    std::chrono::nanoseconds t{0};
    for (const auto& st : steps) t += st.duration;
    return kind == Kind::kRamp ? t : std::chrono::nanoseconds(0);
  }
};
constexpr size_t kMaxRampSteps = LOSS_RAMP_STEPS;
constexpr uint64_t kMinPoliceBps = 8;
constexpr uint64_t kMaxPoliceBps = 100000000000ULL;  // 100 Gbit/s
constexpr uint64_t kMaxPoliceBurst = 1ULL << 30;     // 1 GiB
// Each step 1 ms .. 1 d (as a pulse's parts).

// A service named as the user thinks of it; the daemon resolves it to the
// service's cgroup (host/targets.h, docs/targeting.md). At most one kind,
// but a container inside a pod narrows the pod to that container.
struct ServiceTarget {
  uint32_t pid = 0;       // the cgroup of that process (/proc/PID/cgroup)
  std::string unit;       // systemd unit: NAME.service, .scope or .slice (".service" if none)
  std::string container;  // docker / containerd / CRI-O / podman id, or a prefix of it
  std::string pod;        // pod UID, or NAMESPACE/NAME (through kubectl)
  bool Any() const { return pid || !unit.empty() || !container.empty() || !pod.empty(); }
  // "pid 4242", "unit nginx.service", "pod 1234-..., container abcd"; "" if none.
  std::string Describe() const;
  bool operator==(const ServiceTarget& o) const {
    return pid == o.pid && unit == o.unit && container == o.container && pod == o.pod;
  }
};

// When a rule drops (lossd.v1 Schedule): from start_after after creation, in
// pulses of `active` then `dormant` (both or neither), `cycles` of them (0:
// until the TTL). Enforced per packet on the data plane's clock.
struct Schedule {
  std::chrono::nanoseconds start_after{0}, active{0}, dormant{0};
  uint32_t cycles = 0;
  bool Any() const { return start_after.count() || active.count(); }
  bool Pulse() const { return active.count() > 0; }
  std::chrono::nanoseconds Period() const { return active + dormant; }
  // From the origin (start_after after creation) to the end of the last
  // active window; 0 when it has no end of its own (no cycles).
  std::chrono::nanoseconds Span() const {
    return cycles ? Period() * cycles - dormant : std::chrono::nanoseconds(0);
  }
  // "start after 2s, pulse 200ms on / 800ms off x10"; "" when none.
  std::string Describe() const;
};
constexpr int64_t kMinPulseNs = 1000000;             // 1 ms
constexpr int64_t kMaxPulseNs = 86400LL * 1000000000;  // 1 day
constexpr uint32_t kMaxPulseCycles = 1000000;

// When a rule stops itself (lossd.v1 Guard; docs/guards.md): on a stall
// longer than `stall` of a flow that resent a segment it dropped, on more
// than `rtos` RTOs of such resends within `rtos_window`, on more than
// `resends` such resends of any type within `resends_window`, or on more
// than `resets` such flows ending in a reset or an abort within
// `resets_window` (one count condition: the kernel keeps one ring of times),
// or on such a flow resending more than `retrans` of the data segments it
// sent within `retrans_window` (judged at its resends, over 50 segments at
// least).
// With watch_port the conditions judge the flows with that port at either
// end instead ("the health check on 8080"). Decided in the kernel.
struct Guard {
  std::chrono::nanoseconds stall{0};        // 0: no stall condition
  // The stalls it counts by cause, as their resends so far give it: "" any,
  // "rto", "tlp", "fast_recovery" or "zero_window" (kGuardStallCauses).
  std::string stall_cause;
  uint32_t rtos = 0;                        // "more than" this many ...
  std::chrono::nanoseconds rtos_window{0};  // ... within this; 0: no RTO condition
  uint32_t resends = 0;                        // the same over every resend ...
  std::chrono::nanoseconds resends_window{0};  // ... 0: no resend condition
  uint32_t resets = 0;                         // ... over flows reset or aborted
  std::chrono::nanoseconds resets_window{0};   // ... 0: no reset condition
  double retrans = 0;                          // a flow's retransmit share above this ...
  std::chrono::nanoseconds retrans_window{0};  // ... over this; 0: no share condition
  uint32_t watch_port = 0;                     // 1 .. 65535; 0: the flows it dropped from
  // The rule's own measured loss above its configured rate's 99.9 % interval
  // (a Bernoulli rate or a ramp's steps; judged by lossd, not the kernel).
  bool misbehaves = false;
  // A condition the observer's program decides (all but misbehaves).
  bool InKernel() const {
    return stall.count() > 0 || rtos_window.count() > 0 || resends_window.count() > 0 ||
           resets_window.count() > 0 || retrans_window.count() > 0;
  }
  bool Any() const { return InKernel() || misbehaves; }
  // "stall>500ms,rtos>5/2s" (what ParseGuard reads back); "" when none.
  std::string Text() const;
  // "stop on a stall > 500ms or > 5 RTOs in 2s"; "" when none.
  std::string Describe() const;
  bool operator==(const Guard& o) const {
    return stall == o.stall && rtos == o.rtos && rtos_window == o.rtos_window &&
           resends == o.resends && resends_window == o.resends_window && resets == o.resets &&
           resets_window == o.resets_window && retrans == o.retrans &&
           retrans_window == o.retrans_window && watch_port == o.watch_port &&
           misbehaves == o.misbehaves && stall_cause == o.stall_cause;
  }
};
constexpr const char* kGuardStallCauses[] = {"rto", "tlp", "fast_recovery", "zero_window"};
constexpr int64_t kMinGuardNs = 1000000;               // 1 ms
constexpr int64_t kMaxGuardNs = 3600LL * 1000000000;   // 1 h
constexpr uint32_t kMaxGuardRtos = LOSS_GUARD_RING - 1;

struct RuleSpec {
  // Target.
  std::string iface;      // interface name; required unless a cgroup or a service is named
  std::string cgroup;     // cgroup v2 path (absolute, or relative to the v2 mount)
  ServiceTarget service;  // or a service's cgroup (never both)
  Hook hook = Hook::kAuto;
  Direction dir = Direction::kIngress;
  // Match (any subset).
  std::optional<Cidr> src, dst;
  PortRange sport, dport;
  int l4proto = 0;  // 0 any, 6 tcp, 17 udp, 1 icmp, 58 icmpv6
  uint8_t tcp_flags_mask = 0, tcp_flags_value = 0;
  int payload = LOSS_PAYLOAD_ANY;
  int family = 0;  // 0 any, 4, 6 (implied by addresses)
  // Loss: which packets the model picks, and what the action does to them.
  LossModel model;
  Action action = Action::kDrop;
  std::optional<uint64_t> seed;
  uint32_t priority = 0;
  std::chrono::nanoseconds ttl{0};  // 0 = no expiry
  // A TTL was given (ttl 0 included: "until deleted", asked for). Without
  // one the daemon gives its --default-ttl.
  bool ttl_given = false;
  Schedule schedule;                // when it drops (none: always, while it lives)
  Guard guard;                      // when it stops itself (none: never)
  bool per_segment = false;         // make each skb one wire segment on the interface
  // When the interface is deleted the rule is FAILED; with reattach it
  // attaches again to the next interface of that name (not for hook cgroup).
  bool reattach = false;
  // The user's own: labels to find the rule by, and force (skip host protection).
  std::map<std::string, std::string> labels;
  bool force = false;
};

constexpr uint32_t kMaxPriority = 1000000;

// What to check on a live rule that has matched no packet in `age` (the most
// common mistake: the wrong direction or interface, or a port on the wrong
// side), for its listing: "matched no packet in 42s: ...". `cgroup`: the
// cgroup its target resolved to ("" for an interface rule).
std::string UnmatchedHint(const RuleSpec& s, const std::string& cgroup,
                          std::chrono::nanoseconds age);

// A whole decimal number, digits only (no sign, space or prefix), lo..hi:
// the one strict parser of record lines, query strings and the parsers
// below. False (out untouched) for anything else, overflow included.
bool ParseDecimal(const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out);

// Parsers: each returns kInvalidArgument with a message naming the input.
// Every parser takes at most kMaxInputLength characters. The accepted
// spellings are the ones lossd, lossctl and the Python client (units.py,
// spec.py) all take; tests/vectors/rule_parsers.json holds them, and both
// languages' tests run it.
constexpr size_t kMaxInputLength = 256;

// "10.0.0.0/24", "2001:db8::/32", "192.0.2.7" (a host); host bits must be 0.
Result<Cidr> ParseCidr(const std::string& text);
// "8080", "8000-8100", "8000:8100" (spaces allowed around the separator).
Result<PortRange> ParsePortRange(const std::string& text);
// A number (digits with an optional '.', an optional exponent e[+-]N of up
// to 3 digits, an optional leading sign) alone (a fraction: "0.01", "1e-4"),
// or followed by "%" or "ppm": "1%", "0.005%", "50ppm". Converted exactly
// (the double nearest the decimal value). Must lie within [0, 1].
Result<double> ParseRate(const std::string& text);
// tcp udp icmp icmpv6 (icmp6, ipv6-icmp) any (all, empty) or 0-255; any case.
Result<int> ParseProtocol(const std::string& text);
// "SYN", "SYN,!ACK", "syn|ack", "syn+ack", "syn !ack": names of
// kTcpFlagNames in any case, separated by , | + or spaces; set flags must be
// set, "!" flags must be clear.
Status ParseTcpFlags(const std::string& text, uint8_t* mask, uint8_t* value);
// A sum of parts NUMBER UNIT, units ns us (µs) ms s (sec) m (min) h d, any
// case, spaces allowed: "500ms", "30s", "2m30s", "1h 5m", "1d"; or a plain
// number of seconds ("30", "0.5"). Each part is rounded to the nanosecond
// (half to even); the sum must not exceed kMaxDurationSeconds.
Result<std::chrono::nanoseconds> ParseDuration(const std::string& text);
constexpr int64_t kMaxDurationSeconds = 30LL * 366 * 86400;  // 30 years
// An exact spelling ParseDuration reads back: the largest unit that divides
// it ("1500ms", "2m", "0s").
std::string DurationText(std::chrono::nanoseconds d);
// A fraction as a guard writes it: 0.05 -> "5%" (what ParseRate reads back).
std::string ShareText(double fraction);
// "p,r,1-h,1-k" as netem's gemodel (rates as above; r, 1-h, 1-k optional with
// netem's defaults r = 1-p, 1-h = 1, 1-k = 0).
Result<LossModel> ParseGilbertElliott(const std::string& text);
// netem's 4-state Markov loss "p13[,p31[,p32[,p23[,p14]]]]" (its "loss state"
// order; rates as above), with netem's defaults for those omitted: p31 = 1 - p13,
// p32 = 0, p23 = 1, p14 = 0. The chain must pass CheckMarkov.
Result<LossModel> ParseMarkov(const std::string& text);
// A Markov4 chain lossd can run: each probability within [0, 1], p13 + p14 <= 1,
// p31 + p32 <= 1, and states 3 and 2 can be left (p13 > 0 needs p31 > 0, p32 > 0
// needs p23 > 0).
Status CheckMarkov(const LossModel& m);
// A policer "RATE,BURST[,SCOPE]" ('/' for ',' too; spaces allowed), e.g.
// "50mbit,64kib" or "50mbit,64kib,flow". SCOPE, any case: rule (the default: one
// bucket for the rule) or flow (one bucket per flow: police_per_flow).
// RATE a number with tc's rate units, any case: bit kbit mbit gbit tbit (bits per
// second, x1000 each) or bps kbps mbps gbps (bytes per second, x1000 each); a bare
// number is refused. BURST a number of bytes, bare or with b, k (kb, kib), m (mb,
// mib), g (gb, gib), x1024 each, any case. Decimal fractions are rounded to whole
// bits per second and bytes (half to even); CheckPolice's bounds hold.
Result<LossModel> ParsePolice(const std::string& text);
// rate_bps kMinPoliceBps .. kMaxPoliceBps, burst_bytes 1 .. kMaxPoliceBurst.
Status CheckPolice(const LossModel& m);
// What ParsePolice reads back, in the largest unit that divides it exactly:
// 50000000 -> "50mbit", 65536 -> "64kib", 1500 -> "1500b".
std::string BitRateText(uint64_t bits_per_second);
std::string ByteSizeText(uint64_t bytes);
// A policer as ParsePolice reads it back: "50mbit,64kib", "50mbit,64kib,flow".
std::string PoliceText(uint64_t rate_bps, uint64_t burst_bytes, bool per_flow);
inline std::string PoliceText(const LossModel& m) {
  return PoliceText(m.rate_bps, m.burst_bytes, m.police_per_flow);
}
// A pulse "ACTIVE/DORMANT" (durations as above, e.g. "200ms/800ms"), each
// kMinPulseNs .. kMaxPulseNs.
Status ParsePulse(const std::string& text, Schedule* out);
// A ramp "RATE/DURATION,RATE/DURATION,..." (rates and durations as above,
// e.g. "0.1%/2s,1%/2s,5%/2s"): 1 .. kMaxRampSteps steps, each kMinPulseNs ..
// kMaxPulseNs long.
Result<std::vector<RampStep>> ParseRamp(const std::string& text);
// A ramp model's steps within those bounds.
Status CheckRamp(const LossModel& m);
// Guard conditions, comma-separated: "stall>DURATION" (or "stall(CAUSE)>..."), "rtos>N/WINDOW" (or
// "resends>N/WINDOW", "resets>N/WINDOW"), "retrans>RATE/WINDOW", "misbehaves"
// and "watch=PORT"
// (e.g. "stall>500ms,rtos>5/2s"); durations kMinGuardNs .. kMaxGuardNs, N
// 0 .. kMaxGuardRtos; each kind at most once.
Status ParseGuard(const std::string& text, Guard* out);
// Enumerations, any case, with or without the lossd.v1 enum prefix
// ("HOOK_", "DIRECTION_", "PAYLOAD_"); the empty string is the default.
Result<Hook> ParseHook(const std::string& text);            // auto xdp tc cgroup
Result<Direction> ParseDirection(const std::string& text);  // ingress (in) egress (out) both
Result<int> ParsePayload(const std::string& text);          // any only none: LOSS_PAYLOAD_*
// drop corrupt corrupt-payload duplicate ecn ecn-pass ('_' for '-', "ACTION_" prefix)
Result<Action> ParseAction(const std::string& text);
Result<int> ParseFamily(
    const std::string& text);  // 4 (ipv4, inet) 6 (ipv6, inet6) any (0): 0, 4, 6

// The TCP flag names, bit i of the TCP flags byte at index i.
extern const char* const kTcpFlagNames[8];
// mask/value as ParseTcpFlags reads them: "syn,!ack" (bit order); "" for none.
std::string TcpFlagsText(uint8_t mask, uint8_t value);
// 6 -> "tcp", 17 -> "udp", 1 -> "icmp", 58 -> "icmpv6", 0 -> "", else the number.
std::string ProtocolName(int proto);

// `s` without leading and trailing whitespace.
std::string TrimSpace(const std::string& s);

const char* HookName(Hook hook);
const char* DirectionName(Direction dir);
const char* PayloadName(int payload);  // "any", "only", "none"
const char* ActionName(Action action);  // "drop", "corrupt", "corrupt-payload", ...
// What the action's count of packets is called: "corrupted", "duplicated",
// "marked" ("dropped" for kDrop).
const char* ActedName(Action action);

// The rule targets a cgroup: a path, or a service resolved to one.
inline bool NamesCgroup(const RuleSpec& s) {
  return !s.cgroup.empty() || s.service.Any();
}

// A rule with a timeline of its own on the data plane's clock (a schedule,
// or a ramp's steps): its origin is fixed at creation (AddLocked).
inline bool HasTimeline(const RuleSpec& s) {
  return s.schedule.Any() || s.model.kind == LossModel::Kind::kRamp;
}
// From that origin to its end (the last active window, or the last ramp
// step); 0: no end of its own.
inline std::chrono::nanoseconds TimelineSpan(const RuleSpec& s) {
  return s.model.kind == LossModel::Kind::kRamp ? s.model.RampSpan() : s.schedule.Span();
}

// Checks a rule for consistency. Does not look at the kernel (interfaces
// and cgroups are resolved by the injector).
Status Validate(const RuleSpec& spec);
// A guard's bounds (Validate checks a rule's; a scenario's guard too).
Status CheckGuard(const Guard& g);

// INVALID_ARGUMENT naming `what` if `text` holds a NUL or another control
// character (below 0x20, or 0x7f): the kernel and the C library stop at a NUL,
// so "v0\0 decoy" would act on v0 while every listing showed something else.
// Every name and label a client gives passes here.
Status CheckNoControlChars(const std::string& what, const std::string& text);

}  // namespace lossd
