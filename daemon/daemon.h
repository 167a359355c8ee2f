// The daemon: injector + observer + gRPC services on a Unix socket (and,
// on request, TCP with TLS), until SIGINT/SIGTERM.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "components.h"
#include "http/server.h"
#include "injector/injector.h"
#include "metrics/metrics.h"
#include "service/channel.h"
#include "service/services.h"
#include "startup_rules.h"

namespace lossd {

class LivePage;
class StateDirLock;
class UnixSocketListener;

struct DaemonOptions {
  std::string socket = "/run/lossd/lossd.sock";  // "" = no Unix socket
  std::string listen;                            // host:port for TCP ("" = none)
  std::string socket_group;                      // the socket's group (name or gid); "" = lossd's
  SocketLimits socket_limits;                    // connections it keeps open, per uid and in all
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
  // The network namespaces it watches (--observe-netns; default every one).
  NetnsWatch observer_netns{NetnsWatch::Mode::kAll, {}};
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
  // Who reads over HTTP: "group" (root, lossd's own user and --http-group's
  // members among the local users; clients from other hosts or namespaces
  // as the address and TLS allow) or "any" (every process that reaches it).
  std::string http_readers = "group";
  std::string http_group;  // "" = socket_group's
  MetricsOptions metrics;  // GET /metrics on that listener
  // --rules FILE, read and checked (startup_rules.h): created once the
  // injector is ready, before the socket serves; one refused: exit 2.
  std::string rules_file;
  std::vector<StartupRule> startup_rules;
};

// The daemon's assembly: it owns every part, listener and server, and Run()
// builds them in steps (docs/architecture.md#start-up). It serves at once;
// the injector and then the observer load on a thread and become available
// when ready (GetHealth reports each one's state).
//
// The members are declared in the order they must outlive one another, so
// that they are destroyed in reverse: the HTTP listener first (its handlers
// read the views and the parts), the live page (a client of the gRPC
// server), the metrics, the Unix socket (it hands connections to the
// server), the gRPC server and its services, the loader thread (joined by
// then), then the parts: effects, observer, injector (which detaches
// everything), what they are published in, and last the state dir's lock.
class Daemon {
 public:
  explicit Daemon(DaemonOptions opts);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until SIGINT/SIGTERM. The process exit code: 2 for flags that
  // are wrong (nothing bound yet), 1 when the daemon cannot start or its
  // injector failed, 0 after a signal.
  int Run();

 private:
  // A step's outcome: nullopt to go on, else the exit code (the error logged).
  using Exit = std::optional<int>;

  Exit ParseListeners();    // --listen, --http, --socket(-group): 2 if wrong
  Exit ParseTcpListener();  // --listen: its address and credentials (the policy's auth)
  Exit ReadTlsCredentials(bool mutual);
  Exit ParseHttpListener();  // --http: its address and transport
  Exit ParseHttpReaders();   // --http-readers, --http-group: who may read
  Exit ParseSocket();        // something to listen on; --socket-group
  Exit BindSocket();         // SIGINT/SIGTERM blocked, the Unix socket bound
  Exit PrepareParts();       // the injector's options checked, the state dir locked
  void LoadParts();          // the loader: the injector, then the observer
  bool LoadInjector();       // false: it failed (the main thread is told to exit 1)
  bool CreateStartupRules();  // --rules: false if one was refused (exit 2)
  void LoadObserver();
  Exit BuildServers();  // the HTTP listener, the services and views, the gRPC server
  Exit StartGrpc();     // the gRPC server, then the Unix socket's accept loop
  int Serve();          // the ready line, the loader thread; the signal that ends it
  int Stop(int sig);    // streams ended, servers shut down, loader joined: the exit code

  const DaemonOptions opts_;
  // What the flags say, checked (ParseListeners) and derived.
  ListenAddress listen_;
  std::shared_ptr<grpc::ServerCredentials> tcp_creds_;
  HttpOptions http_opts_;
  std::optional<gid_t> socket_group_;
  InjectorOptions injector_opts_;  // with the control port protected
  sigset_t signals_;               // SIGINT, SIGTERM: blocked, then waited for
  pthread_t main_thread_{};        // the one waiting: the loader wakes it on failure

  // One lossd per state dir, held until exit: the records the injector
  // restores at its start are then a dead owner's, never a live one's.
  std::unique_ptr<StateDirLock> state_lock_;
  std::atomic<bool> stopping_{false};  // a loading observer stops at its next program
  std::atomic<bool> injector_failed_{false};
  bool startup_rules_failed_ = false;
  // The parts, created by the loader and published in `parts_` when ready.
  std::unique_ptr<Components> parts_;
  std::unique_ptr<Injector> injector_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<EffectTracker> effects_;
  std::unique_ptr<ScenarioRunner> scenarios_;  // ends its runs before effects and injector go
  std::thread loader_;
  std::unique_ptr<InjectorService> injector_service_;
  std::unique_ptr<ObserverService> observer_service_;
  std::unique_ptr<SystemService> system_service_;
  std::unique_ptr<ScenarioService> scenario_service_;
  std::unique_ptr<grpc::Server> server_;
  int tcp_port_ = 0;
  // Bound (mode, group) before the server, accepted once it runs (service/channel.h).
  std::unique_ptr<UnixSocketListener> socket_;
  std::unique_ptr<MetricsCollector> metrics_;  // read by http's handlers
  std::unique_ptr<LivePage> live_;
  std::unique_ptr<HttpServer> http_;
};

// Daemon(opts).Run(): the process exit code.
int RunDaemon(const DaemonOptions& opts);

}  // namespace lossd
