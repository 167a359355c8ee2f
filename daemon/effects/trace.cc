#include "effects/trace.h"

#include <thread>

#include "base/log.h"

namespace lossd {

TraceSources TraceSources::Of(Observer* obs) {
  TraceSources s;
  s.hub = &obs->hub();
  s.flows = [obs] { return obs->Flows(); };
  s.flow = [obs](uint64_t cookie) { return obs->FlowOf(cookie); };
  s.watch_opens = [obs] { return obs->WatchOpens(); };
  s.trace = [obs](uint64_t cookie) { return obs->Trace(cookie); };
  return s;
}

Result<ObsFlow> FindTracedFlow(const TraceSources& src, uint64_t cookie, const StreamFilters& by,
                               std::chrono::nanoseconds wait, const std::function<bool()>& stop) {
  auto wanted = [&](const ObsFlow& f) { return cookie ? f.cookie == cookie : by.WantsFlow(f.cookie, f.flow); };
  auto find = [&]() -> std::optional<ObsFlow> {
    for (const ObsFlow& f : src.flows())
      if (wanted(f)) return f;
    return std::nullopt;
  };
  auto lookup = [&](uint64_t c) -> std::optional<ObsFlow> {
    if (src.flow) return src.flow(c);
    for (const ObsFlow& f : src.flows())
      if (f.cookie == c) return f;
    return std::nullopt;
  };
  if (cookie || wait.count() <= 0) {
    if (auto f = cookie ? lookup(cookie) : find()) return *f;
  } else {
    // Listen first, then look: a flow opened in between is in the queue.
    std::unique_ptr<OpenWatch> watching;
    if (src.watch_opens) {
      auto w = src.watch_opens();
      if (!w.ok()) return w.status();
      watching = std::move(*w);
    }
    SubscribeOptions so;
    so.queue = 256;  // within the stream's budget (its ticket counts the trace's queue)
    so.kinds = KindBit(OBS_EV_FLOW_OPEN);
    auto sub = src.hub->Subscribe(std::move(so));
    if (!sub.ok()) return sub.status();
    struct Leave {
      Hub* hub;
      std::shared_ptr<Subscription> sub;
      ~Leave() { hub->Unsubscribe(sub); }
    } leave{src.hub, *sub};
    std::optional<ObsFlow> flow = find();
    uint64_t lost = 0;
    auto give_up = std::chrono::steady_clock::now() + wait;
    while (!flow && !stop()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto e = leave.sub->Next(std::min(left, std::chrono::milliseconds(200)));
      if (leave.sub->lost() != lost) {  // opens that did not fit the queue: look at them all
        lost = leave.sub->lost();
        flow = find();
      } else if (e) {
        if (auto f = lookup(e->data.ev.cookie); f && wanted(*f)) flow = f;
      }
    }
    if (flow) return *flow;
  }
  return NotFound(cookie ? "no open flow with cookie " + std::to_string(cookie)
                         : "no open flow matched within " + std::to_string(wait.count() / 1000000) +
                               " ms");
}

Result<std::unique_ptr<FlowTracer>> FlowTracer::Start(const TraceSources& src, const ObsFlow& flow,
                                                      const TraceOptions& opts) {
  const uint64_t traced = flow.cookie;
  // Subscribe first, then mark the flow traced: no sample is missed.
  StreamOptions so;
  so.subscribe.queue = opts.queue;
  so.subscribe.kinds = KindBit(OBS_EV_SAMPLE) | KindBit(OBS_EV_RETRANSMIT) | KindBit(OBS_EV_STALL) |
                       KindBit(OBS_EV_FLOW_CLOSE);
  so.subscribe.filter = [traced](const obs_event& ev) { return ev.cookie == traced; };
  so.subscribe.stream = opts.stream;
  so.subscribe.peer = opts.peer;
  auto sub = src.hub->OpenStream(std::move(so));
  if (!sub.ok()) return sub.status();
  auto handle = src.trace(traced);
  if (!handle.ok()) return handle.status();  // unsubscribes
  std::unique_ptr<FlowTracer> t(new FlowTracer(src, flow, opts, std::move(*sub)));
  t->trace_ = std::move(*handle);
  // Drops made before now are history: the feed begins here.
  if (src.drops) {
    auto feed = src.drops(SentDropKey(t->tuple_));
    if (!feed.ok()) return feed.status();  // unmarks and unsubscribes
    t->drops_ = std::move(*feed);
  }
  // The record as of now, subscribed: what the stream brings beyond it is new.
  if (auto now = t->FlowNow()) t->start_ = *now;
  uint64_t rtx = 0;
  for (uint64_t n : t->start_.flow.rtx_segs) rtx += n;
  t->start_rtx_segs_ = static_cast<uint32_t>(rtx);
  t->start_stalls_ = t->start_.flow.stalls;
  return t;
}

FlowTracer::FlowTracer(const TraceSources& src, const ObsFlow& flow, const TraceOptions& opts,
                       StreamSubscription sub)
    : src_(src),
      start_(flow),
      cookie_(flow.cookie),
      tuple_(flow.flow.tuple),
      opts_(opts),
      sub_(std::move(sub)),
      end_(opts.duration.count() ? std::chrono::steady_clock::now() + opts.duration
                                 : std::chrono::steady_clock::time_point::max()) {}

bool FlowTracer::running() const {
  return sub_ && !closed_ && samples_ < opts_.max_samples &&
         std::chrono::steady_clock::now() < end_;
}

void FlowTracer::Stop() {
  drops_.reset();
  trace_.reset();
  sub_.reset();
}

std::optional<ObsFlow> FlowTracer::FlowNow() const {
  for (const ObsFlow& f : src_.flows())
    if (f.cookie == cookie_) return f;
  return std::nullopt;
}

// The counts are the low 32 bits of growing ones: compared as a difference.
bool FlowTracer::InStart(const obs_event& ev) const {
  if (ev.kind == OBS_EV_RETRANSMIT && ev.outcome == OBS_SENT)
    return static_cast<int32_t>(ev.flow_rtx_segs - start_rtx_segs_) <= 0;
  if (ev.kind == OBS_EV_STALL) return static_cast<int32_t>(ev.flow_stalls - start_stalls_) <= 0;
  return false;
}

std::vector<TraceItem> FlowTracer::Next() {
  std::vector<TraceItem> out;
  if (!sub_) return out;
  bool closing = false;
  for (ObsEvent& e : (*sub_)->NextBatch(512, std::chrono::milliseconds(50))) {
    if (InStart(e.data.ev)) continue;
    TraceItem item;
    switch (e.data.ev.kind) {
      case OBS_EV_SAMPLE:
        if (samples_ >= opts_.max_samples) continue;
        samples_++;
        item.kind = TraceItem::Kind::kSample;
        break;
      case OBS_EV_RETRANSMIT: item.kind = TraceItem::Kind::kRetransmit; break;
      case OBS_EV_STALL: item.kind = TraceItem::Kind::kStall; break;
      case OBS_EV_FLOW_CLOSE:
        item.kind = TraceItem::Kind::kClosed;
        closed_ = closing = true;
        break;
      default: continue;
    }
    item.event = std::move(e);
    out.push_back(std::move(item));
  }
  Poll(&out, closing);
  return out;
}

void FlowTracer::Poll(std::vector<TraceItem>* out, bool closing) {
  // Drops and gaps go before what came after them (the trace is read in
  // time order): before the close, which is last.
  auto add = [&](TraceItem item) { out->insert(out->end() - (closing ? 1 : 0), std::move(item)); };
  uint64_t lost = 0;
  if (drops_) {
    // At the close, every drop made before it (the ring's reader may be a
    // poll behind); one the wait does not bring is counted lost.
    if (closing && !drops_->WaitComplete(out->back().event.data.ev.time_ns,
                                         std::chrono::milliseconds(500)))
      LOG_WARN("trace of flow %llu: its drops up to the close did not all arrive",
               static_cast<unsigned long long>(cookie_));
    for (const loss_drop_range& d : drops_->Take(&lost)) {
      TraceItem item;
      item.kind = TraceItem::Kind::kDrop;
      item.drop = DropOf(d);
      add(std::move(item));
    }
  }
  std::vector<StreamLoss> losses = sub_->TakeLosses();
  if (lost) losses.push_back({LossSource::kDropLog, lost});
  for (const StreamLoss& l : losses) {
    TraceItem item;
    item.kind = TraceItem::Kind::kGap;
    item.gap = l;
    add(std::move(item));
  }
}

}  // namespace lossd
