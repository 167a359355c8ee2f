// libFuzzer target of the HTTP listener's request heads (daemon/http: server.cc's
// checks before routing and its routing, connection.cc's reads) on the real
// path: one HttpServer (Create on 127.0.0.1, a port the kernel picks; Start), with
// routes that answer at once (exact /metrics, the prefix /static/, the stream
// /api/v1/events); per input one loopback TCP connection that carries the
// input, half-closed after it, and reads what the server answers until it closes
// the connection. httplib (Debian's compiled libcpp-httplib) parses; it is not
// instrumented, lossd's code is. The half-close ends every read at once: the
// head deadline and the timeouts are bounds here, not paths.
// Input: the bytes of the connection, but for 0xff 0xfe N: N+1 times 64 copies of
// the byte before, at most 9,000 bytes in all, so that heads past the 8 KiB limits
// fit in the fuzzer's 1 KiB inputs (two bytes: a random 0xff seldom makes one;
// every byte costs the server a read); and a first byte 0xfd (0xfc) is not sent
// but has the read policy (HttpOptions::admit) refuse the connection with (without)
// a reason.
// Besides crashes and sanitizer reports (the server's threads' included) it
// checks what the listener promises:
//   - what the server writes is a sequence of whole, well-formed HTTP/1.1
//     responses: "HTTP/1.1 NNN reason", header fields "token: value" without
//     a CR or LF in them, a body of exactly its Content-Length (none for HEAD:
//     httplib marks its answers "Accept-Ranges: bytes"), chunked or up to the
//     close (with "Connection: close"); 100 Continue only before a final response;
//   - at least one final response for a non-empty input, at most one per line of
//     it and at most 100 (the keep-alive cap); none after a refusal with a body
//     and "Connection: close" (a HEAD's has no body to end the connection with;
//     httplib's own 400 for a head it cannot parse echoes the request's
//     "Connection: close" but keeps the connection);
//   - a request a route sees is GET or HEAD, without Transfer-Encoding or a
//     Content-Length other than 0, whose field names are tokens, within 8 KiB and
//     64 fields, with a Host (HTTP/1.1) and any Origin naming an IP address,
//     localhost, this machine or the allowed name; the route is the one its path names;
//   - a connection the read policy refuses gets one 403 and nothing else, counted
//     (stats().forbidden), and no route sees its request;
//   - never a hang: each input's exchange ends within 5 s, and the server has
//     released the connection and any stream (stats()) within 3 s after.
// Run: tests/fuzz/run.sh FUZZER [SECONDS] (ctest fuzz_http_head, label unit).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "http/server.h"

namespace lossd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxInput = 9000;
constexpr char kAllowedHost[] = "lossd.test";
const std::string* g_input = nullptr;  // the input being sent (for messages)

std::string Printable(const std::string& s, size_t max = 600) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n\n    ";
    } else if (c < 0x20 || c >= 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (s.size() > max ? "..." : "");
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "http_head_fuzz: %s\n  %s\n  input (%zu bytes): %s\n", what,
               Printable(detail).c_str(), g_input ? g_input->size() : 0,
               g_input ? Printable(*g_input).c_str() : "");
  std::abort();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsToken(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr) || c == 0) return false;
  return true;
}

std::string OwnName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return Lower(buf);
}

// A Host value names this daemon: "[v6]" or "[v6]:port", "v4", "name" or
// "name:port" with an IPv4 literal, localhost, our name or the allowed one.
bool NamesUs(const std::string& host) {
  if (host[0] == '[') {
    size_t end = host.find(']');
    in6_addr a6;
    return end != std::string::npos &&
           inet_pton(AF_INET6, host.substr(1, end - 1).c_str(), &a6) == 1 &&
           (end + 1 == host.size() || host[end + 1] == ':');
  }
  size_t colon = host.find(':');
  if (colon != std::string::npos && host.find(':', colon + 1) != std::string::npos) return false;
  std::string name = Lower(host.substr(0, colon));
  in_addr a4;
  static const std::string own = OwnName();
  return inet_pton(AF_INET, name.c_str(), &a4) == 1 || name == "localhost" ||
         (!own.empty() && name == own) || name == kAllowedHost;
}

std::atomic<int> g_routed{0};  // requests the routes saw, this input
std::atomic<int> g_refuse{0};  // the read policy refuses this input's connection: 0xfd, 0xfc

