// A one-way stop signal that many threads poll: set once, read without a
// lock. The daemon's streams hold its token (Components::stream_stop), so a
// shutting-down server's producers finish their streams cleanly (status OK)
// instead of being cut off at the shutdown deadline.
#pragma once

#include <atomic>

namespace lossd {

class StopToken {
 public:
  void Stop() { stopped_.store(true); }
  bool stopped() const { return stopped_.load(); }

 private:
  std::atomic<bool> stopped_{false};
};

}  // namespace lossd
