#include "injector/attach_table.h"

#include <net/if.h>
#include <sys/stat.h>

#include "base/log.h"
#include "host/interface.h"
#include "host/netlink.h"
#include "host/netns.h"
#include "host/targets.h"
#include "loss_abi.h"

namespace lossd {

namespace {
constexpr size_t kMaxEgressDevices = 1024;
}  // namespace

Result<std::unique_ptr<Attachment>> KernelAttacher::Attach(int kind, const std::string& iface,
                                                           const Target& target,
                                                           ClsactQdiscs* qdiscs) {
  int fd = programs_->Fd(kind);  // loaded before the rules' lock was taken (Load)
  if (fd < 0) return Internal(std::string("the ") + LossHookName(kind) + " program is not loaded");
  const int ifindex = target.ifindex;
  switch (kind) {
    case LOSS_HOOK_XDP: return AttachXdp(fd, ifindex, iface, xdp_mode_);
    case LOSS_HOOK_TC_INGRESS: return AttachTcxIngress(fd, ifindex, iface);
    case LOSS_HOOK_TC_EGRESS:
      return AttachClsactEgress(fd, ifindex, iface, qdiscs, target.netns, filter_records_);
    case LOSS_HOOK_CGROUP_INGRESS:
      return AttachCgroup(fd, target.cgroup.path, false, cg_self_fd_);
  }
  return Internal("unknown hook");
}

Result<int> KernelAttacher::IfIndex(const std::string& name) const {
  return lossd::IfIndex(name);
}

uint64_t KernelAttacher::CgroupId(const std::string& path) const {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  return st.st_ino;
}

Result<EgressDevices> KernelAttacher::Egress(const CgroupInfo& cgroup) const {
  EgressDevices out;
  const uint64_t own = ThreadNetnsIno();
  auto found = CgroupNetns(cgroup.path);
  if (!found.ok()) return found.status();
  auto nss = std::move(*found);
  out.has_processes = !nss.empty();
  if (nss.empty()) nss[own] = "";
  for (const auto& [ino, path] : nss) {
    NetnsRef ns{ino == own ? 0 : ino, ino == own ? "" : path};
    std::vector<Link> links;
    Status st = InNetns(ns.ino, ns.path, [&] {
      auto l = ListLinks();
      if (!l.ok()) return l.status();
      links = std::move(*l);
      return Status::Ok();
    });
    if (st.code() == Code::kNotFound) continue;  // its process left it meanwhile
    if (!st.ok())
      return Status(st.code(), "the devices of cgroup " + cgroup.path + "'s network namespace" +
                                   ns.Suffix() + ": " + st.message());
    for (const Link& l : links) {
      if ((l.flags & IFF_LOOPBACK) || l.master) continue;
      if (out.devices.size() >= kMaxEgressDevices)
        return ResourceExhausted("cgroup " + cgroup.path + ": more than " +
                                 std::to_string(kMaxEgressDevices) +
                                 " egress devices in its processes' network namespaces");
      out.devices.push_back(Device{ns, l.ifindex, l.name});
    }
  }
  return out;
}

uint64_t KernelAttacher::NetnsCookie() const { return ThreadNetnsCookie(); }

Status ResolveTarget(const Attacher& host, const RuleSpec& spec, Target* target) {
  if (!spec.iface.empty()) {
    auto idx = host.IfIndex(spec.iface);
    if (!idx.ok()) return idx.status();
    target->ifindex = *idx;
  }
  if (!NamesCgroup(spec)) return Status::Ok();
  std::string path = spec.cgroup;
  if (spec.service.Any()) {  // a service: its cgroup (host/targets.cc)
    std::string mount = Cgroup2Mount();
    if (mount.empty())
      return FailedPrecondition(spec.service.Describe() +
                                ": no cgroup v2 hierarchy is mounted, so no service can be found");
    auto p = ResolveServiceCgroup(spec.service, mount);
    if (!p.ok()) return p.status();
    path = *p;
  }
  auto cg = host.Cgroup(path);
  if (!cg.ok()) {
    if (!spec.service.Any()) return cg.status();
    return Status(cg.status().code(), spec.service.Describe() + ": " + cg.status().message());
  }
  target->cgroup = *cg;
  return Status::Ok();
}

bool TargetReturned(const Attacher& host, const RuleSpec& spec, const Target& was, Target* now,
                    std::string* where) {
  *now = was;
  if (spec.hook == Hook::kCgroup) {
    auto cg = host.Cgroup(was.cgroup.path);
    if (!cg.ok() || cg->id == was.cgroup.id) return false;
    now->cgroup = *cg;
    *where = "cgroup " + cg->path + " was recreated (id " + std::to_string(was.cgroup.id) + " -> " +
             std::to_string(cg->id) + ")";
    return true;
  }
  auto idx = host.IfIndex(spec.iface);
  if (!idx.ok() || *idx == was.ifindex) return false;
  now->ifindex = *idx;
  *where = "interface '" + spec.iface + "' was recreated (ifindex " + std::to_string(was.ifindex) +
           " -> " + std::to_string(*idx) + ")";
  return true;
}

std::string CgroupChanged(const Attacher& host, const Target& target) {
  if (target.cgroup.path.empty()) return "";
  uint64_t now_id = host.CgroupId(target.cgroup.path);
  std::string was =
      "cgroup " + target.cgroup.path + " (id " + std::to_string(target.cgroup.id) + ")";
  if (now_id == 0) return was + " was deleted: the rule applies again when it is recreated";
  if (now_id != target.cgroup.id)
    return was + " was recreated (id " + std::to_string(now_id) + "): re-attaching";
  return "";
}

void AttachTable::Release(const std::vector<AttachKey>& keys, const std::vector<Device>& offloads) {
  for (const auto& k : keys) Release(k);
  for (const auto& d : offloads) ReleaseOffload(d);
}

std::set<AttachKey> AttachTable::Dead() const {
  std::set<AttachKey> dead;
  for (const auto& [key, a] : attached_)
    if (!a.attachment->Attached()) dead.insert(key);
  return dead;
}

std::string AttachTable::WhyDead(const AttachKey& key, const std::string& iface,
                                 const Target& target) const {
  std::string what = Describe(key);
  if (key.kind == LOSS_HOOK_CGROUP_INGRESS)
    return "cgroup " + target.cgroup.path + " (id " + std::to_string(target.cgroup.id) +
           ") was deleted (" + what + " is gone)";
  auto now = attacher_->IfIndex(iface);
  return now.ok() && *now == target.ifindex ? what + " was detached by something other than lossd"
                                            : "interface '" + iface + "' (ifindex " +
                                                  std::to_string(target.ifindex) + ") was deleted";
}

Status AttachTable::Acquire(const AttachKey& key, const std::string& iface, const Target& target) {
  auto it = attached_.find(key);
  if (it != attached_.end()) {
    it->second.refs++;
    return Status::Ok();
  }
  auto a = attacher_->Attach(key.kind, iface, target, &qdiscs_);
  if (!a.ok()) return a.status();
  LOG_INFO("attached %s", (*a)->Describe().c_str());
  attached_[key] = Attached{std::move(*a), 1};
  return Status::Ok();
}

void AttachTable::Release(const AttachKey& key) {
  auto it = attached_.find(key);
  if (it == attached_.end()) return;
  if (--it->second.refs > 0) return;
  LOG_INFO("detaching %s", it->second.attachment->Describe().c_str());
  attached_.erase(it);
}

Status AttachTable::AcquireOffload(const Device& dev) {
  auto& off = offloads_[dev];
  if (!off.guard) {
    const std::string where = dev.name + dev.ns.Suffix();
    Result<std::unique_ptr<OffloadGuard>> g = Internal("offloads of " + where + ": not run");
    Status st = InNetns(dev.ns.ino, dev.ns.path, [&] {
      g = OffloadGuard::Disable(dev.name, offload_state_);
      return Status::Ok();
    });
    if (!st.ok()) g = Status(st.code(), "offloads of " + where + ": " + st.message());
    if (!g.ok()) {
      offloads_.erase(dev);
      return g.status();
    }
    off.guard = std::move(*g);
    LOG_INFO("GRO/GSO/TSO off on %s while per-segment rules use it", where.c_str());
  }
  off.refs++;
  return Status::Ok();
}

void AttachTable::ReleaseOffload(const Device& dev) {
  auto it = offloads_.find(dev);
  if (it == offloads_.end()) return;
  if (--it->second.refs > 0) return;
  offloads_.erase(it);  // the guard restores the interface (in its namespace)
}

AttachHold::~AttachHold() {
  if (committed_) return;
  for (const auto& d : offloads_) table_->ReleaseOffload(d);
  for (const auto& k : keys_) table_->Release(k);
}

Status AttachHold::Attach(const AttachKey& key, const std::string& iface, const Target& target) {
  LOSSD_RETURN_IF_ERROR(table_->Acquire(key, iface, target));
  keys_.push_back(key);
  return Status::Ok();
}

Status AttachHold::DisableOffloads(const Device& dev) {
  LOSSD_RETURN_IF_ERROR(table_->AcquireOffload(dev));
  offloads_.push_back(dev);
  return Status::Ok();
}

}  // namespace lossd