// What reaches a route passed every check before routing.
void CheckRouted(const httplib::Request& req, const char* route) {
  g_routed.fetch_add(1);
  std::string what = req.method + " " + req.target + " " + req.version + " (route " + route + ")";
  if (req.method != "GET" && req.method != "HEAD")
    Fail("a route saw a method other than GET/HEAD", what);
  if (req.has_header("Transfer-Encoding")) Fail("a route saw a Transfer-Encoding", what);
  auto lengths = req.headers.equal_range("Content-Length");
  for (auto it = lengths.first; it != lengths.second; ++it)
    if (it->second != "0")
      Fail("a route saw a Content-Length other than 0", what + ": " + it->second);
  size_t bytes = req.target.size();
  for (const auto& h : req.headers) {
    if (!IsToken(h.first)) Fail("a route saw a field name that is no token", h.first);
    bytes += h.first.size() + h.second.size() + 4;
  }
  if (bytes > 8192 || req.headers.size() > 64)
    Fail("a route saw a head past 8 KiB or 64 fields",
         what + ": " + std::to_string(bytes) + " bytes");
  std::string host = req.get_header_value("Host");
  if (host.empty() ? req.version == "HTTP/1.1" : !NamesUs(host))
    Fail("a route saw a Host that does not name this daemon", what + ": Host '" + host + "'");
  std::string origin = req.get_header_value("Origin");
  if (!origin.empty() && origin != "null") {
    size_t scheme = origin.find("://");
    std::string oh = scheme == std::string::npos ? "" : origin.substr(scheme + 3);
    oh = oh.substr(0, oh.find('/'));
    if (oh.empty() || !NamesUs(oh))
      Fail("a route saw an Origin of another site", what + ": Origin '" + origin + "'");
  }
}

HttpServer& Server() {
  static HttpServer* server = [] {
    HttpOptions o;
    auto addr = ParseListenAddress("127.0.0.1:0", true);
    if (!addr.ok()) Fail("ParseListenAddress", addr.status().ToString());
    o.addr = *addr;
    o.allowed_hosts = {kAllowedHost};
    o.max_connections = 4;
    o.max_per_address = 4;
    o.max_streams = 1;
    o.read_timeout = std::chrono::milliseconds(1000);
    o.write_timeout = std::chrono::milliseconds(1000);
    o.head_timeout = std::chrono::milliseconds(1000);
    o.keep_alive = std::chrono::seconds(1);
    o.admit = [](const sockaddr_storage&, const sockaddr_storage&, std::string* why) {
      int refuse = g_refuse.load();
      if (refuse == 0xfd) *why = "fuzz: this input is refused";
      return refuse == 0;
    };
    auto s = HttpServer::Create(o);
    if (!s.ok()) Fail("HttpServer::Create", s.status().ToString());
    HttpServer* srv = s->release();  // serves until the process ends
    srv->Get("/metrics", [](const httplib::Request& req, httplib::Response& res) {
      CheckRouted(req, "/metrics");
      if (req.path != "/metrics") Fail("/metrics served another path", req.path);
      res.set_content("lossd_up 1\n", "text/plain; version=0.0.4");
    });
    srv->GetPrefix("/static/", [](const httplib::Request& req, httplib::Response& res) {
      CheckRouted(req, "/static/");
      if (req.path.compare(0, 8, "/static/") != 0) Fail("/static/ served another path", req.path);
      res.set_content("static\n", "text/plain");
    });
    srv->GetStream("/api/v1/events", [](const httplib::Request& req, httplib::Response& res,
                                        std::shared_ptr<HttpStreamSlot> slot) {
      CheckRouted(req, "/api/v1/events");
      if (req.path != "/api/v1/events") Fail("/api/v1/events served another path", req.path);
      res.set_chunked_content_provider("text/event-stream",
                                       [slot](size_t, httplib::DataSink& sink) {
                                         if (slot->stopping()) return false;
                                         sink.write("data: {}\n\n", 10);
                                         sink.done();
                                         return true;
                                       });
    });
    srv->Start();
    return srv;
  }();
  return *server;
}

