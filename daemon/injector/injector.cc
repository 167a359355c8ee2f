#include "injector/injector.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/clock.h"
#include "base/address.h"
#include "base/log.h"
#include "injector/encode.h"
#include "rules/model.h"

namespace lossd {

void Injector::SetListener(RuleListener* listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = listener;
}

void Injector::Tick() {
  Reap();
  CheckAttachments();
  RenewLease();
}

void Injector::Reap() {
  std::lock_guard<std::mutex> lock(mu_);
  ReapLocked();
}

GuardStopInfo GuardStopInfo::Of(const struct loss_guard& g) {
  GuardStopInfo s;
  s.condition = g.reason == LOSS_GUARD_STALL     ? "stall"
                : g.reason == LOSS_GUARD_RTOS    ? "rtos"
                : g.reason == LOSS_GUARD_RESENDS ? "resends"
                : g.reason == LOSS_GUARD_RESETS  ? "resets"
                : g.reason == LOSS_GUARD_RETRANS ? "retrans"
                                                 : "";
  s.crossed_ns = g.crossed_ns;
  s.stopped_ns = g.stopped_ns;
  s.last_drop_ns = g.last_drop_ns;
  s.start_ns = g.evidence_start_ns;
  s.rtos = g.count;
  s.segs = g.segs;
  s.cookie = g.evidence_cookie;
  s.rule_id = g.evidence_rule;
  s.all = g.rule_id == 0;
  int af = g.flow.family == AF_INET6 ? AF_INET6 : AF_INET;
  auto end = [&](const uint32_t* a, uint16_t port) {
    std::string h = AddrText(af, a);
    return (af == AF_INET6 ? "[" + h + "]" : h) + ":" + std::to_string(port);
  };
  s.flow = end(g.flow.saddr, g.flow.sport) + " -> " + end(g.flow.daddr, g.flow.dport);
  return s;
}

std::string GuardStopInfo::Describe(const Guard& guard) const {
  auto ms = [](uint64_t a, uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f ms", (double(a) - double(b)) / 1e6);
    return std::string(buf);
  };
  std::string d = all ? "stopped by the daemon's guard (--guard-all " + guard.Text() + "): flow " +
                           flow + " (rule " + std::to_string(rule_id) + "'s drop)"
                     : "stopped by its guard (" + guard.Text() + "): " +
                           (guard.watch_port ? "watched " : "") + "flow " + flow;
  // whose events the count counted: the rule's drops, or the watched port's flows
  const std::string port = std::to_string(guard.watch_port);
  const std::string of = guard.watch_port ? "of port " + port + "'s flows" : "of its drops";
  auto within = [&](uint32_t n, std::chrono::nanoseconds w) {
    return " within " + ms(crossed_ns, start_ns) + " (more than " + std::to_string(n) + " in " +
           DurationText(w) + ")";
  };
  auto count = [&](const char* event, const char* what, uint32_t n, std::chrono::nanoseconds w) {
    return std::string(event) + " made " + std::to_string(rtos) + " " + what + " " + of +
           within(n, w);
  };
  if (condition == "stall")
    d += " delivered nothing for " + ms(crossed_ns, start_ns) + " (a stall past " +
         DurationText(guard.stall) + ")";
  else if (condition == "resends")
    d += count("'s resend", "resends", guard.resends, guard.resends_window);
  else if (condition == "resets")
    d += " was reset or aborted: " + std::to_string(rtos) + " of " +
         (guard.watch_port ? "port " + port + "'s flows" : "the flows it dropped from") +
         " ended in an error" + within(guard.resets, guard.resets_window);
  else if (condition == "retrans") {
    char share[96];
    std::snprintf(share, sizeof(share), "%.2f %% (%u of %u) of the data segments it sent within ",
                  segs ? 100.0 * rtos / segs : 0.0, rtos, segs);
    d += " resent " + std::string(share) + ms(crossed_ns, start_ns) + " (more than " +
         ShareText(guard.retrans) + " in " + DurationText(guard.retrans_window) + ")";
  } else
    d += count("'s RTO", "RTOs", guard.rtos, guard.rtos_window);
  d += "; the kernel stopped it " + ms(stopped_ns, crossed_ns) + " after that";
  if (last_drop_ns)
    d += last_drop_ns <= stopped_ns ? ", its last drop " + ms(stopped_ns, last_drop_ns) + " before"
                                    : ", its last drop " + ms(last_drop_ns, stopped_ns) + " after";
  return d;
}

// A live guarded rule its guard stopped in the kernel: retired as an expired
// rule is, STOPPED, with the guard's evidence.
bool Injector::GuardStoppedLocked(uint32_t id, Rule& rule) {
  const Guard& guard = rule.info.spec.guard;
  if (!rule.live || !guard.Any()) return false;
  if (!guard.InKernel()) return guard.misbehaves && MisbehavesLocked(id, rule);
  struct loss_guard g;
  auto found = maps_.ReadGuard(rule.slot, &g);
  if (!found.ok()) {
    LOG_WARN("rule %u: %s", id, found.status().message().c_str());
    return false;
  }
  // reason is written last: until then the evidence is not complete
  if (!*found || !g.stopped_ns || !g.reason || g.rule_id != id || g.generation != rule.generation)
    return guard.misbehaves && MisbehavesLocked(id, rule);
  rule.info.guard_stop = GuardStopInfo::Of(g);
  rule.info.note = rule.info.guard_stop.Describe(rule.info.spec.guard);
  LOG_INFO("rule %u %s", id, rule.info.note.c_str());
  guard_stops_++;
  return true;
}

// Judged from this many matched packets on (a step's, for a ramp).
constexpr uint64_t kMisbehaveMinMatched = 1000;

bool Injector::MisbehavesLocked(uint32_t id, Rule& rule) {
  struct Judged {
    double rate;
    uint64_t n, k;
    std::string what;
  };
  std::vector<Judged> judged;
  const LossModel& m = rule.info.spec.model;
  if (m.kind == LossModel::Kind::kRamp) {
    auto steps = maps_.RampCounters(rule.slot, m.steps.size());
    if (!steps.ok()) return false;
    for (size_t i = 0; i < steps->size() && i < m.steps.size(); i++)
      judged.push_back({m.steps[i].rate, (*steps)[i].matched_pkts, (*steps)[i].dropped_pkts,
                        "step " + std::to_string(i + 1) + "'s"});
  } else if (m.kind == LossModel::Kind::kBernoulli) {
    auto c = LiveCounters(rule);
    if (!c.ok()) return false;
    judged.push_back({m.p, c->matched_pkts, c->picked_pkts(), "its"});
  }
  for (const Judged& j : judged) {
    if (j.n < kMisbehaveMinMatched) continue;
    double lo = 0, hi = 0;
    WilsonInterval(j.k, j.n, &lo, &hi);
    if (j.rate >= lo) continue;  // the rate within (or above) the measured's interval
    GuardStopInfo& s = rule.info.guard_stop;
    s = GuardStopInfo();
    s.condition = "misbehaves";
    s.crossed_ns = s.stopped_ns = MonotonicNs();
    s.rtos = uint32_t(std::min<uint64_t>(j.k, UINT32_MAX));
    s.segs = uint32_t(std::min<uint64_t>(j.n, UINT32_MAX));
    char d[256];
    std::snprintf(d, sizeof(d),
                  "stopped by its guard (%s): %s measured loss %.4g %% (%llu dropped of %llu "
                  "matched; 99.9 %% interval %.4g %% .. %.4g %%) lies above its rate %.4g %%",
                  rule.info.spec.guard.Text().c_str(), j.what.c_str(), 100.0 * j.k / j.n,
                  (unsigned long long)j.k, (unsigned long long)j.n, 100 * lo, 100 * hi,
                  100 * j.rate);
    rule.info.note = d;
    LOG_INFO("rule %u %s", id, d);
    guard_stops_++;
    return true;
  }
  return false;
}

void Injector::GuardAllStoppedLocked(uint64_t now) {
  struct loss_guard g;
  auto found = maps_.ReadGuard(LOSS_GUARD_ALL, &g);
  if (!found.ok()) {
    LOG_WARN("--guard-all: %s", found.status().message().c_str());
    return;
  }
  if (!*found || !g.stopped_ns || !g.reason) return;  // running (or its evidence not complete)
  GuardStopInfo info = GuardStopInfo::Of(g);
  std::string why = info.Describe(opts_.guard_all);
  LOG_INFO("%s: every rule stops", why.c_str());
  for (auto& [id, rule] : rules_) {
    if (!rule.live) continue;
    rule.info.guard_stop = info;
    rule.info.note = why;
    guard_stops_++;
    EndLocked(id, rule, now);
  }
  // Armed again: the rules created from now on are a new experiment.
  Status st = maps_.ArmGuardAll(opts_.guard_all);
  if (!st.ok()) LOG_ERROR("--guard-all: arm again: %s", st.message().c_str());
}

// Ends a rule as an expired one ends (EXPIRED; STOPPED when guard_stop is
// set): out of the kernel if live, kept in the history with its final counters.
void Injector::EndLocked(uint32_t id, Rule& rule, uint64_t now) {
  bool was_live = rule.live;
  if (was_live) {
    Status st = Retire(rule);
    if (!st.ok()) LOG_ERROR("retire rule %u: %s", id, st.message().c_str());
  }
  rule.info.expired = true;
  rule.info.failed.clear();
  rule.retired_ns = now;
  expired_.push_back(id);
  if (listener_ && was_live) listener_->RuleRetired(id);
}

void Injector::ReapLocked() {
  uint64_t now = MonotonicNs();
  if (opts_.guard_all.Any()) GuardAllStoppedLocked(now);
  for (auto& [id, rule] : rules_) {
    if (GuardStoppedLocked(id, rule)) {
      EndLocked(id, rule, now);
      continue;
    }
    bool waiting = !rule.live && !rule.info.expired && rule.retired_ns == 0;  // to re-attach
    if ((rule.live || waiting) && rule.expires_ns && now >= rule.expires_ns) {
      LOG_INFO("rule %u expired", id);
      EndLocked(id, rule, now);
    }
  }
  TrimHistoryLocked(now);
}

// A bounded history of expired, failed and deleted rules (their final
// counters): at most keep_retired_max, none longer than keep_retired.
void Injector::TrimHistoryLocked(uint64_t now) {
  while (!expired_.empty()) {
    uint32_t id = expired_.front();
    auto it = rules_.find(id);
    bool old =
        it == rules_.end() || now - it->second.retired_ns >= uint64_t(opts_.keep_retired.count());
    if (expired_.size() <= opts_.keep_retired_max && !old) break;
    rules_.erase(id);
    expired_.pop_front();
    if (listener_) listener_->RuleForgotten(id);
  }
}

void Injector::RenewLease() {
  uint64_t now = MonotonicNs();
  maps_.RenewLease(opts_.lease.count() > 0 ? now + uint64_t(opts_.lease.count()) * 1000000ull : 0);
}

uint64_t Injector::LeaseRemainingNs() const {
  uint64_t until = maps_.LeaseUntilNs();
  uint64_t now = MonotonicNs();
  return until > now ? until - now : 0;
}

// The programs a rule needs, loaded before the rules' lock is taken: the
// verifier takes a while, and the lease must not wait for it.
Status Injector::LoadProgramsFor(const RuleSpec& spec) const {
  for (int kind : HookKinds(ChooseHook(spec), spec.dir))
    LOSSD_RETURN_IF_ERROR(attacher_->Load(kind));
  return Status::Ok();
}

Status Injector::Check(const RuleSpec& spec, Target* target) const {
  LOSSD_RETURN_IF_ERROR(Validate(spec));
  const RuleLimits& l = opts_.limits;
  if (l.max_ttl_ns) {
    uint64_t ttl = static_cast<uint64_t>(spec.ttl.count());
    if (ttl == 0 || ttl > l.max_ttl_ns)
      return InvalidArgument("ttl_ns: this daemon allows rules of at most " +
                             std::to_string(l.max_ttl_ns / 1000000000ull) +
                             " s (--max-ttl); give a ttl within it");
  }
  LOSSD_RETURN_IF_ERROR(ResolveTarget(*attacher_, spec, target));
  return guard_.Check(spec, target->cgroup.path, target->cgroup.mount);
}

Status Injector::CheckLiveLimitLocked() const {
  if (LiveLocked() < opts_.limits.max_rules) return Status::Ok();
  return ResourceExhausted("rule limit reached (" + std::to_string(opts_.limits.max_rules) +
                           " rules, --max-rules): delete rules first");
}

Result<uint32_t> Injector::Add(const RuleSpec& spec) {
  Target target;
  LOSSD_RETURN_IF_ERROR(Check(spec, &target));
  LOSSD_RETURN_IF_ERROR(LoadProgramsFor(spec));
  std::lock_guard<std::mutex> lock(mu_);
  LOSSD_RETURN_IF_ERROR(CheckLiveLimitLocked());
  auto id = AddLocked(spec, target);
  if (!id.ok()) return id;
  Rule& r = rules_[*id];
  r.info.created_unix_ns = UnixNs();
  if (spec.ttl.count() > 0)
    r.info.expires_unix_ns = r.info.created_unix_ns + uint64_t(spec.ttl.count());
  r.info.CapExpiryBySchedule();
  if (listener_) listener_->RulePublished(*id, r.info.spec);
  return id;
}

// Attaches and publishes; the caller holds mu_ and has checked (and
// resolved the target).
Result<uint32_t> Injector::AddLocked(const RuleSpec& spec, const Target& target,
                                     uint64_t expires_ns, uint32_t final_id,
                                     uint64_t schedule_start_ns) {
  Hook hook = ChooseHook(spec);
  LOSSD_RETURN_IF_ERROR(CheckHook(spec, hook));
  auto plan = PlanAttachments(*attacher_, spec, hook, target);
  if (!plan.ok()) return plan.status();
  LOSSD_RETURN_IF_ERROR(maps_.CheckFreeSlot());

  // Attach (shared, reference-counted), then change offloads, then publish;
  // the hold gives back what it took unless the rule is published.
  AttachHold hold(&attach_);
  LOSSD_RETURN_IF_ERROR(plan->Take(hold));
  const uint64_t now = MonotonicNs();
  uint64_t start = !HasTimeline(spec) ? 0
                   : schedule_start_ns  ? schedule_start_ns
                                        : now + uint64_t(spec.schedule.start_after.count());
  uint64_t expires = expires_ns;
  if (!expires) {
    if (spec.ttl.count() > 0) expires = now + uint64_t(spec.ttl.count());
    if (uint64_t span = uint64_t(TimelineSpan(spec).count()))
      if (!expires || start + span < expires) expires = start + span;
  }
  struct loss_rule enc = Encode(spec, static_cast<uint32_t>(target.ifindex), target.cgroup.id,
                                target.cgroup.level, expires, 0 /* the slot's: RuleMaps::Publish */,
                                start);
  enc.m.hook_mask = plan->hook_mask;
  enc.id = final_id ? final_id : next_id_;  // what the drop log records
  auto slot = maps_.Publish(spec, enc);
  if (!slot.ok()) return slot.status();
  hold.Commit();

  Rule rule;
  static_cast<RuleAttachments&>(rule) = std::move(plan->holds);
  rule.info.id = next_id_++;
  rule.info.spec = spec;
  rule.info.spec.hook = hook;
  if (NamesCgroup(spec)) {
    rule.info.cgroup = target.cgroup.path;
    rule.info.cgroup_mount = target.cgroup.mount;
    rule.info.cgroup_id = target.cgroup.id;
  }
  rule.slot = *slot;
  rule.generation = maps_.Generation(*slot);
  rule.target = target;
  rule.expires_ns = expires;
  if (start) {
    rule.info.schedule_start_mono_ns = start;
    rule.info.schedule_start_unix_ns = UnixNs() + (start - now);
  }
  rule.live = true;
  rule.Describe(attach_, rule.info.spec, rule.target, &rule.info.hooks);
  uint32_t id = rule.info.id;
  rules_[id] = std::move(rule);
  return id;
}

// Takes a live rule out of the kernel: unpublish, deactivate, detach what
// nothing else uses, restore offloads; then reads its final counters (no
// packet can reach it any more) and frees its slot.
Status Injector::Retire(Rule& r) {
  Status st = maps_.Withdraw(r.slot);
  r.Release(attach_);
  r.info.hooks.clear();  // a retired rule lists no attachment: the kernel has none of it
  auto c = LiveCounters(r);
  if (c.ok()) r.info.counters = *c;
  ReadStepCounters(r, &r.info);
  maps_.Free(r.slot);
  r.live = false;
  if (!st.ok()) return st;
  return c.ok() ? Status::Ok() : c.status();
}

Result<RuleInfo> Injector::RemoveLocked(uint32_t id, bool keep) {
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  Rule& r = it->second;
  bool was_live = r.live;
  Status st = r.live ? Retire(r) : Status::Ok();
  bool history = opts_.keep_retired.count() > 0 && opts_.keep_retired_max > 0;
  if (keep && history && r.retired_ns == 0) {
    // Out of the kernel, kept: DELETED, with its final counters; the effect
    // tracker keeps what it caused (RuleRetired, not RuleForgotten).
    r.info.deleted = true;
    r.retired_ns = MonotonicNs();
    expired_.push_back(id);
    if (listener_ && was_live) listener_->RuleRetired(id);
    RuleInfo info = r.info;
    TrimHistoryLocked(r.retired_ns);
    if (!st.ok()) return st;
    return info;
  }
  RuleInfo info = r.info;
  if (r.retired_ns) expired_.erase(std::find(expired_.begin(), expired_.end(), id));
  rules_.erase(it);
  if (listener_) listener_->RuleForgotten(id);
  if (!st.ok()) return st;
  return info;
}

Status Injector::Replace(uint32_t id, const RuleSpec& spec) {
  Target target;
  LOSSD_RETURN_IF_ERROR(Check(spec, &target));
  LOSSD_RETURN_IF_ERROR(LoadProgramsFor(spec));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  if (it->second.info.deleted)
    return NotFound("rule " + std::to_string(id) + " was deleted (kept for reading until forgotten)");
  // Replacing an expired rule makes it live again: a new rule as far as the limit goes.
  if (it->second.retired_ns) LOSSD_RETURN_IF_ERROR(CheckLiveLimitLocked());
  auto nid = AddLocked(spec, target, 0, id);
  if (!nid.ok()) return nid.status();
  Rule& old = rules_.find(id)->second;
  Status st = old.live ? Retire(old) : Status::Ok();
  if (old.retired_ns) expired_.erase(std::find(expired_.begin(), expired_.end(), id));
  MoveRuleLocked(*nid, id);
  RuleInfo& info = rules_[id].info;
  info.expires_unix_ns = spec.ttl.count() > 0 ? UnixNs() + uint64_t(spec.ttl.count()) : 0;
  info.CapExpiryBySchedule();
  if (listener_) listener_->RulePublished(id, info.spec);
  return st;
}

Result<RuleInfo> Injector::Remove(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return RemoveLocked(id, true);
}

Result<RuleInfo> Injector::Finish(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  if (it->second.retired_ns) return Snapshot(it->second);
  return RemoveLocked(id, true);
}

Result<RuleInfo> Injector::Discard(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return RemoveLocked(id, false);
}

uint32_t Injector::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> ids;
  for (const auto& [id, r] : rules_) ids.push_back(id);
  uint32_t n = 0;  // the rules it took out of the kernel (not the kept ones it forgot)
  for (uint32_t id : ids) {
    bool kept = rules_.at(id).retired_ns != 0;
    if (RemoveLocked(id, false).ok() && !kept) n++;
  }
  return n;
}

