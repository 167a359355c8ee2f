#include "live/live.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "host/netns.h"
#include "live/sse.h"
#include "live/web_assets.h"
#include "rules/proto.h"

namespace lossd {
namespace {

// The service / namespace a page is scoped to, as the API's filter.
v1::EventFilter Scope(const EventsQuery& q) {
  v1::EventFilter f;
  f.set_unit(q.unit);
  f.set_container(q.container);
  f.set_pod(q.pod);
  f.set_netns_ino(q.netns);
  return f;
}

constexpr auto kPeriod = std::chrono::seconds(1);
// The followed flow's trace samples, at most one per this (the chart's
// resolution); its drops, retransmits, stalls and gaps all go.
constexpr uint64_t kTraceSampleNs = 5000000;
constexpr uint32_t kTraceMaxSamples = 1000000;  // TraceFlowRequest's maximum
constexpr auto kCallDeadline = std::chrono::seconds(2);

std::string GapJson(v1::GapSource source, uint64_t count, const std::string& stream) {
  return JsonLine({{"source", v1::GapSource_Name(source)},
                   {"count", std::to_string(count)},
                   {"stream", stream}});
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A server stream read again and again (each time with a fresh context that
// Stop() cancels) until stopped; between attempts (the observer still
// loading, the daemon shutting down) it waits a second.
class StreamLoop {
 public:
  // run(ctx) reads one stream to its end and returns its status.
  void Start(std::function<grpc::Status(grpc::ClientContext*)> run) {
    thread_ = std::thread([this, run = std::move(run)] {
      for (;;) {
        grpc::ClientContext ctx;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stopped_) return;
          ctx_ = &ctx;
        }
        run(&ctx);
        std::unique_lock<std::mutex> lock(mu_);
        ctx_ = nullptr;
        if (cv_.wait_for(lock, kPeriod, [&] { return stopped_; })) return;
      }
    });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      if (ctx_) ctx_->TryCancel();
    }
    cv_.notify_all();
    // Stop() may come from two threads at once (a connection's end, the daemon's stop).
    std::lock_guard<std::mutex> join(join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  ~StreamLoop() { Stop(); }

 private:
  std::mutex mu_, join_mu_;
  std::condition_variable cv_;
  grpc::ClientContext* ctx_ = nullptr;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace

// One connection to /api/v1/events: its queue, its WatchFlows stream, and
// with ?flow / ?rule its WatchRetransmits stream.
class LiveSession {
 public:
  LiveSession(LivePage* page, const EventsQuery& q, v1::EventFilter filter)
      : page_(page), query_(q), filter_(std::move(filter)),
        queue_(q.queue, page->opts_.max_queue_bytes) {}
  ~LiveSession() { Stop(); }

  void Start() {
    flows_.Start([this](grpc::ClientContext* ctx) {
      v1::WatchFlowsRequest req;
      // ?rule: the rule's flows only (with a scope: the scope's among them).
      if (query_.Scoped() || query_.rule) {
        v1::EventFilter* f = req.add_filter();
        *f = Scope(query_);
        f->set_rule_id(query_.rule);
      }
      req.set_interval_ns(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(kPeriod).count()));
      req.set_queue(page_->opts_.closes_per_message);
      auto reader = page_->observer_->WatchFlows(ctx, req);
      v1::FlowStreamMessage m;
      const OwnEndpoints& own = page_->opts_.own;
      while (reader->Read(&m)) {
        auto* flows = m.mutable_flows();
        flows->erase(std::remove_if(flows->begin(), flows->end(),
                                    [&](const v1::Flow& f) {
                                      const v1::Tuple& t = f.tuple();
                                      return HiddenFromPage(t.remote_addr(), t.local_port(),
                                                            t.remote_port(), f.netns_ino(), own);
                                    }),
                     flows->end());
        queue_.Push("flows", ToJson(m));  // one a second, flows or not
      }
      return reader->Finish();
    });
    if (query_.flow || query_.rule || query_.Scoped()) {
      retransmits_.Start([this](grpc::ClientContext* ctx) {
        v1::WatchRetransmitsRequest req;
        *req.add_allow() = filter_;
        req.set_queue(static_cast<uint32_t>(query_.queue));
        auto reader = page_->observer_->WatchRetransmits(ctx, req);
        v1::RetransmitStreamBatch b;
        while (reader->Read(&b)) {
          for (const auto& item : b.items()) {
            if (item.has_gap()) {
              queue_.Push("gap", GapJson(item.gap().source(), item.gap().count(), "retransmit"));
            } else if (!query_.flow || item.event().cookie() == query_.flow) {
              // The filter (addresses and ports of the flow) can also cover another
              // flow between the same ends: only the one asked for is sent.
              queue_.Push("retransmit", ToJson(item));
            }
          }
        }
        return reader->Finish();
      });
      if (query_.flow) trace_.Start([this](grpc::ClientContext* ctx) { return Trace(ctx); });
    }
  }
  void Stop() {
    queue_.Close();
    flows_.Stop();
    retransmits_.Stop();
    trace_.Stop();
  }
  SseQueue& queue() { return queue_; }
  uint64_t flow() const { return query_.flow; }

 private:
  // The followed flow's TraceFlow, as "trace" messages (v1.TraceMessage),
  // samples thinned to one per kTraceSampleNs. Tried again (the observer
  // loading) until the trace ended with the flow's closing summary.
  grpc::Status Trace(grpc::ClientContext* ctx) {
    if (trace_done_) return grpc::Status::OK;
    v1::TraceFlowRequest req;
    req.set_cookie(query_.flow);
    req.set_max_samples(kTraceMaxSamples);
    auto reader = page_->observer_->TraceFlow(ctx, req);
    v1::TraceMessage m;
    uint64_t last_sample = 0;
    while (reader->Read(&m)) {
      if (m.has_sample()) {
        uint64_t t = m.sample().time_mono_ns();
        if (last_sample && t >= last_sample && t - last_sample < kTraceSampleNs) continue;
        last_sample = t;
      }
      if (m.has_closed()) trace_done_ = true;
      queue_.Push("trace", ToJson(m));
    }
    grpc::Status st = reader->Finish();
    // The flow is gone (closed before the trace began): nothing to try again.
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) trace_done_ = true;
    return st;
  }

  LivePage* page_;
  const EventsQuery query_;
  const v1::EventFilter filter_;
  SseQueue queue_;
  StreamLoop flows_, retransmits_, trace_;
  bool trace_done_ = false;  // the trace thread's: the flow's trace ended (closed)
};

LivePage::LivePage(std::shared_ptr<grpc::Channel> api, LiveOptions opts)
    : api_(std::move(api)),
      injector_(v1::Injector::NewStub(api_)),
      observer_(v1::Observer::NewStub(api_)),
      system_(v1::System::NewStub(api_)),
      opts_(std::move(opts)) {}

LivePage::~LivePage() {
  Stop();
}

void LivePage::Stop() {
  std::set<std::shared_ptr<LiveSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (agg_ctx_) agg_ctx_->TryCancel();
    sessions = sessions_;
  }
  cv_.notify_all();
  for (const auto& s : sessions) s->Stop();
  if (agg_thread_.joinable()) agg_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
}

size_t LivePage::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void LivePage::Register(HttpServer* http) {
  http->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(kLiveIndexHtml, kLiveIndexHtmlSize), "text/html; charset=utf-8");
  });
  http->Get("/static/live.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(kLiveJs, kLiveJsSize), "text/javascript; charset=utf-8");
  });
  http->Get("/static/live.css", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(kLiveCss, kLiveCssSize), "text/css; charset=utf-8");
  });
  std::string chart = opts_.chart_js;
  http->Get("/static/chart.js", [chart](const httplib::Request&, httplib::Response& res) {
    std::ifstream in(chart, std::ios::binary);
    if (!in) {
      res.status = 404;
      res.set_content("Chart.js not found at " + chart + " (Debian package libjs-chart.js)\n",
                      "text/plain");
      return;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    res.set_header("Cache-Control", "max-age=3600");
    res.set_content(ss.str(), "text/javascript; charset=utf-8");
  });
  http->GetStream("/api/v1/events",
                  [this](const httplib::Request& req, httplib::Response& res,
                         std::shared_ptr<HttpStreamSlot> slot) { Events(req, res, slot); });
}

