#include "rule_flags.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "rules/rule.h"

namespace lossctl {
namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

// "--rate: <the parser's message>"
bool Bad(const std::string& name, const lossd::Status& st, std::string* error) {
  *error = name + ": " + st.message();
  return false;
}

bool PortsToProto(const std::string& name, const std::string& text, v1::PortRange* out,
                  std::string* error) {
  auto r = lossd::ParsePortRange(text);
  if (!r.ok()) return Bad(name, r.status(), error);
  if (r->Any()) return true;  // 0-65535: any port, left unset
  if (r->hi == 0) {
    *error = name + ": port 0 cannot be matched (the API reads port 0 as any port): omit " +
             name + " to match any port";
    return false;
  }
  out->set_lo(r->lo);
  out->set_hi(r->hi);
  return true;
}

std::string ProtocolName(int proto) {
  switch (proto) {
    case 0: return "";
    case IPPROTO_TCP: return "tcp";
    case IPPROTO_UDP: return "udp";
    case IPPROTO_ICMP: return "icmp";
    case IPPROTO_ICMPV6: return "icmpv6";
    default: return std::to_string(proto);
  }
}

std::string TcpFlagsText(uint8_t mask, uint8_t value) {
  static const char* kNames[] = {"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"};
  std::string out;
  for (int b = 0; b < 8; b++) {
    if (!(mask & (1 << b))) continue;
    if (!out.empty()) out += ",";
    if (!(value & (1 << b))) out += "!";
    out += kNames[b];
  }
  return out;
}

v1::Hook ToProto(lossd::Hook h) {
  switch (h) {
    case lossd::Hook::kXdp: return v1::HOOK_XDP;
    case lossd::Hook::kTc: return v1::HOOK_TC;
    case lossd::Hook::kCgroup: return v1::HOOK_CGROUP;
    case lossd::Hook::kAuto: break;
  }
  return v1::HOOK_AUTO;
}

v1::Direction ToProto(lossd::Direction d) {
  switch (d) {
    case lossd::Direction::kEgress: return v1::DIRECTION_EGRESS;
    case lossd::Direction::kBoth: return v1::DIRECTION_BOTH;
    case lossd::Direction::kIngress: break;
  }
  return v1::DIRECTION_INGRESS;
}

}  // namespace

bool ParseUint(const std::string& text, uint64_t min, uint64_t max, const std::string& flag,
               uint64_t* out, std::string* error) {
  std::string s = Trim(text);
  bool digits = !s.empty() && s.size() <= 20;
  for (char c : s) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  errno = 0;
  char* end = nullptr;
  unsigned long long v = digits ? std::strtoull(s.c_str(), &end, 10) : 0;
  if (!digits || errno || *end || v < min || v > max) {
    *error = flag + ": invalid value '" + text + "': expected a whole number from " +
             std::to_string(min) + " to " + std::to_string(max);
    return false;
  }
  *out = v;
  return true;
}

bool ParseLabels(const std::vector<std::string>& items, const std::string& flag,
                 std::map<std::string, std::string>* labels, std::string* error) {
  for (const auto& item : items) {
    auto eq = item.find('=');
    std::string key = eq == std::string::npos ? "" : Trim(item.substr(0, eq));
    if (key.empty()) {
      *error = flag + ": invalid label '" + item + "': expected key=value";
      return false;
    }
    std::string value = item.substr(eq + 1);
    auto it = labels->find(key);
    if (it != labels->end() && it->second != value) {
      *error = flag + ": label '" + key + "' given twice ('" + it->second + "' and '" + value + "')";
      return false;
    }
    (*labels)[key] = value;
  }
  return true;
}

