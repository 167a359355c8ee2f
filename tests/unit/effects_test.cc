// The effect tracker's pure parts: which recorded drop covers a sequence
// number (mod 2^32, newest first, not after the event), the drop log's key
// of a flow's data, and the fixed-bucket distribution of recovery times.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "effects/effects.h"

namespace lossd {
namespace {

loss_drop_range Range(uint32_t rule, uint64_t t, uint32_t seq, uint32_t len, uint16_t segs = 1) {
  loss_drop_range r{};
  r.rule_id = rule;
  r.time_ns = t;
  r.seq = seq;
  r.len = len;
  r.segs = segs;
  return r;
}

TEST(NewestCovering, CoversFromFirstByteToBeforeTheEnd) {
  FlowDrops d;
  d.total = 1;
  d.ranges = {Range(7, 100, 5000, 1000, 1)};
  EXPECT_FALSE(NewestCovering(d, 4999, 1000));
  auto r = NewestCovering(d, 5000, 1000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rule_id, 7u);
  EXPECT_EQ(r->time_ns, 100u);
  EXPECT_EQ(r->seq, 5000u);
  EXPECT_EQ(r->len, 1000u);
  EXPECT_EQ(r->segs, 1u);
  EXPECT_TRUE(NewestCovering(d, 5999, 1000));
  EXPECT_FALSE(NewestCovering(d, 6000, 1000));
}

TEST(NewestCovering, WrapsModTwoToThe32) {
  FlowDrops d;
  d.ranges = {Range(1, 10, 0xfffffe00u, 0x400)};  // 0xfffffe00 .. 0x1ff
  EXPECT_TRUE(NewestCovering(d, 0xffffffffu, 10));
  EXPECT_TRUE(NewestCovering(d, 0, 10));
  EXPECT_TRUE(NewestCovering(d, 0x1ff, 10));
  EXPECT_FALSE(NewestCovering(d, 0x200, 10));
  EXPECT_FALSE(NewestCovering(d, 0xfffffdffu, 10));
}

TEST(NewestCovering, NewestDropAtOrBeforeTheEventWins) {
  FlowDrops d;
  // The same range dropped by rule 1, then (its resend) by rule 2, at 100 and 300.
  d.ranges = {Range(1, 100, 1000, 500), Range(3, 200, 9000, 100), Range(2, 300, 1000, 500)};
  auto r = NewestCovering(d, 1200, 400);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rule_id, 2u);
  r = NewestCovering(d, 1200, 299);  // before the second drop: the first
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rule_id, 1u);
  r = NewestCovering(d, 1200, 300);  // at it: the second
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rule_id, 2u);
  EXPECT_FALSE(NewestCovering(d, 1200, 99));  // before any drop
  EXPECT_FALSE(NewestCovering(FlowDrops{}, 1200, 400));
}

TEST(NewestCovering, ZeroLengthCoversNothing) {
  FlowDrops d;
  d.ranges = {Range(1, 1, 42, 0)};
  EXPECT_FALSE(NewestCovering(d, 42, 10));
}

TEST(SentDropKey, IsTheWireDirectionLocalToRemote) {
  obs_tuple t{};
  t.saddr[0] = 0x0100000a;  // 10.0.0.1, network order
  t.daddr[0] = 0x0200000a;
  t.sport = 40000;
  t.dport = 80;
  t.family = AF_INET;
  loss_drop_key k = SentDropKey(t);
  EXPECT_EQ(k.saddr[0], t.saddr[0]);
  EXPECT_EQ(k.daddr[0], t.daddr[0]);
  EXPECT_EQ(k.sport, 40000);
  EXPECT_EQ(k.dport, 80);
  EXPECT_EQ(k.family, AF_INET);
  EXPECT_EQ(k._pad, 0);
  EXPECT_EQ(k.saddr[1] | k.saddr[2] | k.saddr[3] | k.daddr[1] | k.daddr[2] | k.daddr[3], 0u);
}

TEST(DurationHist, BucketsAreUpperBoundInclusive) {
  DurationHist h;
  const uint64_t ms = 1000000;
  h.Add(0);            // bucket 0 (<= 100 us)
  h.Add(ms / 10);      // bucket 0
  h.Add(ms / 10 + 1);  // bucket 1 (<= 200 us)
  h.Add(200 * ms);     // <= 200 ms
  h.Add(11000 * ms);   // above the last bound
  EXPECT_EQ(h.count, 5u);
  EXPECT_EQ(h.sum_ns, 0 + ms / 10 + ms / 10 + 1 + 200 * ms + 11000 * ms);
  EXPECT_EQ(h.max_ns, 11000 * ms);
  EXPECT_EQ(h.counts[0], 2u);
  EXPECT_EQ(h.counts[1], 1u);
  size_t i200 = 0;
  while (DurationHist::kBoundsNs[i200] != 200 * ms) i200++;
  EXPECT_EQ(h.counts[i200], 1u);
  EXPECT_EQ(h.counts[DurationHist::kBounds], 1u);
  uint64_t n = 0;
  for (uint64_t c : h.counts) n += c;
  EXPECT_EQ(n, h.count);
  for (size_t i = 1; i < DurationHist::kBounds; i++)
    EXPECT_LT(DurationHist::kBoundsNs[i - 1], DurationHist::kBoundsNs[i]);
}


TEST(ResendDsacked, TheNewestOverlappingResendModTwoToThe32) {
  using R = EffectTracker::Resend;
  std::vector<R> kept = {R{1000, 1448, OBS_RTX_FAST, {1}}, R{5000, 2896, OBS_RTX_RTO, {2}},
                         R{5000, 1448, OBS_RTX_TLP, {3}}, R{0xfffffe00u, 1448, OBS_RTX_LOSS, {}}};
  auto type = [&](uint32_t start, uint32_t end) {
    const R* r = EffectTracker::ResendDsacked(kept, start, end);
    return r ? r->type : uint32_t(OBS_RTX_MAX);
  };
  EXPECT_EQ(type(1000, 2448), uint32_t(OBS_RTX_FAST));
  EXPECT_EQ(type(2000, 2100), uint32_t(OBS_RTX_FAST));  // inside
  EXPECT_EQ(type(5000, 6448), uint32_t(OBS_RTX_TLP));   // the newest of two
  EXPECT_EQ(EffectTracker::ResendDsacked(kept, 5000, 6448)->rules, std::vector<uint32_t>{3});
  EXPECT_EQ(type(6448, 7896), uint32_t(OBS_RTX_RTO));  // its second segment
  EXPECT_EQ(type(2448, 5000), uint32_t(OBS_RTX_MAX));  // between: none
  EXPECT_EQ(type(100, 200), uint32_t(OBS_RTX_LOSS));   // past the wrap
  EXPECT_EQ(EffectTracker::ResendDsacked({}, 1000, 2448), nullptr);
}

}  // namespace
}  // namespace lossd
