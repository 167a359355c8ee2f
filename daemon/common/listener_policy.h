// Which TCP listeners lossd accepts for its control channel (gRPC's
// --listen: whoever reaches it can change rules), decided on the parsed
// address (base/address.h). The read-only HTTP listener (--http) has a
// rule of its own, CheckHttpTransport in http/server.h: nothing over it
// changes a rule, so plaintext on loopback is its default and TLS without
// client certificates is allowed. A control listener that does not
// authenticate its clients is always a choice made by a flag in its own name:
//
//   TLS + client CA (mutual TLS)   anywhere
//   TLS, no client CA              only with --tls-no-client-auth (any address)
//   plaintext on loopback          only with --plaintext-loopback: every local
//                                  user and container sharing the network
//                                  namespace reaches it, past the Unix
//                                  socket's 0660
//   plaintext off loopback         only with --insecure-tcp
//
// A flag that contradicts the others (a plaintext flag beside a certificate,
// --insecure-tcp on a loopback address, ...) is refused with what to use.
#pragma once

#include <string>

#include "base/address.h"
#include "base/status.h"

namespace lossd {

enum class ListenerAuth {
  kMutualTls,  // TLS, client certificates required and verified
  kTls,        // TLS, clients not authenticated (--tls-no-client-auth)
  kPlaintext,  // no TLS (--plaintext-loopback / --insecure-tcp)
};

// What the command line gave for one listener.
struct ListenerChoice {
  bool tls = false;                 // a server certificate and key
  bool client_ca = false;           // a CA for client certificates
  bool tls_no_client_auth = false;  // TLS without client certificates, by name
  bool plaintext_loopback = false;  // plaintext on a loopback address, by name
  bool insecure_tcp = false;        // plaintext on a non-loopback address, by name
};

// How that listener's command line spells its flags (the messages name them).
struct ListenerFlagNames {
  std::string what = "gRPC";  // "gRPC", "HTTP"
  std::string listen = "--listen";
  std::string tls_cert = "--tls-cert";
  std::string tls_key = "--tls-key";
  std::string client_ca = "--tls-client-ca";
  std::string no_client_auth = "--tls-no-client-auth";
  std::string plaintext_loopback = "--plaintext-loopback";
  std::string insecure_tcp = "--insecure-tcp";
};

// The listener's authentication, or INVALID_ARGUMENT saying what to give.
Result<ListenerAuth> DecideListenerAuth(const ListenAddress& addr, const ListenerChoice& choice,
                                        const ListenerFlagNames& names = {});

}  // namespace lossd
