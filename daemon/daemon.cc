#include "daemon.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/address.h"
#include "common/json.h"
#include "common/listener_policy.h"
#include "common/log.h"
#include "effects/effects.h"
#include "host/state_dir.h"
#include "injector/attach.h"
#include "live/live.h"
#include "service/channel.h"
#include "service/services.h"
#include "service/stream.h"

namespace lossd {
namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

int RunDaemon(const DaemonOptions& opts) {
  std::shared_ptr<grpc::ServerCredentials> tcp_creds;
  ListenAddress listen;
  if (!opts.listen.empty()) {
    auto parsed = ParseListenAddress(opts.listen);
    if (!parsed.ok()) {
      LOG_ERROR("--listen: %s", parsed.status().message().c_str());
      return 2;
    }
    listen = *parsed;
    ListenerChoice choice;
    choice.tls = !opts.tls_cert.empty() || !opts.tls_key.empty();
    choice.client_ca = !opts.tls_client_ca.empty();
    choice.tls_no_client_auth = opts.tls_no_client_auth;
    choice.plaintext_loopback = opts.plaintext_loopback;
    choice.insecure_tcp = opts.insecure_tcp;
    auto auth = DecideListenerAuth(listen, choice);
    if (!auth.ok()) {
      LOG_ERROR("%s", auth.status().message().c_str());
      return 2;
    }
    if (*auth == ListenerAuth::kPlaintext) {
      tcp_creds = grpc::InsecureServerCredentials();
    } else {
      grpc::SslServerCredentialsOptions ssl;
      grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
      if (!ReadFile(opts.tls_key, &pair.private_key) ||
          !ReadFile(opts.tls_cert, &pair.cert_chain)) {
        LOG_ERROR("cannot read --tls-cert %s / --tls-key %s", Shown(opts.tls_cert).c_str(),
                  Shown(opts.tls_key).c_str());
        return 2;
      }
      ssl.pem_key_cert_pairs.push_back(pair);
      if (*auth == ListenerAuth::kMutualTls) {
        if (!ReadFile(opts.tls_client_ca, &ssl.pem_root_certs)) {
          LOG_ERROR("cannot read --tls-client-ca %s", Shown(opts.tls_client_ca).c_str());
          return 2;
        }
        ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
      }
      tcp_creds = grpc::SslServerCredentials(ssl);
    }
  }
  HttpOptions http_opts = opts.http_options;
  if (!opts.http.empty()) {
    auto parsed = ParseListenAddress(opts.http, /*allow_any_port=*/true);
    if (!parsed.ok()) {
      LOG_ERROR("--http: %s", parsed.status().message().c_str());
      return 2;
    }
    http_opts.addr = *parsed;
    Status st = CheckHttpTransport(http_opts);
    if (!st.ok()) {
      LOG_ERROR("%s", st.message().c_str());
      return 2;
    }
  }
  if (opts.socket.empty() && opts.listen.empty()) {
    LOG_ERROR("nothing to listen on: give --socket and/or --listen");
    return 2;
  }
  std::optional<gid_t> socket_group;
  if (!opts.socket_group.empty()) {
    if (opts.socket.empty()) {
      LOG_ERROR("--socket-group needs a --socket");
      return 2;
    }
    auto gid = ParseGroup(opts.socket_group);
    if (!gid.ok()) {
      LOG_ERROR("%s", gid.status().message().c_str());
      return 2;
    }
    socket_group = *gid;
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // Bound (mode, group) here, accepted once the server runs (service/channel.h).
  std::unique_ptr<UnixSocketListener> unix_socket;
  if (!opts.socket.empty()) {
    auto l = UnixSocketListener::Bind(opts.socket, socket_group);
    if (!l.ok()) {
      LOG_ERROR("%s", l.status().message().c_str());
      return 1;
    }
    unix_socket = std::move(*l);
  }

  InjectorOptions io = opts.injector;
  if (!opts.listen.empty())  // the control port is as protected as SSH
    io.limits.protected_ports.push_back(listen.port);
  Status valid = Injector::CheckOptions(io);
  if (!valid.ok()) {
    LOG_ERROR("%s", valid.ToString().c_str());
    return 1;
  }
  // One lossd per state dir, held until exit: the records the injector
  // restores at its start are then a dead owner's, never a live one's.
  auto state_lock = StateDirLock::Acquire(io.state_dir);
  if (!state_lock.ok()) {
    LOG_ERROR("%s", state_lock.status().message().c_str());
    return 1;
  }

  // The parts, owned here and destroyed after the server stops (in reverse:
  // effects, observer, injector — which detaches everything). The loader
  // thread creates them and publishes each in `parts` when it is ready.
  Components parts(io.limits, opts.observer, opts.api);
  std::unique_ptr<Injector> inj;
  std::unique_ptr<Observer> obs;
  std::unique_ptr<EffectTracker> effects;
  std::atomic<bool> stopping{false};
  std::atomic<bool> injector_failed{false};
  pthread_t main_thread = pthread_self();
  auto load = [&] {
    // The injector first: its maps, then (in Create) stale clsact filters and
    // offloads a dead lossd left, and the lease, all before it is published
    // (no rule before that).
    auto i = Injector::Create(io);
    if (!i.ok()) {
      LOG_ERROR("%s", i.status().ToString().c_str());
      parts.InjectorFailed(i.status().message());
      injector_failed = true;
      pthread_kill(main_thread, SIGTERM);  // nothing to serve without it: exit 1
      return;
    }
    inj = std::move(*i);
    if (opts.sync_start) {
      Status st = inj->LoadAllPrograms();
      if (!st.ok()) LOG_WARN("%s", st.message().c_str());
    }
    Capabilities caps = inj->Probe();
    effects = std::make_unique<EffectTracker>(inj.get(), nullptr);
    parts.InjectorReady(inj.get(), caps, effects.get());
    LOG_INFO("injector ready");
    if (!opts.observer || stopping) return;
    ObserverOptions oo;
    oo.filters = opts.observer_filters;
    oo.stall_min_ns = opts.stall_min_ns;
    oo.stall_rtts = opts.stall_rtts;
    auto o = Observer::Create(oo, &stopping);
    if (!o.ok()) {
      if (stopping) return;  // cancelled by SIGTERM
      LOG_WARN("TCP observer unavailable: %s", o.status().message().c_str());
      parts.ObserverFailed(o.status().message());
      return;
    }
    obs = std::move(*o);
    obs->hub().SetBudget(&parts.streams());  // before any client can subscribe
    effects->AttachObserver(obs.get());
    parts.ObserverReady(obs.get());
    LOG_INFO("TCP observer ready");
  };
  if (opts.sync_start) {
    load();
    if (injector_failed) return 1;
  }

  // The HTTP listener reads the parts: created after them, stopped (and
  // destroyed) before them. It serves at once, while they load.
  std::unique_ptr<MetricsCollector> metrics;  // read by http's handlers
  std::unique_ptr<HttpServer> http;
  if (!opts.http.empty()) {
    auto h = HttpServer::Create(http_opts);
    if (!h.ok()) {
      LOG_ERROR("%s", h.status().ToString().c_str());
      return h.status().code() == Code::kInvalidArgument ? 2 : 1;
    }
    http = std::move(*h);
  }

  InjectorService injector_service(&parts);
  ObserverService observer_service(&parts);
  SystemService system_service(&parts, &observer_service);
  if (http) {
    metrics = std::make_unique<MetricsCollector>(
        MetricsSources{&parts, [&observer_service] { return observer_service.subscribers(); },
                       http.get()},
        opts.metrics);
    metrics->Register(http.get());
  }

  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(static_cast<int>(opts.api.max_message_bytes));
  int tcp_port = 0;
  if (!opts.listen.empty()) builder.AddListeningPort(listen.ToString(), tcp_creds, &tcp_port);
  builder.RegisterService(&injector_service);
  builder.RegisterService(&observer_service);
  builder.RegisterService(&system_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    LOG_ERROR("cannot listen on %s%s%s", opts.socket.c_str(), opts.listen.empty() ? "" : " / ",
              opts.listen.c_str());
    return 1;
  }
  if (unix_socket) {
    Status st = unix_socket->Start(server.get());
    if (!st.ok()) {
      LOG_ERROR("%s", st.message().c_str());
      server->Shutdown();
      return 1;
    }
  }
  // The live page: a lossd.v1 client of this server (its in-process channel).
  std::unique_ptr<LivePage> live;
  if (http) {
    live = std::make_unique<LivePage>(server->InProcessChannel(grpc::ChannelArguments()));
    live->Register(http.get());
  }
  if (http) {
    http->Start();
    LOG_INFO("serving HTTP (%s) on %s:%u", http->tls() ? "TLS" : "plaintext",
             http_opts.addr.host.c_str(), http->port());
  }
  LOG_INFO("serving lossd.v1 on %s%s%s", opts.socket.empty() ? "" : ("unix:" + opts.socket).c_str(),
           opts.listen.empty() ? "" : " and ", opts.listen.c_str());
  std::printf("%s\n", JsonLine({{"event", "ready"},
                                {"pid", getpid()},
                                {"socket", opts.socket},
                                {"tcp_port", tcp_port},
                                {"http_port", http ? http->port() : 0}})
                          .c_str());
  std::fflush(stdout);
  std::thread loader;
  if (!opts.sync_start) loader = std::thread(load);

  int sig = 0;
  sigwait(&sigs, &sig);
  if (injector_failed) {
    LOG_ERROR("the injector failed to start: exiting");
  } else {
    LOG_INFO("signal %d: finishing streams, detaching", sig);
  }
  if (http) http->Stop();                // ends its streams; it reads the parts below
  if (live) live->Stop();                // its own gRPC streams, before the server shuts down
  stopping = true;                       // a loading observer stops at its next program
  g_streams_stopping = true;             // producers end their streams with OK
  if (unix_socket) unix_socket->Stop();  // no new connection for a server shutting down
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  if (loader.joinable()) loader.join();
  unix_socket.reset();  // the socket goes
  // effects, observer, then the injector (which detaches everything)
  effects.reset();
  obs.reset();
  inj.reset();
  return injector_failed ? 1 : 0;
}

}  // namespace lossd
