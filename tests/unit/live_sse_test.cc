#include <gtest/gtest.h>

#include <thread>

#include "live/sse.h"

namespace lossd {
namespace {

TEST(SseFrame, OneMessageWithIdEventAndOneDataLine) {
  EXPECT_EQ(SseFrame(7, "aggregate", "{\"a\":1}"), "id: 7\nevent: aggregate\ndata: {\"a\":1}\n\n");
  // A newline inside the data would split the message: never.
  EXPECT_EQ(SseFrame(1, "x", "a\nb\rc"), "id: 1\nevent: x\ndata: a b c\n\n");
}

TEST(SseQueue, DropsWhatDoesNotFitAndCountsItByStream) {
  SseQueue q(3);
  q.Push("retransmit", "1");
  q.Push("retransmit", "2");
  q.Push("aggregate", "3");
  q.Push("retransmit", "4");  // full: dropped
  q.Push("flows", "5");       // full: dropped
  q.Push("retransmit", "6");  // full: dropped
  SseQueue::Batch b = q.Take(std::chrono::milliseconds(0));
  ASSERT_EQ(b.messages.size(), 3u);
  EXPECT_EQ(b.messages[0].data, "1");
  EXPECT_EQ(b.messages[2].event, "aggregate");
  EXPECT_EQ(b.dropped, (std::map<std::string, uint64_t>{{"retransmit", 2}, {"flows", 1}}));
  EXPECT_EQ(q.dropped_total(), 3u);
  // Reported once: the next batch starts clean.
  q.Push("retransmit", "7");
  b = q.Take(std::chrono::milliseconds(0));
  ASSERT_EQ(b.messages.size(), 1u);
  EXPECT_TRUE(b.dropped.empty());
  EXPECT_FALSE(b.closed);
}

// Issue 25 item 5: a message's size is not the producer's choice (a flows message
// grows with the namespace's flows), so the queue is bounded in bytes as well.
TEST(SseQueue, BoundedInBytesToo) {
  SseQueue q(1000, 100);  // 1,000 messages, 100 bytes
  q.Push("flows", std::string(60, 'x'));    // 65 bytes
  q.Push("flows", std::string(40, 'y'));    // 65 + 45 > 100: dropped
  q.Push("retransmit", std::string(20, 'z'));  // 65 + 30 = 95: kept
  EXPECT_EQ(q.bytes(), 95u);
  SseQueue::Batch b = q.Take(std::chrono::milliseconds(0));
  ASSERT_EQ(b.messages.size(), 2u);
  EXPECT_EQ(b.dropped, (std::map<std::string, uint64_t>{{"flows", 1}}));
  EXPECT_EQ(q.bytes(), 0u);  // taken: room again
  q.Push("flows", std::string(90, 'x'));
  EXPECT_EQ(q.Take(std::chrono::milliseconds(0)).messages.size(), 1u);
  q.Push("flows", std::string(500, 'x'));  // larger than the bound, into an empty queue: taken
  q.Push("flows", std::string(1, 'x'));    // behind it: dropped
  b = q.Take(std::chrono::milliseconds(0));
  EXPECT_EQ(b.messages.size(), 1u);
  EXPECT_EQ(b.dropped, (std::map<std::string, uint64_t>{{"flows", 1}}));
  SseQueue unbounded(2);  // no byte bound: messages only
  unbounded.Push("flows", std::string(1 << 20, 'x'));
  EXPECT_EQ(unbounded.Take(std::chrono::milliseconds(0)).messages.size(), 1u);
}

TEST(SseQueue, TakeWaitsForAMessageOrClose) {
  SseQueue q(4);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    q.Push("x", "y");
  });
  auto b = q.Take(std::chrono::seconds(5));
  t.join();
  ASSERT_EQ(b.messages.size(), 1u);
  std::thread c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    q.Close();
  });
  b = q.Take(std::chrono::seconds(5));
  c.join();
  EXPECT_TRUE(b.closed);
  q.Push("after", "close");  // ignored
  EXPECT_TRUE(q.Take(std::chrono::milliseconds(0)).messages.empty());
}

