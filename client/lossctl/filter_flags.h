// The observer's typed filters from flags: --addr, --port, --cgroup, --type,
// --rule select (each repeatable), --deny-* exclude.
#pragma once

#include <string>
#include <vector>

#include "lossd/v1/lossd.pb.h"

namespace lossctl {

namespace v1 = ::lossd::v1;

struct FilterFlags {
  std::vector<std::string> addrs, ports, cgroups, types, rules;
  std::vector<std::string> units, containers, pods, pids;  // the socket's owner (any of them)
  std::vector<std::string> netns;  // network namespaces: inode, /proc/PID/ns/net, /run/netns/NAME
  std::vector<std::string> deny_addrs, deny_ports, deny_cgroups, deny_types, deny_rules;
};

// Allow: one EventFilter per combination of the given --addr, --port,
// --cgroup (an id, or a path below the cgroup v2 mount), --rule and owner
// (--unit, --container, --pod: any one of them) and --netns values (the API ANDs inside a filter and ORs across
// filters), each with every --type: "--port 80 --port 443 --addr 10.0.0.0/8"
// is (port 80 or 443) and addr 10.0.0.0/8. Nothing given: no filter.
// Deny: each --deny-addr/-port/-cgroup/-rule value is a filter of its own;
// the --deny-type values make one filter. --type takes names or lists
// ("fast,rto").
bool BuildFilters(const FilterFlags& f, std::vector<v1::EventFilter>* allow,
                  std::vector<v1::EventFilter>* deny, std::string* error);

}  // namespace lossctl
