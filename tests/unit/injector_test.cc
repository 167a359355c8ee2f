// The rule lifecycle (Add, Replace, expiry and the history, a target that goes
// and comes back) on fakes of the maps (LossMaps) and of the attacher: what is
// written to the maps and attached, in which order, and what the listener
// hears. No root, no kernel: the kernel's side is tests/bpf and tests/e2e.
#include "injector/injector.h"
#include "scenario/runner.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace lossd {
namespace {

using namespace std::chrono_literals;

// One log for the maps and the attachments, so that the order across both
// shows: "attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 1 gen 1",
// "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []", "read 0", ...
using Log = std::vector<std::string>;

// The lease thread writes the config while the test's thread changes rules
// (TheLeaseIsRenewedWhileAChangeHoldsTheRules): every line goes in under one lock.
std::mutex g_log_mu;
void Push(Log* log, std::string line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  log->push_back(std::move(line));
}

std::string Slots(const struct loss_bucket& b) {
  std::string s = "[";
  for (uint32_t i = 0; i < b.n; i++) s += (i ? " " : "") + std::to_string(b.slot[i]);
  return s + "]";
}

class FakeMaps final : public LossMaps {
 public:
  explicit FakeMaps(Log* log) : log_(log) {}

  Status WriteRule(uint32_t slot, const struct loss_rule& r) override {
    if (fail_rules) return Internal("fake: write rule slot " + std::to_string(slot));
    rules[slot] = r;
    Push(log_, "rule " + std::to_string(slot) + (r.flags & LOSS_RULE_ACTIVE ? " on" : " off") +
                    " id " + std::to_string(r.id) + " gen " + std::to_string(r.generation));
    return Status::Ok();
  }
  Status ResetCounters(uint32_t slot) override {
    counters[slot] = RuleCounters();
    Push(log_, "reset " + std::to_string(slot));
    return Status::Ok();
  }
  Result<RuleCounters> ReadCounters(uint32_t slot) const override {
    Push(log_, "read " + std::to_string(slot));
    auto it = counters.find(slot);
    return it == counters.end() ? RuleCounters() : it->second;
  }
  Status WritePortList(uint32_t key, const struct loss_bucket& b) override {
    if (fail_lists) return Internal("fake: write port index");
    Push(log_, std::string("port ") +
                    (key / 65536 == LOSS_ANCHOR_DPORT ? "dport " : "sport ") +
                    std::to_string(key % 65536) + " " + Slots(b));
    return Status::Ok();
  }
  Status WriteHostList(const struct loss_host_key& key, const struct loss_bucket& b) override {
    Push(log_, std::string("host ") + (key.kind == LOSS_ANCHOR_DHOST ? "dst " : "src ") +
                    Slots(b));
    return Status::Ok();
  }
  Status DeleteHostList(const struct loss_host_key& key) override {
    Push(log_, std::string("host ") + (key.kind == LOSS_ANCHOR_DHOST ? "dst" : "src") +
                    " deleted");
    return Status::Ok();
  }
  Status WriteBloomWord(uint32_t, uint64_t bits) override {
    Push(log_, bits ? "bloom set" : "bloom clear");
    return Status::Ok();
  }
  Status WriteConfig(const struct loss_config& c) override {
    cfg = c;
    std::string scan = "[";
    for (uint32_t i = 0; i < c.n_scan; i++) scan += (i ? " " : "") + std::to_string(c.scan[i]);
    Push(log_, "cfg ports " + std::to_string(c.n_port_rules) + " dhost " +
                    std::to_string(c.n_dhost_rules) + " shost " + std::to_string(c.n_shost_rules) +
                    " scan " + scan + "]");
    return Status::Ok();
  }
  HookCounters ReadHookTotals(uint32_t) const override { return HookCounters(); }
  Result<bool> ReadDrops(const loss_drop_key&, loss_drop_log*) const override { return false; }
  Status SetTraced(const loss_drop_key& key, bool on) override {
    if (on && traced_full) return ResourceExhausted("fake: loss_traced is full");
    Push(log_, std::string(on ? "traced " : "untraced ") + std::to_string(key.dport));
    if (on)
      traced_lost.emplace(key.dport, 0);
    else
      traced_lost.erase(key.dport);
    return Status::Ok();
  }
  Result<uint64_t> ReadTracedLost(const loss_drop_key& key) const override {
    auto it = traced_lost.find(key.dport);
    return it == traced_lost.end() ? 0 : it->second;
  }
  int DropRingFd() const override { return -1; }
  Result<std::vector<uint64_t>> ReadFlowCounts(uint32_t, uint32_t) const override {
    return std::vector<uint64_t>{};
  }
  Status WriteRamp(uint32_t slot, const struct loss_ramp& r) override {
    Push(log_, "ramp " + std::to_string(slot) + " of " + std::to_string(r.n));
    ramps[slot] = r;
    return Status::Ok();
  }
  Result<std::vector<StepCounters>> ReadRampStats(uint32_t slot, size_t steps) const override {
    auto it = ramp_counts.find(slot);
    std::vector<StepCounters> out(steps);
    if (it != ramp_counts.end())
      for (size_t i = 0; i < steps && i < it->second.size(); i++) out[i] = it->second[i];
    return out;
  }
  Status DeleteRamp(uint32_t slot) override {
    if (ramps.erase(slot)) Push(log_, "ramp " + std::to_string(slot) + " deleted");
    ramp_counts.erase(slot);
    return Status::Ok();
  }
  Status WriteGuard(uint32_t slot, const struct loss_guard& g) override {
    Push(log_, "guard " + std::to_string(slot));
    guards[slot] = g;
    return Status::Ok();
  }
  Status DeleteGuard(uint32_t slot) override {
    if (guards.erase(slot)) Push(log_, "guard " + std::to_string(slot) + " deleted");
    return Status::Ok();
  }
  Status WriteWatch(uint32_t port, const struct loss_guard_watch& w) override {
    Push(log_, "watch " + std::to_string(port) + ": " + std::to_string(w.n));
    if (w.n)
      watches[port] = w;
    else
      watches.erase(port);
    return Status::Ok();
  }
  Result<bool> ReadGuard(uint32_t slot, struct loss_guard* g) const override {
    auto it = guards.find(slot);
    if (it == guards.end()) return false;
    *g = it->second;
    return true;
  }

  std::map<uint32_t, struct loss_rule> rules;  // as last written
  std::map<uint32_t, RuleCounters> counters;   // what the data plane counted
  struct loss_config cfg {};                   // as last written
  std::map<uint32_t, struct loss_guard> guards;  // loss_guards as written (and "stopped")
  std::map<uint32_t, struct loss_guard_watch> watches;  // loss_guard_watch as written
  std::map<uint32_t, struct loss_ramp> ramps;    // loss_ramps as written
  std::map<uint32_t, std::vector<StepCounters>> ramp_counts;  // what the data plane counted
  bool fail_rules = false, fail_lists = false, traced_full = false;
  std::map<uint16_t, uint64_t> traced_lost;  // loss_traced by dport: the ring's losses

