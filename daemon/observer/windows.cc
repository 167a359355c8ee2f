#include "observer/windows.h"

#include <algorithm>

namespace lossd {

RtxWindows::RtxWindows(uint64_t start_ns, uint64_t width_ns, uint64_t hold_ns)
    : start_ns_(start_ns), width_ns_(std::max<uint64_t>(width_ns, 1)), hold_ns_(hold_ns) {}

RtxWindow& RtxWindows::At(uint64_t index) {
  while (open_.size() <= index - first_) {
    RtxWindow w;
    w.start_ns = start_ns_ + (first_ + open_.size()) * width_ns_;
    open_.push_back(std::move(w));
  }
  return open_[index - first_];
}

void RtxWindows::Add(uint64_t time_ns, uint32_t type, uint32_t segs, uint64_t cookie,
                     const std::vector<uint32_t>& rules) {
  if (time_ns < start_ns_) return;
  uint64_t index = (time_ns - start_ns_) / width_ns_;
  bool late = index < first_;
  RtxWindow& w = At(late ? first_ : index);
  if (late) w.late += segs;
  if (type < OBS_RTX_MAX) w.by_type[type] += segs;
  w.by_flow[cookie] += segs;
  for (uint32_t id : rules) w.by_rule[id] += segs;
}

std::vector<RtxWindow> RtxWindows::TakeClosed(uint64_t complete_ns, uint64_t now_ns) {
  std::vector<RtxWindow> out;
  uint64_t read_to = std::min(complete_ns, now_ns);
  for (;;) {
    uint64_t end = next_end();
    bool read = end <= read_to;
    bool overdue = now_ns >= end && now_ns - end >= hold_ns_;
    if (!read && !overdue) break;
    out.push_back(std::move(At(first_)));
    open_.pop_front();
    first_++;
  }
  return out;
}

}  // namespace lossd
