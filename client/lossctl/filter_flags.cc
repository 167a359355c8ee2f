#include "filter_flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>

#include "format.h"
#include "rule_flags.h"
#include "rules/rule.h"

namespace lossctl {
namespace {

constexpr size_t kMaxFilters = 1024;

using Setter = std::function<void(v1::EventFilter*)>;

bool AddrSetter(const std::string& flag, const std::string& text, Setter* out, std::string* error) {
  auto c = lossd::ParseCidr(text);
  if (!c.ok()) {
    *error = flag + ": " + c.status().message();
    return false;
  }
  std::string cidr = c->ToString();
  *out = [cidr](v1::EventFilter* f) { f->set_addr(cidr); };
  return true;
}

bool PortSetter(const std::string& flag, const std::string& text, Setter* out, std::string* error) {
  auto r = lossd::ParsePortRange(text);
  if (!r.ok()) {
    *error = flag + ": " + r.status().message();
    return false;
  }
  if (r->hi == 0) {
    *error = flag + ": port 0 cannot be matched (the API reads port 0 as any port)";
    return false;
  }
  uint32_t lo = r->lo, hi = r->hi;
  *out = [lo, hi](v1::EventFilter* f) {
    f->mutable_port()->set_lo(lo);
    f->mutable_port()->set_hi(hi);
  };
  return true;
}

bool CgroupSetter(const std::string& flag, const std::string& text, Setter* out,
                  std::string* error) {
  if (!text.empty() && !std::all_of(text.begin(), text.end(), ::isdigit)) {
    if (text.size() > lossd::kMaxInputLength) {
      *error = flag + ": a cgroup path of at most " + std::to_string(lossd::kMaxInputLength) +
               " characters";
      return false;
    }
    *out = [text](v1::EventFilter* f) { f->set_cgroup(text); };  // a path below the mount
    return true;
  }
  uint64_t id;
  if (!ParseUint(text, 1, UINT64_MAX, flag + " (a cgroup id, as in `stat -c %i DIR`)", &id, error))
    return false;
  *out = [id](v1::EventFilter* f) { f->set_cgroup_id(id); };
  return true;
}

// --unit, --container, --pod: the socket's owner by name (checked by the daemon).
Setter OwnerSetter(void (v1::EventFilter::*set)(const std::string&), const std::string& text) {
  return [set, text](v1::EventFilter* f) { (f->*set)(text); };
}

bool NameSetter(const std::string& flag, const std::string& text, Setter* out, std::string* error) {
  if (text.empty() || text.size() > lossd::kMaxInputLength) {
    *error =
        flag + ": give a name of 1 to " + std::to_string(lossd::kMaxInputLength) + " characters";
    return false;
  }
  if (flag.find("unit") != std::string::npos)
    *out = OwnerSetter(&v1::EventFilter::set_unit, text);
  else if (flag.find("container") != std::string::npos)
    *out = OwnerSetter(&v1::EventFilter::set_container, text);
  else if (flag.find("pid") != std::string::npos) {
    uint64_t pid;
    if (!ParseUint(text, 1, 4194304, flag + " (a process id)", &pid, error)) return false;
    *out = [pid](v1::EventFilter* f) { f->set_pid(static_cast<uint32_t>(pid)); };
  }
  else
    *out = OwnerSetter(&v1::EventFilter::set_pod, text);
  return true;
}

// --netns: an inode (net:[INODE]), or a path to the namespace, stat'ed here
// (/proc/PID/ns/net, /run/netns/NAME: lossctl runs on the daemon's host).
bool NetnsSetter(const std::string& flag, const std::string& text, Setter* out,
                 std::string* error) {
  uint64_t ino = 0;
  if (!text.empty() && text[0] == '/') {
    if (text.size() > lossd::kMaxInputLength) {
      *error = flag + ": a path of at most " + std::to_string(lossd::kMaxInputLength) +
               " characters";
      return false;
    }
    struct stat st;
    if (stat(text.c_str(), &st) != 0) {
      *error = flag + ": " + text + ": " + strerror(errno);
      return false;
    }
    ino = st.st_ino;
  } else if (!ParseUint(text, 1, UINT32_MAX,
                        flag + " (a network namespace inode, /proc/PID/ns/net or /run/netns/NAME)",
                        &ino, error)) {
    return false;
  }
  *out = [ino](v1::EventFilter* f) { f->set_netns_ino(ino); };
  return true;
}

bool RuleSetter(const std::string& flag, const std::string& text, Setter* out, std::string* error) {
  uint64_t id;
  if (!ParseUint(text, 1, UINT32_MAX, flag + " (a rule id)", &id, error)) return false;
  *out = [id](v1::EventFilter* f) { f->set_rule_id(static_cast<uint32_t>(id)); };
  return true;
}

bool ParseTypes(const std::string& flag, const std::vector<std::string>& items,
                std::vector<v1::RetransmitType>* out, std::string* error) {
  for (const auto& item : items) {
    std::string cur;
    for (size_t i = 0; i <= item.size(); i++) {
      if (i < item.size() && item[i] != ',') {
        cur.push_back(item[i]);
        continue;
      }
      if (cur.empty()) continue;
      v1::RetransmitType t;
      if (!ParseRetransmitType(cur, &t)) {
        *error = flag + ": invalid type '" + cur +
                 "': expected fast, rto, loss, tlp, syn, synack, probe0 or unknown";
        return false;
      }
      out->push_back(t);
      cur.clear();
    }
  }
  return true;
}

using SetterParser = bool (*)(const std::string&, const std::string&, Setter*, std::string*);

bool Setters(const std::string& flag, const std::vector<std::string>& values, SetterParser parse,
             std::vector<Setter>* out, std::string* error) {
  for (const auto& v : values) {
    Setter s;
    if (!parse(flag, v, &s, error)) return false;
    out->push_back(std::move(s));
  }
  return true;
}

}  // namespace

bool BuildFilters(const FilterFlags& f, std::vector<v1::EventFilter>* allow,
                  std::vector<v1::EventFilter>* deny, std::string* error) {
  allow->clear();
  deny->clear();
  // Allow: the cross product of the dimensions given.
  std::vector<std::vector<Setter>> dims(6);
  if (!Setters("--addr", f.addrs, AddrSetter, &dims[0], error) ||
      !Setters("--port", f.ports, PortSetter, &dims[1], error) ||
      !Setters("--cgroup", f.cgroups, CgroupSetter, &dims[2], error) ||
      !Setters("--rule", f.rules, RuleSetter, &dims[3], error) ||
      !Setters("--unit", f.units, NameSetter, &dims[4], error) ||
      !Setters("--container", f.containers, NameSetter, &dims[4], error) ||
      !Setters("--pod", f.pods, NameSetter, &dims[4], error) ||
      !Setters("--pid", f.pids, NameSetter, &dims[4], error) ||
      !Setters("--netns", f.netns, NetnsSetter, &dims[5], error))
    return false;
  std::vector<v1::RetransmitType> types;
  if (!ParseTypes("--type", f.types, &types, error)) return false;
  size_t combos = 1;
  bool any = !types.empty();
  for (const auto& d : dims) {
    if (d.empty()) continue;
    any = true;
    combos *= d.size();
    if (combos > kMaxFilters) {
      *error = "too many filter combinations (above " + std::to_string(kMaxFilters) +
               "): use CIDRs and port ranges rather than many single values";
      return false;
    }
  }
  if (any) {
    std::vector<v1::EventFilter> cur(1);
    for (const auto& t : types) cur[0].add_types(t);
    for (const auto& d : dims) {
      if (d.empty()) continue;
      std::vector<v1::EventFilter> next;
      for (const auto& base : cur) {
        for (const auto& set : d) {
          next.push_back(base);
          set(&next.back());
        }
      }
      cur = std::move(next);
    }
    *allow = std::move(cur);
  }
  // Deny: each value on its own.
  std::vector<Setter> denies;
  if (!Setters("--deny-addr", f.deny_addrs, AddrSetter, &denies, error) ||
      !Setters("--deny-port", f.deny_ports, PortSetter, &denies, error) ||
      !Setters("--deny-cgroup", f.deny_cgroups, CgroupSetter, &denies, error) ||
      !Setters("--deny-rule", f.deny_rules, RuleSetter, &denies, error))
    return false;
  for (const auto& set : denies) {
    deny->emplace_back();
    set(&deny->back());
  }
  std::vector<v1::RetransmitType> deny_types;
  if (!ParseTypes("--deny-type", f.deny_types, &deny_types, error)) return false;
  if (!deny_types.empty()) {
    deny->emplace_back();
    for (const auto& t : deny_types) deny->back().add_types(t);
  }
  return true;
}

}  // namespace lossctl
