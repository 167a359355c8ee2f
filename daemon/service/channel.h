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

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/status.h"

namespace grpc {
class Server;
class ServerContextBase;
}  // namespace grpc

namespace lossd {

// --socket-group: a group name or a numeric gid.
Result<gid_t> ParseGroup(const std::string& name_or_gid);

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
                                                          std::optional<gid_t> group);
  ~UnixSocketListener();  // Stop(), then the path is removed if it is still the socket bound here
  UnixSocketListener(const UnixSocketListener&) = delete;
  UnixSocketListener& operator=(const UnixSocketListener&) = delete;

  // Listens, and accepts on a thread until Stop(), handing every connection
  // to server.
  Status Start(grpc::Server* server);
  // Stops accepting (before the server shuts down); idempotent.
  void Stop();

 private:
  explicit UnixSocketListener(std::string path) : path_(std::move(path)) {}
  void Loop(grpc::Server* server);

  std::string path_;  // empty: nothing of ours to remove
  UniqueFd lock_fd_;  // the flock on <path>.lock
  dev_t dev_ = 0;     // the socket file bound here (removed at exit only if still it)
  ino_t ino_ = 0;
  UniqueFd listen_fd_, stop_fd_;  // stop_fd_: an eventfd the loop polls
  std::thread thread_;
};

// "uid=0 gid=0 pid=1234 (unix socket)", "x509 subject \"CN=...\" (ipv4:10.0.0.1:4242)",
// "ipv4:127.0.0.1:4242 (no client certificate)": who made the call.
std::string DescribePeer(const grpc::ServerContextBase& ctx);

}  // namespace lossd
