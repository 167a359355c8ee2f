// A listener's host:port, parsed once: the gRPC TCP listener (--listen) and
// the HTTP listener (--http) decide loopback-or-not on the parsed address,
// never on a string prefix ("127.x.example:7070" is not loopback).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace lossd {

struct ListenAddress {
  std::string host;  // as the listener binds it: "127.0.0.1", "::1", "0.0.0.0", "::"
  uint16_t port = 0;
  bool ipv6 = false;
  bool loopback = false;  // 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, or "localhost"
  // "host:port" again, IPv6 bracketed: what gRPC's AddListeningPort takes.
  std::string ToString() const;
};

// "127.0.0.1:9464", "[::1]:9464", "localhost:9464", ":9464" (all addresses),
// "0.0.0.0:7070". Hosts are numeric or "localhost" (a listener on a name
// that DNS resolves is a name someone else controls). Port 1..65535, or 0
// when allow_any_port (the kernel picks; tests).
Result<ListenAddress> ParseListenAddress(const std::string& text, bool allow_any_port = false);

}  // namespace lossd
