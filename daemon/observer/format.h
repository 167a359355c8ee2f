// JSON renderings of observer data (one object per line), shared by the
// command-line front ends.
#pragma once

#include <string>
#include <vector>

#include "observer/observer.h"

namespace lossd {

std::string TupleJson(const obs_tuple& t);  // "\"saddr\":...,\"sport\":...,..."
std::string EventJson(const ObsEvent& e);
std::string FlowJson(const ObsFlow& f);
std::string TotalsJson(const ObsTotals& t, const std::vector<ObsHookStatus>& hooks);

}  // namespace lossd