size_t Injector::LiveCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LiveLocked();
}

// A ramp's steps' counters as the data plane holds them (until its slot is freed).
void Injector::ReadStepCounters(const Rule& r, RuleInfo* info) const {
  const LossModel& m = r.info.spec.model;
  if (m.kind != LossModel::Kind::kRamp) return;
  auto steps = maps_.RampCounters(r.slot, m.steps.size());
  if (steps.ok())
    info->step_counters = std::move(*steps);
  else
    LOG_WARN("rule %u: %s", r.info.id, steps.status().message().c_str());
}

RuleInfo Injector::Snapshot(const Rule& r) const {
  RuleInfo info = r.info;
  if (r.live) {
    auto c = LiveCounters(r);
    if (c.ok()) info.counters = *c;
    ReadStepCounters(r, &info);
    // Never ACTIVE while its cgroup is not the one it is attached to (deleted,
    // or recreated and not yet re-attached by the watch thread's next check).
    std::string changed = CgroupChanged(*attacher_, r.target);
    if (!changed.empty()) {
      info.failed = changed;
      info.hooks.clear();  // attached to a cgroup that is gone
    } else if (!r.egress_missing.empty()) {
      info.failed = r.egress_missing;
    }
    // A scheduled rule matches nothing before its start: counted from there.
    uint64_t now = UnixNs(), after = uint64_t(opts_.unmatched_after.count());
    uint64_t since = std::max(info.created_unix_ns, info.schedule_start_unix_ns);
    if (info.failed.empty() && after && info.counters.matched_pkts == 0 && now > since &&
        now - since >= after)
      info.hint = UnmatchedHint(info.spec, info.CgroupRelative(),
                                std::chrono::nanoseconds(now - since));
  }
  return info;
}

