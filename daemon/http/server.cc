#include "http/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "base/clock.h"
#include "base/log.h"
#include "base/rate_limit.h"
#include "http/connection.h"

namespace lossd {
namespace {

// An HTTP token (RFC 9110 tchar): what a header field name is made of.
bool IsToken(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (c == 0 || !(std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr)) return false;
  return true;
}

constexpr size_t kMaxHeaderBytes = 8192;
constexpr size_t kMaxHeaderFields = 64;
constexpr size_t kKeepAliveMax = 100;  // requests on one connection

// The connection a worker thread is serving: PreRoute marks its head read.
thread_local HttpConnection* t_conn = nullptr;

void Plain(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text + "\n", "text/plain; charset=utf-8");
}

// A refusal after which the connection closes: httplib 0.11.4 keeps a
// connection alive whatever the response's Connection header says, unless
// writing the response fails; so the body goes out through a provider that
// writes all of it and then reports failure, which ends the connection. The
// provider has no length (the close ends the body): httplib applies a request's
// Range to a response of known length, offset and length from the client.
// (A HEAD request gets no body, hence no such end: it stays until the
// keep-alive timeout.)
void PlainAndClose(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_header("Connection", "close");
  auto body = std::make_shared<std::string>(text + "\n");
  res.set_content_provider("text/plain; charset=utf-8",
                           [body](size_t, httplib::DataSink& sink) {
                             sink.write(body->data(), body->size());
                             return false;  // all written: end the connection
                           });
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string OwnHostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return Lower(buf);
}

bool Readable(const std::string& path) {
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

}  // namespace

// httplib's request parsing and answering (process_request: routing, the
// pre-routing handler, content providers), run on a connection lossd accepted.
class HttpServer::Engine final : public httplib::Server {
 public:
  bool Serve(httplib::Stream& strm, bool close, bool& closed) {
    return process_request(strm, close, closed, nullptr);
  }
  // httplib's content providers write only while its listening socket is
  // set (svr_sock_: its "shutting down" test); lossd's, until Stop().
  void SetListening(int fd) { svr_sock_ = fd; }
  void SetStopping() { svr_sock_ = INVALID_SOCKET; }
};

Status CheckHttpTransport(const HttpOptions& o) {
  const std::string where = "--http " + o.addr.ToString();
  if (o.tls_cert.empty() != o.tls_key.empty())
    return InvalidArgument(where + ": give both --http-tls-cert and --http-tls-key");
  bool tls = !o.tls_cert.empty();
  if (!o.tls_client_ca.empty() && !tls)
    return InvalidArgument(where +
                           ": --http-tls-client-ca needs --http-tls-cert and --http-tls-key");
  if (tls && o.plaintext)
    return InvalidArgument(where + ": --http-plaintext contradicts --http-tls-cert");
  if (!tls && !o.addr.loopback && !o.plaintext)
    return FailedPrecondition("refusing plaintext HTTP on " + o.addr.ToString() +
                              ": give --http-tls-cert and --http-tls-key, listen on loopback, or "
                              "force it with --http-plaintext");
  return Status::Ok();
}

bool HostAllowed(const std::string& host, const std::string& own_name,
                 const std::vector<std::string>& allowed) {
  if (host.empty()) return true;
  std::string name;
  if (host[0] == '[') {  // an IPv6 literal, maybe with a port
    size_t end = host.find(']');
    if (end == std::string::npos) return false;
    name = host.substr(1, end - 1);
    in6_addr a6;
    return inet_pton(AF_INET6, name.c_str(), &a6) == 1 &&
           (end + 1 == host.size() || host[end + 1] == ':');
  }
  size_t colon = host.find(':');
  name = Lower(host.substr(0, colon));
  if (colon != std::string::npos && host.find(':', colon + 1) != std::string::npos) return false;
  in_addr a4;
  if (inet_pton(AF_INET, name.c_str(), &a4) == 1) return true;
  if (name == "localhost" || (!own_name.empty() && name == own_name)) return true;
  for (const std::string& a : allowed)
    if (Lower(a) == name) return true;
  return false;
}

HttpStreamSlot::~HttpStreamSlot() {
  server_->streams_.fetch_sub(1);
}

bool HttpStreamSlot::stopping() const {
  return server_->stopping();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpOptions& opts) {
  LOSSD_RETURN_IF_ERROR(CheckHttpTransport(opts));
  if (opts.max_connections == 0 || opts.max_connections > 4096)
    return InvalidArgument("--http-max-connections must lie between 1 and 4096");
  if (opts.max_streams >= opts.max_connections)
    return InvalidArgument("--http-max-streams must be below --http-max-connections (streams " +
                           std::to_string(opts.max_streams) + ", connections " +
                           std::to_string(opts.max_connections) + ")");
  if (opts.max_per_address == 0)
    return InvalidArgument("--http-max-connections-per-address must be at least 1");
  std::signal(SIGPIPE, SIG_IGN);  // a peer gone mid-write is an error return, not a signal
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->opts_ = opts;
  s->opts_.max_per_address = std::min(opts.max_per_address, opts.max_connections);
  s->own_name_ = OwnHostName();
  if (!opts.tls_cert.empty()) {
    for (const std::string* f : {&opts.tls_cert, &opts.tls_key, &opts.tls_client_ca}) {
      if (!f->empty() && !Readable(*f))
        return Status::FromErrno(errno, "--http TLS file " + Shown(*f));
    }
    // httplib's SSLServer sets the context up (certificate chain, key, client
    // CA and verification); lossd runs the connections on it.
    auto ssl = std::make_unique<httplib::SSLServer>(
        opts.tls_cert.c_str(), opts.tls_key.c_str(),
        opts.tls_client_ca.empty() ? nullptr : opts.tls_client_ca.c_str());
    if (!ssl->is_valid())
      return InvalidArgument(
          "--http: cannot use the certificate " + Shown(opts.tls_cert) + " / key " +
          Shown(opts.tls_key) +
          (opts.tls_client_ca.empty() ? "" : " / client CA " + Shown(opts.tls_client_ca)) +
          " (unreadable, not PEM, or the key does not match)");
    s->tls_ = std::move(ssl);
  }
  HttpServer* self = s.get();
  s->engine_ = std::make_unique<Engine>();
  Engine& srv = *s->engine_;
  srv.set_payload_max_length(0);
  srv.set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
    return self->PreRoute(req, res);
  });
  srv.Get(".*", [self](const httplib::Request& req, httplib::Response& res) {
    self->Dispatch(req, res);
  });
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr) { Plain(res, 500, "internal error"); });
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd_ < 0) return Status::FromErrno(errno, "--http: eventfd");
  LOSSD_RETURN_IF_ERROR(s->Bind());
  return s;
}

