#include "host/sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/fd.h"
#include "host/netlink.h"

namespace lossd {

namespace {

constexpr size_t kMaxPorts = 256;
constexpr size_t kMaxSockets = 1 << 20;

// inet_diag bytecode (linux/inet_diag.h) accepting a socket whose local or remote port
// is one of `ports`: port tests joined by OR as iproute2's ss joins them. A test is two
// ops (the second holds the port in `no`); one that holds goes on (yes 8) to a JMP
// whose `no` leaps to the end (accept); one that fails skips that JMP (no 12) to the
// next test, and the last one's failure lands past the end (reject). The kernel's audit
// wants every `no` target on the chain of `yes` steps from the start, which this is.
std::vector<inet_diag_bc_op> PortFilter(const std::vector<uint16_t>& ports) {
  std::vector<inet_diag_bc_op> ops;
  size_t tests = ports.size() * 2, total = tests * 2 + (tests - 1);  // ops of 4 bytes
  for (uint16_t port : ports) {
    for (unsigned char code : {static_cast<unsigned char>(INET_DIAG_BC_S_EQ),
                               static_cast<unsigned char>(INET_DIAG_BC_D_EQ)}) {
      ops.push_back(inet_diag_bc_op{code, 8, 12});
      ops.push_back(inet_diag_bc_op{INET_DIAG_BC_NOP, 0, port});
      if (ops.size() < total) {
        auto after = static_cast<unsigned short>((total - ops.size() - 1) * sizeof(inet_diag_bc_op));
        ops.push_back(inet_diag_bc_op{INET_DIAG_BC_JMP, 4, static_cast<unsigned short>(after + 4)});
      }
    }
  }
  return ops;
}

bool Mapped(const uint32_t* a) {
  return !a[0] && !a[1] && a[2] == htonl(0xffff);
}

TcpSock FromDiag(const inet_diag_msg& m) {
  TcpSock s;
  s.t.family = m.idiag_family;
  s.state = m.idiag_state;
  s.inode = m.idiag_inode;
  s.uid = m.idiag_uid;
  s.t.sport = ntohs(m.id.idiag_sport);
  s.t.dport = ntohs(m.id.idiag_dport);
  std::memcpy(s.t.saddr, m.id.idiag_src, sizeof(s.t.saddr));
  std::memcpy(s.t.daddr, m.id.idiag_dst, sizeof(s.t.daddr));
  // ::ffff:a.b.c.d is a.b.c.d on the wire: a dual-stack socket's IPv4 peer as IPv4.
  if (m.idiag_family == AF_INET6 && Mapped(s.t.saddr) && (Mapped(s.t.daddr) || s.state == 10)) {
    s.t.family = AF_INET;
    s.t.saddr[0] = s.t.saddr[3];
    s.t.daddr[0] = s.t.daddr[3];
    for (int w = 1; w < 4; w++) s.t.saddr[w] = s.t.daddr[w] = 0;
  }
  return s;
}

// One SOCK_DIAG_BY_FAMILY dump of `family`'s TCP sockets, appended to *out.
Status Dump(uint8_t family, uint32_t states, const std::vector<inet_diag_bc_op>& filter,
            std::vector<TcpSock>* out) {
  const char* what = family == AF_INET6 ? "TCP/IPv6 socket dump (NETLINK_SOCK_DIAG)"
                                        : "TCP/IPv4 socket dump (NETLINK_SOCK_DIAG)";
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd.valid()) return Status::FromErrno(errno, what);
  size_t bc_len = filter.size() * sizeof(inet_diag_bc_op);
  std::vector<char> req(NLMSG_SPACE(sizeof(inet_diag_req_v2)) + RTA_SPACE(bc_len));
  auto* nh = reinterpret_cast<struct nlmsghdr*>(req.data());
  nh->nlmsg_len = NLMSG_LENGTH(sizeof(inet_diag_req_v2));
  nh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
  nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  nh->nlmsg_seq = 1;
  auto* r = static_cast<inet_diag_req_v2*>(NLMSG_DATA(nh));
  r->sdiag_family = family;
  r->sdiag_protocol = IPPROTO_TCP;
  r->idiag_states = states;
  if (!filter.empty()) {
    auto* rta = reinterpret_cast<struct rtattr*>(req.data() + NLMSG_ALIGN(nh->nlmsg_len));
    rta->rta_type = INET_DIAG_REQ_BYTECODE;
    rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(bc_len));
    std::memcpy(RTA_DATA(rta), filter.data(), bc_len);
    nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_ALIGN(rta->rta_len);
  }
  return NetlinkDump(fd.get(), req.data(), nh->nlmsg_len, SOCK_DIAG_BY_FAMILY, what,
                     [&](const struct nlmsghdr& m) {
                       if (m.nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) return Status::Ok();
                       if (out->size() >= kMaxSockets)
                         return ResourceExhausted(std::string(what) + ": more than " +
                                                  std::to_string(kMaxSockets) + " sockets");
                       out->push_back(FromDiag(*static_cast<const inet_diag_msg*>(NLMSG_DATA(&m))));
                       return Status::Ok();
                     });
}

}  // namespace

