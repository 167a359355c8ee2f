#include "host/state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace lossd {

Result<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& dir) {
  std::unique_ptr<StateDirLock> lock(new StateDirLock());
  if (dir.empty()) return lock;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "create --state-dir " + Shown(dir));
  std::string path = dir + "/lock";
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + Shown(path));
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "lock " + Shown(path));
    char buf[32] = {};
    ssize_t n = pread(fd.get(), buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, strnlen(buf, size_t(n))) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return FailedPrecondition("--state-dir " + Shown(dir) + " is in use: " + Shown(path) +
                              " is held by lossd pid " + (pid.empty() ? "(unknown)" : pid) +
                              " (one lossd per state dir: stop it, or give this one its own "
                              "--state-dir)");
  }
  std::string me = std::to_string(getpid()) + "\n";
  if (ftruncate(fd.get(), 0) != 0 || pwrite(fd.get(), me.data(), me.size(), 0) < 0)
    return Status::FromErrno(errno, "write " + Shown(path));
  lock->fd_ = std::move(fd);
  return lock;
}

}  // namespace lossd
