#include "daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/address.h"
#include "base/json.h"
#include "base/log.h"
#include "common/listener_policy.h"
#include "effects/effects.h"
#include "host/netns.h"
#include "host/sockets.h"
#include "host/state_dir.h"
#include "live/live.h"
#include "service/channel.h"
#include "service/health.h"
#include "service/refusals.h"
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

Daemon::Daemon(DaemonOptions opts) : opts_(std::move(opts)) {
  sigemptyset(&signals_);
}

Daemon::~Daemon() = default;

int Daemon::Run() {
  main_thread_ = pthread_self();
  if (Exit e = ParseListeners()) return *e;
  // The state dir's lock before the socket: a second lossd on the same dir
  // stops before it touches the path (the socket has its own lock as well).
  if (Exit e = PrepareParts()) return *e;
  if (Exit e = BindSocket()) return *e;
  if (opts_.sync_start) {
    LoadParts();
  } else if (!opts_.startup_rules.empty()) {
    LoadInjector();  // the rules are in place before anyone is served
  }
  if (startup_rules_failed_) return 2;
  if (injector_failed_) return 1;
  if (Exit e = BuildServers()) return *e;
  return Stop(Serve());
}

Daemon::Exit Daemon::ParseListeners() {
  if (Exit e = ParseTcpListener()) return e;
  if (Exit e = ParseHttpListener()) return e;
  return ParseSocket();
}

Daemon::Exit Daemon::ParseTcpListener() {
  if (opts_.listen.empty()) return std::nullopt;
  auto parsed = ParseListenAddress(opts_.listen);
  if (!parsed.ok()) {
    LOG_ERROR("--listen: %s", parsed.status().message().c_str());
    return 2;
  }
  listen_ = *parsed;
  ListenerChoice choice;
  choice.tls = !opts_.tls_cert.empty() || !opts_.tls_key.empty();
  choice.client_ca = !opts_.tls_client_ca.empty();
  choice.tls_no_client_auth = opts_.tls_no_client_auth;
  choice.plaintext_loopback = opts_.plaintext_loopback;
  choice.insecure_tcp = opts_.insecure_tcp;
  auto auth = DecideListenerAuth(listen_, choice);
  if (!auth.ok()) {
    LOG_ERROR("%s", auth.status().message().c_str());
    return 2;
  }
  if (*auth == ListenerAuth::kPlaintext) {
    tcp_creds_ = grpc::InsecureServerCredentials();
    return std::nullopt;
  }
  return ReadTlsCredentials(*auth == ListenerAuth::kMutualTls);
}

