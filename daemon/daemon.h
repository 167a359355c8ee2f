// The daemon: injector + observer + gRPC services on a Unix socket (and,
// on request, TCP with TLS), until SIGINT/SIGTERM.
#pragma once

#include <cstdint>
#include <string>

#include "http/metrics.h"
#include "http/server.h"
#include "injector/injector.h"
#include "service/services.h"

namespace lossd {

struct DaemonOptions {
  std::string socket = "/run/lossd/lossd.sock";  // "" = no Unix socket
  std::string listen;                            // host:port for TCP ("" = none)
  std::string socket_group;                      // the socket's group (name or gid); "" = lossd's
  std::string tls_cert, tls_key, tls_client_ca;
  // A TCP listener that does not authenticate its clients, each by name
  // (common/listener_policy.h):
  bool tls_no_client_auth = false;  // TLS without client certificates
  bool plaintext_loopback = false;  // plaintext TCP on a loopback address
  bool insecure_tcp = false;        // plaintext TCP on a non-loopback address
  InjectorOptions injector;         // with the limits of clients' rules
  ApiLimits api;                    // what one client may ask (streams, filters, labels, sizes)
  bool observer = true;
  // Kernel-side observer filters (the daemon observes only these sockets).
  std::vector<ObsFilterSpec> observer_filters;
  // The stall threshold: max(floor, rtts x a flow's minimum RTT) (--stall-min, --stall-rtts).
  uint64_t stall_min_ns = OBS_STALL_MIN_NS_DEFAULT;
  uint32_t stall_rtts = OBS_STALL_RTTS_DEFAULT;
  // Load everything (every hook program, the observer) before serving: the
  // start-up lossd had before it served while loading (benchmarks' baseline).
  bool sync_start = false;
  // The HTTP listener (--http; "" = none): read-only, /metrics and what
  // other parts register; addr from `http`, the rest from http_options.
  std::string http = "127.0.0.1:7071";
  HttpOptions http_options;
  MetricsOptions metrics;  // GET /metrics on that listener
};

// Serves at once; the injector and then the observer load on a thread and
// become available when ready (GetHealth reports each one's state; see
// docs/architecture.md#start-up). Returns the process exit code.
int RunDaemon(const DaemonOptions& opts);

}  // namespace lossd
