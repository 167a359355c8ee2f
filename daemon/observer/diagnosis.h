// Why a flow is slow, from its kernel record (bpf/observe_abi.h): where its
// time went (limits) and the names of stall causes. Pure functions, shared by
// the services, the effect tracker, the metrics and the front ends
// (docs/observer.md#limits, #stalls).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "observe_abi.h"

namespace lossd {

enum class Limit { kRwnd = 0, kSndbuf, kCwnd, kNagle, kApp, kCount };

struct FlowLimits {
  uint64_t busy_ns = 0;  // data in flight or queued (the kernel's tcpi_busy_time)
  // Parts of busy: the kernel's rwnd/sndbuf chrono, our sampled cwnd-limited
  // time, the Nagle waits (the flow's nagle_delayed_ack stalls: data queued,
  // held for the peer's delayed ACK, not the application's doing), and the
  // rest (the application sent less than cwnd allowed).
  std::array<uint64_t, static_cast<size_t>(Limit::kCount)> within_busy_ns{};
  uint64_t idle_ns = 0;  // life outside busy: nothing to send
  // The largest part of busy and its share of it; kCount while nothing was busy.
  Limit dominant = Limit::kCount;
  double dominant_share = 0;
};

// `life_ns`: the flow's age (now or its close, minus opened_ns).
FlowLimits LimitsOf(const obs_flow& f, uint64_t life_ns);

// "rwnd_limited", "sndbuf_limited", "cwnd_limited", "nagle_limited",
// "app_limited"; the
// short names ("rwnd", ...) are for columns.
const char* LimitName(Limit l);
const char* LimitShortName(Limit l);

// "unknown", "rto", "tlp", "fast_recovery", "zero_window", "rwnd_limited",
// "nagle_delayed_ack", "cwnd_limited", "sndbuf_limited", "app_limited" (the
// proto's StallCause names, lower case, without the prefix); "?" outside.
const char* StallCauseName(int cause);

// The flow has been stalled for this long at `now_ns` (0: it is not): data to
// deliver, and no delivery for longer than its threshold.
uint64_t StalledFor(const obs_flow& f, uint64_t now_ns);

}  // namespace lossd
