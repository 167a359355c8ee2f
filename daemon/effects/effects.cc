#include "effects/effects.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "base/clock.h"
#include "rules/match.h"
#include "rules/model.h"

namespace lossd {

namespace {
constexpr uint64_t kMs = 1000000;
// A rule retired this recently may still see its last drops resent.
constexpr uint64_t kLinkAfterRetireNs = 60000 * kMs;
}  // namespace

const std::array<uint64_t, DurationHist::kBounds> DurationHist::kBoundsNs = {
    kMs / 10, kMs / 5,   kMs / 2,   kMs,       2 * kMs,    5 * kMs,    10 * kMs,   20 * kMs,
    50 * kMs, 100 * kMs, 200 * kMs, 500 * kMs, 1000 * kMs, 2000 * kMs, 5000 * kMs, 10000 * kMs};

void DurationHist::Add(uint64_t ns) {
  count++;
  sum_ns += ns;
  max_ns = std::max(max_ns, ns);
  size_t i = std::lower_bound(kBoundsNs.begin(), kBoundsNs.end(), ns) - kBoundsNs.begin();
  counts[i]++;
}

void LimitTotals::Add(const FlowLimits& l) {
  busy_ns += l.busy_ns;
  idle_ns += l.idle_ns;
  for (size_t i = 0; i < within_busy_ns.size(); i++) within_busy_ns[i] += l.within_busy_ns[i];
}

void FlowAnswers::Add(const obs_flow& f) {
  for (size_t i = 0; i < ca_entries.size(); i++) ca_entries[i] += f.ca_entries[i];
  ece_acks += f.ece_acks;
  dsacked_copies += f.dsack_copy_segs;
}

std::optional<DropRecord> NewestCovering(const FlowDrops& d, uint32_t seq,
                                         uint64_t at_or_before_ns) {
  for (auto it = d.ranges.rbegin(); it != d.ranges.rend(); ++it) {
    if (it->time_ns > at_or_before_ns) continue;
    if (uint32_t(seq - it->seq) >= it->len) continue;  // mod 2^32
    return DropOf(*it);
  }
  return std::nullopt;
}

DropRecord DropOf(const loss_drop_range& d) {
  DropRecord r;
  r.rule_id = d.rule_id;
  r.time_ns = d.time_ns;
  r.seq = d.seq;
  r.len = d.len;
  r.segs = d.segs;
  return r;
}

loss_drop_key SentDropKey(const obs_tuple& t) {
  return DropKey(t.family, t.saddr, t.sport, t.daddr, t.dport);
}

EffectTracker::EffectTracker(Injector* inj, Observer* obs) : inj_(inj) {
  for (const RuleInfo& r : inj_->Rules())
    if (!r.expired && !r.deleted && r.failed.empty()) {
      rules_[r.id] = r.spec;
      totals_[r.id];
    }
  inj_->SetListener(this);
  if (obs) AttachObserver(obs);
}

void EffectTracker::AttachObserver(Observer* obs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (obs_ || !obs) return;
  obs_ = obs;
  // Not the ACK samples of traced flows: they would only take room here.
  SubscribeOptions o;
  o.queue = 1 << 18;
  o.kinds = KindBit(OBS_EV_RETRANSMIT) | KindBit(OBS_EV_STALL) | KindBit(OBS_EV_FLOW_CLOSE) |
            KindBit(OBS_EV_DSACK);
  sub_ = *obs_->hub().Subscribe(std::move(o));  // in-process: never refused
  thread_ = std::thread([this] { Run(); });
}

EffectTracker::~EffectTracker() {
  inj_->SetListener(nullptr);
  stop_ = true;
  if (sub_) obs_->hub().Unsubscribe(sub_);
  if (thread_.joinable()) thread_.join();
}

void EffectTracker::RulePublished(uint32_t id, const RuleSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_[id] = spec;
  ended_.erase(id);
  totals_[id];  // known until forgotten: a retired rule's drops still link
  generation_++;
  if (cache_.size() > 65536) cache_.clear();
}

void EffectTracker::RuleRetired(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ns_ = MonotonicNs();
  auto it = rules_.find(id);
  if (it != rules_.end()) {
    ended_[id] = {it->second, retired_ns_};
    rules_.erase(it);
  }
  generation_++;
}

void EffectTracker::RuleForgotten(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rules_.erase(id)) generation_++;
  ended_.erase(id);
  totals_.erase(id);
}

