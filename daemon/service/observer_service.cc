#include <arpa/inet.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>
#include <unordered_map>

#include "common/clock.h"
#include "service/convert.h"
#include "service/services.h"
#include "service/stream.h"

namespace lossd {
namespace {

// A typed filter, parsed once per stream.
struct Filter {
  std::optional<Cidr> addr;
  PortRange port;
  uint64_t cgroup_id = 0;
  std::set<int> types;  // obs_rtx_type; empty = any
  uint32_t rule_id = 0;
  // The socket's owner by name (host/targets.h); looked up only when given.
  std::string cgroup, unit, container, pod;
  bool by_owner() const {
    return !cgroup.empty() || !unit.empty() || !container.empty() || !pod.empty();
  }
};

// Whether path (below the mount) is `cgroup` or below it.
bool Under(const std::string& path, const std::string& cgroup) {
  if (cgroup == "/") return true;
  return path == cgroup || path.rfind(cgroup + "/", 0) == 0;
}

bool OwnerMatches(const Filter& f, uint64_t cgroup_id) {
  CgroupOwner o = OwnerOfCgroupId(cgroup_id);
  if (o.path.empty()) return false;
  if (!f.cgroup.empty() && !Under(o.path, f.cgroup)) return false;
  if (!f.unit.empty() && o.path.find("/" + f.unit + "/") == std::string::npos &&
      (o.path.size() < f.unit.size() + 1 ||
       o.path.compare(o.path.size() - f.unit.size() - 1, std::string::npos, "/" + f.unit) != 0))
    return false;
  if (!f.container.empty() && o.container.rfind(f.container, 0) != 0) return false;
  if (!f.pod.empty() && o.pod.rfind(f.pod, 0) != 0) return false;
  return true;
}

Status ParseFilters(const google::protobuf::RepeatedPtrField<v1::EventFilter>& in,
                    const char* field, std::vector<Filter>* out) {
  for (int i = 0; i < in.size(); i++) {
    const v1::EventFilter& f = in[i];
    std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    Filter p;
    if (!f.addr().empty()) {
      auto c = ParseCidr(f.addr());
      if (!c.ok()) return InvalidArgument(name + ".addr: " + c.status().message());
      p.addr = *c;
    }
    if (f.port().lo() || f.port().hi()) {
      uint32_t hi = f.port().hi() ? f.port().hi() : f.port().lo();
      if (f.port().lo() > hi || hi > 65535) return InvalidArgument(name + ".port: invalid range");
      p.port.lo = static_cast<uint16_t>(f.port().lo());
      p.port.hi = static_cast<uint16_t>(hi);
    }
    p.cgroup_id = f.cgroup_id();
    for (int t : f.types()) {
      if (t <= v1::RETRANSMIT_TYPE_UNSPECIFIED || t > v1::RETRANSMIT_TYPE_UNKNOWN)
        return InvalidArgument(name + ".types: unknown type " + std::to_string(t));
      p.types.insert(t - 1);  // proto enum = obs_rtx_type + 1
    }
    p.rule_id = f.rule_id();
    for (auto [field, in, to] : {std::make_tuple("cgroup", &f.cgroup(), &p.cgroup),
                                 std::make_tuple("unit", &f.unit(), &p.unit),
                                 std::make_tuple("container", &f.container(), &p.container),
                                 std::make_tuple("pod", &f.pod(), &p.pod)}) {
      if (in->size() > kMaxInputLength)
        return InvalidArgument(name + "." + field + ": at most " + std::to_string(kMaxInputLength) +
                               " characters: '" + Shown(*in) + "'");
      *to = *in;
    }
    if (!p.cgroup.empty() && p.cgroup[0] != '/') p.cgroup = "/" + p.cgroup;
    while (p.cgroup.size() > 1 && p.cgroup.back() == '/') p.cgroup.pop_back();
    if (!p.unit.empty() && p.unit.find('.') == std::string::npos) p.unit += ".service";
    for (auto* v : {&p.container, &p.pod})
      std::transform(v->begin(), v->end(), v->begin(), [](unsigned char c) {
        return c == '_' ? '-' : static_cast<char>(std::tolower(c));
      });
    out->push_back(p);
  }
  return Status::Ok();
}

// The rules whose match covers one flow, looked up only when a filter asks
// (rule_id): most subscribers never pay for it.
class FlowRules {
 public:
  FlowRules(EffectTracker* effects, uint64_t cookie, const obs_tuple& t)
      : effects_(effects), cookie_(cookie), tuple_(t) {}
  const std::vector<uint32_t>& get() {
    if (!looked_up_ && effects_) ids_ = effects_->RulesFor(cookie_, tuple_);
    looked_up_ = true;
    return ids_;
  }

