// The injector's BPF maps (bpf/loss.bpf.c) as the few operations the
// injector needs: katran's BpfAdapter idea, cut to what lossd writes and
// reads. BpfMaps is the kernel's; the unit tests fake LossMaps to see what is
// written, and in which order (tests/unit/injector_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "loss_abi.h"

struct bpf_object;
struct loss_bpf;  // generated skeleton (loss.skel.h)

namespace lossd {

// The data plane's own counters (bpf/loss_abi.h), summed over CPUs.
struct RuleCounters : loss_rule_stats {
  RuleCounters() : loss_rule_stats{} {}
  // The packets the rule's model picked: dropped, acted on, or passed
  // unacted (for a drop rule, its drops). What its rate is measured by.
  uint64_t picked_pkts() const { return dropped_pkts + acted_pkts + unacted_pkts; }
};
RuleCounters Sum(const RuleCounters& a, const RuleCounters& b);

struct HookCounters : loss_hook_stats {
  HookCounters() : loss_hook_stats{} {}
};

// A flow's drop log (bpf/loss_abi.h) as read: how many of its skbs with
// payload rules dropped, ever, and the ranges of the last LOSS_DROP_RANGES of
// them, oldest first.
struct FlowDrops {
  uint64_t total = 0;
  std::vector<loss_drop_range> ranges;
};

// One ramp step's counters (loss_ramp_stats), summed over CPUs.
struct StepCounters {
  uint64_t matched_pkts = 0, matched_segs = 0, dropped_pkts = 0, dropped_segs = 0;
};

// The drop log's key of a flow's data as on the wire, src -> dst (addresses
// in network byte order, IPv4 in [0]; ports in host order; family AF_INET/6).
loss_drop_key DropKey(int family, const uint32_t src[4], uint16_t sport, const uint32_t dst[4],
                      uint16_t dport);

// Each map the injector uses, by what it does with it. Errors carry errno
// and the map.
class LossMaps {
 public:
  virtual ~LossMaps() = default;
  // loss_rules: the rule in `slot`.
  virtual Status WriteRule(uint32_t slot, const struct loss_rule& r) = 0;
  // loss_rule_stats: zeroed on every CPU, or read (summed).
  virtual Status ResetCounters(uint32_t slot) = 0;
  virtual Result<RuleCounters> ReadCounters(uint32_t slot) const = 0;
  // loss_port_idx (key: anchor kind * 65536 + port) and loss_host_idx: the
  // candidate lists; a host entry no list needs is deleted (none: not an error).
  virtual Status WritePortList(uint32_t key, const struct loss_bucket& b) = 0;
  virtual Status WriteHostList(const struct loss_host_key& key, const struct loss_bucket& b) = 0;
  virtual Status DeleteHostList(const struct loss_host_key& key) = 0;
  // loss_host_bloom: one word of the host pre-filter.
  virtual Status WriteBloomWord(uint32_t word, uint64_t bits) = 0;
  // loss_cfg: the counts, the scan list and the lease.
  virtual Status WriteConfig(const struct loss_config& cfg) = 0;
  // loss_hook_stats, summed over CPUs (zero if unreadable).
  virtual HookCounters ReadHookTotals(uint32_t hook) const = 0;
  // loss_drops: false if the flow has no entry.
  virtual Result<bool> ReadDrops(const loss_drop_key& key, loss_drop_log* log) const = 0;
  // loss_traced: the flow's drops go to loss_drop_ring too (on), or no
  // longer; and how many of them the ring had no room for.
  virtual Status SetTraced(const loss_drop_key& key, bool on) = 0;
  virtual Result<uint64_t> ReadTracedLost(const loss_drop_key& key) const = 0;
  // loss_drop_ring's fd; -1: there is none (a fake's maps).
  virtual int DropRingFd() const = 0;
  // loss_flow_state: the packet count of each flow the rule in `slot` (of that
  // generation) decided on, as the data plane counts them (an LRU map: a flow
  // evicted is missing).
  virtual Result<std::vector<uint64_t>> ReadFlowCounts(uint32_t slot, uint32_t generation) const = 0;
  // loss_guards: the guard of the rule in `slot` (written before the rule),
  // deleted with it (none: not an error), and read (false: none).
  virtual Status WriteGuard(uint32_t slot, const struct loss_guard& g) = 0;
  virtual Status DeleteGuard(uint32_t slot) = 0;
  virtual Result<bool> ReadGuard(uint32_t slot, struct loss_guard* g) const = 0;
  // loss_guard_watch: the guards watching `port` (none: deleted).
  virtual Status WriteWatch(uint32_t port, const struct loss_guard_watch& w) = 0;
  // loss_ramps and loss_ramp_stats: a ramp's steps (written before the
  // rule, its counters zeroed), its steps' counters (the first `steps`), and
  // both deleted (none: not an error).
  virtual Status WriteRamp(uint32_t slot, const struct loss_ramp& r) = 0;
  virtual Result<std::vector<StepCounters>> ReadRampStats(uint32_t slot, size_t steps) const = 0;
  virtual Status DeleteRamp(uint32_t slot) = 0;
  // The maps the observer's object shares (bpf/lib/shared_maps.h); -1: none.
  virtual int DropsFd() const { return -1; }
  virtual int GuardsFd() const { return -1; }
  virtual int WatchFd() const { return -1; }
};

// One opened loss.bpf.c (its skeleton: loss.skel.h embeds the object file,
// so maps.cc alone includes it): the maps' object here, and one per hook
// program (HookPrograms, docs/architecture.md#start-up).
class LossObject {
 public:
  // Empty (false) if it cannot be opened, errno set.
  static LossObject Open();
  LossObject() = default;
  LossObject(LossObject&& o) noexcept : skel_(o.skel_) { o.skel_ = nullptr; }
  LossObject& operator=(LossObject&& o) noexcept;
  ~LossObject();
  bpf_object* get() const;
  // loss_bpf__load: 0, or a negative errno.
  int Load();
  explicit operator bool() const { return skel_ != nullptr; }

