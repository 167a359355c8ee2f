#include "observer/format.h"

#include <arpa/inet.h>

namespace lossd {

std::string AddrText(uint16_t family, const uint32_t* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, a, buf, sizeof(buf));
  return buf;
}

}  // namespace lossd
