// One flow's trace, in time order: its ACK samples, resends, stalls and
// close from the observer's hub, the drops rules made of its data from the
// injector's drop log, and what of either was lost (what TraceFlow streams:
// docs/architecture.md#stalls-limits-and-traces).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "effects/effects.h"
#include "injector/injector.h"
#include "observer/filters.h"
#include "observer/hub.h"
#include "observer/observer.h"

namespace lossd {

// What a trace reads (the observer's and the injector's; a test's fakes).
struct TraceSources {
  Hub* hub = nullptr;
  std::function<std::vector<ObsFlow>()> flows;  // the open flows (Observer::Flows)
  // One open flow by cookie (Observer::FlowOf); null: looked for in `flows`.
  std::function<std::optional<ObsFlow>(uint64_t cookie)> flow;
  // The hub gets OBS_EV_FLOW_OPEN events while the handle lives
  // (Observer::WatchOpens); null: the hub's publisher sends them anyway.
  std::function<Result<std::unique_ptr<OpenWatch>>()> watch_opens;
  // Marks a flow traced while the handle lives (Observer::Trace).
  std::function<Result<std::unique_ptr<FlowTrace>>(uint64_t cookie)> trace;
  // One flow's drops from now on (Injector::TraceDrops); null, or a null
  // feed: no drops.
  std::function<Result<std::unique_ptr<DropFeed>>(const loss_drop_key& key)> drops;
  // The observer's hub, flows and traces (drops not set).
  static TraceSources Of(Observer* obs);
};

// The flow to trace: the open flow with this cookie, or (cookie 0) the
// first open flow `by` wants, then the first such flow to open within `wait`
// (woken by the flow-open events, no polling of the table) while `stop()` is
// false (checked every 200 ms). NOT_FOUND otherwise.
Result<ObsFlow> FindTracedFlow(const TraceSources& src, uint64_t cookie, const StreamFilters& by,
                               std::chrono::nanoseconds wait, const std::function<bool()>& stop);

// One message of a trace.
struct TraceItem {
  enum class Kind { kSample, kRetransmit, kStall, kClosed, kDrop, kGap };
  Kind kind;
  ObsEvent event;    // kSample, kRetransmit, kStall; kClosed: its data.flow and data.closed_ns
  DropRecord drop;   // kDrop
  StreamLoss gap{};  // kGap
};

struct TraceOptions {
  size_t queue = 65536;                  // the hub's queue for the trace
  uint64_t max_samples = 0;              // the trace ends after this many samples
  std::chrono::nanoseconds duration{0};  // ... or after this long (0: until the flow closes)
  // The budget's stream kind its subscription is counted as; "": the caller
  // holds the stream's ticket (taken before the wait for the flow).
  std::string stream = "TraceFlow";
  StreamPeer peer;  // whose trace (its share of the stream budget)
};

class FlowTracer {
 public:
  // Subscribes to the flow's events, then marks it traced (no sample is
  // missed) and opens its drop feed; RESOURCE_EXHAUSTED from any, nothing
  // held then. Drops made before now are history: not told.
  static Result<std::unique_ptr<FlowTracer>> Start(const TraceSources& src, const ObsFlow& flow,
                                                   const TraceOptions& opts);
  // Until the flow closed, max_samples were taken or the duration passed.
  bool running() const;
  bool closed() const { return closed_; }
  // What came since the last call (waiting up to 50 ms for events), in time
  // order; also the drops made since and the losses (gaps), before the
  // close (for which it waits until the feed has every drop made before
  // it). The feed holds every drop however seldom this is called; a DROP_LOG
  // gap is a drop the kernel's ring or the feed had no room for.
  std::vector<TraceItem> Next();
  // Ends the trace and its subscription (the destructor does it too).
  void Stop();
  // The flow as it is now (while it is open).
  std::optional<ObsFlow> FlowNow() const;
  // The flow's record as the trace began: read after subscribing, and the
  // retransmissions and stalls it already counts are left out of the trace,
  // so the record plus the trace is the flow's record at the close, exactly.
  const ObsFlow& start() const { return start_; }

 private:
  FlowTracer(const TraceSources& src, const ObsFlow& flow, const TraceOptions& opts,
             StreamSubscription sub);
  // An event the starting record already counts (obs_event.flow_*).
  bool InStart(const obs_event& ev) const;
  // The drops and losses since the last poll into *out (before its last
  // item, the close, when `closing`).
  void Poll(std::vector<TraceItem>* out, bool closing);

  TraceSources src_;
  ObsFlow start_;
  uint32_t start_rtx_segs_ = 0, start_stalls_ = 0;  // its counts, as events carry them
  const uint64_t cookie_;
  const obs_tuple tuple_;
  const TraceOptions opts_;
  // Released in reverse: the trace ends, then the subscription.
  std::optional<StreamSubscription> sub_;
  std::unique_ptr<FlowTrace> trace_;
  std::unique_ptr<DropFeed> drops_;  // null: no injector
  const std::chrono::steady_clock::time_point end_;
  uint64_t samples_ = 0;
  bool closed_ = false;
};

}  // namespace lossd