// SO_REUSEADDR only: SO_REUSEPORT would let a second lossd bind the same port
// and share its connections (scrapes would alternate between two daemons).
Status HttpServer::Bind() {
  const std::string where = "--http: cannot listen on " + opts_.addr.ToString();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(opts_.addr.port);
  int rc = getaddrinfo(opts_.addr.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) return InvalidArgument(where + ": " + gai_strerror(rc));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int err = errno;
  if (fd >= 0) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return Status::FromErrno(err, where);
  listen_fd_ = fd;
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = SockAddrOf(a).port;
  return Status::Ok();
}

HttpServer::~HttpServer() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void HttpServer::Get(const std::string& path, Handler handler) {
  exact_[path].handler = std::move(handler);
}

void HttpServer::GetPrefix(const std::string& prefix, Handler handler) {
  prefix_[prefix].handler = std::move(handler);
}

void HttpServer::GetStream(const std::string& path, StreamHandler handler) {
  exact_[path].stream = std::move(handler);
}

void HttpServer::Start() {
  if (started_ || stopping_) return;
  started_ = true;
  engine_->SetListening(listen_fd_);
  for (size_t i = 0; i < opts_.max_connections; i++) workers_.emplace_back([this] { Work(); });
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (engine_) engine_->SetStopping();
  // Every wait of the accept loop and the connections ends at once: idle
  // keep-alives close, streams end (their slots report stopping()).
  uint64_t one = 1;
  if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof(one)) != sizeof(one))
    LOG_WARN("--http: stop: %s", strerror(errno));
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

