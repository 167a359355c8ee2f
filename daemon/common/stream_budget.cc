#include "common/stream_budget.h"

#include <algorithm>

namespace lossd {

struct StreamBudget::State {
  struct Use {
    uint32_t streams = 0;
    uint64_t bytes = 0;
  };
  std::mutex mu;
  uint32_t total = 0;
  std::map<std::string, uint32_t> per_kind;
  uint64_t bytes = 0;
  std::map<std::string, Use> per_peer;  // unprivileged peers'
  Use unprivileged;                     // theirs together
};

namespace {

std::string MiB(uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

}  // namespace

StreamBudget::Ticket& StreamBudget::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    state_ = std::move(o.state_);
    kind_ = std::move(o.kind_);
    peer_ = std::move(o.peer_);
    privileged_ = o.privileged_;
    bytes_ = o.bytes_;
    o.state_.reset();
  }
  return *this;
}

void StreamBudget::Ticket::Release() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->total--;
    if (--state_->per_kind[kind_] == 0) state_->per_kind.erase(kind_);
    state_->bytes -= bytes_;
    if (!privileged_) {
      state_->unprivileged.streams--;
      state_->unprivileged.bytes -= bytes_;
      auto it = state_->per_peer.find(peer_);
      if (it != state_->per_peer.end()) {
        it->second.streams--;
        it->second.bytes -= bytes_;
        if (it->second.streams == 0) state_->per_peer.erase(it);
      }
    }
  }
  state_.reset();
}

StreamBudget::StreamBudget(StreamLimits limits)
    : limits_(limits), state_(std::make_shared<State>()) {}

Result<StreamBudget::Ticket> StreamBudget::Open(const std::string& kind, uint64_t queue_bytes,
                                                const StreamPeer& peer) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const bool shared = !peer.key.empty() && !peer.privileged;
  if (shared) {
    // Its share, then the unprivileged clients' together.
    const State::Use none;
    auto it = state_->per_peer.find(peer.key);
    const State::Use& mine = it == state_->per_peer.end() ? none : it->second;
    const std::string who = "this client (" + peer.shown + ")";
    uint32_t streams = std::max<uint32_t>(1, limits_.max_streams / kPeerShareDiv);
    uint64_t bytes = limits_.max_queue_bytes / kPeerShareDiv;
    if (mine.streams >= streams)
      return Status(Code::kResourceExhausted,
                    who + " holds " + std::to_string(mine.streams) + " streams, its share is " +
                        std::to_string(streams) +
                        " (half of lossd --max-streams: one client cannot take them all)");
    if (mine.bytes + queue_bytes > bytes)
      return Status(Code::kResourceExhausted,
                    who + "'s streams hold " + MiB(mine.bytes) + " of queues, this one needs " +
                        MiB(queue_bytes) + " and its share is " + MiB(bytes) +
                        " (half of lossd --max-stream-memory; a smaller queue needs less)");
    uint32_t all_streams =
        std::max<uint32_t>(1, limits_.max_streams * kUnprivilegedNum / kUnprivilegedDiv);
    uint64_t all_bytes = limits_.max_queue_bytes / kUnprivilegedDiv * kUnprivilegedNum;
    if (state_->unprivileged.streams >= all_streams ||
        state_->unprivileged.bytes + queue_bytes > all_bytes)
      return Status(Code::kResourceExhausted,
                    "clients other than root hold " + std::to_string(state_->unprivileged.streams) +
                        " streams and " + MiB(state_->unprivileged.bytes) + " of queues, of the " +
                        std::to_string(all_streams) + " and " + MiB(all_bytes) +
                        " they may (three quarters of lossd --max-streams and "
                        "--max-stream-memory: the rest is root's)");
  }
  if (state_->total >= limits_.max_streams)
    return Status(Code::kResourceExhausted,
                  "too many streams: " + std::to_string(state_->total) + " open, the limit is " +
                      std::to_string(limits_.max_streams) + " (lossd --max-streams)");
  uint32_t& same = state_->per_kind[kind];
  if (same >= limits_.max_streams_per_kind) {
    uint32_t n = same;
    if (n == 0) state_->per_kind.erase(kind);
    return Status(Code::kResourceExhausted, "too many " + kind + " streams: " + std::to_string(n) +
                                                " open, the limit is " +
                                                std::to_string(limits_.max_streams_per_kind) +
                                                " of each kind (lossd --max-streams-per-kind)");
  }
  if (state_->bytes + queue_bytes > limits_.max_queue_bytes) {
    if (same == 0) state_->per_kind.erase(kind);
    return Status(Code::kResourceExhausted,
                  "stream queue memory exhausted: " + std::to_string(state_->bytes >> 20) +
                      " MiB held by open streams, this one needs " +
                      std::to_string((queue_bytes + (1 << 20) - 1) >> 20) + " MiB of " +
                      std::to_string(limits_.max_queue_bytes >> 20) +
                      " MiB (lossd --max-stream-memory; a smaller queue needs less)");
  }
  same++;
  state_->total++;
  state_->bytes += queue_bytes;
  Ticket t;
  t.state_ = state_;
  t.kind_ = kind;
  t.bytes_ = queue_bytes;
  if (shared) {
    State::Use& mine = state_->per_peer[peer.key];
    mine.streams++;
    mine.bytes += queue_bytes;
    state_->unprivileged.streams++;
    state_->unprivileged.bytes += queue_bytes;
    t.peer_ = peer.key;
    t.privileged_ = false;
  }
  return Result<Ticket>(std::move(t));
}

Result<uint32_t> StreamBudget::QueueLength(uint64_t requested, uint32_t default_len,
                                           const char* field) const {
  if (requested == 0) return std::min(default_len, limits_.max_queue);
  if (requested > limits_.max_queue)
    return InvalidArgument(std::string(field) + " " + std::to_string(requested) +
                           " is above the limit of " + std::to_string(limits_.max_queue) +
                           " events (lossd --max-queue)");
  return static_cast<uint32_t>(requested);
}

uint32_t StreamBudget::open() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->total;
}

uint32_t StreamBudget::open(const std::string& kind) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->per_kind.find(kind);
  return it == state_->per_kind.end() ? 0 : it->second;
}

uint32_t StreamBudget::open_by(const std::string& peer_key) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->per_peer.find(peer_key);
  return it == state_->per_peer.end() ? 0 : it->second.streams;
}

uint64_t StreamBudget::queue_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bytes;
}

}  // namespace lossd
