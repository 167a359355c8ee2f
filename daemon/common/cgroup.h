// The cgroup v2 hierarchy: where it is mounted, and its root.
#pragma once

#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace lossd {

// Mount point of cgroup v2 in this mount namespace, "" if none.
std::string Cgroup2Mount();

// An fd of the cgroup v2 root directory. Where no cgroup2 is mounted in this
// mount namespace (`ip netns exec` remounts /sys, a pure v1 host), it mounts
// the hierarchy on a private temporary directory, opens it and detaches the
// mount again: the fd stays valid and nothing is left mounted.
Result<UniqueFd> OpenCgroup2Root();

}  // namespace lossd
