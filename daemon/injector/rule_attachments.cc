#include "injector/rule_attachments.h"

#include <algorithm>

#include "base/log.h"

namespace lossd {

namespace {

AttachKey EgressKey(const Device& d) {
  return AttachKey{LOSS_HOOK_TC_EGRESS, uint64_t(d.ifindex), d.ns.ino};
}

Target OnDevice(Target t, const Device& d) {
  t.ifindex = d.ifindex;
  t.netns = d.ns;
  return t;
}

}  // namespace

Result<AttachPlan> PlanAttachments(const Attacher& attacher, const RuleSpec& spec, Hook hook,
                                   const Target& target) {
  // A cgroup target's egress is decided on the devices its packets leave by
  // (clsact, STOLEN: the sender's stack believes the packet left), in the
  // namespaces of its processes; never at cgroup_skb egress, where a drop is
  // a refusal the sending socket is told about (DESIGN 14).
  const bool cgroup_egress = hook == Hook::kCgroup && spec.dir != Direction::kIngress;
  EgressDevices egress;
  if (cgroup_egress) {
    auto e = attacher.Egress(target.cgroup);
    if (!e.ok()) return e.status();
    egress = std::move(*e);
  }
  AttachPlan plan;
  for (int kind : HookKinds(hook, spec.dir)) {
    plan.hook_mask |= uint8_t(1u << kind);
    if (kind == LOSS_HOOK_TC_EGRESS && cgroup_egress) {
      for (const Device& d : egress.devices) {
        plan.wants.push_back({EgressKey(d), d.name, OnDevice(target, d)});
        plan.holds.egress[EgressKey(d)] = d;
      }
      continue;
    }
    plan.wants.push_back(
        {AttachKey{kind, hook == Hook::kCgroup ? target.cgroup.id : uint64_t(target.ifindex)},
         spec.iface, target});
  }
  for (const auto& w : plan.wants) plan.holds.attach.push_back(w.key);
  if (spec.per_segment)
    plan.holds.offloads = cgroup_egress ? egress.devices
                                        : std::vector<Device>{Device{NetnsRef{}, target.ifindex, spec.iface}};
  return plan;
}

Status AttachPlan::Take(AttachHold& hold) const {
  for (const Want& w : wants) LOSSD_RETURN_IF_ERROR(hold.Attach(w.key, w.iface, w.target));
  for (const Device& d : holds.offloads) LOSSD_RETURN_IF_ERROR(hold.DisableOffloads(d));
  return Status::Ok();
}

void RuleAttachments::Release(AttachTable& table) {
  table.Release(attach, offloads);
  attach.clear();
  egress.clear();
  offloads.clear();
}

void RuleAttachments::Describe(const AttachTable& table, const RuleSpec& spec,
                               const Target& target, std::vector<std::string>* hooks) {
  hooks->clear();
  for (const auto& k : attach) hooks->push_back(table.Describe(k));
  egress_missing.clear();
  if (spec.hook == Hook::kCgroup && spec.dir != Direction::kIngress && egress.empty())
    egress_missing = "no egress device: the network namespace(s) of cgroup " + target.cgroup.path +
                     "'s processes are gone, so nothing decides its egress; it applies again "
                     "when a process of the cgroup is in a namespace with a device";
}

Status RuleAttachments::AddEgress(AttachTable& table, const RuleSpec& spec, const Target& target,
                                  const Device& dev) {
  AttachKey key = EgressKey(dev);
  AttachHold hold(&table);
  LOSSD_RETURN_IF_ERROR(hold.Attach(key, dev.name, OnDevice(target, dev)));
  if (spec.per_segment) LOSSD_RETURN_IF_ERROR(hold.DisableOffloads(dev));
  hold.Commit();
  attach.push_back(key);
  egress[key] = dev;
  if (spec.per_segment) offloads.push_back(dev);
  return Status::Ok();
}

bool RuleAttachments::FollowEgress(AttachTable& table, const Attacher& attacher, uint32_t id,
                                   const RuleSpec& spec, const Target& target,
                                   const std::set<AttachKey>& dead) {
  auto now = attacher.Egress(target.cgroup);
  if (!now.ok()) {  // logged once per cause, not at every check
    if (now.status().message() != egress_error)
      LOG_WARN("rule %u: %s", id, now.status().message().c_str());
    egress_error = now.status().message();
    return false;
  }
  egress_error.clear();
  std::map<AttachKey, Device> want;
  for (const Device& d : now->devices) want[EgressKey(d)] = d;
  // Without a process the cgroup says nothing about where its packets go:
  // the devices it has keep it until they are gone. (Only a rule created on a
  // cgroup with no process at all starts on lossd's own namespace's devices:
  // a service not started yet, on this host.)
  bool changed = false;
  for (auto it = egress.begin(); it != egress.end();) {
    const AttachKey k = it->first;
    const Device dev = it->second;
    bool gone = dead.count(k) > 0 || (now->has_processes && !want.count(k));
    if (!gone) {
      ++it;
      continue;
    }
    LOG_INFO("rule %u: egress device %s%s left (%s)", id, dev.name.c_str(), dev.ns.Suffix().c_str(),
             dead.count(k) ? "gone" : "no process of the cgroup is in its namespace now");
    table.Release({k}, {});
    attach.erase(std::find(attach.begin(), attach.end(), k));
    auto off = std::find(offloads.begin(), offloads.end(), dev);
    if (off != offloads.end()) {
      table.Release({}, {dev});
      offloads.erase(off);
    }
    it = egress.erase(it);
    changed = true;
  }
  // Devices are added only where a process of the cgroup is: a target whose
  // processes are all gone (a stopped container) keeps what is left of its
  // devices, and with none it is FAILED (egress_missing) until one is back.
  if (!now->has_processes) return changed;
  for (const auto& [k, dev] : want) {
    if (egress.count(k)) continue;
    Status st = AddEgress(table, spec, target, dev);
    if (!st.ok()) {
      if (st.message() != egress_error)
        LOG_WARN("rule %u: egress device %s%s: %s (retried)", id, dev.name.c_str(),
                 dev.ns.Suffix().c_str(), st.message().c_str());
      egress_error = st.message();
      continue;
    }
    LOG_INFO("rule %u: egress decided on %s%s too", id, dev.name.c_str(), dev.ns.Suffix().c_str());
    changed = true;
  }
  return changed;
}

}  // namespace lossd
