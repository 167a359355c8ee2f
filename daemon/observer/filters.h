// The observer API's typed filters (lossd.v1 EventFilter, converted by
// service/convert.h) and their matching: which events and flows a stream,
// ListFlows or TraceFlow wants. AND inside a filter, OR across a list; a
// request's allow list (none: all) and deny list (none may match) decide
// (StreamFilters). Lists are compiled once per request (FilterSet): filters
// naming one field are hash, bitmap or mask lookups (docs/architecture.md#limits).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "host/targets.h"
#include "observe_abi.h"
#include "rules/rule.h"

namespace lossd {

// A typed filter, parsed once per stream.
struct StreamFilter {
  std::optional<Cidr> addr;  // local or remote
  PortRange port;            // local or remote
  uint64_t cgroup_id = 0;
  std::set<int> types;   // obs_rtx_type; empty = any
  uint32_t rule_id = 0;  // flows this rule's match covers
  uint64_t netns = 0;    // sockets of this network namespace (inode); 0 any
  // The socket's owner by name (host/targets.h); looked up only when given.
  std::string cgroup, unit, container, pod;
  bool by_owner() const {
    return !cgroup.empty() || !unit.empty() || !container.empty() || !pod.empty();
  }
  // The owner names as they are compared: a cgroup path with its leading '/'
  // and no trailing one, a unit with ".service" if it has no suffix, container
  // and pod ids in lower case with '-' for '_' (as CgroupOwner has them).
  void NormalizeOwner();
};

// Whether path (below the mount) is `cgroup` or below it.
bool Under(const std::string& path, const std::string& cgroup);
// Whether a socket's owner is the one `f` names (by_owner fields; the
// others are not looked at). An owner without a path (no such cgroup) never is.
bool OwnerMatches(const StreamFilter& f, const CgroupOwner& owner);

// What filters read beyond an event's own fields, looked up only when a
// filter asks for it.
struct FilterLookups {
  // Who a cgroup id is (the observer's OwnerCache); null: nobody.
  std::function<CgroupOwner(uint64_t cgroup_id)> owner;
  // The rules whose match covers a flow (EffectTracker::RulesFor); null: none.
  std::function<std::vector<uint32_t>(uint64_t cookie, const obs_tuple& t)> rules;
};

// One socket (an event's or a flow's) as the filters see it. Its owner and
// the rules covering it are looked up once, when a filter first names them:
// most subscribers never pay for them.
class FilterSubject {
 public:
  // type < 0: not a retransmission (flows, stalls): the filters' types are ignored.
  FilterSubject(const FilterLookups& lookups, uint64_t cookie, const obs_tuple& tuple,
                uint64_t cgroup_id, int type, uint64_t netns = 0)
      : tuple(tuple),
        cgroup_id(cgroup_id),
        type(type),
        netns(netns),
        lookups_(lookups),
        cookie_(cookie) {}
  const obs_tuple& tuple;
  const uint64_t cgroup_id;
  const int type;
  const uint64_t netns;  // the socket's network namespace (inode)
  const std::vector<uint32_t>& rules();
  const CgroupOwner& owner();

 private:
  const FilterLookups& lookups_;
  uint64_t cookie_;
  std::optional<std::vector<uint32_t>> rules_;
  std::optional<CgroupOwner> owner_;
};

// AND inside a filter.
bool Matches(const StreamFilter& f, FilterSubject& s);

// One list of filters (OR across them), compiled so that its cost per event
// does not grow with filters that name a single field (the usual shape of a
// long list: hosts, ports, cgroups, rules or types to allow or deny): those
// are looked up in hash sets, a port bitmap and a type mask; the others are
// checked one by one. Same answers as Matches() over the list.
class FilterSet {
 public:
  explicit FilterSet(const std::vector<StreamFilter>& filters);
  bool empty() const { return size_ == 0; }
  // Whether any filter of the list matches.
  bool Any(FilterSubject& s) const;

 private:
  static std::string HostKey(int family, const uint8_t* addr);
  size_t size_ = 0;
  bool all_ = false;
  uint32_t types_ = 0;
  std::unordered_set<std::string> hosts_;
  std::vector<bool> ports_;
  std::unordered_set<uint64_t> cgroups_;
  std::unordered_set<uint64_t> netns_;
  std::unordered_set<uint32_t> rules_;
  std::vector<StreamFilter> rest_;
};

// A request's allow and deny lists with their lookups: what it wants.
class StreamFilters {
 public:
  StreamFilters(const std::vector<StreamFilter>& allow, const std::vector<StreamFilter>& deny,
                FilterLookups lookups);
  bool empty() const { return allow_.empty() && deny_.empty(); }
  // OR across allow filters (none = all), then no deny filter may match.
  bool Wanted(FilterSubject& s) const;
  // An event; `typed`: a retransmission, whose type the filters check.
  bool WantsEvent(const obs_event& ev, bool typed) const;
  // A flow (types ignored).
  bool WantsFlow(uint64_t cookie, const obs_flow& f) const;

 private:
  FilterSet allow_, deny_;
  FilterLookups lookups_;
};

}  // namespace lossd
