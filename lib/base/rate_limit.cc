#include "base/rate_limit.h"

#include <algorithm>

namespace lossd {

LineRateLimiter::LineRateLimiter(uint32_t per_second, uint32_t burst)
    : cost_ns_(1000000000ull / std::max<uint32_t>(per_second, 1)),
      capacity_ns_(cost_ns_ * std::max<uint32_t>(burst, 1)),
      budget_ns_(capacity_ns_) {}

bool LineRateLimiter::Admit(uint64_t now_ns, uint64_t* suppressed) {
  if (!started_) {
    started_ = true;
    last_ns_ = now_ns;
  }
  if (now_ns > last_ns_) {  // a clock that went back refills nothing
    uint64_t elapsed = now_ns - last_ns_;
    budget_ns_ =
        elapsed >= capacity_ns_ ? capacity_ns_ : std::min(capacity_ns_, budget_ns_ + elapsed);
    last_ns_ = now_ns;
  }
  if (budget_ns_ < cost_ns_) {
    suppressed_++;
    return false;
  }
  budget_ns_ -= cost_ns_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace lossd
