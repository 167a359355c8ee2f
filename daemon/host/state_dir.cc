#include "host/state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "base/log.h"

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

namespace {
constexpr size_t kMaxStateFileBytes = 1 << 20;
}  // namespace

Result<std::vector<std::string>> ReadStateLines(const std::string& file, const std::string& what) {
  std::vector<std::string> lines;
  if (file.empty()) return lines;
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid() && errno == ENOENT) return lines;
  if (!fd.valid()) return Status::FromErrno(errno, "read the " + what + " " + file);
  std::string data(kMaxStateFileBytes + 1, '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = read(fd.get(), &data[got], data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "read the " + what + " " + file);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxStateFileBytes) {
    LOG_WARN("%s is over %zu bytes: only its first %zu are read", file.c_str(), kMaxStateFileBytes,
             kMaxStateFileBytes);
    got = kMaxStateFileBytes;
  }
  data.resize(got);
  std::istringstream in(data);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

Status WriteStateLines(const std::string& file, const std::vector<std::string>& lines,
                       const std::string& what) {
  if (file.empty()) return Status::Ok();
  if (lines.empty()) {
    if (unlink(file.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno(errno, "remove " + file);
    return Status::Ok();
  }
  std::string data;
  for (const auto& l : lines) data += l + "\n";
  std::string tmp = file + ".tmp";
  auto fail = [&](const char* op) {
    Status st = Status::FromErrno(
        errno, std::string(op) + " " + tmp + " (the " + what + " cannot be stored)");
    unlink(tmp.c_str());
    return st;
  };
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return fail("create");
    for (size_t off = 0; off < data.size();) {
      ssize_t n = write(fd.get(), data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = ENOSPC;
        return fail("write");
      }
      off += static_cast<size_t>(n);
    }
    if (fsync(fd.get()) != 0) return fail("fsync");
    if (close(fd.Release()) != 0) return fail("close");
  }
  if (rename(tmp.c_str(), file.c_str()) != 0) return fail("rename");
  std::string dir =
      file.substr(0, file.find_last_of('/') == std::string::npos ? 0 : file.find_last_of('/'));
  UniqueFd d(open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.valid()) fsync(d.get());  // the rename itself is durable; a failure here loses nothing
  return Status::Ok();
}

}  // namespace lossd
