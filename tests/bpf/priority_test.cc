// Overlapping rules: the highest priority wins whichever index holds it (a
// dport or sport bucket, a host bucket, or the scan list) and whatever the
// insertion order; many rules on distinct ports each catch their own port.
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "harness.h"

namespace lossd::bpftest {
namespace {

class Priority : public BpfTest {};

struct Kind {
  const char* name;
  void (*apply)(RuleSpec&);
};

// Every kind matches udp 10.9.0.1:5555 -> 10.1.0.2:7000, each anchored
// differently.
const Kind kKinds[] = {
    {"dport-anchored", [](RuleSpec& s) { s.dport = *ParsePortRange("7000"); }},
    {"sport-anchored", [](RuleSpec& s) { s.sport = *ParsePortRange("5550-5560"); }},
    {"dst-host-anchored", [](RuleSpec& s) { s.dst = *ParseCidr("10.1.0.2/32"); }},
    {"src-host-anchored", [](RuleSpec& s) { s.src = *ParseCidr("10.9.0.1/32"); }},
    {"scan (src /16)", [](RuleSpec& s) { s.src = *ParseCidr("10.9.0.0/16"); }},
    {"scan (dport 6000-7999)", [](RuleSpec& s) { s.dport = *ParsePortRange("6000-7999"); }},
};
constexpr int kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);

TEST_F(Priority, HighestWinsAcrossAnchorsInAnyInsertionOrder) {
  const Prog p = Prog::kXdp;
  size_t held = HoldAttachments();
  Packet pkt = Build(Udp4("10.9.0.1", "10.1.0.2", 5555, 7000));
  std::vector<int> order(kNumKinds);
  std::iota(order.begin(), order.end(), 0);
  int configs = 0;
  // Every insertion order (720) x every winner, alternating which verdict
  // the winner carries so that a wrong winner shows in the verdict too.
  do {
    for (int winner = 0; winner < kNumKinds; winner++) {
      bool winner_drops = (configs % 2) == 0;
      std::vector<uint32_t> ids(kNumKinds, 0);
      int lower = 1;
      for (int k : order) {
        RuleSpec s = Rule(p, 0.0);
        kKinds[k].apply(s);
        bool win = k == winner;
        s.priority = win ? 100 : uint32_t(lower++ * 7 % 11);  // distinct, below 100
        s.model.p = win == winner_drops ? 1.0 : 0.0;
        ids[k] = Add(s);
        ASSERT_NE(ids[k], 0u);
      }
      SCOPED_TRACE(std::string("winner ") + kKinds[winner].name + ", config " +
                   std::to_string(configs));
      EXPECT_VERDICT(p, Run(p, pkt), winner_drops ? DropVerdict(p) : PassVerdict(p));
      for (int k = 0; k < kNumKinds; k++) {
        EXPECT_EQ(Counters(ids[k]).matched_pkts, k == winner ? 1u : 0u) << kKinds[k].name;
        Remove(ids[k]);
      }
      configs++;
      if (HasFailure()) return;
    }
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(configs, 720 * kNumKinds);
  EXPECT_EQ(inj_->Rules().size(), held);
}

TEST_F(Priority, HighestWinsAcrossAnchorsIpv6) {
  const Prog p = Prog::kTcIn;
  HoldAttachments();
  Packet pkt = Build(Tcp6("2001:db8:9::1", "2001:db8:1::2", 5555, 443, kSyn));
  std::vector<std::function<void(RuleSpec&)>> kinds = {
      [](RuleSpec& s) { s.dport = *ParsePortRange("443"); },
      [](RuleSpec& s) { s.dst = *ParseCidr("2001:db8:1::2/128"); },
      [](RuleSpec& s) { s.src = *ParseCidr("2001:db8:9::1/128"); },
      [](RuleSpec& s) { s.dst = *ParseCidr("2001:db8::/32"); },
      [](RuleSpec& s) { s.tcp_flags_mask = s.tcp_flags_value = kSyn; },
  };
  std::vector<int> order(kinds.size());
  std::iota(order.begin(), order.end(), 0);
  do {
    for (size_t winner = 0; winner < kinds.size(); winner++) {
      std::vector<uint32_t> ids(kinds.size());
      for (int k : order) {
        RuleSpec s = Rule(p, size_t(k) == winner ? 1.0 : 0.0);
        kinds[k](s);
        s.priority = size_t(k) == winner ? 50 : uint32_t(10 + k);
        ids[k] = Add(s);
        ASSERT_NE(ids[k], 0u);
      }
      EXPECT_VERDICT(p, Run(p, pkt), DropVerdict(p)) << "winner " << winner;
      for (size_t k = 0; k < kinds.size(); k++) {
        EXPECT_EQ(Counters(ids[k]).matched_pkts, k == winner ? 1u : 0u) << "rule kind " << k;
        Remove(ids[k]);
      }
      if (HasFailure()) return;
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

// More rules on one anchor (a port, a host) than its bucket holds: the
// overflow goes to the scan list, and the priority order still holds over
// both. Rules are then removed best first; each time the next best takes
// over.
TEST_F(Priority, BucketOverflowKeepsPriorityOrder) {
  const Prog p = Prog::kXdp;
  const int kRules = LOSS_BUCKET_SLOTS + 8;
  HoldAttachments();
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 1234, 80));
  struct {
    const char* name;
    void (*anchor)(RuleSpec&);
  } anchors[] = {
      {"dport 80", [](RuleSpec& s) { s.dport = *ParsePortRange("80"); }},
      {"sport 1234", [](RuleSpec& s) { s.sport = *ParsePortRange("1234"); }},
      {"dst 10.0.0.2/32", [](RuleSpec& s) { s.dst = *ParseCidr("10.0.0.2/32"); }},
      {"src 10.0.0.1/32", [](RuleSpec& s) { s.src = *ParseCidr("10.0.0.1/32"); }},
  };
  std::mt19937 rng(12345);
  for (int round = 0; round < 12; round++) {
    const auto& a = anchors[round % 4];
    SCOPED_TRACE(std::string(a.name) + ", round " + std::to_string(round));
    std::vector<uint32_t> prio(kRules);
    std::iota(prio.begin(), prio.end(), 1);
    std::shuffle(prio.begin(), prio.end(), rng);
    std::vector<std::pair<uint32_t, uint32_t>> by_prio;  // priority, id
    std::map<uint32_t, bool> drops;
    for (int i = 0; i < kRules; i++) {
      RuleSpec s = Rule(p);
      a.anchor(s);
      if (i % 3 == 1) s.l4proto = 17;  // a mix of specific and generic rules
      s.priority = prio[i] * 10;
      bool drop = (prio[i] + round) % 2 == 0;
      s.model.p = drop ? 1.0 : 0.0;
      uint32_t id = Add(s);
      ASSERT_NE(id, 0u);
      by_prio.push_back({s.priority, id});
      drops[id] = drop;
    }
    std::sort(by_prio.rbegin(), by_prio.rend());
    std::map<uint32_t, uint64_t> expect;
    for (size_t w = 0; w < by_prio.size(); w++) {
      uint32_t id = by_prio[w].second;
      EXPECT_VERDICT(p, Run(p, pkt), drops[id] ? DropVerdict(p) : PassVerdict(p))
          << "expected winner: priority " << by_prio[w].first;
      expect[id]++;
      for (size_t j = w; j < by_prio.size(); j++) {
        uint32_t other = by_prio[j].second;
        EXPECT_EQ(Counters(other).matched_pkts, expect[other])
            << "rule with priority " << by_prio[j].first << " while " << by_prio[w].first
            << " should win";
      }
      Remove(id);
      if (HasFailure()) return;
    }
    EXPECT_VERDICT(p, Run(p, pkt), PassVerdict(p));
  }
}

// Same priority: whichever rule wins, it wins every time.
TEST_F(Priority, EqualPriorityIsDeterministic) {
  const Prog p = Prog::kTcIn;
  for (int order = 0; order < 2; order++) {
    RuleSpec port = Rule(p, 0.0), scan = Rule(p, 1.0);
    port.dport = *ParsePortRange("80");
    scan.src = *ParseCidr("10.0.0.0/8");
    port.priority = scan.priority = 7;
    uint32_t a = Add(order ? scan : port), b = Add(order ? port : scan);
    ASSERT_NE(a, 0u);
    ASSERT_NE(b, 0u);
    RunOpts o;
    o.repeat = 1000;
    Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 80), o);
    RuleCounters ca = Counters(a), cb = Counters(b);
    EXPECT_EQ(ca.matched_pkts + cb.matched_pkts, 1000u);
    EXPECT_TRUE(ca.matched_pkts == 1000 || cb.matched_pkts == 1000)
        << ca.matched_pkts << " vs " << cb.matched_pkts;
    Remove(a);
    Remove(b);
  }
}

// 10,000 rules on distinct destination ports: each packet is caught by the
// rule of its own port and by no other.
TEST_F(Priority, TenThousandRulesOnDistinctPorts) {
  const Prog p = Prog::kXdp;
  const int kRules = 10000;
  const uint16_t kBase = 20000;
  std::vector<uint32_t> ids(kRules);
  for (int i = 0; i < kRules; i++) {
    RuleSpec s = Rule(p, i % 7 == 3 ? 1.0 : 0.0);
    s.l4proto = 17;
    s.dport.lo = s.dport.hi = uint16_t(kBase + i);
    ids[i] = Add(s);
    ASSERT_NE(ids[i], 0u) << "rule " << i;
  }
  EXPECT_EQ(inj_->Rules().size(), size_t(kRules));
  std::vector<uint64_t> sent(kRules, 0);
  std::mt19937 rng(7);
  std::vector<int> probe = {0, 1, 3, kRules / 2, kRules - 2, kRules - 1};
  for (int i = 0; i < 300; i++) probe.push_back(int(rng() % kRules));
  for (int i : probe) {
    int v = Run(p, Udp4("10.0.0.1", "10.0.0.2", 999, uint16_t(kBase + i), 16));
    EXPECT_VERDICT(p, v, i % 7 == 3 ? DropVerdict(p) : PassVerdict(p)) << "dport " << kBase + i;
    sent[i]++;
  }
  // Ports next to the range and TCP to a covered port match nothing.
  EXPECT_VERDICT(p, Run(p, Udp4("10.0.0.1", "10.0.0.2", 999, kBase - 1)), PassVerdict(p));
  EXPECT_VERDICT(p, Run(p, Udp4("10.0.0.1", "10.0.0.2", 999, kBase + kRules)), PassVerdict(p));
  EXPECT_VERDICT(p, Run(p, Tcp4("10.0.0.1", "10.0.0.2", 999, kBase + 3, kSyn)), PassVerdict(p));
  uint64_t total = 0;
  for (int i = 0; i < kRules; i++) {
    RuleCounters c = Counters(ids[i]);
    EXPECT_EQ(c.matched_pkts, sent[i]) << "rule for dport " << kBase + i;
    total += c.matched_pkts;
  }
  EXPECT_EQ(total, probe.size());
  EXPECT_EQ(Totals(p).seen, probe.size() + 3);
}

// The scan list holds LOSS_SCAN_MAX rules; one more is refused with
// RESOURCE_EXHAUSTED and leaves the others working.
TEST_F(Priority, ScanListCapacity) {
  const Prog p = Prog::kXdp;
  std::vector<uint32_t> ids;
  for (int i = 0; i < LOSS_SCAN_MAX; i++) {
    RuleSpec s = Rule(p, 1.0);
    s.src = *ParseCidr("10." + std::to_string(i) + ".0.0/16");
    ids.push_back(Add(s));
    ASSERT_NE(ids.back(), 0u) << i;
  }
  RuleSpec extra = Rule(p, 1.0);
  extra.src = *ParseCidr("11.0.0.0/8");
  auto r = inj_->Add(extra);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted) << r.status().ToString();
  EXPECT_VERDICT(p, Run(p, Udp4("11.0.0.1", "10.0.0.2", 1, 2)), PassVerdict(p));
  for (int i = 0; i < LOSS_SCAN_MAX; i += 9) {
    EXPECT_VERDICT(p, Run(p, Udp4("10." + std::to_string(i) + ".3.4", "1.2.3.4", 1, 2)),
                   DropVerdict(p));
    EXPECT_EQ(Counters(ids[i]).matched_pkts, 1u);
  }
  // A freed place can be taken again.
  Remove(ids[5]);
  uint32_t again = Add(extra);
  ASSERT_NE(again, 0u);
  EXPECT_VERDICT(p, Run(p, Udp4("11.0.0.1", "10.0.0.2", 1, 2)), DropVerdict(p));
  EXPECT_VERDICT(p, Run(p, Udp4("10.5.0.1", "10.0.0.2", 1, 2)), PassVerdict(p));
}

}  // namespace
}  // namespace lossd::bpftest