void LivePage::Events(const httplib::Request& req, httplib::Response& res,
                      std::shared_ptr<HttpStreamSlot> slot) {
  auto q = ParseEventsQuery(req.params);
  if (!q.ok()) {
    res.status = 400;
    res.set_content(q.status().message() + "\n", "text/plain");
    return;
  }
  // What the connection looks at, as a typed filter of WatchRetransmits.
  v1::EventFilter filter = Scope(*q);
  Json hello = {{"mono_ns", std::to_string(MonotonicNs())},
                {"unix_ns", std::to_string(UnixNs())},
                {"flow", std::to_string(q->flow)},
                {"rule", q->rule},
                {"queue", q->queue},
                {"unit", q->unit},
                {"container", q->container},
                {"pod", q->pod},
                {"netns", std::to_string(q->netns)}};
  auto fail = [&](const grpc::Status& st, const std::string& what) {
    // UNAVAILABLE while the observer / injector loads: try again.
    res.status = st.error_code() == grpc::StatusCode::NOT_FOUND     ? 404
                 : st.error_code() == grpc::StatusCode::UNAVAILABLE ? 503
                                                                    : 500;
    res.set_content(what + ": " + st.error_message() + "\n", "text/plain");
  };
  if (q->flow) {
    v1::ListFlowsResponse flows;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status st = observer_->ListFlows(&ctx, v1::ListFlowsRequest(), &flows);
    if (!st.ok()) return fail(st, "flow " + std::to_string(q->flow));
    auto it = std::find_if(flows.flows().begin(), flows.flows().end(),
                           [&](const v1::Flow& f) { return f.cookie() == q->flow; });
    if (it == flows.flows().end()) {
      res.status = 404;
      res.set_content("no open flow has socket cookie " + std::to_string(q->flow) + "\n",
                      "text/plain");
      return;
    }
    // Either end's address and port: the flow's own tuple (and its reverse).
    const std::string& ra = it->tuple().remote_addr();
    filter.set_addr(ra + (ra.find(':') == std::string::npos ? "/32" : "/128"));
    filter.mutable_port()->set_lo(it->tuple().local_port());
    hello["selected_flow"] = Json::parse(ToJson(*it), nullptr, false);
  }
  if (q->rule) {
    v1::GetRuleRequest r;
    r.set_id(q->rule);
    v1::Rule rule;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status st = injector_->GetRule(&ctx, r, &rule);
    if (!st.ok()) return fail(st, "rule " + std::to_string(q->rule));
    filter.set_rule_id(q->rule);
  }

  auto session = std::make_shared<LiveSession>(this, *q, filter);
  session->queue().Push("hello", JsonLine(hello));
  {
    v1::Capabilities caps;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    if (system_->GetCapabilities(&ctx, v1::GetCapabilitiesRequest(), &caps).ok())
      session->queue().Push("capabilities", ToJson(caps));
  }
  Join(session);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto next_id = std::make_shared<uint64_t>(0);
  auto last_write = std::make_shared<uint64_t>(MonotonicNs());
  res.set_chunked_content_provider(
      "text/event-stream",
      [session, slot, next_id, last_write](size_t, httplib::DataSink& sink) {
        if (slot->stopping()) {
          sink.done();
          return true;
        }
        SseQueue::Batch b = session->queue().Take(std::chrono::milliseconds(200));
        if (b.closed) {
          sink.done();
          return true;
        }
        std::string out;
        // The messages taken were queued before anything was dropped (a drop
        // happens only with a full queue): the gaps come after them.
        for (const auto& m : b.messages) out += SseFrame(++*next_id, m.event, m.data);
        for (const auto& d : b.dropped)
          out += SseFrame(++*next_id, "gap", GapJson(v1::GAP_SOURCE_SUBSCRIBER, d.second, d.first));
        uint64_t now = MonotonicNs();
        if (out.empty()) {
          if (now - *last_write < 10000000000ull) return true;
          out = ": keep-alive\n\n";  // a comment: lets a gone client be noticed
        }
        *last_write = now;
        return sink.write(out.data(), out.size());
      },
      [this, session](bool) {
        session->Stop();
        Leave(session.get());
      });
}

