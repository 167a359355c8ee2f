#include "service/channel.h"

#include <fcntl.h>
#include <grp.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"

namespace lossd {
namespace {

// A live daemon answers on the socket; a dead one left a file behind.
bool SocketInUse(const struct sockaddr_un& addr) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  return connect(fd.get(), reinterpret_cast<const struct sockaddr*>(&addr), sizeof(addr)) == 0;
}

}  // namespace

Result<gid_t> ParseGroup(const std::string& text, const char* flag) {
  const std::string f(flag);
  if (text.empty()) return InvalidArgument(f + ": empty (want a group name or a gid)");
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    if (text.size() > 10)
      return InvalidArgument(f + ": gid '" + Shown(text) + "' too large");
    unsigned long long gid = std::strtoull(text.c_str(), nullptr, 10);
    if (gid >= static_cast<unsigned long long>(static_cast<gid_t>(-1)))
      return InvalidArgument(f + ": gid '" + Shown(text) + "' too large");
    return static_cast<gid_t>(gid);
  }
  struct group grp;
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  int err;
  while ((err = getgrnam_r(text.c_str(), &grp, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 22))
    buf.resize(buf.size() * 2);
  if (err != 0) return Status::FromErrno(err, f + ": look up '" + Shown(text) + "'");
  if (found == nullptr)
    return InvalidArgument(f + ": no group named '" + Shown(text) + "'");
  return grp.gr_gid;
}

ConnectionTable::ConnectionTable(SocketLimits limits, Alive alive)
    : limits_(limits), alive_(std::move(alive)) {}

void ConnectionTable::Prune() {
  size_t kept = 0;
  for (const Conn& c : conns_)
    if (alive_(c.fd, c.ino)) conns_[kept++] = c;
  conns_.resize(kept);
}

bool ConnectionTable::Admit(uid_t uid, int fd, ino_t ino, std::string* why) {
  Prune();
  size_t mine = 0;
  for (const Conn& c : conns_) mine += c.uid == uid;
  size_t cap = limits_.max_connections + (uid == 0 ? limits_.root_reserve : 0);
  if (mine >= limits_.max_per_uid) {
    *why = std::to_string(mine) + " connections of uid " + std::to_string(uid) +
           " are open (at most " + std::to_string(limits_.max_per_uid) + " per user)";
    return false;
  }
  if (conns_.size() >= cap) {
    *why = std::to_string(conns_.size()) + " connections are open (at most " +
           std::to_string(limits_.max_connections) + ", and " +
           std::to_string(limits_.root_reserve) + " more for root)";
    return false;
  }
  conns_.push_back({fd, ino, uid});
  return true;
}

bool SocketStillOpen(int fd, ino_t ino) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino;
}

