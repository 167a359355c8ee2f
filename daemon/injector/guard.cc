#include "injector/guard.h"

#include <netinet/in.h>

#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "rules/match.h"
#include "rules/model.h"

namespace lossd {
namespace {

// Whether a rule reaches the traffic of a listener on `port` from peers it
// does not name: ingress packets to the port, or egress packets from it.
// Only a rule narrowed to one host address counts as naming its peer.
bool CoversListener(const RuleSpec& spec, uint16_t port) {
  bool one_host = (spec.src && spec.src->IsHost()) || (spec.dst && spec.dst->IsHost());
  if (one_host) return false;
  bool ingress = spec.dir != Direction::kEgress, egress = spec.dir != Direction::kIngress;
  return (ingress && spec.dport.Contains(port)) || (egress && spec.sport.Contains(port));
}

// Whether cgroup `rule` (a resolved path under the v2 mount) is, or holds,
// the cgroup `proc` (as /proc/PID/cgroup gives it, relative to the root).
bool CgroupHolds(const std::string& rule, const std::string& mount, const std::string& proc) {
  std::string full = mount + (proc == "/" ? "" : proc);
  return rule == mount || full == rule || full.rfind(rule + "/", 0) == 0;
}

}  // namespace

Status HostGuard::RefreshLocked(bool need_ports) {
  uint64_t now = MonotonicNs();
  if (!looked_at_ns_ || now - looked_at_ns_ >= 1000000000ull) {
    looked_at_ns_ = now;
    sshd_ = ProcessesNamed("sshd");
    ports_known_ = false;
  }
  if (!need_ports || ports_known_) return Status::Ok();
  // Listeners are few: all of them, to find the ports sshd listens on.
  auto listeners = TcpSockets(kTcpListen);
  if (!listeners.ok()) return listeners.status();
  ports_known_ = true;
  ports_ = configured_;
  for (const TcpSock& s : *listeners)
    if (std::count(sshd_.socket_inodes.begin(), sshd_.socket_inodes.end(), s.inode))
      ports_.push_back(s.t.sport);
  std::sort(ports_.begin(), ports_.end());
  ports_.erase(std::unique(ports_.begin(), ports_.end()), ports_.end());
  return Status::Ok();
}

Status HostGuard::Check(const RuleSpec& spec, const std::string& cgroup_path,
                        const std::string& cgroup_mount) {
  if (configured_.empty() || ModelMeanLoss(spec.model) == 0) return Status::Ok();
  if (spec.l4proto != 0 && spec.l4proto != IPPROTO_TCP) return Status::Ok();
  auto refuse = [&](const std::string& what) -> Status {
    if (spec.force) {
      LOG_WARN("host protection overridden (force): the rule %s", what.c_str());
      return Status::Ok();
    }
    return FailedPrecondition("this rule " + what +
                              " (SSH or lossd's control): narrow it (ports, addresses, cgroup) "
                              "or set force");
  };
  auto unchecked = [&](const Status& st) -> Status {
    if (spec.force) {
      LOG_WARN("host protection skipped (force): %s", st.message().c_str());
      return Status::Ok();
    }
    return Status(st.code(), "host protection cannot check this rule: " + st.message() +
                                 " (set force to create it unchecked)");
  };

  // What the guard knows is copied under its lock; the sockets are read outside it,
  // so rules created side by side do not wait for each other's reads.
  std::vector<uint16_t> ports;
  std::vector<std::string> sshd_cgroups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A cgroup rule needs sshd's cgroups only, not its ports (no socket dump).
    Status st = RefreshLocked(cgroup_path.empty());
    if (!st.ok()) return unchecked(st);
    ports = ports_;
    sshd_cgroups = sshd_.cgroups;
  }
  // A cgroup rule touches only its cgroup's sockets: refused when sshd is in it.
  if (!cgroup_path.empty()) {
    for (const std::string& cg : sshd_cgroups)
      if (CgroupHolds(cgroup_path, cgroup_mount, cg))
        return refuse("would drop packets of sshd's cgroup " + cg);
    return Status::Ok();
  }
  // Only for rules whose ports admit a protected one, and then only the sockets on
  // those ports: the kernel filters (host/sockets.h), so the cost does not grow with
  // the host's other connections.
  ports.erase(std::remove_if(ports.begin(), ports.end(),
                             [&](uint16_t p) { return !spec.sport.Contains(p) && !spec.dport.Contains(p); }),
              ports.end());
  if (ports.empty()) return Status::Ok();
  auto socks = TcpSockets(kTcpEstablished | kTcpListen, ports);
  if (!socks.ok()) return unchecked(socks.status());
  LOG_DEBUG("host protection: %zu sockets on the protected ports the rule admits", socks->size());
  for (const TcpSock& s : *socks) {
    for (uint16_t port : ports) {
      if (s.t.sport != port && s.t.dport != port) continue;
      if (s.state == 1 && RuleCoversFlow(spec, s.t))
        return refuse("would drop packets of a live connection on protected port " +
                      std::to_string(port));
      if (s.state == 10 && s.t.sport == port && CoversListener(spec, port))
        return refuse("would drop traffic of the listener on protected port " +
                      std::to_string(port));
    }
  }
  return Status::Ok();
}

}  // namespace lossd
