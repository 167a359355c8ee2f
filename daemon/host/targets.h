// Services named as users think of them (a process, a systemd unit, a
// container, a pod) resolved to their cgroup v2 directory, and the reverse:
// who a cgroup is, from its path. How each layout is recognised:
// docs/targeting.md.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
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

constexpr size_t kOwnerCacheSize = 4096;

// Who the cgroup with each id is (the socket owner of an event or flow),
// resolved in user space from the id alone (open_by_handle_at on the cgroup
// v2 root, then CgroupOwnerOf) and cached: ids are never reused, so an
// answer stays true. Bounded (`capacity` ids; the cache starts over when
// full). Thread-safe.
class OwnerCache {
 public:
  // The path below the v2 mount of the cgroup with this id, "" if there is
  // none now; nullopt if it cannot be looked up (not cached: asked again).
  using PathOfId = std::function<std::optional<std::string>(uint64_t id)>;

  // Looks ids up on the cgroup v2 root, opened on first use.
  explicit OwnerCache(size_t capacity = kOwnerCacheSize);
  // Looks ids up with `path_of` (tests).
  explicit OwnerCache(PathOfId path_of, size_t capacity = kOwnerCacheSize);
  OwnerCache(const OwnerCache&) = delete;
  OwnerCache& operator=(const OwnerCache&) = delete;

  // Empty path: no such cgroup now (or id 0).
  CgroupOwner Of(uint64_t id);
  size_t size() const;  // ids cached

 private:
  std::optional<std::string> PathOf(uint64_t id);  // under mu_

  const PathOfId path_of_;  // null: root_
  const size_t capacity_;
  mutable std::mutex mu_;
  UniqueFd root_;  // the cgroup v2 root, once opened
  std::unordered_map<uint64_t, CgroupOwner> cache_;
};


// Resolves the service to the absolute path of its cgroup under the cgroup
// v2 mount `mount`: NOT_FOUND naming what was looked for and where,
// INVALID_ARGUMENT listing the candidates when several match (or for input
// that cannot name one), FAILED_PRECONDITION when a tool it needs is absent.
// The path still goes through ResolveCgroup (canonical, inside the mount).
Result<std::string> ResolveServiceCgroup(const ServiceTarget& t, const std::string& mount);

}  // namespace lossd
