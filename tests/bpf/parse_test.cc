// Parser fixtures (katran-style tables): {description, packet, expected
// outcome}. Every frame runs under one rule that drops 100 % of everything on
// lo, so a frame the parser reads as IP is dropped and counted by the rule;
// anything else passes and is counted in the hook totals as what it is
// (unparsable, always-pass, or simply not IP).
#include <functional>

#include "harness.h"

namespace lossd::bpftest {
namespace {

enum class Outcome {
  kMatch,       // parsed as IP: the catch-all rule drops it
  kUnparsable,  // truncated/malformed: passes, HookTotals.unparsable++
  kAlwaysPass,  // ARP / IPv6 ND: passes, HookTotals.always_pass++
  kNotIp,       // other ethertype: passes, no error counted
};

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kMatch: return "match";
    case Outcome::kUnparsable: return "unparsable";
    case Outcome::kAlwaysPass: return "always-pass";
    case Outcome::kNotIp: return "not-ip";
  }
  return "?";
}

struct ParseCase {
  std::string desc;
  PacketSpec spec;
  Outcome outcome;
};

PacketSpec With(PacketSpec s, const std::function<void(PacketSpec&)>& f) {
  f(s);
  return s;
}

// s behind VLAN tags, outermost first.
PacketSpec Tagged(PacketSpec s, std::vector<uint16_t> tpids) {
  s.vlans = std::move(tpids);
  return s;
}

