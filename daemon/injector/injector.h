// The loss injector: the one owner of every rule's state (spec, labels,
// times, state, limits, slot, attachments) and its lifecycle. It checks and
// turns rules into map entries (RuleMaps, over the BPF maps: maps.h),
// attaches the programs each rule needs (AttachTable: shared and
// reference-counted per interface/cgroup and hook; the programs load on
// first use: programs.h), keeps the lease that makes a dead owner's leftover
// filters stop dropping, reaps expired rules, follows targets that go and
// come back, reads the counters, and tells a listener (the effect tracker)
// of every change. See docs/architecture.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "injector/attach.h"
#include "injector/attach_table.h"
#include "injector/drop_ring.h"
#include "injector/guard.h"
#include "injector/maps.h"
#include "injector/probe.h"
#include "injector/programs.h"
#include "injector/rule_attachments.h"
#include "injector/rule_maps.h"
#include "injector/watch.h"
#include "loader/split_load.h"
#include "loss_abi.h"
#include "rules/rule.h"

namespace lossd {

// What a daemon allows of its clients' rules.
struct RuleLimits {
  uint32_t max_rules = 10000;  // live rules at once (--max-rules)
  uint64_t max_ttl_ns = 0;     // every rule must expire within this; 0: no limit (--max-ttl)
  // The TTL of a rule created without one (--default-ttl); 0: until deleted.
  uint64_t default_ttl_ns = 0;
  // TCP ports whose traffic a lossy rule must not cut without force: SSH,
  // plus the daemon's TCP control port.
  std::vector<uint16_t> protected_ports{22};
};

// A spec that gave no TTL (ttl_given false) gets the daemon's default, the
// one rule for every way a rule comes in (the API, --rules).
inline void ApplyDefaultTtl(const RuleLimits& l, RuleSpec* spec) {
  if (!spec->ttl_given)
    spec->ttl = std::chrono::nanoseconds(static_cast<int64_t>(l.default_ttl_ns));
  spec->ttl_given = true;
}

struct InjectorOptions {
  // A program that finds the lease run out drops nothing. 0 disables it.
  std::chrono::milliseconds lease{3000};
  // Where crash-recovery state is kept (offload changes).
  std::string state_dir = "/run/lossd";
  XdpMode xdp_mode = XdpMode::kAuto;
  RuleLimits limits;
  // How long an expired (or failed) rule stays listed for inspection, and
  // how many at most; then it is forgotten everywhere (--keep-expired).
  std::chrono::nanoseconds keep_retired{std::chrono::minutes(10)};
  size_t keep_retired_max = 1024;
  // A live rule that has matched nothing this long says what to check
  // (RuleInfo.hint, --unmatched-hint); 0: never.
  std::chrono::nanoseconds unmatched_after{std::chrono::seconds(10)};
  // The daemon's guard (--guard-all): when it holds for a flow any rule
  // dropped from, every rule stops (docs/guards.md). None: no such guard.
  Guard guard_all;
  // Start the threads that renew the lease, reap expired rules and watch
  // the interfaces and cgroups the rules are attached to.
  bool background = true;
};

// Why a guard stopped its rule (the kernel's loss_guard evidence; lossd.v1
// GuardStop). Times on CLOCK_MONOTONIC.
struct GuardStopInfo {
  std::string condition;  // "stall", "rtos", "resends", "resets", "retrans"; "": not stopped
  uint64_t crossed_ns = 0, stopped_ns = 0, last_drop_ns = 0, start_ns = 0;
  uint32_t rtos = 0;  // "rtos", "resends", "resets": how many; "retrans": segments resent ...
  uint32_t segs = 0;  // ... of these sent
  std::string flow;  // "10.0.0.1:40000 -> 10.0.0.2:80"
  uint64_t cookie = 0;
  bool all = false;       // the daemon's guard (--guard-all) stopped every rule
  uint32_t rule_id = 0;   // the rule whose drop the evidence resent
  // From a stopped loss_guard entry.
  static GuardStopInfo Of(const struct loss_guard& g);
  // Rule.reason: "stopped by its guard: flow ... stalled longer than 500ms ...".
  std::string Describe(const Guard& guard) const;
};

// A rule as its owner holds it.
struct RuleInfo {
  uint32_t id = 0;
  RuleSpec spec;                   // as resolved (hook chosen)
  std::vector<std::string> hooks;  // descriptions of the attachments it uses
  // The cgroup its target resolved to (a path, or a service's cgroup): "" for
  // interface rules. Absolute and canonical; cgroup_mount is the v2 mount.
  std::string cgroup, cgroup_mount;
  uint64_t cgroup_id = 0;
  // cgroup below the mount ("/" for its root; "" for interface rules).
  std::string CgroupRelative() const {
    if (cgroup.empty()) return "";
    std::string rel = cgroup.substr(std::min(cgroup.size(), cgroup_mount.size()));
    return rel.empty() ? "/" : rel;
  }
  bool expired = false;
  // Deleted (Remove) and kept for inspection as an expired rule is.
  bool deleted = false;
  // Set while it is live and has matched no packet for unmatched_after
  // (UnmatchedHint: what to check).
  std::string hint;
  // Why the rule is FAILED ("": it is not): its target went away (the
  // interface was deleted, the cgroup removed, the program detached), so it
  // drops nothing. With spec.reattach it waits for its interface to return;
  // a cgroup rule always waits for its cgroup to be recreated (it follows
  // the service: docs/targeting.md#following).
  std::string failed;
  // What happened to it last while not failed ("cgroup ... was recreated
  // (id a -> b): re-attached"); shown as Rule.reason.
  std::string note;
  uint64_t created_unix_ns = 0;
  uint64_t expires_unix_ns = 0;  // 0: never
  // spec.schedule's origin, on the data plane's clock and as a wall-clock
  // time (0: no schedule); kept across re-attaches, new on Replace.
  uint64_t schedule_start_mono_ns = 0, schedule_start_unix_ns = 0;
  // expires_unix_ns, or the end of the schedule's last active window if sooner.
  void CapExpiryBySchedule() {
    auto span = TimelineSpan(spec).count();
    if (!span || !schedule_start_unix_ns) return;
    uint64_t end = schedule_start_unix_ns + uint64_t(span);
    if (!expires_unix_ns || end < expires_unix_ns) expires_unix_ns = end;
  }
  RuleCounters counters;         // live, or final once expired
  // A ramp's counters by step (spec.model.steps), live or final likewise.
  std::vector<StepCounters> step_counters;
  // Set when its guard stopped it (STOPPED; expired is set too: it is
  // retired as an expired rule is).
  GuardStopInfo guard_stop;
};

// Told of every rule change, under the injector's lock (so in order, and
// never after SetListener(nullptr) returns). Must not call the injector.
class RuleListener {
 public:
  virtual ~RuleListener() = default;
  // A rule is live with this spec (new, or replaced under the same id).
  virtual void RulePublished(uint32_t id, const RuleSpec& spec) = 0;
  // It drops nothing any more (expired, or failed: its target went); what
  // it caused stays on record. A failed rule that re-attaches is published
  // again.
  virtual void RuleRetired(uint32_t id) = 0;
  // Deleted, or expired and then forgotten.
  virtual void RuleForgotten(uint32_t id) = 0;
};

class Injector {
 public:
  // Creates the BPF maps, removes stale filters and offload changes a dead
  // previous owner left behind, and starts the lease. The hook programs load
  // on first use, one at a time (a rule that needs one, ProgFd, LoadAllPrograms):
  // see docs/architecture.md#start-up.
  static Result<std::unique_ptr<Injector>> Create(const InjectorOptions& opts);
  // An injector on maps and an attacher of the caller's (the unit tests'
  // fakes): no program of its own, no previous owner's leftovers removed.
  static Result<std::unique_ptr<Injector>> Create(const InjectorOptions& opts,
                                                  std::unique_ptr<LossMaps> maps,
                                                  std::unique_ptr<Attacher> attacher);
  // What Create refuses in `opts` before touching the kernel.
  static Status CheckOptions(const InjectorOptions& opts);
  ~Injector();
  Injector(const Injector&) = delete;
  Injector& operator=(const Injector&) = delete;

