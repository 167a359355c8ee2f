// The HTTP listener (daemon/http/server.h) over real loopback sockets: its
// routes, its refusals (404, 405 + Allow, 413, 431), the connection cap (503
// + close over it, served again once connections go), the stream cap, Stop()
// ending streams; and the transport policy.
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"

namespace lossd {
namespace {

using namespace std::chrono_literals;

ListenAddress Loopback() {
  auto a = ParseListenAddress("127.0.0.1:0", true);
  EXPECT_TRUE(a.ok());
  return *a;
}

std::unique_ptr<HttpServer> Serve(HttpOptions o) {
  o.addr = Loopback();
  auto s = HttpServer::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

UniqueFd Connect(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << strerror(errno);
  return fd;
}

// Sends `req`, reads until the server closes, `quiet` passes with nothing,
// or `total` passes. *closed: the server closed the connection.
std::string Exchange(int fd, const std::string& req, bool* closed = nullptr,
                     std::chrono::milliseconds quiet = 3000ms,
                     std::chrono::milliseconds total = 10000ms) {
  auto end = std::chrono::steady_clock::now() + total;
  if (!req.empty()) {
    EXPECT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), (ssize_t)req.size());
  }
  std::string got;
  if (closed) *closed = false;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, quiet.count()) <= 0) break;
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    got.append(buf, n);
  }
  return got;
}

int StatusOf(const std::string& reply) {
  if (reply.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
  return std::stoi(reply.substr(9, 3));
}

std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n";
}

TEST(HttpServer, RoutesAndRefusals) {
  auto s = Serve({});
  s->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("m 1\n", "text/plain");
  });
  s->GetPrefix("/static/", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.path, "text/plain");
  });
  s->Start();
  httplib::Client c("127.0.0.1", s->port());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "m 1\n");
  r = c.Head("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");
  r = c.Get("/static/a.js");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "/static/a.js");
  r = c.Get("/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  for (const char* m : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    UniqueFd fd = Connect(s->port());
    bool closed = false;
    std::string reply = Exchange(
        fd.get(), std::string(m) + " /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
        &closed);
    EXPECT_EQ(StatusOf(reply), 405) << m << ": " << reply;
    EXPECT_NE(reply.find("Allow: GET, HEAD\r\n"), std::string::npos) << reply;
    EXPECT_TRUE(closed) << m;
  }
  {  // a GET with a body: 413, and the unread body never becomes a request
    UniqueFd fd = Connect(s->port());
    bool closed = false;
    std::string reply =
        Exchange(fd.get(), Get("/metrics", "Content-Length: 5\r\n") + "abcde", &closed);
    EXPECT_EQ(StatusOf(reply), 413) << reply;
    EXPECT_TRUE(closed);
  }
  {  // 100 header fields of 100 bytes: 431
    std::string h;
    for (int i = 0; i < 100; i++)
      h += "X-F" + std::to_string(i) + ": " + std::string(90, 'a') + "\r\n";
    UniqueFd fd = Connect(s->port());
    std::string reply = Exchange(fd.get(), Get("/metrics", h));
    EXPECT_EQ(StatusOf(reply), 431) << reply;
  }
  {  // one line over the library's 8 KiB limit: refused (400)
    UniqueFd fd = Connect(s->port());
    std::string reply =
        Exchange(fd.get(), Get("/metrics", "X-Big: " + std::string(9000, 'a') + "\r\n"));
    EXPECT_EQ(StatusOf(reply), 400) << reply;
    fd = Connect(s->port());
    reply = Exchange(fd.get(), Get("/" + std::string(9000, 'a')));
    EXPECT_EQ(StatusOf(reply), 414) << reply;
  }
  HttpStats st = s->stats();
  EXPECT_GE(st.refused, 8u);
  EXPECT_EQ(st.rejected_busy, 0u);
  s->Stop();
}

