#include "common/stream_budget.h"

#include <algorithm>

namespace lossd {

struct StreamBudget::State {
  std::mutex mu;
  uint32_t total = 0;
  std::map<std::string, uint32_t> per_kind;
  uint64_t bytes = 0;
};

StreamBudget::Ticket& StreamBudget::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    state_ = std::move(o.state_);
    kind_ = std::move(o.kind_);
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
  }
  state_.reset();
}

StreamBudget::StreamBudget(StreamLimits limits)
    : limits_(limits), state_(std::make_shared<State>()) {}

Result<StreamBudget::Ticket> StreamBudget::Open(const std::string& kind, uint64_t queue_bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
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

uint64_t StreamBudget::queue_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bytes;
}

}  // namespace lossd
