// Host protection: a rule that would cut the host's own control traffic (SSH,
// lossd's TCP control port) is refused unless it says force.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "rules/rule.h"

namespace lossd {

// FailedPrecondition when a lossy TCP rule covers a live connection on a
// protected port, or a listener on one without narrowing by address.
Status CheckHostProtection(const RuleSpec& spec, const std::vector<uint16_t>& protected_ports);

}  // namespace lossd