bool BuildRuleSpec(const RuleFlags& f, const std::string& dash, v1::RuleSpec* out,
                   std::string* error) {
  auto name = [&](const char* n) { return dash + n; };
  lossd::RuleSpec r;  // for the daemon's own consistency checks (Validate)
  v1::RuleSpec spec;
  r.iface = f.iface;
  r.cgroup = f.cgroup;
  spec.set_interface(f.iface);
  spec.set_cgroup(f.cgroup);

  std::string hook = Lower(f.hook);
  if (hook.empty() || hook == "auto") {
    r.hook = lossd::Hook::kAuto;
  } else if (hook == "xdp") {
    r.hook = lossd::Hook::kXdp;
  } else if (hook == "tc") {
    r.hook = lossd::Hook::kTc;
  } else if (hook == "cgroup") {
    r.hook = lossd::Hook::kCgroup;
  } else {
    *error = name("hook") + ": invalid hook '" + f.hook + "': expected auto, xdp, tc or cgroup";
    return false;
  }
  spec.set_hook(ToProto(r.hook));

  std::string dir = Lower(f.dir);
  if (dir.empty() || dir == "ingress" || dir == "in") {
    r.dir = lossd::Direction::kIngress;
  } else if (dir == "egress" || dir == "out") {
    r.dir = lossd::Direction::kEgress;
  } else if (dir == "both") {
    r.dir = lossd::Direction::kBoth;
  } else {
    *error = name("dir") + ": invalid direction '" + f.dir + "': expected ingress, egress or both";
    return false;
  }
  spec.set_direction(ToProto(r.dir));

  v1::Match* m = spec.mutable_match();
  if (!f.src.empty()) {
    auto c = lossd::ParseCidr(f.src);
    if (!c.ok()) return Bad(name("src"), c.status(), error);
    r.src = *c;
    m->set_src(c->ToString());
  }
  if (!f.dst.empty()) {
    auto c = lossd::ParseCidr(f.dst);
    if (!c.ok()) return Bad(name("dst"), c.status(), error);
    r.dst = *c;
    m->set_dst(c->ToString());
  }
  if (!f.sport.empty()) {
    if (!PortsToProto(name("sport"), f.sport, m->mutable_sport(), error)) return false;
    r.sport = *lossd::ParsePortRange(f.sport);
  }
  if (!f.dport.empty()) {
    if (!PortsToProto(name("dport"), f.dport, m->mutable_dport(), error)) return false;
    r.dport = *lossd::ParsePortRange(f.dport);
  }
  if (!f.proto.empty()) {
    auto p = lossd::ParseProtocol(f.proto);
    if (!p.ok()) return Bad(name("proto"), p.status(), error);
    r.l4proto = *p;
    m->set_protocol(ProtocolName(*p));
  }
  std::string fam = Lower(f.family);
  if (fam == "4" || fam == "ipv4" || fam == "inet") r.family = 4;
  else if (fam == "6" || fam == "ipv6" || fam == "inet6") r.family = 6;
  else if (!fam.empty() && fam != "any" && fam != "0") {
    *error = name("family") + ": invalid family '" + f.family + "': expected 4, 6 or any";
    return false;
  }
  m->set_family(static_cast<uint32_t>(r.family));
  if (!f.tcp_flags.empty()) {
    lossd::Status st = lossd::ParseTcpFlags(f.tcp_flags, &r.tcp_flags_mask, &r.tcp_flags_value);
    if (!st.ok()) return Bad(name("tcp-flags"), st, error);
    m->set_tcp_flags(TcpFlagsText(r.tcp_flags_mask, r.tcp_flags_value));
  }
  std::string payload = Lower(f.payload);
  if (payload.empty() || payload == "any") {
    r.payload = LOSS_PAYLOAD_ANY;
    m->set_payload(v1::PAYLOAD_ANY);
  } else if (payload == "only") {
    r.payload = LOSS_PAYLOAD_ONLY;
    m->set_payload(v1::PAYLOAD_ONLY);
  } else if (payload == "none") {
    r.payload = LOSS_PAYLOAD_NONE;
    m->set_payload(v1::PAYLOAD_NONE);
  } else {
    *error = name("payload") + ": invalid payload '" + f.payload + "': expected any, only or none";
    return false;
  }

  int models = !f.rate.empty() + !f.ge.empty() + !f.every.empty() + !f.first.empty();
  std::string model_flags = name("rate") + ", " + name("ge") + ", " + name("every") + " or " +
                            name("first");
  if (models == 0) {
    *error = "a loss model is needed: give " + model_flags;
    return false;
  }
  if (models > 1) {
    *error = "one loss model per rule: give only one of " + model_flags;
    return false;
  }
  v1::LossModel* loss = spec.mutable_loss();
  if (!f.rate.empty()) {
    auto p = lossd::ParseRate(f.rate);
    if (!p.ok()) return Bad(name("rate"), p.status(), error);
    r.model.kind = lossd::LossModel::Kind::kBernoulli;
    r.model.p = *p;
    loss->mutable_bernoulli()->set_rate(*p);
  } else if (!f.ge.empty()) {
    auto ge = lossd::ParseGilbertElliott(f.ge);
    if (!ge.ok()) return Bad(name("ge"), ge.status(), error);
    r.model = *ge;
    auto* g = loss->mutable_gilbert_elliott();
    g->set_p(ge->p);
    g->set_r(ge->r);
    g->set_bad_loss(ge->bad_loss);
    g->set_good_loss(ge->good_loss);
  } else {
    bool every = !f.every.empty();
    uint64_t n;
    if (!ParseUint(every ? f.every : f.first, 1, UINT32_MAX, name(every ? "every" : "first"), &n,
                   error))
      return false;
    r.model.kind = every ? lossd::LossModel::Kind::kEveryNth : lossd::LossModel::Kind::kFirstK;
    r.model.n = static_cast<uint32_t>(n);
    if (every) loss->set_every_nth(r.model.n);
    else loss->set_first_k(r.model.n);
  }
  if (!f.seed.empty()) {
    uint64_t seed;
    if (!ParseUint(f.seed, 0, UINT64_MAX, name("seed"), &seed, error)) return false;
    r.seed = seed;
    loss->set_seed(seed);
  }
  if (!f.priority.empty()) {
    uint64_t prio;
    if (!ParseUint(f.priority, 0, lossd::kMaxPriority, name("priority"), &prio, error)) return false;
    r.priority = static_cast<uint32_t>(prio);
    spec.set_priority(r.priority);
  }
  if (!f.ttl.empty()) {
    auto d = lossd::ParseDuration(f.ttl);
    if (!d.ok()) return Bad(name("ttl"), d.status(), error);
    r.ttl = *d;
    spec.set_ttl_ns(static_cast<uint64_t>(d->count()));
  }
  r.per_segment = f.per_segment;
  spec.set_per_segment(f.per_segment);
  spec.set_force(f.force);

  std::map<std::string, std::string> labels;
  if (!ParseLabels(f.labels, name("label"), &labels, error)) return false;
  for (const auto& kv : labels) (*spec.mutable_labels())[kv.first] = kv.second;

  lossd::Status st = lossd::Validate(r);
  if (!st.ok()) {
    *error = st.message();
    if (r.iface.empty() && r.cgroup.empty())
      *error += " (" + name("iface") + " and/or " + name("cgroup") + ")";
    return false;
  }
  *out = std::move(spec);
  return true;
}