void LivePage::Join(const std::shared_ptr<LiveSession>& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.insert(s);
    if (!started_) {
      started_ = true;
      agg_thread_ = std::thread([this] { RunAggregates(); });
      poll_thread_ = std::thread([this] { RunPoll(); });
    }
  }
  cv_.notify_all();
  s->Start();
}

void LivePage::Leave(LiveSession* s) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->get() == s) {
      sessions_.erase(it);
      break;
    }
  }
  // No page left: the shared stream ends (no hub subscriber while nobody looks).
  if (sessions_.empty() && agg_ctx_) agg_ctx_->TryCancel();
}

void LivePage::Broadcast(const std::string& event, const std::string& data) {
  std::vector<std::shared_ptr<LiveSession>> to;
  {
    std::lock_guard<std::mutex> lock(mu_);
    to.assign(sessions_.begin(), sessions_.end());
  }
  for (const auto& s : to) s->queue().Push(event, data);
}

bool LivePage::WaitForSessions() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || !sessions_.empty(); });
  return !stopping_;
}

void LivePage::RunAggregates() {
  while (WaitForSessions()) {
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      agg_ctx_ = &ctx;
    }
    v1::WatchAggregatesRequest req;
    req.set_window_ns(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(kPeriod).count()));
    // The page sets these totals beside the kernel counters of the daemon's
    // own namespace (the "kernel" message): the same namespace's only.
    req.set_netns_ino(ThreadNetnsIno());
    auto reader = observer_->WatchAggregates(&ctx, req);
    v1::Aggregate a;
    while (reader->Read(&a)) {
      // retransmits_by_flow holds every flow that retransmitted in the window (under a
      // flood, tens of thousands): a page gets only the flow it follows.
      std::vector<std::shared_ptr<LiveSession>> to;
      {
        std::lock_guard<std::mutex> lock(mu_);
        to.assign(sessions_.begin(), sessions_.end());
      }
      std::map<uint64_t, uint64_t> followed;
      for (const auto& s : to) {
        auto it = a.retransmits_by_flow().find(s->flow());
        if (s->flow() && it != a.retransmits_by_flow().end()) followed[it->first] = it->second;
      }
      a.clear_retransmits_by_flow();  // no copy of the big map
      const std::string shared = ToJson(a);
      for (const auto& s : to) {
        auto it = followed.find(s->flow());
        if (!s->flow() || it == followed.end()) {
          s->queue().Push("aggregate", shared);
          continue;
        }
        v1::Aggregate own = a;
        (*own.mutable_retransmits_by_flow())[it->first] = it->second;
        s->queue().Push("aggregate", ToJson(own));
      }
    }
    grpc::Status st = reader->Finish();
    std::unique_lock<std::mutex> lock(mu_);
    agg_ctx_ = nullptr;
    if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED)
      LOG_DEBUG("live page: WatchAggregates: %s", st.error_message().c_str());
    // The observer still loading, or lossd stopping: again in a second.
    if (cv_.wait_for(lock, kPeriod, [&] { return stopping_; })) return;
  }
}