 private:
  EffectTracker* effects_;
  uint64_t cookie_;
  const obs_tuple& tuple_;
  bool looked_up_ = false;
  std::vector<uint32_t> ids_;
};

// AND inside a filter. type < 0: not a retransmission (flows): type ignored.
bool Matches(const Filter& f, const obs_tuple& t, uint64_t cgroup_id, int type, FlowRules& rules) {
  if (f.addr && !AddrInCidr(*f.addr, t.family, t.saddr) && !AddrInCidr(*f.addr, t.family, t.daddr))
    return false;
  if (!f.port.Any() && !(f.port.lo <= t.sport && t.sport <= f.port.hi) &&
      !(f.port.lo <= t.dport && t.dport <= f.port.hi))
    return false;
  if (f.cgroup_id && f.cgroup_id != cgroup_id) return false;
  if (f.by_owner() && !OwnerMatches(f, cgroup_id)) return false;
  if (type >= 0 && !f.types.empty() && !f.types.count(type)) return false;
  if (f.rule_id) {
    const std::vector<uint32_t>& ids = rules.get();
    if (std::find(ids.begin(), ids.end(), f.rule_id) == ids.end()) return false;
  }
  return true;
}

// OR across allow filters (none = all), then no deny filter may match.
bool Wanted(const std::vector<Filter>& allow, const std::vector<Filter>& deny, const obs_tuple& t,
            uint64_t cgroup_id, int type, FlowRules rules) {
  bool ok = allow.empty();
  for (const auto& f : allow)
    if (Matches(f, t, cgroup_id, type, rules)) ok = true;
  if (!ok) return false;
  for (const auto& f : deny)
    if (Matches(f, t, cgroup_id, type, rules)) return false;
  return true;
}

// Reports the losses a stream saw since the last report, per source.
struct GapTracker {
  uint64_t ring_seen = 0, sub_seen = 0;
  template <typename Emit>
  void Report(Observer* obs, Subscription* sub, Emit emit) {
    uint64_t ring = obs->Totals().counters[OBS_CNT_RING_LOST];
    if (ring > ring_seen) emit(v1::GAP_SOURCE_KERNEL_RING, ring - ring_seen);
    ring_seen = ring;
    uint64_t lost = sub->lost();
    if (lost > sub_seen) emit(v1::GAP_SOURCE_SUBSCRIBER, lost - sub_seen);
    sub_seen = lost;
  }
};

}  // namespace

grpc::ServerWriteReactor<v1::RetransmitStreamBatch>* ObserverService::WatchRetransmits(
    grpc::CallbackServerContext*, const v1::WatchRetransmitsRequest* req) {
  using Reactor = PumpReactor<v1::RetransmitStreamBatch>;
  std::vector<Filter> allow, deny;
  Status st = ParseFilters(req->allow(), "allow", &allow);
  if (st.ok()) st = ParseFilters(req->deny(), "deny", &deny);
  size_t queue = req->queue() ? req->queue() : 65536;
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  std::atomic<int>* subs = &subscribers_;
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!st.ok()) return ToGrpc(st);
    if (!obs) return ToGrpc(need.status());
    // Filtered at the hub: this subscriber's gap counts cover only events
    // it would have received.
    auto sub = obs->hub().Subscribe(queue, [=](const ObsEvent& e) {
      const obs_event& ev = e.data.ev;
      if (ev.kind != OBS_EV_RETRANSMIT) return false;
      return Wanted(allow, deny, ev.tuple, ev.cgroup_id, static_cast<int>(ev.type),
                    FlowRules(effects, ev.cookie, ev.tuple));
    });
    (*subs)++;
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    uint64_t seq = 0;
    auto next_report = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    grpc::Status result = grpc::Status::OK;
    // One write carries what waits (up to kMaxBatch items): while the
    // previous write is in flight, events gather in this subscriber's queue.
    constexpr size_t kMaxBatch = 512;
    while (!sink.done()) {
      v1::RetransmitStreamBatch batch;
      for (const ObsEvent& e : sub->NextBatch(kMaxBatch, std::chrono::milliseconds(100))) {
        const obs_event& ev = e.data.ev;
        v1::RetransmitStreamMessage* m = batch.add_items();
        m->set_seq(++seq);
        EventToProto(ev, m->mutable_event());
        if (effects)
          for (uint32_t id : effects->RulesFor(ev.cookie, ev.tuple))
            m->mutable_event()->add_rule_ids(id);
      }
      if (std::chrono::steady_clock::now() >= next_report) {
        next_report += std::chrono::seconds(1);
        gaps.Report(obs, sub.get(), [&](v1::GapSource src, uint64_t n) {
          v1::RetransmitStreamMessage* m = batch.add_items();
          m->set_seq(++seq);
          m->mutable_gap()->set_source(src);
          m->mutable_gap()->set_count(n);
        });
      }
      if (batch.items_size() && !sink.Write(batch)) break;
    }
    obs->hub().Unsubscribe(sub);
    (*subs)--;
    return result;
  });
}