namespace {

// A JSON scalar as the text a flag would carry.
bool ScalarText(const std::string& key, const google::protobuf::Value& v, std::string* out,
                std::string* error) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kStringValue: *out = v.string_value(); return true;
    case google::protobuf::Value::kNumberValue: {
      double d = v.number_value();
      if (d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) {  // 2^53: exact
        char buf[32];
        snprintf(buf, sizeof(buf), "%.0f", d);
        *out = buf;
      } else if (d != std::floor(d)) {
        std::ostringstream ss;
        ss.precision(17);
        ss << d;
        *out = ss.str();
      } else {
        *error = key + ": " + std::to_string(d) +
                 " is too large for a JSON number: give it as a string";
        return false;
      }
      return true;
    }
    default:
      *error = key + ": expected a string or a number";
      return false;
  }
}

bool ObjectToFlags(const google::protobuf::Struct& obj, RuleFlags* f, std::string* error) {
  std::map<std::string, std::string*> strings = {
      {"iface", &f->iface},       {"interface", &f->iface},  {"cgroup", &f->cgroup},
      {"hook", &f->hook},         {"dir", &f->dir},          {"direction", &f->dir},
      {"src", &f->src},           {"dst", &f->dst},          {"sport", &f->sport},
      {"dport", &f->dport},       {"proto", &f->proto},      {"protocol", &f->proto},
      {"family", &f->family},     {"tcp_flags", &f->tcp_flags}, {"payload", &f->payload},
      {"rate", &f->rate},         {"ge", &f->ge},            {"every", &f->every},
      {"first", &f->first},       {"seed", &f->seed},        {"priority", &f->priority},
      {"ttl", &f->ttl}};
  std::map<std::string, bool*> bools = {{"per_segment", &f->per_segment}, {"force", &f->force}};
  // A rule's own loss model replaces the command line's.
  static const char* kModels[] = {"rate", "ge", "every", "first"};
  bool model_seen = false;
  for (const auto& kv : obj.fields()) {
    std::string key = kv.first;
    for (auto& c : key) c = c == '-' ? '_' : c;
    for (const char* m : kModels) model_seen = model_seen || key == m;
  }
  if (model_seen) f->rate = f->ge = f->every = f->first = "";

  std::map<std::string, google::protobuf::Value> sorted(obj.fields().begin(), obj.fields().end());
  for (const auto& kv : sorted) {
    std::string key = kv.first;
    for (auto& c : key) c = c == '-' ? '_' : c;
    const google::protobuf::Value& v = kv.second;
    if (v.kind_case() == google::protobuf::Value::kNullValue) continue;
    if (auto it = strings.find(key); it != strings.end()) {
      if (!ScalarText(kv.first, v, it->second, error)) return false;
    } else if (auto b = bools.find(key); b != bools.end()) {
      if (v.kind_case() != google::protobuf::Value::kBoolValue) {
        *error = kv.first + ": expected true or false";
        return false;
      }
      *b->second = v.bool_value();
    } else if (key == "labels" || key == "label") {
      if (v.kind_case() == google::protobuf::Value::kStructValue) {
        for (const auto& l : v.struct_value().fields()) {
          std::string text;
          if (!ScalarText(kv.first + "." + l.first, l.second, &text, error)) return false;
          f->labels.push_back(l.first + "=" + text);
        }
      } else if (v.kind_case() == google::protobuf::Value::kListValue) {
        for (const auto& l : v.list_value().values()) {
          if (l.kind_case() != google::protobuf::Value::kStringValue) {
            *error = kv.first + ": expected {\"key\": \"value\"} or [\"key=value\"]";
            return false;
          }
          f->labels.push_back(l.string_value());
        }
      } else if (v.kind_case() == google::protobuf::Value::kStringValue) {
        f->labels.push_back(v.string_value());
      } else {
        *error = kv.first + ": expected {\"key\": \"value\"} or [\"key=value\"]";
        return false;
      }
    } else {
      *error = "unknown field '" + kv.first +
               "' (fields are the flags' names: iface, cgroup, hook, dir, src, dst, sport, dport, "
               "proto, family, tcp_flags, payload, rate, ge, every, first, seed, priority, ttl, "
               "per_segment, labels, force)";
      return false;
    }
  }
  return true;
}

