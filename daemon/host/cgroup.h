// The cgroup v2 hierarchy: where it is mounted, its root, and cgroups in it.
#pragma once

#include <cstdint>
#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

// Mount point of cgroup v2 in this mount namespace, "" if none.
std::string Cgroup2Mount();

// An fd of the cgroup v2 root directory. Where no cgroup2 is mounted in this
// mount namespace (`ip netns exec` remounts /sys, a pure v1 host), it mounts
// the hierarchy on a private temporary directory, opens it and detaches the
// mount again: the fd stays valid and nothing is left mounted.
Result<UniqueFd> OpenCgroup2Root();

// A cgroup v2 directory: its path, id and depth below the root.
struct CgroupInfo {
  std::string path;   // canonical
  std::string mount;  // the v2 mount it lies under, canonical
  uint64_t id = 0;
  uint8_t level = 0;
};
// Resolves a path (absolute, or relative to the v2 mount).
Result<CgroupInfo> ResolveCgroup(const std::string& path);

}  // namespace lossd