std::string Expand(const uint8_t* data, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && out.size() < kMaxInput; i++) {
    if (data[i] == 0xff && i + 2 < size && data[i + 1] == 0xfe) {
      out.append(size_t(data[i + 2] + 1) * 64, out.empty() ? 'a' : out.back());
      i += 2;
    } else {
      out += static_cast<char>(data[i]);
    }
  }
  if (out.size() > kMaxInput) out.resize(kMaxInput);
  return out;
}

// Sends `in`, half-closes, reads until the server closes (or resets: it
// closes with input unread after a refusal). Both ways at once, non-blocking.
std::string Exchange(uint16_t port, const std::string& in) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    Fail("connect", std::strerror(errno));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  size_t sent = 0;
  bool writing = true;
  if (in.empty()) {
    shutdown(fd, SHUT_WR);
    writing = false;
  }
  std::string got;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) Fail("a hang: the server neither answered nor closed within 5 s", got);
    pollfd p{fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    if (writing && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = send(fd, in.data() + sent, in.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += size_t(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) writing = false;  // closed on us
      if (sent == in.size()) writing = false;
      if (!writing) shutdown(fd, SHUT_WR);
    }
    if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
      char buf[65536];
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        got.append(buf, size_t(n));
        if (got.size() > (4u << 20)) Fail("more than 4 MiB of answers", got);
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) break;  // closed or reset
    }
  }
  close(fd);
  return got;
}

// Coverage of the answers themselves: a branch per status class, Content-Range
// and Connection: close, each with a loop as many times as the body's 32-byte
// blocks (libFuzzer counts a loop's trips in buckets). So an answer of a new kind
// or size is new coverage, though httplib, which writes it, is not instrumented.
volatile size_t g_shape;
void Shape(int status, bool range, bool close, size_t length) {
  const size_t trips = std::min<size_t>(length / 32, 256);
#define LOSSD_SHAPE(k) \
  case k:              \
    for (size_t i = 0; i < trips; i++) g_shape = g_shape + k; \
    break;
  switch ((status / 100 - 1) * 4 + range * 2 + close) {
    LOSSD_SHAPE(0) LOSSD_SHAPE(1) LOSSD_SHAPE(2) LOSSD_SHAPE(3) LOSSD_SHAPE(4)
    LOSSD_SHAPE(5) LOSSD_SHAPE(6) LOSSD_SHAPE(7) LOSSD_SHAPE(8) LOSSD_SHAPE(9)
    LOSSD_SHAPE(10) LOSSD_SHAPE(11) LOSSD_SHAPE(12) LOSSD_SHAPE(13) LOSSD_SHAPE(14)
    LOSSD_SHAPE(15) LOSSD_SHAPE(16) LOSSD_SHAPE(17) LOSSD_SHAPE(18) LOSSD_SHAPE(19)
    default: break;
  }
#undef LOSSD_SHAPE
}

bool HasField(const std::string& head, const std::string& field_value) {
  return ("\r\n" + Lower(head) + "\r\n").find("\r\n" + Lower(field_value) + "\r\n") !=
         std::string::npos;
}

