#include "host/interface.h"

#include <net/if.h>

#include <cerrno>

#include "host/ethtool.h"

namespace lossd {

Result<int> IfIndex(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ)
    return InvalidArgument("invalid interface name '" + Shown(ifname) + "'");
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx && errno != ENODEV && errno != ENXIO)  // it could not look (e.g. EMFILE): not "absent"
    return Status::FromErrno(errno, "look up interface '" + Shown(ifname) + "'");
  if (!idx)
    return NotFound("interface '" + Shown(ifname) + "' not found in this network namespace");
  return static_cast<int>(idx);
}

std::string DriverName(const std::string& ifname) {
  auto info = GetDriverInfo(ifname);
  return info.ok() ? info->driver : "";
}

bool IsVirtualInterface(const std::string& ifname) {
  // A device on a bus (PCI, ...) reports where; veth, bridges, tun do not.
  auto info = GetDriverInfo(ifname);
  return !info.ok() || info->bus_info.empty() || info->bus_info == "N/A";
}

}  // namespace lossd