 private:
  Log* log_;
};

class FakeAttachment final : public Attachment {
 public:
  FakeAttachment(std::string what, std::shared_ptr<bool> alive, Log* log,
                 std::chrono::milliseconds detach_takes)
      : what_(std::move(what)), alive_(std::move(alive)), log_(log), detach_takes_(detach_takes) {}
  ~FakeAttachment() override {
    std::this_thread::sleep_for(detach_takes_);  // a kernel that waits (RCU) to detach
    Push(log_, "detach " + what_);
  }
  std::string Describe() const override { return what_; }
  bool Attached() const override { return *alive_; }

 private:
  std::string what_;
  std::shared_ptr<bool> alive_;
  Log* log_;
  std::chrono::milliseconds detach_takes_;
};

// Interfaces and cgroups as the test sets them; attachments that the test
// can kill ("tc_ingress eth-t#7", "cgroup_ingress cg#100", "tc_egress eth0#2@50"),
// and the egress devices a cgroup target has (`egress`).
class FakeAttacher final : public Attacher {
 public:
  explicit FakeAttacher(Log* log) : log_(log) {}

  Status Load(int kind) override {
    loaded.insert(kind);
    return Status::Ok();
  }
  Result<std::unique_ptr<Attachment>> Attach(int kind, const std::string& iface,
                                             const Target& target, ClsactQdiscs*) override {
    std::string what =
        std::string(LossHookName(kind)) + " " +
        (kind == LOSS_HOOK_CGROUP_INGRESS
             ? "cg#" + std::to_string(target.cgroup.id)
             : iface + "#" + std::to_string(target.ifindex) +
                   (target.netns.ino ? "@" + std::to_string(target.netns.ino) : ""));
    if (refuse.count(kind)) return FailedPrecondition("fake: cannot attach " + what);
    if (!loaded.count(kind)) return Internal("fake: not loaded: " + what);
    Push(log_, "attach " + what);
    alive[what] = std::make_shared<bool>(true);
    return std::unique_ptr<Attachment>(new FakeAttachment(what, alive[what], log_, detach_takes));
  }
  Result<int> IfIndex(const std::string& name) const override {
    auto it = ifindex.find(name);
    if (it == ifindex.end()) return NotFound("fake: no interface " + name);
    return it->second;
  }
  Result<CgroupInfo> Cgroup(const std::string& path) const override {
    auto it = cgroups.find(path);
    if (it == cgroups.end()) return NotFound("fake: no cgroup " + path);
    return it->second;
  }
  uint64_t CgroupId(const std::string& path) const override {
    auto it = cgroups.find(path);
    return it == cgroups.end() ? 0 : it->second.id;
  }
  Result<EgressDevices> Egress(const CgroupInfo&) const override { return egress; }
  uint64_t NetnsCookie() const override { return 0; }

  std::set<int> loaded, refuse;
  std::chrono::milliseconds detach_takes{0};
  std::map<std::string, int> ifindex{{"eth-t", 7}, {"eth-u", 9}};
  std::map<std::string, CgroupInfo> cgroups;
  std::map<std::string, std::shared_ptr<bool>> alive;  // by attachment
  EgressDevices egress{{Device{NetnsRef{}, 2, "eth0"}}, false};

 private:
  Log* log_;
};

class Heard final : public RuleListener {
 public:
  void RulePublished(uint32_t id, const RuleSpec&) override { Add("published", id); }
  void RuleRetired(uint32_t id) override { Add("retired", id); }
  void RuleForgotten(uint32_t id) override { Add("forgotten", id); }
  std::vector<std::string> calls;

 private:
  void Add(const char* what, uint32_t id) { calls.push_back(what + (" " + std::to_string(id))); }
};

const char* kCgroup = "/sys/fs/cgroup/svc";

RuleSpec PortRule(uint16_t dport, const std::string& iface = "eth-t") {
  RuleSpec s;
  s.iface = iface;
  s.hook = Hook::kTc;
  s.dir = Direction::kIngress;
  s.dport.lo = s.dport.hi = dport;
  s.model.p = 0.5;
  return s;
}

RuleSpec CgroupRule(Direction dir = Direction::kIngress) {
  RuleSpec s;
  s.cgroup = kCgroup;
  s.hook = Hook::kCgroup;
  s.dir = dir;
  s.model.p = 0.5;
  return s;
}

RuleCounters Dropped(uint64_t n) {
  RuleCounters c;
  c.dropped_pkts = n;
  return c;
}

class InjectorTest : public ::testing::Test {
 protected:
  static InjectorOptions Options() {
    InjectorOptions o;
    o.lease = std::chrono::hours(1);
    o.background = false;  // the test ticks
    o.state_dir = "";
    o.limits.protected_ports.clear();  // no host guard: it would read /proc
    return o;
  }
  void SetUp() override { Make(Options()); }
  void Make(const InjectorOptions& opts) {
    inj_.reset();
    auto maps = std::make_unique<FakeMaps>(&log_);
    auto host = std::make_unique<FakeAttacher>(&log_);
    maps_ = maps.get();
    host_ = host.get();
    host_->cgroups[kCgroup] = CgroupInfo{kCgroup, "/sys/fs/cgroup", 100, 1};
    auto inj = Injector::Create(opts, std::move(maps), std::move(host));
    ASSERT_TRUE(inj.ok()) << inj.status().ToString();
    inj_ = std::move(*inj);
    inj_->SetListener(&heard_);
    log_.clear();
  }
  uint32_t Add(const RuleSpec& spec) {
    auto id = inj_->Add(spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  // The log since the last call.
  Log Take() {
    Log out;
    std::lock_guard<std::mutex> lock(g_log_mu);
    out.swap(log_);
    return out;
  }
  // Tick (reap, check the attachments, renew the lease), and the log of
  // what it did before the lease's config write, which it ends with.
  Log Tick() {
    inj_->Tick();
    Log out = Take();
    EXPECT_FALSE(out.empty());
    if (!out.empty()) {
      EXPECT_EQ(out.back().rfind("cfg ", 0), 0u) << out.back();
      out.pop_back();
    }
    return out;
  }

  Log log_;
  Heard heard_;  // outlives the injector, which tells it of the last removals
  FakeMaps* maps_ = nullptr;
  FakeAttacher* host_ = nullptr;
  std::unique_ptr<Injector> inj_;
};

TEST_F(InjectorTest, AddAttachesThenWritesTheRuleThenItsListThenTheConfig) {
  uint32_t id = Add(PortRule(80));
  EXPECT_EQ(id, 1u);
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 1 gen 1",
                         "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []"}));
  EXPECT_EQ(maps_->rules[0].m.ifindex, 7u);
  EXPECT_EQ(maps_->rules[0].m.hook_mask, 1u << LOSS_HOOK_TC_INGRESS);
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1"}));
  EXPECT_GT(inj_->LeaseRemainingNs(), 0u);
}