// Admits a connection while its address and the listener are under their
// caps; over either it is answered at once. A full file table pauses the
// accepts (the pending connection stays in the backlog) instead of spinning.
void HttpServer::AcceptLoop() {
  LineRateLimiter log_limit(1, 3);
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) {
      LOG_ERROR("--http %s: poll: %s", opts_.addr.ToString().c_str(), strerror(errno));
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        uint64_t held = 0;
        if (log_limit.Admit(MonotonicNs(), &held))
          LOG_WARN("--http %s: accept: %s (pausing 100 ms; %llu such lines held back)",
                   opts_.addr.ToString().c_str(), strerror(err),
                   static_cast<unsigned long long>(held));
        poll(&p[1], 1, 100);
      }
      continue;
    }
    std::string peer = SockAddrOf(a).addr;
    std::string why;
    if (opts_.admit) {
      sockaddr_storage local{};
      socklen_t llen = sizeof(local);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
        why = std::string("getsockname: ") + strerror(errno);
      } else if (opts_.admit(a, local, &why)) {
        why.clear();
      } else if (why.empty()) {
        why = "not allowed to read lossd";
      }
      if (!why.empty()) {
        forbidden_.fetch_add(1);
        Refuse(fd, 403, why);
        continue;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t& n = per_peer_[peer];
      if (open_connections_.load() >= opts_.max_connections) {
        why = "lossd is serving its most HTTP connections (" +
              std::to_string(opts_.max_connections) + ", --http-max-connections); retry";
      } else if (n >= opts_.max_per_address) {
        why = "lossd is serving its most HTTP connections from " + peer + " (" +
              std::to_string(opts_.max_per_address) +
              ", --http-max-connections-per-address); retry";
      } else {
        n++;
        open_connections_.fetch_add(1);
        queue_.push_back({fd, peer});
        cv_.notify_one();
        continue;
      }
      if (n == 0) per_peer_.erase(peer);
    }
    rejected_busy_.fetch_add(1);
    Refuse(fd, 503, why);
  }
}