void Injector::MoveRuleLocked(uint32_t fresh, uint32_t id) {
  auto f = rules_.find(fresh);
  Rule& old = rules_[id];
  uint64_t created = old.info.created_unix_ns;
  old = std::move(f->second);
  rules_.erase(f);
  old.info.id = id;
  old.info.created_unix_ns = created;
}

// Takes the rule out of the kernel (what is left of it) and keeps it, FAILED
// with the reason: in the history, or waiting for its interface (reattach).
void Injector::FailLocked(uint32_t id, Rule& r, const std::string& reason) {
  LOG_WARN("rule %u failed: %s", id, reason.c_str());
  Status st = Retire(r);
  if (!st.ok()) LOG_WARN("rule %u: take it out of the maps: %s", id, st.message().c_str());
  r.before = r.info.counters;
  r.info.failed = reason;
  r.info.hooks.clear();
  // It waits for its target (a cgroup rule always, an interface rule with
  // reattach), or joins the history of retired rules.
  if (r.info.spec.hook != Hook::kCgroup && !r.info.spec.reattach) {
    r.retired_ns = MonotonicNs();
    expired_.push_back(id);
  }
  if (listener_) listener_->RuleRetired(id);
}

void Injector::CheckAttachments() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<AttachKey> dead = attach_.Dead();
  for (auto& [id, r] : rules_) {
    if (!r.live) continue;
    // An egress device of a cgroup target that is gone is followed, not a
    // failure: the target's packets leave by the devices it has now.
    auto k = std::find_if(r.attach.begin(), r.attach.end(), [&](const AttachKey& a) {
      return dead.count(a) > 0 && !r.egress.count(a);
    });
    if (k == r.attach.end()) {
      if ((!r.egress.empty() || !r.egress_missing.empty()) &&
          r.FollowEgress(attach_, *attacher_, id, r.info.spec, r.target, dead))
        r.Describe(attach_, r.info.spec, r.target, &r.info.hooks);
      continue;
    }
    std::string reason = attach_.WhyDead(*k, r.info.spec.iface, r.target);
    if (r.info.spec.hook == Hook::kCgroup)
      reason += "; the rule applies again when it is recreated";
    else if (r.info.spec.reattach)
      reason += "; waiting for an interface of that name to re-attach";
    FailLocked(id, r, reason);
  }
  // Failed rules waiting for their target re-attach when it is back.
  std::vector<uint32_t> waiting;
  for (const auto& [id, r] : rules_)
    if (!r.live && !r.info.expired && r.retired_ns == 0) waiting.push_back(id);
  for (uint32_t id : waiting) ReattachLocked(id);
}

