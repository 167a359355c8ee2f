// The attachments the rules share and the offload changes they made: one
// table, reference-counted per (hook, target), and the hold that undoes what
// a rule being added took if it is not published (AttachHold). It works
// through an Attacher: KernelAttacher is the kernel's (programs loaded and
// attached, targets looked up); the unit tests fake it. Also a rule's Target:
// its kernel identity, resolved once, and whether it is still there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "host/cgroup.h"
#include "host/offloads.h"
#include "injector/attach.h"
#include "injector/programs.h"
#include "rules/rule.h"

namespace lossd {

// A rule's resolved target: the interface's index, the cgroup's id and depth;
// for one of a cgroup target's egress devices, the namespace it is in.
struct Target {
  int ifindex = 0;
  CgroupInfo cgroup;
  NetnsRef netns;
};

// A device: where it is, its index there and its name. A cgroup target's
// egress is decided on the devices of its processes' namespaces
// (Attacher::EgressDevices); a rule's offload changes are per device.
struct Device {
  NetnsRef ns;
  int ifindex = 0;
  std::string name;
  bool operator<(const Device& o) const {
    return std::tie(ns.ino, ifindex) < std::tie(o.ns.ino, o.ifindex);
  }
  bool operator==(const Device& o) const { return ns.ino == o.ns.ino && ifindex == o.ifindex; }
};

// The egress devices of a cgroup target now, and whether any process is in
// the cgroup (none: the list is lossd's own namespace's devices).
struct EgressDevices {
  std::vector<Device> devices;
  bool has_processes = false;
};

// What an attachment is shared by: the hook and the target's kernel
// identity (an ifindex in network namespace `netns`, 0: the daemon's; or
// the cgroup id), never its name: a recreated interface is another target.
struct AttachKey {
  int kind;         // enum loss_hook
  uint64_t target;  // ifindex, or cgroup id
  uint64_t netns = 0;
  bool operator<(const AttachKey& o) const {
    return std::tie(kind, target, netns) < std::tie(o.kind, o.target, o.netns);
  }
  bool operator==(const AttachKey& o) const {
    return kind == o.kind && target == o.target && netns == o.netns;
  }
};

// What the injector asks of the host to attach its programs: loading them,
// attaching one to a target, and where a target is now.
class Attacher {
 public:
  virtual ~Attacher() = default;
  // Loads the program of `kind` (enum loss_hook) unless it is loaded; never
  // under the rules' lock (the verifier takes 0.2-0.3 s).
  virtual Status Load(int kind) = 0;
  // Attaches the (loaded) program of `kind` to the target: `iface` by
  // target.ifindex, or target.cgroup. A clsact qdisc it creates is recorded
  // in `qdiscs`.
  virtual Result<std::unique_ptr<Attachment>> Attach(int kind, const std::string& iface,
                                                     const Target& target,
                                                     ClsactQdiscs* qdiscs) = 0;
  // The index of the interface of that name now.
  virtual Result<int> IfIndex(const std::string& name) const = 0;
  // The cgroup at `path` now (ResolveCgroup); its id alone (0: there is
  // none), which reads (ListRules) ask for every cgroup rule.
  virtual Result<CgroupInfo> Cgroup(const std::string& path) const = 0;
  virtual uint64_t CgroupId(const std::string& path) const = 0;
  // The devices a cgroup target's packets leave by: every device of each
  // network namespace its processes are in (of lossd's own while it has
  // none), but loopback and those enslaved to a bridge, bond or VRF (their
  // master's egress saw the packet first).
  virtual Result<EgressDevices> Egress(const CgroupInfo& cgroup) const = 0;
  // lossd's own namespace's netns cookie (0: unknown).
  virtual uint64_t NetnsCookie() const = 0;
};

// The kernel's: the programs of `programs`, attached with bpf_links (XDP
// in `xdp_mode`, tcx, cgroup_skb writing `cg_self_fd`: loss_cg_self) or a
// clsact filter (attach.h).
class KernelAttacher final : public Attacher {
 public:
  // filter_records: the state dir's record of filters in other namespaces
  // ("": none; AttachClsactEgress).
  KernelAttacher(HookPrograms* programs, int cg_self_fd, XdpMode xdp_mode,
                 std::string filter_records)
      : programs_(programs),
        cg_self_fd_(cg_self_fd),
        xdp_mode_(xdp_mode),
        filter_records_(std::move(filter_records)) {}
  Status Load(int kind) override { return programs_->Load(kind); }
  Result<std::unique_ptr<Attachment>> Attach(int kind, const std::string& iface,
                                             const Target& target, ClsactQdiscs* qdiscs) override;
  Result<int> IfIndex(const std::string& name) const override;
  Result<CgroupInfo> Cgroup(const std::string& path) const override { return ResolveCgroup(path); }
  uint64_t CgroupId(const std::string& path) const override;
  Result<EgressDevices> Egress(const CgroupInfo& cgroup) const override;
  uint64_t NetnsCookie() const override;

