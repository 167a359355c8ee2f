#include "observer/hub.h"

#include <algorithm>

namespace lossd {

bool Subscription::Offer(const ObsEvent& e) {
  if (filter_ && !filter_(e)) return false;  // not wanted: not lost either
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
  // The filter runs outside the lock (it may take locks of its own).
  std::vector<const ObsEvent*> wanted;
  wanted.reserve(events.size());
  for (const ObsEvent& e : events)
    if (!filter_ || filter_(e)) wanted.push_back(&e);  // not wanted: not lost either
  if (wanted.empty()) return;
  bool added = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    for (const ObsEvent* e : wanted) {
      if (queue_.size() >= capacity_) {
        lost_++;
        continue;
      }
      queue_.push_back(*e);
      added = true;
    }
  }
  if (added) cv_.notify_one();
}

std::vector<ObsEvent> Subscription::NextBatch(size_t max, std::chrono::milliseconds timeout) {
  std::vector<ObsEvent> out;
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; })) return out;
  size_t n = std::min(max, queue_.size());
  out.reserve(n);
  for (size_t i = 0; i < n; i++) {
    out.push_back(queue_.front());
    queue_.pop_front();
  }
  delivered_ += n;
  return out;
}

std::optional<ObsEvent> Subscription::Next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; })) return std::nullopt;
  if (queue_.empty()) return std::nullopt;
  ObsEvent e = queue_.front();
  queue_.pop_front();
  delivered_++;
  return e;
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

std::shared_ptr<Subscription> Hub::Subscribe(size_t capacity, EventFilterFn filter) {
  auto s = std::make_shared<Subscription>(capacity ? capacity : 1, std::move(filter));
  std::lock_guard<std::mutex> lock(mu_);
  subs_.push_back(s);
  return s;
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

void Hub::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : subs_) s->Close();
}

}  // namespace lossd