// Re-attaches failed rule `id` if its target is back (TargetReturned), with
// its id, deadline and counters so far; a failure is recorded and retried.
void Injector::ReattachLocked(uint32_t id) {
  Rule& r = rules_[id];
  Target t;
  std::string where;
  if (!TargetReturned(*attacher_, r.info.spec, r.target, &t, &where)) return;
  auto fresh = AddLocked(r.info.spec, t, r.expires_ns, id, r.info.schedule_start_mono_ns);
  if (!fresh.ok()) {
    std::string reason = where + ", but re-attaching failed (retried): " + fresh.status().message();
    if (reason != r.info.failed) LOG_WARN("rule %u: %s", id, reason.c_str());
    r.info.failed = reason;
    return;
  }
  RuleCounters before = r.before;
  uint64_t expires_unix = r.info.expires_unix_ns;
  MoveRuleLocked(*fresh, id);
  Rule& now = rules_[id];
  now.before = before;
  now.info.expires_unix_ns = expires_unix;
  now.info.note = where + ": re-attached";
  LOG_INFO("rule %u %s", id, now.info.note.c_str());
  if (listener_) listener_->RulePublished(id, now.info.spec);
}

std::vector<RuleInfo> Injector::Rules() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RuleInfo> out;
  out.reserve(rules_.size());
  for (const auto& [id, r] : rules_) out.push_back(Snapshot(r));
  return out;
}

