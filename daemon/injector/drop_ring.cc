#include "injector/drop_ring.h"

#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>

#include "base/clock.h"
#include "base/log.h"

namespace lossd {

namespace {
// A record is stamped (bpf_ktime_get_ns) a few microseconds before it is
// committed: what a poll that began at t has read is complete up to t - this.
constexpr uint64_t kCommitMargin = 1000000;  // ns
}  // namespace

class DropRing::FeedImpl final : public DropFeed {
 public:
  FeedImpl(DropRing* ring, const loss_drop_key& key) : ring_(ring), key_(key) {}
  ~FeedImpl() override { ring_->Close(key_, &q_); }
  std::vector<loss_drop_range> Take(uint64_t* lost) override { return ring_->Take(key_, &q_, lost); }
  bool WaitComplete(uint64_t mono_ns, std::chrono::milliseconds wait) override {
    return ring_->WaitComplete(mono_ns, wait);
  }
  Queue* queue() { return &q_; }

 private:
  DropRing* const ring_;
  const loss_drop_key key_;
  Queue q_;  // written under the ring's mu_
};

Result<std::unique_ptr<DropRing>> DropRing::Start(LossMaps* maps) {
  std::unique_ptr<DropRing> r(new DropRing(maps));
  int fd = maps->DropRingFd();
  if (fd < 0) return r;
  auto on_record = [](void* ctx, void* data, size_t size) -> int {
    if (size < sizeof(loss_drop_event)) return 0;
    loss_drop_event e;
    std::memcpy(&e, data, sizeof(e));
    static_cast<DropRing*>(ctx)->Deliver(e);
    return 0;
  };
  r->ring_ = {ring_buffer__new(fd, on_record, r.get(), nullptr), ring_buffer__free};
  if (!r->ring_) return Status::FromErrno(errno, "open the drop ring (loss_drop_ring)");
  DropRing* p = r.get();
  r->thread_ = std::thread([p] { p->Run(); });
  return r;
}

DropRing::~DropRing() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

// While a flow is traced the ring is polled on a short timeout (a feed's
// WaitComplete waits at most about that long); with none, every 100 ms. A
// record wakes the poll at once when the reader has caught up (the
// ring's adaptive wakeup).
void DropRing::Run() {
  while (!stop_) {
    bool traced;
    {
      std::lock_guard<std::mutex> lock(mu_);
      traced = !flows_.empty();
    }
    uint64_t from = MonotonicNs();
    int n = ring_buffer__poll(ring_.get(), traced ? 10 : 100);
    if (n == 0) {
      from = MonotonicNs();
      n = ring_buffer__consume(ring_.get());
    }
    if (n < 0 && n != -EINTR) {
      LOG_ERROR("injector: drop ring poll: %s", strerror(-n));
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
      complete_cv_.notify_all();
      return;
    }
    if (from > kCommitMargin) SetComplete(from - kCommitMargin);
  }
}

Result<std::unique_ptr<DropFeed>> DropRing::Feed(const loss_drop_key& key) {
  auto feed = std::make_unique<FeedImpl>(this, key);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = flows_.find(key);
  if (it == flows_.end()) {
    if (flows_.size() >= LOSS_TRACED_FLOWS)
      return ResourceExhausted("the drops of " + std::to_string(LOSS_TRACED_FLOWS) +
                               " flows are traced already");
    LOSSD_RETURN_IF_ERROR(maps_->SetTraced(key, true));
    it = flows_.emplace(key, std::vector<Queue*>{}).first;
  }
  auto kernel = maps_->ReadTracedLost(key);
  feed->queue()->kernel = kernel.ok() ? *kernel : 0;
  it->second.push_back(feed->queue());
  return std::unique_ptr<DropFeed>(std::move(feed));
}

void DropRing::Close(const loss_drop_key& key, Queue* q) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = flows_.find(key);
  if (it == flows_.end()) return;
  auto& qs = it->second;
  qs.erase(std::remove(qs.begin(), qs.end(), q), qs.end());
  if (!qs.empty()) return;
  flows_.erase(it);
  Status st = maps_->SetTraced(key, false);
  if (!st.ok()) LOG_ERROR("injector: %s", st.message().c_str());
}

void DropRing::Deliver(const loss_drop_event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = flows_.find(e.key);
  if (it == flows_.end()) return;  // its trace ended meanwhile
  for (Queue* q : it->second) {
    if (q->drops.size() < kFeedQueue)
      q->drops.push_back(e.range);
    else
      q->lost++;
  }
}

void DropRing::SetComplete(uint64_t mono_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    complete_ns_ = std::max(complete_ns_, mono_ns);
  }
  complete_cv_.notify_all();
}

std::vector<loss_drop_range> DropRing::Take(const loss_drop_key& key, Queue* q, uint64_t* lost) {
  std::vector<loss_drop_range> out;
  // The ring's losses are the flow's, shared by its feeds: each counts what
  // it has not seen yet.
  auto kernel = maps_->ReadTracedLost(key);
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(q->drops);
  *lost += q->lost;
  q->lost = 0;
  if (kernel.ok() && *kernel > q->kernel) {
    *lost += *kernel - q->kernel;
    q->kernel = *kernel;
  }
  return out;
}

bool DropRing::WaitComplete(uint64_t mono_ns, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return complete_cv_.wait_for(lock, wait, [&] { return failed_ || complete_ns_ >= mono_ns; }) &&
         !failed_;
}

}  // namespace lossd