 private:
  HookPrograms* programs_;
  int cg_self_fd_;
  XdpMode xdp_mode_;
  std::string filter_records_;
};

// The target of `spec` resolved (its interface's index; its cgroup, a
// service first to its cgroup: host/targets.cc), before any program loads
// for it: a mistyped interface is NOT_FOUND without a verifier run.
Status ResolveTarget(const Attacher& host, const RuleSpec& spec, Target* target);
// Whether a gone target is back under a new identity: a cgroup rule's
// cgroup recreated at its path (a new id: the service restarted), an
// interface rule's interface of its name (a new ifindex). Then *now is it,
// and *where says what happened.
bool TargetReturned(const Attacher& host, const RuleSpec& spec, const Target& was, Target* now,
                    std::string* where);
// Why a cgroup target is not the one attached to (deleted, or recreated and
// not yet re-attached); "" while it is, and for interface targets.
std::string CgroupChanged(const Attacher& host, const Target& target);

class AttachTable {
 public:
  // Offload changes are recorded in `offload_state` first ("": not at all).
  AttachTable(Attacher* attacher, std::string offload_state)
      : attacher_(attacher), offload_state_(std::move(offload_state)) {}
  AttachTable(const AttachTable&) = delete;
  AttachTable& operator=(const AttachTable&) = delete;

  // Gives back what a committed hold took: the attachments `keys` (detached
  // when nothing else uses them), then the offload changes on `offloads`
  // (restored when no rule needs them).
  void Release(const std::vector<AttachKey>& keys, const std::vector<Device>& offloads);
  std::string Describe(const AttachKey& key) const {
    return attached_.at(key).attachment->Describe();
  }
  // The attachments whose program the kernel no longer runs there.
  std::set<AttachKey> Dead() const;
  // Why attachment `key` of a rule on `iface`/`target` is dead.
  std::string WhyDead(const AttachKey& key, const std::string& iface, const Target& target) const;
  bool empty() const { return attached_.empty(); }
  ClsactQdiscs* qdiscs() const { return &qdiscs_; }

 private:
  friend class AttachHold;
  struct Attached {
    std::unique_ptr<Attachment> attachment;
    int refs = 0;
  };
  struct Offload {
    std::unique_ptr<OffloadGuard> guard;
    int refs = 0;
  };
  Status Acquire(const AttachKey& key, const std::string& iface, const Target& target);
  void Release(const AttachKey& key);
  Status AcquireOffload(const Device& dev);
  void ReleaseOffload(const Device& dev);

  Attacher* attacher_;
  std::string offload_state_;
  // Before attached_: its qdiscs outlive the filters in them.
  mutable ClsactQdiscs qdiscs_;  // Probe() may create one on lo
  std::map<AttachKey, Attached> attached_;
  std::map<Device, Offload> offloads_;
};

// What a rule being added takes of the table: attachments (shared) and an
// offload change. Committed once the rule is published: from then on the
// rule owns them (AttachTable::Release). Otherwise the destructor gives
// them back: the offload change first, then the attachments.
class AttachHold {
 public:
  explicit AttachHold(AttachTable* table) : table_(table) {}
  ~AttachHold();
  AttachHold(const AttachHold&) = delete;
  AttachHold& operator=(const AttachHold&) = delete;

  Status Attach(const AttachKey& key, const std::string& iface, const Target& target);
  // Makes `dev` build single-segment skbs while a rule needs it.
  Status DisableOffloads(const Device& dev);
  void Commit() { committed_ = true; }

 private:
  AttachTable* table_;
  std::vector<AttachKey> keys_;
  std::vector<Device> offloads_;
  bool committed_ = false;
};

}  // namespace lossd