// DNS rebinding: a page of attacker.example whose name now resolves to
// 127.0.0.1 sends Host: attacker.example; lossd answers only requests that
// name it by address, localhost, its own name or an allowed one.
TEST(HttpServer, HostAndOriginMustNameThisDaemon) {
  HttpOptions o;
  o.allowed_hosts = {"Metrics.Example"};
  auto s = Serve(o);
  s->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("m 1\n", "text/plain");
  });
  s->Start();
  std::string port = std::to_string(s->port());
  auto status = [&](const std::string& headers) {
    UniqueFd fd = Connect(s->port());
    return StatusOf(
        Exchange(fd.get(), "GET /metrics HTTP/1.1\r\n" + headers + "\r\n", nullptr, 300ms));
  };
  for (const std::string& ok : std::vector<std::string>{"127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "localhost:" + port,
                         "LOCALHOST", "metrics.example:" + port})
    EXPECT_EQ(status("Host: " + ok + "\r\n"), 200) << ok;
  EXPECT_EQ(status(""), 400);  // HTTP/1.1 must name its host (RFC 9112 3.2)
  for (const std::string& bad : std::vector<std::string>{"attacker.example:" + port, "attacker.example", "127.0.0.1.nip.io",
                          "[::1", "a:b:c"}) {
    UniqueFd fd = Connect(s->port());
    bool closed = false;
    std::string reply =
        Exchange(fd.get(), "GET /metrics HTTP/1.1\r\nHost: " + bad + "\r\n\r\n", &closed);
    EXPECT_EQ(StatusOf(reply), 421) << bad << ": " << reply;
    EXPECT_NE(reply.find("--http-allowed-host"), std::string::npos) << reply;
    EXPECT_TRUE(closed);
  }
  EXPECT_EQ(status("Host: 127.0.0.1\r\nOrigin: http://attacker.example:" + port + "\r\n"), 421);
  EXPECT_EQ(status("Host: 127.0.0.1\r\nOrigin: http://127.0.0.1:" + port + "\r\n"), 200);
  EXPECT_TRUE(HostAllowed("", "", {}));  // HTTP/1.0 may not say
  EXPECT_TRUE(HostAllowed("node7:7071", "node7", {}));
  EXPECT_FALSE(HostAllowed("node8:7071", "node7", {}));
  s->Stop();
}

TEST(HttpServer, ConnectionCapAnswers503AndRecovers) {
  HttpOptions o;
  o.max_connections = 3;
  o.max_streams = 1;
  o.keep_alive = 30s;  // the idle ones stay held: only the cap refuses
  auto s = Serve(o);
  s->Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  s->Start();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 3; i++) idle.push_back(Connect(s->port()));
  // every worker holds an idle connection: wait until the queue counted them
  for (int i = 0; i < 100 && s->stats().connections_open < 3; i++)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(s->stats().connections_open, 3u);
  for (int i = 0; i < 5; i++) {
    UniqueFd fd = Connect(s->port());
    bool closed = false;
    std::string reply = Exchange(fd.get(), Get("/x"), &closed);
    EXPECT_EQ(StatusOf(reply), 503) << reply;
    EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
    EXPECT_TRUE(closed) << "a refused connection must not be kept alive";
  }
  EXPECT_EQ(s->stats().rejected_busy, 5u);
  idle.clear();  // the workers see the close and take new connections
  std::string reply;
  for (int i = 0; i < 100; i++) {
    UniqueFd fd = Connect(s->port());
    reply = Exchange(fd.get(), Get("/x", "Connection: close\r\n"));
    if (StatusOf(reply) == 200) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(StatusOf(reply), 200) << reply;
  s->Stop();
}

