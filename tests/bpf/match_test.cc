// Matching fixtures: {description, rule, packet, matches?}. Each row adds its
// rule (once at 100 %, once at 0 %), runs the packet and checks the verdict
// and the rule's counters, then removes the rule. Run through every program
// (XDP, tc ingress, tc egress) with a rule for that program.
#include <functional>

#include "harness.h"

namespace lossd::bpftest {
namespace {

using Mutator = std::function<void(RuleSpec&)>;

struct MatchCase {
  std::string desc;
  Mutator rule;
  PacketSpec pkt;
  bool match;
};

Cidr C(const std::string& text) {
  auto r = ParseCidr(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : Cidr{};
}
PortRange P(const std::string& text) {
  auto r = ParsePortRange(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : PortRange{};
}
Mutator Src(std::string c) {
  return [c](RuleSpec& s) { s.src = C(c); };
}
Mutator Dst(std::string c) {
  return [c](RuleSpec& s) { s.dst = C(c); };
}
Mutator Sport(std::string r) {
  return [r](RuleSpec& s) { s.sport = P(r); };
}
Mutator Dport(std::string r) {
  return [r](RuleSpec& s) { s.dport = P(r); };
}
Mutator Proto(std::string p) {
  return [p](RuleSpec& s) {
    auto r = ParseProtocol(p);
    EXPECT_TRUE(r.ok()) << p;
    s.l4proto = r.ok() ? *r : 0;
  };
}
Mutator Flags(std::string f) {
  return [f](RuleSpec& s) {
    Status st = ParseTcpFlags(f, &s.tcp_flags_mask, &s.tcp_flags_value);
    EXPECT_TRUE(st.ok()) << f << ": " << st.ToString();
  };
}
Mutator Payload(int v) {
  return [v](RuleSpec& s) { s.payload = v; };
}
Mutator Family(int f) {
  return [f](RuleSpec& s) { s.family = f; };
}
Mutator All(std::vector<Mutator> ms) {
  return [ms](RuleSpec& s) {
    for (const auto& m : ms) m(s);
  };
}
Mutator Any() {
  return [](RuleSpec&) {};
}

PacketSpec With(PacketSpec s, const std::function<void(PacketSpec&)>& f) {
  f(s);
  return s;
}
PacketSpec U4(uint16_t sport, uint16_t dport, size_t payload = 32) {
  return Udp4("10.0.0.1", "10.0.0.2", sport, dport, payload);
}
PacketSpec Later4(PacketSpec s) {
  s.frag_offset = 100;
  return s;
}
PacketSpec Later6(PacketSpec s) {
  s.ext = {{kExtFragment}};
  s.frag_offset = 100;
  return s;
}

std::vector<MatchCase> MatchCases() {
  const auto u4 = Udp4("10.0.0.1", "10.0.0.2", 1234, 80);
  const auto t4syn = Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kSyn);
  const auto u6 = Udp6("2001:db8:1::1", "2001:db8:2::2", 1234, 80);
  const auto t6 = Tcp6("2001:db8:1::1", "2001:db8:2::2", 40000, 443, kAck, 100);
  return {
      {"empty rule matches ipv4 udp", Any(), u4, true},
      {"empty rule matches ipv6 tcp", Any(), t6, true},
      {"empty rule matches icmp", Any(), Icmp4(), true},
      // IPv4 CIDR.
      {"src 10.0.0.0/24 vs 10.0.0.1", Src("10.0.0.0/24"), u4, true},
      {"src 10.0.0.0/24 vs 10.0.1.1", Src("10.0.0.0/24"), Udp4("10.0.1.1", "10.0.0.2", 1, 2),
       false},
      {"src 10.0.0.1/32 (host anchor) vs 10.0.0.1", Src("10.0.0.1/32"), u4, true},
      {"src 10.0.0.1/32 (host anchor) vs 10.0.0.3", Src("10.0.0.1/32"),
       Udp4("10.0.0.3", "10.0.0.2", 1, 2), false},
      {"src 10.0.0.0/31 vs .1 (in)", Src("10.0.0.0/31"), u4, true},
      {"src 10.0.0.2/31 vs .1 (out)", Src("10.0.0.2/31"), u4, false},
      {"dst 10.0.0.0/16 vs 10.0.9.9", Dst("10.0.0.0/16"), Udp4("1.1.1.1", "10.0.9.9", 1, 2), true},
      {"dst 10.0.0.0/16 vs 10.1.0.2", Dst("10.0.0.0/16"), Udp4("1.1.1.1", "10.1.0.2", 1, 2), false},
      {"dst 10.0.0.2/32 (host anchor) vs 10.0.0.2", Dst("10.0.0.2"), u4, true},
      {"dst 10.0.0.2/32 (host anchor) vs src 10.0.0.2 only", Dst("10.0.0.2"),
       Udp4("10.0.0.2", "10.0.0.1", 1, 2), false},
      {"dst 10.0.0.2/32 vs ipv6 packet", Dst("10.0.0.2"), u6, false},
      {"src 0.0.0.0/0 matches ipv4", Src("0.0.0.0/0"), u4, true},
      {"src 0.0.0.0/0 does not match ipv6", Src("0.0.0.0/0"), u6, false},
      {"src and dst both must match", All({Src("10.0.0.1"), Dst("10.0.0.3")}), u4, false},
      {"src and dst both match", All({Src("10.0.0.0/8"), Dst("10.0.0.2")}), u4, true},
      // IPv6 CIDR.
      {"src 2001:db8:1::/64 vs 2001:db8:1::1", Src("2001:db8:1::/64"), u6, true},
      {"src 2001:db8:1::/64 vs 2001:db8:3::1", Src("2001:db8:1::/64"),
       Udp6("2001:db8:3::1", "2001:db8:2::2", 1, 2), false},
      {"src /128 (host anchor) vs same", Src("2001:db8:1::1/128"), u6, true},
      {"src /128 (host anchor) vs ::3", Src("2001:db8:1::1/128"),
       Udp6("2001:db8:1::3", "2001:db8:2::2", 1, 2), false},
      {"dst 2001:db8:2::/48 vs 2001:db8:2::2", Dst("2001:db8:2::/48"), u6, true},
      {"dst 2001:db8:2::2/127 vs ::3 (last bit differs, in)", Dst("2001:db8:2::2/127"),
       Udp6("::1", "2001:db8:2::3", 1, 2), true},
      {"dst 2001:db8:2::2/127 vs ::4 (out)", Dst("2001:db8:2::2/127"),
       Udp6("::1", "2001:db8:2::4", 1, 2), false},
      {"dst /128 (host anchor)", Dst("2001:db8:2::2"), t6, true},
      {"dst 2001:db8:2::/33 vs 2001:db8:8000:: (bit 33 differs)", Dst("2001:db8::/33"),
       Udp6("::1", "2001:db8:8000::1", 1, 2), false},
      {"ipv6 dst vs ipv4 packet", Dst("2001:db8:2::/48"), u4, false},
      {"ipv4-mapped ipv6 rule is the ipv4 rule", Dst("::ffff:10.0.0.2/128"), u4, true},
      {"ipv4-mapped ipv6 rule vs ipv6 packet", Dst("::ffff:10.0.0.2/128"), u6, false},
      {"family 6 vs ipv6", Family(6), u6, true},
      {"family 6 vs ipv4", Family(6), u4, false},
      {"family 4 vs ipv4 icmp", Family(4), Icmp4(), true},
      // Ports (anchored up to 64 ports, scan list beyond).
      {"dport 80 vs 80", Dport("80"), u4, true},
      {"dport 80 vs 81", Dport("80"), U4(1234, 81), false},
      {"dport 80 vs sport 80 only", Dport("80"), U4(80, 1234), false},
      {"sport 1234 vs 1234", Sport("1234"), u4, true},
      {"sport 1234 vs 1235", Sport("1234"), U4(1235, 80), false},
      {"dport 8000-8063 (64 ports, anchored) vs 8000", Dport("8000-8063"), U4(1, 8000), true},
      {"dport 8000-8063 vs 8063", Dport("8000-8063"), U4(1, 8063), true},
      {"dport 8000-8063 vs 7999", Dport("8000-8063"), U4(1, 7999), false},
      {"dport 8000-8063 vs 8064", Dport("8000-8063"), U4(1, 8064), false},
      {"dport 8000-8064 (65 ports, scan list) vs 8000", Dport("8000-8064"), U4(1, 8000), true},
      {"dport 8000-8064 vs 8064", Dport("8000-8064"), U4(1, 8064), true},
      {"dport 8000-8064 vs 8065", Dport("8000-8064"), U4(1, 8065), false},
      {"dport 8000-8064 vs 7999", Dport("8000-8064"), U4(1, 7999), false},
      {"dport 1024-65535 vs 65535", Dport("1024-65535"), U4(1, 65535), true},
      {"dport 1024-65535 vs 1023", Dport("1024-65535"), U4(1, 1023), false},
      {"dport 0 vs 0", Dport("0"), U4(1, 0), true},
      {"sport 40000-50000 (scan) vs 45000", Sport("40000-50000"), U4(45000, 1), true},
      {"sport 40000-50000 vs 39999", Sport("40000-50000"), U4(39999, 1), false},
      {"sport 60000-60010 (anchored) vs 60010", Sport("60000-60010"), U4(60010, 1), true},
      {"sport+dport both match", All({Sport("1234"), Dport("80")}), u4, true},
      {"sport+dport, sport differs", All({Sport("1235"), Dport("80")}), u4, false},
      {"sport range + dport range (both scan) both match",
       All({Sport("1000-2000"), Dport("1-100")}), u4, true},
      {"dport 1-65535 vs udp", Dport("1-65535"), u4, true},
      {"dport 1-65535 vs icmp (no ports)", Dport("1-65535"), Icmp4(), false},
      {"dport 80 vs ipv6 tcp 443", Dport("80"), t6, false},
      {"dport 443 vs ipv6 tcp 443", Dport("443"), t6, true},
      {"dport 80 vs 802.1Q ipv4 udp", Dport("80"),
       With(u4, [](PacketSpec& s) { s.vlans = {kTpid8021Q}; }), true},
      {"dport 80 vs QinQ ipv4 tcp", Dport("80"),
       With(t4syn,
            [](PacketSpec& s) {
              s.vlans = {kTpid8021AD, kTpid8021Q};
            }),
       true},
      {"dport 80 vs ipv4 with options", Dport("80"),
       With(u4, [](PacketSpec& s) { s.ip_options = 24; }), true},
      {"dport 443 vs ipv6 hop+routing+dest ext headers", Dport("443"),
       With(t6,
            [](PacketSpec& s) {
              s.ext = {{kExtHop}, {kExtRouting, 24}, {kExtDest}};
            }),
       true},
      {"dport 80 vs ipv4 first fragment", Dport("80"),
       With(u4, [](PacketSpec& s) { s.more_fragments = true; }), true},
      {"dport 80 vs ipv6 first fragment", Dport("80"),
       With(u6,
            [](PacketSpec& s) {
              s.ext = {{kExtFragment}};
              s.more_fragments = true;
            }),
       true},
      // Non-first fragments carry no L4 header: only rules without port
      // (or flag/payload) conditions match them.
      {"dport 80 vs ipv4 non-first fragment", Dport("80"), Later4(u4), false},
      {"sport 0-50000 (scan) vs ipv4 non-first fragment", Sport("0-50000"), Later4(u4), false},
      {"proto udp vs ipv4 non-first fragment", Proto("udp"), Later4(u4), true},
      {"dst host vs ipv4 non-first fragment", Dst("10.0.0.2"), Later4(u4), true},
      {"src /24 + proto udp vs ipv4 non-first fragment", All({Src("10.0.0.0/24"), Proto("udp")}),
       Later4(u4), true},
      {"proto tcp vs ipv4 non-first udp fragment", Proto("tcp"), Later4(u4), false},
      {"tcp flags vs ipv4 non-first tcp fragment", Flags("ack"),
       Later4(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 50)), false},
      {"dport 80 vs ipv6 non-first fragment", Dport("80"), Later6(u6), false},
      {"proto udp vs ipv6 non-first fragment", Proto("udp"), Later6(u6), true},
      {"dst /48 vs ipv6 non-first fragment", Dst("2001:db8:2::/48"), Later6(u6), true},
      // Protocol.
      {"proto udp vs udp", Proto("udp"), u4, true},
      {"proto tcp vs udp", Proto("tcp"), u4, false},
      {"proto tcp vs tcp", Proto("tcp"), t4syn, true},
      {"proto icmp vs icmp", Proto("icmp"), Icmp4(), true},
      {"proto icmp vs icmpv6", Proto("icmp"), Icmp6(), false},
      {"proto icmpv6 vs icmpv6 echo", Proto("icmpv6"), Icmp6(128), true},
      {"proto icmpv6 vs udp6", Proto("icmpv6"), u6, false},
      {"proto 47 (gre) vs gre", Proto("47"), With(Icmp4(), [](PacketSpec& s) { s.proto = 47; }),
       true},
      {"proto udp + dport 80 vs tcp 80", All({Proto("udp"), Dport("80")}), t4syn, false},
      // TCP flags.
      {"syn,!ack vs SYN", Flags("syn,!ack"), t4syn, true},
      {"syn,!ack vs SYN-ACK", Flags("syn,!ack"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kSyn | kAck),
       false},
      {"syn,!ack vs ACK", Flags("syn,!ack"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), false},
      {"syn,!ack vs udp", Flags("syn,!ack"), u4, false},
      {"syn,!ack vs ipv6 SYN", Flags("syn,!ack"), Tcp6("::1", "::2", 1, 2, kSyn), true},
      {"fin vs FIN-ACK", Flags("fin"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kFin | kAck), true},
      {"fin vs ACK", Flags("fin"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), false},
      {"rst vs RST", Flags("rst"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kRst), true},
      {"!syn vs ACK", Flags("!syn"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), true},
      {"!syn vs SYN", Flags("!syn"), t4syn, false},
      {"syn,ack vs SYN-ACK", Flags("syn,ack"), Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kSyn | kAck),
       true},
      {"psh vs ACK-PSH with data (QinQ)", Flags("psh"),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck | kPsh, 10),
            [](PacketSpec& s) {
              s.vlans = {kTpid8021AD, kTpid8021Q};
            }),
       true},
      // Payload.
      {"payload only vs tcp with data", Payload(LOSS_PAYLOAD_ONLY), t6, true},
      {"payload only vs pure ACK", Payload(LOSS_PAYLOAD_ONLY),
       Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), false},
      {"payload only vs SYN", Payload(LOSS_PAYLOAD_ONLY), t4syn, false},
      {"payload only vs udp with data", Payload(LOSS_PAYLOAD_ONLY), u4, true},
      {"payload only vs empty udp", Payload(LOSS_PAYLOAD_ONLY), U4(1, 2, 0), false},
      {"payload only vs icmp", Payload(LOSS_PAYLOAD_ONLY), Icmp4(), false},
      {"payload only vs 1-byte tcp payload", Payload(LOSS_PAYLOAD_ONLY),
       Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 1), true},
      {"payload only vs tcp data after 12 bytes of options", Payload(LOSS_PAYLOAD_ONLY),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 5), [](PacketSpec& s) { s.tcp_doff = 8; }),
       true},
      {"payload none vs pure ACK with 12 bytes of options", Payload(LOSS_PAYLOAD_NONE),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), [](PacketSpec& s) { s.tcp_doff = 8; }), true},
      {"payload none vs pure ACK", Payload(LOSS_PAYLOAD_NONE),
       Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), true},
      {"payload none vs pure ACK padded to 60 bytes (tot_len decides)", Payload(LOSS_PAYLOAD_NONE),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), [](PacketSpec& s) { s.pad_to = 60; }), true},
      {"payload only vs pure ACK padded to 60 bytes", Payload(LOSS_PAYLOAD_ONLY),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck), [](PacketSpec& s) { s.pad_to = 60; }), false},
      {"payload none vs ipv6 pure ACK after ext headers", Payload(LOSS_PAYLOAD_NONE),
       With(Tcp6("::1", "::2", 1, 2, kAck),
            [](PacketSpec& s) {
              s.ext = {{kExtHop}, {kExtDest, 16}};
            }),
       true},
      {"payload only vs ipv6 data after ext headers", Payload(LOSS_PAYLOAD_ONLY),
       With(t6,
            [](PacketSpec& s) {
              s.ext = {{kExtHop}, {kExtDest, 16}};
            }),
       true},
      {"payload none vs SYN", Payload(LOSS_PAYLOAD_NONE), t4syn, true},
      {"payload none vs tcp with data", Payload(LOSS_PAYLOAD_NONE), t6, false},
      {"payload none vs empty udp", Payload(LOSS_PAYLOAD_NONE), U4(1, 2, 0), true},
      {"payload none vs icmp", Payload(LOSS_PAYLOAD_NONE), Icmp4(), false},
      // GSO super-packets carry no length in the IP header (tot_len /
      // payload_len 0): the bytes present decide.
      {"payload only vs ipv4 tcp data, tot_len 0 (GSO)", Payload(LOSS_PAYLOAD_ONLY),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 1000),
            [](PacketSpec& s) { s.tot_len_override = 0; }),
       true},
      {"payload none vs ipv4 pure ACK, tot_len 0 (GSO)", Payload(LOSS_PAYLOAD_NONE),
       With(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck),
            [](PacketSpec& s) { s.tot_len_override = 0; }),
       true},
      {"payload only vs ipv6 tcp data, payload_len 0 (GSO)", Payload(LOSS_PAYLOAD_ONLY),
       With(t6, [](PacketSpec& s) { s.tot_len_override = 0; }), true},
      {"payload none vs ipv6 pure ACK after ext headers, payload_len 0", Payload(LOSS_PAYLOAD_NONE),
       With(Tcp6("::1", "::2", 1, 2, kAck),
            [](PacketSpec& s) {
              s.ext = {{kExtHop}};
              s.tot_len_override = 0;
            }),
       true},
      {"payload none vs empty udp padded to 60 bytes", Payload(LOSS_PAYLOAD_NONE),
       With(U4(1, 2, 0), [](PacketSpec& s) { s.pad_to = 60; }), true},
      // An IPv4 rule never matches IPv6 whose address begins with the same
      // four bytes (and the other way round).
      {"dst 10.0.0.2/32 (host anchor) vs ipv6 dst a00:2::", Dst("10.0.0.2"),
       Udp6("2001:db8::1", "a00:2::", 1, 80), false},
      {"src 10.0.0.0/24 (scan) vs ipv6 src a00:1::", Src("10.0.0.0/24"),
       Udp6("a00:1::", "2001:db8::2", 1, 80), false},
      {"dst a00:2::/128 vs ipv4 dst 10.0.0.2", Dst("a00:2::/128"), u4, false},
      // A narrow source port and a wide destination range: sport-anchored.
      {"sport 1234 + dport 1-1000 vs 1234 -> 80", All({Sport("1234"), Dport("1-1000")}), u4, true},
      {"sport 1234 + dport 1-1000 vs 1234 -> 1001", All({Sport("1234"), Dport("1-1000")}),
       U4(1234, 1001), false},
      {"sport 1234 + dport 1-1000 vs 1233 -> 80", All({Sport("1234"), Dport("1-1000")}),
       U4(1233, 80), false},
      // A host rule with a port: the port anchors it, the host still counts.
      {"dst 10.0.0.2 + dport 80 vs 10.0.0.3:80", All({Dst("10.0.0.2"), Dport("80")}),
       Udp4("10.0.0.1", "10.0.0.3", 1, 80), false},
      // Everything at once.
      {"dst host + dport + tcp + syn,!ack vs SYN",
       All({Dst("10.0.0.2"), Dport("80"), Proto("tcp"), Flags("syn,!ack"),
            Payload(LOSS_PAYLOAD_NONE)}),
       t4syn, true},
      {"dst host + dport + tcp + syn,!ack vs SYN to 81",
       All({Dst("10.0.0.2"), Dport("80"), Proto("tcp"), Flags("syn,!ack")}),
       Tcp4("10.0.0.1", "10.0.0.2", 40000, 81, kSyn), false},
      {"src /64 + sport range + udp + payload vs ipv6 udp",
       All({Src("2001:db8:1::/64"), Sport("1000-1300"), Proto("udp"), Payload(LOSS_PAYLOAD_ONLY)}),
       u6, true},
  };
}

