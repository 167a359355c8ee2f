// The injector's two background threads and their wake-ups. One renews the
// lease every period and takes nothing else, so a rule change (attaching,
// netlink, ethtool, a long ClearRules) never delays a renewal. The other
// reaps expired rules and checks the attachments every period, and checks
// at once when a link of the namespace changes (rtnetlink RTNLGRP_LINK; a
// cgroup's removal is seen at the next period). What each call does is the
// injector's; this only runs them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

class WatchThreads {
 public:
  struct Calls {
    std::function<void()> renew;  // the lease
    std::function<void()> reap;   // expired rules, every period
    std::function<void()> check;  // the attachments: every period, and at a link change
  };
  // The period is a third of the lease (500 ms without one), at least 50 ms.
  static std::chrono::milliseconds Period(std::chrono::milliseconds lease);
  // Subscribes to link changes first (a link that goes from here on is
  // seen), then starts both threads.
  static Result<std::unique_ptr<WatchThreads>> Start(std::chrono::milliseconds period, Calls calls);
  // Stops both threads and joins them.
  ~WatchThreads();
  WatchThreads(const WatchThreads&) = delete;
  WatchThreads& operator=(const WatchThreads&) = delete;

 private:
  WatchThreads(std::chrono::milliseconds period, Calls calls)
      : period_(period), calls_(std::move(calls)) {}
  void RunLease();
  void RunWatch(UniqueFd links);

  const std::chrono::milliseconds period_;
  const Calls calls_;
  std::thread lease_thread_, watch_thread_;
  std::mutex stop_mu_;          // the lease thread's only lock
  std::condition_variable cv_;  // with stop_mu_: wakes the lease thread to stop
  bool stop_ = false;
  UniqueFd stop_fd_;  // eventfd: wakes the watch thread to stop
};

}  // namespace lossd
