#include "rule_flags.h"

#include "format.h"

#include <gtest/gtest.h>

namespace lossctl {
namespace {

RuleFlags IssueExample() {
  RuleFlags f;
  f.iface = "eth0";
  f.dport = "8080";
  f.rate = "1%";
  f.dir = "ingress";
  f.ttl = "60s";
  return f;
}

TEST(BuildRuleSpec, IssueExample) {
  v1::RuleSpec s;
  std::string err;
  ASSERT_TRUE(BuildRuleSpec(IssueExample(), "--", &s, &err)) << err;
  EXPECT_EQ(s.interface(), "eth0");
  EXPECT_EQ(s.direction(), v1::DIRECTION_INGRESS);
  EXPECT_EQ(s.hook(), v1::HOOK_AUTO);
  EXPECT_EQ(s.match().dport().lo(), 8080u);
  EXPECT_EQ(s.match().dport().hi(), 8080u);
  EXPECT_FALSE(s.match().has_sport());
  EXPECT_DOUBLE_EQ(s.loss().bernoulli().rate(), 0.01);
  EXPECT_FALSE(s.loss().has_seed());
  EXPECT_EQ(s.ttl_ns(), 60000000000ull);
}

TEST(BuildRuleSpec, EveryField) {
  RuleFlags f;
  f.iface = "veth0";
  f.hook = "tc";
  f.dir = "egress";
  f.src = "10.0.0.0/24";
  f.dst = "10.0.1.1";
  f.sport = "1000-2000";
  f.proto = "TCP";
  f.tcp_flags = "SYN|!ack";
  f.payload = "none";
  f.ge = "1%,20%";
  f.seed = "18446744073709551615";
  f.priority = "5";
  f.per_segment = true;
  f.force = true;
  f.labels = {"test=a", "owner="};
  v1::RuleSpec s;
  std::string err;
  ASSERT_TRUE(BuildRuleSpec(f, "--", &s, &err)) << err;
  EXPECT_EQ(s.hook(), v1::HOOK_TC);
  EXPECT_EQ(s.direction(), v1::DIRECTION_EGRESS);
  EXPECT_EQ(s.match().src(), "10.0.0.0/24");
  EXPECT_EQ(s.match().dst(), "10.0.1.1/32");
  EXPECT_EQ(s.match().sport().lo(), 1000u);
  EXPECT_EQ(s.match().sport().hi(), 2000u);
  EXPECT_EQ(s.match().protocol(), "tcp");
  EXPECT_EQ(s.match().tcp_flags(), "syn,!ack");
  EXPECT_EQ(s.match().payload(), v1::PAYLOAD_NONE);
  EXPECT_DOUBLE_EQ(s.loss().gilbert_elliott().p(), 0.01);
  EXPECT_DOUBLE_EQ(s.loss().gilbert_elliott().r(), 0.2);
  EXPECT_DOUBLE_EQ(s.loss().gilbert_elliott().bad_loss(), 1.0);
  EXPECT_EQ(s.loss().seed(), UINT64_MAX);
  EXPECT_EQ(s.priority(), 5u);
  EXPECT_TRUE(s.per_segment());
  EXPECT_TRUE(s.force());
  EXPECT_EQ(s.labels().at("test"), "a");
  EXPECT_EQ(s.labels().at("owner"), "");
}

std::string ErrorOf(RuleFlags f, const std::string& dash = "--") {
  v1::RuleSpec s;
  std::string err;
  EXPECT_FALSE(BuildRuleSpec(f, dash, &s, &err));
  return err;
}

TEST(BuildRuleSpec, ErrorsNameTheFlagAndTheFix) {
  RuleFlags f = IssueExample();
  f.rate = "200%";
  EXPECT_EQ(ErrorOf(f), "--rate: invalid rate '200%': must lie between 0% and 100%");
  EXPECT_EQ(ErrorOf(f, ""), "rate: invalid rate '200%': must lie between 0% and 100%");
  f = IssueExample();
  f.dport = "90000";
  EXPECT_EQ(ErrorOf(f).rfind("--dport: invalid port '90000'", 0), 0u) << ErrorOf(f);
  f.dport = "0";
  EXPECT_NE(ErrorOf(f).find("port 0"), std::string::npos);
  f = IssueExample();
  f.dir = "sideways";
  EXPECT_EQ(ErrorOf(f), "--dir: invalid direction 'sideways': expected ingress, egress or both");
  f = IssueExample();
  f.every = "3";
  EXPECT_NE(ErrorOf(f).find("one loss model"), std::string::npos);
  f = IssueExample();
  f.rate.clear();
  EXPECT_NE(ErrorOf(f).find("a loss model is needed"), std::string::npos);
  f = IssueExample();
  f.iface.clear();
  EXPECT_NE(ErrorOf(f).find("--iface and/or one of --cgroup"), std::string::npos);
  f = IssueExample();
  f.ttl = "soon";
  EXPECT_EQ(ErrorOf(f).rfind("--ttl: invalid duration 'soon'", 0), 0u);
  f = IssueExample();
  f.every = "0";
  f.rate.clear();
  EXPECT_EQ(ErrorOf(f).rfind("--every: invalid value '0'", 0), 0u);
  f = IssueExample();
  f.hook = "xdp";
  f.dir = "egress";
  EXPECT_NE(ErrorOf(f).find("XDP sees ingress only"), std::string::npos);
  f = IssueExample();
  f.labels = {"novalue"};
  EXPECT_EQ(ErrorOf(f), "--label: invalid label 'novalue': expected key=value");
}

TEST(ParseRulesJson, ArrayLinesAndObject) {
  std::vector<v1::RuleSpec> specs;
  std::string err;
  RuleFlags defaults;
  ASSERT_TRUE(ParseRulesJson(R"([{"iface":"eth0","dport":8080,"rate":"1%"},
                                  {"iface":"eth1","dport":"9000-9100","every":10,
                                   "labels":{"t":"x"},"per-segment":true}])",
                             "r.json", defaults, &specs, &err))
      << err;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].match().dport().lo(), 8080u);
  EXPECT_EQ(specs[1].loss().every_nth(), 10u);
  EXPECT_EQ(specs[1].labels().at("t"), "x");
  EXPECT_TRUE(specs[1].per_segment());

  ASSERT_TRUE(
      ParseRulesJson("# comment\n{\"iface\":\"eth0\",\"rate\":0.01}\n\n"
                     "{\"cgroup\":\"/x\",\"first\":2}\n",
                     "r.jsonl", defaults, &specs, &err))
      << err;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_DOUBLE_EQ(specs[0].loss().bernoulli().rate(), 0.01);
  EXPECT_EQ(specs[1].loss().first_k(), 2u);

  ASSERT_TRUE(ParseRulesJson("{\n \"iface\": \"eth0\",\n \"rate\": \"5%\"\n}\n", "one.json",
                             defaults, &specs, &err))
      << err;
  EXPECT_EQ(specs.size(), 1u);

  // A schedule by the flags' names.
  ASSERT_TRUE(ParseRulesJson(R"({"iface":"eth0","rate":"1%","start-after":"2s",
                                 "pulse":"200ms/800ms","pulse_cycles":10})",
                             "s.json", defaults, &specs, &err))
      << err;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].schedule().start_after_ns(), 2000000000u);
  EXPECT_EQ(specs[0].schedule().active_ns(), 200000000u);
  EXPECT_EQ(specs[0].schedule().dormant_ns(), 800000000u);
  EXPECT_EQ(specs[0].schedule().cycles(), 10u);
}

