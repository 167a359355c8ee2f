// The Observer service: lossd.v1 <-> the observer (its hub, flows and
// traces, filtered by observer/filters.h) and the effect tracker (the rules
// and drops beside each event, effects/trace.h for TraceFlow).
#include <algorithm>
#include <deque>
#include <memory>

#include "base/clock.h"
#include "effects/trace.h"
#include "observer/windows.h"
#include "service/channel.h"
#include "service/convert.h"
#include "service/requests.h"
#include "service/services.h"
#include "service/stream.h"

namespace lossd {
namespace {

// WatchAggregates: a window waits at most this long after its end for the
// ring's reader, and its wait is this much past the end.
constexpr uint64_t kAggregateHold = 5ull * 1000 * 1000 * 1000;
constexpr uint64_t kAggregateSlack = 2ull * 1000 * 1000;

// The event streams (WatchRetransmits, WatchStalls): events of one kind
// through the request's allow/deny filters, in batches, with in-band gaps.
// `fill(event, item)` writes one event into its batch item.
template <typename Batch, typename Request, typename Fill>
grpc::ServerWriteReactor<Batch>* EventStream(const Components* parts, std::atomic<int>* subs,
                                             grpc::CallbackServerContext* ctx, const Request* req,
                                             uint32_t kind,
                                             const char* stream_name, Fill fill) {
  using Reactor = PumpReactor<Batch>;
  std::shared_ptr<const StreamFilters> filters;
  Status st = ParseRequestFilters(parts, req->allow(), "allow", req->deny(), &filters);
  auto queue_len = parts->streams().QueueLength(req->queue(), 65536, "queue");
  if (st.ok()) st = queue_len.status();
  size_t queue = queue_len.ok() ? *queue_len : 1;
  auto need = parts->NeedObserver(ctx->deadline());
  Observer* obs = need.ok() ? *need : nullptr;
  if (!st.ok()) return new Reactor(ToGrpc(st));
  if (!obs) return new Reactor(ToGrpc(need.status()));
  // Retransmissions filter by type; other kinds ignore the types.
  bool typed = kind == OBS_EV_RETRANSMIT;
  // The hub offers every event of the kind; the filters run on this
  // stream's thread (an expensive filter set costs this stream only), and
  // that thread keeps taking events while a write is in flight, so what
  // this stream loses it loses after its filter: exactly counted.
  StreamOptions so;
  so.subscribe.queue = queue;
  so.subscribe.kinds = KindBit(kind);
  if (!filters->empty())
    so.subscribe.filter = [=](const obs_event& ev) { return filters->WantsEvent(ev, typed); };
  so.subscribe.stream = stream_name;
  so.subscribe.peer = StreamPeerOf(*ctx);
  so.waiting = queue;  // wanted, not yet written (the client is slow)
  so.counted_in = subs;
  auto opened = obs->hub().OpenStream(std::move(so));
  if (!opened.ok()) return new Reactor(ToGrpc(opened.status()));  // no budget: no thread
  auto held = std::make_shared<StreamSubscription>(std::move(*opened));
  return new Reactor([=](typename Reactor::Sink& sink) -> grpc::Status {
    StreamSubscription& stream = *held;
    std::deque<ObsEvent>& waiting = stream.waiting();
    uint64_t seq = 0;
    auto next_report = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    // One write carries what waits (up to kMaxBatch items): while the
    // previous write is in flight, events gather here.
    constexpr size_t kMaxBatch = 512;
    while (!sink.done()) {
      bool busy = sink.Busy();
      auto wait =
          busy || !waiting.empty() ? std::chrono::milliseconds(2) : std::chrono::milliseconds(100);
      stream.Take(kMaxBatch, wait);
      if (sink.Busy()) continue;
      Batch batch;
      while (!waiting.empty() && size_t(batch.items_size()) < kMaxBatch) {
        auto* m = batch.add_items();
        m->set_seq(++seq);
        fill(waiting.front(), m->mutable_event());
        waiting.pop_front();
      }
      if (std::chrono::steady_clock::now() >= next_report) {
        next_report = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        for (const StreamLoss& l : stream.TakeLosses()) {
          auto* m = batch.add_items();
          m->set_seq(++seq);
          GapToProto(l, m->mutable_gap());
        }
      }
      if (batch.items_size() && !sink.Write(batch)) break;
    }
    return grpc::Status::OK;
  }, parts->stream_stop());
}

// A stall as the API shows it: with the rules covering its flow and the drop
// of one of them that made its hole, if one did.
void StallMessage(EffectTracker* effects, OwnerCache* owners, const obs_stall_event& e,
                  v1::StallEvent* out) {
  StallToProto(e, owners, out);
  if (!effects) return;
  std::vector<uint32_t> ids = effects->RulesShownFor(e.ev.cookie, e.ev.tuple);
  if (auto drop = effects->StallCause(ids, e.ev.tuple, e.stall)) {
    DropToProto(*drop, out->mutable_caused_by());
    // The rule whose drop made it covered the flow when it dropped.
    if (std::find(ids.begin(), ids.end(), drop->rule_id) == ids.end()) ids.push_back(drop->rule_id);
  }
  for (uint32_t id : ids) out->add_rule_ids(id);
}

}  // namespace

grpc::ServerWriteReactor<v1::RetransmitStreamBatch>* ObserverService::WatchRetransmits(
    grpc::CallbackServerContext* ctx, const v1::WatchRetransmitsRequest* req) {
  // The effects are read per event: a stream may have waited for the parts.
  const Components* parts = parts_;
  return EventStream<v1::RetransmitStreamBatch>(
      parts_, &subscribers_, ctx, req, OBS_EV_RETRANSMIT, "WatchRetransmits",
      [parts](const ObsEvent& e, v1::RetransmitEvent* out) {
        EventToProto(e.data.ev, &parts->observer()->owners(), out);
        if (EffectTracker* effects = parts->effects())
          for (uint32_t id : effects->RulesShownFor(e.data.ev.cookie, e.data.ev.tuple))
            out->add_rule_ids(id);
      });
}

grpc::ServerWriteReactor<v1::StallStreamBatch>* ObserverService::WatchStalls(
    grpc::CallbackServerContext* ctx, const v1::WatchStallsRequest* req) {
  const Components* parts = parts_;
  return EventStream<v1::StallStreamBatch>(
      parts_, &subscribers_, ctx, req, OBS_EV_STALL, "WatchStalls",
      [parts](const ObsEvent& e, v1::StallEvent* out) {
        StallMessage(parts->effects(), &parts->observer()->owners(), e.As<obs_stall_event>(), out);
      });
}

grpc::ServerUnaryReactor* ObserverService::ListFlows(grpc::CallbackServerContext* ctx,
                                                     const v1::ListFlowsRequest* req,
                                                     v1::ListFlowsResponse* resp) {
  auto need = parts_->NeedObserver(ctx->deadline());
  if (!need.ok()) return Reply(ctx, need.status());
  Observer* obs = *need;
  std::shared_ptr<const StreamFilters> filters;
  Status st = ParseRequestFilters(parts_, req->filter(), "filter", FilterList(), &filters);
  if (!st.ok()) return Reply(ctx, st);
  for (const auto& f : obs->Flows())
    if (filters->WantsFlow(f.cookie, f.flow)) FlowToProto(f.cookie, f.flow, &obs->owners(), resp->add_flows());
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ObserverService::GetTotals(grpc::CallbackServerContext* ctx,
                                                     const v1::GetTotalsRequest* req,
                                                     v1::GetTotalsResponse* resp) {
  auto need = parts_->NeedObserver(ctx->deadline());
  if (!need.ok()) return Reply(ctx, need.status());
  Observer* obs = *need;
  if (req->netns_ino() > UINT32_MAX)
    return Reply(ctx, InvalidArgument("netns_ino: " + std::to_string(req->netns_ino()) +
                                      " is no network namespace inode (they are 32-bit)"));
  NetnsTotals other;
  auto all = obs->TotalsByNetns(req->netns_ino(), req->netns_ino() ? nullptr : &other);
  if (req->netns_ino() && all.empty()) {
    return Reply(ctx, NotFound("network namespace " + std::to_string(req->netns_ino()) +
                               (obs->Watches(req->netns_ino())
                                    ? " has no totals (no retransmission counted in it)"
                                    : " is not watched (lossd --observe-netns " +
                                          NetnsWatchText(obs->netns_watch()) + ")")));
  }
  for (const NetnsTotals& n : all) NetnsTotalsToProto(n, resp->add_namespaces());
  if (!req->netns_ino()) NetnsTotalsToProto(other, resp->mutable_other());
  resp->set_own_netns_ino(obs->own_netns());
  resp->set_watching(NetnsWatchText(obs->netns_watch()));
  return Reply(ctx, Status::Ok());
}

grpc::ServerWriteReactor<v1::FlowStreamMessage>* ObserverService::WatchFlows(
    grpc::CallbackServerContext* ctx, const v1::WatchFlowsRequest* req) {
  using Reactor = PumpReactor<v1::FlowStreamMessage>;
  std::shared_ptr<const StreamFilters> filters;
  Status st = ParseRequestFilters(parts_, req->filter(), "filter", FilterList(), &filters);
  auto period = StreamPeriod(req->interval_ns(), "interval_ns");
  if (st.ok()) st = period.status();
  auto interval = period.ok() ? *period : std::chrono::nanoseconds(0);
  // `queue`: the closed flows one message may carry (beyond: Gaps); the
  // closes wait for the stream's thread (which takes them as they come) in a
  // queue as long, at least 8192: a stream that asks for a short queue
  // reserves little of the budget (the live page's).
  auto queue_len = parts_->streams().QueueLength(req->queue(), 65536, "queue");
  if (st.ok()) st = queue_len.status();
  size_t queue = queue_len.ok() ? *queue_len : 1;
  size_t intake = std::max<size_t>(queue, *parts_->streams().QueueLength(0, 8192, ""));
  auto need = parts_->NeedObserver(ctx->deadline());
  Observer* obs = need.ok() ? *need : nullptr;
  if (!st.ok()) return new Reactor(ToGrpc(st));
  if (!obs) return new Reactor(ToGrpc(need.status()));
  // The hub offers every close; the stream's thread filters them as they
  // come (not once per message), so the gap counts cover only closes it
  // would carry.
  StreamOptions so;
  so.subscribe.queue = intake;
  so.subscribe.kinds = KindBit(OBS_EV_FLOW_CLOSE);
  so.subscribe.stream = "WatchFlows";
  so.subscribe.peer = StreamPeerOf(*ctx);
  so.waiting = queue;  // wanted closes for the next message
  auto opened = obs->hub().OpenStream(std::move(so));
  if (!opened.ok()) return new Reactor(ToGrpc(opened.status()));  // no budget: no thread
  auto held = std::make_shared<StreamSubscription>(std::move(*opened));
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    StreamSubscription& closes = *held;
    // Filtered here, not in the hub: the flow is beside the event.
    auto take = [&](std::chrono::milliseconds wait) {
      closes.Take(512, wait, [&](const ObsEvent& e) {
        return filters->WantsFlow(e.data.ev.cookie, e.data.flow);
      });
    };
    uint64_t seq = 0, since = 0;
    bool first = true;
    while (!sink.done()) {
      v1::FlowStreamMessage m;
      m.set_seq(++seq);
      m.set_snapshot(first);
      m.set_time_unix_ns(UnixNs());
      uint64_t newest = since;
      for (const auto& f : obs->Flows()) {
        newest = std::max<uint64_t>(newest, f.flow.updated_ns);
        if ((first || f.flow.updated_ns > since) && filters->WantsFlow(f.cookie, f.flow))
          FlowToProto(f.cookie, f.flow, &obs->owners(), m.add_flows());
      }
      // Every close since the subscription, the first message's too: a flow
      // that closed before the snapshot was taken is in no snapshot.
      take(std::chrono::milliseconds(0));
      for (const ObsEvent& e : closes.waiting()) {
        FlowToProto(e.data.ev.cookie, e.data.flow, &obs->owners(), m.add_flows(),
                    std::max<uint64_t>(e.data.closed_ns, 1));
      }
      closes.waiting().clear();
      for (const StreamLoss& l : closes.TakeLosses()) GapToProto(l, m.add_gaps());
      since = newest;
      first = false;
      if (!sink.Write(m)) break;
      // Until the next message: take closes as they come.
      auto next = std::chrono::steady_clock::now() + interval;
      while (!sink.done()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            next - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        take(std::min(left, std::chrono::milliseconds(100)));
      }
    }
    return grpc::Status::OK;
  }, parts_->stream_stop());
}