std::vector<ParseCase> ParseCases() {
  const std::string a4 = "192.0.2.1", b4 = "198.51.100.7";
  const std::string a6 = "2001:db8:1::1", b6 = "2001:db8:2::2";
  std::vector<ParseCase> c = {
      // Plain L3/L4 combinations.
      {"ipv4 udp", Udp4(a4, b4, 1111, 2222), Outcome::kMatch},
      {"ipv4 udp no payload", Udp4(a4, b4, 1111, 2222, 0), Outcome::kMatch},
      {"ipv4 tcp syn", Tcp4(a4, b4, 40000, 80, kSyn), Outcome::kMatch},
      {"ipv4 tcp ack with data", Tcp4(a4, b4, 40000, 80, kAck | kPsh, 512), Outcome::kMatch},
      {"ipv4 tcp with options (doff 15)",
       With(Tcp4(a4, b4, 40000, 80, kSyn), [](PacketSpec& s) { s.tcp_doff = 15; }),
       Outcome::kMatch},
      {"ipv4 icmp echo", Icmp4(8), Outcome::kMatch},
      {"ipv4 gre (no l4 parsing)", With(Icmp4(), [](PacketSpec& s) { s.proto = 47; }),
       Outcome::kMatch},
      {"ipv6 udp", Udp6(a6, b6, 1111, 2222), Outcome::kMatch},
      {"ipv6 tcp syn", Tcp6(a6, b6, 40000, 443, kSyn), Outcome::kMatch},
      {"ipv6 tcp data", Tcp6(a6, b6, 40000, 443, kAck, 1000), Outcome::kMatch},
      {"ipv6 icmpv6 echo request", Icmp6(128), Outcome::kMatch},
      {"ipv6 icmpv6 echo reply", Icmp6(129), Outcome::kMatch},
      {"ipv6 icmpv6 mld done (132, not ND)", Icmp6(132), Outcome::kMatch},
      {"ipv6 icmpv6 138 (router renumbering, not ND)", Icmp6(138), Outcome::kMatch},
      {"ipv4 padded to 60 bytes",
       With(Tcp4(a4, b4, 1, 2, kAck), [](PacketSpec& s) { s.pad_to = 60; }), Outcome::kMatch},
      // VLAN.
      {"802.1Q ipv4 udp", Tagged(Udp4(a4, b4, 1, 2), {kTpid8021Q}), Outcome::kMatch},
      {"802.1Q ipv6 tcp", Tagged(Tcp6(a6, b6, 1, 2, kSyn), {kTpid8021Q}), Outcome::kMatch},
      {"QinQ (88a8+8100) ipv4 tcp", Tagged(Tcp4(a4, b4, 1, 2, kSyn), {kTpid8021AD, kTpid8021Q}),
       Outcome::kMatch},
      {"QinQ (8100+8100) ipv6 udp", Tagged(Udp6(a6, b6, 1, 2), {kTpid8021Q, kTpid8021Q}),
       Outcome::kMatch},
      {"QinQ ipv4 icmp", Tagged(Icmp4(), {kTpid8021AD, kTpid8021Q}), Outcome::kMatch},
      // IPv4 options.
      {"ipv4 options 4 bytes (ihl 6) udp",
       With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.ip_options = 4; }), Outcome::kMatch},
      {"ipv4 options 40 bytes (ihl 15) tcp",
       With(Tcp4(a4, b4, 1, 2, kSyn), [](PacketSpec& s) { s.ip_options = 40; }), Outcome::kMatch},
      {"802.1Q ipv4 options icmp",
       With(Icmp4(),
            [](PacketSpec& s) {
              s.ip_options = 12;
              s.vlans = {kTpid8021Q};
            }),
       Outcome::kMatch},
      // IPv6 extension headers.
      {"ipv6 hop-by-hop udp", With(Udp6(a6, b6, 1, 2), [](PacketSpec& s) { s.ext = {{kExtHop}}; }),
       Outcome::kMatch},
      {"ipv6 routing (24 bytes) tcp",
       With(Tcp6(a6, b6, 1, 2, kSyn),
            [](PacketSpec& s) {
              s.ext = {{kExtRouting, 24}};
            }),
       Outcome::kMatch},
      {"ipv6 dest opts udp",
       With(Udp6(a6, b6, 1, 2),
            [](PacketSpec& s) {
              s.ext = {{kExtDest, 16}};
            }),
       Outcome::kMatch},
      {"ipv6 fragment (first, M=1) udp",
       With(Udp6(a6, b6, 1, 2),
            [](PacketSpec& s) {
              s.ext = {{kExtFragment}};
              s.more_fragments = true;
            }),
       Outcome::kMatch},
      {"ipv6 auth header tcp",
       With(Tcp6(a6, b6, 1, 2, kAck, 10),
            [](PacketSpec& s) {
              s.ext = {{kExtAuth, 24}};
            }),
       Outcome::kMatch},
      {"ipv6 hop+routing+dest+fragment udp",
       With(Udp6(a6, b6, 1, 2),
            [](PacketSpec& s) {
              s.ext = {{kExtHop}, {kExtRouting, 24}, {kExtDest}, {kExtFragment}};
            }),
       Outcome::kMatch},
      {"ipv6 six extension headers (the most walked) tcp",
       With(Tcp6(a6, b6, 1, 2, kSyn),
            [](PacketSpec& s) {
              s.ext = {{kExtHop},      {kExtDest},     {kExtRouting},
                       {kExtFragment}, {kExtAuth, 12}, {kExtDest}};
            }),
       Outcome::kMatch},
      {"ipv6 hop-by-hop icmpv6 echo", With(Icmp6(128), [](PacketSpec& s) { s.ext = {{kExtHop}}; }),
       Outcome::kMatch},
      // Fragments.
      {"ipv4 first fragment (MF, offset 0) udp",
       With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.more_fragments = true; }), Outcome::kMatch},
      {"ipv4 non-first fragment udp",
       With(Udp4(a4, b4, 1, 2, 100),
            [](PacketSpec& s) {
              s.frag_offset = 185;
              s.more_fragments = true;
            }),
       Outcome::kMatch},
      {"ipv4 last fragment tcp",
       With(Tcp4(a4, b4, 1, 2, kAck, 100), [](PacketSpec& s) { s.frag_offset = 1; }),
       Outcome::kMatch},
      {"ipv4 non-first fragment with options",
       With(Udp4(a4, b4, 1, 2, 100),
            [](PacketSpec& s) {
              s.frag_offset = 7;
              s.ip_options = 8;
            }),
       Outcome::kMatch},
      {"ipv6 non-first fragment udp",
       With(Udp6(a6, b6, 1, 2, 100),
            [](PacketSpec& s) {
              s.ext = {{kExtFragment}};
              s.frag_offset = 185;
              s.more_fragments = true;
            }),
       Outcome::kMatch},
      {"ipv6 hop-by-hop + non-first fragment tcp",
       With(Tcp6(a6, b6, 1, 2, kAck, 100),
            [](PacketSpec& s) {
              s.ext = {{kExtHop}, {kExtFragment}};
              s.frag_offset = 3;
            }),
       Outcome::kMatch},
      // ARP and IPv6 neighbour discovery: never dropped.
      {"arp request", Arp(), Outcome::kAlwaysPass},
      {"802.1Q arp", Tagged(Arp(), {kTpid8021Q}), Outcome::kAlwaysPass},
      {"QinQ arp", Tagged(Arp(), {kTpid8021AD, kTpid8021Q}), Outcome::kAlwaysPass},
      {"icmpv6 router solicitation (133)", Icmp6(133), Outcome::kAlwaysPass},
      {"icmpv6 router advertisement (134)", Icmp6(134), Outcome::kAlwaysPass},
      {"icmpv6 neighbour solicitation (135)", Icmp6(135), Outcome::kAlwaysPass},
      {"icmpv6 neighbour advertisement (136)", Icmp6(136), Outcome::kAlwaysPass},
      {"icmpv6 redirect (137)", Icmp6(137), Outcome::kAlwaysPass},
      {"icmpv6 NS behind hop-by-hop", With(Icmp6(135), [](PacketSpec& s) { s.ext = {{kExtHop}}; }),
       Outcome::kAlwaysPass},
      {"802.1Q icmpv6 NA", Tagged(Icmp6(136), {kTpid8021Q}), Outcome::kAlwaysPass},
      // Other ethertypes.
      {"lldp 0x88cc", Raw(0x88cc), Outcome::kNotIp},
      {"mpls 0x8847", Raw(0x8847), Outcome::kNotIp},
      {"ipx 0x8137", Raw(0x8137), Outcome::kNotIp},
      {"rarp 0x8035", Raw(0x8035, 28), Outcome::kNotIp},
      {"802.1Q lldp", Tagged(Raw(0x88cc), {kTpid8021Q}), Outcome::kNotIp},
      {"802.3 length field (0x002e)", Raw(0x002e), Outcome::kNotIp},
      // Malformed headers (complete, but wrong).
      {"ethertype ipv4, version 6",
       With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.ip_version = 6; }), Outcome::kUnparsable},
      {"ipv4 ihl 4", With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.ihl_override = 4; }),
       Outcome::kUnparsable},
      {"ipv4 ihl 0", With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.ihl_override = 0; }),
       Outcome::kUnparsable},
      {"ipv4 ihl 15 beyond the frame",
       With(Udp4(a4, b4, 1, 2, 0), [](PacketSpec& s) { s.ihl_override = 15; }),
       Outcome::kUnparsable},
      {"ipv4 tot_len below the header length",
       With(Udp4(a4, b4, 1, 2), [](PacketSpec& s) { s.tot_len_override = 19; }),
       Outcome::kUnparsable},
      {"ipv4 tcp doff 4", With(Tcp4(a4, b4, 1, 2, kSyn), [](PacketSpec& s) { s.tcp_doff = 4; }),
       Outcome::kUnparsable},
      {"ipv6 tcp doff 0", With(Tcp6(a6, b6, 1, 2, kSyn), [](PacketSpec& s) { s.tcp_doff = 0; }),
       Outcome::kUnparsable},
      {"ethertype ipv6, version 4",
       With(Udp6(a6, b6, 1, 2), [](PacketSpec& s) { s.ip_version = 4; }), Outcome::kUnparsable},
      {"ipv6 payload_len shorter than its extension headers",
       With(Udp6(a6, b6, 1, 2),
            [](PacketSpec& s) {
              s.ext = {{kExtHop, 16}};
              s.tot_len_override = 8;
            }),
       Outcome::kUnparsable},
      {"ipv6 seven extension headers (deeper than walked)",
       With(Udp6(a6, b6, 1, 2),
            [](PacketSpec& s) {
              s.ext = {{kExtHop},     {kExtDest}, {kExtRouting}, {kExtDest},
                       {kExtRouting}, {kExtDest}, {kExtDest}};
            }),
       Outcome::kUnparsable},
      {"ipv6 hop-by-hop length beyond the frame",
       With(Udp6(a6, b6, 1, 2, 0),
            [](PacketSpec& s) {
              s.ext = {{kExtHop, 2048}};
            }),
       Outcome::kUnparsable},
  };
  return c;
}

