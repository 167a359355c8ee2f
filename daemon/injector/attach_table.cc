#include "injector/attach_table.h"

#include <sys/stat.h>

#include "common/log.h"
#include "host/interface.h"
#include "host/targets.h"
#include "loss_abi.h"

namespace lossd {

Result<std::unique_ptr<Attachment>> KernelAttacher::Attach(int kind, const std::string& iface,
                                                           const Target& target,
                                                           ClsactQdiscs* qdiscs) {
  int fd = programs_->Fd(kind);  // loaded before the rules' lock was taken (Load)
  if (fd < 0) return Internal(std::string("the ") + LossHookName(kind) + " program is not loaded");
  const int ifindex = target.ifindex;
  switch (kind) {
    case LOSS_HOOK_XDP: return AttachXdp(fd, ifindex, iface, xdp_mode_);
    case LOSS_HOOK_TC_INGRESS: return AttachTcxIngress(fd, ifindex, iface);
    case LOSS_HOOK_TC_EGRESS: return AttachClsactEgress(fd, ifindex, iface, qdiscs);
    case LOSS_HOOK_CGROUP_INGRESS:
    case LOSS_HOOK_CGROUP_EGRESS:
      return AttachCgroup(fd, target.cgroup.path, kind == LOSS_HOOK_CGROUP_EGRESS, cg_self_fd_);
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

void AttachTable::Release(const std::vector<AttachKey>& keys, const std::string& offload_iface) {
  for (const auto& k : keys) Release(k);
  if (!offload_iface.empty()) ReleaseOffload(offload_iface);
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
  if (key.kind == LOSS_HOOK_CGROUP_INGRESS || key.kind == LOSS_HOOK_CGROUP_EGRESS)
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

Status AttachTable::AcquireOffload(const std::string& ifname) {
  auto& off = offloads_[ifname];
  if (!off.guard) {
    auto g = OffloadGuard::Disable(ifname, offload_state_);
    if (!g.ok()) {
      offloads_.erase(ifname);
      return g.status();
    }
    off.guard = std::move(*g);
    LOG_INFO("GRO/GSO/TSO off on %s while per-segment rules use it", ifname.c_str());
  }
  off.refs++;
  return Status::Ok();
}

void AttachTable::ReleaseOffload(const std::string& ifname) {
  auto it = offloads_.find(ifname);
  if (it == offloads_.end()) return;
  if (--it->second.refs > 0) return;
  offloads_.erase(it);  // the guard restores the interface
}

AttachHold::~AttachHold() {
  if (committed_) return;
  if (!offload_.empty()) table_->ReleaseOffload(offload_);
  for (const auto& k : keys_) table_->Release(k);
}

Status AttachHold::Attach(const AttachKey& key, const std::string& iface, const Target& target) {
  LOSSD_RETURN_IF_ERROR(table_->Acquire(key, iface, target));
  keys_.push_back(key);
  return Status::Ok();
}

Status AttachHold::DisableOffloads(const std::string& iface) {
  LOSSD_RETURN_IF_ERROR(table_->AcquireOffload(iface));
  offload_ = iface;
  return Status::Ok();
}

}  // namespace lossd
