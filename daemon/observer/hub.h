// Fan-out of observer events to subscribers. The producer (the ring buffer
// reader) never blocks and never runs a subscriber's filter: it checks the
// event's kind (one bit test) and copies the event into each bounded queue;
// an event that does not fit is counted as lost for that subscriber only.
// A subscriber's filter runs on the subscriber's own thread, as it takes
// events (Next, NextBatch), so an expensive filter costs only its owner
// (docs/architecture.md#limits). Every event gets a sequence number, so a
// subscriber can tell where it lost some.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "common/stream_budget.h"
#include "observe_abi.h"

namespace lossd {

struct ObsEvent {
  uint64_t seq = 0;                // hub sequence number, from 1, no gaps at the hub
  struct obs_close_event data {};  // data.ev.kind says which part is valid
  // The record as its kind's struct (obs_stall_event, obs_sample_event...),
  // all of which start with the obs_event and fit in `data`.
  template <typename T>
  T As() const {
    static_assert(sizeof(T) <= sizeof(data), "an event record larger than the hub's");
    T t;
    std::memcpy(&t, &data, sizeof(T));
    return t;
  }
};

// Which events a subscriber wants (beyond their kind). It runs on the
// subscriber's thread, never the publisher's.
using EventFilterFn = std::function<bool(const obs_event&)>;

// Bit of an event kind in SubscribeOptions::kinds.
constexpr uint32_t KindBit(uint32_t kind) {
  return 1u << kind;
}

struct SubscribeOptions {
  size_t queue = 65536;  // events (at least 1)
  uint32_t kinds = ~0u;  // KindBit()s of the kinds wanted (the publisher checks them)
  EventFilterFn filter;  // null: every event of those kinds
  // A client stream (gRPC, HTTP): the kind it is counted as against the
  // hub's StreamBudget. Empty: an in-process consumer (the effect tracker,
  // the one-shot printer), not budgeted.
  std::string stream;
  StreamPeer peer;          // whose stream (its share of the budget)
  uint64_t also_holds = 0;  // bytes such a stream holds beside this queue (budgeted too)
};

class Subscription {
 public:
  Subscription(size_t capacity, uint32_t kinds, EventFilterFn filter)
      : capacity_(capacity), kinds_(kinds), filter_(std::move(filter)) {}