TEST_F(InjectorTest, HostAnchorListIsWrittenBeforeItsPrefilterBitAndDeletedAfter) {
  RuleSpec s = PortRule(0);
  s.dport = PortRange();
  s.dst = *ParseCidr("10.0.0.1");
  uint32_t id = Add(s);
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 1 gen 1",
                         "host dst [0]", "bloom set", "cfg ports 0 dhost 1 shost 0 scan []"}));
  ASSERT_TRUE(inj_->Remove(id).ok());
  EXPECT_EQ(Take(), (Log{"bloom clear", "host dst deleted", "cfg ports 0 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "detach tc_ingress eth-t#7", "read 0"}));
}

TEST_F(InjectorTest, ReplacePublishesTheNewRuleBeforeWithdrawingTheOld) {
  uint32_t id = Add(PortRule(80));
  uint64_t created = inj_->Get(id)->created_unix_ns;
  maps_->counters[0] = Dropped(5);
  Take();
  ASSERT_TRUE(inj_->Replace(id, PortRule(81, "eth-u")).ok());
  EXPECT_EQ(Take(), (Log{// the new one, under the old id (the drop log's), in the next slot
                         "attach tc_ingress eth-u#9", "reset 1", "rule 1 on id 1 gen 1",
                         "port dport 81 [1]", "cfg ports 2 dhost 0 shost 0 scan []",
                         // then the old one out: lists, entry, attachment, final counters
                         "port dport 80 []", "cfg ports 1 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "detach tc_ingress eth-t#7", "read 0"}));
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->spec.dport.lo, 81);
  EXPECT_EQ(info->spec.iface, "eth-u");
  EXPECT_EQ(info->created_unix_ns, created);
  EXPECT_EQ(info->counters.dropped_pkts, 0u);  // counters restart
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "published 1"}));
  EXPECT_EQ(inj_->LiveCount(), 1u);
  // The old slot is free again, its generation bumped when reused.
  Take();
  Add(PortRule(82));
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 3 gen 2",
                         "port dport 82 [0]", "cfg ports 2 dhost 0 shost 0 scan []"}));
}

TEST_F(InjectorTest, ReplaceOnTheSameTargetSharesTheAttachment) {
  uint32_t id = Add(PortRule(80));
  Take();
  ASSERT_TRUE(inj_->Replace(id, PortRule(81)).ok());
  Log l = Take();
  EXPECT_EQ(std::count_if(l.begin(), l.end(),
                          [](const std::string& e) {
                            return e.rfind("attach", 0) == 0 || e.rfind("detach", 0) == 0;
                          }),
            0);
}

TEST_F(InjectorTest, ReplaceOfAnExpiredRuleCountsAgainstTheLimit) {
  InjectorOptions o = Options();
  o.limits.max_rules = 1;
  Make(o);
  RuleSpec brief = PortRule(80);
  brief.ttl = 1ms;
  uint32_t old = Add(brief);
  std::this_thread::sleep_for(20ms);
  inj_->Tick();
  ASSERT_TRUE(inj_->Get(old)->expired);
  uint32_t other = Add(PortRule(81));
  Status st = inj_->Replace(old, PortRule(82));
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  ASSERT_TRUE(inj_->Remove(other).ok());
  ASSERT_TRUE(inj_->Replace(old, PortRule(82)).ok());
  auto info = inj_->Get(old);
  EXPECT_FALSE(info->expired);
  EXPECT_EQ(info->expires_unix_ns, 0u);
  EXPECT_EQ(inj_->LiveCount(), 1u);  // out of the history
}

TEST_F(InjectorTest, ExpiryTakesTheRuleOutAndKeepsItsFinalCounters) {
  RuleSpec brief = PortRule(80);
  brief.ttl = 1ms;
  uint32_t id = Add(brief);
  EXPECT_GT(maps_->rules[0].expires_ns, 0u);  // the data plane stops on its own
  maps_->counters[0] = Dropped(4);
  Take();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(Tick(), (Log{"port dport 80 []", "cfg ports 0 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "detach tc_ingress eth-t#7", "read 0"}));
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->expired);
  EXPECT_TRUE(info->hooks.empty()) << "an expired rule lists an attachment it no longer has";
  EXPECT_EQ(info->counters.dropped_pkts, 4u);
  EXPECT_EQ(inj_->Counters(id)->dropped_pkts, 4u);
  EXPECT_EQ(inj_->LiveCount(), 0u);
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1"}));
  // Removing it forgets it, with nothing left to write.
  ASSERT_TRUE(inj_->Remove(id).ok());
  EXPECT_EQ(Take(), Log{});
  EXPECT_EQ(heard_.calls.back(), "forgotten 1");
}

TEST_F(InjectorTest, AGuardIsWrittenBeforeItsRuleAndItsStopRetiresTheRuleStopped) {
  RuleSpec guarded = PortRule(80);
  guarded.guard.rtos = 5;
  guarded.guard.rtos_window = 2s;
  uint32_t id = Add(guarded);
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "guard 0", "rule 0 on id 1 gen 1",
                         "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []"}));
  EXPECT_NE(maps_->rules[0].flags & LOSS_RULE_GUARDED, 0u);
  EXPECT_EQ(maps_->guards[0].rule_id, 1u);
  EXPECT_EQ(maps_->guards[0].rtos, 5u);
  // Running: the reaper leaves it.
  EXPECT_EQ(Tick(), Log{});
  // The kernel stopped it (guard_stop's writes; the reason last).
  loss_guard& g = maps_->guards[0];
  g.stopped_ns = 5000;
  g.crossed_ns = 4000;
  g.evidence_start_ns = 3000;
  g.last_drop_ns = 2000;
  g.count = 6;
  maps_->counters[0] = Dropped(3);
  EXPECT_EQ(Tick(), Log{}) << "no reason yet: the evidence is not complete";
  g.reason = LOSS_GUARD_RTOS;
  EXPECT_EQ(Tick(), (Log{"port dport 80 []", "cfg ports 0 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "guard 0 deleted", "detach tc_ingress eth-t#7",
                         "read 0"}));
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->expired);
  EXPECT_EQ(info->guard_stop.condition, "rtos");
  EXPECT_EQ(info->guard_stop.rtos, 6u);
  EXPECT_EQ(info->counters.dropped_pkts, 3u);
  EXPECT_NE(info->note.find("stopped by its guard (rtos>5/2s)"), std::string::npos) << info->note;
  EXPECT_EQ(inj_->GuardStops(), 1u);
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1"}));
}

