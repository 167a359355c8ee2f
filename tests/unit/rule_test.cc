// Rule parsing, validation and encoding: each bad input gives a clear error.
#include "rules/rule.h"
#include "injector/encode.h"
#include "rules/model.h"
#include "rules/proto.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lossd {
namespace {

RuleSpec Base() {
  RuleSpec s;
  s.iface = "eth0";
  s.model.p = 0.01;
  return s;
}

// The message names the input and says what is expected.
void ExpectInvalid(const Status& st, const std::string& needle) {
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << "message '" << st.message() << "' lacks '" << needle << "'";
}

TEST(ParseRate, PercentAndFraction) {
  EXPECT_DOUBLE_EQ(*ParseRate("1%"), 0.01);
  EXPECT_DOUBLE_EQ(*ParseRate("0.005%"), 0.00005);
  EXPECT_DOUBLE_EQ(*ParseRate("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseRate(" 100 % "), 1.0);
  EXPECT_DOUBLE_EQ(*ParseRate("0"), 0.0);
  EXPECT_DOUBLE_EQ(*ParseRate("1e-4"), 1e-4);
}

TEST(ParseRate, RejectsOutOfRangeAndJunk) {
  ExpectInvalid(ParseRate("101%").status(), "between 0% and 100%");
  ExpectInvalid(ParseRate("-1%").status(), "between 0% and 100%");
  ExpectInvalid(ParseRate("1.5").status(), "between 0% and 100%");
  ExpectInvalid(ParseRate("abc").status(), "invalid rate 'abc'");
  ExpectInvalid(ParseRate("").status(), "invalid rate");
  ExpectInvalid(ParseRate("nan").status(), "invalid rate");
  ExpectInvalid(ParseRate("1%%").status(), "invalid rate");
}

TEST(ProbabilityToThreshold, ResolutionIsTwoToMinus32) {
  EXPECT_EQ(ProbabilityToThreshold(0), 0u);
  EXPECT_EQ(ProbabilityToThreshold(1), LOSS_PROB_ONE);
  EXPECT_EQ(ProbabilityToThreshold(0.5), 1ull << 31);
  // 0.005 % = 5e-5 -> 214748.3648 -> 214748: relative error < 2e-6.
  uint64_t t = ProbabilityToThreshold(5e-5);
  EXPECT_EQ(t, 214748u);
  EXPECT_LT(std::fabs(double(t) / 4294967296.0 - 5e-5) / 5e-5, 2e-6);
  // A positive rate never rounds to zero.
  EXPECT_EQ(ProbabilityToThreshold(1e-12), 1u);
}

TEST(ParseCidr, IPv4AndIPv6) {
  auto c = ParseCidr("10.1.2.0/24");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, 4);
  EXPECT_EQ(c->prefix, 24);
  EXPECT_EQ(c->ToString(), "10.1.2.0/24");
  EXPECT_FALSE(c->IsHost());
  auto h = ParseCidr("192.0.2.7");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->prefix, 32);
  EXPECT_TRUE(h->IsHost());
  auto v6 = ParseCidr("fd00:1::/64");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->family, 6);
  EXPECT_EQ(v6->prefix, 64);
  EXPECT_EQ(v6->ToString(), "fd00:1::/64");
  auto v6h = ParseCidr("::1");
  ASSERT_TRUE(v6h.ok());
  EXPECT_EQ(v6h->prefix, 128);
  EXPECT_TRUE(ParseCidr("0.0.0.0/0").ok());
  EXPECT_TRUE(ParseCidr("::/0").ok());
}

TEST(ParseCidr, Errors) {
  ExpectInvalid(ParseCidr("10.0.0.0/33").status(), "exceeds 32");
  ExpectInvalid(ParseCidr("fd00::/129").status(), "prefix length");
  ExpectInvalid(ParseCidr("10.0.0.1/24").status(), "host bits set");
  ExpectInvalid(ParseCidr("fd00:1:2:3:4::/68").status(), "host bits set beyond /68");
  ExpectInvalid(ParseCidr("10.0.0/24").status(), "not an IPv4 or IPv6 address");
  ExpectInvalid(ParseCidr("example.com").status(), "not an IPv4 or IPv6 address");
  ExpectInvalid(ParseCidr("10.0.0.0/x").status(), "prefix length must be a number");
  ExpectInvalid(ParseCidr("").status(), "invalid CIDR");
}

TEST(ParsePortRange, SingleAndRange) {
  auto p = ParsePortRange("8080");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->lo, 8080);
  EXPECT_EQ(p->hi, 8080);
  EXPECT_EQ(p->Size(), 1u);
  auto r = ParsePortRange("8000-8100");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lo, 8000);
  EXPECT_EQ(r->hi, 8100);
  EXPECT_TRUE(ParsePortRange("0-65535")->Any());
}

TEST(ParsePortRange, Errors) {
  ExpectInvalid(ParsePortRange("65536").status(), "0-65535");
  ExpectInvalid(ParsePortRange("90-80").status(), "low end above high end");
  ExpectInvalid(ParsePortRange("http").status(), "invalid port 'http'");
  ExpectInvalid(ParsePortRange("1-").status(), "invalid port range");
  ExpectInvalid(ParsePortRange("-5").status(), "invalid port range");
}

TEST(ParseProtocol, NamesAndNumbers) {
  EXPECT_EQ(*ParseProtocol("tcp"), IPPROTO_TCP);
  EXPECT_EQ(*ParseProtocol("UDP"), IPPROTO_UDP);
  EXPECT_EQ(*ParseProtocol("icmp"), IPPROTO_ICMP);
  EXPECT_EQ(*ParseProtocol("icmpv6"), IPPROTO_ICMPV6);
  EXPECT_EQ(*ParseProtocol("any"), 0);
  EXPECT_EQ(*ParseProtocol("132"), 132);
  ExpectInvalid(ParseProtocol("tcpp").status(), "invalid protocol 'tcpp'");
  ExpectInvalid(ParseProtocol("256").status(), "invalid protocol");
}