 private:
  friend class BpfMaps;
  loss_bpf* skel_ = nullptr;
};

// The kernel's maps: loss.bpf.c loaded with every program's autoload off.
class BpfMaps final : public LossMaps {
 public:
  static Result<std::unique_ptr<BpfMaps>> Create();
  // What the hook programs load against (their maps reuse these).
  const bpf_object* object() const { return obj_.get(); }
  // loss_cg_self, which AttachCgroup writes the attached cgroup's id into.
  int CgroupSelfFd() const { return cg_self_fd_; }

  Status WriteRule(uint32_t slot, const struct loss_rule& r) override;
  Status ResetCounters(uint32_t slot) override;
  Result<RuleCounters> ReadCounters(uint32_t slot) const override;
  Status WritePortList(uint32_t key, const struct loss_bucket& b) override;
  Status WriteHostList(const struct loss_host_key& key, const struct loss_bucket& b) override;
  Status DeleteHostList(const struct loss_host_key& key) override;
  Status WriteBloomWord(uint32_t word, uint64_t bits) override;
  Status WriteConfig(const struct loss_config& cfg) override;
  HookCounters ReadHookTotals(uint32_t hook) const override;
  Result<bool> ReadDrops(const loss_drop_key& key, loss_drop_log* log) const override;
  Status SetTraced(const loss_drop_key& key, bool on) override;
  Result<uint64_t> ReadTracedLost(const loss_drop_key& key) const override;
  int DropRingFd() const override { return drop_ring_fd_; }
  Result<std::vector<uint64_t>> ReadFlowCounts(uint32_t slot, uint32_t generation) const override;
  Status WriteRamp(uint32_t slot, const struct loss_ramp& r) override;
  Result<std::vector<StepCounters>> ReadRampStats(uint32_t slot, size_t steps) const override;
  Status DeleteRamp(uint32_t slot) override;
  Status WriteGuard(uint32_t slot, const struct loss_guard& g) override;
  Status DeleteGuard(uint32_t slot) override;
  Result<bool> ReadGuard(uint32_t slot, struct loss_guard* g) const override;
  Status WriteWatch(uint32_t port, const struct loss_guard_watch& w) override;
  int DropsFd() const override { return drops_fd_; }
  int GuardsFd() const override { return guards_fd_; }
  int WatchFd() const override { return watch_fd_; }

 private:
  BpfMaps() = default;
  LossObject obj_;
  int ncpus_ = 1;
  int rules_fd_ = -1, stats_fd_ = -1, port_fd_ = -1, host_fd_ = -1, bloom_fd_ = -1, cfg_fd_ = -1;
  int hook_stats_fd_ = -1, drops_fd_ = -1, cg_self_fd_ = -1, flow_state_fd_ = -1;
  int traced_fd_ = -1, drop_ring_fd_ = -1, guards_fd_ = -1, watch_fd_ = -1, ramps_fd_ = -1, ramp_stats_fd_ = -1;
};

}  // namespace lossd
