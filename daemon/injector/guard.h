// Host protection: a rule that would cut the host's own control traffic (SSH,
// lossd's TCP control port) is refused unless it says force.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "host/sockets.h"
#include "rules/rule.h"

namespace lossd {

class HostGuard {
 public:
  // `ports`: the configured protected ports (SSH's 22, the control port,
  // --protect-port); none at all switches the guard off (a test's namespace).
  explicit HostGuard(std::vector<uint16_t> ports) : configured_(std::move(ports)) {}

  // FailedPrecondition when a lossy TCP rule covers a live connection on a
  // protected port (the configured ones and every port sshd listens on), or
  // a listener on one without naming a single host; for a cgroup rule
  // (cgroup_path resolved, under cgroup_mount), when sshd is in that cgroup.
  // With spec.force it passes, and the override is logged. When the sockets cannot
  // be read (out of fds, say) the rule is refused with that error, unless force.
  Status Check(const RuleSpec& spec, const std::string& cgroup_path,
               const std::string& cgroup_mount);

 private:
  // sshd's processes, and with need_ports its listening ports (a dump of the
  // listeners), each looked up at most once a second (a batch of rules does
  // not walk /proc once per rule). Under mu_.
  Status RefreshLocked(bool need_ports);

  std::vector<uint16_t> configured_;
  std::mutex mu_;
  uint64_t looked_at_ns_ = 0;
  Processes sshd_;
  std::vector<uint16_t> ports_;  // configured_ + sshd's
  bool ports_known_ = false;     // ports_ looked up since sshd_ was
};

}  // namespace lossd