Packet BuildCase(const ParseCase& c) {
  Packet pkt = Build(c.spec);
  // This case's hop-by-hop header claims 2 KiB: keep only its first 16 bytes.
  if (c.desc == "ipv6 hop-by-hop length beyond the frame") {
    pkt.bytes.resize(pkt.l3_off + 40 + 8 + 8);  // 40 IPv6 + 16 of the 2048 claimed
  }
  return pkt;
}

// BPF_PROG_TEST_RUN for skb programs refuses (EINVAL) a frame whose
// Ethernet type is IPv4 or IPv6 but which is too short for the bare IP
// header (the kernel checks this before running the program), so those
// truncations can only be run through XDP. Behind a VLAN tag the kernel does
// not look, and the tc programs get them.
bool KernelRefusesSkb(const std::vector<uint8_t>& frame) {
  uint16_t type = uint16_t(frame[12] << 8 | frame[13]);
  size_t l3 = frame.size() - 14;
  return (type == 0x0800 && l3 < 20) || (type == 0x86DD && l3 < 40);
}

class Parse : public BpfTest {};

TEST_F(Parse, FixtureTable) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t all = Add(Rule(p, 1.0));  // no conditions: every IP packet on lo
    ASSERT_NE(all, 0u);
    for (const ParseCase& c : ParseCases()) {
      SCOPED_TRACE(c.desc + " -> " + OutcomeName(c.outcome));
      Packet pkt = BuildCase(c);
      HookCounters h0 = Totals(p);
      RuleCounters r0 = Counters(all);
      int v = Run(p, pkt);
      HookCounters h1 = Totals(p);
      RuleCounters r1 = Counters(all);
      bool drop = c.outcome == Outcome::kMatch;
      EXPECT_VERDICT(p, v, drop ? DropVerdict(p) : PassVerdict(p))
          << "\n  frame " << Hex(pkt.bytes);
      EXPECT_EQ(h1.seen - h0.seen, 1u);
      EXPECT_EQ(h1.dropped - h0.dropped, drop ? 1u : 0u);
      EXPECT_EQ(h1.passed - h0.passed, drop ? 0u : 1u);
      EXPECT_EQ(h1.unparsable - h0.unparsable, c.outcome == Outcome::kUnparsable ? 1u : 0u);
      EXPECT_EQ(h1.always_pass - h0.always_pass, c.outcome == Outcome::kAlwaysPass ? 1u : 0u);
      EXPECT_EQ(h1.lease_expired - h0.lease_expired, 0u);
      EXPECT_EQ(r1.matched_pkts - r0.matched_pkts, drop ? 1u : 0u);
      EXPECT_EQ(r1.dropped_pkts - r0.dropped_pkts, drop ? 1u : 0u);
      EXPECT_EQ(r1.matched_segs - r0.matched_segs, drop ? 1u : 0u);
      EXPECT_EQ(r1.dropped_bytes - r0.dropped_bytes, drop ? pkt.bytes.size() : 0u);
    }
    Remove(all);
  }
}

