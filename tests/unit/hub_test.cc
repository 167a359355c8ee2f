// The observer hub: sequence numbers, bounded per-subscriber queues, exact
// loss accounting, a slow subscriber never holding back the others.
#include "observer/hub.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
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
  auto odd = hub.Subscribe(6, [](const obs_event& e) { return e.segs % 2 == 1; });
  auto all = hub.Subscribe(100);
  std::vector<ObsEvent> batch;
  for (uint32_t i = 0; i < 10; i++) batch.push_back(Ev(i));
  hub.PublishAll(&batch);
  EXPECT_EQ(hub.published(), 10u);
  // The queue takes 6 events before any filter runs; 4 did not fit (lost
  // before the filter: a filtered subscription says so).
  EXPECT_EQ(odd->lost(), 4u);
  EXPECT_TRUE(odd->filtered());
  EXPECT_FALSE(all->filtered());
  auto got = odd->NextBatch(100, std::chrono::milliseconds(10));
  ASSERT_EQ(got.size(), 3u);  // the odd ones of the 6 queued
  EXPECT_EQ(got[0].seq, 2u);
  EXPECT_EQ(got[1].seq, 4u);
  EXPECT_EQ(got[2].seq, 6u);
  EXPECT_EQ(odd->delivered(), 3u);
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

// Issue 10 item 7: a subscriber's filter ran on the publisher (the ring
// reader) thread, so one expensive filter slowed every subscriber. It runs on
// the thread that takes the events; the publisher checks only the kind.
TEST(Hub, FiltersRunOnTheSubscribersThreadKindsAtThePublisher) {
  Hub hub;
  std::mutex mu;
  std::set<std::thread::id> filter_threads;
  SubscribeOptions o;
  o.queue = 100;
  o.kinds = KindBit(OBS_EV_RETRANSMIT);
  o.filter = [&](const obs_event& e) {
    std::lock_guard<std::mutex> lock(mu);
    filter_threads.insert(std::this_thread::get_id());
    return e.segs != 3;
  };
  auto s = *hub.Subscribe(std::move(o));
  std::thread publisher([&] {
    std::vector<ObsEvent> batch;
    for (uint32_t i = 0; i < 6; i++) batch.push_back(Ev(i));
    ObsEvent close = Ev(9);
    close.data.ev.kind = OBS_EV_FLOW_CLOSE;
    batch.push_back(close);  // another kind: neither queued nor lost
    hub.PublishAll(&batch);
    hub.Publish(close);
  });
  publisher.join();
  EXPECT_TRUE(filter_threads.empty()) << "the publisher ran the filter";
  EXPECT_EQ(s->lost(), 0u);
  auto got = s->NextBatch(100, std::chrono::milliseconds(10));
  ASSERT_EQ(got.size(), 5u);  // 0 1 2 4 5
  EXPECT_EQ(got[3].data.ev.segs, 4u);
  ASSERT_EQ(filter_threads.size(), 1u);
  EXPECT_EQ(*filter_threads.begin(), std::this_thread::get_id());
  EXPECT_TRUE(s->NextBatch(100, std::chrono::milliseconds(1)).empty());  // the closes never came
}

// Issue 10 item 6: the budget every client stream opens against.
// One client cannot take the whole budget: half the streams and half the
// memory each; the unprivileged together three quarters; root the rest.
TEST(StreamBudget, EachClientAShareAndRootTheReserve) {
  StreamLimits l;
  l.max_streams = 8;
  l.max_streams_per_kind = 8;
  l.max_queue_bytes = 1000;
  StreamBudget b(l);
  StreamPeer alice{"uid:1000", "uid 1000", false}, bob{"uid:1001", "uid 1001", false},
      carol{"ip:10.0.0.7", "10.0.0.7", false}, root{"uid:0", "uid 0", true};
  std::vector<StreamBudget::Ticket> held;
  for (int i = 0; i < 4; i++) {
    auto t = b.Open("WatchRetransmits", 10, alice);
    ASSERT_TRUE(t.ok()) << i << t.status().message();
    held.push_back(std::move(*t));
  }
  auto fifth = b.Open("WatchRetransmits", 10, alice);
  ASSERT_FALSE(fifth.ok());
  EXPECT_EQ(fifth.status().code(), Code::kResourceExhausted);
  EXPECT_NE(fifth.status().message().find("this client (uid 1000) holds 4 streams, its share is 4"),
            std::string::npos)
      << fifth.status().message();
  EXPECT_EQ(b.open_by("uid:1000"), 4u);
  // A second client still gets streams, up to three quarters together (6).
  for (int i = 0; i < 2; i++) {
    auto t = b.Open("WatchFlows", 10, bob);
    ASSERT_TRUE(t.ok()) << t.status().message();
    held.push_back(std::move(*t));
  }
  auto third = b.Open("WatchFlows", 10, carol);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("the rest is root's"), std::string::npos)
      << third.status().message();
  // Root: no share, and the reserve.
  auto r1 = b.Open("WatchFlows", 10, root), r2 = b.Open("WatchFlows", 10, root);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(b.open(), 8u);
  held.clear();  // given back, per client too
  EXPECT_EQ(b.open_by("uid:1000"), 0u);
  // Memory: half of it each.
  auto big = b.Open("WatchAggregates", 500, carol);
  ASSERT_TRUE(big.ok());
  auto more = b.Open("WatchAggregates", 1, carol);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("half of lossd --max-stream-memory"), std::string::npos)
      << more.status().message();
  auto bobs = b.Open("WatchAggregates", 240, bob);  // 740 of 750 for the unprivileged
  ASSERT_TRUE(bobs.ok());
  auto over = b.Open("WatchAggregates", 11, alice);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("the rest is root's"), std::string::npos);
  // An in-process consumer (no peer key) is not counted per client.
  EXPECT_TRUE(b.Open("WatchAggregates", 11, StreamPeer{}).ok());
}