TEST_F(InjectorTest, WatchingGuardsAreIndexedByTheirPortAndLeaveWithTheirRules) {
  RuleSpec watching = PortRule(80);
  watching.guard.stall = 1s;
  watching.guard.watch_port = 8080;
  uint32_t first = Add(watching);
  Log log = Take();
  EXPECT_NE(std::find(log.begin(), log.end(), "watch 8080: 1"), log.end());
  EXPECT_NE(maps_->guards[0].rtos & LOSS_GUARD_WATCHING, 0u);
  // Up to LOSS_WATCH_GUARDS on one port, in their slots.
  std::vector<uint32_t> ids{first};
  for (uint32_t i = 1; i < LOSS_WATCH_GUARDS; i++) ids.push_back(Add(watching));
  ASSERT_EQ(maps_->watches[8080].n, uint32_t(LOSS_WATCH_GUARDS));
  for (uint32_t i = 0; i < LOSS_WATCH_GUARDS; i++) EXPECT_EQ(maps_->watches[8080].slots[i], i);
  // One more is refused and leaves nothing behind: no rule, no guard.
  Take();
  auto refused = inj_->Add(watching);
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted) << refused.status().ToString();
  EXPECT_EQ(maps_->guards.count(LOSS_WATCH_GUARDS), 0u);
  EXPECT_EQ(maps_->watches[8080].n, uint32_t(LOSS_WATCH_GUARDS));
  // Deleting the first takes its slot out; deleting all takes the port out.
  ASSERT_TRUE(inj_->Remove(first).ok());
  EXPECT_EQ(maps_->watches[8080].n, uint32_t(LOSS_WATCH_GUARDS - 1));
  EXPECT_EQ(maps_->watches[8080].slots[0], 1u);
  for (size_t i = 1; i < ids.size(); i++) ASSERT_TRUE(inj_->Remove(ids[i]).ok());
  EXPECT_EQ(maps_->watches.count(8080), 0u);
}

TEST_F(InjectorTest, AMisbehavingRuleIsStoppedByLossd) {
  RuleSpec spec = PortRule(80);
  spec.model.p = 0.1;
  spec.guard.misbehaves = true;
  uint32_t id = Add(spec);
  EXPECT_EQ(maps_->rules[0].flags & LOSS_RULE_GUARDED, 0u) << "not the kernel's to decide";
  EXPECT_EQ(maps_->guards.count(0), 0u);
  auto set = [&](uint64_t matched, uint64_t dropped) {
    maps_->counters[0].matched_pkts = matched;
    maps_->counters[0].dropped_pkts = dropped;
    inj_->Tick();
    auto info = inj_->Get(id);
    EXPECT_TRUE(info.ok());
    return info.ok() && info->expired ? info->guard_stop.condition : std::string("live");
  };
  EXPECT_EQ(set(10000, 1000), "live");  // 10 %: its rate
  EXPECT_EQ(set(999, 999), "live");     // too few to judge
  EXPECT_EQ(set(10000, 1080), "live");  // 10.8 %: 99.9 % interval [10.0 %, 11.8 %] holds 10 %
  EXPECT_EQ(set(10000, 1200), "misbehaves");  // [10.9 %, 13.2 %]: above it
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->guard_stop.rtos, 1200u);
  EXPECT_EQ(info->guard_stop.segs, 10000u);
  EXPECT_NE(info->note.find("stopped by its guard (misbehaves): its measured loss 12 % (1200 "
                            "dropped of 10000 matched"),
            std::string::npos)
      << info->note;
  EXPECT_NE(info->note.find("lies above its rate 10 %"), std::string::npos) << info->note;
  EXPECT_EQ(inj_->GuardStops(), 1u);
}