TEST(ParseTcpFlags, SetAndClear) {
  uint8_t mask, value;
  ASSERT_TRUE(ParseTcpFlags("syn,!ack", &mask, &value).ok());
  EXPECT_EQ(mask, 0x12);
  EXPECT_EQ(value, 0x02);
  ASSERT_TRUE(ParseTcpFlags("SYN|ACK", &mask, &value).ok());
  EXPECT_EQ(mask, 0x12);
  EXPECT_EQ(value, 0x12);
  ExpectInvalid(ParseTcpFlags("syn,foo", &mask, &value), "invalid TCP flag 'foo'");
  ExpectInvalid(ParseTcpFlags("syn,!syn", &mask, &value), "given twice");
  ExpectInvalid(ParseTcpFlags("", &mask, &value), "empty TCP flag list");
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(ParseDuration("500ms")->count(), 500000000);
  EXPECT_EQ(ParseDuration("30s")->count(), 30000000000);
  EXPECT_EQ(ParseDuration("5m")->count(), 300000000000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000000000);
  EXPECT_EQ(ParseDuration("2")->count(), 2000000000);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1500000000);
  ExpectInvalid(ParseDuration("soon").status(), "invalid duration 'soon'");
  ExpectInvalid(ParseDuration("-1s").status(), "invalid duration");
  ExpectInvalid(ParseDuration("10y").status(), "invalid duration");
}

TEST(ParseGilbertElliott, NetemDefaults) {
  auto m = ParseGilbertElliott("1%");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, LossModel::Kind::kGilbertElliott);
  EXPECT_DOUBLE_EQ(m->p, 0.01);
  EXPECT_DOUBLE_EQ(m->r, 0.99);
  EXPECT_DOUBLE_EQ(m->bad_loss, 1.0);
  EXPECT_DOUBLE_EQ(m->good_loss, 0.0);
  auto full = ParseGilbertElliott("1%,20%,90%,0.1%");
  ASSERT_TRUE(full.ok());
  EXPECT_DOUBLE_EQ(full->r, 0.2);
  EXPECT_DOUBLE_EQ(full->bad_loss, 0.9);
  EXPECT_DOUBLE_EQ(full->good_loss, 0.001);
  ExpectInvalid(ParseGilbertElliott("1%,2%,3%,4%,5%").status(), "p[,r[,1-h[,1-k]]]");
  ExpectInvalid(ParseGilbertElliott("1%,200%").status(), "between 0% and 100%");
}

TEST(ParseMarkov, NetemDefaultsAndTheChainsChecks) {
  auto m = ParseMarkov("1%");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kind, LossModel::Kind::kMarkov4);
  EXPECT_DOUBLE_EQ(m->p13, 0.01);
  EXPECT_DOUBLE_EQ(m->p31, 0.99);  // 1 - p13
  EXPECT_EQ(m->p32, 0.0);
  EXPECT_EQ(m->p23, 1.0);
  EXPECT_EQ(m->p14, 0.0);
  auto full = ParseMarkov(" 1% , 0.3, 10%,40%, 1000ppm");
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_DOUBLE_EQ(full->p31, 0.3);
  EXPECT_DOUBLE_EQ(full->p32, 0.1);
  EXPECT_DOUBLE_EQ(full->p23, 0.4);
  EXPECT_DOUBLE_EQ(full->p14, 0.001);
  ExpectInvalid(ParseMarkov("1%,2%,3%,4%,5%,6%").status(), "p13[,p31[,p32[,p23[,p14]]]]");
  ExpectInvalid(ParseMarkov("101%").status(), "invalid Markov model '101%': invalid rate '101%'");
  ExpectInvalid(ParseMarkov("60%,30%,0%,100%,50%").status(), "p13 + p14 must not exceed 100%");
  ExpectInvalid(ParseMarkov("1%,60%,50%").status(), "p31 + p32 must not exceed 100%");
  ExpectInvalid(ParseMarkov("1%,0%").status(), "the burst state must be left");
  ExpectInvalid(ParseMarkov("100%").status(), "p13 > 0 needs p31 > 0");  // p31 = 1 - p13 = 0
  ExpectInvalid(ParseMarkov("1%,50%,10%,0%").status(), "p32 > 0 needs p23 > 0");
  EXPECT_TRUE(ParseMarkov("60%,100%,0%,100%,40%").ok());  // the sums at 100 % exactly
  EXPECT_TRUE(ParseMarkov("1%,70%,30%").ok());
  EXPECT_TRUE(ParseMarkov("0%,0%,0%,0%,5%").ok());  // state 3 never entered: p31 free
}

TEST(ParsePolice, TcsUnitsFractionsAndBounds) {
  auto rate = [](const std::string& text) { return ParsePolice(text + ",1k")->rate_bps; };
  auto burst = [](const std::string& text) { return ParsePolice("1mbit," + text)->burst_bytes; };
  auto p = ParsePolice("50mbit,64kib");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->kind, LossModel::Kind::kPolice);
  EXPECT_EQ(p->rate_bps, 50000000u);
  EXPECT_EQ(p->burst_bytes, 65536u);
  EXPECT_EQ(ParsePolice(" 50 MBIT / 64 KiB ")->rate_bps, 50000000u);
  EXPECT_EQ(rate("8bit"), 8u);
  EXPECT_EQ(rate("2kbit"), 2000u);
  EXPECT_EQ(rate("1.5mbit"), 1500000u);
  EXPECT_EQ(rate("3gbit"), 3000000000u);
  EXPECT_EQ(rate("0.1tbit"), 100000000000u);
  EXPECT_EQ(rate("100bps"), 800u);  // bytes per second, as tc reads them
  EXPECT_EQ(rate("2kbps"), 16000u);
  EXPECT_EQ(rate("2MBPS"), 16000000u);
  EXPECT_EQ(rate("12.5gbps"), 100000000000u);
  EXPECT_EQ(rate("1e3kbit"), 1000000u);
  EXPECT_EQ(rate("10.5bit"), 10u);  // rounded half to even
  EXPECT_EQ(rate("11.5bit"), 12u);
  EXPECT_EQ(burst("1500"), 1500u);  // a bare number is bytes
  EXPECT_EQ(burst("1500b"), 1500u);
  EXPECT_EQ(burst("2k"), 2048u);
  EXPECT_EQ(burst("2kb"), 2048u);
  EXPECT_EQ(burst("1.5m"), 1572864u);
  EXPECT_EQ(burst("1MiB"), 1048576u);
  EXPECT_EQ(burst("1g"), 1073741824u);
  EXPECT_EQ(burst("1gb"), 1073741824u);
  EXPECT_EQ(burst("2.5"), 2u);
  ExpectInvalid(ParsePolice("50000,64kib").status(), "the rate '50000' needs a unit: bit, kbit");
  ExpectInvalid(ParsePolice("50mb,64kib").status(), "unknown unit 'mb': expected bit, kbit");
  ExpectInvalid(ParsePolice("50mbit,64kbit").status(), "unknown unit 'kbit': expected b, k");
  ExpectInvalid(ParsePolice("-5mbit,1k").status(), "'-5mbit' is not a number with a unit");
  ExpectInvalid(ParsePolice("50mbit").status(),
                "invalid police model '50mbit': expected RATE,BURST");
  ExpectInvalid(ParsePolice("1mbit,1k,1").status(), "expected RATE,BURST");
  ExpectInvalid(ParsePolice("7bit,1k").status(), "rate must lie between 8bit and 100gbit");
  ExpectInvalid(ParsePolice("100000000001bit,1k").status(), "between 8bit and 100gbit");
  ExpectInvalid(ParsePolice("99999999999999999999999tbit,1k").status(), "between 8bit and 100gbit");
  ExpectInvalid(ParsePolice("1mbit,0").status(), "burst must lie between 1b and 1gib");
  ExpectInvalid(ParsePolice("1mbit,1073741825").status(), "between 1b and 1gib");
  ExpectInvalid(ParsePolice(std::string(300, '1') + "bit,1").status(), "expected RATE,BURST");
  EXPECT_LT(ParsePolice(std::string(300, '1') + "bit,1").status().message().size(), 200u);
}