Result<std::vector<TcpSock>> TcpSockets(uint32_t states, const std::vector<uint16_t>& ports) {
  if (ports.size() > kMaxPorts)
    return InvalidArgument("a socket dump filters on at most " + std::to_string(kMaxPorts) +
                           " ports, not " + std::to_string(ports.size()));
  std::vector<uint16_t> uniq(ports);
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  std::vector<inet_diag_bc_op> filter;
  if (!uniq.empty()) filter = PortFilter(uniq);
  std::vector<TcpSock> out;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}})
    LOSSD_RETURN_IF_ERROR(Dump(family, states, filter, &out));
  return out;
}

namespace {

// An endpoint as TcpSock has it (a mapped IPv6 address as IPv4).
struct End {
  uint8_t family = 0;
  uint32_t addr[4] = {};
  uint16_t port = 0;
};
End EndOf(const sockaddr_storage& a) {
  End e;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    e.family = AF_INET;
    e.addr[0] = in.sin_addr.s_addr;
    e.port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    e.family = AF_INET6;
    std::memcpy(e.addr, &in6.sin6_addr, sizeof(e.addr));
    e.port = ntohs(in6.sin6_port);
    if (Mapped(e.addr)) {
      e.family = AF_INET;
      e.addr[0] = e.addr[3];
      e.addr[1] = e.addr[2] = e.addr[3] = 0;
    }
  }
  return e;
}
bool SameAddr(uint8_t family, const uint32_t* a, const End& e) {
  return family == e.family && std::memcmp(a, e.addr, family == AF_INET ? 4 : 16) == 0;
}

}  // namespace

Result<std::optional<uint32_t>> LocalPeerUid(const sockaddr_storage& peer,
                                             const sockaddr_storage& local) {
  End p = EndOf(peer), l = EndOf(local);
  if (!p.family || !l.family) return std::optional<uint32_t>();  // not TCP/IP
  // The dump filtered on the client's port: its socket and lossd's end of it.
  auto socks = TcpSockets(kTcpEstablished, {p.port});
  if (!socks.ok()) return socks.status();
  for (const TcpSock& s : *socks) {
    if (s.t.sport == p.port && s.t.dport == l.port && SameAddr(s.t.family, s.t.saddr, p) &&
        SameAddr(s.t.family, s.t.daddr, l))
      return std::optional<uint32_t>(s.uid);
  }
  return std::optional<uint32_t>();
}

bool UidInGroup(uint32_t uid, uint32_t gid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  int err;
  while ((err = getpwuid_r(uid, &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 22))
    buf.resize(buf.size() * 2);
  if (err != 0 || !found) return false;
  if (pw.pw_gid == gid) return true;
  std::vector<gid_t> groups(64);
  int n = static_cast<int>(groups.size());
  while (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    if (n <= static_cast<int>(groups.size()) || n > 65536) return false;
    groups.resize(n);
  }
  return std::find(groups.begin(), groups.begin() + n, gid) != groups.begin() + n;
}

Processes ProcessesNamed(const std::string& comm) {
  Processes out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (struct dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    std::string dir = std::string("/proc/") + e->d_name;
    std::string name;
    std::ifstream(dir + "/comm") >> name;
    if (name != comm) continue;
    out.pids.push_back(static_cast<int>(pid));
    if (DIR* fds = opendir((dir + "/fd").c_str())) {
      while (struct dirent* f = readdir(fds)) {
        char target[64] = {};
        std::string link = dir + "/fd/" + f->d_name;
        ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
        unsigned long long inode;
        if (n > 0 && std::sscanf(target, "socket:[%llu]", &inode) == 1)
          out.socket_inodes.push_back(inode);
      }
      closedir(fds);
    }
    std::ifstream cg(dir + "/cgroup");
    for (std::string line; std::getline(cg, line);)
      if (line.rfind("0::", 0) == 0) out.cgroups.push_back(line.substr(3));
  }
  closedir(proc);
  return out;
}

}  // namespace lossd
