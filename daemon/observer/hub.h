// Fan-out of observer events to subscribers. The producer (the ring buffer
// reader) never blocks: each subscriber has a bounded queue, and an event
// that does not fit is counted as lost for that subscriber only. Every
// event gets a sequence number, so a subscriber can tell where it lost some.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "observe_abi.h"

namespace lossd {

struct ObsEvent {
  uint64_t seq = 0;                // hub sequence number, from 1, no gaps at the hub
  struct obs_close_event data {};  // data.ev.kind says which part is valid
};

// Which events a subscriber wants; the hub offers it only those, so its
// loss count covers exactly the events it would have received.
using EventFilterFn = std::function<bool(const ObsEvent&)>;

class Subscription {
 public:
  Subscription(size_t capacity, EventFilterFn filter)
      : capacity_(capacity), filter_(std::move(filter)) {}

  // Waits up to `timeout` for an event; nullopt on timeout or when closed.
  std::optional<ObsEvent> Next(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for events, then takes up to `max` of those waiting
  // (one lock for all); empty on timeout or when closed.
  std::vector<ObsEvent> NextBatch(size_t max, std::chrono::milliseconds timeout);
  // Events that did not fit this subscriber's queue.
  uint64_t lost() const;
  uint64_t delivered() const;
  void Close();

 private:
  friend class Hub;
  bool Offer(const ObsEvent& e);  // false (and counted) when full
  void OfferAll(const std::vector<ObsEvent>& events);

  const size_t capacity_;
  const EventFilterFn filter_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ObsEvent> queue_;
  uint64_t lost_ = 0, delivered_ = 0;
  bool closed_ = false;
};

class Hub {
 public:
  std::shared_ptr<Subscription> Subscribe(size_t capacity, EventFilterFn filter = nullptr);
  void Unsubscribe(const std::shared_ptr<Subscription>& s);
  // Assigns the next sequence number and offers the event to every subscriber.
  void Publish(ObsEvent e);
  // The same for several events at once: one lock and one wakeup per subscriber.
  void PublishAll(std::vector<ObsEvent>* events);
  uint64_t published() const;
  void CloseAll();

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Subscription>> subs_;
  uint64_t seq_ = 0;
};

}  // namespace lossd
