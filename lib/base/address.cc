#include "base/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

namespace lossd {

int AfOfVersion(int version) {
  return version == 4 ? AF_INET : version == 6 ? AF_INET6 : 0;
}

int VersionOfAf(int af) {
  return af == AF_INET ? 4 : af == AF_INET6 ? 6 : 0;
}

std::string AddrText(int af, const void* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(af == AF_INET6 ? AF_INET6 : AF_INET, addr, buf, sizeof(buf));
  return buf;
}

SockAddr SockAddrOf(const struct sockaddr_storage& a) {
  SockAddr out;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    out.addr = AddrText(AF_INET, &v4->sin_addr);
    out.port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    out.addr = AddrText(AF_INET6, &v6->sin6_addr);
    out.port = ntohs(v6->sin6_port);
  }
  return out;
}

std::array<uint8_t, 16> PrefixMask(int prefix) {
  std::array<uint8_t, 16> m{};
  for (int bit = 0; bit < prefix && bit < 128; bit++) m[bit / 8] |= 0x80 >> (bit % 8);
  return m;
}

std::string ListenAddress::ToString() const {
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<ListenAddress> ParseListenAddress(const std::string& text, bool allow_any_port) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("listen address '" + Shown(text) + "': " + why +
                           " (want HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464)");
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("the port is not a number");
  long p = std::strtol(port.c_str(), nullptr, 10);
  if (p > 65535 || (p == 0 && !allow_any_port)) return bad("the port is outside 1..65535");

  ListenAddress a;
  a.port = static_cast<uint16_t>(p);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    struct in6_addr v6;
    if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) return bad("not an IPv6 address in [ ]");
    a.host = host;
    a.ipv6 = true;
    static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    a.loopback = IN6_IS_ADDR_LOOPBACK(&v6) ||
                 (std::memcmp(v6.s6_addr, mapped_prefix, 12) == 0 && v6.s6_addr[12] == 127);
    return a;
  }
  if (host.find(':') != std::string::npos) return bad("an IPv6 address needs [ ]");
  if (host.empty()) host = "0.0.0.0";
  if (host == "localhost") {
    a.host = "127.0.0.1";
    a.loopback = true;
    return a;
  }
  struct in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) != 1)
    return bad("the host is not an IPv4 address, [IPv6] or localhost");
  a.host = host;
  a.loopback = (ntohl(v4.s_addr) >> 24) == 127;
  return a;
}

}  // namespace lossd