TEST(ParsePolice, TextReadsBack) {
  EXPECT_EQ(BitRateText(50000000), "50mbit");
  EXPECT_EQ(BitRateText(1500), "1500bit");
  EXPECT_EQ(BitRateText(100000000000), "100gbit");
  EXPECT_EQ(BitRateText(2000000000000), "2tbit");
  EXPECT_EQ(ByteSizeText(65536), "64kib");
  EXPECT_EQ(ByteSizeText(1500), "1500b");
  EXPECT_EQ(ByteSizeText(kMaxPoliceBurst), "1gib");
  EXPECT_EQ(ByteSizeText(3 << 20), "3mib");
  for (uint64_t bps : {uint64_t{8}, uint64_t{999}, uint64_t{1000}, uint64_t{1234567},
                       uint64_t{12500000000}, kMaxPoliceBps})
    for (uint64_t bytes : {uint64_t{1}, uint64_t{1023}, uint64_t{1024}, uint64_t{1536},
                           uint64_t{5} << 20, kMaxPoliceBurst}) {
      auto p = ParsePolice(BitRateText(bps) + "," + ByteSizeText(bytes));
      ASSERT_TRUE(p.ok()) << p.status().message();
      EXPECT_EQ(p->rate_bps, bps);
      EXPECT_EQ(p->burst_bytes, bytes);
      EXPECT_FALSE(p->police_per_flow);
      for (bool per_flow : {false, true}) {
        std::string text = PoliceText(bps, bytes, per_flow);
        auto q = ParsePolice(text);
        ASSERT_TRUE(q.ok()) << text << ": " << q.status().message();
        EXPECT_EQ(q->rate_bps, bps);
        EXPECT_EQ(q->burst_bytes, bytes);
        EXPECT_EQ(q->police_per_flow, per_flow) << text;
        EXPECT_EQ(PoliceText(*q), text);
      }
    }
  EXPECT_EQ(PoliceText(50000000, 65536, false), "50mbit,64kib");
  EXPECT_EQ(PoliceText(50000000, 65536, true), "50mbit,64kib,flow");
}

