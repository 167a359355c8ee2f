// Services named as users think of them (a process, a systemd unit, a
// container, a pod) resolved to their cgroup v2 directory, and the reverse:
// who a cgroup is, from its path. How each layout is recognised:
// docs/targeting.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "rules/rule.h"

namespace lossd {

// Who a cgroup belongs to, read from its path alone (the systemd, container
// runtime and kubelet layouts; no kernel access).
struct CgroupOwner {
  std::string path;       // relative to the cgroup v2 mount, "/" for the root
  std::string unit;       // the deepest systemd unit on the path (.service/.scope/.slice)
  std::string container;  // container id (64 hex digits), "" if none
  std::string runtime;    // "docker", "containerd", "cri-o", "podman" (with container)
  std::string pod;        // pod UID (8-4-4-4-12), "" if none
};
// `rel`: the path below the mount ("/system.slice/nginx.service", "" or "/"
// for the root).
CgroupOwner CgroupOwnerOf(const std::string& rel);

// The container id a cgroup directory named `name` (below `parent`) stands
// for in one of the runtimes' layouts ("docker-ID.scope", "/docker/ID",
// "cri-containerd-ID.scope", "crio-ID[.scope]", "libpod-ID[.scope]", a bare
// ID below a pod), with its runtime; false if none.
bool ContainerIdOf(const std::string& name, const std::string& parent, std::string* id,
                   std::string* runtime);
// The pod UID a directory named `name` stands for in the kubelet's layouts
// ("kubepods[-QOS]-podUID_WITH_UNDERSCORES.slice" under the systemd driver,
// "podUID" below a kubepods directory under cgroupfs); `under_kubepods`: an
// ancestor is the kubelet's kubepods cgroup.
bool PodUidOf(const std::string& name, bool under_kubepods, std::string* uid);

// Who the cgroup with this id is (the socket owner of an event or flow),
// resolved in user space from the id alone (open_by_handle_at on the cgroup
// v2 root, then CgroupOwnerOf) and cached: ids are never reused, so an
// answer stays true. Bounded (kOwnerCacheSize ids; the cache starts over
// when full). Thread-safe. Empty path: no such cgroup now (or id 0).
CgroupOwner OwnerOfCgroupId(uint64_t id);
constexpr size_t kOwnerCacheSize = 4096;

// Resolves the service to the absolute path of its cgroup under the cgroup
// v2 mount `mount`: NOT_FOUND naming what was looked for and where,
// INVALID_ARGUMENT listing the candidates when several match (or for input
// that cannot name one), FAILED_PRECONDITION when a tool it needs is absent.
// The path still goes through ResolveCgroup (canonical, inside the mount).
Result<std::string> ResolveServiceCgroup(const ServiceTarget& t, const std::string& mount);

}  // namespace lossd