grpc::ServerWriteReactor<v1::Aggregate>* ObserverService::WatchAggregates(
    grpc::CallbackServerContext* ctx, const v1::WatchAggregatesRequest* req) {
  using Reactor = PumpReactor<v1::Aggregate>;
  auto period = StreamPeriod(req->window_ns(), "window_ns");
  size_t queue = *parts_->streams().QueueLength(0, 65536, "");  // --max-queue at most
  uint64_t window = period.ok() ? uint64_t(period->count()) : 0;
  uint64_t netns = req->netns_ino();
  Status netns_st = netns > UINT32_MAX
                        ? InvalidArgument("netns_ino: " + std::to_string(netns) +
                                          " is no network namespace inode (they are 32-bit)")
                        : Status::Ok();
  auto need = parts_->NeedObserver(ctx->deadline());
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  if (!period.ok()) return new Reactor(ToGrpc(period.status()));
  if (!netns_st.ok()) return new Reactor(ToGrpc(netns_st));
  if (!obs) return new Reactor(ToGrpc(need.status()));
  StreamOptions so;
  so.subscribe.queue = queue;
  so.subscribe.kinds = KindBit(OBS_EV_RETRANSMIT);
  if (netns) so.subscribe.filter = [netns](const obs_event& ev) { return ev.netns == netns; };
  so.subscribe.stream = "WatchAggregates";
  so.subscribe.peer = StreamPeerOf(*ctx);
  so.counted_in = &subscribers_;
  auto opened = obs->hub().OpenStream(std::move(so));
  if (!opened.ok()) return new Reactor(ToGrpc(opened.status()));  // no budget: no thread
  auto held = std::make_shared<StreamSubscription>(std::move(*opened));
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    StreamSubscription& sub = *held;
    // Windows of kernel time from now; each is written once the reader has
    // read all its events (observer/windows.h), so a late reader moves
    // nothing into the wrong window.
    uint64_t from = MonotonicNs();
    const uint64_t unix_minus_mono = UnixNs() - from;
    RtxWindows windows(from, window, kAggregateHold);
    uint64_t seq = 0;
    auto add = [&](const ObsEvent& e) {
      const obs_event& ev = e.data.ev;
      if (ev.kind != OBS_EV_RETRANSMIT) return;
      if (ev.outcome != OBS_SENT && ev.outcome != OBS_FAILED) return;
      windows.Add(ev.time_ns, ev.type, ev.segs, ev.cookie,
                  effects ? effects->RulesShownFor(ev.cookie, ev.tuple) : std::vector<uint32_t>{});
    };
    while (!sink.done()) {
      // What the reader has read by now is in the queue once it is drained.
      uint64_t complete = obs->hub().complete();
      for (;;) {
        auto batch = sub->NextBatch(4096, std::chrono::milliseconds(0));
        if (batch.empty()) break;
        for (const ObsEvent& e : batch) add(e);
      }
      for (RtxWindow& w : windows.TakeClosed(complete, MonotonicNs())) {
        v1::Aggregate a;
        AggregateToProto(w, window, unix_minus_mono, &a);
        for (const StreamLoss& l : sub.TakeLosses()) GapToProto(l, a.add_gaps());
        a.set_seq(++seq);
        if (!sink.Write(a)) return grpc::Status::OK;
      }
      // Until the open window ends (and a little for the reader), take events.
      uint64_t now = MonotonicNs();
      uint64_t end = windows.next_end() + kAggregateSlack;
      auto wait = std::chrono::milliseconds(
          end > now ? std::min<uint64_t>((end - now) / 1000000 + 1, 100) : 5);
      if (auto e = sub->Next(wait)) add(*e);
    }
    return grpc::Status::OK;
  }, parts_->stream_stop());
}

