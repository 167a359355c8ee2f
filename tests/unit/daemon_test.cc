// The daemon's first step (daemon/daemon.h): flags that name listeners,
// credentials or a socket group wrongly end it with exit code 2 before
// anything is bound or loaded (no privileges needed). A daemon that starts:
// tests/e2e/daemon/.
#include "daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace lossd {
namespace {

// Options that would serve on a Unix socket only, nothing else.
DaemonOptions Base() {
  DaemonOptions o;
  o.socket = "/nonexistent/lossd-unit/lossd.sock";  // never bound: parsing fails first
  o.http = "";
  return o;
}

// A readable file (its content is not parsed before the CA is read).
std::string TempFile() {
  char path[] = "/tmp/lossd-daemon-test-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    (void)!write(fd, "x", 1);
    close(fd);
  }
  return path;
}

TEST(DaemonFlags, ListenAddressAndItsAuthentication) {
  DaemonOptions o = Base();
  o.listen = "not an address";
  EXPECT_EQ(Daemon(o).Run(), 2);
  o.listen = "127.0.0.1:7070";
  EXPECT_EQ(Daemon(o).Run(), 2) << "plaintext on loopback only with --plaintext-loopback";
  o.listen = "0.0.0.0:7070";
  o.plaintext_loopback = true;
  EXPECT_EQ(Daemon(o).Run(), 2) << "off loopback plaintext needs --insecure-tcp";
}

TEST(DaemonFlags, TlsFilesMustBeReadable) {
  DaemonOptions o = Base();
  o.listen = "0.0.0.0:7070";
  o.tls_cert = "/nonexistent/cert.pem";
  o.tls_key = "/nonexistent/key.pem";
  o.tls_no_client_auth = true;
  EXPECT_EQ(Daemon(o).Run(), 2);
  std::string cert = TempFile(), key = TempFile();
  o.tls_cert = cert;
  o.tls_key = key;
  o.tls_no_client_auth = false;
  o.tls_client_ca = "/nonexistent/ca.pem";
  EXPECT_EQ(Daemon(o).Run(), 2) << "mutual TLS: the client CA must be readable";
  std::remove(cert.c_str());
  std::remove(key.c_str());
}

TEST(DaemonFlags, HttpListener) {
  DaemonOptions o = Base();
  o.http = "nowhere";
  EXPECT_EQ(Daemon(o).Run(), 2);
  o.http = "0.0.0.0:0";
  EXPECT_EQ(Daemon(o).Run(), 2) << "plaintext HTTP off loopback needs --http-plaintext";
}

TEST(DaemonFlags, SomethingToListenOnAndTheSocketsGroup) {
  DaemonOptions o = Base();
  o.socket = "";
  EXPECT_EQ(Daemon(o).Run(), 2) << "neither --socket nor --listen";
  o.listen = "127.0.0.1:0";
  o.plaintext_loopback = true;
  o.socket_group = "root";
  EXPECT_EQ(Daemon(o).Run(), 2) << "--socket-group without a --socket";
  o = Base();
  o.socket_group = "no-such-group-lossd";
  EXPECT_EQ(Daemon(o).Run(), 2);
}

}  // namespace
}  // namespace lossd