Daemon::Exit Daemon::ReadTlsCredentials(bool mutual) {
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  if (!ReadFile(opts_.tls_key, &pair.private_key) || !ReadFile(opts_.tls_cert, &pair.cert_chain)) {
    LOG_ERROR("cannot read --tls-cert %s / --tls-key %s", Shown(opts_.tls_cert).c_str(),
              Shown(opts_.tls_key).c_str());
    return 2;
  }
  ssl.pem_key_cert_pairs.push_back(pair);
  if (mutual) {
    if (!ReadFile(opts_.tls_client_ca, &ssl.pem_root_certs)) {
      LOG_ERROR("cannot read --tls-client-ca %s", Shown(opts_.tls_client_ca).c_str());
      return 2;
    }
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  tcp_creds_ = grpc::SslServerCredentials(ssl);
  return std::nullopt;
}

Daemon::Exit Daemon::ParseHttpListener() {
  http_opts_ = opts_.http_options;
  if (opts_.http.empty()) return std::nullopt;
  auto parsed = ParseListenAddress(opts_.http, /*allow_any_port=*/true);
  if (!parsed.ok()) {
    LOG_ERROR("--http: %s", parsed.status().message().c_str());
    return 2;
  }
  http_opts_.addr = *parsed;
  Status st = CheckHttpTransport(http_opts_);
  if (!st.ok()) {
    LOG_ERROR("%s", st.message().c_str());
    return 2;
  }
  return ParseHttpReaders();
}

// --http-readers group: a local client (one whose socket is in lossd's
// namespace, as sock_diag finds it) reads only as root, lossd's own user or
// a member of --http-group (default: --socket-group's); other clients are
// the network's, let in by --http's address and TLS.
Daemon::Exit Daemon::ParseHttpReaders() {
  if (opts_.http_readers == "any") return std::nullopt;
  if (opts_.http_readers != "group") {
    LOG_ERROR("--http-readers: '%s' is not 'group' or 'any'", Shown(opts_.http_readers).c_str());
    return 2;
  }
  const std::string& text = opts_.http_group.empty() ? opts_.socket_group : opts_.http_group;
  const char* flag = opts_.http_group.empty() ? "--socket-group" : "--http-group";
  std::optional<gid_t> gid;
  std::string who = "root and lossd's own user";
  if (!text.empty()) {
    auto g = ParseGroup(text, flag);
    if (!g.ok()) {
      LOG_ERROR("%s", g.status().message().c_str());
      return 2;
    }
    gid = *g;
    who = "root, lossd's own user and the members of group " + Shown(text);
  }
  const uid_t self = geteuid();
  http_opts_.admit = [gid, self, who](const sockaddr_storage& peer, const sockaddr_storage& local,
                                      std::string* why) {
    auto uid = LocalPeerUid(peer, local);
    if (!uid.ok()) {
      *why = "lossd cannot tell which local user this is: " + uid.status().message();
      return false;
    }
    if (!*uid) return true;  // not a local user: another host or namespace
    uint32_t u = **uid;
    if (u == 0 || u == self || (gid && UidInGroup(u, *gid))) return true;
    *why = "uid " + std::to_string(u) + " may not read lossd over HTTP: " + who +
           " may (--http-group), or every local user with --http-readers any";
    return false;
  };
  return std::nullopt;
}

Daemon::Exit Daemon::ParseSocket() {
  if (opts_.socket.empty() && opts_.listen.empty()) {
    LOG_ERROR("nothing to listen on: give --socket and/or --listen");
    return 2;
  }
  if (opts_.socket_group.empty()) return std::nullopt;
  if (opts_.socket.empty()) {
    LOG_ERROR("--socket-group needs a --socket");
    return 2;
  }
  auto gid = ParseGroup(opts_.socket_group);
  if (!gid.ok()) {
    LOG_ERROR("%s", gid.status().message().c_str());
    return 2;
  }
  socket_group_ = *gid;
  return std::nullopt;
}

Daemon::Exit Daemon::BindSocket() {
  // Blocked before the parts and the servers start their threads (which
  // inherit the mask): only sigwait in Serve() takes them.
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  if (opts_.socket.empty()) return std::nullopt;
  auto l = UnixSocketListener::Bind(opts_.socket, socket_group_, opts_.socket_limits);
  if (!l.ok()) {
    LOG_ERROR("%s", l.status().message().c_str());
    return 1;
  }
  socket_ = std::move(*l);
  return std::nullopt;
}

Daemon::Exit Daemon::PrepareParts() {
  injector_opts_ = opts_.injector;
  if (!opts_.listen.empty())  // the control port is as protected as SSH
    injector_opts_.limits.protected_ports.push_back(listen_.port);
  Status valid = Injector::CheckOptions(injector_opts_);
  if (!valid.ok()) {
    LOG_ERROR("%s", valid.ToString().c_str());
    return 1;
  }
  auto lock = StateDirLock::Acquire(injector_opts_.state_dir);
  if (!lock.ok()) {
    LOG_ERROR("%s", lock.status().message().c_str());
    return 1;
  }
  state_lock_ = std::move(*lock);
  parts_ = std::make_unique<Components>(injector_opts_.limits, opts_.observer, opts_.api);
  return std::nullopt;
}

void Daemon::LoadParts() {
  if (!injector_ && !LoadInjector()) return;
  if (opts_.observer && !stopping_) LoadObserver();
}

bool Daemon::LoadInjector() {
  // Its maps, then (in Create) stale clsact filters and offloads a dead lossd
  // left, and the lease, all before it is published (no rule before that).
  auto i = Injector::Create(injector_opts_);
  if (!i.ok()) {
    LOG_ERROR("%s", i.status().ToString().c_str());
    parts_->InjectorFailed(i.status().message());
    injector_failed_ = true;
    pthread_kill(main_thread_, SIGTERM);  // nothing to serve without it: exit 1
    return false;
  }
  injector_ = std::move(*i);
  if (opts_.sync_start) {
    Status st = injector_->LoadAllPrograms();
    if (!st.ok()) LOG_WARN("%s", st.message().c_str());
  }
  Capabilities caps = injector_->Probe();
  effects_ = std::make_unique<EffectTracker>(injector_.get(), nullptr);
  // Before the injector is published: no client sees it without them.
  if (!CreateStartupRules()) return false;
  scenarios_ = std::make_unique<ScenarioRunner>(injector_.get(), effects_.get());
  parts_->InjectorReady(injector_.get(), caps, effects_.get(), scenarios_.get());
  LOG_INFO("injector ready");
  return true;
}

bool Daemon::CreateStartupRules() {
  for (const StartupRule& r : opts_.startup_rules) {
    RuleSpec spec = r.spec;
    ApplyDefaultTtl(opts_.injector.limits, &spec);  // "ttl": "none" keeps one until deleted
    auto id = injector_->Add(spec);
    Json fields = {{"event", "startup_rule"},
                   {"file", opts_.rules_file},
                   {"index", r.index},
                   {"where", r.where}};
    if (!id.ok()) {
      fields["code"] = CodeName(id.status().code());
      fields["reason"] = id.status().message();
      LogFields(LogLevel::kError,
                "--rules " + Shown(opts_.rules_file) + ": rule " + std::to_string(r.index) +
                    (r.where.empty() ? "" : " (" + r.where + ")") +
                    " refused: " + id.status().ToString(),
                fields);
      startup_rules_failed_ = true;
      return false;
    }
    fields["rule_id"] = *id;
    LogFields(LogLevel::kInfo,
              "--rules " + Shown(opts_.rules_file) + ": rule " + std::to_string(r.index) +
                  (r.where.empty() ? "" : " (" + r.where + ")") +
                  " created: rule " + std::to_string(*id),
              fields);
  }
  return true;
}

void Daemon::LoadObserver() {
  ObserverOptions oo;
  oo.filters = opts_.observer_filters;
  oo.netns = opts_.observer_netns;
  oo.stall_min_ns = opts_.stall_min_ns;
  oo.stall_rtts = opts_.stall_rtts;
  if (injector_) {
    oo.shared_drops_fd = injector_->SharedDropsFd();
    oo.shared_guards_fd = injector_->SharedGuardsFd();
    oo.shared_watch_fd = injector_->SharedWatchFd();
  }
  auto o = Observer::Create(oo, &stopping_);
  if (!o.ok()) {
    if (stopping_) return;  // cancelled by SIGTERM
    LOG_WARN("TCP observer unavailable: %s", o.status().message().c_str());
    parts_->ObserverFailed(o.status().message());
    return;
  }
  observer_ = std::move(*o);
  observer_->hub().SetBudget(&parts_->streams());  // before any client can subscribe
  effects_->AttachObserver(observer_.get());
  parts_->ObserverReady(observer_.get());
  LOG_INFO("TCP observer ready");
}

Daemon::Exit Daemon::BuildServers() {
  // The HTTP listener reads the parts: created after them, stopped (and
  // destroyed) before them. It serves at once, while they load.
  if (!opts_.http.empty()) {
    auto h = HttpServer::Create(http_opts_);
    if (!h.ok()) {
      LOG_ERROR("%s", h.status().ToString().c_str());
      return h.status().code() == Code::kInvalidArgument ? 2 : 1;
    }
    http_ = std::move(*h);
  }
  injector_service_ = std::make_unique<InjectorService>(parts_.get());
  observer_service_ = std::make_unique<ObserverService>(parts_.get());
  system_service_ = std::make_unique<SystemService>(parts_.get(), observer_service_.get());
  scenario_service_ = std::make_unique<ScenarioService>(parts_.get());
  if (http_) {
    const ObserverService* observers = observer_service_.get();
    metrics_ = std::make_unique<MetricsCollector>(
        MetricsSources{parts_.get(), [observers] { return observers->subscribers(); }, http_.get()},
        opts_.metrics);
    metrics_->Register(http_.get());
    RegisterHealthRoutes(http_.get(), parts_.get());
  }
  if (Exit e = StartGrpc()) return e;
  // The live page: a lossd.v1 client of this server (its in-process channel).
  if (http_) {
    // Its connections' queues, counted in bytes, hold an eighth of --max-stream-memory
    // together at most (--http-max-streams connections): 16 MiB each by default.
    LiveOptions live;
    live.max_queue_bytes = std::max<size_t>(
        1u << 20, opts_.api.streams.max_queue_bytes / 8 /
                      std::max<size_t>(1, opts_.http_options.max_streams));
    live.closes_per_message = std::min<uint32_t>(live.closes_per_message, opts_.api.streams.max_queue);
    live.own.ports = {http_->port(), static_cast<uint16_t>(tcp_port_)};
    live.own.netns_ino = ThreadNetnsIno();
    live_ = std::make_unique<LivePage>(server_->InProcessChannel(grpc::ChannelArguments()), live);
    live_->Register(http_.get());
  }
  return std::nullopt;
}

Daemon::Exit Daemon::StartGrpc() {
  EnableGrpcHealth();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(static_cast<int>(opts_.api.max_message_bytes));
  // Every refused call logged with its reason and caller (service/refusals.h).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(RefusalLogInterceptor());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  if (!opts_.listen.empty()) builder.AddListeningPort(listen_.ToString(), tcp_creds_, &tcp_port_);
  builder.RegisterService(injector_service_.get());
  builder.RegisterService(observer_service_.get());
  builder.RegisterService(system_service_.get());
  builder.RegisterService(scenario_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    LOG_ERROR("cannot listen on %s%s%s", opts_.socket.c_str(), opts_.listen.empty() ? "" : " / ",
              opts_.listen.c_str());
    return 1;
  }
  FollowGrpcHealth(server_.get(), parts_.get());
  if (socket_) {
    Status st = socket_->Start(server_.get());
    if (!st.ok()) {
      LOG_ERROR("%s", st.message().c_str());
      server_->Shutdown();
      return 1;
    }
  }
  return std::nullopt;
}

int Daemon::Serve() {
  if (http_) {
    http_->Start();
    LOG_INFO("serving HTTP (%s) on %s:%u", http_->tls() ? "TLS" : "plaintext",
             http_opts_.addr.host.c_str(), http_->port());
  }
  LOG_INFO("serving lossd.v1 on %s%s%s",
           opts_.socket.empty() ? "" : ("unix:" + opts_.socket).c_str(),
           opts_.listen.empty() ? "" : " and ", opts_.listen.c_str());
  std::printf("%s\n", JsonLine({{"event", "ready"},
                                {"pid", getpid()},
                                {"socket", opts_.socket},
                                {"tcp_port", tcp_port_},
                                {"http_port", http_ ? http_->port() : 0}})
                          .c_str());
  std::fflush(stdout);
  if (!opts_.sync_start) loader_ = std::thread([this] { LoadParts(); });
  // Until a signal: once a second, the heap's free pages go back to the
  // kernel after streams ended (and once more a second later, for what
  // their last threads freed after): slow subscribers' queues, freed in
  // other threads' arenas, would otherwise stay in the RSS for good.
  uint32_t streams = 0;
  int trims = 0;
  for (;;) {
    const timespec tick{1, 0};
    int sig = sigtimedwait(&signals_, nullptr, &tick);
    if (sig > 0) return sig;
    if (errno != EAGAIN && errno != EINTR) {
      LOG_ERROR("sigtimedwait: %s", strerror(errno));
      int s = 0;
      sigwait(&signals_, &s);
      return s;
    }
    uint32_t now = parts_->streams().open() + (http_ ? static_cast<uint32_t>(http_->stats().streams_open) : 0);
    if (now < streams) trims = 2;
    streams = now;
    if (trims > 0) {
      trims--;
      malloc_trim(0);
    }
  }
}

int Daemon::Stop(int sig) {
  if (injector_failed_) {
    LOG_ERROR("the injector failed to start: exiting");
  } else {
    LOG_INFO("signal %d: finishing streams, detaching", sig);
  }
  if (http_) http_->Stop();      // ends its streams; it reads the parts below
  if (live_) live_->Stop();      // its own gRPC streams, before the server shuts down
  stopping_ = true;              // a loading observer stops at its next program
  parts_->StopStreams();         // producers end their streams with OK
  if (socket_) socket_->Stop();  // no new connection for a server shutting down
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  if (loader_.joinable()) loader_.join();
  // The rest goes with the members, in reverse of their declaration
  // (daemon.h): the HTTP listener, the live page, the metrics, the socket
  // (its path removed), the gRPC server, then the scenarios (their rules
  // end), effects, observer and the injector (which detaches everything).
  return injector_failed_ ? 1 : 0;
}

int RunDaemon(const DaemonOptions& opts) {
  return Daemon(opts).Run();
}

}  // namespace lossd