Result<std::unique_ptr<UnixSocketListener>> UnixSocketListener::Bind(const std::string& path,
                                                                     std::optional<gid_t> group,
                                                                     SocketLimits limits) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return InvalidArgument("--socket: '" + Shown(path) + "' must have 1.." +
                           std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  std::memcpy(addr.sun_path, path.data(), path.size());

  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  if (!dir.empty()) {
    if (mkdir(dir.c_str(), 0750) == 0) {
      if (group && chown(dir.c_str(), static_cast<uid_t>(-1), *group) != 0)
        return Status::FromErrno(errno, "--socket-group: chown " + Shown(dir));
    } else if (errno != EEXIST) {
      return Status::FromErrno(errno, "--socket: mkdir " + Shown(dir));
    } else if (group) {
      struct stat st;
      if (stat(dir.c_str(), &st) == 0 && st.st_gid != *group && !(st.st_mode & S_IXOTH))
        LOG_WARN(
            "--socket-group %u: the group cannot reach the socket: its directory %s is not "
            "searchable by that group",
            static_cast<unsigned>(*group), Shown(dir).c_str());
    }
  }
  std::unique_ptr<UnixSocketListener> l(new UnixSocketListener(limits));
  // Claim the path before looking at it: a lossd that bound it but does not
  // listen yet refuses connections just as a dead one's file does.
  std::string lock_path = path + ".lock";
  l->lock_fd_ = UniqueFd(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!l->lock_fd_.valid()) return Status::FromErrno(errno, "--socket: open " + Shown(lock_path));
  if (flock(l->lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status(Code::kAlreadyExists, "another lossd is serving on " + Shown(path) +
                                              " (it holds " + Shown(lock_path) + ")");
    return Status::FromErrno(errno, "--socket: lock " + Shown(lock_path));
  }
  if (SocketInUse(addr))  // a lossd from before the lock file (it never takes it)
    return Status(Code::kAlreadyExists, "another lossd is serving on " + Shown(path));
  struct stat old;
  if (lstat(path.c_str(), &old) == 0) {  // left by a dead daemon: ours now (we hold the lock)
    if (!S_ISSOCK(old.st_mode))
      return Status(Code::kAlreadyExists,
                    "--socket: " + Shown(path) + " exists and is not a socket: not removed");
    if (unlink(path.c_str()) != 0)
      return Status::FromErrno(errno, "--socket: remove the stale " + Shown(path));
  }

  l->listen_fd_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!l->listen_fd_.valid()) return Status::FromErrno(errno, "--socket: socket(AF_UNIX)");
  if (bind(l->listen_fd_.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0)
    return Status::FromErrno(errno, "--socket: bind " + Shown(path));
  struct stat mine;
  if (lstat(path.c_str(), &mine) != 0)
    return Status::FromErrno(errno, "--socket: stat " + Shown(path));
  l->path_ = path;  // bound here: removed at exit while it is still this file
  l->dev_ = mine.st_dev;
  l->ino_ = mine.st_ino;
  // Mode and group before listen() (in Start): until then a connect is refused.
  if (chmod(path.c_str(), 0660) != 0)
    return Status::FromErrno(errno, "--socket: chmod " + Shown(path));
  if (group && chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
    return Status::FromErrno(errno, "--socket-group: chown " + Shown(path));
  l->stop_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!l->stop_fd_.valid()) return Status::FromErrno(errno, "--socket: eventfd");
  return l;
}

UnixSocketListener::~UnixSocketListener() {
  Stop();
  struct stat st;
  if (!path_.empty() && lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    unlink(path_.c_str());  // still the socket bound here (the lock is released after)
}

Status UnixSocketListener::Start(grpc::Server* server) {
  if (listen(listen_fd_.get(), SOMAXCONN) != 0)
    return Status::FromErrno(errno, "--socket: listen on " + Shown(path_));
  thread_ = std::thread([this, server] { Loop(server); });
  return Status::Ok();
}

void UnixSocketListener::Stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  if (write(stop_fd_.get(), &one, sizeof(one)) != sizeof(one))
    LOG_WARN("stop the Unix socket's accept loop: %s", std::strerror(errno));
  thread_.join();
}

void UnixSocketListener::Loop(grpc::Server* server) {
  for (;;) {
    struct pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("the Unix socket's accept loop: poll: %s", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!fds[0].revents) continue;
    int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE/ENFILE/ENOBUFS: the connection waits in the backlog; no busy loop.
      LOG_WARN("accept on %s: %s", Shown(path_).c_str(), std::strerror(errno));
      struct pollfd stop = {stop_fd_.get(), POLLIN, 0};
      if (poll(&stop, 1, 100) > 0) return;
      continue;
    }
    if (!Admitted(fd)) continue;
    grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns fd from here
  }
}