// Every prefix of a valid frame that ends inside a header the parser reads
// (VLAN tag, IPv4 header + options, IPv6 header + extension headers, the
// TCP/UDP header, the ICMP type) passes and is counted unparsable, even under
// a rule that drops everything. Prefixes start at 14 bytes: BPF_PROG_TEST_RUN
// refuses shorter frames.
TEST_F(Parse, TruncatedAtEveryLayer) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t all = Add(Rule(p, 1.0));
    ASSERT_NE(all, 0u);
    int checked = 0, refused = 0;
    for (const ParseCase& c : ParseCases()) {
      if (c.outcome == Outcome::kUnparsable) continue;
      Packet full = BuildCase(c);
      ASSERT_LE(full.parse_end, full.bytes.size()) << c.desc;
      for (size_t len = 14; len < full.parse_end; len++) {
        SCOPED_TRACE(c.desc + " truncated to " + std::to_string(len) + " of " +
                     std::to_string(full.bytes.size()) + " bytes");
        Packet cut = full;
        cut.bytes.resize(len);
        if (p != Prog::kXdp && KernelRefusesSkb(cut.bytes)) {
          refused++;
          continue;
        }
        HookCounters h0 = Totals(p);
        EXPECT_VERDICT(p, Run(p, cut), PassVerdict(p)) << "\n  frame " << Hex(cut.bytes);
        HookCounters h1 = Totals(p);
        EXPECT_EQ(h1.unparsable - h0.unparsable, 1u);
        EXPECT_EQ(h1.passed - h0.passed, 1u);
        EXPECT_EQ(h1.always_pass - h0.always_pass, 0u);
        checked++;
      }
      // The shortest complete frame is read normally.
      if (c.outcome == Outcome::kMatch && full.parse_end >= 14) {
        Packet exact = full;
        exact.bytes.resize(full.parse_end);
        SCOPED_TRACE(c.desc + " cut right after its last parsed header");
        HookCounters h0 = Totals(p);
        EXPECT_VERDICT(p, Run(p, exact), DropVerdict(p));
        EXPECT_EQ(Totals(p).unparsable - h0.unparsable, 0u);
      }
    }
    EXPECT_GT(checked, p == Prog::kXdp ? 1500 : 500);
    RecordProperty(std::string("truncations_") + ProgName(p), checked);
    RecordProperty(std::string("refused_by_kernel_") + ProgName(p), refused);
    EXPECT_EQ(Counters(all).matched_pkts, Totals(p).dropped);
    Remove(all);
  }
}

