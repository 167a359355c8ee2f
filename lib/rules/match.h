// Which flows a rule can touch: its address/port/protocol conditions held
// against a TCP flow's tuple (effect attribution, host protection).
#pragma once

#include <cstdint>

#include "observe_abi.h"
#include "rules/rule.h"

namespace lossd {

// Whether an address (network byte order words, AF_INET/AF_INET6) lies in c.
bool AddrInCidr(const Cidr& c, uint16_t family, const uint32_t* addr);

// Whether packets of a TCP flow (local -> remote as seen by this host) can
// match the rule's address/port/protocol conditions in the rule's direction.
bool RuleCoversFlow(const RuleSpec& spec, const obs_tuple& t);

}  // namespace lossd