// What `lossctl -o json rule get` prints (format.cc's ToJson: proto names,
// every primitive field), read back: the same spec.
TEST(ParseRulesJson, TheApisShapeAsPrintedRoundTrips) {
  v1::Rule r;
  r.set_id(20);
  r.set_state(v1::RULE_STATE_ACTIVE);
  r.add_attachments("clsact egress on eth0");
  r.mutable_counters()->set_dropped_packets(3);
  v1::RuleSpec* s = r.mutable_spec();
  s->set_interface("eth0");
  s->set_hook(v1::HOOK_TC);
  s->set_direction(v1::DIRECTION_EGRESS);
  s->mutable_match()->mutable_dport()->set_lo(8080);
  s->mutable_match()->mutable_dport()->set_hi(8090);
  s->mutable_match()->set_protocol("tcp");
  s->mutable_match()->set_payload(v1::PAYLOAD_ONLY);
  s->mutable_loss()->mutable_gilbert_elliott()->set_p(0.01);
  s->mutable_loss()->mutable_gilbert_elliott()->set_r(0.2);
  s->mutable_loss()->set_seed(18446744073709551615ull);
  s->set_ttl_ns(60000000000ull);
  s->mutable_schedule()->set_active_ns(200000000);
  s->mutable_schedule()->set_dormant_ns(800000000);
  s->mutable_schedule()->set_cycles(3);
  (*s->mutable_labels())["run"] = "7";
  std::string printed = ToJson(r);
  std::vector<v1::RuleSpec> specs;
  std::string err;
  RuleFlags defaults;
  defaults.rate = "5%";  // the command line's flags do not apply to it
  ASSERT_TRUE(ParseRulesJson(printed, "r.json", defaults, &specs, &err)) << err << "\n" << printed;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].SerializeAsString(), s->SerializeAsString()) << specs[0].DebugString();
  // Its spec alone, and `rule ls`'s {"rules": [...]}.
  ASSERT_TRUE(ParseRulesJson(ToJson(*s), "s.json", defaults, &specs, &err)) << err;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].SerializeAsString(), s->SerializeAsString());
  v1::ListRulesResponse ls;
  *ls.add_rules() = r;
  *ls.add_rules() = r;
  ASSERT_TRUE(ParseRulesJson(ToJson(ls), "ls.json", defaults, &specs, &err)) << err;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].SerializeAsString(), s->SerializeAsString());
  // Strict: a misspelt field of the API's shape is named.
  EXPECT_FALSE(ParseRulesJson(R"({"spec": {"interface": "eth0", "los": {}}})", "bad.json", defaults,
                              &specs, &err));
  EXPECT_NE(err.find("bad.json: as the API's Rule JSON: "), std::string::npos) << err;
  EXPECT_NE(err.find("los"), std::string::npos) << err;
  EXPECT_FALSE(ParseRulesJson(R"({"rules": 3})", "ls.json", defaults, &specs, &err));
  EXPECT_NE(err.find("expected an array"), std::string::npos) << err;
}