TEST_F(InjectorTest, ADeletedRuleIsKeptReadableUntilDeletedAgain) {
  uint32_t id = Add(PortRule(80));
  maps_->counters[0] = Dropped(6);
  Take();
  auto gone = inj_->Remove(id);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_TRUE(gone->deleted);
  EXPECT_EQ(gone->counters.dropped_pkts, 6u);
  EXPECT_EQ(Take(), (Log{"port dport 80 []", "cfg ports 0 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "detach tc_ingress eth-t#7", "read 0"}));
  // Out of the kernel, still readable: deleted, its final counters, no attachment.
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->deleted);
  EXPECT_TRUE(info->hooks.empty());
  EXPECT_EQ(inj_->Counters(id)->dropped_pkts, 6u);
  EXPECT_EQ(inj_->LiveCount(), 0u);
  ASSERT_EQ(inj_->Rules().size(), 1u);
  // The effect tracker keeps what it caused: retired, not forgotten.
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1"}));
  EXPECT_EQ(inj_->Replace(id, PortRule(81)).code(), Code::kNotFound);
  // Deleting it again forgets it.
  ASSERT_TRUE(inj_->Remove(id).ok());
  EXPECT_EQ(Take(), Log{});
  EXPECT_EQ(inj_->Get(id).status().code(), Code::kNotFound);
  EXPECT_EQ(heard_.calls.back(), "forgotten 1");
  // Clear and Discard forget at once; so does Remove with keep-expired 0.
  uint32_t a = Add(PortRule(82)), b = Add(PortRule(83));
  ASSERT_TRUE(inj_->Discard(a).ok());
  EXPECT_EQ(inj_->Get(a).status().code(), Code::kNotFound);
  EXPECT_EQ(inj_->Clear(), 1u);
  EXPECT_EQ(inj_->Get(b).status().code(), Code::kNotFound);
  EXPECT_TRUE(inj_->Rules().empty());
  InjectorOptions o = Options();
  o.keep_retired = 0ns;
  Make(o);
  uint32_t c = Add(PortRule(84));
  ASSERT_TRUE(inj_->Remove(c).ok());
  EXPECT_EQ(inj_->Get(c).status().code(), Code::kNotFound);
}

// The lease thread takes no lock of the rules: while a change holds them for
// several leases (ten interfaces whose detaching waits 100 ms each, as a
// kernel waiting for RCU can), the lease is renewed and never runs out.
TEST_F(InjectorTest, TheLeaseIsRenewedWhileAChangeHoldsTheRules) {
  InjectorOptions o = Options();
  o.lease = 300ms;
  o.background = true;
  Make(o);
  host_->detach_takes = 100ms;
  for (int i = 0; i < 10; i++) {
    std::string name = "lk" + std::to_string(i);
    host_->ifindex[name] = 100 + i;
    Add(PortRule(80, name));
  }
  std::atomic<bool> clearing{true};
  std::vector<uint64_t> remaining;
  std::thread sampler([&] {
    while (clearing) {
      remaining.push_back(inj_->LeaseRemainingNs());
      std::this_thread::sleep_for(5ms);
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(inj_->Clear(), 10u);
  auto held = std::chrono::steady_clock::now() - t0;
  clearing = false;
  sampler.join();
  EXPECT_GE(held, 3 * o.lease) << "the change must outlast the lease for the test to show it";
  ASSERT_GT(remaining.size(), 20u);
  EXPECT_EQ(std::count(remaining.begin(), remaining.end(), 0u), 0)
      << "the lease ran out while Clear held the rules";
}

TEST_F(InjectorTest, ExpiredRulesAreForgottenAfterKeepExpired) {
  InjectorOptions o = Options();
  o.keep_retired = 100ms;
  Make(o);
  RuleSpec brief = PortRule(80);
  brief.ttl = 1ms;
  uint32_t id = Add(brief);
  std::this_thread::sleep_for(20ms);
  inj_->Tick();
  EXPECT_TRUE(inj_->Get(id).ok());
  Take();
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(Tick(), Log{});  // forgotten: nothing was left in the maps
  EXPECT_EQ(inj_->Get(id).status().code(), Code::kNotFound);
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1", "forgotten 1"}));
}

TEST_F(InjectorTest, AtMostKeepExpiredMaxAreKeptOldestForgottenFirst) {
  InjectorOptions o = Options();
  o.keep_retired_max = 2;
  Make(o);
  RuleSpec brief = PortRule(80);
  brief.ttl = 1ms;
  for (int i = 0; i < 3; i++) Add(brief);
  std::this_thread::sleep_for(20ms);
  inj_->Tick();
  std::vector<uint32_t> ids;
  for (const auto& r : inj_->Rules()) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(heard_.calls.back(), "forgotten 1");
  // keep-expired 0: forgotten at once.
  o.keep_retired = 0ns;
  Make(o);
  uint32_t id = Add(brief);
  std::this_thread::sleep_for(20ms);
  inj_->Tick();
  EXPECT_EQ(inj_->Get(id).status().code(), Code::kNotFound);
}

TEST_F(InjectorTest, DeletedInterfaceFailsTheRuleAndItReattachesToTheNextOne) {
  RuleSpec s = PortRule(80);
  s.reattach = true;
  s.ttl = std::chrono::hours(1);
  uint32_t id = Add(s);
  uint64_t deadline = maps_->rules[0].expires_ns;
  uint64_t expires_unix = inj_->Get(id)->expires_unix_ns;
  maps_->counters[0] = Dropped(5);
  Take();
  // The interface goes: out of the maps, FAILED, waiting (counted against the limit).
  *host_->alive["tc_ingress eth-t#7"] = false;
  host_->ifindex.erase("eth-t");
  EXPECT_EQ(Tick(), (Log{"port dport 80 []", "cfg ports 0 dhost 0 shost 0 scan []",
                         "rule 0 off id 0 gen 1", "detach tc_ingress eth-t#7", "read 0"}));
  auto info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->failed,
            "interface 'eth-t' (ifindex 7) was deleted; waiting for an interface of that name to "
            "re-attach");
  EXPECT_TRUE(info->hooks.empty());
  EXPECT_EQ(info->counters.dropped_pkts, 5u);
  EXPECT_EQ(inj_->LiveCount(), 1u);
  EXPECT_EQ(Tick(), Log{});  // still gone: nothing to do
  // An interface of its name comes back: attached there, the same id in the
  // drop log, the same deadline; counters go on from where they were.
  host_->ifindex["eth-t"] = 8;
  EXPECT_EQ(Tick(), (Log{"attach tc_ingress eth-t#8", "reset 0", "rule 0 on id 1 gen 2",
                         "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []"}));
  EXPECT_EQ(maps_->rules[0].m.ifindex, 8u);
  EXPECT_EQ(maps_->rules[0].expires_ns, deadline);
  maps_->counters[0] = Dropped(2);
  info = inj_->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->failed, "");
  EXPECT_EQ(info->note, "interface 'eth-t' was recreated (ifindex 7 -> 8): re-attached");
  EXPECT_EQ(info->counters.dropped_pkts, 7u);
  EXPECT_EQ(info->expires_unix_ns, expires_unix);
  EXPECT_EQ(info->hooks, (std::vector<std::string>{"tc_ingress eth-t#8"}));
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1", "published 1"}));
}

TEST_F(InjectorTest, ReattachThatFailsIsRecordedAndRetried) {
  RuleSpec s = PortRule(80);
  s.reattach = true;
  uint32_t id = Add(s);
  *host_->alive["tc_ingress eth-t#7"] = false;
  host_->ifindex["eth-t"] = 8;
  host_->refuse.insert(LOSS_HOOK_TC_INGRESS);
  inj_->Tick();
  auto info = inj_->Get(id);
  EXPECT_EQ(info->failed,
            "interface 'eth-t' was recreated (ifindex 7 -> 8), but re-attaching failed (retried): "
            "fake: cannot attach tc_ingress eth-t#8");
  host_->refuse.clear();
  Take();
  EXPECT_EQ(Tick(), (Log{"attach tc_ingress eth-t#8", "reset 0", "rule 0 on id 1 gen 2",
                         "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []"}));
  EXPECT_EQ(inj_->Get(id)->failed, "");
}

TEST_F(InjectorTest, WithoutReattachAFailedRuleJoinsTheHistory) {
  uint32_t id = Add(PortRule(80));
  *host_->alive["tc_ingress eth-t#7"] = false;  // detached, the interface still there
  inj_->Tick();
  auto info = inj_->Get(id);
  EXPECT_EQ(info->failed, "tc_ingress eth-t#7 was detached by something other than lossd");
  EXPECT_EQ(inj_->LiveCount(), 0u);
  host_->ifindex["eth-t"] = 8;
  Take();
  EXPECT_EQ(Tick(), Log{});  // never re-attached
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1"}));
}

TEST_F(InjectorTest, CgroupRuleFollowsItsRecreatedCgroup) {
  uint32_t id = Add(CgroupRule());
  EXPECT_EQ(Take(), (Log{"attach cgroup_ingress cg#100", "reset 0", "rule 0 on id 1 gen 1",
                         "cfg ports 0 dhost 0 shost 0 scan [0]"}));
  EXPECT_EQ(maps_->rules[0].m.cgroup_id, 100u);
  EXPECT_EQ(inj_->Get(id)->failed, "");
  // Recreated at its path: reads say so before the watch re-attaches.
  host_->cgroups[kCgroup].id = 101;
  auto info = inj_->Get(id);
  EXPECT_EQ(info->failed,
            "cgroup /sys/fs/cgroup/svc (id 100) was recreated (id 101): re-attaching");
  EXPECT_TRUE(info->hooks.empty());
  Take();
  // Its link reports the old cgroup gone: failed, then re-attached at once.
  *host_->alive["cgroup_ingress cg#100"] = false;
  EXPECT_EQ(Tick(),
            (Log{"cfg ports 0 dhost 0 shost 0 scan []", "rule 0 off id 0 gen 1",
                 "detach cgroup_ingress cg#100", "read 0", "attach cgroup_ingress cg#101", "reset 0",
                 "rule 0 on id 1 gen 2", "cfg ports 0 dhost 0 shost 0 scan [0]"}));
  EXPECT_EQ(maps_->rules[0].m.cgroup_id, 101u);
  info = inj_->Get(id);
  EXPECT_EQ(info->failed, "");
  EXPECT_EQ(info->cgroup_id, 101u);
  EXPECT_EQ(info->note, "cgroup /sys/fs/cgroup/svc was recreated (id 100 -> 101): re-attached");
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1", "retired 1", "published 1"}));
}

// A cgroup target's egress is decided at clsact egress on the devices of its
// processes' namespaces, never at cgroup_skb egress (a local refusal).
TEST_F(InjectorTest, CgroupEgressIsDecidedOnItsNamespacesDevices) {
  host_->egress = {{Device{NetnsRef{50, "/proc/9/ns/net"}, 2, "eth0"},
                    Device{NetnsRef{50, "/proc/9/ns/net"}, 3, "eth1"}},
                   true};
  uint32_t id = Add(CgroupRule(Direction::kBoth));
  EXPECT_EQ(Take(), (Log{"attach cgroup_ingress cg#100", "attach tc_egress eth0#2@50",
                         "attach tc_egress eth1#3@50", "reset 0", "rule 0 on id 1 gen 1",
                         "cfg ports 0 dhost 0 shost 0 scan [0]"}));
  EXPECT_EQ(maps_->rules[0].m.hook_mask,
            (1u << LOSS_HOOK_CGROUP_INGRESS) | (1u << LOSS_HOOK_TC_EGRESS));
  EXPECT_EQ(maps_->rules[0].m.ifindex, 0u);  // any device: the cgroup decides
  EXPECT_EQ(inj_->Get(id)->hooks.size(), 3u);
  Take();

  // One device deleted: detached, the rule stays ACTIVE on the others.
  *host_->alive["tc_egress eth1#3@50"] = false;
  host_->egress.devices.pop_back();
  EXPECT_EQ(Tick(), (Log{"detach tc_egress eth1#3@50"}));
  EXPECT_EQ(inj_->Get(id)->failed, "");
  Take();

  // The processes moved to another namespace: followed there.
  host_->egress = {{Device{NetnsRef{60, "/proc/10/ns/net"}, 2, "eth0"}}, true};
  EXPECT_EQ(Tick(), (Log{"detach tc_egress eth0#2@50", "attach tc_egress eth0#2@60"}));

  // Namespace gone, no process left: FAILED with the reason, rule kept (it is
  // not moved to lossd's own namespace's devices: no process of it is there).
  *host_->alive["tc_egress eth0#2@60"] = false;
  host_->egress = {{Device{NetnsRef{}, 2, "eth9"}}, false};
  EXPECT_EQ(Tick(), (Log{"detach tc_egress eth0#2@60"}));
  auto info = inj_->Get(id);
  EXPECT_NE(info->failed.find("no egress device"), std::string::npos) << info->failed;
  EXPECT_EQ(inj_->LiveCount(), 1u);
  Take();
  // A process in a namespace again: ACTIVE, counters kept (same slot).
  host_->egress = {{Device{NetnsRef{70, "/proc/11/ns/net"}, 4, "eth0"}}, true};
  EXPECT_EQ(Tick(), (Log{"attach tc_egress eth0#4@70"}));
  EXPECT_EQ(inj_->Get(id)->failed, "");
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1"}));
}

TEST_F(InjectorTest, CgroupEgressPerSegmentChangesEachDevice) {
  RuleSpec s = CgroupRule(Direction::kEgress);
  s.per_segment = true;
  host_->egress = {{Device{NetnsRef{50, "/proc/9/ns/net"}, 2, "eth0"}}, true};
  // The offload guard is the real one: it looks for namespace 50, which does
  // not exist on this host, so the rule is refused naming that device (not an
  // interface it does not name), and what it took is given back.
  auto r = inj_->Add(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("offloads of eth0 in netns 50"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(Take(), (Log{"attach tc_egress eth0#2@50", "detach tc_egress eth0#2@50"}));
}

TEST_F(InjectorTest, DeletedCgroupWaits) {
  uint32_t id = Add(CgroupRule());
  host_->cgroups.erase(kCgroup);
  *host_->alive["cgroup_ingress cg#100"] = false;
  inj_->Tick();
  auto info = inj_->Get(id);
  EXPECT_EQ(info->failed,
            "cgroup /sys/fs/cgroup/svc (id 100) was deleted (cgroup_ingress cg#100 is gone); the "
            "rule applies again when it is recreated");
  EXPECT_EQ(inj_->LiveCount(), 1u);  // waiting, not in the history
}

TEST_F(InjectorTest, HoldGivesBackWhatAFailedAddTook) {
  // The second attachment fails: the first is detached again.
  RuleSpec both = PortRule(80);
  both.dir = Direction::kBoth;
  host_->refuse.insert(LOSS_HOOK_TC_EGRESS);
  EXPECT_FALSE(inj_->Add(both).ok());
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "detach tc_ingress eth-t#7"}));
  // The map write fails: detached after it, and the slot stays free.
  host_->refuse.clear();
  maps_->fail_rules = true;
  EXPECT_FALSE(inj_->Add(PortRule(80)).ok());
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "detach tc_ingress eth-t#7"}));
  maps_->fail_rules = false;
  // A list write fails: the entry is left matching nothing, then detached.
  maps_->fail_lists = true;
  EXPECT_FALSE(inj_->Add(PortRule(80)).ok());
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 1 gen 2",
                         "rule 0 off id 1 gen 2", "detach tc_ingress eth-t#7"}));
  // ... and a guarded ramp's guard and ramp entries are deleted with it.
  RuleSpec ramped = PortRule(80);
  ramped.guard.stall = 500ms;
  ramped.model.kind = LossModel::Kind::kRamp;
  ramped.model.steps = {{0.01, 1s}, {0.05, 1s}};
  EXPECT_FALSE(inj_->Add(ramped).ok());
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "guard 0", "ramp 0 of 2",
                         "rule 0 on id 1 gen 3", "rule 0 off id 1 gen 3", "guard 0 deleted",
                         "ramp 0 deleted", "detach tc_ingress eth-t#7"}));
  EXPECT_TRUE(maps_->guards.empty());
  EXPECT_TRUE(maps_->ramps.empty());
  maps_->fail_lists = false;
  EXPECT_TRUE(inj_->Rules().empty());
  EXPECT_EQ(Add(PortRule(80)), 1u);
  EXPECT_EQ(Take()[1], "reset 0");
  EXPECT_EQ(heard_.calls, (std::vector<std::string>{"published 1"}));
}

