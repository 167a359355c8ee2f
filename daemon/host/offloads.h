// Interface offloads that make each skb one wire segment, and the state file
// that lets the next start undo a crashed owner's changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace lossd {

// Makes one skb one wire segment on an interface: gso_max_segs 1 (the
// stack then builds single-segment skbs for it; TCP sizes them before any
// hook runs, so turning TSO/GSO off would not do) and GRO off (no
// aggregation on receive). Restores both on destruction. The previous
// settings are written to state_file first, so that a crashed owner's
// changes are undone at the next start (RestoreOffloads). A record names the
// interface by network namespace (inode of /proc/self/ns/net) and ifindex,
// beside its name: "<netns> <ifindex> <ifname> <gro> <gso_max_segs>". The
// record is stored (written, fsynced, renamed) before any change, and a rule
// whose record cannot be stored is refused (RESOURCE_EXHAUSTED when the disk
// is full). Records are validated when read (the kernel's ranges); junk is
// dropped and logged, and the file is read up to 1 MiB.
class OffloadGuard {
 public:
  static Result<std::unique_ptr<OffloadGuard>> Disable(const std::string& ifname,
                                                       const std::string& state_file);
  ~OffloadGuard();
  OffloadGuard(const OffloadGuard&) = delete;
  OffloadGuard& operator=(const OffloadGuard&) = delete;

 private:
  OffloadGuard() = default;
  std::string ifname_, state_file_, record_;
  uint32_t gro_ = 0, gso_max_segs_ = 0;
  uint64_t netns_ = 0;  // where ifname_ is: restored there
  bool recorded_ = false;  // the record is stored: changes may have been made
};

// Restores the interfaces that state_file lists, each in the network
// namespace its record names (entered while it still exists: a cgroup
// target's devices may be in a container's); returns how many. Call it only
// while holding the state dir's lock (StateDirLock): the records are then a
// dead owner's. A record is removed once restored, or when its interface
// (that ifindex) or its namespace is gone; one whose restore failed is kept.
int RestoreOffloads(const std::string& state_file);

// Inode of the calling thread's network namespace (0 if unreadable):
// a thread inside EnterNetns records the namespace it works in.
uint64_t CurrentNetnsIno();

}  // namespace lossd
