// What one rule holds of the attachment table (attach_table.h): the programs
// it is attached by, a cgroup target's egress devices, the devices it made
// single-segment; how a new rule's attachments are planned before anything is
// taken, and how a cgroup rule's egress follows its processes' namespaces.
// The injector owns the rules and calls these under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "injector/attach_table.h"
#include "injector/programs.h"
#include "rules/rule.h"

namespace lossd {

struct RuleAttachments {
  std::vector<AttachKey> attach;
  // A cgroup target's egress: the devices it is decided on (each one's key
  // is in `attach`), followed by FollowEgress.
  std::map<AttachKey, Device> egress;
  std::vector<Device> offloads;  // per-segment: the devices made single-segment
  std::string egress_missing;    // why a cgroup rule's egress has no device ("": it has)
  std::string egress_error;      // the last failure following its devices (logged once)

  // Gives back to the table everything it holds.
  void Release(AttachTable& table);
  // What the rule's listing says it is attached to; a cgroup rule with egress
  // and no device (its processes' namespaces are gone) says so (egress_missing).
  void Describe(const AttachTable& table, const RuleSpec& spec, const Target& target,
                std::vector<std::string>* hooks);
  // A live cgroup rule's egress devices brought up to date: attached to the
  // devices its processes' namespaces have now, detached from those gone
  // (`dead`: the attachments the kernel no longer runs). True if it changed.
  bool FollowEgress(AttachTable& table, const Attacher& attacher, uint32_t id,
                    const RuleSpec& spec, const Target& target, const std::set<AttachKey>& dead);
  // Attaches (and with per_segment, makes single-segment) one egress device
  // of a cgroup rule; holds what it took.
  Status AddEgress(AttachTable& table, const RuleSpec& spec, const Target& target,
                   const Device& dev);
};

// What a rule of `spec` on `target` attaches by `hook`, computed before
// anything is taken: one program per hook kind (a cgroup target's egress on
// every device its packets leave by, in its processes' namespaces), and with
// per_segment the devices to make single-segment.
struct AttachPlan {
  struct Want {
    AttachKey key;
    std::string iface;
    Target target;
  };
  std::vector<Want> wants;
  RuleAttachments holds;  // what the rule holds once Take succeeded and it is published
  uint8_t hook_mask = 0;  // 1 << enum loss_hook of every kind (loss_rule.m.hook_mask)

  // Attaches then changes offloads; `hold` gives back what it took unless committed.
  Status Take(AttachHold& hold) const;
};
Result<AttachPlan> PlanAttachments(const Attacher& attacher, const RuleSpec& spec, Hook hook,
                                   const Target& target);

}  // namespace lossd