bool OneRule(const google::protobuf::Value& v, const std::string& where, const RuleFlags& defaults,
             std::vector<v1::RuleSpec>* out, std::vector<std::string>* places, std::string* error) {
  if (v.kind_case() != google::protobuf::Value::kStructValue) {
    *error = where + ": expected a JSON object (one rule)";
    return false;
  }
  RuleFlags f = defaults;
  v1::RuleSpec spec;
  std::string e;
  if (!ObjectToFlags(v.struct_value(), &f, &e) || !BuildRuleSpec(f, "", &spec, &e)) {
    *error = where + ": " + e;
    return false;
  }
  out->push_back(std::move(spec));
  places->push_back(where);
  return true;
}

bool ParseJson(const std::string& text, google::protobuf::Value* v, std::string* error) {
  auto st = google::protobuf::util::JsonStringToMessage(text, v);
  if (!st.ok()) {
    *error = "invalid JSON: " + std::string(st.message());
    return false;
  }
  return true;
}

}  // namespace

bool ParseRulesJson(const std::string& text, const std::string& source, const RuleFlags& defaults,
                    std::vector<v1::RuleSpec>* out, std::string* error,
                    std::vector<std::string>* where) {
  out->clear();
  std::vector<std::string> places_storage;
  std::vector<std::string>* places = where ? where : &places_storage;
  places->clear();
  std::string trimmed = Trim(text);
  if (trimmed.empty()) {
    *error = source + ": no rules (expected a JSON array, an object, or JSON lines)";
    return false;
  }
  // The whole input as one value: an array of rules or a single rule.
  google::protobuf::Value whole;
  std::string whole_error;
  if (trimmed[0] == '[' || trimmed[0] == '{') {
    if (ParseJson(trimmed, &whole, &whole_error)) {
      if (whole.kind_case() == google::protobuf::Value::kListValue) {
        int i = 0;
        for (const auto& item : whole.list_value().values()) {
          if (!OneRule(item, source + ": rule " + std::to_string(++i), defaults, out, places, error))
            return false;
        }
        if (out->empty()) {
          *error = source + ": the array holds no rules";
          return false;
        }
        return true;
      }
      return OneRule(whole, source, defaults, out, places, error);
    }
    if (trimmed[0] == '[') {
      *error = source + ": " + whole_error;
      return false;
    }
  }
  // JSON lines.
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::string at = source + ":" + std::to_string(n);
    google::protobuf::Value v;
    std::string e;
    if (!ParseJson(t, &v, &e)) {
      *error = at + ": " + e;
      return false;
    }
    if (!OneRule(v, at, defaults, out, places, error)) return false;
  }
  if (out->empty()) {
    *error = source + ": no rules (expected a JSON array, an object, or JSON lines)";
    return false;
  }
  return true;
}

std::string LocateSpecError(const std::string& message, const std::vector<std::string>& where) {
  if (message.compare(0, 6, "specs[") != 0) return message;
  size_t close = message.find("]: ");
  if (close == std::string::npos) return message;
  uint64_t i;
  std::string ignored;
  if (!ParseUint(message.substr(6, close - 6), 0, UINT32_MAX, "", &i, &ignored) || i >= where.size())
    return message;
  return where[i] + ": " + message.substr(close + 3);
}

}  // namespace lossctl
