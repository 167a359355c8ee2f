// One flow's trace (effects/trace.h) over a real hub and fake flows, trace
// registration and drop log: the flow chosen, the events in order, the
// drops told once each and merged before the close, the gaps by source.
#include "effects/trace.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <mutex>
#include <thread>

namespace lossd {
namespace {

using Kind = TraceItem::Kind;

ObsFlow Flow(uint64_t cookie, uint16_t lport, uint16_t rport) {
  ObsFlow f;
  f.cookie = cookie;
  f.flow.tuple.family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", f.flow.tuple.saddr);
  inet_pton(AF_INET, "10.0.0.2", f.flow.tuple.daddr);
  f.flow.tuple.sport = lport;
  f.flow.tuple.dport = rport;
  return f;
}

// An event as the kernel sends it: its flow's record counts it (a
// retransmission's segments, a stall) before it is submitted.
ObsEvent Ev(uint32_t kind, uint64_t cookie, uint32_t n = 0, uint32_t flow_rtx = 1000,
            uint32_t flow_stalls = 1000) {
  ObsEvent e;
  e.data.ev.kind = kind;
  e.data.ev.cookie = cookie;
  e.data.ev.segs = n;
  e.data.ev.flow_rtx_segs = flow_rtx;
  e.data.ev.flow_stalls = flow_stalls;
  return e;
}

loss_drop_range Drop(uint32_t rule, uint32_t seq) {
  loss_drop_range d{};
  d.rule_id = rule;
  d.seq = seq;
  d.len = 1000;
  d.segs = 1;
  d.time_ns = seq;
  return d;
}

// The observer's and the injector's parts, faked.
struct Fakes;
struct Feed final : DropFeed {
  explicit Feed(Fakes* f) : f(f) {}
  std::vector<loss_drop_range> Take(uint64_t* lost) override;
  bool WaitComplete(uint64_t mono_ns, std::chrono::milliseconds) override;
  Fakes* f;
};

struct Fakes {
  Hub hub;
  std::vector<ObsFlow> flows;
  int flow_reads = 0, flows_after = 0;  // flows appear after that many reads
  // What the flow's drop feed hands over next, and what it lost.
  std::vector<loss_drop_range> drops;
  uint64_t drops_lost = 0;
  std::vector<loss_drop_key> drop_keys;
  std::vector<uint64_t> waited_for;  // the times WaitComplete was asked for
  std::vector<uint64_t> traced;
  bool refuse_trace = false;
  std::function<void()> on_trace;

  TraceSources Sources() {
    TraceSources s;
    s.hub = &hub;
    s.flows = [this] { return ++flow_reads > flows_after ? flows : std::vector<ObsFlow>{}; };
    s.trace = [this](uint64_t cookie) -> Result<std::unique_ptr<FlowTrace>> {
      if (on_trace) on_trace();
      if (refuse_trace) return ResourceExhausted("16 flows traced already");
      traced.push_back(cookie);
      return std::unique_ptr<FlowTrace>();  // nothing to mark in a test
    };
    s.drops = [this](const loss_drop_key& key) -> Result<std::unique_ptr<DropFeed>> {
      drop_keys.push_back(key);
      return std::unique_ptr<DropFeed>(new Feed(this));
    };
    return s;
  }
};

std::vector<loss_drop_range> Feed::Take(uint64_t* lost) {
  *lost += f->drops_lost;
  f->drops_lost = 0;
  std::vector<loss_drop_range> out;
  out.swap(f->drops);
  return out;
}

bool Feed::WaitComplete(uint64_t mono_ns, std::chrono::milliseconds) {
  f->waited_for.push_back(mono_ns);
  return true;
}

std::vector<Kind> Kinds(const std::vector<TraceItem>& items) {
  std::vector<Kind> k;
  for (const TraceItem& i : items) k.push_back(i.kind);
  return k;
}

// A trace of flow 7 (port 80 to 5000), up to 100 samples unless `o` says; null if refused.
TraceOptions UpTo100Samples() {
  TraceOptions o;
  o.max_samples = 100;
  return o;
}
std::unique_ptr<FlowTracer> TraceFlow7(Fakes& f, TraceOptions o = UpTo100Samples()) {
  auto t = FlowTracer::Start(f.Sources(), Flow(7, 80, 5000), o);
  return t.ok() ? std::move(*t) : nullptr;
}

const StreamFilters kNoFilter({}, {}, FilterLookups{});
auto kNever = [] { return false; };

TEST(FindTracedFlow, ByCookieNowOnly) {
  Fakes f;
  f.flows = {Flow(1, 80, 5000), Flow(2, 81, 5001)};
  auto got = FindTracedFlow(f.Sources(), 2, kNoFilter, std::chrono::seconds(5), kNever);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->cookie, 2u);
  f.flow_reads = 0;
  auto missing = FindTracedFlow(f.Sources(), 3, kNoFilter, std::chrono::seconds(5), kNever);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "no open flow with cookie 3");
  EXPECT_EQ(f.flow_reads, 1);  // a cookie is looked up once: no waiting
}

