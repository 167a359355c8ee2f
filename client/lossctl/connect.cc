#include "connect.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "rules/proto.h"
#include "rules/rule.h"

namespace lossctl {
namespace {

bool ReadFile(const std::string& flag, const std::string& path, std::string* out,
              std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = flag + ": cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  if (out->empty()) {
    *error = flag + ": '" + path + "' is empty";
    return false;
  }
  return true;
}

std::string Seconds(std::chrono::nanoseconds d) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%gs", d.count() / 1e9);
  return buf;
}

}  // namespace

bool ParseEndpoint(const std::string& addr, Endpoint* out, std::string* error) {
  Endpoint e;
  if (addr.empty()) {
    *error = "--addr: empty address: expected unix:PATH or host:port";
    return false;
  }
  if (addr.compare(0, 5, "unix:") == 0 || addr[0] == '/') {
    std::string path = addr[0] == '/' ? addr : addr.substr(5);
    if (path.compare(0, 2, "//") == 0) path = path.substr(2);  // unix:///abs
    if (path.empty()) {
      *error = "--addr: '" + addr + "' names no socket: expected unix:/path/to/lossd.sock";
      return false;
    }
    e.unix_socket = true;
    e.socket_path = path;
    e.target = "unix:" + path;
  } else if (addr.find("://") != std::string::npos || addr.compare(0, 5, "ipv4:") == 0 ||
             addr.compare(0, 5, "ipv6:") == 0 || addr.compare(0, 14, "unix-abstract:") == 0) {
    e.target = addr;  // a gRPC target with its own scheme
  } else {
    auto colon = addr.rfind(':');
    bool bracketed = addr[0] == '[';
    if (colon == std::string::npos || colon + 1 == addr.size() ||
        (bracketed && addr[colon - 1] != ']') || (!bracketed && addr.find(':') != colon)) {
      *error =
          "--addr: invalid address '" + addr + "': expected unix:PATH, host:port or [IPv6]:port";
      return false;
    }
    for (size_t i = colon + 1; i < addr.size(); i++) {
      if (!std::isdigit(static_cast<unsigned char>(addr[i]))) {
        *error = "--addr: invalid port in '" + addr + "': expected a number";
        return false;
      }
    }
    e.target = addr;
  }
  *out = std::move(e);
  return true;
}

int ExitCodeFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return kExitOk;
    case grpc::StatusCode::UNAVAILABLE: return kExitUnavailable;
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION: return kExitInvalid;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return kExitExhausted;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return kExitDenied;
    default: return kExitError;
  }
}

int Connection::Open(const Globals& g, std::unique_ptr<Connection>* out) {
  std::unique_ptr<Connection> c(new Connection());
  std::string error;
  if (!ParseEndpoint(g.addr, &c->endpoint_, &error)) return UsageError(error);

  auto timeout = lossd::ParseDuration(g.timeout);
  if (!timeout.ok()) return UsageError("--timeout: " + timeout.status().message());
  if (timeout->count() == 0) return UsageError("--timeout: must be above 0, e.g. 10s");
  c->timeout_ = *timeout;

  c->tls_ = !g.tls_ca.empty() || !g.tls_cert.empty() || !g.tls_key.empty();
  if (g.tls_cert.empty() != g.tls_key.empty())
    return UsageError("--tls-cert and --tls-key go together (mTLS): give both or neither");
  if (!g.tls_server_name.empty() && !c->tls_)
    return UsageError(
        "--tls-server-name needs TLS: give --tls-ca (and --tls-cert/--tls-key for mTLS)");
  if (c->tls_ && c->endpoint_.unix_socket)
    return UsageError(
        "--tls-ca/--tls-cert/--tls-key apply to a TCP endpoint (--addr host:port), "
        "not to the Unix socket " +
        c->endpoint_.socket_path);

  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (c->tls_) {
    grpc::SslCredentialsOptions ssl;
    if (!g.tls_ca.empty() && !ReadFile("--tls-ca", g.tls_ca, &ssl.pem_root_certs, &error))
      return UsageError(error);
    if (!g.tls_cert.empty() && !ReadFile("--tls-cert", g.tls_cert, &ssl.pem_cert_chain, &error))
      return UsageError(error);
    if (!g.tls_key.empty() && !ReadFile("--tls-key", g.tls_key, &ssl.pem_private_key, &error))
      return UsageError(error);
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // ListFlows on a busy host
  if (!g.tls_server_name.empty()) args.SetSslTargetNameOverride(g.tls_server_name);
  c->channel_ = grpc::CreateCustomChannel(c->endpoint_.target, creds, args);
  c->injector_ = v1::Injector::NewStub(c->channel_);
  c->observer_ = v1::Observer::NewStub(c->channel_);
  c->system_ = v1::System::NewStub(c->channel_);
  *out = std::move(c);
  return kExitOk;
}

void Connection::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout_));
}

