#include "injector/watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/log.h"
#include "host/netlink.h"

namespace lossd {

std::chrono::milliseconds WatchThreads::Period(std::chrono::milliseconds lease) {
  auto period = lease.count() > 0 ? lease / 3 : std::chrono::milliseconds(500);
  return std::max(period, std::chrono::milliseconds(50));
}

Result<std::unique_ptr<WatchThreads>> WatchThreads::Start(std::chrono::milliseconds period,
                                                          Calls calls) {
  auto links = OpenLinkEvents();
  if (!links.ok()) return links.status();
  std::unique_ptr<WatchThreads> w(new WatchThreads(period, std::move(calls)));
  w->stop_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!w->stop_fd_.valid()) return Status::FromErrno(errno, "eventfd");
  w->lease_thread_ = std::thread([p = w.get()] { p->RunLease(); });
  w->watch_thread_ =
      std::thread([p = w.get(), fd = std::move(*links)]() mutable { p->RunWatch(std::move(fd)); });
  return w;
}

WatchThreads::~WatchThreads() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (stop_fd_.valid()) {
    uint64_t one = 1;
    if (write(stop_fd_.get(), &one, sizeof(one)) < 0) LOG_WARN("wake the watch thread: %m");
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void WatchThreads::RunLease() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) calls_.renew();
}

void WatchThreads::RunWatch(UniqueFd links) {
  auto next = std::chrono::steady_clock::now() + period_;
  for (;;) {
    struct pollfd fds[2] = {{links.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        next - std::chrono::steady_clock::now());
    int n = poll(fds, 2, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n < 0 && errno != EINTR) {  // never seen; the period's checks go on regardless
      LOG_ERROR("poll link events: %m");
      std::this_thread::sleep_for(period_);
      continue;
    }
    if (fds[1].revents) return;
    bool changed = fds[0].revents && DrainLinkEvents(links.get()) > 0;
    bool due = std::chrono::steady_clock::now() >= next;
    if (due) {
      calls_.reap();
      next = std::chrono::steady_clock::now() + period_;
    }
    if (changed || due) calls_.check();
  }
}

}  // namespace lossd
