#include "host/sockets.h"

#include <sys/socket.h>

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
      std::string slot, local, remote, st;
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
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace lossd
