// What this kernel supports: the hook program types, BTF, cgroup v2, and the
// attach modes (tcx, netlink clsact) tried on loopback with pass-only
// programs, not the injector's (which load on first use).
#pragma once

#include <string>
#include <vector>

#include "injector/attach.h"

namespace lossd {

// What this kernel supports (Injector::Probe).
struct Capabilities {
  std::string kernel;
  bool btf = false;
  bool xdp = false, tc = false, cgroup_skb = false;
  bool tcx = false;     // tcx links (tc ingress without netlink)
  bool clsact = false;  // netlink clsact (egress with STOLEN)
  std::string cgroup2;  // mount point, "" if none
  std::vector<std::string> notes;
};

// The kernel's release, BTF, the program types, the cgroup v2 mount.
Capabilities ProbeKernel();
// tcx and clsact: pass-only programs attached to lo and detached again; a
// clsact qdisc created on lo is recorded in `qdiscs` (it stays while they do).
void ProbeAttachModes(ClsactQdiscs* qdiscs, Capabilities* c);

}  // namespace lossd