bool Connection::WaitConnected() {
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout_);
  for (;;) {
    grpc_connectivity_state s = channel_->GetState(true);
    if (s == GRPC_CHANNEL_READY || s == GRPC_CHANNEL_TRANSIENT_FAILURE ||
        s == GRPC_CHANNEL_SHUTDOWN)
      return true;
    if (!channel_->WaitForStateChange(s, deadline)) return false;
  }
}

int Connection::ReportUnreachable(const std::string& what, const std::string& detail) {
  std::string target = endpoint_.unix_socket ? "unix:" + endpoint_.socket_path : endpoint_.target;
  fprintf(stderr, "lossctl: %s: lossd unreachable at %s%s%s\n", what.c_str(), target.c_str(),
          detail.empty() ? "" : ": ", detail.c_str());
  if (endpoint_.unix_socket) {
    const std::string& path = endpoint_.socket_path;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      fprintf(stderr, "lossctl: is lossd running? socket %s: %s (--addr names another)\n",
              path.c_str(), std::strerror(errno));
    } else if (!S_ISSOCK(st.st_mode)) {
      fprintf(stderr, "lossctl: %s is not a socket (--addr names lossd's socket)\n", path.c_str());
    } else if (access(path.c_str(), R_OK | W_OK) != 0 && errno == EACCES) {
      fprintf(stderr,
              "lossctl: no permission to use the socket %s: run as root or as a member "
              "of the socket's group\n",
              path.c_str());
      return kExitDenied;
    } else {
      fprintf(stderr,
              "lossctl: is lossd running? socket %s exists but nobody answers "
              "(a stale socket of a stopped lossd?)\n",
              path.c_str());
    }
  } else {
    fprintf(stderr, "lossctl: is lossd running and listening on %s?%s\n", endpoint_.target.c_str(),
            tls_ ? " With TLS, check --tls-ca, --tls-cert/--tls-key and the server's name"
                   " (--tls-server-name)."
                 : " If it requires TLS, give --tls-ca (and --tls-cert/--tls-key for mTLS).");
  }
  return kExitUnavailable;
}

int Connection::Report(const grpc::Status& st, const std::string& what) {
  if (st.ok()) return kExitOk;
  grpc::StatusCode code = st.error_code();
  const std::string& msg = st.error_message();
  lossd::v1::ErrorInfo info;
  if (lossd::ErrorInfoOf(st, &info) && info.reason() == "PART_LOADING") {
    auto part = info.metadata().find("part");
    return Fail(kExitUnavailable,
                what + ": lossd is still starting: its " +
                    (part != info.metadata().end() ? part->second : std::string("parts")) +
                    " is loading (" + msg + "); a longer --timeout waits for it");
  }
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
      // Connected: lossd itself said so (e.g. shutting down), or a stream broke.
      if (channel_->GetState(false) == GRPC_CHANNEL_READY)
        return Fail(kExitUnavailable, what + ": lossd unavailable: " + msg);
      return ReportUnreachable(what, msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      if (channel_->GetState(false) != GRPC_CHANNEL_READY)
        return ReportUnreachable(what,
                                 "no connection within " + Seconds(timeout_) + " (--timeout)");
      return Fail(kExitError,
                  what + ": lossd did not answer within " + Seconds(timeout_) + " (--timeout)");
    case grpc::StatusCode::UNIMPLEMENTED:
      // An HTTP server that is not gRPC (or a proxy) answers "404".
      if (msg.find("Received http2 header with status") != std::string::npos)
        return ReportUnreachable(what, "not a gRPC server (" + msg + ")");
      return Fail(kExitError, what + ": this lossd does not implement it (an older version?)" +
                                  (msg.empty() ? "" : ": " + msg));
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::PERMISSION_DENIED:
      // The daemon's message says which field and why.
      return Fail(ExitCodeFor(code), what + ": " + (msg.empty() ? lossd::GrpcCodeName(code) : msg));
    default:
      return Fail(ExitCodeFor(code),
                  what + ": " + lossd::GrpcCodeName(code) + (msg.empty() ? "" : ": " + msg));
  }
}

}  // namespace lossctl
