// The loss injector: owns the BPF skeleton (maps and programs), turns rules
// into map entries, attaches the programs each rule needs (shared and
// reference-counted per interface/cgroup and hook), keeps the lease that
// makes a dead owner's leftover filters stop dropping, reaps expired rules,
// and reads the counters.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "injector/anchor_index.h"
#include "injector/attach.h"
#include "injector/encode.h"
#include "rules/rule.h"
#include "loss_abi.h"

struct loss_bpf;  // generated skeleton

namespace lossd {

struct InjectorOptions {
  // A program that finds the lease run out drops nothing. 0 disables it.
  std::chrono::milliseconds lease{3000};
  // Where crash-recovery state is kept (offload changes).
  std::string state_dir = "/run/lossd";
  XdpMode xdp_mode = XdpMode::kAuto;
  uint32_t max_rules = LOSS_MAX_RULES;
  // Start a thread that renews the lease and reaps expired rules.
  bool background = true;
};

// What a rule resolved to in the kernel.
struct RuleInfo {
  uint32_t id = 0;
  RuleSpec spec;
  std::vector<std::string> hooks;  // descriptions of the attachments it uses
  bool expired = false;
};

struct RuleCounters {
  uint64_t matched_pkts = 0, matched_segs = 0, matched_bytes = 0;
  uint64_t dropped_pkts = 0, dropped_segs = 0, dropped_bytes = 0;
};

struct HookCounters {
  uint64_t seen = 0, passed = 0, dropped = 0, unparsable = 0, always_pass = 0,
           lease_expired = 0;
};

// What this kernel supports (Injector::Probe).
struct Capabilities {
  std::string kernel;
  bool btf = false;
  bool xdp = false, tc = false, cgroup_skb = false;
  bool tcx = false;        // tcx links (tc ingress without netlink)
  bool clsact = false;     // netlink clsact (egress with STOLEN)
  std::string cgroup2;     // mount point, "" if none
  std::vector<std::string> notes;
};

const char* LossHookName(int hook);  // enum loss_hook -> "xdp", "tc_ingress", ...

class Injector {
 public:
  // Loads the BPF programs, removes stale filters and offload changes a dead
  // previous owner left behind, and starts the lease.
  static Result<std::unique_ptr<Injector>> Create(const InjectorOptions& opts);
  ~Injector();
  Injector(const Injector&) = delete;
  Injector& operator=(const Injector&) = delete;

  // Validates, attaches what the rule needs and publishes it. Returns its id.
  Result<uint32_t> Add(const RuleSpec& spec);
  // Swaps rule `id` for a new spec, keeping the id (counters restart). The
  // new rule is published before the old one is withdrawn.
  Status Replace(uint32_t id, const RuleSpec& spec);
  // Takes the rule out of the kernel and returns its final counters. An
  // expired rule (retired by the lease thread) is forgotten.
  Result<RuleCounters> Remove(uint32_t id);
  void Clear();

  // Live rules and the most recent expired ones (RuleInfo.expired).
  std::vector<RuleInfo> Rules() const;
  Result<RuleInfo> Get(uint32_t id) const;
  // Live counters, or the final ones of an expired rule.
  Result<RuleCounters> Counters(uint32_t id) const;
  HookCounters HookTotals(int hook) const;  // enum loss_hook

  // Extends the lease and removes expired rules (the background thread
  // calls this; exposed for callers that run without it).
  void Tick();

  // Which hooks and attach modes this kernel supports; tries tcx and
  // clsact on loopback with the injector's own (pass-only when no rule
  // targets loopback) programs.
  Capabilities Probe() const;

  // Time left before the data plane stops dropping unless renewed (0 when
  // the lease is off or has run out).
  uint64_t LeaseRemainingNs() const;

  // Program fds, for BPF_PROG_TEST_RUN in tests and benchmarks.
  int ProgFd(int hook) const;

 private:
  struct AttachKey {
    int kind;            // enum loss_hook
    std::string target;  // interface name or cgroup path
    bool operator<(const AttachKey& o) const {
      return std::tie(kind, target) < std::tie(o.kind, o.target);
    }
  };
  struct Attached {
    std::unique_ptr<Attachment> attachment;
    int refs = 0;
  };
  struct Offload {
    std::unique_ptr<OffloadGuard> guard;
    int refs = 0;
  };
  struct Rule {
    RuleInfo info;
    uint32_t slot = 0;
    std::vector<AttachKey> attach;
    std::string offload_iface;
    uint64_t expires_ns = 0;
    bool live = false;             // holds a slot; false once expired
    RuleCounters final_counters;   // read when retired
  };
  static constexpr size_t kExpiredKept = 1024;

  explicit Injector(const InjectorOptions& opts);
  Status Load();
  Status Acquire(const AttachKey& key, int ifindex);
  void Release(const AttachKey& key);
  void ReleaseOffload(const std::string& ifname);
  Status WriteLists(const std::vector<AnchorKey>& keys);
  Status BloomRef(uint32_t kind, const uint32_t* addr, int delta);
  Status WriteConfig();
  Status WriteRule(uint32_t slot, const struct loss_rule& r);
  Status ResetCounters(uint32_t slot);
  Status Retire(Rule& r);
  Result<RuleCounters> RemoveLocked(uint32_t id);
  Result<RuleCounters> ReadCounters(uint32_t slot) const;
  void Run();

  InjectorOptions opts_;
  struct SkelDeleter {
    void operator()(loss_bpf* s) const;
  };
  std::unique_ptr<loss_bpf, SkelDeleter> skel_;
  int ncpus_ = 1;

  mutable std::mutex mu_;
  AnchorIndex index_;
  struct loss_config cfg_ {};
  std::map<uint32_t, Rule> rules_;
  std::deque<uint32_t> expired_;  // ids of retained expired rules, oldest first
  std::map<AttachKey, Attached> attached_;
  std::map<std::string, Offload> offloads_;
  std::vector<uint32_t> free_slots_;
  // Host pre-filter: rules per bit, and the words as written to the map.
  std::map<uint32_t, uint32_t> bloom_refs_;  // kind * LOSS_BLOOM_BITS + bit
  std::vector<uint64_t> bloom_words_ = std::vector<uint64_t>(2 * LOSS_BLOOM_WORDS);
  std::set<AnchorKey> hosts_present_;
  std::array<uint32_t, LOSS_MAX_RULES> generation_{};
  uint32_t next_id_ = 1;

  std::thread thread_;
  std::condition_variable cv_;
  bool stop_ = false;
};



}  // namespace lossd
