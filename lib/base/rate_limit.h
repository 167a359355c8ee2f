// A bound on how many lines of one kind the log gets (the refusals of client
// calls: one abusive client cannot flood it): a token bucket of `burst` lines
// refilled at `per_second`, and a count of the lines held back, which the
// next line let through reports ("suppressed K"). Pure and not thread-safe:
// the caller holds its own lock and passes the time (unit-tested).
#pragma once

#include <cstdint>

namespace lossd {

class LineRateLimiter {
 public:
  // per_second >= 1, burst >= 1.
  LineRateLimiter(uint32_t per_second, uint32_t burst);

  // True: write this line; *suppressed is then how many lines were held back
  // since the last one written (and the count starts again). False: hold it
  // back (counted).
  bool Admit(uint64_t now_ns, uint64_t* suppressed);
  uint64_t suppressed() const { return suppressed_; }

 private:
  uint64_t cost_ns_;      // one line's share of a second
  uint64_t capacity_ns_;  // burst lines' worth
  uint64_t budget_ns_;    // what is left, in the same unit
  uint64_t last_ns_ = 0;
  bool started_ = false;
  uint64_t suppressed_ = 0;
};

}  // namespace lossd
