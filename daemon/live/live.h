// The live page on lossd's HTTP listener (docs/architecture.md#the-live-page):
//
//   GET /                 the page (HTML + JavaScript + CSS built into lossd; no build step)
//   GET /static/chart.js  Chart.js from Debian's libjs-chart.js
//   GET /api/v1/events    Server-Sent Events: lossd.v1 messages as protobuf JSON
//
// The page is a lossd.v1 client inside the daemon: it reads the same gRPC
// streams and calls as lossctl (over the server's in-process channel), so a
// page sees exactly what the API says, fed by the same hub, with the same
// sequence numbers and gaps. Every connection gets
//
//   hello         {"mono_ns", "unix_ns", "flow", "rule", "queue"}: the clocks
//                 (the events carry CLOCK_MONOTONIC times) and what it asked for
//   aggregate     v1.Aggregate, one per second (one WatchAggregates stream shared
//                 by every page: the firehose is counted once, not per page);
//                 retransmits_by_flow only for the flow the page follows (?flow)
//   flows         v1.FlowStreamMessage, one per second (WatchFlows: a snapshot,
//                 then the flows that changed or closed)
//   rules         {"total", "rules": [v1.Rule]} (at most 100: active first), and
//   effect        v1.RuleEffect of each rule shown, once per second
//   health        v1.Health, capabilities v1.Capabilities (hooks that did not
//                 attach), once per second
//   kernel        {"time_unix_ns", "counters": {"Tcp.RetransSegs": ...}}: the
//                 namespace's own counters, beside lossd's
//   retransmit    v1.RetransmitStreamMessage: only with ?flow=COOKIE or ?rule=ID,
//                 the individual events of that flow / rule (never the firehose)
//   trace         v1.TraceMessage: only with ?flow=COOKIE, that flow's TraceFlow
//                 (first its Flow, then samples, drops, retransmits, stalls, gaps,
//                 last its closing summary), samples thinned to one per 5 ms
//                 (the chart's resolution; lossctl flow trace has every one)
//   gap           {"source", "count", "stream"}: messages of `stream` lost: the
//                 daemon's gaps of the retransmit stream, and messages this
//                 connection's queue (?queue=N, default 1024) could not hold
//
// SSE ids number this connection's messages from 1 without holes; losses are
// gap messages (as the gRPC streams' seq). A slow reader never slows the
// daemon: every producer pushes into the connection's bounded queue.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "http/server.h"
#include "live/sse.h"
#include "lossd/v1/lossd.grpc.pb.h"

namespace lossd {

namespace v1 = ::lossd::v1;

struct LiveOptions {
  // Debian's libjs-chart.js (3.9.1, UMD build).
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  size_t max_rules = 100;  // rules (and effects) sent each second
  // One connection's queue, in bytes (SseQueue): the daemon gives the live
  // page's connections an eighth of --max-stream-memory together (beside what
  // their gRPC streams reserve in the stream budget, the HTTP clients' share).
  size_t max_queue_bytes = 16u << 20;
  // The flows that may close between two flows messages (WatchFlowsRequest.
  // queue; more: a gap): kept short, so its pages reserve little of the
  // stream budget (at most --max-queue).
  uint32_t closes_per_message = 8192;
  // Left out of the flows table (HiddenFromPage): lossd's own connections.
  OwnEndpoints own;
};

class LiveSession;

class LivePage {
 public:
  // `api`: a channel to this daemon's own gRPC server (InProcessChannel).
  LivePage(std::shared_ptr<grpc::Channel> api, LiveOptions opts = {});
  ~LivePage();  // Stop()
  LivePage(const LivePage&) = delete;
  LivePage& operator=(const LivePage&) = delete;

  // Registers the routes; before http->Start().
  void Register(HttpServer* http);
  // Ends every connection's streams and the shared ones; idempotent.
  void Stop();

  size_t sessions() const;

 private:
  friend class LiveSession;
  void Events(const httplib::Request& req, httplib::Response& res,
              std::shared_ptr<HttpStreamSlot> slot);
  void Join(const std::shared_ptr<LiveSession>& s);
  void Leave(LiveSession* s);
  void Broadcast(const std::string& event, const std::string& data);
  bool WaitForSessions();  // false once stopping
  void RunAggregates();    // the shared WatchAggregates stream
  void RunPoll();          // rules, effects, health, capabilities, kernel counters

  std::shared_ptr<grpc::Channel> api_;
  std::unique_ptr<v1::Injector::Stub> injector_;
  std::unique_ptr<v1::Observer::Stub> observer_;
  std::unique_ptr<v1::System::Stub> system_;
  LiveOptions opts_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::shared_ptr<LiveSession>> sessions_;
  bool stopping_ = false;
  grpc::ClientContext* agg_ctx_ = nullptr;  // the shared stream, to cancel
  std::thread agg_thread_, poll_thread_;
  bool started_ = false;
};

}  // namespace lossd