  // Checks the rule (validation, the limits, host protection), attaches
  // what it needs and publishes it. Returns its id.
  Result<uint32_t> Add(const RuleSpec& spec);
  // Swaps rule `id` for a new spec, keeping the id (counters restart). The
  // new rule is published before the old one is withdrawn.
  Status Replace(uint32_t id, const RuleSpec& spec);
  // Takes the rule out of the kernel and returns it with its final
  // counters. A live (or failed and waiting) rule is kept in the history of
  // retired rules, deleted, as an expired one is (keep_retired), so that its
  // counters and what it caused stay readable; a rule already in the history
  // (expired, failed, deleted) is forgotten.
  Result<RuleInfo> Remove(uint32_t id);
  // Takes it out and forgets it at once (a batch's rollback: it never was).
  Result<RuleInfo> Discard(uint32_t id);
  // Ends it as Remove does, but a rule already retired (expired, stopped,
  // failed, deleted) is returned as it is, never forgotten (a scenario's
  // step end, racing the rule's own TTL).
  Result<RuleInfo> Finish(uint32_t id);
  // What Add checks (validation, the limits, the target, host protection),
  // changing nothing: a dry run's answer.
  Status CheckOnly(const RuleSpec& spec) const {
    Target target;
    return Check(spec, &target);
  }
  // Removes and forgets every rule, kept ones too; returns how many it took
  // out of the kernel (live or waiting to re-attach).
  uint32_t Clear();

