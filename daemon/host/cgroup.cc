#include "host/cgroup.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>

namespace lossd {

std::string Cgroup2Mount() {
  std::ifstream in("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (in >> dev >> dir >> type && std::getline(in, rest))
    if (type == "cgroup2") return dir;
  return "";
}

Result<UniqueFd> OpenCgroup2Root() {
  std::string mnt = Cgroup2Mount();
  if (!mnt.empty()) {
    UniqueFd fd(open(mnt.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "open the cgroup v2 root " + mnt);
    return fd;
  }
  char dir[] = "/tmp/lossd-cgroup2.XXXXXX";
  if (!mkdtemp(dir)) return Status::FromErrno(errno, "create a directory to mount cgroup v2 on");
  if (mount("cgroup2", dir, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    int e = errno;
    rmdir(dir);
    return Status::FromErrno(e, "mount cgroup v2 (no cgroup2 mount is visible)");
  }
  UniqueFd fd(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int e = errno;
  umount2(dir, MNT_DETACH);
  rmdir(dir);
  if (!fd.valid())
    return Status::FromErrno(e, "open the cgroup v2 root mounted on " + std::string(dir));
  return fd;
}

Result<CgroupInfo> ResolveCgroup(const std::string& path) {
  constexpr size_t kMaxPath = 4096;
  auto shown = [&] { return Shown(path); };
  if (path.size() > kMaxPath)
    return InvalidArgument("cgroup path longer than " + std::to_string(kMaxPath) + " bytes: '" +
                           shown() + "'");
  std::string root = Cgroup2Mount();
  if (root.empty()) return FailedPrecondition("no cgroup v2 hierarchy is mounted");
  char real[PATH_MAX];
  if (realpath(root.c_str(), real)) root = real;
  // Absolute under the mount, or relative to it ("t/c", or "/t/c" as
  // /proc/PID/cgroup writes it); another hierarchy's path is a mistake.
  std::string full;
  if (path == root || path.rfind(root + "/", 0) == 0) {
    full = path;
  } else if (path.rfind("/sys/fs/cgroup", 0) == 0) {
    return InvalidArgument("cgroup '" + shown() + "' is not under the cgroup v2 mount " + root);
  } else {
    full = root + (path.empty() || path[0] == '/' ? "" : "/") + path;
  }
  // One canonical name per cgroup: "t/../t", "t//c/" and symlinks resolve
  // to the directory itself, which must still lie in the hierarchy.
  if (!realpath(full.c_str(), real)) return Status::FromErrno(errno, "cgroup '" + shown() + "'");
  full = real;
  if (full != root && full.rfind(root + "/", 0) != 0)
    return InvalidArgument("cgroup '" + shown() + "' resolves to " + Shown(full) +
                           ", outside the cgroup v2 mount " + root);
  struct stat st;
  if (stat(full.c_str(), &st) != 0) return Status::FromErrno(errno, "cgroup " + Shown(full));
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("cgroup " + Shown(full) + " is not a directory");
  CgroupInfo info;
  info.path = full;
  info.mount = root;
  info.id = st.st_ino;  // kernfs node id == cgroup id on 64-bit
  int level = 0;
  for (size_t i = root.size(); i < full.size(); i++)
    if (full[i] == '/') level++;
  if (level > 255) return InvalidArgument("cgroup " + Shown(full) + " is nested too deep");
  info.level = static_cast<uint8_t>(level);
  return info;
}

}  // namespace lossd