TEST_F(InjectorTest, HoldKeepsASharedAttachmentOfAFailedAdd) {
  Add(PortRule(80));
  maps_->fail_rules = true;
  EXPECT_FALSE(inj_->Add(PortRule(81)).ok());
  EXPECT_EQ(Take(), (Log{"attach tc_ingress eth-t#7", "reset 0", "rule 0 on id 1 gen 1",
                         "port dport 80 [0]", "cfg ports 1 dhost 0 shost 0 scan []", "reset 1"}));
}


// ---- the traced flows' drops (DropRing over the fake maps: no ring, the test delivers) ----

loss_drop_key FlowKey(uint16_t dport) {
  uint32_t a[4] = {htonl(0x0a000001), 0, 0, 0}, b[4] = {htonl(0x0a000002), 0, 0, 0};
  return DropKey(AF_INET, a, 40000, b, dport);
}

loss_drop_event DropEvent(uint16_t dport, uint32_t seq) {
  loss_drop_event e{};
  e.key = FlowKey(dport);
  e.range.seq = seq;
  e.range.len = 1448;
  e.range.segs = 1;
  e.range.rule_id = 3;
  return e;
}

std::vector<uint32_t> Seqs(const std::vector<loss_drop_range>& d) {
  std::vector<uint32_t> out;
  for (const auto& r : d) out.push_back(r.seq);
  return out;
}