// RATE,BURST[,flow|rule]: the scope in any case, rule the default.
TEST(ParsePolice, PerFlowOrPerRule) {
  for (const char* text : {"50mbit,64kib,flow", "50mbit/64kib/FLOW", " 50mbit , 64kib , Flow "}) {
    auto p = ParsePolice(text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status().message();
    EXPECT_TRUE(p->police_per_flow) << text;
    EXPECT_EQ(p->rate_bps, 50000000u);
    EXPECT_EQ(p->burst_bytes, 65536u);
  }
  for (const char* text : {"50mbit,64kib", "50mbit,64kib,rule", "50mbit/64kib/RULE"}) {
    auto p = ParsePolice(text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status().message();
    EXPECT_FALSE(p->police_per_flow) << text;
  }
  ExpectInvalid(ParsePolice("50mbit,64kib,flows").status(),
                "invalid police model '50mbit,64kib,flows': expected RATE,BURST[,flow|rule]: the "
                "third part 'flows' must be flow (a bucket per flow) or rule (one, the default)");
  ExpectInvalid(ParsePolice("50mbit,64kib,").status(), "the third part '' must be flow");
  ExpectInvalid(ParsePolice("50mbit,64kib,flow,flow").status(),
                "expected RATE,BURST[,flow|rule], e.g. 50mbit,64kib or 50mbit,64kib,flow");
  ExpectInvalid(ParsePolice("50mbit,flow").status(), "the burst 'flow' is not a number");
  ExpectInvalid(ParsePolice("7bit,1k,flow").status(), "rate must lie between 8bit and 100gbit");
  ExpectInvalid(ParsePolice("1mbit,0,flow").status(), "burst must lie between 1b and 1gib");
  // A long third part is quoted through Shown() (64 bytes at most).
  auto long_scope = ParsePolice("1mbit,1k," + std::string(200, 'x')).status();
  ExpectInvalid(long_scope, "must be flow");
  EXPECT_EQ(long_scope.message().find(std::string(65, 'x')), std::string::npos);
}

TEST(Validate, MarkovAndPolice) {
  RuleSpec s = Base();
  s.model = *ParseMarkov("1%,30%,10%,40%,0.1%");
  s.seed = 7;  // a Markov chain draws: seeded like GE
  s.schedule.active = std::chrono::milliseconds(200);
  s.schedule.dormant = std::chrono::milliseconds(800);
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.model.p23 = std::nan("");
  ExpectInvalid(Validate(s), "Markov model: Markov parameters must lie between 0% and 100%");
  s.model.p23 = 0;
  ExpectInvalid(Validate(s), "p32 > 0 needs p23 > 0");
  s.model.p23 = 0.4;
  s.model.p31 = 0;
  ExpectInvalid(Validate(s), "the burst state must be left");
  s.model.p31 = 0.95;
  ExpectInvalid(Validate(s), "p31 + p32 must not exceed 100%");
  s.model.p31 = 0.3;
  s.model.p14 = 0.995;
  ExpectInvalid(Validate(s), "p13 + p14 must not exceed 100%");
  s.model.p14 = -0.1;
  ExpectInvalid(Validate(s), "between 0% and 100%");

  s = Base();
  s.model = *ParsePolice("50mbit,64kib");
  s.action = Action::kEcn;
  s.schedule.active = std::chrono::milliseconds(200);
  s.schedule.dormant = std::chrono::milliseconds(800);
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.seed = 1;
  ExpectInvalid(Validate(s), "seed: a policer draws nothing");
  s.seed.reset();
  s.model.rate_bps = kMinPoliceBps - 1;
  ExpectInvalid(Validate(s), "a policer's rate must lie between 8bit and 100gbit");
  s.model.rate_bps = kMaxPoliceBps + 1;
  ExpectInvalid(Validate(s), "a policer's rate");
  s.model.rate_bps = kMaxPoliceBps;
  s.model.burst_bytes = 0;
  ExpectInvalid(Validate(s), "a policer's burst must lie between 1b and 1gib");
  s.model.burst_bytes = kMaxPoliceBurst + 1;
  ExpectInvalid(Validate(s), "a policer's burst");
  s.model.burst_bytes = kMaxPoliceBurst;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.guard.misbehaves = true;  // no binomial interval for a policer
  ExpectInvalid(Validate(s), "misbehaves judges a Bernoulli rate");

  // Per flow: the same bounds and refusals.
  s = Base();
  s.model = *ParsePolice("50mbit,64kib,flow");
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.seed = 1;
  ExpectInvalid(Validate(s), "seed: a policer draws nothing");
  s.seed.reset();
  s.model.rate_bps = kMinPoliceBps - 1;
  ExpectInvalid(Validate(s), "a policer's rate must lie between 8bit and 100gbit");
  s.model.rate_bps = kMaxPoliceBps;
  s.model.burst_bytes = kMaxPoliceBurst + 1;
  ExpectInvalid(Validate(s), "a policer's burst must lie between 1b and 1gib");
  s.model.burst_bytes = kMaxPoliceBurst;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
}

TEST(Validate, ActionNeedsTc) {
  RuleSpec s = Base();
  s.action = Action::kCorrupt;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.hook = Hook::kXdp;
  ExpectInvalid(Validate(s), "action corrupt changes or copies the packet, which XDP cannot");
  s = Base();
  s.cgroup = "/sys/fs/cgroup/x";
  s.action = Action::kEcn;
  ExpectInvalid(Validate(s), "action ecn needs tc, and a cgroup target's ingress");
  s.dir = Direction::kBoth;
  ExpectInvalid(Validate(s), "a cgroup target's ingress");
  s.dir = Direction::kEgress;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
  s.action = Action::kDrop;
  s.dir = Direction::kIngress;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();
}

TEST(Proto, MarkovPoliceAndActionBothWays) {
  RuleSpec s = Base();
  s.model = *ParseMarkov("1%,30%,10%,40%,0.1%");
  s.seed = 3;
  s.action = Action::kCorruptPayload;
  v1::RuleSpec pb;
  SpecToProto(s, &pb);
  EXPECT_EQ(pb.loss().model_case(), v1::LossModel::kMarkov);
  EXPECT_EQ(pb.action(), v1::ACTION_CORRUPT_PAYLOAD);
  RuleSpec back;
  ASSERT_TRUE(SpecFromProto(pb, &back).ok());
  EXPECT_EQ(back.model.kind, LossModel::Kind::kMarkov4);
  EXPECT_EQ(back.model.p13, 0.01);
  EXPECT_EQ(back.model.p31, 0.3);
  EXPECT_EQ(back.model.p32, 0.1);
  EXPECT_EQ(back.model.p23, 0.4);
  EXPECT_EQ(back.model.p14, 0.001);
  EXPECT_EQ(back.seed, std::optional<uint64_t>(3));
  EXPECT_EQ(back.action, Action::kCorruptPayload);
  pb.mutable_loss()->mutable_markov()->set_p32(1.5);
  ExpectInvalid(SpecFromProto(pb, &back), "loss.markov: Markov parameters must lie between");
  pb.mutable_loss()->mutable_markov()->set_p32(0.1);
  pb.mutable_loss()->mutable_markov()->set_p31(0);
  ExpectInvalid(SpecFromProto(pb, &back), "loss.markov: the burst state must be left");

  s = Base();
  s.model = *ParsePolice("50mbit,64kib");
  s.action = Action::kEcnPass;
  pb.Clear();
  SpecToProto(s, &pb);
  EXPECT_EQ(pb.loss().police().rate_bps(), 50000000u);
  EXPECT_EQ(pb.loss().police().burst_bytes(), 65536u);
  EXPECT_FALSE(pb.loss().has_seed());
  ASSERT_TRUE(SpecFromProto(pb, &back).ok());
  EXPECT_EQ(back.model.kind, LossModel::Kind::kPolice);
  EXPECT_EQ(back.model.rate_bps, 50000000u);
  EXPECT_EQ(back.model.burst_bytes, 65536u);
  EXPECT_EQ(back.action, Action::kEcnPass);
  pb.mutable_loss()->mutable_police()->set_rate_bps(kMaxPoliceBps + 1);
  ExpectInvalid(SpecFromProto(pb, &back), "loss.police: a policer's rate must lie between");
  pb.mutable_loss()->mutable_police()->set_rate_bps(kMaxPoliceBps);
  pb.mutable_loss()->mutable_police()->set_burst_bytes(0);
  ExpectInvalid(SpecFromProto(pb, &back), "loss.police: a policer's burst must lie between");
  EXPECT_FALSE(pb.loss().police().per_flow());

  // Per flow, both ways (and the same bounds).
  s = Base();
  s.model = *ParsePolice("20mbit,32kib,flow");
  pb.Clear();
  SpecToProto(s, &pb);
  EXPECT_EQ(pb.loss().police().rate_bps(), 20000000u);
  EXPECT_EQ(pb.loss().police().burst_bytes(), 32768u);
  EXPECT_TRUE(pb.loss().police().per_flow());
  ASSERT_TRUE(SpecFromProto(pb, &back).ok());
  EXPECT_EQ(back.model.kind, LossModel::Kind::kPolice);
  EXPECT_EQ(back.model.rate_bps, 20000000u);
  EXPECT_EQ(back.model.burst_bytes, 32768u);
  EXPECT_TRUE(back.model.police_per_flow);
  EXPECT_EQ(PoliceText(back.model), "20mbit,32kib,flow");
  pb.mutable_loss()->mutable_police()->set_per_flow(false);
  ASSERT_TRUE(SpecFromProto(pb, &back).ok());
  EXPECT_FALSE(back.model.police_per_flow);
  pb.mutable_loss()->mutable_police()->set_per_flow(true);
  pb.mutable_loss()->mutable_police()->set_rate_bps(kMinPoliceBps - 1);
  ExpectInvalid(SpecFromProto(pb, &back), "loss.police: a policer's rate must lie between");
}

TEST(Validate, AcceptsTypicalRules) {
  EXPECT_TRUE(Validate(Base()).ok());
  RuleSpec s = Base();
  s.dport = *ParsePortRange("8080");
  s.l4proto = IPPROTO_TCP;
  s.dst = *ParseCidr("10.0.0.0/8");
  s.tcp_flags_mask = 0x12;
  s.tcp_flags_value = 0x02;
  s.dir = Direction::kEgress;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  RuleSpec cg;
  cg.cgroup = "/sys/fs/cgroup/unified/app";
  cg.model.p = 0.5;
  EXPECT_TRUE(Validate(cg).ok());
}

TEST(Validate, ServiceTargets) {
  RuleSpec s;
  s.model.p = 0.5;
  s.service.unit = "nginx";
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  EXPECT_TRUE(NamesCgroup(s));
  s.hook = Hook::kCgroup;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  s.service = {};
  s.service.pod = "8d1e";
  s.service.container = "3f2a";  // one container of the pod
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  s.service.pid = 42;
  ExpectInvalid(Validate(s), "name one cgroup target");
  s.service = {};
  s.service.pid = 42;
  s.cgroup = "/x";
  ExpectInvalid(Validate(s), "name one cgroup target");
  s.cgroup.clear();
  s.iface = "eth0";
  s.hook = Hook::kXdp;
  ExpectInvalid(Validate(s), "XDP runs before any socket exists");
  s = RuleSpec();
  s.model.p = 0.5;
  s.service.unit = std::string(300, 'u');
  ExpectInvalid(Validate(s), "at most");
  EXPECT_LT(Validate(s).message().size(), 300u + 100u);
  EXPECT_EQ(ServiceTarget{}.Describe(), "");
  ServiceTarget t;
  t.pod = "p";
  t.container = "c";
  EXPECT_EQ(t.Describe(), "pod p, container c");
}

TEST(Validate, RefusesControlCharactersInNamesAndLabels) {
  using namespace std::string_literals;
  auto refused = [](RuleSpec s, const std::string& words) {
    Status st = Validate(s);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\0'), std::string::npos) << "the message quotes a raw NUL";
  };
  RuleSpec s = Base();
  s.iface = "v0\0 decoy"s;
  refused(s, "interface name holds a control character at byte 2: 'v0\\x00 decoy'");
  s = Base();
  s.cgroup = "x\0/../../.."s;
  refused(s, "cgroup path holds a control character at byte 1");
  s = Base();
  s.iface.clear();
  s.service.unit = "web\n.service";
  refused(s, "unit name");
  s = Base();
  s.labels["team"] = "a\x7f";
  refused(s, "label 'team' holds");
  s = Base();
  s.labels["t\te"] = "x";
  refused(s, "label key");
  s = Base();
  s.labels["team"] = "caf\xc3\xa9 ok";  // UTF-8 is not a control character
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).ToString();
}

TEST(Validate, EachBadInputHasAClearError) {
  RuleSpec s = Base();
  s.iface.clear();
  ExpectInvalid(Validate(s), "needs a target");

  s = Base();
  s.hook = Hook::kXdp;
  s.dir = Direction::kEgress;
  ExpectInvalid(Validate(s), "XDP sees ingress only");

  s = Base();
  s.hook = Hook::kXdp;
  s.cgroup = "x";
  ExpectInvalid(Validate(s), "cgroup match needs hook tc or cgroup");

  s = Base();
  s.iface.clear();
  s.cgroup = "x";
  s.hook = Hook::kTc;
  ExpectInvalid(Validate(s), "hook 'tc' needs an interface");

  s = Base();
  s.src = *ParseCidr("10.0.0.0/8");
  s.dst = *ParseCidr("fd00::/8");
  ExpectInvalid(Validate(s), "disagree on IPv4 vs IPv6");

  s = Base();
  s.family = 6;
  s.src = *ParseCidr("10.0.0.0/8");
  ExpectInvalid(Validate(s), "disagree");

  s = Base();
  s.l4proto = IPPROTO_ICMP;
  s.dport = *ParsePortRange("80");
  ExpectInvalid(Validate(s), "ports need protocol tcp or udp");

  s = Base();
  s.l4proto = IPPROTO_ICMPV6;
  s.dst = *ParseCidr("10.0.0.0/8");
  ExpectInvalid(Validate(s), "for IPv4 addresses use icmp");

  s = Base();
  s.l4proto = IPPROTO_ICMP;
  s.family = 6;
  ExpectInvalid(Validate(s), "for IPv6 addresses use icmpv6");

  s = Base();
  s.l4proto = IPPROTO_UDP;
  s.tcp_flags_mask = 0x02;
  s.tcp_flags_value = 0x02;
  ExpectInvalid(Validate(s), "TCP flags need protocol tcp");

  s = Base();
  s.model.p = 1.5;
  ExpectInvalid(Validate(s), "rate must lie between 0% and 100%");

  s = Base();
  s.model.kind = LossModel::Kind::kEveryNth;
  s.model.n = 0;
  ExpectInvalid(Validate(s), "every-Nth needs N >= 1");

  s = Base();
  s.model.kind = LossModel::Kind::kFirstK;
  s.model.n = 0;
  ExpectInvalid(Validate(s), "first-K needs K >= 1");

  s = Base();
  s.model.kind = LossModel::Kind::kGilbertElliott;
  s.model.r = -0.1;
  ExpectInvalid(Validate(s), "Gilbert-Elliott parameters");

  s = Base();
  s.priority = kMaxPriority + 1;
  ExpectInvalid(Validate(s), "priority must lie between");

  s = Base();
  s.iface.clear();
  s.per_segment = true;
  s.cgroup = "x";  // a cgroup target's egress devices can be made single-segment...
  ExpectInvalid(Validate(s), "is for its egress");  // ...but not its ingress
  s.dir = Direction::kEgress;
  EXPECT_TRUE(Validate(s).ok()) << Validate(s).message();

  s = Base();
  s.payload = 7;
  ExpectInvalid(Validate(s), "payload must be");
}

TEST(Encode, MatchFields) {
  RuleSpec s = Base();
  s.src = *ParseCidr("10.1.0.0/16");
  s.dst = *ParseCidr("192.0.2.9");
  s.sport = *ParsePortRange("1000-2000");
  s.dport = *ParsePortRange("80");
  s.l4proto = IPPROTO_TCP;
  s.dir = Direction::kBoth;
  s.priority = 7;
  s.seed = 42;
  struct loss_rule r = Encode(s, 3, 99, 2, 12345, 5);
  uint32_t want_src = htonl(0x0a010000), want_mask = htonl(0xffff0000);
  EXPECT_EQ(r.m.src_addr[0], want_src);
  EXPECT_EQ(r.m.src_mask[0], want_mask);
  EXPECT_EQ(r.m.src_mask[1], 0u);
  EXPECT_EQ(r.m.dst_addr[0], htonl(0xc0000209));
  EXPECT_EQ(r.m.dst_mask[0], 0xffffffffu);
  EXPECT_EQ(r.m.sport_lo, 1000);
  EXPECT_EQ(r.m.sport_hi, 2000);
  EXPECT_EQ(r.m.dport_lo, 80);
  EXPECT_EQ(r.m.dport_hi, 80);
  EXPECT_EQ(r.m.family, 4);
  EXPECT_EQ(r.m.l4proto, IPPROTO_TCP);
  EXPECT_EQ(r.m.dir_mask, LOSS_DIR_INGRESS | LOSS_DIR_EGRESS);
  EXPECT_EQ(r.m.ifindex, 3u);
  EXPECT_EQ(r.m.cgroup_id, 99u);
  EXPECT_EQ(r.m.cgroup_level, 2);
  EXPECT_EQ(r.priority, 7u);
  EXPECT_EQ(r.flags, LOSS_RULE_ACTIVE | LOSS_RULE_HAS_PORTS | LOSS_RULE_SEEDED);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.expires_ns, 12345u);
  EXPECT_EQ(r.generation, 5u);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_BERNOULLI));
  EXPECT_EQ(r.p, ProbabilityToThreshold(0.01));
}

