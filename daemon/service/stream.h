// A server-streaming reactor fed by a producer thread: the producer builds
// messages (blocking as it likes: timers, hub subscriptions), the reactor
// keeps exactly one write in flight, and a cancelled or finished stream
// stops the producer. The service layer writes only the producer.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "base/stop_token.h"

namespace lossd {

template <typename Msg>
class PumpReactor : public grpc::ServerWriteReactor<Msg> {
 public:
  // Context handed to the producer.
  class Sink {
   public:
    explicit Sink(PumpReactor* r) : r_(r) {}
    // Sends one message; waits for the previous write. False once the
    // client is gone (stop producing).
    bool Write(Msg m) { return r_->WriteOne(std::move(m)); }
    // Sleeps up to `d`; false if the stream should end meanwhile.
    template <typename D>
    bool Sleep(D d) {
      auto end = std::chrono::steady_clock::now() + d;
      std::unique_lock<std::mutex> lock(r_->mu_);
      while (!r_->cancelled_ && !r_->stop_->stopped()) {
        auto slice = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        if (slice >= end) {
          r_->cv_.wait_until(lock, end, [&] { return r_->cancelled_; });
          break;
        }
        r_->cv_.wait_until(lock, slice, [&] { return r_->cancelled_; });
      }
      return !r_->cancelled_ && !r_->stop_->stopped();
    }
    // A write is in flight (Write would wait for it).
    bool Busy() const {
      std::lock_guard<std::mutex> lock(r_->mu_);
      return r_->writing_;
    }
    // The client went away, or the server is shutting down.
    bool done() const {
      std::lock_guard<std::mutex> lock(r_->mu_);
      return r_->cancelled_ || r_->stop_->stopped();
    }

   private:
    PumpReactor* r_;
  };

  // A stream refused before it started (a bad request, no budget left):
  // finished at once, with no thread.
  explicit PumpReactor(const grpc::Status& refused) { this->Finish(refused); }

  // produce(sink) runs on its own thread; its return value ends the stream,
  // as does `stop` (the server's, which outlives the stream: see Sink::done).
  // Whatever the stream must be granted (its budget, its subscription) is
  // taken before, on the caller's thread: a refused stream gets no thread.
  PumpReactor(std::function<grpc::Status(Sink&)> produce, const StopToken& stop) : stop_(&stop) {
    thread_ = std::thread([this, produce = std::move(produce)] {
      Sink sink(this);
      grpc::Status st = produce(sink);
      {
        // Wait for the last write before finishing.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !writing_; });
      }
      this->Finish(cancelled() ? grpc::Status::CANCELLED : st);
    });
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    cv_.notify_all();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
  }

  void OnDone() override {
    // gRPC may run this reaction inline, on the producer thread inside Finish.
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else if (thread_.joinable())
      thread_.join();
    delete this;
  }

 private:
  bool cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  bool WriteOne(Msg&& m) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !writing_ || cancelled_; });
    if (cancelled_) return false;
    msg_ = std::move(m);
    writing_ = true;
    lock.unlock();
    this->StartWrite(&msg_);
    return true;
  }

  const StopToken* stop_ = nullptr;  // null: refused, no producer
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false;
  bool cancelled_ = false;
  Msg msg_;
  std::thread thread_;
};

}  // namespace lossd
