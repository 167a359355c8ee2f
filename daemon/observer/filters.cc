#include "observer/filters.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>

#include "base/address.h"
#include "rules/match.h"

namespace lossd {

void StreamFilter::NormalizeOwner() {
  if (!cgroup.empty() && cgroup[0] != '/') cgroup = "/" + cgroup;
  while (cgroup.size() > 1 && cgroup.back() == '/') cgroup.pop_back();
  if (!unit.empty() && unit.find('.') == std::string::npos) unit += ".service";
  for (auto* v : {&container, &pod})
    std::transform(v->begin(), v->end(), v->begin(), [](unsigned char c) {
      return c == '_' ? '-' : static_cast<char>(std::tolower(c));
    });
}

bool Under(const std::string& path, const std::string& cgroup) {
  if (cgroup == "/") return true;
  return path == cgroup || path.rfind(cgroup + "/", 0) == 0;
}

bool OwnerMatches(const StreamFilter& f, const CgroupOwner& o) {
  if (o.path.empty()) return false;
  if (!f.cgroup.empty() && !Under(o.path, f.cgroup)) return false;
  if (!f.unit.empty() && o.path.find("/" + f.unit + "/") == std::string::npos &&
      (o.path.size() < f.unit.size() + 1 ||
       o.path.compare(o.path.size() - f.unit.size() - 1, std::string::npos, "/" + f.unit) != 0))
    return false;
  if (!f.container.empty() && o.container.rfind(f.container, 0) != 0) return false;
  if (!f.pod.empty() && o.pod.rfind(f.pod, 0) != 0) return false;
  return true;
}

const std::vector<uint32_t>& FilterSubject::rules() {
  if (!rules_) rules_ = lookups_.rules ? lookups_.rules(cookie_, tuple) : std::vector<uint32_t>{};
  return *rules_;
}

const CgroupOwner& FilterSubject::owner() {
  if (!owner_) owner_ = lookups_.owner ? lookups_.owner(cgroup_id) : CgroupOwner{};
  return *owner_;
}

bool Matches(const StreamFilter& f, FilterSubject& s) {
  const obs_tuple& t = s.tuple;
  if (f.addr && !AddrInCidr(*f.addr, t.family, t.saddr) && !AddrInCidr(*f.addr, t.family, t.daddr))
    return false;
  if (!f.port.Any() && !(f.port.lo <= t.sport && t.sport <= f.port.hi) &&
      !(f.port.lo <= t.dport && t.dport <= f.port.hi))
    return false;
  if (f.cgroup_id && f.cgroup_id != s.cgroup_id) return false;
  if (f.netns && f.netns != s.netns) return false;
  if (f.by_owner() && !OwnerMatches(f, s.owner())) return false;
  if (s.type >= 0 && !f.types.empty() && !f.types.count(s.type)) return false;
  if (f.rule_id) {
    const std::vector<uint32_t>& ids = s.rules();
    if (std::find(ids.begin(), ids.end(), f.rule_id) == ids.end()) return false;
  }
  return true;
}

FilterSet::FilterSet(const std::vector<StreamFilter>& filters) {
  for (const StreamFilter& f : filters) {
    bool a = f.addr.has_value(), p = !f.port.Any(), c = f.cgroup_id != 0, t = !f.types.empty(),
         r = f.rule_id != 0, n = f.netns != 0;
    // A filter by owner name (unit, container, ...) is checked one by one (rest_).
    int fields = a + p + c + t + r + n + f.by_owner();
    if (fields == 0) {
      all_ = true;
    } else if (fields == 1 && a && f.addr->IsHost()) {
      hosts_.insert(HostKey(f.addr->family, f.addr->addr.data()));
    } else if (fields == 1 && p) {
      if (ports_.empty()) ports_.resize(65536);
      for (uint32_t port = f.port.lo; port <= f.port.hi; port++) ports_[port] = true;
    } else if (fields == 1 && c) {
      cgroups_.insert(f.cgroup_id);
    } else if (fields == 1 && n) {
      netns_.insert(f.netns);
    } else if (fields == 1 && r) {
      rules_.insert(f.rule_id);
    } else if (fields == 1 && t) {
      for (int ty : f.types) types_ |= 1u << ty;
    } else {
      rest_.push_back(f);
    }
    size_++;
  }
}

bool FilterSet::Any(FilterSubject& s) const {
  const obs_tuple& t = s.tuple;
  if (all_) return true;
  if (types_ && (s.type < 0 || (types_ >> s.type) & 1)) return true;  // flows: type ignored
  if (!hosts_.empty()) {
    int fam = VersionOfAf(t.family);
    if (hosts_.count(HostKey(fam, reinterpret_cast<const uint8_t*>(t.saddr))) ||
        hosts_.count(HostKey(fam, reinterpret_cast<const uint8_t*>(t.daddr))))
      return true;
  }
  if (!ports_.empty() && (ports_[t.sport] || ports_[t.dport])) return true;
  if (s.cgroup_id && cgroups_.count(s.cgroup_id)) return true;
  if (s.netns && netns_.count(s.netns)) return true;
  if (!rules_.empty())
    for (uint32_t id : s.rules())
      if (rules_.count(id)) return true;
  for (const StreamFilter& f : rest_)
    if (Matches(f, s)) return true;
  return false;
}

std::string FilterSet::HostKey(int family, const uint8_t* addr) {
  std::string k(1, static_cast<char>(family));
  k.append(reinterpret_cast<const char*>(addr), family == 4 ? 4 : 16);
  return k;
}

StreamFilters::StreamFilters(const std::vector<StreamFilter>& allow,
                             const std::vector<StreamFilter>& deny, FilterLookups lookups)
    : allow_(allow), deny_(deny), lookups_(std::move(lookups)) {}

bool StreamFilters::Wanted(FilterSubject& s) const {
  if (!allow_.empty() && !allow_.Any(s)) return false;
  return !deny_.Any(s);
}

bool StreamFilters::WantsEvent(const obs_event& ev, bool typed) const {
  FilterSubject s(lookups_, ev.cookie, ev.tuple, ev.cgroup_id,
                  typed ? static_cast<int>(ev.type) : -1, ev.netns);
  return Wanted(s);
}

bool StreamFilters::WantsFlow(uint64_t cookie, const obs_flow& f) const {
  FilterSubject s(lookups_, cookie, f.tuple, f.cgroup_id, -1, f.netns);
  return Wanted(s);
}

}  // namespace lossd
