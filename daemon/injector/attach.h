// RAII for every attachment the injector creates: bpf_link attachments
// (XDP, tcx, cgroup) and clsact netlink filters (and the qdiscs behind them).
// Destruction detaches/restores; errors carry errno and context.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

// Something attached to the kernel; detached when destroyed.
class Attachment {
 public:
  virtual ~Attachment() = default;
  virtual std::string Describe() const = 0;
  // Whether the kernel still runs the program there: false once its
  // interface is deleted (a bpf_link reports no ifindex any more, a clsact
  // filter is gone) or its cgroup removed (the link reports no cgroup).
  virtual bool Attached() const = 0;
};

enum class XdpMode { kAuto, kNative, kGeneric };

// Where a device is: a network namespace named by its inode (0: lossd's
// own) and a path that named it when it was found (/proc/PID/ns/net). Not
// held open: an fd would keep a dead container's namespace, and its
// devices, alive. Each use finds it again (host/netns.h: InNetns).
struct NetnsRef {
  uint64_t ino = 0;
  std::string path;
  std::string Suffix() const { return ino ? " in netns " + std::to_string(ino) : ""; }
};

// XDP on ifindex through a bpf_link (goes away with the process).
Result<std::unique_ptr<Attachment>> AttachXdp(int prog_fd, int ifindex, const std::string& ifname,
                                              XdpMode mode);
// tcx ingress through a bpf_link. (tcx egress is never used for loss: it has
// no STOLEN verdict, so a drop there is a local drop; see docs/architecture.md#egress-verdicts.)
Result<std::unique_ptr<Attachment>> AttachTcxIngress(int prog_fd, int ifindex,
                                                     const std::string& ifname);
// The clsact qdiscs an injector created. Adding or deleting a qdisc
// deactivates the device for a moment (qdisc_graft: dev_deactivate), which
// drops egress packets no rule matches; so a qdisc lossd created stays until
// its owner (the injector) ends, not until its last rule goes. Destruction
// removes those that nothing uses then.
class ClsactQdiscs {
 public:
  ClsactQdiscs() = default;
  ~ClsactQdiscs();
  ClsactQdiscs(const ClsactQdiscs&) = delete;
  ClsactQdiscs& operator=(const ClsactQdiscs&) = delete;
  void Add(const NetnsRef& ns, int ifindex, const std::string& ifname) {
    created_[{ns.ino, ifindex}] = {ifname, ns};
  }

 private:
  std::map<std::pair<uint64_t, int>, std::pair<std::string, NetnsRef>> created_;
};

// clsact egress filter over netlink (handle kTcHandle, priority
// kTcPriority), on device ifindex of namespace `ns` (lossd's own by
// default). Survives the process: the BPF lease guards it. A qdisc it has to
// create is recorded in `created`; a filter in another namespace, in
// `record_file` (the state dir's, "": none) while it exists, so that the
// next start can remove a crashed owner's there.
Result<std::unique_ptr<Attachment>> AttachClsactEgress(int prog_fd, int ifindex,
                                                       const std::string& ifname,
                                                       ClsactQdiscs* created,
                                                       const NetnsRef& ns = {},
                                                       const std::string& record_file = "");
// cgroup_skb ingress or egress on a cgroup v2 directory through a bpf_link.
// Then writes the id of the cgroup it attached to into the attachment's own
// cgroup storage (`self_map_fd`: loss_cg_self), so that each run decides only
// that cgroup's rules (docs/architecture.md#nested-cgroups). `attached_id`,
// if given, receives that id (of the directory opened, whatever the path
// names by then).
Result<std::unique_ptr<Attachment>> AttachCgroup(int prog_fd, const std::string& cgroup_path,
                                                 bool egress, int self_map_fd,
                                                 uint64_t* attached_id = nullptr);

constexpr uint32_t kTcHandle = 0x1055;
constexpr uint32_t kTcPriority = 0x10;
// Program name of the clsact egress program (struct bpf_prog_info.name).
constexpr const char* kTcEgressProgName = "lossd_tc_out";
// Program name of the pass-only program Injector::Probe attaches to lo for a
// moment; one found at start was left by a crash (or is another lossd's
// probe, ending anyway) and is removed.
constexpr const char* kProbeProgName = "lossd_probe";

// Removes clsact egress filters a dead lossd left: on any interface of this
// network namespace (its egress program with no live lease, or a probe's),
// and where `record_file` (the state dir's) says its owner attached in other
// namespaces (a cgroup target's devices in containers'); the records are
// then dropped. Returns how many it removed.
int RemoveStaleClsactFilters(const std::string& record_file);

}  // namespace lossd
