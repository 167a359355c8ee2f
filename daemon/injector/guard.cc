#include "injector/guard.h"

#include <netinet/in.h>

#include <string>

#include "host/sockets.h"
#include "rules/match.h"
#include "rules/model.h"

namespace lossd {

Status CheckHostProtection(const RuleSpec& spec, const std::vector<uint16_t>& protected_ports) {
  if (spec.force || ModelMeanLoss(spec.model) == 0) return Status::Ok();
  if (spec.l4proto != 0 && spec.l4proto != IPPROTO_TCP) return Status::Ok();
  // Reading the host's sockets walks the kernel's whole TCP hash: only when
  // the rule's ports admit a protected one.
  bool admits = false;
  for (uint16_t port : protected_ports)
    admits |= (spec.sport.lo <= port && port <= spec.sport.hi) ||
              (spec.dport.lo <= port && port <= spec.dport.hi);
  if (!admits) return Status::Ok();

  // Live connections the rule covers, or a listener on a protected port
  // whose traffic it covers without narrowing by address.
  for (const TcpSock& s : TcpSockets()) {
    for (uint16_t port : protected_ports) {
      if (s.t.sport != port && s.t.dport != port) continue;
      if (s.state == 1 && RuleCoversFlow(spec, s.t))
        return FailedPrecondition(
            "this rule would drop packets of a live connection on protected port " +
            std::to_string(port) + " (SSH or lossd's control): narrow it (ports, addresses) "
            "or set force");
      if (s.state == 10 && s.t.sport == port && !spec.src && !spec.dst &&
          spec.cgroup.empty() && spec.sport.lo <= port && port <= spec.sport.hi &&
          spec.dport.lo <= port && port <= spec.dport.hi)
        return FailedPrecondition("this rule would drop traffic of the listener on protected port " +
                                  std::to_string(port) +
                                  " (SSH or lossd's control): narrow it (ports, addresses) or set force");
    }
  }
  return Status::Ok();
}

}  // namespace lossd