TEST(Encode, IPv6PrefixMaskAcrossWords) {
  RuleSpec s = Base();
  auto c = ParseCidr("fd00:1:2:3:4000::/68");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  s.dst = *c;
  struct loss_rule r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.m.family, 6);
  EXPECT_EQ(r.m.dst_mask[0], 0xffffffffu);
  EXPECT_EQ(r.m.dst_mask[1], 0xffffffffu);
  EXPECT_EQ(r.m.dst_mask[2], htonl(0xf0000000));
  EXPECT_EQ(r.m.dst_mask[3], 0u);
  uint8_t want[16] = {0xfd, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x03, 0x40, 0x00};
  EXPECT_EQ(std::memcmp(r.m.dst_addr, want, 16), 0);
  EXPECT_EQ(r.flags & LOSS_RULE_HAS_PORTS, 0u);
}

TEST(Encode, Models) {
  RuleSpec s = Base();
  s.model = *ParseGilbertElliott("1%,20%,90%,0.1%");
  struct loss_rule r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_GE));
  EXPECT_EQ(r.p, ProbabilityToThreshold(0.01));
  EXPECT_EQ(r.r, ProbabilityToThreshold(0.2));
  EXPECT_EQ(r.bad_loss, ProbabilityToThreshold(0.9));
  EXPECT_EQ(r.good_loss, ProbabilityToThreshold(0.001));
  s.model = LossModel{};
  s.model.kind = LossModel::Kind::kEveryNth;
  s.model.n = 10;
  r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_NTH));
  EXPECT_EQ(r.n, 10u);
  s.model.kind = LossModel::Kind::kFirstK;
  s.model.n = 3;
  r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_FIRST));
  EXPECT_EQ(r.n, 3u);
  EXPECT_EQ(r.flags & LOSS_RULE_SEEDED, 0u);
}

