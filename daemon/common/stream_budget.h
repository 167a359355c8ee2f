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

#include "base/status.h"

namespace lossd {

// Who opens a stream, for its share of the budget: a uid on the Unix
// socket, a certificate subject or an address over TCP, the HTTP listener.
struct StreamPeer {
  std::string key;          // "": not a client's (an in-process consumer): no share applies
  std::string shown;        // in messages: "uid 1000", "10.0.0.7"
  bool privileged = false;  // root: no share, and the reserve is root's
};

// One client may hold half of the streams and of the queue memory; the
// unprivileged together three quarters (root keeps the rest): so a second
// client, and root, always get a stream.
constexpr uint32_t kPeerShareDiv = 2;
constexpr uint32_t kUnprivilegedNum = 3, kUnprivilegedDiv = 4;

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
    std::string kind_, peer_;
    bool privileged_ = true;
    uint64_t bytes_ = 0;
  };

  explicit StreamBudget(StreamLimits limits);
  const StreamLimits& limits() const { return limits_; }

  // A stream of `kind` whose queues hold up to `queue_bytes`. A queue longer
  // than --max-queue events is the caller's to refuse (QueueLength); here:
  // RESOURCE_EXHAUSTED naming the limit and its flag when the stream would
  // pass one, or its peer's share (StreamPeer).
  Result<Ticket> Open(const std::string& kind, uint64_t queue_bytes, const StreamPeer& peer = {});
  // A client's requested queue length (0: the default), or INVALID_ARGUMENT
  // above --max-queue; `field` names it in the message.
  Result<uint32_t> QueueLength(uint64_t requested, uint32_t default_len, const char* field) const;

  uint32_t open() const;  // streams open now
  uint32_t open(const std::string& kind) const;
  uint64_t queue_bytes() const;  // reserved by the open streams
  uint32_t open_by(const std::string& peer_key) const;  // streams that peer holds

 private:
  const StreamLimits limits_;
  std::shared_ptr<State> state_;
};

}  // namespace lossd
