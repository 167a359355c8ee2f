#include "service/effects.h"

#include "service/convert.h"

namespace lossd {

EffectTracker::EffectTracker(Observer* obs) : obs_(obs) {
  if (!obs_) return;
  sub_ = obs_->hub().Subscribe(1 << 18);
  thread_ = std::thread([this] { Run(); });
}

EffectTracker::~EffectTracker() {
  stop_ = true;
  if (sub_) obs_->hub().Unsubscribe(sub_);
  if (thread_.joinable()) thread_.join();
}

void EffectTracker::SetRules(const std::map<uint32_t, RuleSpec>& rules) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_ = rules;
  generation_++;
  for (auto it = totals_.begin(); it != totals_.end();)
    it = rules_.count(it->first) ? std::next(it) : totals_.erase(it);
  if (cache_.size() > 65536) cache_.clear();
}

std::vector<uint32_t> EffectTracker::RulesFor(uint64_t cookie, const obs_tuple& t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(cookie);
  if (it != cache_.end() && it->second.generation == generation_) return it->second.rules;
  std::vector<uint32_t> ids;
  for (const auto& [id, spec] : rules_)
    if (RuleCoversFlow(spec, t)) ids.push_back(id);
  cache_[cookie] = CacheEntry{generation_, ids};
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
      auto& t = totals_[id];
      if (ev.type < OBS_RTX_MAX) t.segs[ev.type] += ev.segs;
      t.flows.insert(ev.cookie);
    }
  }
}

}  // namespace lossd
