// Anchor placement: which index a rule lands in, ordering, capacity.
#include "injector/anchor_index.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

RuleSpec Rule(const std::string& dport, uint32_t prio = 0) {
  RuleSpec s;
  s.iface = "eth0";
  if (!dport.empty()) s.dport = *ParsePortRange(dport);
  s.priority = prio;
  return s;
}

AnchorKey Dport(uint16_t p) {
  AnchorKey k;
  k.kind = AnchorKey::kDport;
  k.port = p;
  return k;
}

TEST(AnchorIndex, PortRuleGoesToPortList) {
  AnchorIndex idx;
  auto keys = idx.Insert(5, Rule("8080"));
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0], Dport(8080));
  EXPECT_EQ(idx.port_rules(), 1u);
  EXPECT_EQ(idx.List(Dport(8080)).size(), 1u);
  EXPECT_TRUE(idx.scan().empty());
}

TEST(AnchorIndex, SmallRangeExpandsWideRangeScans) {
  AnchorIndex idx;
  auto small = idx.Insert(1, Rule("100-163"));  // 64 ports
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size(), 64u);
  auto wide = idx.Insert(2, Rule("100-164"));  // 65 ports: too many
  ASSERT_TRUE(wide.ok());
  ASSERT_EQ(wide->size(), 1u);
  EXPECT_EQ((*wide)[0].kind, AnchorKey::kScan);
  EXPECT_EQ(idx.scan().size(), 1u);
}

TEST(AnchorIndex, SourcePortThenHostThenScan) {
  AnchorIndex idx;
  RuleSpec s;
  s.iface = "eth0";
  s.sport = *ParsePortRange("53");
  EXPECT_EQ((*idx.Insert(1, s))[0].kind, AnchorKey::kSport);
  RuleSpec h;
  h.iface = "eth0";
  h.dst = *ParseCidr("fd00::1");
  EXPECT_EQ((*idx.Insert(2, h))[0].kind, AnchorKey::kDhost);
  EXPECT_EQ(idx.dhost_rules(), 1u);
  EXPECT_EQ(idx.shost_rules(), 0u);
  RuleSpec net;
  net.iface = "eth0";
  net.src = *ParseCidr("10.0.0.0/8");
  EXPECT_EQ((*idx.Insert(3, net))[0].kind, AnchorKey::kScan);
}

TEST(AnchorIndex, ListsSortedByPriorityThenSlot) {
  AnchorIndex idx;
  ASSERT_TRUE(idx.Insert(9, Rule("80", 1)).ok());
  ASSERT_TRUE(idx.Insert(3, Rule("80", 5)).ok());
  ASSERT_TRUE(idx.Insert(4, Rule("80", 1)).ok());
  const auto& l = idx.List(Dport(80));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].slot, 3u);
  EXPECT_EQ(l[1].slot, 4u);
  EXPECT_EQ(l[2].slot, 9u);
}

TEST(AnchorIndex, FullBucketFallsBackThenExhausts) {
  AnchorIndex idx;
  uint32_t slot = 0;
  for (int i = 0; i < LOSS_BUCKET_SLOTS; i++) ASSERT_TRUE(idx.Insert(slot++, Rule("80")).ok());
  // The 17th rule on port 80 has no other anchor: scan list.
  auto k = idx.Insert(slot++, Rule("80"));
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)[0].kind, AnchorKey::kScan);
  for (int i = 1; i < LOSS_SCAN_MAX; i++) ASSERT_TRUE(idx.Insert(slot++, Rule("")).ok());
  auto full = idx.Insert(slot++, Rule(""));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted);
  EXPECT_NE(full.status().message().find("narrow the rule"), std::string::npos);
}

TEST(AnchorIndex, RemoveRestoresCountsAndLists) {
  AnchorIndex idx;
  ASSERT_TRUE(idx.Insert(1, Rule("80")).ok());
  ASSERT_TRUE(idx.Insert(2, Rule("")).ok());
  auto keys = idx.Remove(1);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(idx.port_rules(), 0u);
  EXPECT_TRUE(idx.List(Dport(80)).empty());
  EXPECT_EQ(idx.Remove(2)[0].kind, AnchorKey::kScan);
  EXPECT_TRUE(idx.scan().empty());
  EXPECT_TRUE(idx.Remove(77).empty());
  // The slot is free again.
  EXPECT_TRUE(idx.Insert(1, Rule("80")).ok());
}

TEST(AnchorIndex, TenThousandDistinctPortsEachOwnList) {
  AnchorIndex idx;
  for (uint32_t i = 0; i < 10000; i++)
    ASSERT_TRUE(idx.Insert(i, Rule(std::to_string(10000 + i))).ok());
  EXPECT_EQ(idx.port_rules(), 10000u);
  EXPECT_EQ(idx.List(Dport(15000)).size(), 1u);
  EXPECT_EQ(idx.List(Dport(15000))[0].slot, 5000u);
}

}  // namespace
}  // namespace lossd