TEST(StreamBudget, CountsPerKindMemoryAndQueueLength) {
  StreamLimits l;
  l.max_streams = 3;
  l.max_streams_per_kind = 2;
  l.max_queue = 1000;
  l.max_queue_bytes = 10 * Subscription::QueueBytes(1000);
  StreamBudget b(l);
  EXPECT_EQ(*b.QueueLength(0, 65536, "queue"), 1000u);  // the default, clamped
  EXPECT_EQ(*b.QueueLength(10, 65536, "queue"), 10u);
  auto big = b.QueueLength(1001, 65536, "queue");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kInvalidArgument);
  EXPECT_NE(big.status().message().find("--max-queue"), std::string::npos);
  {
    auto a1 = b.Open("WatchRetransmits", 100);
    auto a2 = b.Open("WatchRetransmits", 100);
    ASSERT_TRUE(a1.ok() && a2.ok());
    auto a3 = b.Open("WatchRetransmits", 100);
    ASSERT_FALSE(a3.ok());
    EXPECT_EQ(a3.status().code(), Code::kResourceExhausted);
    EXPECT_NE(a3.status().message().find("--max-streams-per-kind"), std::string::npos);
    auto f1 = b.Open("WatchFlows", 100);
    ASSERT_TRUE(f1.ok());
    auto f2 = b.Open("WatchFlows", 100);
    ASSERT_FALSE(f2.ok());
    EXPECT_NE(f2.status().message().find("--max-streams)"), std::string::npos);
    EXPECT_EQ(b.open(), 3u);
    EXPECT_EQ(b.open("WatchRetransmits"), 2u);
    EXPECT_EQ(b.queue_bytes(), 300u);
  }
  EXPECT_EQ(b.open(), 0u);  // the tickets gave their share back
  EXPECT_EQ(b.queue_bytes(), 0u);
  auto huge = b.Open("WatchAggregates", l.max_queue_bytes + 1);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Code::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("--max-stream-memory"), std::string::npos);
  EXPECT_EQ(b.open(), 0u);
  // Through the hub: a client stream takes a ticket, an in-process one does not.
  Hub hub;
  hub.SetBudget(&b);
  SubscribeOptions o;
  o.queue = 1000;
  o.stream = "WatchRetransmits";
  auto s1 = hub.Subscribe(o);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(b.queue_bytes(), Subscription::QueueBytes(1000));
  auto internal = hub.Subscribe(1 << 20);
  EXPECT_EQ(b.open(), 1u);
  hub.Unsubscribe(*s1);
  s1 = Status::Ok();
  EXPECT_EQ(b.open(), 0u);
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

