// The drop log (bpf/loss_abi.h loss_drops): a rule's drop of a TCP skb
// carrying payload records the flow's sequence range, wire segments and the
// rule; nothing else is recorded; each flow keeps its last LOSS_DROP_RANGES.
#include <arpa/inet.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "harness.h"

namespace lossd::bpftest {
namespace {

class DropLog : public BpfTest {
 protected:
  // The log of the flow src:sport -> dst:dport (as on the wire).
  FlowDrops Drops(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
    int family = src.find(':') == std::string::npos ? AF_INET : AF_INET6;
    uint32_t s[4] = {}, d[4] = {};
    EXPECT_EQ(inet_pton(family, src.c_str(), s), 1);
    EXPECT_EQ(inet_pton(family, dst.c_str(), d), 1);
    auto r = inj_->DropsOf(DropKey(family, s, sport, d, dport));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FlowDrops{};
  }
  uint32_t AddOn(Prog p, uint16_t dport, double rate = 1.0) {
    RuleSpec s = Rule(p, rate);
    s.dport = *ParsePortRange(std::to_string(dport));
    return Add(s);
  }
};

// Every program: a dropped TCP data packet records its first sequence number,
// payload bytes (not frame bytes), one segment, the rule and the time.
TEST_F(DropLog, DroppedTcpDataRecordsRangeAndRule) {
  uint16_t sport = 41000;
  for (Prog p : kAllProgs) {
    for (int family : {4, 6}) {
      SCOPED_TRACE(std::string(ProgName(p)) + " IPv" + std::to_string(family));
      sport++;
      uint32_t id = AddOn(p, 9100);
      ASSERT_NE(id, 0u);
      std::string src = family == 4 ? "10.0.0.1" : "2001:db8::1";
      std::string dst = family == 4 ? "10.0.0.2" : "2001:db8::2";
      PacketSpec ps = family == 4 ? Tcp4(src, dst, sport, 9100, kAck | kPsh, 1234)
                                  : Tcp6(src, dst, sport, 9100, kAck | kPsh, 1234);
      ps.seq = 0xfffffc00u + sport;  // near the wrap: host order is checked
      uint64_t t0 = MonotonicNs();
      EXPECT_VERDICT(p, Run(p, ps), DropVerdict(p));
      uint64_t t1 = MonotonicNs();
      FlowDrops d = Drops(src, sport, dst, 9100);
      EXPECT_EQ(d.total, 1u);
      ASSERT_EQ(d.ranges.size(), 1u);
      EXPECT_EQ(d.ranges[0].seq, ps.seq);
      EXPECT_EQ(d.ranges[0].len, 1234u);
      EXPECT_EQ(d.ranges[0].segs, 1u);
      EXPECT_EQ(d.ranges[0].rule_id, id);
      EXPECT_GE(d.ranges[0].time_ns, t0);
      EXPECT_LE(d.ranges[0].time_ns, t1);
      EXPECT_EQ(Counters(id).logged_pkts, 1u);
      // The reverse direction is another flow: nothing recorded there.
      EXPECT_EQ(Drops(dst, 9100, src, sport).total, 0u);
      Remove(id);
    }
  }
}

// A GSO skb at tc: all of its payload and all of its wire segments.
TEST_F(DropLog, GsoSkbRecordsAllItsSegments) {
  uint16_t sport = 42000;
  for (Prog p : {Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    sport++;
    uint32_t id = AddOn(p, 9101);
    ASSERT_NE(id, 0u);
    // BPF_PROG_TEST_RUN takes at most a page: 3 segments of 1000 bytes.
    PacketSpec ps = Tcp4("10.0.0.1", "10.0.0.2", sport, 9101, kAck, 3 * 1000);
    ps.seq = 5000;
    RunOpts o;
    o.gso_segs = 3;
    EXPECT_VERDICT(p, Run(p, ps, o), DropVerdict(p));
    FlowDrops d = Drops("10.0.0.1", sport, "10.0.0.2", 9101);
    ASSERT_EQ(d.ranges.size(), 1u);
    EXPECT_EQ(d.ranges[0].seq, 5000u);
    EXPECT_EQ(d.ranges[0].len, 3000u);
    EXPECT_EQ(d.ranges[0].segs, 3u);
    Remove(id);
  }
}

// Nothing is recorded for a passed TCP data packet, a dropped UDP datagram,
// a dropped pure ACK (even padded to the Ethernet minimum: the IP length
// counts, not the frame), a dropped SYN, or a TCP packet with options only.
TEST_F(DropLog, OnlyDroppedTcpPayloadIsRecorded) {
  uint16_t sport = 43000;
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    uint16_t s = ++sport;
    uint32_t pass = AddOn(p, 9102, 0.0);
    uint32_t drop = AddOn(p, 9103, 1.0);
    ASSERT_NE(pass, 0u);
    ASSERT_NE(drop, 0u);
    EXPECT_VERDICT(p, Run(p, Tcp4("10.0.0.1", "10.0.0.2", s, 9102, kAck, 1000)), PassVerdict(p));
    EXPECT_EQ(Drops("10.0.0.1", s, "10.0.0.2", 9102).total, 0u) << "passed data";
    EXPECT_EQ(Counters(pass).matched_pkts, 1u);

    EXPECT_VERDICT(p, Run(p, Udp4("10.0.0.1", "10.0.0.2", s, 9103, 1000)), DropVerdict(p));
    PacketSpec ack = Tcp4("10.0.0.1", "10.0.0.2", s, 9103, kAck, 0);
    ack.pad_to = 60;
    EXPECT_VERDICT(p, Run(p, ack), DropVerdict(p));
    EXPECT_VERDICT(p, Run(p, Tcp4("10.0.0.1", "10.0.0.2", s, 9103, kSyn, 0)), DropVerdict(p));
    PacketSpec opts = Tcp4("10.0.0.1", "10.0.0.2", s, 9103, kAck, 0);
    opts.tcp_doff = 8;
    EXPECT_VERDICT(p, Run(p, opts), DropVerdict(p));
    EXPECT_EQ(Counters(drop).dropped_pkts, 4u);
    EXPECT_EQ(Counters(drop).logged_pkts, 0u);
    EXPECT_EQ(Drops("10.0.0.1", s, "10.0.0.2", 9103).total, 0u) << "UDP, pure ACK, SYN, options";
    Remove(pass);
    Remove(drop);
  }
}

// 17 drops of one flow: all are counted, the last 16 kept, oldest first.
TEST_F(DropLog, SeventeenDropsKeepTheLastSixteenInOrder) {
  uint16_t sport = 44000;
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    sport++;
    uint32_t id = AddOn(p, 9104);
    ASSERT_NE(id, 0u);
    for (uint32_t i = 0; i < 17; i++) {
      PacketSpec ps = Tcp4("10.0.0.1", "10.0.0.2", sport, 9104, kAck, 100 + i);
      ps.seq = 1000000 + i * 1000;
      EXPECT_VERDICT(p, Run(p, ps), DropVerdict(p));
    }
    FlowDrops d = Drops("10.0.0.1", sport, "10.0.0.2", 9104);
    EXPECT_EQ(d.total, 17u);
    EXPECT_EQ(Counters(id).logged_pkts, 17u);
    ASSERT_EQ(d.ranges.size(), size_t(LOSS_DROP_RANGES));
    for (uint32_t i = 0; i < LOSS_DROP_RANGES; i++) {
      EXPECT_EQ(d.ranges[i].seq, 1000000 + (i + 1) * 1000) << "range " << i;
      EXPECT_EQ(d.ranges[i].len, 100 + i + 1) << "range " << i;
      if (i) {
        EXPECT_GE(d.ranges[i].time_ns, d.ranges[i - 1].time_ns) << "range " << i;
      }
    }
    Remove(id);
  }
}

// The rule recorded is the rule's id as its owner knows it: the highest
// priority match among several, and the same id after Replace (a new slot).
TEST_F(DropLog, RecordsTheDecidingRulesIdAcrossReplace) {
  const Prog p = Prog::kTcIn;
  RuleSpec lo = Rule(p, 1.0), hi = Rule(p, 1.0);
  lo.dport = *ParsePortRange("9105");
  hi.dport = *ParsePortRange("9105");
  hi.priority = 10;
  uint32_t a = Add(lo), b = Add(hi);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  PacketSpec ps = Tcp4("10.0.0.1", "10.0.0.2", 45001, 9105, kAck, 10);
  ps.seq = 1;
  EXPECT_VERDICT(p, Run(p, ps), DropVerdict(p));
  ASSERT_TRUE(inj_->Replace(b, hi).ok());
  ps.seq = 11;
  EXPECT_VERDICT(p, Run(p, ps), DropVerdict(p));
  FlowDrops d = Drops("10.0.0.1", 45001, "10.0.0.2", 9105);
  ASSERT_EQ(d.ranges.size(), 2u);
  EXPECT_EQ(d.ranges[0].rule_id, b);
  EXPECT_EQ(d.ranges[1].rule_id, b) << "after Replace";
  EXPECT_EQ(d.ranges[1].seq, 11u);
  Remove(a);
  Remove(b);
}

}  // namespace
}  // namespace lossd::bpftest
