#include "host/ethtool.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"

namespace lossd {
namespace {

Status Ioctl(const std::string& ifname, void* data) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ)
    return InvalidArgument("invalid interface name '" + Shown(ifname) + "'");
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno(errno, "socket for ethtool");
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = static_cast<char*>(data);
  if (ioctl(sock.get(), SIOCETHTOOL, &ifr) != 0)
    return Status::FromErrno(errno, "ethtool on " + ifname);
  return Status::Ok();
}

}  // namespace

Result<DriverInfo> GetDriverInfo(const std::string& ifname) {
  struct ethtool_drvinfo info = {};
  info.cmd = ETHTOOL_GDRVINFO;
  LOSSD_RETURN_IF_ERROR(Ioctl(ifname, &info));
  DriverInfo out;
  out.driver = info.driver;
  out.bus_info = info.bus_info;
  return out;
}

Status EthtoolValue(const std::string& ifname, uint32_t cmd, uint32_t* value) {
  struct ethtool_value ev = {};
  ev.cmd = cmd;
  ev.data = *value;
  LOSSD_RETURN_IF_ERROR(Ioctl(ifname, &ev));
  *value = ev.data;
  return Status::Ok();
}

}  // namespace lossd
