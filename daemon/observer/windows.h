// Retransmissions counted in fixed windows of the kernel's time (the events'
// own CLOCK_MONOTONIC stamps), not of when user space happened to read them:
// a daemon that a busy machine leaves off the CPU for a second hands a
// second's events over at once, and by arrival they would all fall in one
// window. A window closes once the ring's reader has read everything stamped
// before its end (Hub::complete()), or `hold` after its end if the reader is
// that late; an event for a window already closed then is counted in the
// oldest one still open (never lost), and `late` says how many segments were.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "observe_abi.h"

namespace lossd {

struct RtxWindow {
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  uint64_t by_type[OBS_RTX_MAX] = {};
  std::map<uint64_t, uint64_t> by_flow;  // socket cookie -> segments
  std::map<uint32_t, uint64_t> by_rule;  // rule id -> segments
  uint64_t late = 0;                     // segments that happened in an earlier window
};

class RtxWindows {
 public:
  RtxWindows(uint64_t start_ns, uint64_t width_ns, uint64_t hold_ns);

  // A retransmission of `segs` segments stamped `time_ns`; one stamped before
  // the first window (read late, from before the stream) is not counted.
  void Add(uint64_t time_ns, uint32_t type, uint32_t segs, uint64_t cookie,
           const std::vector<uint32_t>& rules);
  // The windows, oldest first, that ended before min(complete_ns, now_ns) or
  // `hold` before now_ns; each window once, none skipped (empty ones too).
  std::vector<RtxWindow> TakeClosed(uint64_t complete_ns, uint64_t now_ns);
  // The end of the oldest window still open.
  uint64_t next_end() const { return start_ns_ + (first_ + 1) * width_ns_; }

 private:
  RtxWindow& At(uint64_t index);

  const uint64_t start_ns_, width_ns_, hold_ns_;
  uint64_t first_ = 0;           // index of open_.front()
  std::deque<RtxWindow> open_;   // windows first_, first_ + 1, ... (created as needed)
};

}  // namespace lossd
