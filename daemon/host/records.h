// The state dir's record lines (docs/architecture.md#crash-safety), written by
// one lossd and applied by the next start: parsed strictly, since a line that
// was not written by lossd must never be applied. Decimal fields only (no sign,
// no space inside, at most 20 digits) within the kernel's ranges, and an
// interface name the kernel could have given (1-15 bytes, no space, '/', ':'
// or control byte, not "." or ".."). Pure: tests/fuzz/records_fuzz.cc fuzzes them.
#pragma once

#include <cstdint>
#include <string>

namespace lossd {

bool ValidIfname(const std::string& name);

// An interface whose offloads lossd changed (host/offloads.h):
// "<netns> <ifindex> <ifname> <gro> <gso_max_segs>", or an older lossd's
// "<ifname> <gro> <gso_max_segs>" (netns and ifindex 0: this namespace).
struct OffloadRecord {
  uint64_t netns = 0;
  uint32_t ifindex = 0;
  std::string ifname;
  uint32_t gro = 0;           // 0 or 1
  uint32_t gso_max_segs = 0;  // 1 .. 65535 (GSO_MAX_SEGS)
};
bool ParseOffloadRecord(const std::string& line, OffloadRecord* r);
// The 5-field form; the 3-field one for a record without an ifindex.
std::string OffloadRecordLine(const OffloadRecord& r);

// A clsact filter lossd attached in another network namespace (injector/attach.cc):
// "<netns> <ifindex> <ifname>", netns and ifindex not 0.
struct FilterRecord {
  uint64_t netns = 0;
  uint32_t ifindex = 0;
  std::string ifname;
};
bool ParseFilterRecord(const std::string& line, FilterRecord* r);
std::string FilterRecordLine(const FilterRecord& r);

}  // namespace lossd
