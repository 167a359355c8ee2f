// The two clocks lossd reads: CLOCK_MONOTONIC (bpf_ktime_get_ns's, for the
// data plane's lease and TTLs) and CLOCK_REALTIME (for times shown to users).
#pragma once

#include <time.h>

#include <cstdint>

namespace lossd {

inline uint64_t ClockNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
inline uint64_t MonotonicNs() {
  return ClockNs(CLOCK_MONOTONIC);
}
inline uint64_t UnixNs() {
  return ClockNs(CLOCK_REALTIME);
}

}  // namespace lossd
