#include "rule_flags.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <sstream>

#include "rules/proto.h"

namespace lossctl {
namespace {

std::string Trim(const std::string& s) {
  return lossd::TrimSpace(s);
}

}  // namespace

bool ParseUint(const std::string& text, uint64_t min, uint64_t max, const std::string& flag,
               uint64_t* out, std::string* error) {
  auto v = lossd::ParseWholeNumber(text, min, max, flag);
  if (!v.ok()) {
    *error = v.status().message();
    return false;
  }
  *out = *v;
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
      *error =
          flag + ": label '" + key + "' given twice ('" + it->second + "' and '" + value + "')";
      return false;
    }
    (*labels)[key] = value;
  }
  return true;
}

void AddRuleFlags(CLI::App* app, RuleFlags* f) {
  lossd::AddRuleOptions(app, f);
  app->add_option("--label", f->labels, "key=value (repeatable)")->allow_extra_args(false);
  app->add_flag("--force", f->force, "Allow a rule that would cut SSH or lossd's own traffic");
}

bool BuildRuleSpec(const RuleFlags& f, const std::string& dash, v1::RuleSpec* out,
                   std::string* error) {
  auto r = lossd::BuildRuleSpec(f, dash);
  if (!r.ok()) {
    *error = r.status().message();
    return false;
  }
  std::map<std::string, std::string> labels;
  if (!ParseLabels(f.labels, dash + "label", &labels, error)) return false;
  v1::RuleSpec spec;
  lossd::SpecToProto(*r, &spec);
  spec.set_force(f.force);
  for (const auto& kv : labels) (*spec.mutable_labels())[kv.first] = kv.second;
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
        *error =
            key + ": " + std::to_string(d) + " is too large for a JSON number: give it as a string";
        return false;
      }
      return true;
    }
    default: *error = key + ": expected a string or a number"; return false;
  }
}

bool ObjectToFlags(const google::protobuf::Struct& obj, RuleFlags* f, std::string* error) {
  std::map<std::string, std::string*> strings = {
      {"iface", &f->iface},       {"interface", &f->iface}, {"cgroup", &f->cgroup},
      {"pid", &f->pid},           {"unit", &f->unit},       {"container", &f->container},
      {"pod", &f->pod},           {"hook", &f->hook},       {"dir", &f->dir},
      {"direction", &f->dir},     {"src", &f->src},         {"dst", &f->dst},
      {"sport", &f->sport},       {"dport", &f->dport},     {"proto", &f->proto},
      {"protocol", &f->proto},    {"family", &f->family},   {"tcp_flags", &f->tcp_flags},
      {"payload", &f->payload},   {"rate", &f->rate},       {"ge", &f->ge},
      {"every", &f->every},       {"first", &f->first},     {"seed", &f->seed},
      {"priority", &f->priority}, {"ttl", &f->ttl},     {"start_after", &f->start_after},
      {"pulse", &f->pulse},       {"pulse_cycles", &f->pulse_cycles}, {"guard", &f->guard}, {"ramp", &f->ramp},
      {"markov", &f->markov},     {"police", &f->police},   {"action", &f->action}};
  std::map<std::string, bool*> bools = {{"per_segment", &f->per_segment}, {"force", &f->force}};
  // A rule's own loss model replaces the command line's.
  static const char* kModels[] = {"rate", "ge", "every", "first", "ramp", "markov", "police"};
  bool model_seen = false;
  for (const auto& kv : obj.fields()) {
    std::string key = kv.first;
    for (auto& c : key) c = c == '-' ? '_' : c;
    for (const char* m : kModels) model_seen = model_seen || key == m;
  }
  if (model_seen) f->rate = f->ge = f->every = f->first = f->ramp = f->markov = f->police = "";

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
               "' (fields are the flags' names: iface, cgroup, pid, unit, container, pod, hook, "
               "dir, src, "
               "dst, sport, dport, "
               "proto, family, tcp_flags, payload, rate, ge, every, first, seed, priority, ttl, "
               "ramp, start_after, pulse, pulse_cycles, guard, per_segment, labels, force)";
      return false;
    }
  }
  return true;
}

// The API's shape, as `-o json rule get` and `rule ls` print it: a Rule
// (with "spec"; what the daemon reports beside it is left out) or a bare
// RuleSpec (one of the fields only it has). Parsed strictly, as the proto.
bool ApiRule(const google::protobuf::Struct& obj, const std::string& where, v1::RuleSpec* spec,
             bool* api, std::string* error) {
  const auto& fields = obj.fields();
  bool rule = fields.count("spec") > 0;
  *api = rule;
  for (const char* k : {"match", "loss", "ttl_ns", "reattach"}) *api = *api || fields.count(k) > 0;
  if (!*api) return true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(obj, &text).ok()) {
    *error = where + ": cannot read the rule back as JSON";
    return false;
  }
  v1::Rule r;
  google::protobuf::Message* m = rule ? static_cast<google::protobuf::Message*>(&r) : spec;
  auto st = google::protobuf::util::JsonStringToMessage(text, m);
  if (!st.ok()) {
    *error = where + ": as the API's " + (rule ? "Rule" : "RuleSpec") +
             " JSON: " + std::string(st.message());
    return false;
  }
  if (rule) *spec = r.spec();
  return true;
}

bool OneRule(const google::protobuf::Value& v, const std::string& where, const RuleFlags& defaults,
             std::vector<v1::RuleSpec>* out, std::vector<std::string>* places, std::string* error) {
  if (v.kind_case() != google::protobuf::Value::kStructValue) {
    *error = where + ": expected a JSON object (one rule)";
    return false;
  }
  bool api = false;
  v1::RuleSpec as_api;
  if (!ApiRule(v.struct_value(), where, &as_api, &api, error)) return false;
  if (api) {
    out->push_back(std::move(as_api));
    places->push_back(where);
    return true;
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
          if (!OneRule(item, source + ": rule " + std::to_string(++i), defaults, out, places,
                       error))
            return false;
        }
        if (out->empty()) {
          *error = source + ": the array holds no rules";
          return false;
        }
        return true;
      }
      // `-o json rule ls`: {"rules": [...]}
      if (whole.kind_case() == google::protobuf::Value::kStructValue &&
          whole.struct_value().fields().size() == 1 && whole.struct_value().fields().count("rules")) {
        const auto& list = whole.struct_value().fields().at("rules");
        if (list.kind_case() != google::protobuf::Value::kListValue) {
          *error = source + ": \"rules\": expected an array of rules";
          return false;
        }
        int i = 0;
        for (const auto& item : list.list_value().values())
          if (!OneRule(item, source + ": rule " + std::to_string(++i), defaults, out, places, error))
            return false;
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
  if (!ParseUint(message.substr(6, close - 6), 0, UINT32_MAX, "", &i, &ignored) ||
      i >= where.size())
    return message;
  return where[i] + ": " + message.substr(close + 3);
}

}  // namespace lossctl