// A policer per rule: tokens in 1e-9 bits (loss_policers). Per flow: GCRA, its
// depth tau = burst * 8e9 * 16 / rate in 1/16 ns (rounded down, capped) in
// good_loss, which the per-rule policer leaves 0.
TEST(Encode, Policers) {
  RuleSpec s = Base();
  s.model = *ParsePolice("50mbit,64kib");
  struct loss_rule r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_POLICE));
  EXPECT_EQ(r.p, 50000000u);
  EXPECT_EQ(r.r, 65536u * 8000000000u);
  EXPECT_EQ(r.bad_loss, 10485760u);  // 64 KiB at 50 Mbit/s: 10.49 ms from empty to full
  EXPECT_EQ(r.good_loss, 0u);
  s.model = *ParsePolice("20mbit,32kib,flow");
  r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.model, uint32_t(LOSS_MODEL_POLICE_FLOW));
  EXPECT_EQ(r.p, 20000000u);
  EXPECT_EQ(r.good_loss, 32768u * 6400u);  // 13.1 ms, 6400/16 ns a byte
  EXPECT_EQ(r.r, 0u);
  EXPECT_EQ(r.bad_loss, 0u);
  EXPECT_EQ(r.flags & LOSS_RULE_SEEDED, 0u);
  s.model = *ParsePolice("3mbit,1000b,flow");  // 42666666.67: rounded down
  EXPECT_EQ(Encode(s, 0, 0, 0, 0, 1).good_loss, 42666666u);
  s.model = *ParsePolice("100gbit,1b,flow");  // 1.28
  EXPECT_EQ(Encode(s, 0, 0, 0, 0, 1).good_loss, 1u);
  s.model = *ParsePolice("8bit,1gib,flow");  // 2^30 * 1.6e10 > 2^62: capped
  EXPECT_EQ(Encode(s, 0, 0, 0, 0, 1).good_loss, LOSS_POLICE_TAU_MAX);
  s.model = *ParsePolice("100gbit,1gib,flow");  // no overflow on the way
  EXPECT_EQ(Encode(s, 0, 0, 0, 0, 1).good_loss, (uint64_t{1} << 30) * 128 / 100);
}

}  // namespace
}  // namespace lossd

