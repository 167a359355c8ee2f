// Interfaces of this network namespace.
#pragma once

#include <string>

#include "base/status.h"

namespace lossd {

Result<int> IfIndex(const std::string& ifname);
// The driver's name ("veth", "ixgbe", ...), "" if unknown.
std::string DriverName(const std::string& ifname);
// True for interfaces without a device behind them (veth, bridge, ...).
bool IsVirtualInterface(const std::string& ifname);

}  // namespace lossd
