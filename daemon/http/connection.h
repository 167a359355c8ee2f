// One accepted HTTP connection, as the Stream httplib parses requests from
// and writes responses to: lossd accepts and keeps the socket (non-blocking;
// TLS through OpenSSL on it), httplib only parses and answers. Every wait is
// bounded three ways: by the read or write timeout of one operation, by the
// deadline of the request head being read (a client that sends its head a
// byte at a time cannot hold the connection past it: slowloris), and by the
// listener's stop (an eventfd that ends every wait at once). OpenSSL writes
// to the socket without MSG_NOSIGNAL: HttpServer::Create ignores SIGPIPE
// process-wide (as httplib's and gRPC's initialisation do too).
#pragma once

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <chrono>
#include <string>

#include "base/address.h"

namespace lossd {

class HttpConnection final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  struct Timeouts {
    std::chrono::milliseconds read{2000}, write{5000};
  };

  // Takes `fd` (non-blocking) and `ssl` (null: plaintext; set on fd, not yet
  // handshaken); closes and frees them.
  HttpConnection(int fd, SSL* ssl, Timeouts timeouts, int stop_fd);
  ~HttpConnection() override;
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // From now until HeadDone, no read waits past `deadline`.
  void StartHead(Clock::time_point deadline);
  void HeadDone() { head_deadline_ = Clock::time_point::max(); }
  // Whether a read was cut short by the head's deadline.
  bool head_timed_out() const { return head_timed_out_; }
  // The TLS handshake, within the head's deadline (it comes before the head).
  bool Handshake();
  // Waits up to `idle` for the first byte of the next request; false when
  // none came (idle, closed by the peer, the listener stopping).
  bool WaitRequest(std::chrono::milliseconds idle);

  // httplib::Stream
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

 private:
  // poll()s for `events` until `deadline` or the stop; true if they came.
  bool Wait(short events, Clock::time_point deadline) const;
  void LingeringClose();  // the destructor's close of fd_ (connection.cc says why)
  Clock::time_point ReadDeadline() const;
  // A TLS operation's want (SSL_get_error) waited for; false: an error or timeout.
  bool WaitFor(int ssl_error, Clock::time_point deadline) const;

  int fd_;
  SSL* ssl_;
  Timeouts timeouts_;
  int stop_fd_;
  Clock::time_point head_deadline_ = Clock::time_point::max();
  mutable bool head_timed_out_ = false;
  SockAddr remote_, local_;
};

}  // namespace lossd
