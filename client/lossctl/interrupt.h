// Ctrl-C (SIGINT) and SIGTERM end a stream cleanly: a thread waits for the
// signal and cancels the call in progress, whose Read() then returns false.
// Without a call to cancel, the process exits at once (130 or 143).
#pragma once

#include <grpcpp/client_context.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace lossctl {

// One per process, made first in main(): it blocks SIGINT, SIGTERM (and
// SIGUSR2, its wake-up to stop) in every thread created after it, gRPC's
// included, and waits for them in its own.
class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  static SignalWatcher* Get();  // the live instance, or null
  void Register(grpc::ClientContext* ctx);
  void Unregister(grpc::ClientContext* ctx);
  bool interrupted() const { return interrupted_.load(); }

 private:
  void Run();

  std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<bool> interrupted_{false};
  std::chrono::steady_clock::time_point first_;  // of the first signal
  std::thread thread_;
};

// Cancels `ctx` on SIGINT/SIGTERM while in scope.
class CancelOnSignal {
 public:
  explicit CancelOnSignal(grpc::ClientContext* ctx);
  ~CancelOnSignal();
  CancelOnSignal(const CancelOnSignal&) = delete;
  CancelOnSignal& operator=(const CancelOnSignal&) = delete;
  bool interrupted() const;

 private:
  grpc::ClientContext* ctx_;
};

}  // namespace lossctl