namespace lossd {
namespace {

// The 4-state chain's loss: its transition matrix iterated to stationarity, the
// share of packets whose transition enters state 3 or 4.
TEST(ModelMeanLoss, Markov4IsItsChainsStationaryLoss) {
  auto iterated = [](const LossModel& m) {
    const double p[4][4] = {{1 - m.p13 - m.p14, 0, m.p13, m.p14},
                            {0, 1 - m.p23, m.p23, 0},
                            {m.p31, m.p32, 1 - m.p31 - m.p32, 0},
                            {1, 0, 0, 0}};
    double pi[4] = {1, 0, 0, 0};
    for (int step = 0; step < 200000; step++) {
      double next[4] = {0, 0, 0, 0};
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) next[j] += pi[i] * p[i][j];
      std::copy(next, next + 4, pi);
    }
    double lost = 0;  // P(the next transition enters 3 or 4)
    for (int i = 0; i < 4; i++) lost += pi[i] * (p[i][2] + p[i][3]);
    return lost;
  };
  for (const char* text : {"1%,30%,10%,40%,0.1%", "1%", "5%,20%", "0.1%,50%,30%,10%",
                           "0%,0%,0%,0%,5%", "0%"}) {
    SCOPED_TRACE(text);
    LossModel m = *ParseMarkov(text);
    EXPECT_NEAR(ModelMeanLoss(m), iterated(m), 1e-12);
    EXPECT_FALSE(ModelIsDeterministic(m));
    EXPECT_EQ(ModelExpectedDrops(m, 1000), 0u);
  }
  LossModel m = *ParseMarkov("1%,30%,10%,40%,0.1%");
  EXPECT_NEAR(ModelMeanLoss(m), 0.0329283887468, 1e-12);
  EXPECT_NEAR(ModelMeanLoss(*ParseMarkov("5%")), 0.05, 1e-15);  // p31 = 1 - p13: Bernoulli
  m.p31 = 0;  // refused by CheckMarkov: no rate, never a division by zero
  EXPECT_EQ(ModelMeanLoss(m), -1);
}

TEST(ModelMeanLoss, APolicerHasNoRateOfItsOwn) {
  LossModel m = *ParsePolice("50mbit,64kib");
  EXPECT_EQ(ModelMeanLoss(m), -1);
  EXPECT_FALSE(ModelIsDeterministic(m));
  EXPECT_EQ(ModelExpectedDrops(m, 1000), 0u);
}

// Issue 24: first-k and every-n-th have an expected count per flow, not a rate.
TEST(ModelExpectation, DeterministicModelsCountPerFlow) {
  LossModel nth;
  nth.kind = LossModel::Kind::kEveryNth;
  nth.n = 4;
  LossModel first;
  first.kind = LossModel::Kind::kFirstK;
  first.n = 5;
  LossModel bern;
  bern.p = 0.5;
  EXPECT_TRUE(ModelIsDeterministic(nth));
  EXPECT_TRUE(ModelIsDeterministic(first));
  EXPECT_FALSE(ModelIsDeterministic(bern));
  EXPECT_EQ(ModelExpectedDrops(nth, 0), 0u);
  EXPECT_EQ(ModelExpectedDrops(nth, 3), 0u);
  EXPECT_EQ(ModelExpectedDrops(nth, 4), 1u);
  EXPECT_EQ(ModelExpectedDrops(nth, 1003), 250u);
  EXPECT_EQ(ModelExpectedDrops(first, 3), 3u);
  EXPECT_EQ(ModelExpectedDrops(first, 5), 5u);
  EXPECT_EQ(ModelExpectedDrops(first, 1000), 5u);
  EXPECT_EQ(ModelExpectedDrops(bern, 1000), 0u);
  nth.n = 0;  // refused by Validate; never a division by zero
  EXPECT_EQ(ModelExpectedDrops(nth, 10), 0u);
}

}  // namespace
}  // namespace lossd

namespace lossd {
namespace {

TEST(UnmatchedHint, NamesTheLikelyFixForEachTarget) {
  using std::chrono::seconds;
  RuleSpec in;
  in.iface = "eth0";
  std::string h = UnmatchedHint(in, "", seconds(12));
  EXPECT_EQ(h.rfind("matched no packet in 12s: it sees what arrives on eth0; ", 0), 0u) << h;
  EXPECT_NE(h.find("--dir egress"), std::string::npos) << h;
  EXPECT_EQ(h.find("port"), std::string::npos) << "no port in the match: " << h;
  RuleSpec out = in;
  out.dir = Direction::kEgress;
  out.dport = {8080, 8080};
  h = UnmatchedHint(out, "", seconds(3));
  EXPECT_NE(h.find("leaves by eth0"), std::string::npos) << h;
  EXPECT_NE(h.find("--dir ingress"), std::string::npos) << h;
  EXPECT_NE(h.find("--sport"), std::string::npos) << "egress: a server's port is the source: " << h;
  RuleSpec cg;
  cg.cgroup = "/sys/fs/cgroup/system.slice/web.service";
  cg.hook = Hook::kCgroup;
  h = UnmatchedHint(cg, "/system.slice/web.service", seconds(60));
  EXPECT_NE(h.find("sockets in /system.slice/web.service receive"), std::string::npos) << h;
  EXPECT_NE(h.find("--dir egress for what they send"), std::string::npos) << h;
}

}  // namespace
}  // namespace lossd