RuleEffect EffectTracker::Effect(const RuleInfo& rule) {
  return Effects({rule}).front();
}

std::vector<RuleEffect> EffectTracker::Effects(const std::vector<RuleInfo>& rules) {
  std::vector<RuleEffect> out;
  out.reserve(rules.size());
  std::map<uint32_t, size_t> index;
  for (const RuleInfo& rule : rules) {
    RuleEffect e;
    const RuleCounters& c = rule.counters;
    e.configured = ModelMeanLoss(rule.spec.model);
    // The trial is the skb, the unit the decision is made on (docs/
    // architecture.md#measured-rate): each is dropped whole with the configured probability, so
    // its segments are not independent trials (a per-segment rule's skbs are one
    // segment each). The rate and its interval both count skbs.
    // (Another action than drop: the packets its model picked.)
    e.measured = c.matched_pkts ? double(c.picked_pkts()) / double(c.matched_pkts) : 0;
    WilsonInterval(c.picked_pkts(), c.matched_pkts, &e.ci_low, &e.ci_high);
    e.configured_within_ci =
        e.configured >= 0 && e.ci_low <= e.configured && e.configured <= e.ci_high;
    // First-k and every-n-th drop by count: held against what the model drops of
    // the packets each flow sent, exactly.
    e.deterministic = ModelIsDeterministic(rule.spec.model);
    if (e.deterministic) {
      e.expectation = inj_->ExpectedDrops(rule.id);
      // Unknown (traffic moving as the counts were read): every-n-th falls back to
      // its rate's interval; first-k, which has no rate, stays unconfirmed.
      if (e.expectation) e.configured_within_ci = e.expectation->expected == e.expectation->dropped;
      if (e.configured < 0)
        e.configured = e.expectation && e.expectation->matched
                           ? double(e.expectation->expected) / double(e.expectation->matched)
                           : 0;
    }
    if (rule.spec.model.kind == LossModel::Kind::kRamp) {
      // Each step is a Bernoulli rule of its own: its rate in its own interval.
      // The whole's mean is a mixture (its weights are the traffic's), so the
      // verdict is the steps': every step that matched holds its rate.
      uint64_t at = 0;
      bool all = true, any = false;
      const auto& steps = rule.spec.model.steps;
      for (size_t i = 0; i < steps.size(); i++) {
        StepEffect se;
        se.configured = steps[i].rate;
        se.start_offset_ns = at;
        se.duration_ns = uint64_t(steps[i].duration.count());
        at += se.duration_ns;
        if (i < rule.step_counters.size()) se.counts = rule.step_counters[i];
        const StepCounters& sc = se.counts;
        se.measured = sc.matched_pkts ? double(sc.dropped_pkts) / double(sc.matched_pkts) : 0;
        WilsonInterval(sc.dropped_pkts, sc.matched_pkts, &se.ci_low, &se.ci_high);
        se.configured_within_ci = se.ci_low <= se.configured && se.configured <= se.ci_high;
        if (sc.matched_pkts) {
          any = true;
          all = all && se.configured_within_ci;
        }
        e.steps.push_back(se);
      }
      e.configured_within_ci = any && all;
    }
    e.caused = Totals(rule.id);
    e.drops_recorded = c.logged_pkts;
    index[rule.id] = out.size();
    out.push_back(std::move(e));
  }
  // The open flows' limits and answers as of now, added to the rules that cover them.
  Observer* obs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    obs = obs_;
  }
  if (!obs || rules.empty()) return out;
  uint64_t now = MonotonicNs();
  for (const ObsFlow& f : obs->Flows()) {
    std::vector<uint32_t> ids = RulesFor(f.cookie, f.flow.tuple);
    if (ids.empty()) continue;
    FlowLimits l = LimitsOf(f.flow, now > f.flow.opened_ns ? now - f.flow.opened_ns : 0);
    for (uint32_t id : ids) {
      auto it = index.find(id);
      if (it == index.end()) continue;
      out[it->second].caused.limits.Add(l);
      out[it->second].caused.answers.Add(f.flow);
      out[it->second].caused.flows.insert(f.cookie);
    }
  }
  return out;
}