class Match : public BpfTest {};

TEST_F(Match, FixtureTable) {
  HoldAttachments();
  int rows = 0;
  for (Prog p : kAllProgs) {
    for (const MatchCase& c : MatchCases()) {
      for (double rate : {1.0, 0.0}) {
        SCOPED_TRACE(std::string(ProgName(p)) + ": " + c.desc +
                     (c.match ? " -> match" : " -> no match") + " at " +
                     (rate > 0 ? "100%" : "0%"));
        RuleSpec spec = Rule(p, rate);
        c.rule(spec);
        uint32_t id = Add(spec);
        if (!id) continue;
        Packet pkt = Build(c.pkt);
        HookCounters h0 = Totals(p);
        int v = Run(p, pkt);
        bool drop = c.match && rate > 0;
        EXPECT_VERDICT(p, v, drop ? DropVerdict(p) : PassVerdict(p))
            << "\n  frame " << Hex(pkt.bytes);
        RuleCounters rc = Counters(id);
        EXPECT_EQ(rc.matched_pkts, c.match ? 1u : 0u);
        EXPECT_EQ(rc.matched_bytes, c.match ? pkt.bytes.size() : 0u);
        EXPECT_EQ(rc.dropped_pkts, drop ? 1u : 0u);
        HookCounters h1 = Totals(p);
        EXPECT_EQ(h1.seen - h0.seen, 1u);
        EXPECT_EQ(h1.dropped - h0.dropped, drop ? 1u : 0u);
        EXPECT_EQ(h1.unparsable - h0.unparsable, 0u);
        Remove(id);
        rows++;
      }
    }
  }
  RecordProperty("rows", rows);
}

