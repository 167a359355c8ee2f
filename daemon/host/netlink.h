// rtnetlink requests on a link of this network namespace.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace lossd {

// The device's gso_max_segs: how many segments the stack may put in one skb
// for it (TCP sizes its skbs by it, before any hook sees them).
Status GetGsoMaxSegs(const std::string& ifname, uint32_t* segs);
Status SetGsoMaxSegs(const std::string& ifname, uint32_t segs);

}  // namespace lossd
