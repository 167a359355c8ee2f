// The pure parts of the live page's event stream (daemon/live/live.h): the
// Server-Sent Events wire form, a connection's bounded outgoing queue, the
// request's query, and the kernel's own counters. No I/O, no gRPC.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace lossd {

// One SSE message: "id: N\nevent: E\ndata: D\n\n". `data` must be one line
// (protobuf JSON is); any CR/LF in it is replaced so the frame stays one
// message.
std::string SseFrame(uint64_t id, const std::string& event, const std::string& data);

struct SseMessage {
  std::string event;  // "aggregate", "flows", "retransmit", ...
  std::string data;   // one line of JSON
};

// A connection's outgoing messages. The producers (the gRPC streams read on
// the daemon's side) never block: a message that does not fit is dropped and
// counted under its event name, and the writer reports the count as a gap
// of that stream before its next messages. So a slow browser loses its own
// messages, never slows the daemon, and is told exactly what it lost.
// It holds at most `capacity` messages and `max_bytes` of them (event names and
// data; 0: no byte bound): a message is a line of JSON whose size the producer does
// not choose (a flows message grows with the namespace's flows), so messages alone
// would not bound the memory a slow browser holds. A message larger than
// max_bytes is taken when the queue is empty, so a large namespace's flows still
// reach the page.
class SseQueue {
 public:
  explicit SseQueue(size_t capacity, size_t max_bytes = 0)
      : capacity_(capacity ? capacity : 1), max_bytes_(max_bytes) {}

  void Push(std::string event, std::string data);
  struct Batch {
    std::vector<SseMessage> messages;
    std::map<std::string, uint64_t> dropped;  // by event name, since the last Take
    bool closed = false;
  };
  // Waits up to `timeout` for messages (or drops, or Close), then takes all.
  Batch Take(std::chrono::milliseconds timeout);
  void Close();
  uint64_t dropped_total() const;
  size_t bytes() const;  // held now

 private:
  const size_t capacity_, max_bytes_;
  size_t bytes_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SseMessage> queue_;
  std::map<std::string, uint64_t> dropped_;
  uint64_t dropped_total_ = 0;
  bool closed_ = false;
};

// lossd's own TCP endpoints: its HTTP listener's and gRPC TCP listener's
// ports, in its own network namespace.
struct OwnEndpoints {
  std::vector<uint16_t> ports;
  uint64_t netns_ino = 0;  // 0: unknown (a port matches in any namespace)
};
// What the page's flows table leaves out: a socket without both ports (not
// connected yet), and lossd's own connections (the page's own HTTP requests,
// gRPC clients over TCP): its local port is one of lossd's, or it is a
// loopback connection to one of them.
bool HiddenFromPage(const std::string& remote_addr, uint32_t local_port, uint32_t remote_port,
                    uint64_t netns_ino, const OwnEndpoints& own);

// GET /api/v1/events?flow=COOKIE&rule=ID&queue=N
struct EventsQuery {
  uint64_t flow = 0;    // one flow's retransmissions (its socket cookie); 0: none
  uint32_t rule = 0;    // the retransmissions of one rule's flows; 0: none
  size_t queue = 1024;  // this connection's queue, in messages (1 .. 65536)
  // One service's or namespace's flows and retransmissions only (the
  // EventFilter fields of those names; "" / 0: any).
  std::string unit, container, pod;
  uint64_t netns = 0;
  bool Scoped() const { return !unit.empty() || !container.empty() || !pod.empty() || netns; }
};
// INVALID_ARGUMENT naming the parameter for anything else (unknown
// parameters included: a typo must not silently mean "everything").
Result<EventsQuery> ParseEventsQuery(const std::multimap<std::string, std::string>& params);

// The counters of /proc/net/snmp or /proc/net/netstat ("Tcp: A B\nTcp: 1 2")
// as "Tcp.A" -> 1; added to *out. Lines that do not pair are skipped.
void ParseMib(const std::string& text, std::map<std::string, uint64_t>* out);
// The kernel's TCP counters the page shows beside lossd's (retransmits, needless resends).
const std::vector<std::string>& KernelCounterKeys();

}  // namespace lossd