grpc::ServerUnaryReactor* ObserverService::ListFlows(grpc::CallbackServerContext* ctx,
                                                     const v1::ListFlowsRequest* req,
                                                     v1::ListFlowsResponse* resp) {
  auto* r = ctx->DefaultReactor();
  auto need = parts_->NeedObserver();
  if (!need.ok()) {
    r->Finish(ToGrpc(need.status()));
    return r;
  }
  Observer* obs = *need;
  std::vector<Filter> filters;
  Status st = ParseFilters(req->filter(), "filter", &filters);
  if (!st.ok()) {
    r->Finish(ToGrpc(st));
    return r;
  }
  for (const auto& f : obs->Flows()) {
    FlowRules rules(parts_->effects(), f.cookie, f.flow.tuple);
    if (Wanted(filters, {}, f.flow.tuple, f.flow.cgroup_id, -1, rules))
      FlowToProto(f.cookie, f.flow, resp->add_flows());
  }
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerWriteReactor<v1::FlowStreamMessage>* ObserverService::WatchFlows(
    grpc::CallbackServerContext*, const v1::WatchFlowsRequest* req) {
  using Reactor = PumpReactor<v1::FlowStreamMessage>;
  std::vector<Filter> filters;
  Status st = ParseFilters(req->filter(), "filter", &filters);
  auto period = StreamPeriod(req->interval_ns(), "interval_ns");
  if (st.ok()) st = period.status();
  auto interval = period.ok() ? *period : std::chrono::nanoseconds(0);
  constexpr uint32_t kMaxQueue = 65536;
  if (st.ok() && req->queue() > kMaxQueue)
    st = InvalidArgument("queue: at most " + std::to_string(kMaxQueue) + " closed flows (got " +
                         std::to_string(req->queue()) + ")");
  size_t queue = req->queue() ? req->queue() : kMaxQueue;
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!st.ok()) return ToGrpc(st);
    if (!obs) return ToGrpc(need.status());
    auto wanted = [=](uint64_t cookie, const obs_flow& f) {
      return Wanted(filters, {}, f.tuple, f.cgroup_id, -1, FlowRules(effects, cookie, f.tuple));
    };
    // Filtered at the hub: the gap counts cover only closes it would carry.
    auto closes = obs->hub().Subscribe(queue, [=](const ObsEvent& e) {
      return e.data.ev.kind == OBS_EV_FLOW_CLOSE && wanted(e.data.ev.cookie, e.data.flow);
    });
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    uint64_t seq = 0, since = 0;
    bool first = true;
    grpc::Status result = grpc::Status::OK;
    while (!sink.done()) {
      v1::FlowStreamMessage m;
      m.set_seq(++seq);
      m.set_snapshot(first);
      m.set_time_unix_ns(UnixNs());
      uint64_t newest = since;
      for (const auto& f : obs->Flows()) {
        newest = std::max<uint64_t>(newest, f.flow.updated_ns);
        if ((first || f.flow.updated_ns > since) && wanted(f.cookie, f.flow))
          FlowToProto(f.cookie, f.flow, m.add_flows());
      }
      // Every close since the subscription, the first message's too: a flow
      // that closed before the snapshot was taken is in no snapshot.
      while (auto e = closes->Next(std::chrono::milliseconds(0))) {
        v1::Flow* f = m.add_flows();
        FlowToProto(e->data.ev.cookie, e->data.flow, f);
        f->set_closed(true);
        f->set_duration_ns(e->data.closed_ns > e->data.flow.opened_ns
                               ? e->data.closed_ns - e->data.flow.opened_ns
                               : 0);
      }
      gaps.Report(obs, closes.get(), [&](v1::GapSource src, uint64_t n) {
        v1::Gap* g = m.add_gaps();
        g->set_source(src);
        g->set_count(n);
      });
      since = newest;
      first = false;
      if (!sink.Write(m)) break;
      if (!sink.Sleep(interval)) break;
    }
    obs->hub().Unsubscribe(closes);
    return result;
  });
}

