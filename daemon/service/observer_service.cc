#include <arpa/inet.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

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

// At most --max-filters filters in one request (allow and deny together).
Status CheckFilterCount(size_t n, uint32_t max) {
  if (n > max)
    return InvalidArgument(std::to_string(n) + " filters in one request, the limit is " +
                           std::to_string(max) + " (lossd --max-filters)");
  return Status::Ok();
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
    if (f.types_size() > v1::RetransmitType_ARRAYSIZE * 4)
      return InvalidArgument(name + ".types: " + std::to_string(f.types_size()) +
                             " entries (there are " +
                             std::to_string(v1::RetransmitType_ARRAYSIZE - 1) + " types)");
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

// One list of filters (OR across them), compiled so that its cost per event
// does not grow with filters that name a single field (the usual shape of a
// long list: hosts, ports, cgroups, rules or types to allow or deny): those
// are looked up in hash sets, a port bitmap and a type mask; the others are
// checked one by one. Same answers as Matches() over the list.
class FilterSet {
 public:
  explicit FilterSet(const std::vector<Filter>& filters) {
    for (const Filter& f : filters) {
      bool a = f.addr.has_value(), p = !f.port.Any(), c = f.cgroup_id != 0, t = !f.types.empty(),
           r = f.rule_id != 0;
      // A filter by owner name (unit, container, ...) is checked one by one (rest_).
      int fields = a + p + c + t + r + f.by_owner();
      if (fields == 0) {
        all_ = true;
      } else if (fields == 1 && a && f.addr->IsHost()) {
        hosts_.insert(HostKey(f.addr->family, f.addr->addr.data()));
      } else if (fields == 1 && p) {
        if (ports_.empty()) ports_.resize(65536);
        for (uint32_t port = f.port.lo; port <= f.port.hi; port++) ports_[port] = true;
      } else if (fields == 1 && c) {
        cgroups_.insert(f.cgroup_id);
      } else if (fields == 1 && r) {
        rules_.insert(f.rule_id);
      } else if (fields == 1 && t) {
        for (int ty : f.types) types_ |= 1u << ty;
      } else {
        rest_.push_back(f);
      }
      size_++;
    }
  }
  bool empty() const { return size_ == 0; }

  bool Any(const obs_tuple& t, uint64_t cgroup_id, int type, FlowRules& rules) const {
    if (all_) return true;
    if (types_ && (type < 0 || (types_ >> type) & 1)) return true;  // flows: type ignored
    if (!hosts_.empty()) {
      int fam = t.family == AF_INET ? 4 : 6;
      if (hosts_.count(HostKey(fam, reinterpret_cast<const uint8_t*>(t.saddr))) ||
          hosts_.count(HostKey(fam, reinterpret_cast<const uint8_t*>(t.daddr))))
        return true;
    }
    if (!ports_.empty() && (ports_[t.sport] || ports_[t.dport])) return true;
    if (cgroup_id && cgroups_.count(cgroup_id)) return true;
    if (!rules_.empty())
      for (uint32_t id : rules.get())
        if (rules_.count(id)) return true;
    for (const Filter& f : rest_)
      if (Matches(f, t, cgroup_id, type, rules)) return true;
    return false;
  }

 private:
  static std::string HostKey(int family, const uint8_t* addr) {
    std::string k(1, static_cast<char>(family));
    k.append(reinterpret_cast<const char*>(addr), family == 4 ? 4 : 16);
    return k;
  }
  size_t size_ = 0;
  bool all_ = false;
  uint32_t types_ = 0;
  std::unordered_set<std::string> hosts_;
  std::vector<bool> ports_;
  std::unordered_set<uint64_t> cgroups_;
  std::unordered_set<uint32_t> rules_;
  std::vector<Filter> rest_;
};

// OR across allow filters (none = all), then no deny filter may match.
bool Wanted(const FilterSet& allow, const FilterSet& deny, const obs_tuple& t, uint64_t cgroup_id,
            int type, FlowRules rules) {
  if (!allow.empty() && !allow.Any(t, cgroup_id, type, rules)) return false;
  return !deny.Any(t, cgroup_id, type, rules);
}

// Reports the losses a stream saw since the last report, per source. A
// subscription with a filter loses events before its filter saw them: those
// are the hub's (at most that many were wanted); the others are exact.
struct GapTracker {
  uint64_t ring_seen = 0, sub_seen = 0, own_seen = 0;
  bool filtered = false;  // the stream filters what its subscription delivers
  template <typename Emit>
  void Report(Observer* obs, Subscription* sub, uint64_t own_lost, Emit emit) {
    uint64_t ring = obs->Totals().counters[OBS_CNT_RING_LOST];
    if (ring > ring_seen) emit(v1::GAP_SOURCE_KERNEL_RING, ring - ring_seen);
    ring_seen = ring;
    uint64_t lost = sub->lost();
    if (lost > sub_seen)
      emit(sub->filtered() ? v1::GAP_SOURCE_DAEMON_HUB : v1::GAP_SOURCE_SUBSCRIBER,
           lost - sub_seen);
    sub_seen = lost;
    if (own_lost > own_seen) emit(v1::GAP_SOURCE_SUBSCRIBER, own_lost - own_seen);
    own_seen = own_lost;
  }
};

// The event streams (WatchRetransmits, WatchStalls): events of one kind
// through the request's allow/deny filters, in batches, with in-band gaps.
// `fill(event, item)` writes one event into its batch item.
template <typename Batch, typename Request, typename Fill>
grpc::ServerWriteReactor<Batch>* EventStream(const Components* parts, std::atomic<int>* subs,
                                             const Request* req, uint32_t kind,
                                             const char* stream_name, Fill fill) {
  using Reactor = PumpReactor<Batch>;
  std::vector<Filter> allow_list, deny_list;
  Status st =
      CheckFilterCount(size_t(req->allow_size()) + req->deny_size(), parts->api().max_filters);
  if (st.ok()) st = ParseFilters(req->allow(), "allow", &allow_list);
  if (st.ok()) st = ParseFilters(req->deny(), "deny", &deny_list);
  auto queue_len = parts->streams().QueueLength(req->queue(), 65536, "queue");
  if (st.ok()) st = queue_len.status();
  size_t queue = queue_len.ok() ? *queue_len : 1;
  auto allow = std::make_shared<const FilterSet>(allow_list);
  auto deny = std::make_shared<const FilterSet>(deny_list);
  auto need = parts->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts->effects();
  // Retransmissions filter by type; other kinds ignore the types.
  bool typed = kind == OBS_EV_RETRANSMIT;
  return new Reactor([=](typename Reactor::Sink& sink) -> grpc::Status {
    if (!st.ok()) return ToGrpc(st);
    if (!obs) return ToGrpc(need.status());
    // The hub offers every event of the kind; the filters run here, on this
    // stream's thread (an expensive filter set costs this stream only), and
    // this thread keeps taking events while a write is in flight, so what
    // this stream loses it loses after its filter: exactly counted.
    SubscribeOptions so;
    so.queue = queue;
    so.kinds = KindBit(kind);
    if (!allow->empty() || !deny->empty())
      so.filter = [=](const obs_event& ev) {
        return Wanted(*allow, *deny, ev.tuple, ev.cgroup_id, typed ? static_cast<int>(ev.type) : -1,
                      FlowRules(effects, ev.cookie, ev.tuple));
      };
    so.stream = stream_name;
    so.also_holds = Subscription::QueueBytes(queue);  // `waiting`, below
    auto opened = obs->hub().Subscribe(std::move(so));
    if (!opened.ok()) return ToGrpc(opened.status());
    std::shared_ptr<Subscription> sub = *opened;
    (*subs)++;
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    uint64_t seq = 0, own_lost = 0;
    std::deque<ObsEvent> waiting;  // wanted, not yet written (the client is slow)
    auto next_report = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    // One write carries what waits (up to kMaxBatch items): while the
    // previous write is in flight, events gather here.
    constexpr size_t kMaxBatch = 512;
    while (!sink.done()) {
      bool busy = sink.Busy();
      auto wait =
          busy || !waiting.empty() ? std::chrono::milliseconds(2) : std::chrono::milliseconds(100);
      for (ObsEvent& e : sub->NextBatch(kMaxBatch, wait)) {
        if (waiting.size() >= queue) {
          own_lost++;
          continue;
        }
        waiting.push_back(std::move(e));
      }
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
        gaps.Report(obs, sub.get(), own_lost, [&](v1::GapSource src, uint64_t n) {
          auto* m = batch.add_items();
          m->set_seq(++seq);
          m->mutable_gap()->set_source(src);
          m->mutable_gap()->set_count(n);
        });
      }
      if (batch.items_size() && !sink.Write(batch)) break;
    }
    obs->hub().Unsubscribe(sub);
    (*subs)--;
    return grpc::Status::OK;
  });
}