TEST(DropRing, EachFeedGetsEveryDropOfItsFlowOnly) {
  Log log;
  FakeMaps maps(&log);
  auto ring = DropRing::Start(&maps);
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  auto a1 = (*ring)->Feed(FlowKey(80)), a2 = (*ring)->Feed(FlowKey(80)), b = (*ring)->Feed(FlowKey(81));
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(log, (Log{"traced 80", "traced 81"}));  // the kernel's mark: once per flow
  (*ring)->Deliver(DropEvent(80, 1));
  (*ring)->Deliver(DropEvent(82, 9));  // a flow no longer traced: nobody's
  (*ring)->Deliver(DropEvent(80, 2));
  (*ring)->Deliver(DropEvent(81, 5));
  uint64_t lost = 0;
  EXPECT_EQ(Seqs((*a1)->Take(&lost)), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(Seqs((*a2)->Take(&lost)), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(Seqs((*b)->Take(&lost)), (std::vector<uint32_t>{5}));
  EXPECT_EQ(lost, 0u);
  EXPECT_TRUE((*a1)->Take(&lost).empty());  // told once
  a1->reset();
  EXPECT_EQ(log.size(), 2u);  // a2 still traces flow 80
  (*ring)->Deliver(DropEvent(80, 3));
  EXPECT_EQ(Seqs((*a2)->Take(&lost)), (std::vector<uint32_t>{3}));
  a2->reset();
  EXPECT_EQ(log.back(), "untraced 80");
  b->reset();
  EXPECT_EQ(log.back(), "untraced 81");
}

TEST(DropRing, TheRingsAndTheQueuesLossesAreCountedOnce) {
  Log log;
  FakeMaps maps(&log);
  auto ring = DropRing::Start(&maps);
  ASSERT_TRUE(ring.ok());
  auto a = (*ring)->Feed(FlowKey(80));
  ASSERT_TRUE(a.ok());
  maps.traced_lost[80] = 5;  // the kernel's ring had no room for 5
  auto late = (*ring)->Feed(FlowKey(80));  // opened after them: not its losses
  ASSERT_TRUE(late.ok());
  uint64_t lost = 0;
  (*a)->Take(&lost);
  EXPECT_EQ(lost, 5u);
  lost = 0;
  (*a)->Take(&lost);
  (*late)->Take(&lost);
  EXPECT_EQ(lost, 0u);
  for (size_t i = 0; i < DropRing::kFeedQueue + 7; i++) (*ring)->Deliver(DropEvent(80, 1));
  EXPECT_EQ((*a)->Take(&lost).size(), DropRing::kFeedQueue);
  EXPECT_EQ(lost, 7u);
}

TEST(DropRing, RefusedPastItsFlowsOrTheKernels) {
  Log log;
  FakeMaps maps(&log);
  auto ring = DropRing::Start(&maps);
  ASSERT_TRUE(ring.ok());
  std::vector<std::unique_ptr<DropFeed>> feeds;
  for (uint16_t p = 1; p <= LOSS_TRACED_FLOWS; p++) {
    auto f = (*ring)->Feed(FlowKey(p));
    ASSERT_TRUE(f.ok());
    feeds.push_back(std::move(*f));
  }
  auto more = (*ring)->Feed(FlowKey(1000));
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), Code::kResourceExhausted);
  EXPECT_TRUE((*ring)->Feed(FlowKey(1)).ok());  // a flow already traced: one more feed
  feeds.clear();
  maps.traced_full = true;
  auto refused = (*ring)->Feed(FlowKey(1000));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted);
  maps.traced_full = false;
  EXPECT_TRUE((*ring)->Feed(FlowKey(1000)).ok());  // nothing of the refused one was kept
}

TEST(DropRing, WaitCompleteUntilTheReaderIsPastTheTime) {
  Log log;
  FakeMaps maps(&log);
  auto ring = DropRing::Start(&maps);
  ASSERT_TRUE(ring.ok());
  auto f = (*ring)->Feed(FlowKey(80));
  ASSERT_TRUE(f.ok());
  (*ring)->SetComplete(100);
  EXPECT_TRUE((*f)->WaitComplete(100, std::chrono::milliseconds(0)));
  EXPECT_FALSE((*f)->WaitComplete(101, std::chrono::milliseconds(10)));
  DropRing* r = ring->get();
  std::thread later([r] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r->SetComplete(200);
  });
  EXPECT_TRUE((*f)->WaitComplete(150, std::chrono::seconds(10)));
  later.join();
}

// ---- scenarios: the runner over the same injector (daemon/scenario/runner.h) ----

class ScenarioRunnerTest : public InjectorTest {
 protected:
  static ScenarioStepPlan Step(const std::string& name, std::chrono::milliseconds d,
                               std::vector<RuleSpec> rules = {}) {
    ScenarioStepPlan s;
    s.name = name;
    s.duration_ns = uint64_t(std::chrono::nanoseconds(d).count());
    for (auto& r : rules) r.ttl = std::chrono::nanoseconds(d);
    s.rules = std::move(rules);
    return s;
  }
  ScenarioRecord WaitEnded(ScenarioRunner& runner, uint64_t id) {
    for (int i = 0; i < 500; i++) {
      auto r = runner.Get(id);
      EXPECT_TRUE(r.ok());
      if (r.ok() && r->state != ScenarioState::kRunning) return *r;
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "scenario " << id << " still running after 5 s";
    return *runner.Get(id);
  }
};

TEST_F(ScenarioRunnerTest, StepsRunInOrderEachWithItsRulesLabelledThenDone) {
  ScenarioRunner runner(inj_.get(), nullptr);
  ScenarioPlan plan;
  plan.name = "two";
  plan.steps = {Step("a", 40ms, {PortRule(80)}), Step("", 40ms), Step("c", 40ms, {PortRule(81), PortRule(82)})};
  auto started = runner.Start(plan, "test");
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->state, ScenarioState::kRunning);
  ASSERT_EQ(started->steps.size(), 1u);  // the answer comes once step 1's rules exist
  ASSERT_EQ(started->steps[0].rules.size(), 1u);
  uint32_t first = started->steps[0].rules[0].id;
  EXPECT_EQ(inj_->Get(first)->spec.labels,
            (std::map<std::string, std::string>{{"scenario", "two"},
                                                {"scenario-run", std::to_string(started->id)},
                                                {"scenario-step", "1"}}));
  ScenarioRecord end = WaitEnded(runner, started->id);
  EXPECT_EQ(end.state, ScenarioState::kDone);
  EXPECT_EQ(end.current_step, 0u);
  ASSERT_EQ(end.steps.size(), 3u);
  for (const auto& s : end.steps) {
    EXPECT_EQ(s.outcome, "done");
    EXPECT_GE(s.ended_unix_ns - s.started_unix_ns, 40'000'000u);
  }
  EXPECT_LE(end.steps[0].ended_unix_ns, end.steps[1].started_unix_ns);
  EXPECT_LE(end.steps[1].ended_unix_ns, end.steps[2].started_unix_ns);
  EXPECT_TRUE(end.steps[1].rules.empty());
  ASSERT_EQ(end.steps[2].rules.size(), 2u);
  EXPECT_EQ(end.steps[2].rules[1].spec.labels.at("scenario-step"), "3");
  // Every rule ended with its step, kept for reading.
  EXPECT_EQ(inj_->LiveCount(), 0u);
  EXPECT_TRUE(inj_->Get(first)->deleted || inj_->Get(first)->expired);
}

