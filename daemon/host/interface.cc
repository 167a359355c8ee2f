#include "host/interface.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "host/ethtool.h"

namespace lossd {

// SIOCGIFINDEX on a socket of its own, not if_nametoindex: glibc's reports a
// socket it could not open (EMFILE) as ENOENT, which would read as "no such
// interface" when the daemon is out of descriptors.
Result<int> IfIndex(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ)
    return InvalidArgument("invalid interface name '" + Shown(ifname) + "'");
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "look up interface '" + Shown(ifname) + "': socket");
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
  if (ioctl(fd.get(), SIOCGIFINDEX, &ifr) == 0) return ifr.ifr_ifindex;
  if (errno == ENODEV || errno == ENXIO)
    return NotFound("interface '" + Shown(ifname) + "' not found in this network namespace");
  return Status::FromErrno(errno, "look up interface '" + Shown(ifname) + "'");  // it could not look
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
