// lossd's HTTP listener (--http): read-only GET/HEAD routes over Debian's
// cpp-httplib, plaintext on loopback or TLS (optionally mutual), with every
// input bounded: methods other than GET/HEAD are 405 (with Allow), unknown
// paths 404, request headers over 8 KiB or 64 fields 431, a request body
// 413, read and keep-alive timeouts, a deadline for each request head, and
// connection caps, in all and per client address (over either: 503 +
// Connection: close at once, without reading). lossd accepts and keeps the
// connections (connection.h); httplib parses and answers. See
// docs/architecture.md#http.
//
// Routes are registered before Start() and never change after it:
//
//   http.Get("/metrics", [&](const httplib::Request& req, httplib::Response& res) {
//     res.set_content(text, "text/plain; version=0.0.4");
//   });
//   http.GetPrefix("/static/", handler);          // every path under /static/
//   http.GetStream("/api/v1/events", [&](const httplib::Request& req, httplib::Response& res,
//                                        std::shared_ptr<HttpStreamSlot> slot) {
//     res.set_chunked_content_provider("text/event-stream",
//         [slot, ...](size_t, httplib::DataSink& sink) {
//           if (slot->stopping()) return false;   // the daemon is stopping: end the stream
//           ... sink.write(...); wait at most ~200 ms for more ...
//           return true;                          // called again
//         });
//   });
//
// Handlers run on the listener's worker threads, concurrently: they must be
// thread-safe and should not throw (an exception becomes a 500). A stream
// holds one of --http-max-streams for as long as its slot lives (capture it
// in the content provider); over that cap GetStream answers 503 itself. Each
// connection, stream or not, holds one of --http-max-connections while open.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/address.h"
#include "base/status.h"

namespace lossd {

struct HttpOptions {
  ListenAddress addr;
  // TLS: both or neither. With client_ca, clients must present a certificate it signed.
  std::string tls_cert, tls_key, tls_client_ca;
  bool plaintext = false;       // --http-plaintext: allow plaintext off loopback
  // Host names a request's Host (and Origin) may name besides IP literals,
  // localhost and gethostname()'s: other names are 421 (DNS rebinding: a web
  // page whose name now resolves to 127.0.0.1 reads nothing).
  std::vector<std::string> allowed_hosts;
  size_t max_connections = 32;  // open connections at once (streams included)
  // Open connections from one client address at once (at most max_connections).
  size_t max_per_address = 16;
  size_t max_streams = 8;       // long-lived streaming responses at once (GetStream)
  std::chrono::milliseconds read_timeout{2000};
  std::chrono::milliseconds write_timeout{5000};
  // A request's head (and, on a new TLS connection, the handshake before it)
  // must arrive within this from the connection's accept or its first byte.
  std::chrono::milliseconds head_timeout{5000};
  // Who may read (--http-readers): asked on the accept thread for each new
  // connection, with the client's address and the listener's; false (why
  // set): answered 403 at once, nothing read (over TLS: closed). Null: all.
  std::function<bool(const struct sockaddr_storage& peer, const struct sockaddr_storage& local,
                     std::string* why)>
      admit;
  // An idle connection closes after this; Stop() waits for idle ones too
  // (httplib checks for a stop only between requests).
  std::chrono::seconds keep_alive{2};
};

// The HTTP listener's transport: TLS needs both cert and key; a client CA
// needs TLS; plaintext only on loopback or with --http-plaintext. Looser
// than the control channel's (common/listener_policy.h) because nothing
// over HTTP changes a rule.
Status CheckHttpTransport(const HttpOptions& opts);

// Whether a Host header's value ("name", "name:port", "1.2.3.4:80",
// "[::1]:80"; empty: HTTP/1.0 without one) names this daemon: an IP literal,
// localhost, `own_name` or one of `allowed` (case-insensitive).
bool HostAllowed(const std::string& host, const std::string& own_name,
                 const std::vector<std::string>& allowed);

// Counters of the listener itself (lossd_http_* in /metrics).
struct HttpStats {
  uint64_t requests = 0;          // answered by a route (any status)
  uint64_t rejected_busy = 0;     // 503: over the connection or stream cap
  uint64_t forbidden = 0;         // 403: a client the read policy (admit) refused
  uint64_t timed_out = 0;         // closed: a request head not complete within its deadline
  uint64_t refused = 0;           // 404, 405, 413, 431
  uint64_t connections_open = 0;  // now
  uint64_t streams_open = 0;      // now
};

class HttpServer;

// One of --http-max-streams, held while it lives.
class HttpStreamSlot {
 public:
  explicit HttpStreamSlot(HttpServer* server) : server_(server) {}
  ~HttpStreamSlot();
  HttpStreamSlot(const HttpStreamSlot&) = delete;
  HttpStreamSlot& operator=(const HttpStreamSlot&) = delete;
  // True once the server is stopping: a content provider returns false then.
  bool stopping() const;

 private:
  HttpServer* server_;
};

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  using StreamHandler = std::function<void(const httplib::Request&, httplib::Response&,
                                           std::shared_ptr<HttpStreamSlot>)>;

  // Checks the transport (CheckHttpTransport), loads the certificates and
  // binds (port 0: the kernel picks one); serves from Start().
  static Result<std::unique_ptr<HttpServer>> Create(const HttpOptions& opts);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Start() only. A path is exact ("/metrics"); a prefix ends in "/".
  void Get(const std::string& path, Handler handler);
  void GetPrefix(const std::string& prefix, Handler handler);
  void GetStream(const std::string& path, StreamHandler handler);

  // Serves on a thread of its own.
  void Start();
  // Stops accepting, ends streams (their slots report stopping()), waits for
  // the handlers to return. Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  bool tls() const { return tls_ != nullptr; }
  bool stopping() const { return stopping_.load(); }
  HttpStats stats() const;

 private:
  friend class HttpStreamSlot;
  class Engine;
  struct Route {
    Handler handler;
    StreamHandler stream;
  };
  struct Accepted {
    int fd;
    std::string peer;  // the client's address, without the port
  };
  HttpServer() = default;
  Status Bind();
  void AcceptLoop();
  // Over a cap (503) or refused by admit (403): the status + Connection:
  // close written at once (plaintext; a TLS client's connection is closed),
  // never waiting on the client.
  void Refuse(int fd, int status, const std::string& why);
  void Work();
  void Serve(int fd);
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res);
  void Dispatch(const httplib::Request& req, httplib::Response& res);
  const Route* Find(const std::string& path) const;

  HttpOptions opts_;
  std::string own_name_;  // gethostname(), lower case
  std::unique_ptr<Engine> engine_;           // parses and answers
  std::unique_ptr<httplib::SSLServer> tls_;  // its SSL_CTX (certificates, client CA); null: plaintext
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd, written once by Stop(): ends every wait
  uint16_t port_ = 0;
  bool started_ = false;
  std::map<std::string, Route> exact_, prefix_;
  std::thread accept_thread_;
  std::vector<std::thread> workers_;  // max_connections: an admitted connection never waits
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Accepted> queue_;
  std::map<std::string, size_t> per_peer_;  // open connections by client address
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> requests_{0}, rejected_busy_{0}, refused_{0}, timed_out_{0}, forbidden_{0};
  std::atomic<uint64_t> streams_{0};           // held by HttpStreamSlot
  std::atomic<uint64_t> open_connections_{0};  // admitted, until served
};

}  // namespace lossd
