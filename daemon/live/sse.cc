#include "live/sse.h"

#include <cstdint>
#include <sstream>

#include "rules/rule.h"

namespace lossd {

std::string SseFrame(uint64_t id, const std::string& event, const std::string& data) {
  std::string out;
  out.reserve(data.size() + event.size() + 32);
  out += "id: " + std::to_string(id) + "\nevent: " + event + "\ndata: ";
  for (char c : data) out += (c == '\n' || c == '\r') ? ' ' : c;
  out += "\n\n";
  return out;
}

void SseQueue::Push(std::string event, std::string data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    size_t size = event.size() + data.size();
    // Past the bytes only with others queued: a message larger than the bound
    // alone still goes (the bound is then that one message).
    if (queue_.size() >= capacity_ || (max_bytes_ && !queue_.empty() && bytes_ + size > max_bytes_)) {
      dropped_[event]++;
      dropped_total_++;
    } else {
      bytes_ += size;
      queue_.push_back({std::move(event), std::move(data)});
    }
  }
  cv_.notify_one();
}

SseQueue::Batch SseQueue::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || !queue_.empty() || !dropped_.empty(); });
  Batch b;
  b.messages.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  bytes_ = 0;
  b.dropped.swap(dropped_);
  b.closed = closed_;
  return b;
}

void SseQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

uint64_t SseQueue::dropped_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_total_;
}

size_t SseQueue::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

Result<EventsQuery> ParseEventsQuery(const std::multimap<std::string, std::string>& params) {
  EventsQuery q;
  for (const auto& kv : params) {
    if (params.count(kv.first) > 1)
      return InvalidArgument("query parameter '" + Shown(kv.first) + "' given more than once");
    uint64_t v = 0;
    if (kv.first == "flow") {
      if (!ParseDecimal(kv.second, 1, UINT64_MAX, &v))
        return InvalidArgument("flow: '" + Shown(kv.second) +
                               "' is not a socket cookie (a positive integer)");
      q.flow = v;
    } else if (kv.first == "rule") {
      if (!ParseDecimal(kv.second, 1, UINT32_MAX, &v))
        return InvalidArgument("rule: '" + Shown(kv.second) + "' is not a rule id");
      q.rule = static_cast<uint32_t>(v);
    } else if (kv.first == "queue") {
      if (!ParseDecimal(kv.second, 1, 65536, &v))
        return InvalidArgument("queue: '" + Shown(kv.second) + "' is not in 1 .. 65536");
      q.queue = v;
    } else if (kv.first == "netns") {
      if (!ParseDecimal(kv.second, 1, UINT32_MAX, &v))
        return InvalidArgument("netns: '" + Shown(kv.second) +
                               "' is not a network namespace inode (ls -l /proc/PID/ns/net)");
      q.netns = v;
    } else if (kv.first == "unit" || kv.first == "container" || kv.first == "pod") {
      // The daemon checks the names as it checks any filter's; here only a bound.
      if (kv.second.empty() || kv.second.size() > 256)
        return InvalidArgument(kv.first + ": a name of 1 to 256 characters");
      for (char c : kv.second)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          return InvalidArgument(kv.first + ": '" + Shown(kv.second) + "' has control characters");
      (kv.first == "unit" ? q.unit : kv.first == "container" ? q.container : q.pod) = kv.second;
    } else {
      return InvalidArgument("unknown query parameter '" + Shown(kv.first) +
                             "' (expected flow, rule, queue, unit, container, pod, netns)");
    }
  }
  return q;
}

void ParseMib(const std::string& text, std::map<std::string, uint64_t>* out) {
  std::istringstream in(text);
  std::string header, values;
  while (std::getline(in, header) && std::getline(in, values)) {
    std::istringstream h(header), v(values);
    std::string hp, vp;
    if (!(h >> hp) || !(v >> vp) || hp != vp || hp.empty() || hp.back() != ':') continue;
    std::string prefix = hp.substr(0, hp.size() - 1);
    std::string name, value;
    while (h >> name && v >> value) {
      uint64_t n;
      // Some Tcp fields are signed (MaxConn -1): they are not counters we show.
      if (!ParseDecimal(value, 0, UINT64_MAX, &n)) continue;
      (*out)[prefix + "." + name] = n;
    }
  }
}

const std::vector<std::string>& KernelCounterKeys() {
  static const std::vector<std::string> kKeys = {
      "Tcp.RetransSegs", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
      "TcpExt.TCPLossProbes", "TcpExt.TCPSynRetrans", "TcpExt.TCPTimeouts",
      "TcpExt.TCPRetransFail", "Tcp.OutSegs",
      // needless resends and what TCP undid for them (docs/observer.md#needless-resends)
      "TcpExt.TCPDSACKRecv", "TcpExt.TCPDSACKRecvSegs", "TcpExt.TCPSpuriousRTOs",
      "TcpExt.TCPLossUndo", "TcpExt.TCPFullUndo", "TcpExt.TCPPartialUndo", "TcpExt.TCPDSACKUndo"};
  return kKeys;
}

bool HiddenFromPage(const std::string& remote_addr, uint32_t local_port, uint32_t remote_port,
                    uint64_t netns_ino, const OwnEndpoints& own) {
  if (local_port == 0 || remote_port == 0) return true;
  if (own.netns_ino && netns_ino != own.netns_ino) return false;
  bool loopback = remote_addr.rfind("127.", 0) == 0 || remote_addr == "::1" ||
                  remote_addr.rfind("::ffff:127.", 0) == 0;
  for (uint16_t p : own.ports) {
    if (p && (local_port == p || (loopback && remote_port == p))) return true;
  }
  return false;
}

}  // namespace lossd
