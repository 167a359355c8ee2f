// The TCP sockets of this network namespace, as /proc/net/tcp{,6} lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "observe_abi.h"

namespace lossd {

struct TcpSock {
  obs_tuple t{};  // local (s*) and remote (d*) endpoint, addresses in network order;
                  // an IPv4-mapped IPv6 socket (a dual-stack one's IPv4 peer) as IPv4
  int state = 0;  // TCP_ESTABLISHED 1, TCP_LISTEN 10
  uint64_t inode = 0;
};

std::vector<TcpSock> TcpSockets();

// The processes named `comm` (as /proc/PID/comm says): their pids, the
// inodes of the sockets they hold, and their cgroup v2 paths (relative to
// the hierarchy's root, as /proc/PID/cgroup gives them).
struct Processes {
  std::vector<int> pids;
  std::vector<uint64_t> socket_inodes;
  std::vector<std::string> cgroups;
};
Processes ProcessesNamed(const std::string& comm);

}  // namespace lossd