  // Live rules, failed ones, and the expired (RuleInfo.expired) and failed
  // ones still kept (InjectorOptions::keep_retired), by id.
  std::vector<RuleInfo> Rules() const;
  Result<RuleInfo> Get(uint32_t id) const;
  // Live counters, or the final ones of an expired rule.
  Result<RuleCounters> Counters(uint32_t id) const;
  // A deterministic rule's expectation (first-k, every-n-th: rules/model.h):
  // what its model drops of the packets each of its flows sent, as the data
  // plane counted them per flow, beside what it matched and dropped at that
  // same moment. nullopt for the random models, an unknown rule, or when the
  // per-flow counts do not add up to the matched packets in five reads (traffic
  // that would not hold still, a flow's state evicted, packets counted before a
  // re-attach): then no expectation can be stated.
  using Expectation = DropExpectation;
  std::optional<Expectation> ExpectedDrops(uint32_t id) const;
  size_t LiveCount() const;
  const RuleLimits& limits() const { return opts_.limits; }
  void SetListener(RuleListener* listener);
  HookCounters HookTotals(int hook) const {  // enum loss_hook
    return hook < 0 || hook >= LOSS_HOOK_MAX ? HookCounters() : maps_.HookTotals(uint32_t(hook));
  }
  // The drops recorded for one flow (direction src -> dst of `key`); none
  // (total 0) if rules dropped none of its data, or its entry was evicted
  // (the log is an LRU of LOSS_DROP_FLOWS flows).
  Result<FlowDrops> DropsOf(const loss_drop_key& key) const { return maps_.DropsOf(key); }
  // The maps the observer shares (bpf/lib/shared_maps.h: the drop log, the
  // guards), so its program links resends to drops and stops guarded rules.
  int SharedDropsFd() const { return maps_.DropsFd(); }
  int SharedGuardsFd() const { return maps_.GuardsFd(); }
  int SharedWatchFd() const { return maps_.WatchFd(); }
  // Every drop of one flow's data (as `key` names it) from now on, as the
  // data plane makes them, while the feed lives: what TraceFlow tells.
  Result<std::unique_ptr<DropFeed>> TraceDrops(const loss_drop_key& key) {
    return drop_ring_->Feed(key);
  }

  // Extends the lease, removes expired rules and checks the attachments
  // (the background threads do this; exposed for callers that run without).
  void Tick();
  // Extends the lease: never waits for a rule change (its own lock).
  void RenewLease();
  // Rules whose program is no longer attached (interface deleted, cgroup
  // removed) become FAILED; failed rules that asked for it re-attach when an
  // interface of their name exists again.
  void CheckAttachments();

  // Which hooks and attach modes this kernel supports; tries tcx and
  // clsact on loopback with pass-only programs (probe.h), only while no
  // attachment exists.
  Capabilities Probe() const;

  // Time left before the data plane stops dropping unless renewed (0 when
  // the lease is off or has run out).
  uint64_t LeaseRemainingNs() const;
  // Rules their guard stopped, ever (lossd_guard_stops_total).
  uint64_t GuardStops() const { return guard_stops_.load(); }

  // Program fds (loaded here if not yet), for BPF_PROG_TEST_RUN in tests
  // and benchmarks; -1 if it cannot load (logged).
  int ProgFd(int hook) const { return programs_->LoadedFd(hook); }
  // Loads the program of `hook` (enum loss_hook) unless it is loaded.
  // Thread-safe; does not hold the rules' lock while the verifier runs.
  Status LoadProgram(int hook) const { return programs_->Load(hook); }
  Status LoadAllPrograms() const { return programs_->LoadAll(); }
  // The programs loaded so far, with what each cost to load.
  std::vector<ProgLoadStats> LoadedPrograms() const { return programs_->Loaded(); }