TEST(HttpServer, IdleConnectionsTimeOut) {
  HttpOptions o;
  o.max_connections = 2;
  o.max_streams = 1;
  o.keep_alive = 1s;
  auto s = Serve(o);
  s->Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  s->Start();
  UniqueFd a = Connect(s->port()), b = Connect(s->port());
  bool closed = false;
  Exchange(a.get(), "", &closed, 4000ms);  // the server closes it by itself
  EXPECT_TRUE(closed);
  Exchange(b.get(), "", &closed, 4000ms);
  EXPECT_TRUE(closed);
  // Their slots come back once the server's lingering close (up to 250 ms
  // after its FIN, while a and b stay open here) is over.
  std::string reply;
  for (int i = 0; i < 50; i++) {
    UniqueFd c = Connect(s->port());
    reply = Exchange(c.get(), Get("/x", "Connection: close\r\n"));
    if (StatusOf(reply) == 200) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(StatusOf(reply), 200) << reply;
  s->Stop();
}

TEST(HttpServer, StreamCapAndStopEndsStreams) {
  HttpOptions o;
  o.max_connections = 4;
  o.max_streams = 1;
  auto s = Serve(o);
  s->GetStream("/events", [](const httplib::Request&, httplib::Response& res,
                             std::shared_ptr<HttpStreamSlot> slot) {
    res.set_chunked_content_provider("text/event-stream", [slot](size_t, httplib::DataSink& sink) {
      if (slot->stopping()) return false;
      sink.write("data: x\n\n", 9);
      std::this_thread::sleep_for(50ms);
      return true;
    });
  });
  s->Start();
  UniqueFd first = Connect(s->port());
  std::string got = Exchange(first.get(), Get("/events"), nullptr, 500ms, 500ms);
  EXPECT_EQ(StatusOf(got), 200) << got;
  EXPECT_NE(got.find("data: x"), std::string::npos);
  EXPECT_EQ(s->stats().streams_open, 1u);
  UniqueFd second = Connect(s->port());
  got = Exchange(second.get(), Get("/events"), nullptr, 500ms);
  EXPECT_EQ(StatusOf(got), 503) << got;
  first = UniqueFd();  // the stream's next write fails: its slot goes
  for (int i = 0; i < 100 && s->stats().streams_open > 0; i++) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s->stats().streams_open, 0u);
  UniqueFd third = Connect(s->port());
  got = Exchange(third.get(), Get("/events"), nullptr, 500ms, 500ms);
  EXPECT_EQ(StatusOf(got), 200) << got;
  auto t0 = std::chrono::steady_clock::now();
  s->Stop();  // while the third streams
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  bool closed = false;
  Exchange(third.get(), "", &closed, 2000ms, 3000ms);
  EXPECT_TRUE(closed);
}

TEST(HttpServer, SecondListenerOnThePortIsRefused) {
  auto first = Serve({});
  first->Start();
  HttpOptions o;
  o.addr = *ParseListenAddress("127.0.0.1:" + std::to_string(first->port()));
  auto second = HttpServer::Create(o);
  ASSERT_FALSE(second.ok()) << "two listeners on port " << first->port();
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos)
      << second.status().ToString();
  first->Stop();
}

TEST(HttpServer, StopRightAfterStart) {
  for (int i = 0; i < 20; i++) {  // before the listener thread marked itself running
    auto s = Serve({});
    s->Start();
    auto t0 = std::chrono::steady_clock::now();
    s->Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  }
}

TEST(HttpServer, TransportPolicy) {
  auto addr = [](const char* a) { return *ParseListenAddress(a, true); };
  HttpOptions o;
  o.addr = addr("127.0.0.1:7071");
  EXPECT_TRUE(CheckHttpTransport(o).ok());
  o.addr = addr("[::1]:7071");
  EXPECT_TRUE(CheckHttpTransport(o).ok());
  o.addr = addr("0.0.0.0:7071");
  Status st = CheckHttpTransport(o);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("--http-plaintext"), std::string::npos);
  o.plaintext = true;
  EXPECT_TRUE(CheckHttpTransport(o).ok());
  o.plaintext = false;
  o.tls_cert = "c.pem";
  EXPECT_EQ(CheckHttpTransport(o).code(), Code::kInvalidArgument);  // no key
  o.tls_key = "k.pem";
  EXPECT_TRUE(CheckHttpTransport(o).ok());
  o.plaintext = true;
  EXPECT_EQ(CheckHttpTransport(o).code(), Code::kInvalidArgument);
  o = HttpOptions();
  o.addr = addr("127.0.0.1:7071");
  o.tls_client_ca = "ca.pem";
  EXPECT_EQ(CheckHttpTransport(o).code(), Code::kInvalidArgument);
  // caps
  o = HttpOptions();
  o.addr = addr("127.0.0.1:0");
  o.max_streams = o.max_connections;
  EXPECT_EQ(HttpServer::Create(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace lossd