// ARP and neighbour discovery pass under every kind of rule that could
// otherwise catch them: a catch-all, an IPv6 ICMPv6 rule, a host rule on
// the ND target, and a rule with the highest priority.
TEST_F(Parse, ArpAndNeighbourDiscoveryAlwaysPass) {
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec all = Rule(p, 1.0);
    all.priority = kMaxPriority;
    RuleSpec icmp6 = Rule(p, 1.0);
    icmp6.l4proto = 58;
    RuleSpec host6 = Rule(p, 1.0);
    host6.dst = *ParseCidr("2001:db8::2/128");
    RuleSpec v6 = Rule(p, 1.0);
    v6.family = 6;
    std::vector<uint32_t> ids = {Add(all), Add(icmp6), Add(host6), Add(v6)};
    for (uint32_t id : ids) ASSERT_NE(id, 0u);
    std::vector<PacketSpec> frames = {Arp(),      Icmp6(133), Icmp6(134),
                                      Icmp6(135), Icmp6(136), Icmp6(137)};
    const uint32_t kRepeat = 1000;
    for (const PacketSpec& f : frames) {
      HookCounters h0 = Totals(p);
      RunOpts o;
      o.repeat = kRepeat;
      EXPECT_VERDICT(p, Run(p, f, o), PassVerdict(p));
      HookCounters h1 = Totals(p);
      EXPECT_EQ(h1.always_pass - h0.always_pass, kRepeat);
      EXPECT_EQ(h1.passed - h0.passed, kRepeat);
      EXPECT_EQ(h1.dropped - h0.dropped, 0u);
    }
    for (uint32_t id : ids) EXPECT_EQ(Counters(id).matched_pkts, 0u);
    // ... while an ICMPv6 echo to the same host is dropped.
    EXPECT_VERDICT(p, Run(p, Icmp6(128)), DropVerdict(p));
    for (uint32_t id : ids) Remove(id);
  }
}

}  // namespace
}  // namespace lossd::bpftest