void LivePage::RunPoll() {
  while (WaitForSessions()) {
    auto next = std::chrono::steady_clock::now() + kPeriod;
    {
      v1::Health h;
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      if (system_->GetHealth(&ctx, v1::GetHealthRequest(), &h).ok())
        Broadcast("health", ToJson(h));
    }
    {
      v1::Capabilities caps;
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      if (system_->GetCapabilities(&ctx, v1::GetCapabilitiesRequest(), &caps).ok())
        Broadcast("capabilities", ToJson(caps));
    }
    {
      v1::ListRulesResponse all;
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      if (injector_->ListRules(&ctx, v1::ListRulesRequest(), &all).ok()) {
        std::vector<const v1::Rule*> shown;
        for (const auto& r : all.rules()) shown.push_back(&r);
        std::sort(shown.begin(), shown.end(), [](const v1::Rule* a, const v1::Rule* b) {
          bool aa = a->state() == v1::RULE_STATE_ACTIVE, ba = b->state() == v1::RULE_STATE_ACTIVE;
          return aa != ba ? aa : a->id() < b->id();
        });
        if (shown.size() > opts_.max_rules) shown.resize(opts_.max_rules);
        v1::ListRulesResponse out;
        for (const auto* r : shown) *out.add_rules() = *r;
        Json j = Json::parse(ToJson(out), nullptr, false);
        if (j.is_discarded()) j = Json::object();
        Json msg = {{"total", std::to_string(all.rules_size())},
                    {"time_unix_ns", std::to_string(UnixNs())},
                    {"rules", j.contains("rules") ? j["rules"] : Json::array()}};
        Broadcast("rules", JsonLine(msg));
        for (const auto* r : shown) {
          v1::GetRuleEffectRequest req;
          req.set_id(r->id());
          v1::RuleEffect e;
          grpc::ClientContext ec;
          SetDeadline(&ec);
          if (injector_->GetRuleEffect(&ec, req, &e).ok()) Broadcast("effect", ToJson(e));
        }
      }
    }
    {
      std::map<std::string, uint64_t> mib;
      ParseMib(ReadFile("/proc/net/snmp"), &mib);
      ParseMib(ReadFile("/proc/net/netstat"), &mib);
      Json counters = Json::object();
      for (const auto& k : KernelCounterKeys()) {
        auto it = mib.find(k);
        if (it != mib.end()) counters[k] = std::to_string(it->second);
      }
      Broadcast("kernel",
                JsonLine({{"time_unix_ns", std::to_string(UnixNs())}, {"counters", counters}}));
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, next, [&] { return stopping_; })) return;
  }
}

}  // namespace lossd
