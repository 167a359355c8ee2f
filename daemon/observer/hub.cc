#include "observer/hub.h"

#include <algorithm>

namespace lossd {

// The publisher's side: a bit test and a copy, never the subscriber's filter.
bool Subscription::Offer(const ObsEvent& e) {
  if (!(kinds_ & KindBit(e.data.ev.kind))) return false;  // not wanted: not lost either
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    if (queue_.size() >= capacity_) {
      lost_++;
      return false;
    }
    queue_.push_back(e);
  }
  cv_.notify_one();
  return true;
}

void Subscription::OfferAll(const std::vector<ObsEvent>& events) {
  bool added = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    for (const ObsEvent& e : events) {
      if (!(kinds_ & KindBit(e.data.ev.kind))) continue;  // not wanted: not lost either
      if (queue_.size() >= capacity_) {
        lost_++;
        continue;
      }
      queue_.push_back(e);
      added = true;
    }
  }
  if (added) cv_.notify_one();
}

bool Subscription::TakeLocked(size_t max, std::vector<ObsEvent>* out) {
  size_t n = std::min(max, queue_.size());
  for (size_t i = 0; i < n; i++) {
    out->push_back(queue_.front());
    queue_.pop_front();
  }
  return n > 0;
}

void Subscription::Filter(std::vector<ObsEvent>* events) const {
  if (!filter_) return;
  events->erase(std::remove_if(events->begin(), events->end(),
                               [&](const ObsEvent& e) { return !filter_(e.data.ev); }),
                events->end());
}

std::vector<ObsEvent> Subscription::NextBatch(size_t max, std::chrono::milliseconds timeout) {
  std::vector<ObsEvent> out;
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_until(lock, end, [&] { return !queue_.empty() || closed_; })) return out;
      if (!TakeLocked(max, &out)) return out;  // closed
    }
    Filter(&out);  // outside the lock: the publisher keeps publishing
    if (!out.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      delivered_ += out.size();
      return out;
    }
    if (std::chrono::steady_clock::now() >= end) return out;
  }
}

std::optional<ObsEvent> Subscription::Next(std::chrono::milliseconds timeout) {
  auto batch = NextBatch(1, timeout);
  if (batch.empty()) return std::nullopt;
  return batch.front();
}

uint64_t Subscription::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

uint64_t Subscription::delivered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return delivered_;
}

void Subscription::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

Result<std::shared_ptr<Subscription>> Hub::Subscribe(SubscribeOptions o) {
  size_t capacity = o.queue ? o.queue : 1;
  StreamBudget::Ticket ticket;
  if (!o.stream.empty() && budget_) {
    auto t = budget_->Open(o.stream, Subscription::QueueBytes(capacity) + o.also_holds, o.peer);
    if (!t.ok()) return t.status();
    ticket = std::move(*t);
  }
  auto s = std::make_shared<Subscription>(capacity, o.kinds, std::move(o.filter));
  s->ticket_ = std::move(ticket);
  std::lock_guard<std::mutex> lock(mu_);
  subs_.push_back(s);
  return s;
}

std::shared_ptr<Subscription> Hub::Subscribe(size_t capacity, EventFilterFn filter) {
  SubscribeOptions o;
  o.queue = capacity;
  o.filter = std::move(filter);
  return *Subscribe(std::move(o));  // not a client stream: never refused
}

Result<StreamSubscription> Hub::OpenStream(StreamOptions o) {
  o.subscribe.also_holds += Subscription::QueueBytes(o.waiting);
  auto sub = Subscribe(std::move(o.subscribe));
  if (!sub.ok()) return sub.status();
  return StreamSubscription(this, std::move(*sub), o.waiting, o.counted_in);
}

void Hub::Unsubscribe(const std::shared_ptr<Subscription>& s) {
  s->Close();
  std::lock_guard<std::mutex> lock(mu_);
  subs_.erase(std::remove(subs_.begin(), subs_.end(), s), subs_.end());
}

void Hub::Publish(ObsEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  e.seq = ++seq_;
  for (auto& s : subs_) s->Offer(e);
}

void Hub::PublishAll(std::vector<ObsEvent>* events) {
  if (events->empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (ObsEvent& e : *events) e.seq = ++seq_;
  for (auto& s : subs_) s->OfferAll(*events);
}

uint64_t Hub::published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

void Hub::SetComplete(uint64_t ns) {
  uint64_t cur = complete_.load(std::memory_order_relaxed);
  while (ns > cur && !complete_.compare_exchange_weak(cur, ns, std::memory_order_release)) {
  }
}

void Hub::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : subs_) s->Close();
}

StreamSubscription::StreamSubscription(Hub* hub, std::shared_ptr<Subscription> sub, size_t waiting,
                                       std::atomic<int>* counted_in)
    : hub_(hub),
      sub_(std::move(sub)),
      counted_in_(counted_in),
      room_(waiting),
      ring_seen_(hub->ring_lost()) {
  if (counted_in_) (*counted_in_)++;
}

StreamSubscription::StreamSubscription(StreamSubscription&& o) noexcept
    : hub_(o.hub_),
      sub_(std::move(o.sub_)),
      counted_in_(o.counted_in_),
      room_(o.room_),
      waiting_(std::move(o.waiting_)),
      own_lost_(o.own_lost_),
      ring_seen_(o.ring_seen_),
      sub_seen_(o.sub_seen_),
      own_seen_(o.own_seen_) {
  o.counted_in_ = nullptr;  // sub_ moved: o holds nothing
}

StreamSubscription::~StreamSubscription() {
  if (!sub_) return;
  hub_->Unsubscribe(sub_);
  if (counted_in_) (*counted_in_)--;
}

void StreamSubscription::Take(size_t max, std::chrono::milliseconds timeout,
                              const std::function<bool(const ObsEvent&)>& keep) {
  for (ObsEvent& e : sub_->NextBatch(max, timeout)) {
    if (keep && !keep(e)) continue;
    if (waiting_.size() >= room_) {
      own_lost_++;
      continue;
    }
    waiting_.push_back(std::move(e));
  }
}

std::vector<StreamLoss> StreamSubscription::TakeLosses() {
  std::vector<StreamLoss> out;
  uint64_t ring = hub_->ring_lost();
  if (ring > ring_seen_) out.push_back({LossSource::kKernelRing, ring - ring_seen_});
  ring_seen_ = ring;
  uint64_t lost = sub_->lost();
  if (lost > sub_seen_)
    out.push_back(
        {sub_->filtered() ? LossSource::kHub : LossSource::kSubscriber, lost - sub_seen_});
  sub_seen_ = lost;
  if (own_lost_ > own_seen_) out.push_back({LossSource::kSubscriber, own_lost_ - own_seen_});
  own_seen_ = own_lost_;
  return out;
}

}  // namespace lossd