bool UnixSocketListener::Admitted(int fd) {
  struct ucred cred = {};
  socklen_t len = sizeof(cred);
  struct stat st;
  std::string why;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || fstat(fd, &st) != 0) {
    why = std::string("its credentials are unknown: ") + std::strerror(errno);
  } else if (conns_.Admit(cred.uid, fd, st.st_ino, &why)) {
    return true;
  }
  close(fd);
  refused_++;
  uint64_t now = MonotonicNs();
  if (now - last_refusal_log_ns_ >= 1'000'000'000) {  // at most one line a second
    last_refusal_log_ns_ = now;
    LOG_WARN("%s: refused a connection of uid %u pid %d: %s (%llu refused so far)",
             Shown(path_).c_str(), static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid),
             why.c_str(), static_cast<unsigned long long>(refused_));
  }
  return false;
}

PeerInfo PeerOf(const grpc::ServerContextBase& ctx) {
  PeerInfo p;
  p.address = ctx.peer();
  if (p.address.compare(0, 3, "fd:") == 0) {
    p.transport = "unix";
    int fd = std::atoi(p.address.c_str() + 3);
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (fd > 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      p.has_cred = true;
      p.uid = cred.uid;
      p.gid = cred.gid;
      p.pid = cred.pid;
      p.text = "uid=" + std::to_string(cred.uid) + " gid=" + std::to_string(cred.gid) +
               " pid=" + std::to_string(cred.pid) + " (unix socket)";
    } else {
      p.text = Shown(p.address) + " (unix socket, credentials unknown: " + std::strerror(errno) + ")";
    }
    return p;
  }
  p.transport = p.address.compare(0, 7, "inproc:") == 0 || p.address == "inproc" ? "inproc" : "tcp";
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth && auth->IsPeerAuthenticated()) {
    auto subject = auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
    if (!subject.empty()) {
      p.x509_subject = std::string(subject[0].data(), subject[0].size());
      p.text = "x509 subject \"" + Shown(p.x509_subject) + "\" (" + Shown(p.address) + ")";
      return p;
    }
  }
  p.text = Shown(p.address) + (p.transport == "inproc" ? " (in-process)" : " (no client certificate)");
  return p;
}

std::string DescribePeer(const grpc::ServerContextBase& ctx) {
  return PeerOf(ctx).text;
}

StreamPeer StreamPeerOf(const grpc::ServerContextBase& ctx) {
  PeerInfo info = PeerOf(ctx);
  StreamPeer p;
  if (info.has_cred) {
    p.key = "uid:" + std::to_string(info.uid);
    p.shown = "uid " + std::to_string(info.uid);
    p.privileged = info.uid == 0;
  } else if (info.transport == "unix") {
    p.key = p.shown = Shown(info.address);  // credentials unknown: a peer of its own
  } else if (!info.x509_subject.empty()) {
    p.key = "x509:" + info.x509_subject;
    p.shown = "x509 subject \"" + Shown(info.x509_subject) + "\"";
  } else if (info.transport == "tcp" && (info.address.compare(0, 5, "ipv4:") == 0 ||
                                         info.address.compare(0, 5, "ipv6:") == 0)) {
    // "ipv4:10.0.0.7:51234", "ipv6:[::1]:51234": the host, whatever port.
    std::string host = info.address.substr(5, info.address.rfind(':') - 5);
    p.key = "ip:" + host;
    p.shown = Shown(host);
  } else {
    // The live page's in-process channel: every HTTP client's streams together.
    p.key = "http";
    p.shown = "the HTTP listener";
  }
  return p;
}

void LogChange(const grpc::ServerContextBase& ctx, const char* rpc, const Status& st,
               const std::string& what) {
  if (!st.ok() || !LogEnabled(LogLevel::kInfo)) return;
  PeerInfo peer = PeerOf(ctx);
  Json fields = {{"event", "change"}, {"method", rpc}, {"peer", peer.text}, {"what", what}};
  if (peer.has_cred) {
    fields["uid"] = peer.uid;
    fields["pid"] = peer.pid;
  }
  LogFields(LogLevel::kInfo, std::string(rpc) + " by " + peer.text + ": " + what, fields);
}

}  // namespace lossd