std::vector<uint32_t> EffectTracker::RulesFor(uint64_t cookie, const obs_tuple& t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(cookie);
  if (it != cache_.end() && it->second.generation == generation_ &&
      std::memcmp(&it->second.tuple, &t, sizeof(t)) == 0)
    return it->second.rules;
  std::vector<uint32_t> ids;
  for (const auto& [id, spec] : rules_)
    if (RuleCoversFlow(spec, t)) ids.push_back(id);
  cache_[cookie] = CacheEntry{generation_, t, ids};
  return ids;
}

std::vector<uint32_t> EffectTracker::RulesShownFor(uint64_t cookie, const obs_tuple& t) {
  std::vector<uint32_t> ids = RulesFor(cookie, t);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t now = MonotonicNs();
  for (auto it = ended_.begin(); it != ended_.end();) {
    if (now - it->second.second >= kLinkAfterRetireNs) {
      it = ended_.erase(it);
      continue;
    }
    if (RuleCoversFlow(it->second.first, t)) ids.push_back(it->first);
    ++it;
  }
  return ids;
}

std::optional<DropRecord> EffectTracker::StallCause(const std::vector<uint32_t>& shown,
                                                    const obs_tuple& t,
                                                    const obs_stall& st) const {
  if (!MayLink(shown)) return std::nullopt;
  return StallDrop(t, st);
}

std::optional<DropRecord> EffectTracker::DropCovering(const obs_tuple& t, uint32_t seq,
                                                      uint64_t at_or_before_ns) const {
  auto d = inj_->DropsOf(SentDropKey(t));
  if (!d.ok()) return std::nullopt;
  return NewestCovering(*d, seq, at_or_before_ns);
}

std::optional<DropRecord> EffectTracker::StallDrop(const obs_tuple& t, const obs_stall& st) const {
  uint64_t end = st.start_ns + st.duration_ns;
  auto drop = DropCovering(t, st.snd_una, end);
  if (!drop && st.rtx_type < OBS_RTX_MAX) drop = DropCovering(t, st.rtx_seq, end);
  return drop;
}

bool EffectTracker::MayLink(const std::vector<uint32_t>& ids) const {
  if (!ids.empty()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return retired_ns_ && MonotonicNs() - retired_ns_ < kLinkAfterRetireNs;
}

RuleEffectTotals EffectTracker::Totals(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = totals_.find(id);
  return it == totals_.end() ? RuleEffectTotals{} : it->second;
}

void EffectTracker::Run() {
  while (!stop_) {
    auto e = sub_->Next(std::chrono::milliseconds(200));
    if (!e) continue;
    const obs_event& ev = e->data.ev;
    switch (ev.kind) {
      case OBS_EV_RETRANSMIT: OnRetransmit(ev); break;
      case OBS_EV_STALL: OnStall(ev, e->As<obs_stall_event>().stall); break;
      case OBS_EV_FLOW_CLOSE: OnClose(e->data); break;
      case OBS_EV_DSACK: OnDsack(ev, e->As<obs_dsack_event>().end_seq); break;
      default: break;
    }
  }
}

void EffectTracker::OnRetransmit(const obs_event& ev) {
  if (ev.outcome != OBS_SENT && ev.outcome != OBS_FAILED) return;
  auto ids = RulesFor(ev.cookie, ev.tuple);
  // A resend that went out, of a range a rule dropped: linked to that drop.
  std::optional<DropRecord> drop;
  if (ev.outcome == OBS_SENT && ev.type < OBS_RTX_MAX && MayLink(ids))
    drop = DropCovering(ev.tuple, ev.seq, ev.time_ns);
  if (ids.empty() && !drop) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ev.outcome == OBS_SENT && ev.type < OBS_RTX_MAX) {
    // Kept for the D-SACK that may come: with the rules that count it.
    Resend r{ev.seq, ev.segs * std::max<uint32_t>(ev.st.mss, 1), ev.type, {}};
    for (uint32_t id : ids)
      if (rules_.count(id)) r.rules.push_back(id);
    if (drop && std::find(r.rules.begin(), r.rules.end(), drop->rule_id) == r.rules.end())
      r.rules.push_back(drop->rule_id);
    auto& kept = resends_[ev.cookie];
    if (kept.size() >= kResendsKept) kept.erase(kept.begin());
    kept.push_back(std::move(r));
  }
  bool counted = false;  // the linked rule's flows already counted this resend
  for (uint32_t id : ids) {
    if (!rules_.count(id)) continue;  // forgotten since the look-up
    auto& t = totals_[id];
    if (ev.type < OBS_RTX_MAX) t.segs[ev.type] += ev.segs;
    t.flows.insert(ev.cookie);
    counted |= drop && drop->rule_id == id;
  }
  auto linked = drop ? totals_.find(drop->rule_id) : totals_.end();
  if (linked == totals_.end()) return;
  RuleEffectTotals& t = linked->second;
  t.recovery[ev.type].Add(ev.time_ns - drop->time_ns);
  t.resent_dropped[ev.type] += ev.segs;
  // A resend of its drop is one on a flow it matched, also after the rule
  // ended (expired, deleted): what it caused is within what its flows did.
  if (!counted) {
    if (ev.type < OBS_RTX_MAX) t.segs[ev.type] += ev.segs;
    t.flows.insert(ev.cookie);
  }
}