StreamFilters Port81() {
  StreamFilter p;
  p.port.lo = p.port.hi = 81;
  return StreamFilters({p}, {}, FilterLookups{});
}

TEST(FindTracedFlow, ByFilterAnOpenFlowAtOnce) {
  Fakes f;
  f.flows = {Flow(1, 80, 5000), Flow(2, 81, 5001), Flow(3, 81, 5002)};
  auto got = FindTracedFlow(f.Sources(), 0, Port81(), std::chrono::seconds(5), kNever);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->cookie, 2u);
  EXPECT_EQ(f.flow_reads, 1);
}

// The wait is on the hub's flow-open events: the table is read once, then
// only the flows the events name are looked at.
TEST(FindTracedFlow, WaitsForTheOpenEventNotPolling) {
  Fakes f;
  std::mutex mu;
  std::vector<ObsFlow> table = {Flow(1, 80, 5000)};
  int reads = 0, watches = 0;
  TraceSources s = f.Sources();
  s.flows = [&] {
    std::lock_guard<std::mutex> l(mu);
    reads++;
    return table;
  };
  s.watch_opens = [&]() -> Result<std::unique_ptr<OpenWatch>> {
    watches++;
    return std::unique_ptr<OpenWatch>();
  };
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    {
      std::lock_guard<std::mutex> l(mu);
      table.push_back(Flow(5, 80, 5003));  // not wanted
      table.push_back(Flow(6, 81, 5004));
    }
    f.hub.Publish(Ev(OBS_EV_FLOW_OPEN, 5));
    f.hub.Publish(Ev(OBS_EV_FLOW_OPEN, 6));
  });
  auto got = FindTracedFlow(s, 0, Port81(), std::chrono::seconds(10), kNever);
  opener.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->cookie, 6u);
  EXPECT_EQ(watches, 1);
  // One read of the table before the wait, and one lookup per event (no
  // FlowOf here: each looks in `flows`): no reads every few milliseconds.
  EXPECT_EQ(reads, 3);

  // A flow that opens without its event is not seen (nothing polls), and the
  // wait ends at its time.
  reads = 0;
  f.flows_after = 1;
  f.flows = {Flow(2, 81, 5001)};
  auto none = FindTracedFlow(f.Sources(), 0, Port81(), std::chrono::milliseconds(250), kNever);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "no open flow matched within 250 ms");
}

// More opens than the waiter's queue holds: it reads the whole table again.
TEST(FindTracedFlow, LostOpensReadTheTableAgain) {
  Fakes f;
  f.flows = {Flow(2, 81, 5001)};
  f.flows_after = 1;  // there after the first read
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<ObsEvent> burst(1000, Ev(OBS_EV_FLOW_OPEN, 99));
    f.hub.PublishAll(&burst);
  });
  auto got = FindTracedFlow(f.Sources(), 0, Port81(), std::chrono::seconds(10), kNever);
  opener.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->cookie, 2u);
}

