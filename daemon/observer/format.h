// JSON renderings of observer data (one object per line: common/json.h),
// shared by the command-line front ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "observer/observer.h"

namespace lossd {

// An obs_tuple address as text (inet_ntop: "10.0.0.1", "fd00::1").
std::string AddrText(uint16_t family, const uint32_t* addr);

Json EventJson(const ObsEvent& e);  // {"event":"retransmit"|"flow_close",...}
Json FlowJson(const ObsFlow& f);    // {"cookie":...,"saddr":...,...}
Json TotalsJson(const ObsTotals& t, const std::vector<ObsHookStatus>& hooks);  // observer_totals
// One namespace's totals (netns_totals; ino 0: the "other namespaces" bucket).
Json NetnsTotalsJson(const NetnsTotals& n);

}  // namespace lossd
