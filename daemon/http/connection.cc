#include "http/connection.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace lossd {
HttpConnection::HttpConnection(int fd, SSL* ssl, Timeouts timeouts, int stop_fd)
    : fd_(fd), ssl_(ssl), timeouts_(timeouts), stop_fd_(stop_fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) remote_ = SockAddrOf(a);
  a = {};
  len = sizeof(a);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) local_ = SockAddrOf(a);
}

HttpConnection::~HttpConnection() {
  if (ssl_) {
    // One close_notify, not waited for; none after a failed handshake.
    if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
    ERR_clear_error();
    SSL_free(ssl_);
  }
  LingeringClose();
}

// RFC 9112 9.6: closing with the client's bytes unread (a refused request's
// body, a pipelined request) resets the connection, and the reset can reach
// the client before it has read the answer (a close-delimited refusal). So:
// our side half-closed first, then what the client sends is read and dropped
// until it closes too, for at most 250 ms and 64 KiB.
void HttpConnection::LingeringClose() {
  shutdown(fd_, SHUT_WR);
  const auto until = Clock::now() + std::chrono::milliseconds(250);
  char buf[4096];
  for (size_t dropped = 0; dropped < (64u << 10);) {
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      dropped += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (!Wait(POLLIN, until)) break;
  }
  close(fd_);
}

void HttpConnection::StartHead(Clock::time_point deadline) {
  head_deadline_ = deadline;
}

HttpConnection::Clock::time_point HttpConnection::ReadDeadline() const {
  return std::min(Clock::now() + timeouts_.read, head_deadline_);
}

bool HttpConnection::Wait(short events, Clock::time_point deadline) const {
  for (;;) {
    auto now = Clock::now();
    if (now >= deadline) {
      if (deadline == head_deadline_) head_timed_out_ = true;
      return false;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd p[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(p, 2, static_cast<int>(std::min<long long>(ms, 60000)));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0) continue;
    if (p[1].revents) return false;  // the listener is stopping
    // An error or hang-up is reported as ready: the read or write that
    // follows returns it.
    if (p[0].revents) return true;
  }
}

bool HttpConnection::WaitFor(int ssl_error, Clock::time_point deadline) const {
  if (ssl_error == SSL_ERROR_WANT_READ) return Wait(POLLIN, deadline);
  if (ssl_error == SSL_ERROR_WANT_WRITE) return Wait(POLLOUT, deadline);
  return false;
}

bool HttpConnection::Handshake() {
  if (!ssl_) return true;
  ERR_clear_error();
  for (;;) {
    int r = SSL_accept(ssl_);
    if (r == 1) return true;
    int err = SSL_get_error(ssl_, r);
    if (!WaitFor(err, head_deadline_)) return false;
  }
}

bool HttpConnection::WaitRequest(std::chrono::milliseconds idle) {
  if (ssl_ && SSL_pending(ssl_) > 0) return true;
  return Wait(POLLIN, Clock::now() + idle);
}

bool HttpConnection::is_readable() const {
  if (ssl_ && SSL_pending(ssl_) > 0) return true;
  return Wait(POLLIN, ReadDeadline());
}

bool HttpConnection::is_writable() const {
  return Wait(POLLOUT, Clock::now() + timeouts_.write);
}

ssize_t HttpConnection::read(char* ptr, size_t size) {
  const auto deadline = ReadDeadline();
  for (;;) {
    if (ssl_) {
      ERR_clear_error();
      int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
      if (n > 0) return n;
      int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      if (!WaitFor(err, deadline)) return -1;
      continue;
    }
    ssize_t n = recv(fd_, ptr, size, 0);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!Wait(POLLIN, deadline)) return -1;
  }
}

ssize_t HttpConnection::write(const char* ptr, size_t size) {
  const auto deadline = Clock::now() + timeouts_.write;
  for (;;) {
    if (ssl_) {
      ERR_clear_error();
      int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
      if (n > 0) return n;
      if (!WaitFor(SSL_get_error(ssl_, n), deadline)) return -1;
      continue;
    }
    ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!Wait(POLLOUT, deadline)) return -1;
  }
}

void HttpConnection::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = remote_.addr;
  port = remote_.port;
}

void HttpConnection::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = local_.addr;
  port = local_.port;
}

}  // namespace lossd
