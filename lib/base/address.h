// Addresses: IP families and prefixes (one definition each, for the rules,
// the injector's maps, the observer's filters and every view), and a
// listener's host:port, parsed once: the gRPC TCP listener (--listen) and the
// HTTP listener (--http) decide loopback-or-not on the parsed address, never
// on a string prefix ("127.x.example:7070" is not loopback).
#pragma once

#include <array>
#include <cstdint>
#include <string>

struct sockaddr_storage;

#include "base/status.h"

namespace lossd {

// An IP version (4 or 6, as rules and filters name it) as the socket API's
// family (AF_INET, AF_INET6), and back; anything else is 0.
int AfOfVersion(int version);
int VersionOfAf(int af);

// An address in network byte order (4 or 16 bytes at `addr`) as text
// (inet_ntop: "10.0.0.1", "fd00::1"); `af` AF_INET or AF_INET6.
std::string AddrText(int af, const void* addr);

// A socket's address (getpeername, getsockname, accept) as its address text
// (AddrText; "" for a family other than IPv4/IPv6) and its port (host order).
struct SockAddr {
  std::string addr;
  uint16_t port = 0;
};
SockAddr SockAddrOf(const struct sockaddr_storage& a);

// The 16-byte network-order mask of a prefix length (0..128): /20 is
// ff ff f0 00 ...
std::array<uint8_t, 16> PrefixMask(int prefix);

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