// A stall as the API shows it: with the rules covering its flow and the drop
// of one of them that made its hole, if one did.
void StallMessage(EffectTracker* effects, const obs_stall_event& e, v1::StallEvent* out) {
  StallToProto(e, out);
  if (!effects) return;
  for (uint32_t id : effects->RulesFor(e.ev.cookie, e.ev.tuple)) out->add_rule_ids(id);
  if (!out->rule_ids_size()) return;
  if (auto drop = effects->StallDrop(e.ev.tuple, e.stall))
    DropToProto(*drop, out->mutable_caused_by());
}

}  // namespace

grpc::ServerWriteReactor<v1::RetransmitStreamBatch>* ObserverService::WatchRetransmits(
    grpc::CallbackServerContext*, const v1::WatchRetransmitsRequest* req) {
  EffectTracker* effects = parts_->effects();
  return EventStream<v1::RetransmitStreamBatch>(
      parts_, &subscribers_, req, OBS_EV_RETRANSMIT, "WatchRetransmits",
      [effects](const ObsEvent& e, v1::RetransmitEvent* out) {
        EventToProto(e.data.ev, out);
        if (effects)
          for (uint32_t id : effects->RulesFor(e.data.ev.cookie, e.data.ev.tuple))
            out->add_rule_ids(id);
      });
}

