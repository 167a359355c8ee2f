// JSON renderings of observer data (one object per line: common/json.h),
// shared by the command-line front ends.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "observer/observer.h"

namespace lossd {

Json EventJson(const ObsEvent& e);  // {"event":"retransmit"|"flow_close",...}
Json FlowJson(const ObsFlow& f);    // {"cookie":...,"saddr":...,...}
Json TotalsJson(const ObsTotals& t, const std::vector<ObsHookStatus>& hooks);  // observer_totals

}  // namespace lossd
