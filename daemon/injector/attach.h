// RAII for every kernel object the injector creates: bpf_link attachments
// (XDP, tcx, cgroup), clsact netlink filters, and interface offload changes.
// Destruction detaches/restores; errors carry errno and context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace lossd {

// Something attached to the kernel; detached when destroyed.
class Attachment {
 public:
  virtual ~Attachment() = default;
  virtual std::string Describe() const = 0;
};

enum class XdpMode { kAuto, kNative, kGeneric };

// XDP on ifindex through a bpf_link (goes away with the process).
Result<std::unique_ptr<Attachment>> AttachXdp(int prog_fd, int ifindex, const std::string& ifname,
                                              XdpMode mode);
// tcx ingress through a bpf_link. (tcx egress is never used for loss: it has
// no STOLEN verdict, so a drop there is a local drop; see DESIGN.md fact 3.)
Result<std::unique_ptr<Attachment>> AttachTcxIngress(int prog_fd, int ifindex,
                                                     const std::string& ifname);
// clsact egress filter over netlink (handle kTcHandle, priority
// kTcPriority). Survives the process: the BPF lease guards it.
// Removes the clsact qdiscs this process created (kept until now: adding or
// deleting one briefly drops the device's egress traffic), where unused.
void ReleaseCreatedQdiscs();

Result<std::unique_ptr<Attachment>> AttachClsactEgress(int prog_fd, int ifindex,
                                                       const std::string& ifname);
// cgroup_skb ingress or egress on a cgroup v2 directory through a bpf_link.
Result<std::unique_ptr<Attachment>> AttachCgroup(int prog_fd, const std::string& cgroup_path,
                                                 bool egress);

constexpr uint32_t kTcHandle = 0x1055;
constexpr uint32_t kTcPriority = 0x10;
// Program name of the clsact egress program (struct bpf_prog_info.name).
constexpr const char* kTcEgressProgName = "lossd_tc_out";

// Removes clsact egress filters a dead lossd left on any interface of this
// network namespace. Returns how many it removed.
int RemoveStaleClsactFilters();

// Interfaces.
Result<int> IfIndex(const std::string& ifname);
// The driver's name ("veth", "ixgbe", ...), "" if unknown.
std::string DriverName(const std::string& ifname);
// True for interfaces without a device behind them (veth, bridge, ...).
bool IsVirtualInterface(const std::string& ifname);

// cgroup v2: resolve a path (absolute or relative to the v2 mount) to its
// directory, id and depth below the root.
struct CgroupInfo {
  std::string path;
  uint64_t id = 0;
  uint8_t level = 0;
};
Result<CgroupInfo> ResolveCgroup(const std::string& path);
// The cgroup v2 mount point ("" if none).

// Makes one skb one wire segment on an interface: gso_max_segs 1 (the
// stack then builds single-segment skbs for it; TCP sizes them before any
// hook runs, so turning TSO/GSO off would not do) and GRO off (no
// aggregation on receive). Restores both on destruction. The previous
// settings are written to state_file first, so that a crashed owner's
// changes are undone at the next start (RestoreOffloads).
class OffloadGuard {
 public:
  static Result<std::unique_ptr<OffloadGuard>> Disable(const std::string& ifname,
                                                       const std::string& state_file);
  ~OffloadGuard();
  OffloadGuard(const OffloadGuard&) = delete;
  OffloadGuard& operator=(const OffloadGuard&) = delete;

 private:
  OffloadGuard() = default;
  std::string ifname_, state_file_;
  uint32_t gro_ = 0, gso_max_segs_ = 0;
};

// Restores every interface listed in state_file; returns how many.
int RestoreOffloads(const std::string& state_file);

}  // namespace lossd
