#include "host/netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <linux/nsfs.h>
#include <sys/ioctl.h>

#include "base/log.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

namespace lossd {

namespace {

constexpr int kMaxCgroupDepth = 32;
constexpr size_t kMaxProcs = 4096;

// Whether fd is a network namespace (NS_GET_NSTYPE, 4.11+).
bool IsNetns(int fd) { return ioctl(fd, NS_GET_NSTYPE) == CLONE_NEWNET; }

uint64_t InoOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

struct ProcsWalk {
  size_t read = 0;
  int denied_errno = 0;  // a process whose namespace could not be read: why
  std::string denied;    // and which
  std::map<uint64_t, std::string> found;
};

void ProcsNetns(const std::string& dir, int depth, ProcsWalk* w) {
  std::ifstream procs(dir + "/cgroup.procs");
  std::string pid;
  while (w->read < kMaxProcs && std::getline(procs, pid)) {
    ++w->read;
    std::string p = "/proc/" + pid + "/ns/net";
    struct stat st;
    if (stat(p.c_str(), &st) == 0) {
      w->found.emplace(st.st_ino, p);
    } else if (errno == EACCES || errno == EPERM) {
      w->denied_errno = errno;
      w->denied = p;
    }  // ENOENT: it exited meanwhile
  }
  if (depth >= kMaxCgroupDepth || w->read >= kMaxProcs) return;
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (struct dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    ProcsNetns(dir + "/" + e->d_name, depth + 1, w);
  }
  closedir(d);
}

}  // namespace

Result<Netns> OpenNetns(const std::string& path) {
  Netns ns;
  ns.fd = UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.fd.valid()) {
    int e = errno;
    if (e == ENOENT) return NotFound("network namespace " + path + ": no such file");
    return Status::FromErrno(e, "open network namespace " + path);
  }
  if (!IsNetns(ns.fd.get()))
    return InvalidArgument(path + " is not a network namespace (a /proc/PID/ns/net or a bind "
                                  "mount of one, as under /run/netns)");
  struct stat st;
  if (fstat(ns.fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  ns.ino = st.st_ino;
  ns.where = path;
  return ns;
}

Result<Netns> OwnNetns() { return OpenNetns("/proc/thread-self/ns/net"); }

uint64_t ThreadNetnsIno() { return InoOf("/proc/thread-self/ns/net"); }

std::map<uint64_t, std::string> ListNetns(size_t max) {
  std::map<uint64_t, std::string> out;
  if (DIR* d = opendir("/run/netns")) {
    while (struct dirent* e = readdir(d)) {
      if (out.size() >= max) break;
      if (e->d_name[0] == '.') continue;
      std::string p = std::string("/run/netns/") + e->d_name;
      uint64_t ino = InoOf(p);
      if (ino) out.emplace(ino, p);
    }
    closedir(d);
  }
  if (DIR* d = opendir("/proc")) {
    while (struct dirent* e = readdir(d)) {
      if (out.size() >= max) break;
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      std::string p = std::string("/proc/") + e->d_name + "/ns/net";
      uint64_t ino = InoOf(p);
      if (ino) out.emplace(ino, p);
    }
    closedir(d);
  }
  return out;
}

Result<std::map<uint64_t, std::string>> CgroupNetns(const std::string& cgroup_dir) {
  ProcsWalk w;
  ProcsNetns(cgroup_dir, 0, &w);
  if (w.found.empty() && w.denied_errno)
    return Status(Code::kPermissionDenied,
                  "cannot read the network namespace of cgroup " + cgroup_dir + "'s processes (" +
                      w.denied + ": " + strerror(w.denied_errno) +
                      "): reading another process's needs CAP_SYS_PTRACE (and, in a container, "
                      "the host's PID namespace)");
  return w.found;
}

EnterNetns::EnterNetns(const Netns& target) {
  if (target.ino && target.ino == ThreadNetnsIno()) return;  // already there
  back_ = UniqueFd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!back_.valid()) {
    status_ = Status::FromErrno(errno, "open this thread's network namespace");
    return;
  }
  if (setns(target.fd.get(), CLONE_NEWNET) != 0) {
    status_ = Status::FromErrno(errno, "enter network namespace " + target.where);
    return;
  }
  moved_ = true;
}

EnterNetns::~EnterNetns() {
  if (!moved_) return;
  if (setns(back_.get(), CLONE_NEWNET) != 0) {
    LOG_ERROR("could not return to lossd's network namespace: %s", strerror(errno));
    abort();
  }
}

Result<Netns> FindNetns(uint64_t ino, const std::string& hint) {
  if (!hint.empty()) {
    auto ns = OpenNetns(hint);
    if (ns.ok() && ns->ino == ino) return ns;
  }
  auto all = ListNetns();
  auto it = all.find(ino);
  if (it != all.end()) {
    auto ns = OpenNetns(it->second);
    if (ns.ok() && ns->ino == ino) return ns;
  }
  return NotFound("network namespace " + std::to_string(ino) +
                  " is gone (no process is in it and /run/netns does not name it)");
}

Status InNetns(uint64_t ino, const std::string& hint, const std::function<Status()>& fn) {
  if (ino == 0 || ino == ThreadNetnsIno()) return fn();
  auto ns = FindNetns(ino, hint);
  if (!ns.ok()) return ns.status();
  EnterNetns in(*ns);
  if (!in.ok()) return in.status();
  return fn();
}

uint64_t ThreadNetnsCookie() {
  UniqueFd s(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return 0;
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (getsockopt(s.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) return 0;
  return cookie;
}

}  // namespace lossd