namespace lossd {
namespace {

TEST(ParseDecimal, DigitsOnlyWithinBoundsWithoutOverflow) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseDecimal("0", 0, 10, &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseDecimal("18446744073709551615", 0, UINT64_MAX, &v));
  EXPECT_EQ(v, UINT64_MAX);
  v = 7;
  for (const char* bad : {"", "18446744073709551616", "99999999999999999999", "-1", "+1", " 1", "1 ",
                          "0x10", "1e3", "123456789012345678901"})
    EXPECT_FALSE(ParseDecimal(bad, 0, UINT64_MAX, &v)) << bad;
  EXPECT_EQ(v, 7u) << "untouched on failure";
  EXPECT_FALSE(ParseDecimal("11", 0, 10, &v));
  EXPECT_FALSE(ParseDecimal("4", 5, 10, &v));
  EXPECT_TRUE(ParseDecimal("0010", 5, 10, &v));
  EXPECT_EQ(v, 10u);
}

TEST(Schedule, ValidateBoundsEachPart) {
  using std::chrono::milliseconds;
  RuleSpec s = Base();
  s.schedule.active = milliseconds(200);
  s.schedule.dormant = milliseconds(800);
  s.schedule.cycles = 10;
  EXPECT_TRUE(Validate(s).ok());
  EXPECT_EQ(s.schedule.Span(), milliseconds(9200));  // ten windows, nine pauses
  EXPECT_EQ(s.schedule.Describe(), "pulse 200ms on / 800ms off x10");
  s.schedule.start_after = milliseconds(1500);
  EXPECT_EQ(s.schedule.Describe(), "start after 1500ms, pulse 200ms on / 800ms off x10");
  s.schedule.dormant = std::chrono::nanoseconds(0);
  ExpectInvalid(Validate(s), "dormant time must lie between 1ms and 1d (got 0s)");
  s.schedule.dormant = milliseconds(800);
  s.schedule.active = std::chrono::microseconds(999);
  ExpectInvalid(Validate(s), "active time must lie between 1ms and 1d (got 999us)");
  s.schedule = Schedule{};
  s.schedule.cycles = 3;
  ExpectInvalid(Validate(s), "give a pulse too");
  s.schedule.active = s.schedule.dormant = std::chrono::hours(24);
  s.schedule.cycles = kMaxPulseCycles;  // 5,479 years: past 30
  ExpectInvalid(Validate(s), "longer than");
  s.schedule = Schedule{};
  s.schedule.start_after = std::chrono::nanoseconds(-1);
  ExpectInvalid(Validate(s), "start_after");
}

TEST(Schedule, DurationTextReadsBack) {
  for (int64_t ns : {0LL, 1LL, 1500LL, 1000000LL, 1500000000LL, 120000000000LL, 86400000000000LL,
                     90061000000001LL}) {
    auto back = ParseDuration(DurationText(std::chrono::nanoseconds(ns)));
    ASSERT_TRUE(back.ok()) << DurationText(std::chrono::nanoseconds(ns));
    EXPECT_EQ(back->count(), ns);
  }
  EXPECT_EQ(DurationText(std::chrono::milliseconds(1500)), "1500ms");
  EXPECT_EQ(DurationText(std::chrono::minutes(2)), "2m");
}

TEST(Encode, ScheduleOnTheDataPlanesClock) {
  RuleSpec s = Base();
  struct loss_rule r = Encode(s, 0, 0, 0, 0, 1, 777);
  EXPECT_EQ(r.start_ns, 0u);  // no schedule: the data plane does not read the clock
  s.schedule.start_after = std::chrono::seconds(2);
  r = Encode(s, 0, 0, 0, 0, 1, 777);
  EXPECT_EQ(r.start_ns, 777u);
  EXPECT_EQ(r.on_ns, 0u);
  s.schedule.active = std::chrono::milliseconds(200);
  s.schedule.dormant = std::chrono::milliseconds(800);
  r = Encode(s, 0, 0, 0, 0, 1, 777);
  EXPECT_EQ(r.start_ns, 777u);
  EXPECT_EQ(r.on_ns, 200000000u);
  EXPECT_EQ(r.period_ns, 1000000000u);
}

TEST(Guard, ValidateTextAndDescribe) {
  using std::chrono::milliseconds;
  RuleSpec s = Base();
  s.guard.stall = milliseconds(500);
  EXPECT_TRUE(Validate(s).ok());
  EXPECT_EQ(s.guard.Text(), "stall>500ms");
  EXPECT_EQ(s.guard.Describe(), "stop on a stall > 500ms");
  s.guard.rtos = 5;
  s.guard.rtos_window = std::chrono::seconds(2);
  EXPECT_TRUE(Validate(s).ok());
  EXPECT_EQ(s.guard.Text(), "stall>500ms,rtos>5/2s");
  EXPECT_EQ(s.guard.Describe(), "stop on a stall > 500ms or > 5 RTOs in 2s");
  // What Text writes, ParseGuard reads back.
  Guard back;
  ASSERT_TRUE(ParseGuard(s.guard.Text(), &back).ok());
  EXPECT_TRUE(back == s.guard);
  s.guard.rtos = kMaxGuardRtos + 1;
  ExpectInvalid(Validate(s), "guard: a guard's RTO count must lie between 0 and 63");
  s.guard.rtos = 5;
  s.guard.rtos_window = std::chrono::hours(2);
  ExpectInvalid(Validate(s), "RTO window must lie between 1ms and 1h (got 2h)");
  s.guard = Guard{};
  s.guard.rtos = 3;  // a count without its window (the API's zero window)
  ExpectInvalid(Validate(s), "with its window");
  s.guard = Guard{};
  EXPECT_EQ(s.guard.Text(), "");
  EXPECT_EQ(s.guard.Describe(), "");
  EXPECT_FALSE(ParseGuard("", &back).ok());
}

TEST(Encode, GuardFlagAndEntry) {
  RuleSpec s = Base();
  struct loss_rule r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_EQ(r.flags & LOSS_RULE_GUARDED, 0u);  // no guard: the data plane never looks one up
  s.guard.stall = std::chrono::milliseconds(300);
  r = Encode(s, 0, 0, 0, 0, 1);
  EXPECT_NE(r.flags & LOSS_RULE_GUARDED, 0u);
  r.id = 42;
  r.generation = 7;
  struct loss_guard g = EncodeGuard(s.guard, r);
  EXPECT_EQ(g.rule_id, 42u);
  EXPECT_EQ(g.generation, 7u);
  EXPECT_EQ(g.stall_ns, 300000000u);
  EXPECT_EQ(g.rtos_window_ns, 0u);
  EXPECT_EQ(g.stopped_ns, 0u);
}

}  // namespace
}  // namespace lossd
