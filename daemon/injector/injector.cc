#include "injector/injector.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "base/clock.h"
#include "base/log.h"
#include "injector/encode.h"
#include "rules/model.h"

namespace lossd {

Injector::Injector(const InjectorOptions& opts, std::unique_ptr<LossMaps> maps,
                   std::unique_ptr<HookPrograms> programs, std::unique_ptr<Attacher> attacher)
    : opts_(opts),
      guard_(opts.limits.protected_ports),
      maps_(std::move(maps)),
      programs_(std::move(programs)),
      attacher_(std::move(attacher)),
      attach_(attacher_.get(), opts.state_dir.empty() ? "" : opts.state_dir + "/offloads") {}

Status Injector::CheckOptions(const InjectorOptions& opts) {
  // One slot stays free for Replace, which publishes before it withdraws.
  if (opts.limits.max_rules == 0 || opts.limits.max_rules >= LOSS_MAX_RULES)
    return InvalidArgument("max rules must lie between 1 and " +
                           std::to_string(LOSS_MAX_RULES - 1));
  return Status::Ok();
}

Result<std::unique_ptr<Injector>> Injector::Create(const InjectorOptions& opts) {
  LOSSD_RETURN_IF_ERROR(CheckOptions(opts));
  auto maps = BpfMaps::Create();
  if (!maps.ok()) return maps.status();
  auto programs = std::make_unique<HookPrograms>((*maps)->object());
  const std::string filter_records = opts.state_dir.empty() ? "" : opts.state_dir + "/netns-filters";
  auto attacher = std::make_unique<KernelAttacher>(programs.get(), (*maps)->CgroupSelfFd(),
                                                   opts.xdp_mode, filter_records);
  // What a dead previous owner left behind, before this one's lease starts.
  if (!opts.state_dir.empty()) mkdir(opts.state_dir.c_str(), 0700);
  int stale = RemoveStaleClsactFilters(filter_records);
  if (stale) LOG_INFO("removed %d stale clsact filter(s) of a previous lossd", stale);
  if (!opts.state_dir.empty()) RestoreOffloads(opts.state_dir + "/offloads");
  return Start(opts, std::move(*maps), std::move(programs), std::move(attacher));
}

Result<std::unique_ptr<Injector>> Injector::Create(const InjectorOptions& opts,
                                                   std::unique_ptr<LossMaps> maps,
                                                   std::unique_ptr<Attacher> attacher) {
  LOSSD_RETURN_IF_ERROR(CheckOptions(opts));
  return Start(opts, std::move(maps), std::make_unique<HookPrograms>(nullptr), std::move(attacher));
}

Result<std::unique_ptr<Injector>> Injector::Start(const InjectorOptions& opts,
                                                  std::unique_ptr<LossMaps> maps,
                                                  std::unique_ptr<HookPrograms> programs,
                                                  std::unique_ptr<Attacher> attacher) {
  auto ring = DropRing::Start(maps.get());
  if (!ring.ok()) return ring.status();
  std::unique_ptr<Injector> inj(
      new Injector(opts, std::move(maps), std::move(programs), std::move(attacher)));
  inj->drop_ring_ = std::move(*ring);
  inj->maps_.SetNetnsCookie(inj->attacher_->NetnsCookie());
  LOSSD_RETURN_IF_ERROR(inj->maps_.WriteConfig());
  inj->Tick();
  if (opts.background) {
    Injector* p = inj.get();
    auto threads = WatchThreads::Start(
        WatchThreads::Period(opts.lease),
        {[p] { p->RenewLease(); }, [p] { p->Reap(); }, [p] { p->CheckAttachments(); }});
    if (!threads.ok()) return threads.status();
    inj->threads_ = std::move(*threads);
  }
  return inj;
}

Injector::~Injector() {
  threads_.reset();  // stopped and joined first: they call into the rules
  Clear();
  // Attachments and offload guards are gone with the rules; the qdiscs lossd
  // created go with attach_, then the programs, the maps last.
}

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

void Injector::ReapLocked() {
  uint64_t now = MonotonicNs();
  for (auto& [id, rule] : rules_) {
    bool waiting = !rule.live && !rule.info.expired && rule.retired_ns == 0;  // to re-attach
    if ((rule.live || waiting) && rule.expires_ns && now >= rule.expires_ns) {
      LOG_INFO("rule %u expired", id);
      if (rule.live) {
        Status st = Retire(rule);
        if (!st.ok()) LOG_ERROR("retire expired rule %u: %s", id, st.message().c_str());
      }
      rule.info.expired = true;
      rule.info.failed.clear();
      rule.retired_ns = now;
      expired_.push_back(id);
      if (listener_ && !waiting) listener_->RuleRetired(id);
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
  if (listener_) listener_->RulePublished(*id, r.info.spec);
  return id;
}

// Attaches and publishes; the caller holds mu_ and has checked (and
// resolved the target).
Result<uint32_t> Injector::AddLocked(const RuleSpec& spec, const Target& target,
                                     uint64_t expires_ns, uint32_t final_id) {
  const int ifindex = target.ifindex;
  const CgroupInfo& cg = target.cgroup;
  Hook hook = ChooseHook(spec);
  LOSSD_RETURN_IF_ERROR(CheckHook(spec, hook));

  // A cgroup target's egress is decided on the devices its packets leave by
  // (clsact, STOLEN: the sender's stack believes the packet left), in the
  // namespaces of its processes; never at cgroup_skb egress, where a drop is
  // a refusal the sending socket is told about (DESIGN 14).
  const bool cgroup_egress = hook == Hook::kCgroup && spec.dir != Direction::kIngress;
  EgressDevices egress;
  if (cgroup_egress) {
    auto e = attacher_->Egress(cg);
    if (!e.ok()) return e.status();
    egress = std::move(*e);
  }
  struct Want {
    AttachKey key;
    std::string iface;
    Target target;
  };
  std::vector<Want> wants;
  uint8_t mask = 0;
  for (int kind : HookKinds(hook, spec.dir)) {
    mask |= uint8_t(1u << kind);
    if (kind == LOSS_HOOK_TC_EGRESS && cgroup_egress) {
      for (const Device& d : egress.devices) {
        Target t = target;
        t.ifindex = d.ifindex;
        t.netns = d.ns;
        wants.push_back({AttachKey{kind, uint64_t(d.ifindex), d.ns.ino}, d.name, t});
      }
      continue;
    }
    wants.push_back({AttachKey{kind, hook == Hook::kCgroup ? cg.id : uint64_t(ifindex)},
                     spec.iface, target});
  }
  LOSSD_RETURN_IF_ERROR(maps_.CheckFreeSlot());

  // Attach (shared, reference-counted), then change offloads, then publish;
  // the hold gives back what it took unless the rule is published.
  AttachHold hold(&attach_);
  for (const Want& w : wants) LOSSD_RETURN_IF_ERROR(hold.Attach(w.key, w.iface, w.target));
  std::vector<Device> offloads;
  if (spec.per_segment)
    offloads = cgroup_egress ? egress.devices
                             : std::vector<Device>{Device{NetnsRef{}, ifindex, spec.iface}};
  for (const Device& d : offloads) LOSSD_RETURN_IF_ERROR(hold.DisableOffloads(d));

  uint64_t expires = expires_ns             ? expires_ns
                     : spec.ttl.count() > 0 ? MonotonicNs() + uint64_t(spec.ttl.count())
                                            : 0;
  struct loss_rule enc = Encode(spec, static_cast<uint32_t>(ifindex), cg.id, cg.level, expires,
                                0 /* the slot's: RuleMaps::Publish */);
  enc.m.hook_mask = mask;
  enc.id = final_id ? final_id : next_id_;  // what the drop log records
  auto slot = maps_.Publish(spec, enc);
  if (!slot.ok()) return slot.status();
  hold.Commit();

  Rule rule;
  rule.info.id = next_id_++;
  rule.info.spec = spec;
  rule.info.spec.hook = hook;
  if (NamesCgroup(spec)) {
    rule.info.cgroup = cg.path;
    rule.info.cgroup_mount = cg.mount;
    rule.info.cgroup_id = cg.id;
  }
  for (const Want& w : wants) rule.attach.push_back(w.key);
  if (cgroup_egress)
    for (const Device& d : egress.devices)
      rule.egress[AttachKey{LOSS_HOOK_TC_EGRESS, uint64_t(d.ifindex), d.ns.ino}] = d;
  rule.slot = *slot;
  rule.generation = maps_.Generation(*slot);
  rule.target = target;
  rule.offloads = offloads;
  rule.expires_ns = expires;
  rule.live = true;
  DescribeLocked(rule);
  uint32_t id = rule.info.id;
  rules_[id] = std::move(rule);
  return id;
}

// What the rule's listing says it is attached to; a cgroup rule with egress
// and no device (its processes' namespaces are gone) says so.
void Injector::DescribeLocked(Rule& r) const {
  r.info.hooks.clear();
  for (const auto& k : r.attach) r.info.hooks.push_back(attach_.Describe(k));
  r.egress_missing.clear();
  if (r.info.spec.hook == Hook::kCgroup && r.info.spec.dir != Direction::kIngress &&
      r.egress.empty())
    r.egress_missing = "no egress device: the network namespace(s) of cgroup " +
                       r.target.cgroup.path +
                       "'s processes are gone, so nothing decides its egress; it applies again "
                       "when a process of the cgroup is in a namespace with a device";
}

Status Injector::AddEgressLocked(Rule& r, const Device& dev) {
  AttachKey key{LOSS_HOOK_TC_EGRESS, uint64_t(dev.ifindex), dev.ns.ino};
  Target t = r.target;
  t.ifindex = dev.ifindex;
  t.netns = dev.ns;
  AttachHold hold(&attach_);
  LOSSD_RETURN_IF_ERROR(hold.Attach(key, dev.name, t));
  if (r.info.spec.per_segment) LOSSD_RETURN_IF_ERROR(hold.DisableOffloads(dev));
  hold.Commit();
  r.attach.push_back(key);
  r.egress[key] = dev;
  if (r.info.spec.per_segment) r.offloads.push_back(dev);
  return Status::Ok();
}

void Injector::FollowEgressLocked(uint32_t id, Rule& r, const std::set<AttachKey>& dead) {
  auto now = attacher_->Egress(r.target.cgroup);
  if (!now.ok()) {  // logged once per cause, not at every check
    if (now.status().message() != r.egress_error)
      LOG_WARN("rule %u: %s", id, now.status().message().c_str());
    r.egress_error = now.status().message();
    return;
  }
  r.egress_error.clear();
  std::map<AttachKey, Device> want;
  for (const Device& d : now->devices)
    want[AttachKey{LOSS_HOOK_TC_EGRESS, uint64_t(d.ifindex), d.ns.ino}] = d;
  // Without a process the cgroup says nothing about where its packets go:
  // the devices it has keep it until they are gone. (Only a rule created on a
  // cgroup with no process at all starts on lossd's own namespace's devices,
  // AddLocked: a service not started yet, on this host.)
  bool changed = false;
  for (auto it = r.egress.begin(); it != r.egress.end();) {
    const AttachKey k = it->first;
    const Device dev = it->second;
    bool gone = dead.count(k) > 0 || (now->has_processes && !want.count(k));
    if (!gone) {
      ++it;
      continue;
    }
    LOG_INFO("rule %u: egress device %s%s left (%s)", id, dev.name.c_str(), dev.ns.Suffix().c_str(),
             dead.count(k) ? "gone" : "no process of the cgroup is in its namespace now");
    attach_.Release({k}, {});
    r.attach.erase(std::find(r.attach.begin(), r.attach.end(), k));
    auto off = std::find(r.offloads.begin(), r.offloads.end(), dev);
    if (off != r.offloads.end()) {
      attach_.Release({}, {dev});
      r.offloads.erase(off);
    }
    it = r.egress.erase(it);
    changed = true;
  }
  // Devices are added only where a process of the cgroup is: a target whose
  // processes are all gone (a stopped container) keeps what is left of its
  // devices, and with none it is FAILED (DescribeLocked) until one is back.
  if (now->has_processes) {
    for (const auto& [k, dev] : want) {
      if (r.egress.count(k)) continue;
      Status st = AddEgressLocked(r, dev);
      if (!st.ok()) {
        if (st.message() != r.egress_error)
          LOG_WARN("rule %u: egress device %s%s: %s (retried)", id, dev.name.c_str(),
                   dev.ns.Suffix().c_str(), st.message().c_str());
        r.egress_error = st.message();
        continue;
      }
      LOG_INFO("rule %u: egress decided on %s%s too", id, dev.name.c_str(),
               dev.ns.Suffix().c_str());
      changed = true;
    }
  }
  if (changed) DescribeLocked(r);
}

// Takes a live rule out of the kernel: unpublish, deactivate, detach what
// nothing else uses, restore offloads; then reads its final counters (no
// packet can reach it any more) and frees its slot.
Status Injector::Retire(Rule& r) {
  Status st = maps_.Withdraw(r.slot);
  attach_.Release(r.attach, r.offloads);
  r.attach.clear();
  r.egress.clear();
  r.offloads.clear();
  r.info.hooks.clear();  // a retired rule lists no attachment: the kernel has none of it
  auto c = LiveCounters(r);
  if (c.ok()) r.info.counters = *c;
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
  if (listener_) listener_->RulePublished(id, info.spec);
  return st;
}

Result<RuleInfo> Injector::Remove(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
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

RuleInfo Injector::Snapshot(const Rule& r) const {
  RuleInfo info = r.info;
  if (r.live) {
    auto c = LiveCounters(r);
    if (c.ok()) info.counters = *c;
    // Never ACTIVE while its cgroup is not the one it is attached to (deleted,
    // or recreated and not yet re-attached by the watch thread's next check).
    std::string changed = CgroupChanged(*attacher_, r.target);
    if (!changed.empty()) {
      info.failed = changed;
      info.hooks.clear();  // attached to a cgroup that is gone
    } else if (!r.egress_missing.empty()) {
      info.failed = r.egress_missing;
    }
    uint64_t now = UnixNs(), after = uint64_t(opts_.unmatched_after.count());
    if (info.failed.empty() && after && info.counters.matched_pkts == 0 &&
        now > info.created_unix_ns && now - info.created_unix_ns >= after)
      info.hint = UnmatchedHint(info.spec, info.CgroupRelative(),
                                std::chrono::nanoseconds(now - info.created_unix_ns));
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
      if (!r.egress.empty() || !r.egress_missing.empty()) FollowEgressLocked(id, r, dead);
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
  auto fresh = AddLocked(r.info.spec, t, r.expires_ns, id);
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
  bool live = false;
  RuleCounters final_counts;
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
    live = r.live;
    final_counts = r.info.counters;
  }
  // The flow state and the counters are read apart, off the lock: consistent only
  // if the counters did not move across the read of the flows.
  for (int attempt = 0; attempt < 5; attempt++) {
    RuleCounters c0 = final_counts;
    if (live) {
      auto c = maps_.Counters(slot);
      if (!c.ok()) return std::nullopt;
      c0 = *c;
    }
    auto counts = maps_.FlowCounts(slot, generation);
    if (!counts.ok()) return std::nullopt;
    RuleCounters c1 = c0;
    if (live) {
      auto c = maps_.Counters(slot);
      if (!c.ok()) return std::nullopt;
      c1 = *c;
    }
    if (c1.matched_pkts != c0.matched_pkts) continue;
    Expectation e;
    uint64_t seen = 0;
    for (uint64_t n : *counts) {
      seen += n;
      e.expected += ModelExpectedDrops(model, n);
    }
    // The data plane counts a flow's packet a moment before the rule's: a packet
    // between the two, or a flow evicted, and they differ. Read again.
    if (seen != c0.matched_pkts) continue;
    e.matched = c0.matched_pkts;
    e.dropped = c0.dropped_pkts;
    e.flows = counts->size();
    return e;
  }
  return std::nullopt;
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