grpc::ServerWriteReactor<v1::StallStreamBatch>* ObserverService::WatchStalls(
    grpc::CallbackServerContext*, const v1::WatchStallsRequest* req) {
  EffectTracker* effects = parts_->effects();
  return EventStream<v1::StallStreamBatch>(parts_, &subscribers_, req, OBS_EV_STALL, "WatchStalls",
                                           [effects](const ObsEvent& e, v1::StallEvent* out) {
                                             StallMessage(effects, e.As<obs_stall_event>(), out);
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
  std::vector<Filter> list;
  Status st = CheckFilterCount(req->filter_size(), parts_->api().max_filters);
  if (st.ok()) st = ParseFilters(req->filter(), "filter", &list);
  if (!st.ok()) {
    r->Finish(ToGrpc(st));
    return r;
  }
  FilterSet filters(list), none({});
  for (const auto& f : obs->Flows()) {
    FlowRules rules(parts_->effects(), f.cookie, f.flow.tuple);
    if (Wanted(filters, none, f.flow.tuple, f.flow.cgroup_id, -1, rules))
      FlowToProto(f.cookie, f.flow, resp->add_flows());
  }
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerWriteReactor<v1::FlowStreamMessage>* ObserverService::WatchFlows(
    grpc::CallbackServerContext*, const v1::WatchFlowsRequest* req) {
  using Reactor = PumpReactor<v1::FlowStreamMessage>;
  std::vector<Filter> list;
  Status st = CheckFilterCount(req->filter_size(), parts_->api().max_filters);
  if (st.ok()) st = ParseFilters(req->filter(), "filter", &list);
  auto filters = std::make_shared<const FilterSet>(list);
  auto period = StreamPeriod(req->interval_ns(), "interval_ns");
  if (st.ok()) st = period.status();
  auto interval = period.ok() ? *period : std::chrono::nanoseconds(0);
  // `queue`: the closed flows one message may carry (beyond: Gaps); the
  // closes wait for the stream's thread in a queue of the default length.
  auto queue_len = parts_->streams().QueueLength(req->queue(), 65536, "queue");
  if (st.ok()) st = queue_len.status();
  size_t queue = queue_len.ok() ? *queue_len : 1;
  size_t intake = *parts_->streams().QueueLength(0, 65536, "");
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!st.ok()) return ToGrpc(st);
    if (!obs) return ToGrpc(need.status());
    FilterSet none({});
    auto wanted = [&](uint64_t cookie, const obs_flow& f) {
      return Wanted(*filters, none, f.tuple, f.cgroup_id, -1, FlowRules(effects, cookie, f.tuple));
    };
    // The hub offers every close; this thread filters them as they come (not
    // once per message), so the gap counts cover only closes it would carry.
    SubscribeOptions so;
    so.queue = intake;
    so.kinds = KindBit(OBS_EV_FLOW_CLOSE);
    so.stream = "WatchFlows";
    so.also_holds = Subscription::QueueBytes(queue);  // `waiting`, below
    auto opened = obs->hub().Subscribe(std::move(so));
    if (!opened.ok()) return ToGrpc(opened.status());
    std::shared_ptr<Subscription> closes = *opened;
    std::deque<ObsEvent> waiting;  // wanted closes for the next message (at most `queue`)
    uint64_t own_lost = 0;
    auto take = [&](std::chrono::milliseconds wait) {
      for (ObsEvent& e : closes->NextBatch(512, wait)) {
        if (!wanted(e.data.ev.cookie, e.data.flow)) continue;
        if (waiting.size() >= queue) {
          own_lost++;
          continue;
        }
        waiting.push_back(std::move(e));
      }
    };
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    gaps.filtered = !filters->empty();  // filtered here (`take`): the flow is beside the event
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
      take(std::chrono::milliseconds(0));
      for (const ObsEvent& e : waiting) {
        FlowToProto(e.data.ev.cookie, e.data.flow, m.add_flows(),
                    std::max<uint64_t>(e.data.closed_ns, 1));
      }
      waiting.clear();
      gaps.Report(obs, closes.get(), own_lost, [&](v1::GapSource src, uint64_t n) {
        v1::Gap* g = m.add_gaps();
        g->set_source(src);
        g->set_count(n);
      });
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
    obs->hub().Unsubscribe(closes);
    return result;
  });
}