TEST(FindTracedFlow, StopsWhenTheClientGoes) {
  Fakes f;
  auto t0 = std::chrono::steady_clock::now();
  auto stopped =
      FindTracedFlow(f.Sources(), 0, Port81(), std::chrono::seconds(30), [] { return true; });
  EXPECT_FALSE(stopped.ok());
  EXPECT_EQ(f.flow_reads, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(FlowTracer, SubscribesBeforeTracingAndTellsOnlyItsFlow) {
  Fakes f;
  ObsFlow flow = Flow(7, 80, 5000);
  // What the flow sends the moment it is traced is in the trace.
  f.on_trace = [&] { f.hub.Publish(Ev(OBS_EV_SAMPLE, 7, 1)); };
  TraceOptions o;
  o.max_samples = 100;
  auto t = FlowTracer::Start(f.Sources(), flow, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(f.traced, std::vector<uint64_t>{7});
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 8));  // another flow
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7, 2));
  f.hub.Publish(Ev(OBS_EV_STALL, 7, 3));
  auto items = (*t)->Next();
  EXPECT_EQ(Kinds(items), (std::vector<Kind>{Kind::kSample, Kind::kRetransmit, Kind::kStall}));
  EXPECT_EQ(items[1].event.data.ev.segs, 2u);
  EXPECT_TRUE((*t)->running());
  EXPECT_FALSE((*t)->closed());
  // The drops it is fed are of the data the flow sends: local -> remote.
  ASSERT_FALSE(f.drop_keys.empty());
  loss_drop_key want = SentDropKey(flow.flow.tuple);
  EXPECT_EQ(std::memcmp(&f.drop_keys.back(), &want, sizeof(want)), 0);
}

TEST(FlowTracer, StartsFromTheRecordReadAfterSubscribingAndCountsNothingTwice) {
  Fakes f;
  ObsFlow found = Flow(7, 80, 5000);  // as FindTracedFlow saw it
  ObsFlow now = found;                // as it is once subscribed
  now.flow.rtx_segs[OBS_RTX_FAST] = 10;
  now.flow.rtx_segs[OBS_RTX_RTO] = 2;
  now.flow.stalls = 3;
  f.flows = {now};
  // Already in the record when it was read, its events still on their way.
  f.on_trace = [&] {
    f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7, 2, 12, 3));
    f.hub.Publish(Ev(OBS_EV_STALL, 7, 0, 12, 3));
  };
  TraceOptions o;
  o.max_samples = 100;
  auto t = FlowTracer::Start(f.Sources(), found, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->start().flow.rtx_segs[OBS_RTX_FAST], 10u);
  EXPECT_EQ((*t)->start().flow.stalls, 3u);
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7, 3, 15, 3));  // new: after the record
  ObsEvent failed = Ev(OBS_EV_RETRANSMIT, 7, 1, 15, 3);
  failed.data.ev.outcome = OBS_FAILED;  // never in the record's (sent) counts
  f.hub.Publish(failed);
  f.hub.Publish(Ev(OBS_EV_STALL, 7, 0, 15, 4));
  auto items = (*t)->Next();
  ASSERT_EQ(Kinds(items), (std::vector<Kind>{Kind::kRetransmit, Kind::kRetransmit, Kind::kStall}));
  EXPECT_EQ(items[0].event.data.ev.segs, 3u);
  EXPECT_EQ(items[1].event.data.ev.outcome, uint32_t(OBS_FAILED));
  // The counts are 32-bit and wrap: compared as differences.
  ObsFlow big = now;
  big.flow.rtx_segs[OBS_RTX_FAST] = 0xffffffffull;
  big.flow.rtx_segs[OBS_RTX_RTO] = 0;
  f.flows = {big};
  f.on_trace = nullptr;
  auto w = FlowTracer::Start(f.Sources(), found, o);
  ASSERT_TRUE(w.ok());
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7, 1, 0xffffffffu, 3));  // in the record
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7, 2, 1, 3));            // past the wrap: new
  items = (*w)->Next();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].event.data.ev.segs, 2u);
}

