// Requests read into the daemon's terms. A client's rule (CreateRule,
// UpdateRule, a scenario's steps): its labels bounded, its spec converted,
// the daemon's default TTL, a guard's need of the observer. The Observer
// service's requests: a
// request's filters (parsed by the converters, the services they name
// resolved to cgroups as CreateRule resolves a rule's target, bounded by
// --max-filters) and TraceFlow's flow, limits and wait. Every refusal is
// INVALID_ARGUMENT naming the field, or the resolver's NOT_FOUND.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "components.h"
#include "effects/trace.h"
#include "lossd/v1/lossd.pb.h"
#include "observer/filters.h"

namespace lossd {

// Labels within --max-labels and --max-label-bytes (a rule's, or ListRules').
Status CheckLabels(const google::protobuf::Map<std::string, std::string>& labels,
                   const ApiLimits& lim, const char* field);

// A client's spec as the daemon keeps it: labels checked (`labels_field`
// names them in errors), without a TTL the daemon's default. A guard is
// decided by the observer's program: without the observer it would never
// stop the rule, so it is refused (or waits for it to load, to `deadline`).
Status RuleFromClient(const Components* parts, const v1::RuleSpec& in, const char* labels_field,
                      RuleSpec* spec, Components::Deadline deadline);
// The observer a guard needs (the error says why it is refused).
Status GuardNeedsObserver(const Components* parts, Components::Deadline deadline);

using FilterList = google::protobuf::RepeatedPtrField<v1::EventFilter>;

// What the filters look up beyond an event: owners by cgroup id (the
// observer's cache, once it is loaded) and the rules covering a flow (the
// effect tracker's).
FilterLookups LookupsOf(const Components* parts);

// FiltersFromProto, then each service a filter names (a unit, container, pod
// or pid) resolved to its cgroup: a watch of a service that is not there
// fails at once instead of showing nothing for ever.
Status FiltersOf(const FilterList& in, const char* field, std::vector<StreamFilter>* out);

// A request's allow (`field`) and deny filters: at most --max-filters of them
// (allow and deny together). *out is set even when they are refused (unused then).
Status ParseRequestFilters(const Components* parts, const FilterList& allow, const char* field,
                           const FilterList& deny, std::shared_ptr<const StreamFilters>* out);

// TraceFlow's request: the flow by cookie or by one filter, how long to wait
// for it, and when the trace ends.
struct TraceRequest {
  uint64_t cookie = 0;
  std::shared_ptr<const StreamFilters> match;  // the flow, when not by cookie
  std::chrono::nanoseconds wait{0};
  TraceOptions opts;
};
Status ParseTraceRequest(const Components* parts, const v1::TraceFlowRequest& req,
                         TraceRequest* out);

}  // namespace lossd