// The RAII hold a client stream has on the hub: subscribed, budgeted (its own
// queue too) and counted while it lives; released, with its count, when it goes.
TEST(StreamSubscription, SubscribedBudgetedAndCountedWhileItLives) {
  StreamBudget b(StreamLimits{});
  Hub hub;
  hub.SetBudget(&b);
  std::atomic<int> subscribers{0};
  {
    StreamOptions o;
    o.subscribe.queue = 100;
    o.subscribe.stream = "WatchRetransmits";
    o.waiting = 50;
    o.counted_in = &subscribers;
    auto s = hub.OpenStream(std::move(o));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(subscribers, 1);
    EXPECT_EQ(b.open("WatchRetransmits"), 1u);
    EXPECT_EQ(b.queue_bytes(), Subscription::QueueBytes(100) + Subscription::QueueBytes(50));
    hub.Publish(Ev(3));
    auto e = (*s)->Next(std::chrono::milliseconds(10));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->data.ev.segs, 3u);
    // Moved (as Result hands it out): still one subscription, counted once.
    StreamSubscription moved(std::move(*s));
    EXPECT_EQ(subscribers, 1);
    hub.Publish(Ev(4));
    EXPECT_EQ(moved->Next(std::chrono::milliseconds(10))->data.ev.segs, 4u);
  }
  EXPECT_EQ(subscribers, 0);
  EXPECT_EQ(b.open(), 0u);
  EXPECT_EQ(b.queue_bytes(), 0u);
  // Refused by the budget: nothing held, nothing counted.
  StreamLimits one;
  one.max_streams = 1;
  StreamBudget tight(one);
  hub.SetBudget(&tight);
  StreamOptions o;
  o.subscribe.stream = "WatchStalls";
  o.counted_in = &subscribers;
  auto first = hub.OpenStream(o);
  ASSERT_TRUE(first.ok());
  auto second = hub.OpenStream(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(subscribers, 1);
  // Not counted unless asked (WatchFlows, TraceFlow).
  Hub other;
  auto third = other.OpenStream(StreamOptions{});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(subscribers, 1);
}

TEST(StreamSubscription, LossesBySourceOnceEach) {
  Hub hub;
  uint64_t ring = 5;  // lost before the stream opened: not its loss
  hub.SetRingLost([&] { return ring; });
  StreamOptions o;
  o.subscribe.queue = 4;
  o.waiting = 2;
  auto s = hub.OpenStream(std::move(o));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->TakeLosses().empty());
  for (int i = 0; i < 10; i++) hub.Publish(Ev(i));  // 4 queued, 6 lost at the hub
  s->Take(100, std::chrono::milliseconds(10));      // 2 wait, 2 find no room
  EXPECT_EQ(s->waiting().size(), 2u);
  EXPECT_EQ(s->waiting().front().data.ev.segs, 0u);
  ring = 8;
  auto losses = s->TakeLosses();
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_EQ(losses[0].source, LossSource::kKernelRing);
  EXPECT_EQ(losses[0].count, 3u);
  EXPECT_EQ(losses[1].source, LossSource::kSubscriber);  // unfiltered: every one was wanted
  EXPECT_EQ(losses[1].count, 6u);
  EXPECT_EQ(losses[2].source, LossSource::kSubscriber);  // the stream's own queue
  EXPECT_EQ(losses[2].count, 2u);
  EXPECT_TRUE(s->TakeLosses().empty());  // each told once
  // `keep` filters before the room is checked: what it drops is no loss.
  s->waiting().clear();
  for (uint32_t i = 0; i < 4; i++) hub.Publish(Ev(i));
  s->Take(100, std::chrono::milliseconds(10),
          [](const ObsEvent& e) { return e.data.ev.segs >= 2; });
  EXPECT_EQ(s->waiting().size(), 2u);
  EXPECT_TRUE(s->TakeLosses().empty());
}

TEST(StreamSubscription, FilteredAtTheHubLosesBeforeItsFilter) {
  Hub hub;
  StreamOptions o;
  o.subscribe.queue = 3;
  o.subscribe.filter = [](const obs_event& e) { return e.segs % 2 == 0; };
  auto s = hub.OpenStream(std::move(o));
  ASSERT_TRUE(s.ok());
  for (uint32_t i = 0; i < 8; i++) hub.Publish(Ev(i));
  auto got = (*s)->NextBatch(10, std::chrono::milliseconds(10));
  EXPECT_EQ(got.size(), 2u);  // 0 and 2 of the 3 queued
  auto losses = s->TakeLosses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].source, LossSource::kHub);  // at most that many were wanted
  EXPECT_EQ(losses[0].count, 5u);
}

}  // namespace
}  // namespace lossd

namespace lossd {
namespace {

TEST(Hub, CompleteMarkOnlyGrows) {
  Hub hub;
  EXPECT_EQ(hub.complete(), 0u);
  hub.SetComplete(100);
  hub.SetComplete(50);  // a reader's earlier mark, set late
  EXPECT_EQ(hub.complete(), 100u);
  hub.SetComplete(UINT64_MAX);
  EXPECT_EQ(hub.complete(), UINT64_MAX);
}

}  // namespace
}  // namespace lossd
