#include "common/cgroup.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
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
  if (!fd.valid()) return Status::FromErrno(e, "open the cgroup v2 root mounted on " + std::string(dir));
  return fd;
}

}  // namespace lossd
