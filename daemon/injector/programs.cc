#include "injector/programs.h"

#include <bpf/libbpf.h>

#include <cstring>
#include <string>

#include "base/clock.h"
#include "base/log.h"
#include "host/interface.h"

namespace lossd {

const char* LossHookName(int hook) {
  switch (hook) {
    case LOSS_HOOK_XDP: return "xdp";
    case LOSS_HOOK_TC_INGRESS: return "tc_ingress";
    case LOSS_HOOK_TC_EGRESS: return "tc_egress";
    case LOSS_HOOK_CGROUP_INGRESS: return "cgroup_ingress";
  }
  return "?";
}

namespace {
const char* ProgName(int hook) {
  switch (hook) {
    case LOSS_HOOK_XDP: return "lossd_xdp";
    case LOSS_HOOK_TC_INGRESS: return "lossd_tc_in";
    case LOSS_HOOK_TC_EGRESS: return "lossd_tc_out";
    case LOSS_HOOK_CGROUP_INGRESS: return "lossd_cg_in";
  }
  return "";
}
}  // namespace

Hook ChooseHook(const RuleSpec& spec) {
  if (spec.hook != Hook::kAuto) return spec.hook;
  if (NamesCgroup(spec)) return Hook::kCgroup;
  // XDP drops only: any other action changes or copies an skb (tc).
  if (spec.dir == Direction::kIngress && spec.action == Action::kDrop &&
      !IsVirtualInterface(spec.iface))
    return Hook::kXdp;  // physical NIC: drop before any skb exists
  return Hook::kTc;     // veth/virtual: tcx costs nothing measurable there
}

Status CheckHook(const RuleSpec& spec, Hook hook) {
  bool ingress = spec.dir != Direction::kEgress;
  if (spec.per_segment && ingress && DriverName(spec.iface) == "veth")
    return FailedPrecondition(
        "per-segment loss at a veth's ingress cannot be had there: the sending side builds the "
        "multi-segment packets. Put the rule on the sender's interface with direction egress, "
        "or set `ip link set <peer> gso_max_segs 1` on the peer");
  if (hook == Hook::kTc && NamesCgroup(spec) && ingress)
    return InvalidArgument(
        "a cgroup match at tc ingress never matches (no socket yet): use hook cgroup, or "
        "direction egress");
  return Status::Ok();
}

std::vector<int> HookKinds(Hook hook, Direction dir) {
  bool ingress = dir != Direction::kEgress;
  bool egress = dir != Direction::kIngress;
  std::vector<int> kinds;
  switch (hook) {
    case Hook::kXdp: kinds.push_back(LOSS_HOOK_XDP); break;
    case Hook::kTc:
      if (ingress) kinds.push_back(LOSS_HOOK_TC_INGRESS);
      if (egress) kinds.push_back(LOSS_HOOK_TC_EGRESS);
      break;
    case Hook::kCgroup:  // egress: clsact on the target's devices (Injector::AddLocked)
      if (ingress) kinds.push_back(LOSS_HOOK_CGROUP_INGRESS);
      if (egress) kinds.push_back(LOSS_HOOK_TC_EGRESS);
      break;
    case Hook::kAuto: break;
  }
  return kinds;
}

HookPrograms::HookPrograms(const bpf_object* maps) : maps_(maps) {
  for (auto& fd : fds_) fd = -1;
}

Status HookPrograms::Load(int hook) {
  if (hook < 0 || hook >= LOSS_HOOK_MAX) return Internal("unknown hook " + std::to_string(hook));
  if (fds_[hook] >= 0) return Status::Ok();
  std::lock_guard<std::mutex> load(load_mu_);
  if (fds_[hook] >= 0) return Status::Ok();
  const char* name = ProgName(hook);
  if (!maps_) return Internal(std::string("no BPF maps to load the ") + name + " program with");
  uint64_t t0 = MonotonicNs();
  LossObject obj = LossObject::Open();
  if (!obj) return Status::FromErrno(errno, std::string("open BPF object for ") + name);
  LOSSD_RETURN_IF_ERROR(ReuseMapsLoadOnly(obj.get(), maps_, name));
  int err = obj.Load();
  if (err)  // not the request's fault, whatever errno the kernel chose
    return Internal(std::string("lossd could not load its ") + LossHookName(hook) +
                    " program: " + strerror(-err) + " (the daemon's log has libbpf's account)");
  ProgLoadStats ps;
  ps.name = name;
  ps.load_ns = MonotonicNs() - t0;
  int fd = bpf_program__fd(bpf_object__find_program_by_name(obj.get(), name));
  FillProgInfo(fd, &ps);
  LOG_INFO("loaded the %s program: %u instructions verified in %.0f ms", LossHookName(hook),
           ps.verified_insns, ps.load_ns / 1e6);
  {
    std::lock_guard<std::mutex> lock(mu_);
    objs_[hook] = std::move(obj);
    stats_[hook] = ps;
  }
  fds_[hook] = fd;
  return Status::Ok();
}

Status HookPrograms::LoadAll() {
  for (int h = 0; h < LOSS_HOOK_MAX; h++) LOSSD_RETURN_IF_ERROR(Load(h));
  return Status::Ok();
}

int HookPrograms::LoadedFd(int hook) {
  if (hook < 0 || hook >= LOSS_HOOK_MAX) return -1;
  Status st = Load(hook);
  if (!st.ok()) {
    LOG_ERROR("%s", st.message().c_str());
    return -1;
  }
  return Fd(hook);
}

std::vector<ProgLoadStats> HookPrograms::Loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProgLoadStats> out;
  for (int h = 0; h < LOSS_HOOK_MAX; h++)
    if (objs_[h]) out.push_back(stats_[h]);
  return out;
}

}  // namespace lossd
