// The connection to lossd: --addr (a Unix socket or host:port), TLS/mTLS,
// the --timeout deadline, and the mapping of gRPC failures to lossctl's
// exit codes with a message that says what to do.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "lossctl.h"
#include "lossd/v1/lossd.grpc.pb.h"

namespace lossctl {

namespace v1 = ::lossd::v1;

struct Endpoint {
  std::string target;  // what gRPC dials: "unix:/run/lossd/lossd.sock", "host:port"
  bool unix_socket = false;
  std::string socket_path;  // for unix_socket
};

// "unix:PATH", "unix:///PATH", "/PATH" (a socket), "host:port", "[v6]:port",
// or any gRPC target with a scheme ("dns:///host:port", "ipv4:...").
bool ParseEndpoint(const std::string& addr, Endpoint* out, std::string* error);

// gRPC status code -> lossctl exit code (see lossctl.h).
int ExitCodeFor(grpc::StatusCode code);

class Connection {
 public:
  // Checks the address, TLS files and timeout, and creates the channel
  // (connecting happens on first use). Returns kExitOk, or kExitUsage having
  // said what is wrong.
  static int Open(const Globals& globals, std::unique_ptr<Connection>* out);

  v1::Injector::Stub& injector() { return *injector_; }
  v1::Observer::Stub& observer() { return *observer_; }
  v1::System::Stub& system() { return *system_; }

  // The --timeout deadline, for unary calls.
  void SetDeadline(grpc::ClientContext* ctx) const;
  // Waits at most --timeout for the channel to connect (or to fail, which
  // the next call then reports). Streams call this: they have no deadline.
  // Returns false when it neither connected nor failed in time.
  bool WaitConnected();
  // Prints why `what` failed (the daemon's message, or how to reach the
  // daemon) and returns the exit code.
  int Report(const grpc::Status& status, const std::string& what);

  const Endpoint& endpoint() const { return endpoint_; }
  // The daemon shares this host's CLOCK_MONOTONIC (a Unix socket).
  bool same_host() const { return endpoint_.unix_socket; }
  std::chrono::nanoseconds timeout() const { return timeout_; }

 private:
  Connection() = default;
  int ReportUnreachable(const std::string& what, const std::string& detail);

  Endpoint endpoint_;
  bool tls_ = false;
  std::chrono::nanoseconds timeout_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Injector::Stub> injector_;
  std::unique_ptr<v1::Observer::Stub> observer_;
  std::unique_ptr<v1::System::Stub> system_;
};

// One unary call on `conn` with the --timeout deadline: `call(&context)`
// returns its grpc::Status; a failure is reported as `what`. A call that
// needs a part of lossd still loading (moments after it starts) waits for it
// on lossd's side, within that deadline. Returns kExitOk or the exit code.
template <typename Call>
int Unary(Connection* conn, const std::string& what, Call&& call) {
  grpc::ClientContext ctx;
  conn->SetDeadline(&ctx);
  grpc::Status st = call(&ctx);
  if (st.ok()) return kExitOk;
  return conn->Report(st, what);
}

// The same on a connection of its own: `call(connection, &context)`.
template <typename Call>
int CallOnce(const Globals& g, const std::string& what, Call&& call) {
  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  return Unary(conn.get(), what, [&](grpc::ClientContext* ctx) { return call(*conn, ctx); });
}

}  // namespace lossctl