// The answers: whole, well-formed responses; returns the final ones' count.
size_t CheckResponses(const std::string& out) {
  size_t at = 0, finals = 0;
  bool interim = false;  // a 100 Continue waits for its final response
  while (at < out.size()) {
    size_t head_end = out.find("\r\n\r\n", at);
    if (head_end == std::string::npos) Fail("a response cut inside its head", out.substr(at));
    std::string head = out.substr(at, head_end - at);
    at = head_end + 4;
    size_t eol = head.find("\r\n");
    std::string status_line = head.substr(0, eol);
    if (status_line.size() < 13 || status_line.compare(0, 9, "HTTP/1.1 ") != 0 ||
        !std::isdigit(static_cast<unsigned char>(status_line[9])) ||
        !std::isdigit(static_cast<unsigned char>(status_line[10])) ||
        !std::isdigit(static_cast<unsigned char>(status_line[11])) || status_line[12] != ' ' ||
        status_line[9] < '1' || status_line[9] > '5')
      Fail("a malformed status line", status_line);
    int status = std::stoi(status_line.substr(9, 3));
    size_t content_length = std::string::npos;
    bool chunked = false;
    for (size_t line = eol; line != std::string::npos && line < head.size();) {
      size_t next = head.find("\r\n", line + 2);
      std::string field =
          head.substr(line + 2, next == std::string::npos ? std::string::npos : next - line - 2);
      line = next;
      size_t colon = field.find(':');
      if (colon == std::string::npos || !IsToken(field.substr(0, colon)) ||
          field.find_first_of("\r\n", colon) != std::string::npos)
        Fail("a malformed response header field", field);
      std::string name = Lower(field.substr(0, colon));
      std::string value = field.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (name == "content-length") {
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
            value.size() > 9)
          Fail("a malformed Content-Length", field);
        if (content_length != std::string::npos && content_length != std::stoul(value))
          Fail("differing Content-Length fields in a response", head);
        content_length = std::stoul(value);
      }
      if (name == "transfer-encoding") chunked = Lower(value) == "chunked";
    }
    if (status < 200) {
      if (status != 100 || interim) Fail("an interim response other than one 100 Continue", head);
      interim = true;
      continue;
    }
    interim = false;
    finals++;
    bool head_request = HasField(head, "Accept-Ranges: bytes");  // httplib's mark of a HEAD answer
    bool close = HasField(head, "Connection: close");
    Shape(status, Lower(head).find("\r\ncontent-range:") != std::string::npos, close,
          content_length == std::string::npos ? 0 : content_length);
    const size_t body_start = at;
    if (head_request || status == 204 || status == 304) {
      // no body
    } else if (chunked) {
      for (;;) {
        size_t e = out.find("\r\n", at);
        if (e == std::string::npos) Fail("a chunked body cut inside a chunk size", out.substr(at));
        std::string hex = out.substr(at, e - at);
        if (hex.empty() || hex.size() > 8 ||
            hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          Fail("a malformed chunk size", hex);
        size_t n = std::stoul(hex, nullptr, 16);
        at = e + 2;
        if (out.size() - at < n + 2 || out.compare(at + n, 2, "\r\n") != 0)
          Fail("a chunk cut short or not ended by CRLF", out.substr(at));
        at += n + 2;
        if (n == 0) break;
      }
    } else if (content_length != std::string::npos) {
      if (out.size() - at < content_length)
        Fail("a body shorter than its Content-Length", head + "\n  body: " + out.substr(at));
      at += content_length;
    } else {
      if (!close) Fail("a body delimited by the close without Connection: close", head);
      at = out.size();
    }
    // lossd's refusals close the connection after their body (PlainAndClose).
    // httplib's own 400 for a head it cannot parse says "Connection: close" (the
    // request's) without a body and keeps the connection: not promised.
    if (close && !head_request && at > body_start && at != out.size())
      Fail("an answer after a refusal with Connection: close", out.substr(at));
  }
  if (interim) Fail("a 100 Continue without a final response", out);
  return finals;
}

void OneInput(const uint8_t* data, size_t size) {
  HttpServer& server = Server();
  const int refuse = size > 0 && (data[0] == 0xfd || data[0] == 0xfc) ? data[0] : 0;
  const std::string in = refuse ? Expand(data + 1, size - 1) : Expand(data, size);
  g_input = &in;
  g_routed.store(0);
  g_refuse.store(refuse);
  const uint64_t forbidden = server.stats().forbidden;
  std::string out = Exchange(server.port(), in);
  size_t finals = CheckResponses(out);
  if (refuse && (finals != 1 || out.compare(0, 13, "HTTP/1.1 403 ") != 0 || g_routed.load() != 0 ||
                 server.stats().forbidden != forbidden + 1))
    Fail("a connection the read policy refused got more (or other) than one 403", out);
  size_t lines = 1;
  for (char c : in) lines += c == '\n';
  if (!in.empty() && finals == 0) Fail("no answer to a non-empty input", out);
  if (finals > lines || finals > 100)
    Fail("more answers than lines of input (or than the keep-alive cap)",
         std::to_string(finals) + " answers, " + std::to_string(lines) + " lines");
  if (size_t(g_routed.load()) > finals)
    Fail("the routes saw more requests than were answered", std::to_string(g_routed.load()));
  // The connection released: the worker is done with it.
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (server.stats().connections_open != 0 || server.stats().streams_open != 0) {
    if (Clock::now() > deadline)
      Fail("the server holds the connection (or a stream) 3 s after it closed", out);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  g_input = nullptr;
}

}  // namespace
}  // namespace lossd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lossd::OneInput(data, size);
  return 0;
}