Result<RuleInfo> Injector::Get(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  return Snapshot(it->second);
}

Result<RuleCounters> Injector::Counters(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rules_.find(id);
  if (it == rules_.end()) return NotFound("no rule with id " + std::to_string(id));
  if (!it->second.live) return it->second.info.counters;
  return LiveCounters(it->second);
}

std::optional<Injector::Expectation> Injector::ExpectedDrops(uint32_t id) const {
  LossModel model;
  uint32_t slot = 0, generation = 0;
  std::optional<RuleCounters> final_counts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rules_.find(id);
    if (it == rules_.end() || !ModelIsDeterministic(it->second.info.spec.model)) return std::nullopt;
    const Rule& r = it->second;
    // Counted partly in an earlier slot (re-attached): its flows' counts are gone.
    if (r.before.matched_pkts) return std::nullopt;
    model = r.info.spec.model;
    slot = r.slot;
    generation = r.generation;
    if (!r.live) final_counts = r.info.counters;
  }
  // Off the lock: the maps are read, not the rules.
  return maps_.Expect(model, slot, generation, final_counts ? &*final_counts : nullptr);
}

// What a live rule counted: in its slot, and before it failed and re-attached.
Result<RuleCounters> Injector::LiveCounters(const Rule& r) const {
  auto c = maps_.Counters(r.slot);
  if (!c.ok()) return c;
  return Sum(r.before, *c);
}

Capabilities Injector::Probe() const {
  Capabilities c = ProbeKernel();
  std::lock_guard<std::mutex> lock(mu_);
  if (!attach_.empty()) {
    c.notes.push_back("tcx/clsact not probed: attachments in use");
    return c;
  }
  ProbeAttachModes(attach_.qdiscs(), &c);
  return c;
}

}  // namespace lossd