TEST(EventsQuery, ParsesAndBoundsEveryParameter) {
  auto q = ParseEventsQuery({{"flow", "12345"}, {"rule", "3"}, {"queue", "16"}});
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->flow, 12345u);
  EXPECT_EQ(q->rule, 3u);
  EXPECT_EQ(q->queue, 16u);
  auto d = ParseEventsQuery({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->flow, 0u);
  EXPECT_EQ(d->queue, 1024u);
  for (const auto& bad :
       std::vector<std::multimap<std::string, std::string>>{{{"flow", "0"}},
                                                            {{"flow", "-1"}},
                                                            {{"flow", "1x"}},
                                                            {{"flow", "99999999999999999999999"}},
                                                            {{"rule", "4294967296"}},
                                                            {{"queue", "0"}},
                                                            {{"queue", "65537"}},
                                                            {{"typo", "1"}},
                                                            {{"rule", "1"}, {"rule", "2"}}}) {
    auto r = ParseEventsQuery(bad);
    ASSERT_FALSE(r.ok()) << bad.begin()->first << "=" << bad.begin()->second;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad.begin()->first), std::string::npos)
        << r.status().message();
  }
  // A long bad value is quoted bounded.
  auto longv = ParseEventsQuery({{"flow", std::string(500, '9')}});
  ASSERT_FALSE(longv.ok());
  EXPECT_LT(longv.status().message().size(), 200u);
}

TEST(ParseMib, PairsHeaderAndValueLines) {
  std::map<std::string, uint64_t> m;
  ParseMib(
      "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm MaxConn RetransSegs\n"
      "Tcp: 1 -1 42\nUdp: InDatagrams\nUdp: 7\n",
      &m);
  ParseMib("TcpExt: TCPFastRetrans TCPLossProbes\nTcpExt: 30 2\n", &m);
  EXPECT_EQ(m.at("Tcp.RetransSegs"), 42u);
  EXPECT_EQ(m.count("Tcp.MaxConn"), 0u);  // signed, not a counter
  EXPECT_EQ(m.at("TcpExt.TCPFastRetrans"), 30u);
  EXPECT_EQ(m.at("TcpExt.TCPLossProbes"), 2u);
  EXPECT_EQ(m.at("Udp.InDatagrams"), 7u);
}

TEST(HiddenFromPage, LossdsOwnConnectionsAndUnconnectedSocketsOnly) {
  OwnEndpoints own{{7071, 50051}, 4026531840u};
  // Not connected (yet): no port on one end.
  EXPECT_TRUE(HiddenFromPage("127.0.0.1", 0, 0, own.netns_ino, own));
  EXPECT_TRUE(HiddenFromPage("10.0.0.2", 41000, 0, own.netns_ino, own));
  // The page's own HTTP connection, both ends; a remote browser's (server side).
  EXPECT_TRUE(HiddenFromPage("127.0.0.1", 7071, 52000, own.netns_ino, own));
  EXPECT_TRUE(HiddenFromPage("127.0.0.1", 52000, 7071, own.netns_ino, own));
  EXPECT_TRUE(HiddenFromPage("::1", 52000, 50051, own.netns_ino, own));
  EXPECT_TRUE(HiddenFromPage("192.0.2.9", 7071, 52000, own.netns_ino, own));
  // A flow to another host's port 7071 is the user's, and so is any flow of another namespace.
  EXPECT_FALSE(HiddenFromPage("192.0.2.9", 52000, 7071, own.netns_ino, own));
  EXPECT_FALSE(HiddenFromPage("127.0.0.1", 7071, 52000, own.netns_ino + 1, own));
  EXPECT_FALSE(HiddenFromPage("10.0.0.2", 41000, 5201, own.netns_ino, own));
  // A listener not configured (port 0) hides nothing.
  OwnEndpoints none{{0}, 0};
  EXPECT_FALSE(HiddenFromPage("127.0.0.1", 52000, 41000, 7, none));
}

}  // namespace
}  // namespace lossd