grpc::ServerWriteReactor<v1::Aggregate>* ObserverService::WatchAggregates(
    grpc::CallbackServerContext*, const v1::WatchAggregatesRequest* req) {
  using Reactor = PumpReactor<v1::Aggregate>;
  auto period = StreamPeriod(req->window_ns(), "window_ns");
  size_t queue = *parts_->streams().QueueLength(0, 65536, "");  // --max-queue at most
  uint64_t window = period.ok() ? uint64_t(period->count()) : 0;
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  EffectTracker* effects = parts_->effects();
  std::atomic<int>* subs = &subscribers_;
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!period.ok()) return ToGrpc(period.status());
    if (!obs) return ToGrpc(need.status());
    SubscribeOptions so;
    so.queue = queue;
    so.kinds = KindBit(OBS_EV_RETRANSMIT);
    so.stream = "WatchAggregates";
    auto opened = obs->hub().Subscribe(std::move(so));
    if (!opened.ok()) return ToGrpc(opened.status());
    std::shared_ptr<Subscription> sub = *opened;
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
      gaps.Report(obs, sub.get(), 0, [&](v1::GapSource src, uint64_t n) {
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

namespace {

// One flow's drops as the injector logged them (its data, local -> remote),
// told once each: `seen` is how many of them the trace has told (or skipped).
void NewDrops(Injector* inj, const obs_tuple& t, uint64_t* seen, std::vector<loss_drop_range>* out,
              uint64_t* skipped) {
  if (!inj) return;
  auto drops = inj->DropsOf(SentDropKey(t));
  if (!drops.ok() || drops->total <= *seen) return;
  uint64_t fresh = drops->total - *seen;
  size_t kept = drops->ranges.size();
  if (fresh > kept) {
    *skipped += fresh - kept;
    fresh = kept;
  }
  out->insert(out->end(), drops->ranges.end() - static_cast<long>(fresh), drops->ranges.end());
  *seen = drops->total;
}

}  // namespace

grpc::ServerWriteReactor<v1::TraceMessage>* ObserverService::TraceFlow(
    grpc::CallbackServerContext*, const v1::TraceFlowRequest* req) {
  using Reactor = PumpReactor<v1::TraceMessage>;
  constexpr uint64_t kHour = 3600ull * 1000 * 1000 * 1000;
  Status st;
  std::vector<Filter> by;
  bool by_filter = req->has_flow();
  if (!req->cookie() && !by_filter)
    st = InvalidArgument("name the flow to trace: cookie, or flow (an address and/or port)");
  else if (req->cookie() && by_filter)
    st = InvalidArgument("cookie and flow both set: name the flow one way");
  if (st.ok() && by_filter) {
    google::protobuf::RepeatedPtrField<v1::EventFilter> one;
    *one.Add() = req->flow();
    st = ParseFilters(one, "flow", &by);
    if (st.ok() && !by[0].types.empty()) st = InvalidArgument("flow.types: a flow has no type");
  }
  if (st.ok() && req->wait_ns() > kHour) st = InvalidArgument("wait_ns: at most 1 h");
  if (st.ok() && req->max_samples() > 1000000)
    st = InvalidArgument("max_samples: at most 1,000,000 (got " +
                         std::to_string(req->max_samples()) + ")");
  if (st.ok() && req->duration_ns() > 24 * kHour) st = InvalidArgument("duration_ns: at most 24 h");
  auto matcher = std::make_shared<const FilterSet>(by);
  uint64_t cookie = req->cookie();
  auto wait = std::chrono::nanoseconds(req->wait_ns() ? req->wait_ns() : 10000000000ull);
  uint64_t max_samples = req->max_samples() ? req->max_samples() : 100000;
  auto duration = std::chrono::nanoseconds(req->duration_ns());
  size_t queue = *parts_->streams().QueueLength(0, 65536, "");
  auto need = parts_->NeedObserver();
  Observer* obs = need.ok() ? *need : nullptr;
  const Components* parts = parts_;
  return new Reactor([=](Reactor::Sink& sink) -> grpc::Status {
    if (!st.ok()) return ToGrpc(st);
    if (!obs) return ToGrpc(need.status());
    EffectTracker* effects = parts->effects();
    FilterSet none({});
    // The flow: by cookie now, or the first that matches within `wait`.
    auto find = [&]() -> std::optional<ObsFlow> {
      for (const ObsFlow& f : obs->Flows()) {
        if (cookie ? f.cookie == cookie
                   : Wanted(*matcher, none, f.flow.tuple, f.flow.cgroup_id, -1,
                            FlowRules(effects, f.cookie, f.flow.tuple)))
          return f;
      }
      return std::nullopt;
    };
    auto give_up = std::chrono::steady_clock::now() + wait;
    std::optional<ObsFlow> flow = find();
    while (!flow && !cookie && !sink.done() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      flow = find();
    }
    if (sink.done()) return grpc::Status::CANCELLED;
    if (!flow)
      return ToGrpc(NotFound(cookie ? "no open flow with cookie " + std::to_string(cookie)
                                    : "no open flow matched within " +
                                          std::to_string(wait.count() / 1000000) + " ms"));
    const uint64_t traced = flow->cookie;
    const obs_tuple tuple = flow->flow.tuple;
    // Subscribe first, then mark the flow traced: no sample is missed.
    SubscribeOptions so;
    so.queue = queue;
    so.kinds = KindBit(OBS_EV_SAMPLE) | KindBit(OBS_EV_RETRANSMIT) | KindBit(OBS_EV_STALL) |
               KindBit(OBS_EV_FLOW_CLOSE);
    so.filter = [traced](const obs_event& ev) { return ev.cookie == traced; };
    so.stream = "TraceFlow";
    auto opened = obs->hub().Subscribe(std::move(so));
    if (!opened.ok()) return ToGrpc(opened.status());
    std::shared_ptr<Subscription> sub = *opened;
    auto handle = obs->Trace(traced);
    if (!handle.ok()) {
      obs->hub().Unsubscribe(sub);
      return ToGrpc(handle.status());
    }
    uint64_t seq = 0, samples = 0, drops_seen = 0, drops_skipped = 0, drops_reported = 0;
    // Drops before the trace began are history: start from the log's count now.
    {
      std::vector<loss_drop_range> old;
      uint64_t skipped = 0;
      NewDrops(parts->injector(), tuple, &drops_seen, &old, &skipped);
    }
    GapTracker gaps;
    gaps.ring_seen = obs->Totals().counters[OBS_CNT_RING_LOST];
    v1::TraceMessage first;
    first.set_seq(++seq);
    FlowToProto(traced, flow->flow, first.mutable_flow());
    bool ok = sink.Write(first);
    auto end = duration.count() ? std::chrono::steady_clock::now() + duration
                                : std::chrono::steady_clock::time_point::max();
    auto next_poll = std::chrono::steady_clock::now();
    bool closed = false;
    while (ok && !closed && !sink.done() && samples < max_samples &&
           std::chrono::steady_clock::now() < end) {
      std::vector<v1::TraceMessage> out;
      for (ObsEvent& e : sub->NextBatch(512, std::chrono::milliseconds(50))) {
        v1::TraceMessage m;
        switch (e.data.ev.kind) {
          case OBS_EV_SAMPLE:
            if (samples >= max_samples) continue;
            samples++;
            SampleToProto(e.As<obs_sample_event>(), m.mutable_sample());
            break;
          case OBS_EV_RETRANSMIT: EventToProto(e.data.ev, m.mutable_retransmit()); break;
          case OBS_EV_STALL:
            StallMessage(effects, e.As<obs_stall_event>(), m.mutable_stall());
            break;
          case OBS_EV_FLOW_CLOSE:
            FlowToProto(traced, e.data.flow, m.mutable_closed(),
                        std::max<uint64_t>(e.data.closed_ns, 1));
            closed = true;
            break;
          default: continue;
        }
        out.push_back(std::move(m));
      }
      if (closed || std::chrono::steady_clock::now() >= next_poll) {
        next_poll = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        std::vector<loss_drop_range> fresh;
        NewDrops(parts->injector(), tuple, &drops_seen, &fresh, &drops_skipped);
        // Drops go before what came after them (the trace is read in time order).
        for (const loss_drop_range& d : fresh) {
          v1::TraceMessage m;
          DropToProto(DropRecord{d.rule_id, d.time_ns, d.seq, d.len, d.segs},
                      m.mutable_drop()->mutable_drop());
          out.insert(out.end() - (closed ? 1 : 0), std::move(m));
        }
        auto gap = [&](v1::GapSource src, uint64_t n) {
          v1::TraceMessage m;
          m.mutable_gap()->set_source(src);
          m.mutable_gap()->set_count(n);
          out.insert(out.end() - (closed ? 1 : 0), std::move(m));
        };
        gaps.Report(obs, sub.get(), 0, gap);
        if (drops_skipped > drops_reported)
          gap(v1::GAP_SOURCE_DROP_LOG, drops_skipped - drops_reported);
        drops_reported = drops_skipped;
      }
      for (v1::TraceMessage& m : out) {
        m.set_seq(++seq);
        if (!(ok = sink.Write(std::move(m)))) break;
      }
    }
    handle->reset();
    obs->hub().Unsubscribe(sub);
    if (ok && !closed && !sink.done()) {
      // Ended by max_samples or duration: the flow as it is now.
      for (const ObsFlow& f : obs->Flows())
        if (f.cookie == traced) {
          v1::TraceMessage m;
          m.set_seq(++seq);
          FlowToProto(traced, f.flow, m.mutable_closed());
          sink.Write(std::move(m));
        }
    }
    return grpc::Status::OK;
  });
}

}  // namespace lossd