  // Waits up to `timeout` for an event; nullopt on timeout or when closed.
  std::optional<ObsEvent> Next(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for events, then takes up to `max` of those waiting
  // (one lock for all); empty on timeout or when closed.
  std::vector<ObsEvent> NextBatch(size_t max, std::chrono::milliseconds timeout);
  // Events of its kinds that did not fit this subscriber's queue. Without a
  // filter each was one it wanted; with one, its filter never saw them
  // (at most that many were wanted).
  uint64_t lost() const;
  bool filtered() const { return static_cast<bool>(filter_); }
  uint64_t delivered() const;
  void Close();
  // The queue's worst case in bytes (what a StreamBudget reserves).
  static uint64_t QueueBytes(size_t capacity) { return capacity * sizeof(ObsEvent); }

 private:
  friend class Hub;
  bool Offer(const ObsEvent& e);  // false (and counted) when full
  void OfferAll(const std::vector<ObsEvent>& events);
  // Takes up to `max` waiting events into *out (one lock); false when none waited.
  bool TakeLocked(size_t max, std::vector<ObsEvent>* out);
  void Filter(std::vector<ObsEvent>* events) const;  // on the caller's thread

  const size_t capacity_;
  const uint32_t kinds_;
  const EventFilterFn filter_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ObsEvent> queue_;
  uint64_t lost_ = 0, delivered_ = 0;
  bool closed_ = false;
  StreamBudget::Ticket ticket_;  // a client stream's share of the budget
};

// Where a stream's events were lost (the API's GapSource).
enum class LossSource {
  kKernelRing,  // the observer's ring buffer was full (lost for every subscriber)
  kHub,         // did not fit a filtered subscription's queue before its filter saw them:
                // at most that many were wanted
  kSubscriber,  // wanted, and the stream was too slow for them: exact
  kDropLog,     // a traced flow's drops that left the injector's drop log unread
};
struct StreamLoss {
  LossSource source;
  uint64_t count;
};

class StreamSubscription;

struct StreamOptions {
  SubscribeOptions subscribe;  // the hub's queue for the stream (`stream` names its kind)
  // The stream's own queue (StreamSubscription::Take): events taken from the
  // hub, not yet written; at most this many, budgeted beside the hub's queue.
  size_t waiting = 0;
  std::atomic<int>* counted_in = nullptr;  // a count of such streams, while it lives
};

class Hub {
 public:
  // Client streams (options.stream set) are counted against `budget` (may be
  // null: no limits, e.g. a one-shot run); it must outlive the hub.
  void SetBudget(StreamBudget* budget) { budget_ = budget; }
  // Where the events the kernel's ring lost are counted (the observer's
  // OBS_CNT_RING_LOST; unset: none); set before the first subscriber.
  void SetRingLost(std::function<uint64_t()> ring_lost) { ring_lost_ = std::move(ring_lost); }
  uint64_t ring_lost() const { return ring_lost_ ? ring_lost_() : 0; }
  // RESOURCE_EXHAUSTED (naming the limit and its flag) when a client stream
  // would pass the budget.
  Result<std::shared_ptr<Subscription>> Subscribe(SubscribeOptions options);
  // A client stream's subscription, released when it is destroyed; refused
  // as Subscribe.
  Result<StreamSubscription> OpenStream(StreamOptions options);
  // An in-process consumer (not budgeted) of every event.
  std::shared_ptr<Subscription> Subscribe(size_t capacity, EventFilterFn filter = nullptr);
  void Unsubscribe(const std::shared_ptr<Subscription>& s);
  // Assigns the next sequence number and offers the event to every subscriber.
  void Publish(ObsEvent e);
  // The same for several events at once: one lock and one wakeup per subscriber.
  void PublishAll(std::vector<ObsEvent>* events);
  uint64_t published() const;
  // The reader's promise: every event stamped (time_ns, CLOCK_MONOTONIC)
  // before `ns` has been published. It only grows; the publisher sets it
  // after publishing what it read, so a subscriber that reads it and then
  // drains its queue has every event before it. UINT64_MAX once the reader
  // stopped (nothing more will come).
  void SetComplete(uint64_t ns);
  uint64_t complete() const { return complete_.load(std::memory_order_acquire); }
  void CloseAll();

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Subscription>> subs_;
  uint64_t seq_ = 0;
  StreamBudget* budget_ = nullptr;
  std::function<uint64_t()> ring_lost_;
  std::atomic<uint64_t> complete_{0};
};

// A client stream's hold on the hub, for as long as the stream lives (RAII):
// subscribed when opened (Hub::OpenStream), unsubscribed when destroyed, in
// StreamOptions::counted_in meanwhile; and the one account of what the
// stream lost, by source, since it opened (TakeLosses).
class StreamSubscription {
 public:
  StreamSubscription(StreamSubscription&& o) noexcept;
  StreamSubscription& operator=(StreamSubscription&&) = delete;
  StreamSubscription(const StreamSubscription&) = delete;
  ~StreamSubscription();

  Subscription* operator->() const { return sub_.get(); }
  // Takes up to `max` events from the hub (waiting up to `timeout`) into the
  // stream's own queue, those `keep` wants (null: all); one that finds the
  // queue full (StreamOptions::waiting) is the stream's loss (kSubscriber).
  void Take(size_t max, std::chrono::milliseconds timeout,
            const std::function<bool(const ObsEvent&)>& keep = nullptr);
  std::deque<ObsEvent>& waiting() { return waiting_; }
  // What was lost since the last call (or the opening), in this order: the
  // kernel ring's, the hub queue's (kHub if filtered there, else kSubscriber)
  // and the stream's own queue's (kSubscriber). Sources without loss are left out.
  std::vector<StreamLoss> TakeLosses();

 private:
  friend class Hub;
  StreamSubscription(Hub* hub, std::shared_ptr<Subscription> sub, size_t waiting,
                     std::atomic<int>* counted_in);

  Hub* hub_;
  std::shared_ptr<Subscription> sub_;
  std::atomic<int>* counted_in_;
  const size_t room_;                                     // of waiting_
  std::deque<ObsEvent> waiting_;                          // taken, not yet written
  uint64_t own_lost_ = 0;                                 // events that found waiting_ full
  uint64_t ring_seen_ = 0, sub_seen_ = 0, own_seen_ = 0;  // reported so far
};

}  // namespace lossd
