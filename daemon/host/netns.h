// Network namespaces other than lossd's own: finding them (by process, by
// cgroup, by bind-mounted path), naming them (inode, cookie) and doing work
// inside one (a thread enters it for a scope and comes back).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

// A network namespace held open (by an fd of its nsfs file): it cannot be
// freed while held, and its inode names it (what /proc/PID/ns/net links to,
// net:[INODE], and what sockets' skc_net.ns.inum is).
struct Netns {
  UniqueFd fd;
  uint64_t ino = 0;
  std::string where;  // how it was found: "/proc/123/ns/net", "/run/netns/x"
};

// Opens the namespace at `path` (/proc/PID/ns/net, /run/netns/NAME, any
// bind mount of one). INVALID_ARGUMENT when it is not a network namespace.
Result<Netns> OpenNetns(const std::string& path);
// lossd's own (the calling thread's) namespace.
Result<Netns> OwnNetns();
// Inode of this thread's network namespace (0 if unreadable).
uint64_t ThreadNetnsIno();

// Every network namespace some process is in (/proc/*/ns/net) or that is
// bind-mounted under /run/netns, by inode; one path each (the first found).
// Bounded: at most `max` namespaces (the rest are not listed).
std::map<uint64_t, std::string> ListNetns(size_t max = 4096);

// The network namespaces of the processes in a cgroup v2 directory and
// below it (cgroup.procs, walked to 32 levels, at most 4096 processes read),
// by inode with one process's path each. Empty when it holds no process.
// PERMISSION_DENIED when it holds processes but none's namespace could be
// read (another process's /proc/PID/ns/net needs CAP_SYS_PTRACE unless its
// capabilities are a subset of lossd's).
Result<std::map<uint64_t, std::string>> CgroupNetns(const std::string& cgroup_dir);

// The calling thread in another network namespace until destroyed, then
// back in the one it was in (sockets created meanwhile stay in the other:
// a netlink socket made here talks to that namespace). Only this thread
// moves. ok() false (and status() why) when it could not enter; leaving
// cannot fail short of a kernel bug, which is logged and aborts (a thread of
// lossd in a wrong namespace would act on the wrong host).
class EnterNetns {
 public:
  explicit EnterNetns(const Netns& target);
  ~EnterNetns();
  EnterNetns(const EnterNetns&) = delete;
  EnterNetns& operator=(const EnterNetns&) = delete;
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

 private:
  UniqueFd back_;
  Status status_;
  bool moved_ = false;
};

// The namespace of inode `ino` if it still exists: `hint` first (a path
// that named it), else any process's or /run/netns's (ListNetns). NOT_FOUND
// when none has it (it is gone, or held only by an fd or a bind mount lossd
// cannot see).
Result<Netns> FindNetns(uint64_t ino, const std::string& hint);
// Runs fn with the calling thread inside namespace `ino` (0, or this
// thread's own: right here), then brings it back. NOT_FOUND when that
// namespace is gone.
Status InNetns(uint64_t ino, const std::string& hint, const std::function<Status()>& fn);

// The netns cookie of this thread's namespace (SO_NETNS_COOKIE), 0 if the
// kernel has none (before 5.14).
uint64_t ThreadNetnsCookie();

}  // namespace lossd
