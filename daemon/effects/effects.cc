#include "effects/effects.h"

#include <cstring>

#include "rules/match.h"
#include "rules/model.h"

namespace lossd {

EffectTracker::EffectTracker(Injector* inj, Observer* obs) : inj_(inj) {
  for (const RuleInfo& r : inj_->Rules())
    if (!r.expired && r.failed.empty()) rules_[r.id] = r.spec;
  inj_->SetListener(this);
  if (obs) AttachObserver(obs);
}

void EffectTracker::AttachObserver(Observer* obs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (obs_ || !obs) return;
  obs_ = obs;
  sub_ = obs_->hub().Subscribe(1 << 18);
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
  generation_++;
  if (cache_.size() > 65536) cache_.clear();
}

void EffectTracker::RuleRetired(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.erase(id);
  generation_++;
}

void EffectTracker::RuleForgotten(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rules_.erase(id)) generation_++;
  totals_.erase(id);
}

RuleEffect EffectTracker::Effect(const RuleInfo& rule) const {
  RuleEffect e;
  const RuleCounters& c = rule.counters;
  e.configured = ModelMeanLoss(rule.spec.model);
  e.measured = c.matched_segs ? double(c.dropped_segs) / double(c.matched_segs) : 0;
  // The interval comes from skbs: each skb is dropped with the configured
  // probability, whole, so its segments are not independent trials.
  WilsonInterval(c.dropped_pkts, c.matched_pkts, &e.ci_low, &e.ci_high);
  e.configured_within_ci =
      e.configured >= 0 && e.ci_low <= e.configured && e.configured <= e.ci_high;
  e.caused = Totals(rule.id);
  return e;
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
    if (ev.kind != OBS_EV_RETRANSMIT) {
      if (ev.kind == OBS_EV_FLOW_CLOSE) {
        std::lock_guard<std::mutex> lock(mu_);
        cache_.erase(ev.cookie);
      }
      continue;
    }
    if (ev.outcome != OBS_SENT && ev.outcome != OBS_FAILED) continue;
    auto ids = RulesFor(ev.cookie, ev.tuple);
    if (ids.empty()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t id : ids) {
      if (!rules_.count(id)) continue;  // forgotten since the look-up
      auto& t = totals_[id];
      if (ev.type < OBS_RTX_MAX) t.segs[ev.type] += ev.segs;
      t.flows.insert(ev.cookie);
    }
  }
}

}  // namespace lossd
