// Cause beside effect: attributes every retransmission the observer sees to
// the rules whose match covers its flow, so a rule's drops can be shown next
// to the retransmissions (by type) on the flows it matched. Learns of rules
// from their owner (the injector, as its RuleListener), of retransmissions,
// stalls and closing flows from its own hub subscription; keeps per-rule
// totals and a per-flow cache.
//
// Cause and effect, drop by drop: a resend (or a stall's hole) is linked to
// the newest drop in the injector's drop log (Injector::DropsOf) whose
// sequence range covers it; the link gives the rule its recovery times and
// the stalls it caused (docs/architecture.md#drops-to-effects).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "injector/injector.h"
#include "observer/diagnosis.h"
#include "observer/observer.h"
#include "rules/rule.h"

namespace lossd {

// A distribution of durations over fixed bucket bounds (kBoundsNs: 100 us
// .. 10 s in 1-2-5 steps); counts[i] holds values <= kBoundsNs[i] and above
// the bound before, the last count the rest (the proto's Durations).
struct DurationHist {
  static constexpr size_t kBounds = 16;
  static const std::array<uint64_t, kBounds> kBoundsNs;
  uint64_t count = 0, sum_ns = 0, max_ns = 0;
  std::array<uint64_t, kBounds + 1> counts{};
  void Add(uint64_t ns);
};

struct StallTotal {
  uint64_t count = 0, time_ns = 0;
};

// Where the time of flows went: busy, its parts (Limit), idle (FlowLimits).
struct LimitTotals {
  uint64_t busy_ns = 0, idle_ns = 0;
  std::array<uint64_t, static_cast<size_t>(Limit::kCount)> within_busy_ns{};
  void Add(const FlowLimits& l);
};

// What flows answered, summed (lossd.v1 RuleEffect.ca_entries, ece_acks,
// dsacked_copies): their congestion state entries, ECN echoes received, and
// the D-SACKed copies they never resent.
struct FlowAnswers {
  std::array<uint64_t, OBS_CA_STATES> ca_entries{};
  uint64_t ece_acks = 0, dsacked_copies = 0;
  void Add(const obs_flow& f);
};

struct RuleEffectTotals {
  std::array<uint64_t, OBS_RTX_MAX> segs{};  // sent or failed after counting
  // Socket cookies of the flows it covered: closed ones (Effect() adds the
  // open ones) and those a resend counted here came from.
  std::set<uint64_t> flows;
  // Sent resends linked to one of the rule's drops, by obs_rtx_type: drop
  // to resend time.
  std::array<DurationHist, OBS_RTX_MAX> recovery{};
  std::array<uint64_t, OBS_RTX_MAX> resent_dropped{};  // the same resends, in segments
  // Resent segments of its flows the receiver D-SACKed (needless: the data
  // had arrived), by the type of the resend they match, credited to the
  // rules that counted that resend (unknown: the resend is not kept; then
  // to the rules covering the flow or ended lately).
  std::array<uint64_t, OBS_RTX_MAX> dsacked{};
  // Stalls (by obs_stall_cause) whose hole one of the rule's drops covers,
  // and every stall on the flows the rule matched.
  std::array<StallTotal, OBS_STALL_MAX> stalls_caused{}, stalls_on_flows{};
  LimitTotals limits;  // the matched flows that closed (Effect() adds the open ones)
  FlowAnswers answers;  // the same flows'
};

// One drop from the injector's drop log (loss_drop_range).
struct DropRecord {
  uint32_t rule_id = 0;
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC (bpf_ktime_get_ns)
  uint32_t seq = 0;      // first sequence number of the dropped skb
  uint32_t len = 0;      // payload bytes
  uint32_t segs = 0;     // wire segments
};
// One range of the drop log as a DropRecord.
DropRecord DropOf(const loss_drop_range& r);

// The newest of `d`'s kept ranges that covers `seq` (mod 2^32) and was
// dropped at or before `at_or_before_ns`.
std::optional<DropRecord> NewestCovering(const FlowDrops& d, uint32_t seq,
                                         uint64_t at_or_before_ns);
// The drop log's key of the data a flow sends: local -> remote.
loss_drop_key SentDropKey(const obs_tuple& t);

// A rule's drops held against its configured rate, and what they caused.
// One ramp step's measured rate against its own (lossd.v1 StepEffect).
struct StepEffect {
  double configured = 0, measured = 0, ci_low = 0, ci_high = 1;
  bool configured_within_ci = false;
  uint64_t start_offset_ns = 0, duration_ns = 0;  // from the rule's origin
  StepCounters counts;
};

struct RuleEffect {
  double configured = 0;           // the model's mean rate (first-k: expected / matched, or 0)
  double measured = 0;             // dropped / matched packets
  double ci_low = 0, ci_high = 1;  // 99.9 % interval of the per-skb drop rate
  // Random models: the configured rate lies in the interval. Deterministic ones:
  // the drops equal the expectation.
  bool configured_within_ci = false;
  bool deterministic = false;  // first-k, every-n-th: an expected count, not a rate
  std::optional<Injector::Expectation> expectation;  // deterministic, and stated (injector.h)
  RuleEffectTotals caused;      // retransmissions on the flows it matched
  uint64_t drops_recorded = 0;  // its dropped TCP skbs with payload in the drop log
  // A ramp: each step's (configured_within_ci then says all that matched are).
  std::vector<StepEffect> steps;
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
  // With the limits of the open flows it matches as of now (one read of the
  // observer's flows for all of `rules`).
  RuleEffect Effect(const RuleInfo& rule);
  std::vector<RuleEffect> Effects(const std::vector<RuleInfo>& rules);
  // The newest drop of any rule that covers `seq` in the data flow `t`
  // sends (local -> remote), dropped at or before `at_or_before_ns`.
  std::optional<DropRecord> DropCovering(const obs_tuple& t, uint32_t seq,
                                         uint64_t at_or_before_ns) const;
  // The drop that made a stall's hole: the one covering snd_una, else the one
  // its first resend repaired, dropped before the stall ended.
  std::optional<DropRecord> StallDrop(const obs_tuple& t, const obs_stall& st) const;
  // Rules covering a flow tuple (cached per cookie and tuple: a listener's
  // SYN-ACK events carry the listener's cookie with each client's tuple).
  std::vector<uint32_t> RulesFor(uint64_t cookie, const obs_tuple& t);
  // RulesFor and the rules that ended (expired, failed, deleted) in the last
  // minute and covered the flow: their drops' resends and stalls come after
  // them. What the streams show as rule_ids and a rule_id filter selects.
  std::vector<uint32_t> RulesShownFor(uint64_t cookie, const obs_tuple& t);
  // The drop that made a stall's hole, if the rules covering its flow
  // (RulesShownFor) may have made one.
  std::optional<DropRecord> StallCause(const std::vector<uint32_t>& shown, const obs_tuple& t,
                                       const obs_stall& st) const;
  uint64_t lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sub_ ? sub_->lost() : 0;
  }