grpc::ServerWriteReactor<v1::Aggregate>* ObserverService::WatchAggregates(
    grpc::CallbackServerContext*, const v1::WatchAggregatesRequest* req) {
  using Reactor = PumpReactor<v1::Aggregate>;
  auto period = StreamPeriod(req->window_ns(), "window_ns");
  uint64_t window = period.ok() ? uint64_t(period->count()) : 0;
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  std::atomic<int>* subs = &subscribers_;
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!period.ok()) return ToGrpc(period.status());
    if (!obs) return ToGrpc(need.status());
    auto sub = obs->hub().Subscribe(1 << 18, [](const ObsEvent& e) {
      return e.data.ev.kind == OBS_EV_RETRANSMIT &&
             (e.data.ev.outcome == OBS_SENT || e.data.ev.outcome == OBS_FAILED);
    });
    (*subs)++;
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    uint64_t seq = 0;
    while (!sink.done()) {
      v1::Aggregate a;
      a.set_window_start_unix_ns(UnixNs());
      a.set_window_ns(window);
      for (int t = 0; t < OBS_RTX_MAX; t++) (*a.mutable_retransmits_by_type())[RtxTypeName(t)] = 0;
      auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(window);
      while (!sink.done()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            end - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        auto e = sub->Next(std::min(left, std::chrono::milliseconds(100)));
        if (!e || e->data.ev.kind != OBS_EV_RETRANSMIT) continue;
        const obs_event& ev = e->data.ev;
        if (ev.outcome != OBS_SENT && ev.outcome != OBS_FAILED) continue;
        (*a.mutable_retransmits_by_type())[RtxTypeName(static_cast<int>(ev.type))] += ev.segs;
        (*a.mutable_retransmits_by_flow())[ev.cookie] += ev.segs;
        if (effects)
          for (uint32_t id : effects->RulesFor(ev.cookie, ev.tuple))
            (*a.mutable_retransmits_by_rule())[id] += ev.segs;
      }
      gaps.Report(obs, sub.get(), [&](v1::GapSource src, uint64_t n) {
        v1::Gap* g = a.add_gaps();
        g->set_source(src);
        g->set_count(n);
      });
      if (sink.done()) break;  // a window cut short is not reported
      a.set_seq(++seq);
      if (!sink.Write(a)) break;
    }
    obs->hub().Unsubscribe(sub);
    (*subs)--;
    return grpc::Status::OK;
  });
}

}  // namespace lossd