namespace {

// One item of a trace as its message.
void TraceItemToProto(const TraceItem& item, uint64_t cookie, EffectTracker* effects,
                      OwnerCache* owners, v1::TraceMessage* m) {
  switch (item.kind) {
    case TraceItem::Kind::kSample:
      SampleToProto(item.event.As<obs_sample_event>(), m->mutable_sample());
      break;
    case TraceItem::Kind::kRetransmit:
      EventToProto(item.event.data.ev, owners, m->mutable_retransmit());
      break;
    case TraceItem::Kind::kStall:
      StallMessage(effects, owners, item.event.As<obs_stall_event>(), m->mutable_stall());
      break;
    case TraceItem::Kind::kClosed:
      FlowToProto(cookie, item.event.data.flow, owners, m->mutable_closed(),
                  std::max<uint64_t>(item.event.data.closed_ns, 1));
      break;
    case TraceItem::Kind::kDrop: DropToProto(item.drop, m->mutable_drop()->mutable_drop()); break;
    case TraceItem::Kind::kGap: GapToProto(item.gap, m->mutable_gap()); break;
  }
}

}  // namespace

grpc::ServerWriteReactor<v1::TraceMessage>* ObserverService::TraceFlow(
    grpc::CallbackServerContext* ctx, const v1::TraceFlowRequest* req) {
  using Reactor = PumpReactor<v1::TraceMessage>;
  TraceRequest tr;
  Status st = ParseTraceRequest(parts_, *req, &tr);
  auto need = parts_->NeedObserver(ctx->deadline());
  Observer* obs = need.ok() ? *need : nullptr;
  if (!st.ok()) return new Reactor(ToGrpc(st));
  if (!obs) return new Reactor(ToGrpc(need.status()));
  // Its budget first (it may wait up to an hour for its flow): the trace's
  // subscription is counted under this ticket. Refused: no thread.
  auto ticket = parts_->streams().Open("TraceFlow", Subscription::QueueBytes(tr.opts.queue),
                                       StreamPeerOf(*ctx));
  if (!ticket.ok()) return new Reactor(ToGrpc(ticket.status()));
  auto held = std::make_shared<StreamBudget::Ticket>(std::move(*ticket));
  const Components* parts = parts_;
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    (void)held;  // the stream's budget, for as long as the stream lives
    EffectTracker* effects = parts->effects();
    TraceSources src = TraceSources::Of(obs);
    src.drops = [parts](const loss_drop_key& key) -> Result<std::unique_ptr<DropFeed>> {
      Injector* inj = parts->injector();
      if (!inj) return std::unique_ptr<DropFeed>();
      return inj->TraceDrops(key);
    };
    auto flow = FindTracedFlow(src, tr.cookie, *tr.match, tr.wait, [&] { return sink.done(); });
    if (sink.done()) return grpc::Status::CANCELLED;
    if (!flow.ok()) return ToGrpc(flow.status());
    auto tracer = FlowTracer::Start(src, *flow, tr.opts);
    if (!tracer.ok()) return ToGrpc(tracer.status());
    FlowTracer& trace = **tracer;
    uint64_t seq = 0;
    v1::TraceMessage first;
    first.set_seq(++seq);
    FlowToProto(trace.start().cookie, trace.start().flow, &obs->owners(), first.mutable_flow());
    bool ok = sink.Write(first);
    while (ok && !sink.done() && trace.running()) {
      for (const TraceItem& item : trace.Next()) {
        v1::TraceMessage m;
        TraceItemToProto(item, flow->cookie, effects, &obs->owners(), &m);
        m.set_seq(++seq);
        if (!(ok = sink.Write(std::move(m)))) break;
      }
    }
    trace.Stop();
    if (ok && !trace.closed() && !sink.done()) {
      // Ended by max_samples or duration: the flow as it is now.
      if (auto now = trace.FlowNow()) {
        v1::TraceMessage m;
        m.set_seq(++seq);
        FlowToProto(now->cookie, now->flow, &obs->owners(), m.mutable_closed());
        sink.Write(std::move(m));
      }
    }
    return grpc::Status::OK;
  }, parts_->stream_stop());
}

}  // namespace lossd
