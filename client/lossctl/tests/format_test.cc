#include "format.h"

#include <gtest/gtest.h>

namespace lossctl {
namespace {

// Each input formats to its text.
template <typename T, typename Fn>
void ExpectFormats(Fn format, std::initializer_list<std::pair<T, const char*>> cases) {
  for (const auto& [in, want] : cases) EXPECT_EQ(format(in), want) << in;
}

TEST(FormatRate, PercentWithoutExponent) {
  ExpectFormats<double>(FormatRate, {{0.01, "1%"},
                                     {0.00005, "0.005%"},
                                     {0, "0%"},
                                     {1, "100%"},
                                     {0.2, "20%"},
                                     {1.0 / 3, "33.3333%"},
                                     {1e-9, "0.0000001%"}});
}

TEST(FormatBytes, HumanUnits) {
  ExpectFormats<uint64_t>(FormatBytes, {{0, "0B"},
                                        {1023, "1023B"},
                                        {1536, "1.5KiB"},
                                        {10 * 1024 * 1024, "10MiB"},
                                        {123ull << 30, "123GiB"}});
}

TEST(FormatDuration, HumanUnits) {
  ExpectFormats<uint64_t>(FormatDuration, {{0, "0s"},
                                           {250, "250ns"},
                                           {1200000, "1.2ms"},
                                           {1500000000, "1.5s"},
                                           {30000000000, "30s"},
                                           {90000000000, "1m30s"},
                                           {3600000000000, "1h"}});
}

TEST(FormatPorts, ApiConventions) {
  v1::PortRange p;
  EXPECT_EQ(FormatPorts(p), "");
  p.set_lo(8080);
  EXPECT_EQ(FormatPorts(p), "8080");  // hi 0: lo only
  p.set_hi(8080);
  EXPECT_EQ(FormatPorts(p), "8080");
  p.set_hi(8100);
  EXPECT_EQ(FormatPorts(p), "8080-8100");
}

TEST(Names, RetransmitTypesRoundTrip) {
  for (const auto& n : RetransmitTypeNames()) {
    v1::RetransmitType t;
    ASSERT_TRUE(ParseRetransmitType(n, &t)) << n;
    EXPECT_EQ(RetransmitTypeName(t), n);
  }
  v1::RetransmitType t;
  EXPECT_TRUE(ParseRetransmitType("RTO", &t));
  EXPECT_FALSE(ParseRetransmitType("slow", &t));
}

TEST(OrderedByType, KnownTypesFirstThenOthers) {
  google::protobuf::Map<std::string, uint64_t> m;
  m["tlp"] = 3;
  m["zzz"] = 1;
  m["fast"] = 7;
  auto v = OrderedByType(m);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].first, "fast");
  EXPECT_EQ(v[1].first, "tlp");
  EXPECT_EQ(v[2].first, "zzz");
}

TEST(Summaries, RuleInOneLine) {
  v1::RuleSpec s;
  s.set_interface("eth0");
  s.mutable_match()->set_protocol("tcp");
  s.mutable_match()->mutable_dport()->set_lo(8080);
  s.mutable_match()->mutable_dport()->set_hi(8080);
  s.mutable_loss()->mutable_bernoulli()->set_rate(0.01);
  s.mutable_loss()->set_seed(7);
  EXPECT_EQ(TargetSummary(s), "eth0");
  EXPECT_EQ(MatchSummary(s.match()), "tcp dport 8080");
  EXPECT_EQ(LossSummary(s.loss()), "1% seed 7");
  EXPECT_EQ(MatchSummary(v1::Match()), "any");
}

TEST(Summaries, PolicerPerRuleOrPerFlow) {
  v1::RuleSpec s;
  s.mutable_loss()->mutable_police()->set_rate_bps(50000000);
  s.mutable_loss()->mutable_police()->set_burst_bytes(65536);
  s.set_action(v1::ACTION_ECN);
  EXPECT_EQ(LossSummary(s.loss()), "police 50mbit,64kib");
  EXPECT_EQ(ImpairmentSummary(s), "police 50mbit,64kib ecn");
  s.mutable_loss()->mutable_police()->set_per_flow(true);  // what --police reads back
  EXPECT_EQ(LossSummary(s.loss()), "police 50mbit,64kib,flow");
}

TEST(Json, FieldNamesAsInProtoAndDefaultsPrinted) {
  v1::ClearRulesResponse r;
  EXPECT_EQ(ToJson(r), "{\"deleted\":0}");
  v1::Health h;
  h.set_lease_remaining_ns(5);
  EXPECT_NE(ToJson(h).find("\"lease_remaining_ns\":\"5\""), std::string::npos);
}

}  // namespace
}  // namespace lossctl
