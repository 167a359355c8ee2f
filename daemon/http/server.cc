#include "http/server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "base/log.h"

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
constexpr size_t kRejectThreads = 2;

// Set on the reject pool's threads: every request read there is answered 503.
thread_local bool t_reject = false;

void Plain(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text + "\n", "text/plain; charset=utf-8");
}

// A refusal after which the connection closes: httplib 0.11.4 keeps a
// connection alive whatever the response's Connection header says, unless
// writing the response fails; so the body goes out through a provider that
// writes all of it and then reports failure, which ends the connection.
// (A HEAD request gets no body, hence no such end: it stays until the
// keep-alive timeout.)
void PlainAndClose(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_header("Connection", "close");
  auto body = std::make_shared<std::string>(text + "\n");
  res.set_content_provider(body->size(), "text/plain; charset=utf-8",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
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

// httplib hands every accepted connection to enqueue() as an opaque task
// that reads, answers and closes it; the task must run (it owns the socket).
// Up to `workers` connections run at once, each on a worker of its own (none
// waits behind another). Over that, the task runs on a small reject pool
// whose thread-local flag makes PreRoute answer 503 + Connection: close: one
// short request read (--http read timeout) per refused connection, never an
// idle keep-alive held by the daemon.
class HttpServer::CappedQueue final : public httplib::TaskQueue {
 public:
  CappedQueue(size_t workers, std::atomic<uint64_t>* open, std::atomic<uint64_t>* rejected)
      : workers_(workers), open_(open), rejected_(rejected) {
    for (size_t i = 0; i < workers; i++) threads_.emplace_back([this] { Work(&work_, false); });
    for (size_t i = 0; i < kRejectThreads; i++)
      threads_.emplace_back([this] { Work(&reject_, true); });
  }
  ~CappedQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_->load() < workers_) {
      open_->fetch_add(1);  // released when the task returns
      work_.push_back(std::move(fn));
    } else {
      rejected_->fetch_add(1);
      reject_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void Work(std::deque<std::function<void()>>* q, bool reject) {
    t_reject = reject;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return shutdown_ || !q->empty(); });
        if (q->empty()) return;  // shut down, and nothing left to close
        fn = std::move(q->front());
        q->pop_front();
      }
      fn();
      if (!reject) open_->fetch_sub(1);
    }
  }

  const size_t workers_;
  std::atomic<uint64_t>* open_;
  std::atomic<uint64_t>* rejected_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_, reject_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
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
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->opts_ = opts;
  s->own_name_ = OwnHostName();
  if (!opts.tls_cert.empty()) {
    for (const std::string* f : {&opts.tls_cert, &opts.tls_key, &opts.tls_client_ca}) {
      if (!f->empty() && !Readable(*f))
        return Status::FromErrno(errno, "--http TLS file " + Shown(*f));
    }
    auto ssl = std::make_unique<httplib::SSLServer>(
        opts.tls_cert.c_str(), opts.tls_key.c_str(),
        opts.tls_client_ca.empty() ? nullptr : opts.tls_client_ca.c_str());
    if (!ssl->is_valid())
      return InvalidArgument(
          "--http: cannot use the certificate " + Shown(opts.tls_cert) + " / key " +
          Shown(opts.tls_key) +
          (opts.tls_client_ca.empty() ? "" : " / client CA " + Shown(opts.tls_client_ca)) +
          " (unreadable, not PEM, or the key does not match)");
    s->server_ = std::move(ssl);
    s->tls_ = true;
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  HttpServer* self = s.get();
  httplib::Server& srv = *s->server_;
  srv.new_task_queue = [self] {
    return new CappedQueue(self->opts_.max_connections, &self->open_connections_,
                           &self->rejected_connections_);
  };
  auto secs = [](std::chrono::milliseconds ms, time_t* sec, time_t* usec) {
    *sec = ms.count() / 1000;
    *usec = (ms.count() % 1000) * 1000;
  };
  time_t sec, usec;
  secs(opts.read_timeout, &sec, &usec);
  srv.set_read_timeout(sec, usec);
  secs(opts.write_timeout, &sec, &usec);
  srv.set_write_timeout(sec, usec);
  srv.set_keep_alive_timeout(opts.keep_alive.count());
  srv.set_keep_alive_max_count(100);
  srv.set_payload_max_length(0);
  // httplib's default also sets SO_REUSEPORT, which lets a second lossd bind
  // the same port and share its connections (scrapes would alternate between
  // two daemons): SO_REUSEADDR only, so a second bind fails with EADDRINUSE.
  srv.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  srv.set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
    return self->PreRoute(req, res);
  });
  srv.Get(".*", [self](const httplib::Request& req, httplib::Response& res) {
    self->Dispatch(req, res);
  });
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr) { Plain(res, 500, "internal error"); });

  errno = 0;
  if (opts.addr.port == 0) {
    int port = srv.bind_to_any_port(opts.addr.host);
    if (port <= 0)
      return Status::FromErrno(errno ? errno : EADDRNOTAVAIL,
                               "--http: cannot listen on " + opts.addr.ToString());
    s->port_ = static_cast<uint16_t>(port);
  } else {
    if (!srv.bind_to_port(opts.addr.host, opts.addr.port))
      return Status::FromErrno(errno ? errno : EADDRINUSE,
                               "--http: cannot listen on " + opts.addr.ToString());
    s->port_ = opts.addr.port;
  }
  return s;
}

HttpServer::~HttpServer() {
  Stop();
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
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind() && !stopping_)
      LOG_ERROR("--http %s: the listener stopped", opts_.addr.ToString().c_str());
    listen_returned_ = true;
  });
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (!started_) return;
  // stop() closes the listening socket; listen_after_bind then shuts the
  // queue down, which waits for every connection's task (streams end: their
  // slots report stopping()).
  // httplib's stop() does nothing before listen_after_bind() marked the
  // server running: a Stop() right after Start() waits for that first.
  while (!server_->is_running() && !listen_returned_)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpStats HttpServer::stats() const {
  HttpStats st;
  st.requests = requests_.load();
  st.rejected_busy = rejected_busy_.load();
  st.refused = refused_.load();
  st.connections_open = open_connections_.load();
  st.streams_open = streams_.load();
  return st;
}

httplib::Server::HandlerResponse HttpServer::PreRoute(const httplib::Request& req,
                                                      httplib::Response& res) {
  using R = httplib::Server::HandlerResponse;
  if (t_reject) {
    rejected_busy_.fetch_add(1);
    res.set_header("Retry-After", "1");
    PlainAndClose(res, 503,
                  "lossd is serving its most HTTP connections (" +
                      std::to_string(opts_.max_connections) + ", --http-max-connections); retry");
    return R::Handled;
  }
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
  for (const auto& h : req.headers) {
    if (!IsToken(h.first)) {
      refused_.fetch_add(1);
      PlainAndClose(res, 400, "malformed header field name '" + Shown(h.first) + "'");
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
  if (req.has_header("Transfer-Encoding") ||
      (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0")) {
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