// ---- hooks, directions, interfaces ---------------------------------------

class Scope : public BpfTest {};

// A rule runs only in the programs of its own hook: an XDP rule is invisible
// to the tc programs and the other way round.
TEST_F(Scope, RulesOnlyRunInTheirOwnHook) {
  PacketSpec pkt = U4(1, 80);
  uint32_t xdp = Add(Rule(Prog::kXdp, 1.0));
  ASSERT_NE(xdp, 0u);
  EXPECT_VERDICT(Prog::kXdp, Run(Prog::kXdp, pkt), DropVerdict(Prog::kXdp));
  EXPECT_VERDICT(Prog::kTcIn, Run(Prog::kTcIn, pkt), PassVerdict(Prog::kTcIn));
  EXPECT_VERDICT(Prog::kTcOut, Run(Prog::kTcOut, pkt), PassVerdict(Prog::kTcOut));
  EXPECT_EQ(Counters(xdp).matched_pkts, 1u);
  Remove(xdp);

  uint32_t tc = Add(Rule(Prog::kTcIn, 1.0));
  ASSERT_NE(tc, 0u);
  EXPECT_VERDICT(Prog::kXdp, Run(Prog::kXdp, pkt), PassVerdict(Prog::kXdp));
  EXPECT_VERDICT(Prog::kTcIn, Run(Prog::kTcIn, pkt), DropVerdict(Prog::kTcIn));
  EXPECT_VERDICT(Prog::kTcOut, Run(Prog::kTcOut, pkt), PassVerdict(Prog::kTcOut));
  EXPECT_EQ(Counters(tc).matched_pkts, 1u);
}