  // A flow's sent resends as kept to match its D-SACKs.
  static constexpr size_t kResendsKept = 64;
  struct Resend {
    uint32_t seq = 0, len = 0;  // [seq, seq + len): segs * mss
    uint32_t type = OBS_RTX_UNKNOWN;
    std::vector<uint32_t> rules;  // those that counted it (covering, or its drop's)
  };
  // The newest of `kept` whose range overlaps [start, end) (mod 2^32); null
  // if none does.
  static const Resend* ResendDsacked(const std::vector<Resend>& kept, uint32_t start,
                                     uint32_t end);

 private:
  void Run();
  void OnRetransmit(const obs_event& ev);
  void OnStall(const obs_event& ev, const obs_stall& st);
  void OnClose(const obs_close_event& c);
  void OnDsack(const obs_event& ev, uint32_t end_seq);
  // Whether a resend or stall of a flow that `ids` cover may be linked to a
  // drop: some rule covers it, or one retired lately (its last drops' resends
  // come after).
  bool MayLink(const std::vector<uint32_t>& ids) const;

  Injector* inj_;
  Observer* obs_ = nullptr;  // set once (constructor or AttachObserver)
  std::shared_ptr<Subscription> sub_;
  mutable std::mutex mu_;
  std::map<uint32_t, RuleSpec> rules_;  // the live ones
  // Those that ended lately: spec, CLOCK_MONOTONIC of their end (RulesShownFor).
  std::map<uint32_t, std::pair<RuleSpec, uint64_t>> ended_;
  uint64_t generation_ = 0;
  struct CacheEntry {
    uint64_t generation;
    obs_tuple tuple;
    std::vector<uint32_t> rules;
  };
  std::unordered_map<uint64_t, CacheEntry> cache_;
  // Per flow (cookie) some rule covers, its last kResendsKept sent resends:
  // what a D-SACK is matched to. Dropped at the close.
  std::unordered_map<uint64_t, std::vector<Resend>> resends_;  // oldest first
  std::map<uint32_t, RuleEffectTotals> totals_;
  uint64_t retired_ns_ = 0;  // CLOCK_MONOTONIC of the last RuleRetired
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lossd
