// RtxWindows (daemon/observer/windows.h): retransmissions by the kernel's
// time, each window closed once the reader has read past its end.
#include "observer/windows.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kStart = 1000 * kMs;

TEST(RtxWindows, EventsFallInTheWindowOfTheirStampNotOfTheirArrival) {
  RtxWindows w(kStart, 200 * kMs, 5000 * kMs);
  // A reader a second late hands over a second of events at once.
  for (int i = 0; i < 10; i++) w.Add(kStart + i * 100 * kMs + kMs, OBS_RTX_FAST, 1, 7, {3});
  auto closed = w.TakeClosed(kStart + 1000 * kMs, kStart + 1001 * kMs);
  ASSERT_EQ(closed.size(), 5u);
  for (size_t i = 0; i < closed.size(); i++) {
    EXPECT_EQ(closed[i].start_ns, kStart + i * 200 * kMs);
    EXPECT_EQ(closed[i].by_type[OBS_RTX_FAST], 2u) << i;
    EXPECT_EQ(closed[i].by_flow.at(7), 2u);
    EXPECT_EQ(closed[i].by_rule.at(3), 2u);
    EXPECT_EQ(closed[i].late, 0u);
  }
}

TEST(RtxWindows, AWindowWaitsForTheReader) {
  RtxWindows w(kStart, 200 * kMs, 5000 * kMs);
  w.Add(kStart + 10 * kMs, OBS_RTX_RTO, 2, 1, {});
  // Its end has passed, but the reader has not read that far: held.
  EXPECT_TRUE(w.TakeClosed(kStart + 150 * kMs, kStart + 400 * kMs).empty());
  w.Add(kStart + 190 * kMs, OBS_RTX_RTO, 3, 1, {});
  auto closed = w.TakeClosed(kStart + 390 * kMs, kStart + 400 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].by_type[OBS_RTX_RTO], 5u);
  EXPECT_EQ(w.next_end(), kStart + 400 * kMs);
}

TEST(RtxWindows, EmptyWindowsAreWrittenTooAndNeverAhead) {
  RtxWindows w(kStart, 100 * kMs, 5000 * kMs);
  // The reader's mark may be ahead of now (UINT64_MAX once it stopped): now bounds it.
  auto closed = w.TakeClosed(UINT64_MAX, kStart + 350 * kMs);
  ASSERT_EQ(closed.size(), 3u);
  for (auto& c : closed) EXPECT_EQ(c.by_flow.size(), 0u);
  EXPECT_TRUE(w.TakeClosed(UINT64_MAX, kStart + 399 * kMs).empty());
}

TEST(RtxWindows, AReaderTooLateStillLosesNothing) {
  RtxWindows w(kStart, 100 * kMs, 1000 * kMs);
  // The reader is stuck: after the hold a window is written without it.
  auto closed = w.TakeClosed(0, kStart + 1150 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  // An event for that window, read afterwards: counted in the oldest open one, as late.
  w.Add(kStart + 50 * kMs, OBS_RTX_TLP, 4, 9, {});
  w.Add(kStart + 150 * kMs, OBS_RTX_TLP, 1, 9, {});
  closed = w.TakeClosed(kStart + 200 * kMs, kStart + 1200 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].start_ns, kStart + 100 * kMs);
  EXPECT_EQ(closed[0].by_type[OBS_RTX_TLP], 5u);
  EXPECT_EQ(closed[0].late, 4u);
}

TEST(RtxWindows, EventsFromBeforeTheStreamAreNotCounted) {
  RtxWindows w(kStart, 100 * kMs, 1000 * kMs);
  w.Add(kStart - 1, OBS_RTX_FAST, 1, 1, {});
  auto closed = w.TakeClosed(kStart + 100 * kMs, kStart + 100 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].by_type[OBS_RTX_FAST], 0u);
}

}  // namespace
}  // namespace lossd
