#include "host/sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace lossd {

std::vector<TcpSock> TcpSockets() {
  std::vector<TcpSock> out;
  for (int v6 = 0; v6 < 2; v6++) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string slot, local, remote, st, queues, timer, retr, uid, timeout;
      if (!(ls >> slot >> local >> remote >> st)) continue;
      TcpSock s;
      s.t.family = v6 ? AF_INET6 : AF_INET;
      s.state = static_cast<int>(std::strtol(st.c_str(), nullptr, 16));
      auto parse = [&](const std::string& ep, uint32_t* addr, uint16_t* port) {
        auto colon = ep.find(':');
        if (colon == std::string::npos) return;
        std::string a = ep.substr(0, colon);
        *port = static_cast<uint16_t>(std::strtoul(ep.substr(colon + 1).c_str(), nullptr, 16));
        // /proc prints each 32-bit word in host order.
        for (size_t w = 0; w * 8 < a.size() && w < 4; w++)
          addr[w] = static_cast<uint32_t>(std::strtoul(a.substr(w * 8, 8).c_str(), nullptr, 16));
      };
      parse(local, s.t.saddr, &s.t.sport);
      parse(remote, s.t.daddr, &s.t.dport);
      ls >> queues >> timer >> retr >> uid >> timeout >> s.inode;  // 0 if absent
      // ::ffff:a.b.c.d is a.b.c.d on the wire: words 0-1 zero, word 2 0xffff (network order).
      auto mapped = [](const uint32_t* a) { return !a[0] && !a[1] && a[2] == htonl(0xffff); };
      if (v6 && mapped(s.t.saddr) && (mapped(s.t.daddr) || s.state == 10)) {
        s.t.family = AF_INET;
        s.t.saddr[0] = s.t.saddr[3];
        s.t.daddr[0] = s.t.daddr[3];
        for (int w = 1; w < 4; w++) s.t.saddr[w] = s.t.daddr[w] = 0;
      }
      out.push_back(s);
    }
  }
  return out;
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
