#include "observer/diagnosis.h"

#include <algorithm>

namespace lossd {

FlowLimits LimitsOf(const obs_flow& f, uint64_t life_ns) {
  FlowLimits l;
  l.busy_ns = f.limit_ns[OBS_LIM_BUSY];
  auto& part = l.within_busy_ns;
  part[size_t(Limit::kRwnd)] = std::min<uint64_t>(f.limit_ns[OBS_LIM_RWND], l.busy_ns);
  part[size_t(Limit::kSndbuf)] =
      std::min<uint64_t>(f.limit_ns[OBS_LIM_SNDBUF], l.busy_ns - part[size_t(Limit::kRwnd)]);
  uint64_t rest = l.busy_ns - part[size_t(Limit::kRwnd)] - part[size_t(Limit::kSndbuf)];
  // cwnd-limited time is sampled at ACKs (ns); busy comes in jiffies: clamp.
  part[size_t(Limit::kCwnd)] = std::min<uint64_t>(f.limit_ns[OBS_LIM_CWND], rest);
  rest -= part[size_t(Limit::kCwnd)];
  // A Nagle wait is busy time (the first write in flight, the second queued)
  // that the kernel's chrono leaves to the application: it is the stall the
  // flow's record names nagle_delayed_ack, so the two agree about that time.
  part[size_t(Limit::kNagle)] = std::min<uint64_t>(f.stall_ns[OBS_STALL_NAGLE_DELAYED_ACK], rest);
  part[size_t(Limit::kApp)] = rest - part[size_t(Limit::kNagle)];
  l.idle_ns = life_ns > l.busy_ns ? life_ns - l.busy_ns : 0;
  if (l.busy_ns) {
    size_t best = 0;
    for (size_t i = 1; i < part.size(); i++)
      if (part[i] > part[best]) best = i;
    l.dominant = static_cast<Limit>(best);
    l.dominant_share = double(part[best]) / double(l.busy_ns);
  }
  return l;
}

const char* LimitName(Limit l) {
  switch (l) {
    case Limit::kRwnd: return "rwnd_limited";
    case Limit::kSndbuf: return "sndbuf_limited";
    case Limit::kCwnd: return "cwnd_limited";
    case Limit::kNagle: return "nagle_limited";
    case Limit::kApp: return "app_limited";
    case Limit::kCount: break;
  }
  return "";
}

const char* LimitShortName(Limit l) {
  switch (l) {
    case Limit::kRwnd: return "rwnd";
    case Limit::kSndbuf: return "sndbuf";
    case Limit::kCwnd: return "cwnd";
    case Limit::kNagle: return "nagle";
    case Limit::kApp: return "app";
    case Limit::kCount: break;
  }
  return "";
}

const char* StallCauseName(int cause) {
  switch (cause) {
    case OBS_STALL_UNKNOWN: return "unknown";
    case OBS_STALL_RTO: return "rto";
    case OBS_STALL_TLP: return "tlp";
    case OBS_STALL_FAST_RECOVERY: return "fast_recovery";
    case OBS_STALL_ZERO_WINDOW: return "zero_window";
    case OBS_STALL_RWND_LIMITED: return "rwnd_limited";
    case OBS_STALL_NAGLE_DELAYED_ACK: return "nagle_delayed_ack";
    case OBS_STALL_CWND_LIMITED: return "cwnd_limited";
    case OBS_STALL_SNDBUF_LIMITED: return "sndbuf_limited";
    case OBS_STALL_APP_LIMITED: return "app_limited";
  }
  return "?";
}

uint64_t StalledFor(const obs_flow& f, uint64_t now_ns) {
  if (f.idle || !f.delivered_ns || now_ns <= f.delivered_ns) return 0;
  uint64_t gap = now_ns - f.delivered_ns;
  uint64_t threshold = f.threshold_ns ? f.threshold_ns : OBS_STALL_MIN_NS_DEFAULT;
  return gap > threshold ? gap : 0;
}

}  // namespace lossd