TEST(ParseRulesJson, CommandLineFlagsAreDefaults) {
  std::vector<v1::RuleSpec> specs;
  std::string err;
  RuleFlags defaults;
  defaults.iface = "eth0";
  defaults.ttl = "60s";
  defaults.rate = "1%";
  defaults.labels = {"run=7"};
  ASSERT_TRUE(ParseRulesJson("{\"dport\":80}\n{\"dport\":81,\"every\":5,\"iface\":\"eth1\"}\n", "r",
                             defaults, &specs, &err))
      << err;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].interface(), "eth0");
  EXPECT_DOUBLE_EQ(specs[0].loss().bernoulli().rate(), 0.01);
  EXPECT_EQ(specs[1].interface(), "eth1");
  EXPECT_EQ(specs[1].loss().every_nth(), 5u);  // the rule's model replaces --rate
  EXPECT_EQ(specs[1].ttl_ns(), 60000000000ull);
  EXPECT_EQ(specs[1].labels().at("run"), "7");
}

TEST(ParseRulesJson, ErrorsSayWhere) {
  std::vector<v1::RuleSpec> specs;
  std::string err;
  RuleFlags d;
  EXPECT_FALSE(
      ParseRulesJson("{\"iface\":\"eth0\",\"rate\":\"1%\"}\n{\"iface\":\"eth0\",\"rate\":\"200%\"}",
                     "r.json", d, &specs, &err));
  EXPECT_EQ(err, "r.json:2: rate: invalid rate '200%': must lie between 0% and 100%");
  EXPECT_FALSE(ParseRulesJson("[{\"iface\":\"eth0\",\"rat\":\"1%\"}]", "r.json", d, &specs, &err));
  EXPECT_EQ(err.rfind("r.json: rule 1: unknown field 'rat'", 0), 0u) << err;
  EXPECT_FALSE(ParseRulesJson("{\"iface\":", "r.json", d, &specs, &err));
  EXPECT_EQ(err.rfind("r.json:1: invalid JSON", 0), 0u) << err;
  EXPECT_FALSE(ParseRulesJson("", "r.json", d, &specs, &err));
  EXPECT_FALSE(ParseRulesJson("[]", "r.json", d, &specs, &err));
  EXPECT_FALSE(ParseRulesJson("{\"iface\":\"eth0\",\"rate\":\"1%\",\"force\":\"yes\"}", "r", d,
                              &specs, &err));
  EXPECT_EQ(err, "r: force: expected true or false");
}

TEST(ParseRulesJson, PlacesForTheDaemonsErrors) {
  std::vector<v1::RuleSpec> specs;
  std::vector<std::string> where;
  std::string err;
  RuleFlags d;
  d.iface = "eth0";
  d.rate = "1%";
  ASSERT_TRUE(ParseRulesJson("# rules\n{\"dport\":80}\n\n{\"dport\":81}\n", "r.jsonl", d, &specs,
                             &err, &where))
      << err;
  ASSERT_EQ(where, (std::vector<std::string>{"r.jsonl:2", "r.jsonl:4"}));
  EXPECT_EQ(LocateSpecError("specs[1]: rule limit reached", where),
            "r.jsonl:4: rule limit reached");
  EXPECT_EQ(LocateSpecError("specs[7]: out of range", where), "specs[7]: out of range");
  EXPECT_EQ(LocateSpecError("no spec named", where), "no spec named");
  ASSERT_TRUE(ParseRulesJson("[{\"dport\":80},{\"dport\":81}]", "r.json", d, &specs, &err, &where));
  EXPECT_EQ(where, (std::vector<std::string>{"r.json: rule 1", "r.json: rule 2"}));
}

}  // namespace
}  // namespace lossctl