TEST_F(ScenarioRunnerTest, AbortEndsTheStepsRulesAtOnceAndNoFurtherStepStarts) {
  ScenarioRunner runner(inj_.get(), nullptr);
  ScenarioPlan plan;
  plan.name = "long";
  plan.steps = {Step("hold", 10s, {PortRule(80)}), Step("next", 10s, {PortRule(81)})};
  auto started = runner.Start(plan, "test");
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(inj_->LiveCount(), 1u);
  auto t0 = std::chrono::steady_clock::now();
  auto aborted = runner.Abort(started->id);
  ASSERT_TRUE(aborted.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(aborted->state, ScenarioState::kAborted);
  EXPECT_EQ(aborted->reason, "aborted during step 1 (hold)");
  ASSERT_EQ(aborted->steps.size(), 1u);
  EXPECT_EQ(aborted->steps[0].outcome, "aborted");
  EXPECT_TRUE(aborted->steps[0].rules[0].deleted);
  EXPECT_EQ(inj_->LiveCount(), 0u);
  // Again: the same report; an unknown id is NOT_FOUND.
  EXPECT_EQ(runner.Abort(started->id)->state, ScenarioState::kAborted);
  EXPECT_EQ(runner.Abort(999).status().code(), Code::kNotFound);
}

TEST_F(ScenarioRunnerTest, AStepTheInjectorRefusesFailsTheRunAndLeavesNoRule) {
  ScenarioRunner runner(inj_.get(), nullptr);
  ScenarioPlan plan;
  plan.name = "gone";
  plan.steps = {Step("a", 20ms, {PortRule(80)}), Step("b", 10s, {PortRule(81), PortRule(82, "nope")})};
  auto started = runner.Start(plan, "test");
  ASSERT_TRUE(started.ok());
  ScenarioRecord end = WaitEnded(runner, started->id);
  EXPECT_EQ(end.state, ScenarioState::kFailed);
  EXPECT_EQ(end.reason, "step 2 (b): rule 2: fake: no interface nope");
  ASSERT_EQ(end.steps.size(), 2u);
  EXPECT_EQ(end.steps[0].outcome, "done");
  EXPECT_EQ(end.steps[1].outcome, "failed: step 2 (b): rule 2: fake: no interface nope");
  EXPECT_EQ(inj_->LiveCount(), 0u);  // rule 1 of the failed step taken back too
}

TEST_F(ScenarioRunnerTest, ItsEndEndsEveryRunningScenario) {
  auto runner = std::make_unique<ScenarioRunner>(inj_.get(), nullptr);
  ScenarioPlan plan;
  plan.name = "x";
  plan.steps = {Step("a", 10s, {PortRule(80)})};
  ASSERT_TRUE(runner->Start(plan, "test").ok());
  ASSERT_TRUE(runner->Start(plan, "test").ok());
  EXPECT_EQ(inj_->LiveCount(), 2u);
  runner.reset();
  EXPECT_EQ(inj_->LiveCount(), 0u);
}

TEST_F(ScenarioRunnerTest, StartingAndAbortingInALoopHoldsAtMostSixteenThreads) {
  ScenarioRunner runner(inj_.get(), nullptr);
  ScenarioPlan plan;
  plan.name = "loop";
  plan.steps = {Step("a", 10s)};
  for (size_t i = 0; i < kMaxRunningScenarios; i++) {
    auto r = runner.Start(plan, "test");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(runner.Abort(r->id)->state, ScenarioState::kAborted);
  }
  // Each ended one settles its report for 3 s on its thread: no seventeenth yet.
  auto refused = runner.Start(plan, "test");
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("settling"), std::string::npos)
      << refused.status().message();
}

TEST(ScenarioShape, BoundsAndNamesAreChecked) {
  RuleLimits limits;
  ScenarioPlan p;
  p.name = "ok.name_1-2";
  ScenarioStepPlan s;
  s.duration_ns = 1'000'000;
  p.steps = {s};
  EXPECT_TRUE(CheckScenarioShape(p, limits).ok());
  auto msg = [&](ScenarioPlan q) { return CheckScenarioShape(q, limits).message(); };
  ScenarioPlan bad = p;
  bad.name = "a b";
  EXPECT_EQ(msg(bad), "name: 'a b': give 1 to 64 letters, digits, '.', '_' or '-'");
  bad = p;
  bad.steps.clear();
  EXPECT_EQ(msg(bad), "steps: 0 steps, give 1 to 64");
  bad = p;
  bad.steps[0].duration_ns = 999'999;
  bad.steps[0].name = "short";
  EXPECT_EQ(msg(bad), "step 1 (short): duration: 999999ns, give 1ms to 7d");
  bad = p;
  bad.steps.assign(65, s);
  EXPECT_EQ(msg(bad), "steps: 65 steps, give 1 to 64");
  bad = p;
  bad.steps[0].rules.resize(65);
  EXPECT_EQ(msg(bad), "step 1: more than 64 rules (the limit)");
  bad = p;
  bad.steps.assign(5, s);
  for (auto& st : bad.steps) st.rules.resize(52);
  EXPECT_EQ(msg(bad), "steps: 260 rules in all, the limit is 256");
  bad = p;
  bad.steps.assign(2, s);
  bad.steps[0].duration_ns = bad.steps[1].duration_ns = 4ull * 24 * 3600 * 1'000'000'000;
  EXPECT_EQ(msg(bad), "steps: 8d in all, the limit is 7d");
  limits.max_ttl_ns = 500'000;
  EXPECT_EQ(msg(p), "step 1: duration: 1ms is longer than a rule may live here (lossd --max-ttl 500us): "
                    "its rules' TTL is the step's duration");
}

}  // namespace
}  // namespace lossd