void HttpServer::Refuse(int fd, int status, const std::string& why) {
  if (!tls_) {
    // What the client sent already is read first: closing with it unread
    // would reset the connection before the client reads the answer.
    char buf[4096];
    for (int i = 0; i < 16 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++) {
    }
    const std::string body = why + "\n";
    const std::string r = std::string(status == 403 ? "HTTP/1.1 403 Forbidden" : "HTTP/1.1 503 Service Unavailable") +
                          "\r\nContent-Type: text/plain; charset=utf-8\r\n"
                          "Content-Length: " + std::to_string(body.size()) +
                          (status == 503 ? "\r\nRetry-After: 1" : "") + "\r\nConnection: close\r\n\r\n" + body;
    if (send(fd, r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) shutdown(fd, SHUT_WR);
  }
  close(fd);
}

void HttpServer::Work() {
  for (;;) {
    Accepted c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_.load() || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every admitted connection closed
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    Serve(c.fd);
    std::lock_guard<std::mutex> lock(mu_);
    if (--per_peer_[c.peer] == 0) per_peer_.erase(c.peer);
    open_connections_.fetch_sub(1);
  }
}

// One connection: the TLS handshake and the first head within the head
// timeout of the accept; then up to kKeepAliveMax requests, each next one
// starting within the keep-alive timeout and its head within the head timeout.
void HttpServer::Serve(int fd) {
  using Clock = HttpConnection::Clock;
  SSL* ssl = nullptr;
  if (tls_) {
    ssl = SSL_new(tls_->ssl_context());
    if (!ssl || SSL_set_fd(ssl, fd) != 1) {
      if (ssl) SSL_free(ssl);
      close(fd);
      return;
    }
  }
  HttpConnection c(fd, ssl, {opts_.read_timeout, opts_.write_timeout}, stop_fd_);
  c.StartHead(Clock::now() + opts_.head_timeout);
  if (c.Handshake()) {
    t_conn = &c;
    for (size_t left = kKeepAliveMax; left > 0 && !stopping_; left--) {
      if (left != kKeepAliveMax) {
        if (!c.WaitRequest(opts_.keep_alive)) break;
        c.StartHead(Clock::now() + opts_.head_timeout);
      }
      bool closed = false;
      if (!engine_->Serve(c, left == 1, closed) || closed) break;
    }
    t_conn = nullptr;
  }
  if (c.head_timed_out()) timed_out_.fetch_add(1);
}

HttpStats HttpServer::stats() const {
  HttpStats st;
  st.requests = requests_.load();
  st.rejected_busy = rejected_busy_.load();
  st.forbidden = forbidden_.load();
  st.timed_out = timed_out_.load();
  st.refused = refused_.load();
  st.connections_open = open_connections_.load();
  st.streams_open = streams_.load();
  return st;
}

httplib::Server::HandlerResponse HttpServer::PreRoute(const httplib::Request& req,
                                                      httplib::Response& res) {
  using R = httplib::Server::HandlerResponse;
  if (t_conn) t_conn->HeadDone();  // the rest is the handler's, bounded by its write timeout
  // DNS rebinding: a page of another site whose name now resolves here.
  const std::string host = req.get_header_value("Host");
  std::string origin = req.get_header_value("Origin");
  size_t scheme = origin.find("://");
  std::string origin_host = scheme == std::string::npos ? "" : origin.substr(scheme + 3);
  origin_host = origin_host.substr(0, origin_host.find('/'));
  bool origin_bad = !origin.empty() && origin != "null" &&
                    (origin_host.empty() || !HostAllowed(origin_host, own_name_, opts_.allowed_hosts));
  if (host.empty() && req.version == "HTTP/1.1") {
    refused_.fetch_add(1);
    PlainAndClose(res, 400, "an HTTP/1.1 request names its host (Host)");
    return R::Handled;
  }
  if (!HostAllowed(host, own_name_, opts_.allowed_hosts) || origin_bad) {
    refused_.fetch_add(1);
    PlainAndClose(res, 421,
                  "lossd answers requests that name it by an IP address, localhost or this "
                  "machine's name, not " +
                      Shown(origin_bad ? "Origin " + origin : "Host " + host) +
                      " (against DNS rebinding; lossd --http-allowed-host NAME admits a name)");
    return R::Handled;
  }
  if (req.method != "GET" && req.method != "HEAD") {
    refused_.fetch_add(1);
    res.set_header("Allow", "GET, HEAD");
    // its body, if any, is never read
    PlainAndClose(res, 405, "lossd's HTTP listener is read-only: GET and HEAD only");
    return R::Handled;
  }
  size_t bytes = req.target.size();
  for (const auto& h : req.headers) bytes += h.first.size() + h.second.size() + 4;
  if (bytes > kMaxHeaderBytes || req.headers.size() > kMaxHeaderFields) {
    refused_.fetch_add(1);
    PlainAndClose(res, 431,
                  "request headers too large (at most " + std::to_string(kMaxHeaderBytes) +
                      " bytes in " + std::to_string(kMaxHeaderFields) + " fields)");
    return R::Handled;
  }
  // RFC 9112: a field name is a token (no space before the colon: "Transfer-Encoding :"
  // would slip past the check below), and a message whose Content-Length fields
  // differ has no reliable length; both are 400.
  // A field value holds no control character but HTAB (RFC 9110 5.5: NUL, CR and LF
  // are refused): httplib hands values out as C strings too, so "0\0..." would read
  // as "0" in one place and as itself in another.
  auto has_control = [](const std::string& v) {
    for (unsigned char c : v)
      if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
    return false;
  };
  for (const auto& h : req.headers) {
    if (!IsToken(h.first)) {
      refused_.fetch_add(1);
      PlainAndClose(res, 400, "malformed header field name '" + Shown(h.first) + "'");
      return R::Handled;
    }
    if (has_control(h.second)) {
      refused_.fetch_add(1);
      PlainAndClose(res, 400, "a control character in header field '" + Shown(h.first) + "'");
      return R::Handled;
    }
  }
  auto lengths = req.headers.equal_range("Content-Length");
  for (auto it = lengths.first; it != lengths.second; ++it) {
    if (it->second != lengths.first->second) {
      refused_.fetch_add(1);
      PlainAndClose(res, 400, "differing Content-Length fields");
      return R::Handled;
    }
  }
  bool body = req.has_header("Transfer-Encoding");
  for (auto it = lengths.first; it != lengths.second; ++it) body = body || it->second != "0";
  if (body) {
    refused_.fetch_add(1);
    PlainAndClose(res, 413, "a GET to lossd carries no body");
    return R::Handled;
  }
  return R::Unhandled;
}

const HttpServer::Route* HttpServer::Find(const std::string& path) const {
  auto it = exact_.find(path);
  if (it != exact_.end()) return &it->second;
  for (const auto& [prefix, route] : prefix_) {
    if (path.compare(0, prefix.size(), prefix) == 0) return &route;
  }
  return nullptr;
}

void HttpServer::Dispatch(const httplib::Request& req, httplib::Response& res) {
  const Route* route = Find(req.path);
  if (!route) {
    refused_.fetch_add(1);
    Plain(res, 404, "not found: " + Shown(req.path));
    return;
  }
  requests_.fetch_add(1);
  if (route->handler) {
    route->handler(req, res);
    return;
  }
  if (streams_.fetch_add(1) >= opts_.max_streams) {
    streams_.fetch_sub(1);
    rejected_busy_.fetch_add(1);
    res.set_header("Retry-After", "1");
    PlainAndClose(res, 503,
                  "lossd is serving its most streams (" + std::to_string(opts_.max_streams) +
                      ", --http-max-streams); retry");
    return;
  }
  auto slot = std::make_shared<HttpStreamSlot>(this);  // releases the count
  route->stream(req, res, std::move(slot));
}

}  // namespace lossd
