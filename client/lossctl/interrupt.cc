#include "interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

namespace lossctl {
namespace {

std::atomic<SignalWatcher*> g_watcher{nullptr};

// SIGUSR2 only wakes the watcher to stop (sent by its destructor).
sigset_t Signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  sigset_t set = Signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { Run(); });
  g_watcher.store(this);
}

SignalWatcher::~SignalWatcher() {
  g_watcher.store(nullptr);
  stop_.store(true);
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

SignalWatcher* SignalWatcher::Get() {
  return g_watcher.load();
}

void SignalWatcher::Register(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = ctx;
}

void SignalWatcher::Unregister(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == ctx) ctx_ = nullptr;
}

void SignalWatcher::Run() {
  sigset_t set = Signals();
  while (!stop_.load()) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR2) continue;
    std::lock_guard<std::mutex> lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (ctx_ && !interrupted_.load()) {
      interrupted_.store(true);
      first_ = now;
      ctx_->TryCancel();
    } else if (!interrupted_.load() || now - first_ > std::chrono::seconds(1)) {
      // Nothing to end cleanly, or a second Ctrl-C while ending. (One
      // signal is often delivered twice at once: to the process and to
      // its group, as timeout(1) does.)
      fflush(stdout);  // what was printed so far (stdio locks its streams)
      _exit(128 + sig);
    }
  }
}

CancelOnSignal::CancelOnSignal(grpc::ClientContext* ctx) : ctx_(ctx) {
  if (auto* w = SignalWatcher::Get()) w->Register(ctx_);
}

CancelOnSignal::~CancelOnSignal() {
  if (auto* w = SignalWatcher::Get()) w->Unregister(ctx_);
}

bool CancelOnSignal::interrupted() const {
  auto* w = SignalWatcher::Get();
  return w && w->interrupted();
}

}  // namespace lossctl
