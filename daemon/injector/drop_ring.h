// The drops of traced flows as the data plane pushes them to loss_drop_ring
// (bpf/loss_abi.h): one reader thread hands each to the feeds of its flow, so
// a trace gets every drop whatever its client's pace. (The drop log, which
// keeps a flow's last LOSS_DROP_RANGES drops, is what resends are linked
// from: docs/architecture.md#drops-to-effects.)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "injector/maps.h"
#include "loss_abi.h"

struct ring_buffer;

namespace lossd {

// One flow's drops from the moment its feed was opened: what a trace reads.
class DropFeed {
 public:
  virtual ~DropFeed() = default;
  // The drops handed over since the last call, in the order they were made,
  // and, added to *lost, how many were lost meanwhile (the ring, or this
  // feed's queue, had no room).
  virtual std::vector<loss_drop_range> Take(uint64_t* lost) = 0;
  // Waits up to `wait` until every drop made before `mono_ns`
  // (CLOCK_MONOTONIC) has been handed over; false if that did not happen.
  virtual bool WaitComplete(uint64_t mono_ns, std::chrono::milliseconds wait) = 0;
};

class DropRing {
 public:
  // Drops a feed keeps unread before it counts the next ones lost.
  static constexpr size_t kFeedQueue = 65536;

  // Reads the ring of `maps` (which outlive it) on a thread of its own; with
  // no ring (a fake's maps), no thread: the unit tests Deliver themselves.
  static Result<std::unique_ptr<DropRing>> Start(LossMaps* maps);
  ~DropRing();  // stops and joins the reader (one poll at most)
  DropRing(const DropRing&) = delete;
  DropRing& operator=(const DropRing&) = delete;

  // Marks the flow (its data as on the wire: DropKey) traced and returns its
  // feed; the flow stays traced while a feed of it lives (feeds end before
  // the ring). RESOURCE_EXHAUSTED past LOSS_TRACED_FLOWS flows.
  Result<std::unique_ptr<DropFeed>> Feed(const loss_drop_key& key);

  // What the reader does with each record, and after each poll (everything
  // committed before mono_ns has been delivered); public for the unit tests.
  void Deliver(const loss_drop_event& e);
  void SetComplete(uint64_t mono_ns);

 private:
  class FeedImpl;
  struct KeyLess {
    bool operator()(const loss_drop_key& a, const loss_drop_key& b) const {
      return std::memcmp(&a, &b, sizeof(a)) < 0;
    }
  };
  struct Queue {
    std::vector<loss_drop_range> drops;
    uint64_t lost = 0;     // past kFeedQueue
    uint64_t kernel = 0;   // the flow's loss_traced.lost as last read
  };

  explicit DropRing(LossMaps* maps) : maps_(maps) {}
  void Run();
  void Close(const loss_drop_key& key, Queue* q);
  std::vector<loss_drop_range> Take(const loss_drop_key& key, Queue* q, uint64_t* lost);
  bool WaitComplete(uint64_t mono_ns, std::chrono::milliseconds wait);

  LossMaps* const maps_;
  std::unique_ptr<ring_buffer, void (*)(ring_buffer*)> ring_{nullptr, nullptr};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // The feeds by flow and what the reader has delivered, under mu_ (never
  // held across a poll).
  std::mutex mu_;
  std::condition_variable complete_cv_;
  std::map<loss_drop_key, std::vector<Queue*>, KeyLess> flows_;
  uint64_t complete_ns_ = 0;
  bool failed_ = false;  // the reader stopped on an error: nothing more comes
};

}  // namespace lossd
