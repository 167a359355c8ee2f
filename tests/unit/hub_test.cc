// The observer hub: sequence numbers, bounded per-subscriber queues, exact
// loss accounting, a slow subscriber never holding back the others.
#include "observer/hub.h"

#include <gtest/gtest.h>

#include <thread>

namespace lossd {
namespace {

ObsEvent Ev(uint32_t segs) {
  ObsEvent e;
  e.data.ev.kind = OBS_EV_RETRANSMIT;
  e.data.ev.segs = segs;
  return e;
}

TEST(Hub, SequenceNumbersWithoutGaps) {
  Hub hub;
  auto s = hub.Subscribe(16);
  for (uint32_t i = 0; i < 10; i++) hub.Publish(Ev(i));
  for (uint64_t want = 1; want <= 10; want++) {
    auto e = s->Next(std::chrono::milliseconds(10));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->seq, want);
    EXPECT_EQ(e->data.ev.segs, want - 1);
  }
  EXPECT_FALSE(s->Next(std::chrono::milliseconds(1)).has_value());
  EXPECT_EQ(hub.published(), 10u);
}

TEST(Hub, FullQueueCountsLossPerSubscriber) {
  Hub hub;
  auto slow = hub.Subscribe(4);
  auto fast = hub.Subscribe(1000);
  for (int i = 0; i < 100; i++) hub.Publish(Ev(1));
  EXPECT_EQ(slow->lost(), 96u);
  EXPECT_EQ(fast->lost(), 0u);
  int got = 0;
  while (fast->Next(std::chrono::milliseconds(1))) got++;
  EXPECT_EQ(got, 100);
  // The slow one kept the first four; a gap in seq tells it what it missed.
  uint64_t last = 0;
  while (auto e = slow->Next(std::chrono::milliseconds(1))) last = e->seq;
  EXPECT_EQ(last, 4u);
  EXPECT_EQ(slow->delivered() + slow->lost(), hub.published());
  EXPECT_EQ(fast->delivered() + fast->lost(), hub.published());
}

TEST(Hub, ProducerNeverBlocksOnAStalledConsumer) {
  Hub hub;
  auto stalled = hub.Subscribe(1);  // never read
  auto reader = hub.Subscribe(1 << 20);
  std::thread producer([&] {
    for (int i = 0; i < 200000; i++) hub.Publish(Ev(1));
  });
  uint64_t got = 0;
  while (got < 200000) {
    if (reader->Next(std::chrono::milliseconds(1000)))
      got++;
    else
      break;
  }
  producer.join();
  EXPECT_EQ(got + reader->lost(), 200000u);
  EXPECT_EQ(stalled->lost(), 200000u - 1);
}

TEST(Hub, BatchesKeepOrderFiltersAndLossAccounting) {
  Hub hub;
  auto odd = hub.Subscribe(3, [](const ObsEvent& e) { return e.data.ev.segs % 2 == 1; });
  auto all = hub.Subscribe(100);
  std::vector<ObsEvent> batch;
  for (uint32_t i = 0; i < 10; i++) batch.push_back(Ev(i));
  hub.PublishAll(&batch);
  EXPECT_EQ(hub.published(), 10u);
  // 5 odd events wanted, 3 fit, 2 lost; the even ones are neither.
  EXPECT_EQ(odd->lost(), 2u);
  auto got = odd->NextBatch(100, std::chrono::milliseconds(10));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].seq, 2u);
  EXPECT_EQ(got[1].seq, 4u);
  EXPECT_EQ(got[2].seq, 6u);
  // NextBatch takes at most max, in order, and the rest stays queued.
  auto first = all->NextBatch(4, std::chrono::milliseconds(10));
  auto rest = all->NextBatch(100, std::chrono::milliseconds(10));
  ASSERT_EQ(first.size(), 4u);
  ASSERT_EQ(rest.size(), 6u);
  EXPECT_EQ(first.back().seq + 1, rest.front().seq);
  EXPECT_EQ(rest.back().seq, 10u);
  EXPECT_EQ(all->delivered(), 10u);
  EXPECT_TRUE(all->NextBatch(100, std::chrono::milliseconds(1)).empty());
  // Single and batched publishing share one sequence.
  hub.Publish(Ev(1));
  EXPECT_EQ(all->Next(std::chrono::milliseconds(10))->seq, 11u);
}

TEST(Hub, UnsubscribeAndCloseWakeReaders) {
  Hub hub;
  auto s = hub.Subscribe(8);
  std::thread t([&] { EXPECT_FALSE(s->Next(std::chrono::seconds(30)).has_value()); });
  hub.Unsubscribe(s);
  t.join();
  hub.Publish(Ev(1));
  EXPECT_EQ(s->delivered() + s->lost(), 0u);  // not offered after unsubscribing
}

}  // namespace
}  // namespace lossd
