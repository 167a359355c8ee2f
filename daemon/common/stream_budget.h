// The budget every client stream is opened against (gRPC streams and the
// HTTP listener's alike): how many streams at once, in total and of each
// kind, and how much memory their queues may hold. A stream holds a Ticket
// for its life; the ticket gives its share back when destroyed.
// docs/architecture.md#limits
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace lossd {

struct StreamLimits {
  uint32_t max_streams = 64;              // --max-streams: every kind together
  uint32_t max_streams_per_kind = 32;     // --max-streams-per-kind
  uint32_t max_queue = 65536;             // --max-queue: events one subscriber's queue holds
  uint64_t max_queue_bytes = 1ull << 30;  // --max-stream-memory (MiB): all queues together
};

class StreamBudget {
  struct State;

 public:
  // A stream's share; move-only, released on destruction.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept { *this = std::move(o); }
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

   private:
    friend class StreamBudget;
    void Release();
    std::shared_ptr<State> state_;
    std::string kind_;
    uint64_t bytes_ = 0;
  };

  explicit StreamBudget(StreamLimits limits);
  const StreamLimits& limits() const { return limits_; }

  // A stream of `kind` whose queues hold up to `queue_bytes`. A queue longer
  // than --max-queue events is the caller's to refuse (QueueLength); here:
  // RESOURCE_EXHAUSTED naming the limit and its flag when the stream would
  // pass one.
  Result<Ticket> Open(const std::string& kind, uint64_t queue_bytes);
  // A client's requested queue length (0: the default), or INVALID_ARGUMENT
  // above --max-queue; `field` names it in the message.
  Result<uint32_t> QueueLength(uint64_t requested, uint32_t default_len, const char* field) const;

  uint32_t open() const;  // streams open now
  uint32_t open(const std::string& kind) const;
  uint64_t queue_bytes() const;  // reserved by the open streams

 private:
  const StreamLimits limits_;
  std::shared_ptr<State> state_;
};

}  // namespace lossd
