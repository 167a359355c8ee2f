// The state dir (--state-dir) has one owner at a time: a process that may
// change the host (the daemon, a one-shot rule) holds an flock on
// <state-dir>/lock, with its pid written in it, for as long as it runs. A
// second one is refused, naming the holder. So whatever records a new owner
// finds in the dir were left by one that is gone (docs/architecture.md#crash-safety).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

class StateDirLock {
 public:
  // Creates the dir (0700) if needed and takes its lock; FAILED_PRECONDITION
  // "... held by lossd pid N ..." when another process holds it. An empty
  // dir (--state-dir ''): nothing to lock, an empty lock.
  static Result<std::unique_ptr<StateDirLock>> Acquire(const std::string& dir);
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

 private:
  StateDirLock() = default;
  UniqueFd fd_;  // the flock lives as long as this descriptor
};

// A record file of the state dir ("" : none), `what` naming its records in
// messages. Read: its non-empty lines, up to 1 MiB (past it, logged and
// cut); no file reads as empty; one that cannot be read is an error (writing
// over it would lose its records). Write: replaces it with `lines` (none:
// removes it): a new file written whole, fsynced, renamed over the old one,
// the directory fsynced, so that a crash or a full disk leaves the old
// records or the new ones, never a torn or empty file; RESOURCE_EXHAUSTED
// (naming the file) when the disk is full.
Result<std::vector<std::string>> ReadStateLines(const std::string& file, const std::string& what);
Status WriteStateLines(const std::string& file, const std::vector<std::string>& lines,
                       const std::string& what);

}  // namespace lossd
