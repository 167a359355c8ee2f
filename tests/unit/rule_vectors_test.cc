// The shared parser vectors (tests/vectors/rule_parsers.json) through the
// flag builder (rules/flags.h); client/python/tests/test_vectors.py runs the
// same file through the Python client, so the two parsers cannot drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "base/json.h"
#include "rules/flags.h"

#ifndef LOSSD_VECTORS
#error "LOSSD_VECTORS: the path of tests/vectors/rule_parsers.json"
#endif

namespace lossd {
namespace {

// What the rule holds for `flag`, in the vectors' form ("values" in the file).
Json ValueOf(const RuleSpec& r, const std::string& flag) {
  if (flag == "rate") return r.model.p;
  if (flag == "ge") return {r.model.p, r.model.r, r.model.bad_loss, r.model.good_loss};
  if (flag == "markov") return {r.model.p13, r.model.p31, r.model.p32, r.model.p23, r.model.p14};
  if (flag == "police") return {r.model.rate_bps, r.model.burst_bytes, r.model.police_per_flow};
  if (flag == "action") return ActionName(r.action);
  if (flag == "every" || flag == "first") return r.model.n;
  if (flag == "seed") return r.seed.value_or(0);
  if (flag == "priority") return r.priority;
  if (flag == "ttl") return r.ttl.count();
  if (flag == "start_after") return r.schedule.start_after.count();
  if (flag == "pulse") return {r.schedule.active.count(), r.schedule.dormant.count()};
  if (flag == "pulse_cycles") return r.schedule.cycles;
  if (flag == "ramp") {
    Json out = Json::array();
    for (const auto& st : r.model.steps) out.push_back({st.rate, st.duration.count()});
    return out;
  }
  if (flag == "guard")
    return {r.guard.stall.count(),   r.guard.rtos,    r.guard.rtos_window.count(),
            r.guard.resends,         r.guard.resends_window.count(), r.guard.resets,
            r.guard.resets_window.count(), r.guard.watch_port, r.guard.retrans,
            r.guard.retrans_window.count(), r.guard.misbehaves, r.guard.stall_cause};
  if (flag == "sport") return {r.sport.lo, r.sport.hi};
  if (flag == "dport") return {r.dport.lo, r.dport.hi};
  if (flag == "src") return r.src ? r.src->ToString() : "";
  if (flag == "dst") return r.dst ? r.dst->ToString() : "";
  if (flag == "proto") return r.l4proto;
  if (flag == "family") return r.family;
  if (flag == "tcp_flags") return {r.tcp_flags_mask, r.tcp_flags_value};
  if (flag == "hook") return HookName(r.hook);
  if (flag == "dir") return DirectionName(r.dir);
  if (flag == "payload") return PayloadName(r.payload);
  return nullptr;
}

// The numbers compared as numbers (JSON's 5 and 5.0 are one value).
bool Same(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
    if (a.is_number_unsigned() || b.is_number_unsigned())
      return a.get<uint64_t>() == b.get<uint64_t>();
    return a.get<int64_t>() == b.get<int64_t>();
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); i++)
      if (!Same(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

Json LoadVectors() {
  std::ifstream in(LOSSD_VECTORS);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(RuleVectors, BothParsersAgree) {
  Json doc = LoadVectors();
  ASSERT_TRUE(doc.is_object()) << "cannot read " << LOSSD_VECTORS;
  const Json& vectors = doc["vectors"];
  ASSERT_GT(vectors.size(), 100u);
  static const char* kModels[] = {"rate", "ge", "every", "first", "ramp", "markov", "police"};
  for (const auto& v : vectors) {
    std::string flag = v["flag"], input = v["input"];
    SCOPED_TRACE(flag + " = '" + input + "'");
    RuleFlags f;
    for (const auto& [k, val] : doc["base"].items())
      *RuleFlagsField(&f, k) = val.get<std::string>();
    for (const char* m : kModels)
      if (flag == m) f.rate.clear();
    if (v.contains("with"))
      for (const auto& [k, val] : v["with"].items())
        *RuleFlagsField(&f, k) = val.get<std::string>();
    std::string* target = RuleFlagsField(&f, flag);
    ASSERT_NE(target, nullptr) << "unknown flag " << flag;
    *target = input;
    auto r = BuildRuleSpec(f, "");
    if (v.contains("value")) {
      if (!r.ok()) {
        ADD_FAILURE() << "refused: " << r.status().message();
        continue;
      }
      Json got = ValueOf(*r, flag);
      EXPECT_TRUE(Same(got, v["value"])) << "got " << got.dump() << ", want " << v["value"].dump();
    } else {
      if (r.ok()) {
        ADD_FAILURE() << "accepted: " << ValueOf(*r, flag).dump();
        continue;
      }
      std::string msg = r.status().message(), want = v["error"];
      std::string name = flag;  // as the flag is spelled: tcp-flags, start-after, ...
      std::replace(name.begin(), name.end(), '_', '-');
      // A refusal of the rule as a whole (Validate's) names no single flag first.
      if (!v.value("validate", false)) {
        EXPECT_EQ(msg.rfind(name + ": ", 0), 0u) << msg;
      }
      EXPECT_NE(msg.find(want), std::string::npos) << "'" << msg << "' lacks '" << want << "'";
      // Quoted through Shown(): never an input longer than 64 bytes whole.
      if (input.size() > 64) {
        EXPECT_EQ(msg.find(input), std::string::npos)
            << "the message quotes the whole input: " << msg;
      }
    }
  }
}

// The builder's own rules, beyond single flags.
TEST(BuildRuleSpec, ModelsAndTarget) {
  RuleFlags f;
  f.iface = "eth0";
  EXPECT_NE(BuildRuleSpec(f).status().message().find(
                "a loss model is needed: give --rate, --ge, --every, --first, --ramp, --markov "
                "or --police"),
            std::string::npos);
  f.rate = "1%";
  f.every = "2";
  EXPECT_NE(BuildRuleSpec(f).status().message().find("one loss model per rule"), std::string::npos);
  f.every.clear();
  for (std::string RuleFlags::*model : {&RuleFlags::markov, &RuleFlags::police}) {
    f.*model = "1%";
    EXPECT_NE(BuildRuleSpec(f).status().message().find("one loss model per rule"),
              std::string::npos);
    f.*model = "";
  }
  f.iface.clear();
  EXPECT_NE(BuildRuleSpec(f).status().message().find(
                "(--iface and/or one of --cgroup, --pid, --unit, --container, --pod)"),
            std::string::npos);
  f.cgroup = "/sys/fs/cgroup/x";
  auto r = BuildRuleSpec(f);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->hook, Hook::kAuto);
  EXPECT_EQ(r->dir, Direction::kIngress);
  EXPECT_FALSE(r->seed.has_value());
  EXPECT_TRUE(r->sport.Any());
  f.hook = "xdp";
  EXPECT_NE(BuildRuleSpec(f).status().message().find("hook 'xdp' needs an interface"),
            std::string::npos);
}

TEST(TcpFlagsText, RoundTripsEveryByte) {
  for (int mask = 0; mask < 256; mask++) {
    uint8_t value = static_cast<uint8_t>(mask & 0x5a);
    std::string text = TcpFlagsText(static_cast<uint8_t>(mask), value);
    if (!mask) {
      EXPECT_EQ(text, "");
      continue;
    }
    uint8_t m, v;
    ASSERT_TRUE(ParseTcpFlags(text, &m, &v).ok()) << text;
    EXPECT_EQ(m, mask);
    EXPECT_EQ(v, value);
  }
}

}  // namespace
}  // namespace lossd
