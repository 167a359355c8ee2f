// The control channel's edges: the Unix socket, accepted by lossd's own loop
// so that every connection's SO_PEERCRED is known, and who the peer of a call
// is (uid/pid over the Unix socket, the client certificate's subject over
// TLS) for the log line of every change to rules.
//
// gRPC 1.51 does not expose a Unix socket peer's credentials, so the socket is
// bound, given its mode (0660) and group before listen(), accepted here, and
// each connection is handed to the running server with
// grpc::AddInsecureChannelFromFd; gRPC names such a peer "fd:N", and N is the
// connection's own socket for as long as its calls run.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "common/stream_budget.h"

namespace grpc {
class Server;
class ServerContextBase;
}  // namespace grpc

namespace lossd {

// A group name or a numeric gid (`flag`'s value: errors name it).
Result<gid_t> ParseGroup(const std::string& name_or_gid, const char* flag = "--socket-group");

// How many connections the Unix socket keeps open: per peer uid
// (SO_PEERCRED), and in all, with a reserve for root past the total so that
// no local user can keep root out. A connection over a limit is closed as
// soon as it is accepted (the client sees the connection end: UNAVAILABLE),
// never left to queue in the backlog.
struct SocketLimits {
  size_t max_connections = 512;  // every peer's together (root may use the reserve past it)
  size_t max_per_uid = 64;       // one uid's, root's included
  size_t root_reserve = 32;
};

// The connections handed to gRPC that are still open. gRPC closes them
// without telling, so each is known by its fd and its socket's inode: when
// that fd is closed, or names another socket (sockfs inodes are never
// reused while the host runs), the connection is gone.
class ConnectionTable {
 public:
  using Alive = std::function<bool(int fd, ino_t ino)>;
  explicit ConnectionTable(SocketLimits limits, Alive alive);
  // Forgets the connections that are gone, then admits one of `uid` (true)
  // or says in *why which limit it meets (false).
  bool Admit(uid_t uid, int fd, ino_t ino, std::string* why);
  size_t open() const { return conns_.size(); }

 private:
  struct Conn {
    int fd;
    ino_t ino;
    uid_t uid;
  };
  void Prune();
  SocketLimits limits_;
  Alive alive_;
  std::vector<Conn> conns_;
};

// fstat(fd) names socket inode `ino`: the connection accepted as (fd, ino) is open.
bool SocketStillOpen(int fd, ino_t ino);

class UnixSocketListener {
 public:
  // Binds path (mode 0660, group `group` if given; the directory is created
  // 0750, and given that group when lossd creates it); refuses a path another
  // live lossd serves on, removes one a dead one left. Until Start() a
  // connect is refused, as if nobody served: so the path is claimed first by
  // an flock on "<path>.lock", held while this listener lives, and only its
  // holder may remove a file at the path (a second lossd starting while the
  // first is still loading is refused, ALREADY_EXISTS, and removes nothing).
  static Result<std::unique_ptr<UnixSocketListener>> Bind(const std::string& path,
                                                          std::optional<gid_t> group,
                                                          SocketLimits limits = {});
  ~UnixSocketListener();  // Stop(), then the path is removed if it is still the socket bound here
  UnixSocketListener(const UnixSocketListener&) = delete;
  UnixSocketListener& operator=(const UnixSocketListener&) = delete;

  // Listens, and accepts on a thread until Stop(), handing every connection
  // to server.
  Status Start(grpc::Server* server);
  // Stops accepting (before the server shuts down); idempotent.
  void Stop();

 private:
  explicit UnixSocketListener(SocketLimits limits) : conns_(limits, SocketStillOpen) {}
  void Loop(grpc::Server* server);
  bool Admitted(int fd);  // within the limits (else closed, counted, logged)

  std::string path_;  // empty: nothing of ours to remove
  UniqueFd lock_fd_;  // the flock on <path>.lock
  dev_t dev_ = 0;     // the socket file bound here (removed at exit only if still it)
  ino_t ino_ = 0;
  UniqueFd listen_fd_, stop_fd_;  // stop_fd_: an eventfd the loop polls
  ConnectionTable conns_;         // the accept loop's
  uint64_t refused_ = 0;          // connections closed at a limit (the accept loop's)
  uint64_t last_refusal_log_ns_ = 0;
  std::thread thread_;
};

// Who made a call: `text` as DescribePeer's; over the Unix socket its
// SO_PEERCRED (has_cred), over TLS the client certificate's subject.
struct PeerInfo {
  std::string text;
  std::string address;  // gRPC's peer ("fd:12", "ipv4:127.0.0.1:4242", ...)
  std::string transport;  // "unix", "tcp", "inproc"
  bool has_cred = false;
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  std::string x509_subject;
};
PeerInfo PeerOf(const grpc::ServerContextBase& ctx);

// "uid=0 gid=0 pid=1234 (unix socket)", "x509 subject \"CN=...\" (ipv4:10.0.0.1:4242)",
// "ipv4:127.0.0.1:4242 (no client certificate)": who made the call.
std::string DescribePeer(const grpc::ServerContextBase& ctx);
// The same caller as the stream budget counts it (StreamPeer): a uid on the
// Unix socket (root privileged), an x509 subject or host over TCP, the live
// page's in-process channel as "the HTTP listener".
StreamPeer StreamPeerOf(const grpc::ServerContextBase& ctx);

// Every change to rules (and scenarios) is logged with who asked; a refused
// one is logged by the refusal interceptor (service/refusals.h), with its
// code and reason. Nothing when `st` is an error.
void LogChange(const grpc::ServerContextBase& ctx, const char* rpc, const Status& st,
               const std::string& what);

}  // namespace lossd
