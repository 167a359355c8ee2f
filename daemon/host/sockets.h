// The TCP sockets of this network namespace, as /proc/net/tcp{,6} lists them.
#pragma once

#include <vector>

#include "observe_abi.h"

namespace lossd {

struct TcpSock {
  obs_tuple t{};  // local (s*) and remote (d*) endpoint, addresses in network order
  int state = 0;  // TCP_ESTABLISHED 1, TCP_LISTEN 10
};

std::vector<TcpSock> TcpSockets();

}  // namespace lossd