 private:
  // A rule and what it holds of the attachment table (rule_attachments.h).
  struct Rule : RuleAttachments {
    RuleInfo info;  // info.counters: the final ones, once retired
    uint32_t slot = 0;
    uint32_t generation = 0;  // the slot's generation when published (the flow state's key)
    Target target;            // as resolved when it was last attached
    uint64_t expires_ns = 0;  // CLOCK_MONOTONIC, the data plane's clock
    bool live = false;        // holds a slot; false once expired or failed
    uint64_t retired_ns = 0;  // CLOCK_MONOTONIC: when it joined the history (0: not in it)
    RuleCounters before;      // what it counted before it failed and re-attached
  };

  Injector(const InjectorOptions& opts, std::unique_ptr<LossMaps> maps,
           std::unique_ptr<HookPrograms> programs, std::unique_ptr<Attacher> attacher);
  // Both Creates end here: the config written, a first Tick, the threads.
  static Result<std::unique_ptr<Injector>> Start(const InjectorOptions& opts,
                                                 std::unique_ptr<LossMaps> maps,
                                                 std::unique_ptr<HookPrograms> programs,
                                                 std::unique_ptr<Attacher> attacher);
  // Validation, the limits, the target, host protection: all but attaching.
  Status Check(const RuleSpec& spec, Target* target) const;
  Status LoadProgramsFor(const RuleSpec& spec) const;  // before taking mu_
  // expires_ns: the data plane's deadline (CLOCK_MONOTONIC); 0: from spec.ttl
  // and the end of spec.schedule's cycles, whichever comes first.
  // final_id: the id the rule will be moved to (Replace, re-attach), which the
  // data plane records in the drop log; 0: the new id this returns.
  // schedule_start_ns: spec.schedule's origin (CLOCK_MONOTONIC); 0: start_after from now.
  Result<uint32_t> AddLocked(const RuleSpec& spec, const Target& target, uint64_t expires_ns = 0,
                             uint32_t final_id = 0, uint64_t schedule_start_ns = 0);
  Status Retire(Rule& r);
  // keep: a live or waiting rule joins the history, deleted (Remove); else
  // it is forgotten at once (Clear).
  Result<RuleInfo> RemoveLocked(uint32_t id, bool keep);
  // The history's bound: at most keep_retired_max, none older than keep_retired.
  void TrimHistoryLocked(uint64_t now);
  // Moves the rule that AddLocked created under `fresh` to `id` (Replace, re-attach).
  void MoveRuleLocked(uint32_t fresh, uint32_t id);
  void FailLocked(uint32_t id, Rule& r, const std::string& reason);
  void ReattachLocked(uint32_t id);
  void Reap();
  void ReapLocked();
  void EndLocked(uint32_t id, Rule& rule, uint64_t now);
  bool GuardStoppedLocked(uint32_t id, Rule& rule);
  // Guard "misbehaves": its measured loss above its rate's 99.9 % interval
  // (rule.info.guard_stop and note set; the caller ends it).
  bool MisbehavesLocked(uint32_t id, Rule& rule);
  // The daemon's guard stopped in the kernel: every live rule retired STOPPED
  // with its evidence, and the guard armed again for the rules to come.
  void GuardAllStoppedLocked(uint64_t now);
  // Rules counted against --max-rules: every listed one but the history
  // (a failed rule waiting to re-attach counts: it will take a slot).
  size_t LiveLocked() const { return rules_.size() - expired_.size(); }
  Status CheckLiveLimitLocked() const;
  RuleInfo Snapshot(const Rule& r) const;
  void ReadStepCounters(const Rule& r, RuleInfo* info) const;
  Result<RuleCounters> LiveCounters(const Rule& r) const;

  InjectorOptions opts_;
  mutable HostGuard guard_;
  // The maps' side of every rule (slots, lists, config, lease): the maps
  // object goes last, after the programs and the attachments.
  RuleMaps maps_;
  std::unique_ptr<HookPrograms> programs_;
  std::unique_ptr<Attacher> attacher_;  // attaches programs_ (the kernel's)
  // The traced flows' drops, read from the maps' ring (ends before them).
  std::unique_ptr<DropRing> drop_ring_;

  mutable std::mutex mu_;
  RuleListener* listener_ = nullptr;
  std::map<uint32_t, Rule> rules_;
  // The history: ids of retained expired and failed rules, oldest first.
  std::deque<uint32_t> expired_;
  std::atomic<uint64_t> guard_stops_{0};
  AttachTable attach_;  // with the clsact qdiscs lossd created
  uint32_t next_id_ = 1;

  // Renew the lease (never under mu_), reap, check the attachments.
  std::unique_ptr<WatchThreads> threads_;
};
}  // namespace lossd