void EffectTracker::OnStall(const obs_event& ev, const obs_stall& st) {
  if (st.cause >= OBS_STALL_MAX) return;
  auto ids = RulesFor(ev.cookie, ev.tuple);
  std::optional<DropRecord> drop;
  if (MayLink(ids)) drop = StallDrop(ev.tuple, st);
  std::lock_guard<std::mutex> lock(mu_);
  bool counted = false;
  for (uint32_t id : ids) {
    if (!rules_.count(id)) continue;
    auto& s = totals_[id].stalls_on_flows[st.cause];
    s.count++;
    s.time_ns += st.duration_ns;
    counted |= drop && drop->rule_id == id;
  }
  auto linked = drop ? totals_.find(drop->rule_id) : totals_.end();
  if (linked == totals_.end()) return;
  auto& s = linked->second.stalls_caused[st.cause];
  s.count++;
  s.time_ns += st.duration_ns;
  // The stall its drop made is one on a flow it matched, also after the rule
  // ended: stalls_on_flows holds every stall it caused.
  if (!counted) {
    auto& on = linked->second.stalls_on_flows[st.cause];
    on.count++;
    on.time_ns += st.duration_ns;
  }
}

const EffectTracker::Resend* EffectTracker::ResendDsacked(const std::vector<Resend>& kept,
                                                          uint32_t start, uint32_t end) {
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    // [a, a + n) and [start, end) overlap: each begins before the other ends.
    bool overlap = static_cast<int32_t>(it->seq - end) < 0 &&
                   static_cast<int32_t>(start - (it->seq + it->len)) < 0;
    if (overlap) return &*it;
  }
  return nullptr;
}

// A D-SACK: needless resends, credited to the rules that counted the resend
// it names (by its type); when that resend is not kept (sent when no rule
// covered the flow, e.g. the timer's after the rule ended, or not one of the
// flow's last kResendsKept), to the rules covering the flow or ended within
// the minute, as unknown.
void EffectTracker::OnDsack(const obs_event& ev, uint32_t end_seq) {
  std::vector<uint32_t> now = RulesShownFor(ev.cookie, ev.tuple);
  std::lock_guard<std::mutex> lock(mu_);
  auto kept = resends_.find(ev.cookie);
  const Resend* r = kept == resends_.end() ? nullptr : ResendDsacked(kept->second, ev.seq, end_seq);
  uint32_t type = r ? r->type : uint32_t(OBS_RTX_UNKNOWN);
  for (uint32_t id : r ? r->rules : now) {
    auto t = totals_.find(id);
    if (t != totals_.end()) t->second.dsacked[type] += ev.segs;
  }
}

void EffectTracker::OnClose(const obs_close_event& c) {
  auto ids = RulesFor(c.ev.cookie, c.flow.tuple);
  FlowLimits l =
      LimitsOf(c.flow, c.closed_ns > c.flow.opened_ns ? c.closed_ns - c.flow.opened_ns : 0);
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t id : ids) {
    if (!rules_.count(id)) continue;
    totals_[id].limits.Add(l);
    totals_[id].answers.Add(c.flow);
    totals_[id].flows.insert(c.ev.cookie);
  }
  cache_.erase(c.ev.cookie);
  resends_.erase(c.ev.cookie);
}

}  // namespace lossd
