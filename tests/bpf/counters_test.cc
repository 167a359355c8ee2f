// Verdicts at 0 % and 100 % and the counters they leave: per rule (matched
// and dropped packets, segments, bytes) and per hook (seen, passed, dropped).
#include "harness.h"

namespace lossd::bpftest {
namespace {

class Counting : public BpfTest {
 protected:
  // Sends pkt kRepeat times through p under a 0 % or 100 % rule on dport
  // 9000 and checks every count it leaves.
  void CountEvery(Prog p, const Packet& pkt, bool drop) {
    RuleSpec s = Rule(p, drop ? 1.0 : 0.0);
    s.dport = *ParsePortRange("9000");
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    const uint64_t kRepeat = 100000, bytes = kRepeat * pkt.bytes.size();
    RunOpts o;
    o.repeat = kRepeat;
    EXPECT_VERDICT(p, Run(p, pkt, o), drop ? DropVerdict(p) : PassVerdict(p));
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.matched_pkts, kRepeat);
    EXPECT_EQ(c.matched_segs, kRepeat);
    EXPECT_EQ(c.matched_bytes, bytes);
    EXPECT_EQ(c.dropped_pkts, drop ? kRepeat : 0u);
    EXPECT_EQ(c.dropped_segs, drop ? kRepeat : 0u);
    EXPECT_EQ(c.dropped_bytes, drop ? bytes : 0u);
    HookCounters h = Totals(p);
    EXPECT_EQ(h.seen, kRepeat);
    EXPECT_EQ(h.dropped, drop ? kRepeat : 0u);
    EXPECT_EQ(h.passed, drop ? 0u : kRepeat);
    EXPECT_EQ(h.unparsable, 0u);
    EXPECT_EQ(h.always_pass, 0u);
    EXPECT_EQ(h.lease_expired, 0u);
    Remove(id);
  }
};

TEST_F(Counting, HundredPercentDropsEveryPacketAndCountsIt) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    CountEvery(p, Build(Tcp4("10.0.0.1", "10.0.0.2", 40000, 9000, kAck, 1000)), true);
  }
}

TEST_F(Counting, ZeroPercentNeverDropsButCountsMatches) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    CountEvery(p, Build(Udp6("2001:db8::1", "2001:db8::2", 1, 9000, 200)), false);
  }
}

TEST_F(Counting, UnmatchedPacketsLeaveRuleCountersAlone) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec s = Rule(p, 1.0);
    s.dport = *ParsePortRange("9000");
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    RunOpts o;
    o.repeat = 1000;
    EXPECT_VERDICT(p, Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 9001), o), PassVerdict(p));
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.matched_pkts, 0u);
    EXPECT_EQ(c.matched_bytes, 0u);
    HookCounters h = Totals(p);
    EXPECT_EQ(h.seen, 1000u);
    EXPECT_EQ(h.passed, 1000u);
    Remove(id);
  }
}

// tc counts wire segments from skb->gso_segs: a GSO super-packet of 7
// segments is 1 packet and 7 segments.
TEST_F(Counting, TcCountsGsoSegments) {
  for (Prog p : {Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = Add(Rule(p, 1.0));
    ASSERT_NE(id, 0u);
    Packet pkt = Build(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 1400));
    RunOpts o;
    o.repeat = 1000;
    o.gso_segs = 7;
    EXPECT_VERDICT(p, Run(p, pkt, o), DropVerdict(p));
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.matched_pkts, 1000u);
    EXPECT_EQ(c.matched_segs, 7000u);
    EXPECT_EQ(c.dropped_segs, 7000u);
    EXPECT_EQ(c.dropped_bytes, 1000u * pkt.bytes.size());
    Remove(id);
  }
}

// A removed rule's slot is reused by the next rule, which starts from zero.
TEST_F(Counting, ReusedSlotStartsFromZero) {
  const Prog p = Prog::kXdp;
  uint32_t a = Add(Rule(p, 1.0));
  ASSERT_NE(a, 0u);
  RunOpts o;
  o.repeat = 500;
  Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 2), o);
  EXPECT_EQ(Counters(a).dropped_pkts, 500u);
  EXPECT_EQ(Remove(a).dropped_pkts, 500u);  // the final counters
  EXPECT_EQ(inj_->Counters(a).status().code(), Code::kNotFound);
  RuleSpec s = Rule(p, 0.0);
  uint32_t b = Add(s);
  ASSERT_NE(b, 0u);
  EXPECT_NE(a, b);
  RuleCounters c = Counters(b);
  EXPECT_EQ(c.matched_pkts, 0u);
  EXPECT_EQ(c.dropped_pkts, 0u);
  Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 2));
  EXPECT_EQ(Counters(b).matched_pkts, 1u);
  EXPECT_EQ(Counters(b).dropped_pkts, 0u);
}

// Hook totals add up: seen = passed + dropped, across a mix of frames.
TEST_F(Counting, HookTotalsAddUp) {
  for (Prog p : {Prog::kXdp, Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec s = Rule(p, 1.0);
    s.l4proto = 17;
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    Packet trunc = Build(Udp4("10.0.0.1", "10.0.0.2", 1, 2));
    trunc.bytes.resize(trunc.l4_off + 4);
    RunOpts o;
    o.repeat = 100;
    Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 2), o);        // 100 dropped
    Run(p, Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kSyn), o);  // 100 passed (no match)
    Run(p, Arp(), o);                                     // 100 always pass
    Run(p, Raw(0x88cc), o);                               // 100 not IP
    Run(p, trunc, o);                                     // 100 unparsable
    HookCounters h = Totals(p);
    EXPECT_EQ(h.seen, 500u);
    EXPECT_EQ(h.dropped, 100u);
    EXPECT_EQ(h.passed, 400u);
    EXPECT_EQ(h.seen, h.passed + h.dropped);
    EXPECT_EQ(h.always_pass, 100u);
    EXPECT_EQ(h.unparsable, 100u);
    EXPECT_EQ(Counters(id).matched_pkts, 100u);
    Remove(id);
  }
}

}  // namespace
}  // namespace lossd::bpftest
