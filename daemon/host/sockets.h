// The TCP sockets of this network namespace, as the kernel's socket diagnostics
// (NETLINK_SOCK_DIAG, inet_diag) list them, and processes by name.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "observe_abi.h"

namespace lossd {

struct TcpSock {
  obs_tuple t{};  // local (s*) and remote (d*) endpoint, addresses in network order;
                  // an IPv4-mapped IPv6 socket (a dual-stack one's IPv4 peer) as IPv4
  int state = 0;  // TCP_ESTABLISHED 1, TCP_LISTEN 10
  uint64_t inode = 0;
  uint32_t uid = 0;  // its owner, in lossd's user namespace
};

// The states TcpSockets takes: a bit per TCP state (1 << TCP_ESTABLISHED, ...).
constexpr uint32_t kTcpEstablished = 1u << 1, kTcpListen = 1u << 10;

// The IPv4 and IPv6 TCP sockets in `states` whose local or remote port is one of
// `ports` (empty: any port). The kernel applies the filter (inet_diag bytecode), so
// the cost is that of the sockets asked for, not of every connection of the host.
// At most 256 ports (more: InvalidArgument).
Result<std::vector<TcpSock>> TcpSockets(uint32_t states, const std::vector<uint16_t>& ports = {});

// Who holds the other end of a TCP connection lossd accepted (`peer`: the
// client's address, `local`: lossd's end): the uid of the socket of this
// network namespace whose local end is `peer` and remote end `local`;
// nullopt when this namespace has none (the client is another host, or in
// another network namespace).
Result<std::optional<uint32_t>> LocalPeerUid(const struct sockaddr_storage& peer,
                                             const struct sockaddr_storage& local);

// Whether user `uid` is in group `gid` (its primary group or a member, as
// getgrouplist says); false for a uid with no passwd entry.
bool UidInGroup(uint32_t uid, uint32_t gid);

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
