#include "service/requests.h"

#include <algorithm>
#include <string>

#include "host/cgroup.h"
#include "host/targets.h"
#include "service/convert.h"
#include "rules/proto.h"

namespace lossd {

// Labels within --max-labels and --max-label-bytes (a rule's, or ListRules').
Status CheckLabels(const google::protobuf::Map<std::string, std::string>& labels,
                   const ApiLimits& lim, const char* field) {
  if (labels.size() > lim.max_labels)
    return InvalidArgument(std::string(field) + ": " + std::to_string(labels.size()) +
                           " labels, the limit is " + std::to_string(lim.max_labels) +
                           " (lossd --max-labels)");
  for (const auto& kv : labels) {
    if (kv.first.size() > lim.max_label_bytes || kv.second.size() > lim.max_label_bytes)
      return InvalidArgument(std::string(field) + "['" + Shown(kv.first) +
                             "']: " + std::to_string(std::max(kv.first.size(), kv.second.size())) +
                             " bytes in a key or value, the limit is " +
                             std::to_string(lim.max_label_bytes) + " (lossd --max-label-bytes)");
    // A selector too (ListRules): a NUL or escape in it would be logged and
    // echoed as it is.
    LOSSD_RETURN_IF_ERROR(CheckNoControlChars(std::string(field) + " key", kv.first));
    LOSSD_RETURN_IF_ERROR(
        CheckNoControlChars(std::string(field) + "['" + Shown(kv.first) + "']", kv.second));
  }
  return Status::Ok();
}

Status GuardNeedsObserver(const Components* parts, Components::Deadline deadline) {
  auto obs = parts->NeedObserver(deadline);
  if (!obs.ok())
    return Status(obs.status().code(),
                  "guard: it is decided by the TCP observer's program: " + obs.status().message());
  return Status::Ok();
}

Status RuleFromClient(const Components* parts, const v1::RuleSpec& in, const char* labels_field,
                      RuleSpec* spec, Components::Deadline deadline) {
  LOSSD_RETURN_IF_ERROR(CheckLabels(in.labels(), parts->api(), labels_field));
  LOSSD_RETURN_IF_ERROR(SpecFromProto(in, spec));
  ApplyDefaultTtl(parts->limits(), spec);
  if (spec->guard.InKernel()) LOSSD_RETURN_IF_ERROR(GuardNeedsObserver(parts, deadline));
  return Status::Ok();
}


FilterLookups LookupsOf(const Components* parts) {
  FilterLookups l;
  l.owner = [parts](uint64_t cgroup_id) {
    Observer* obs = parts->observer();
    return obs ? obs->owners().Of(cgroup_id) : CgroupOwner{};
  };
  if (EffectTracker* effects = parts->effects())
    l.rules = [effects](uint64_t cookie, const obs_tuple& t) {
      return effects->RulesShownFor(cookie, t);
    };
  return l;
}

Status FiltersOf(const FilterList& in, const char* field, std::vector<StreamFilter>* out) {
  LOSSD_RETURN_IF_ERROR(FiltersFromProto(in, field, out));
  std::string mount;
  for (int i = 0; i < in.size(); i++) {
    const v1::EventFilter& f = in[i];
    ServiceTarget t;
    t.pid = f.pid();
    t.unit = f.unit();
    t.container = f.container();
    t.pod = f.pod();
    if (!t.Any()) continue;
    std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    if (!f.cgroup().empty())
      return InvalidArgument(name + ": a cgroup and " + t.Describe() + " both: name it one way");
    if (mount.empty()) mount = Cgroup2Mount();
    if (mount.empty())
      return FailedPrecondition(name + ": no cgroup v2 mount to find " + t.Describe() + " in");
    auto path = ResolveServiceCgroup(t, mount);
    if (!path.ok()) return Status(path.status().code(), name + ": " + path.status().message());
    StreamFilter& s = (*out)[size_t(i)];
    s.unit.clear();
    s.container.clear();
    s.pod.clear();
    s.cgroup = path->size() > mount.size() ? path->substr(mount.size()) : "/";
    s.NormalizeOwner();
  }
  return Status::Ok();
}

Status ParseRequestFilters(const Components* parts, const FilterList& allow, const char* field,
                           const FilterList& deny, std::shared_ptr<const StreamFilters>* out) {
  std::vector<StreamFilter> allow_list, deny_list;
  size_t n = size_t(allow.size()) + deny.size();
  uint32_t max = parts->api().max_filters;
  Status st = Status::Ok();
  if (n > max)
    st = InvalidArgument(std::to_string(n) + " filters in one request, the limit is " +
                         std::to_string(max) + " (lossd --max-filters)");
  if (st.ok()) st = FiltersOf(allow, field, &allow_list);
  if (st.ok()) st = FiltersOf(deny, "deny", &deny_list);
  *out = std::make_shared<const StreamFilters>(allow_list, deny_list, LookupsOf(parts));
  return st;
}

Status ParseTraceRequest(const Components* parts, const v1::TraceFlowRequest& req,
                         TraceRequest* out) {
  constexpr uint64_t kHour = 3600ull * 1000 * 1000 * 1000;
  std::vector<StreamFilter> by;
  bool by_filter = req.has_flow();
  if (!req.cookie() && !by_filter)
    return InvalidArgument("name the flow to trace: cookie, or flow (an address and/or port)");
  if (req.cookie() && by_filter)
    return InvalidArgument("cookie and flow both set: name the flow one way");
  if (by_filter) {
    FilterList one;
    *one.Add() = req.flow();
    LOSSD_RETURN_IF_ERROR(FiltersOf(one, "flow", &by));
    if (!by[0].types.empty()) return InvalidArgument("flow.types: a flow has no type");
  }
  if (req.wait_ns() > kHour) return InvalidArgument("wait_ns: at most 1 h");
  if (req.max_samples() > 1000000)
    return InvalidArgument("max_samples: at most 1,000,000 (got " +
                           std::to_string(req.max_samples()) + ")");
  if (req.duration_ns() > 24 * kHour) return InvalidArgument("duration_ns: at most 24 h");
  out->cookie = req.cookie();
  out->wait = std::chrono::nanoseconds(req.wait_ns() ? req.wait_ns() : 10000000000ull);
  out->opts.max_samples = req.max_samples() ? req.max_samples() : 100000;
  out->opts.duration = std::chrono::nanoseconds(req.duration_ns());
  out->opts.queue = *parts->streams().QueueLength(0, 65536, "");
  // The caller holds the stream's ticket (taken before the wait for the flow).
  out->opts.stream = "";
  // The effects are read when the flow is matched, after the wait.
  out->match = std::make_shared<const StreamFilters>(by, std::vector<StreamFilter>(),
                                                     LookupsOf(parts));
  return Status::Ok();
}

}  // namespace lossd
