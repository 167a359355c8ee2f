// ethtool ioctls on an interface of this network namespace (not sysfs: under
// nsenter, /sys/class/net shows another namespace's devices).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace lossd {

struct DriverInfo {
  std::string driver;    // "veth", "ixgbe", ...
  std::string bus_info;  // "" or "N/A" for devices on no bus
};
Result<DriverInfo> GetDriverInfo(const std::string& ifname);

// ETHTOOL_G*/S* commands that take one value (GRO and the like): *value is
// sent and replaced by the answer.
Status EthtoolValue(const std::string& ifname, uint32_t cmd, uint32_t* value);

}  // namespace lossd