TEST(FlowTracer, RefusedTraceHoldsNothing) {
  StreamBudget b(StreamLimits{});
  Fakes f;
  f.hub.SetBudget(&b);
  f.refuse_trace = true;
  auto t = FlowTracer::Start(f.Sources(), Flow(7, 80, 5000), TraceOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(b.open(), 0u);  // the subscription went with it
  f.refuse_trace = false;
  auto ok = FlowTracer::Start(f.Sources(), Flow(7, 80, 5000), TraceOptions{});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(b.open("TraceFlow"), 1u);
  (*ok)->Stop();
  EXPECT_EQ(b.open(), 0u);
  EXPECT_FALSE((*ok)->running());
}

TEST(FlowTracer, DropsToldOnceAndBeforeTheCloseWhenTheFeedHasThemAll) {
  Fakes f;
  auto t = TraceFlow7(f);
  ASSERT_NE(t, nullptr);
  FlowTracer& tr = *t;
  EXPECT_TRUE(tr.Next().empty());
  f.drops = {Drop(2, 300)};
  f.hub.Publish(Ev(OBS_EV_SAMPLE, 7));
  ObsEvent close = Ev(OBS_EV_FLOW_CLOSE, 7);
  close.data.ev.time_ns = 777;
  close.data.closed_ns = 12345;
  f.hub.Publish(close);
  // At the close the trace waits for every drop made before it; the drop
  // and the gaps go before the close.
  auto items = tr.Next();
  ASSERT_EQ(Kinds(items), (std::vector<Kind>{Kind::kSample, Kind::kDrop, Kind::kClosed}));
  EXPECT_EQ(f.waited_for, std::vector<uint64_t>{777});
  EXPECT_EQ(items[1].drop.rule_id, 2u);
  EXPECT_EQ(items[1].drop.seq, 300u);
  EXPECT_EQ(items[1].drop.len, 1000u);
  EXPECT_EQ(items[2].event.data.closed_ns, 12345u);
  EXPECT_TRUE(tr.closed());
  EXPECT_FALSE(tr.running());
}

TEST(FlowTracer, DropsTheFeedLostAreAGap) {
  Fakes f;
  auto t = TraceFlow7(f);
  ASSERT_NE(t, nullptr);
  FlowTracer& tr = *t;
  f.drops = {Drop(1, 400), Drop(1, 500)};
  f.drops_lost = 3;  // the ring had no room for 3
  auto items = tr.Next();
  ASSERT_EQ(Kinds(items), (std::vector<Kind>{Kind::kDrop, Kind::kDrop, Kind::kGap}));
  EXPECT_EQ(items[0].drop.seq, 400u);
  EXPECT_EQ(items[1].drop.seq, 500u);
  EXPECT_EQ(items[2].gap.source, LossSource::kDropLog);
  EXPECT_EQ(items[2].gap.count, 3u);
  EXPECT_TRUE(tr.Next().empty());  // told once
  EXPECT_TRUE(f.waited_for.empty());  // only the close waits
}

TEST(FlowTracer, HubLossIsAGapOfItsFilteredQueue) {
  Fakes f;
  uint64_t ring = 0;
  f.hub.SetRingLost([&] { return ring; });
  TraceOptions o = UpTo100Samples();
  o.queue = 2;
  auto t = TraceFlow7(f, o);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 5; i++) f.hub.Publish(Ev(OBS_EV_SAMPLE, 7));
  ring = 4;
  auto items = t->Next();
  ASSERT_EQ(Kinds(items),
            (std::vector<Kind>{Kind::kSample, Kind::kSample, Kind::kGap, Kind::kGap}));
  EXPECT_EQ(items[2].gap.source, LossSource::kKernelRing);
  EXPECT_EQ(items[2].gap.count, 4u);
  EXPECT_EQ(items[3].gap.source, LossSource::kHub);  // filtered by cookie at the hub
  EXPECT_EQ(items[3].gap.count, 3u);
}

TEST(FlowTracer, EndsAfterMaxSamplesOrDuration) {
  Fakes f;
  ObsFlow flow = Flow(7, 80, 5000);
  f.flows = {flow};
  TraceOptions o;
  o.max_samples = 2;
  auto t = FlowTracer::Start(f.Sources(), flow, o);
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 4; i++) f.hub.Publish(Ev(OBS_EV_SAMPLE, 7));
  f.hub.Publish(Ev(OBS_EV_RETRANSMIT, 7));
  auto items = (*t)->Next();
  EXPECT_EQ(Kinds(items), (std::vector<Kind>{Kind::kSample, Kind::kSample, Kind::kRetransmit}));
  EXPECT_FALSE((*t)->running());
  EXPECT_FALSE((*t)->closed());
  (*t)->Stop();
  auto now = (*t)->FlowNow();  // the closing message's flow
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->cookie, 7u);
  TraceOptions brief;
  brief.max_samples = 100;
  brief.duration = std::chrono::milliseconds(30);
  auto d = FlowTracer::Start(f.Sources(), flow, brief);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->running());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_FALSE((*d)->running());
}

}  // namespace
}  // namespace lossd