TEST_F(Scope, TcDirection) {
  PacketSpec pkt = U4(1, 80);
  struct {
    Direction dir;
    bool in, out;
  } cases[] = {{Direction::kIngress, true, false},
               {Direction::kEgress, false, true},
               {Direction::kBoth, true, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(DirectionName(c.dir));
    RuleSpec s = Rule(Prog::kTcIn, 1.0);
    s.dir = c.dir;
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    // Ingress drop is TC_ACT_SHOT (2); egress drop is TC_ACT_STOLEN (4).
    EXPECT_EQ(Run(Prog::kTcIn, pkt), c.in ? 2 : -1);
    EXPECT_EQ(Run(Prog::kTcOut, pkt), c.out ? 4 : -1);
    EXPECT_EQ(Run(Prog::kXdp, pkt), PassVerdict(Prog::kXdp));
    RuleCounters rc = Counters(id);
    EXPECT_EQ(rc.dropped_pkts, uint64_t(c.in) + uint64_t(c.out));
    Remove(id);
  }
  EXPECT_EQ(Totals(Prog::kTcIn).dropped, 2u);
  EXPECT_EQ(Totals(Prog::kTcOut).dropped, 2u);
}

TEST_F(Scope, XdpRejectsEgress) {
  RuleSpec s = Rule(Prog::kXdp, 1.0);
  s.dir = Direction::kEgress;
  auto r = inj_->Add(s);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

// A rule on another interface never matches loopback packets, and matches
// packets the test run presents as arriving on that interface.
TEST_F(Scope, InterfaceMismatch) {
  uint32_t veth = EnsureVeth("lossd-v0", "lossd-v1");
  ASSERT_NE(veth, 0u) << "ip link add lossd-v0 type veth peer name lossd-v1 failed";
  ASSERT_NE(veth, 1u);
  PacketSpec pkt = U4(1, 80);
  RunOpts on_veth;
  on_veth.ifindex = veth;
  for (Prog p : {Prog::kXdp, Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec s = Rule(p, 1.0);
    s.iface = "lossd-v0";
    s.l4proto = 17;  // nothing but the test's own packets
    s.dport = *ParsePortRange("80");
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    EXPECT_VERDICT(p, Run(p, pkt), PassVerdict(p));           // lo: another interface
    EXPECT_VERDICT(p, Run(p, pkt, on_veth), DropVerdict(p));  // the rule's own interface
    EXPECT_EQ(Counters(id).matched_pkts, 1u);
    // And the converse: a rule on lo ignores the veth's packets.
    RuleSpec l = Rule(p, 1.0);
    l.l4proto = 17;
    l.dport = *ParsePortRange("80");
    uint32_t lo = Add(l);
    ASSERT_NE(lo, 0u);
    Remove(id);
    EXPECT_VERDICT(p, Run(p, pkt, on_veth), PassVerdict(p));
    EXPECT_VERDICT(p, Run(p, pkt), DropVerdict(p));
    EXPECT_EQ(Counters(lo).matched_pkts, 1u);
    Remove(lo);
  }
}

TEST_F(Scope, UnknownInterfaceIsNotFound) {
  RuleSpec s = Rule(Prog::kXdp, 1.0);
  s.iface = "nosuch0";
  auto r = inj_->Add(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_TRUE(inj_->Rules().empty());
}

}  // namespace
}  // namespace lossd::bpftest
