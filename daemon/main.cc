// lossd: the daemon (default: gRPC lossd.v1 on /run/lossd/lossd.sock), or,
// given a rule or --observe on the command line, a one-shot run that applies
// the rule / observes and reports until stopped (oneshot.h; SIGINT/SIGTERM
// detach everything; SIGKILL leaves no loss behind either: see the lease).
//
//   lossd                                   serve the API (lossctl, Python)
//   lossd --iface veth0 --dport 8080 --rate 1%
//   lossd --iface eth0 --dir egress --proto tcp --tcp-flags syn,!ack --first 3
//   lossd --observe --events --watch-port 5201      TCP retransmits, live
//
// This file reads the flags and dispatches; the rule's flags, their
// spellings and help are the rule library's (rules/flags.h), shared with lossctl.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "config_file.h"
#include "daemon.h"
#include "loader/libbpf_log.h"
#include "oneshot.h"
#include "rules/flags.h"

namespace lossd {
namespace {

struct Flags {
  RuleFlags rule;
  std::string interval = "1s", duration, lease = "3s", xdp_mode = "auto", log_level = "info",
              log_format = "text";
  std::string rules_file;            // --rules (daemon mode)
  bool print_config_example = false;  // the build's dist/lossd.conf
  bool json = false, observe = false, events = false;
  std::vector<std::string> watch_ports, watch_addrs;
  std::vector<uint64_t> watch_cgroups;
  std::string observe_netns;  // "": all (daemon), own (--observe)
  std::vector<std::string> protect_ports;
  bool force = false;
  std::string state_dir = "/run/lossd";
  // daemon mode
  DaemonOptions daemon;
  std::string max_ttl, default_ttl, keep_expired = "10m", unmatched_hint = "10s", guard_all;
  uint32_t keep_expired_max = 1024;
  std::string stall_min = "10ms";
  bool no_observer = false;
  uint32_t max_rules = 10000;
  uint64_t max_stream_mib = ApiLimits().streams.max_queue_bytes >> 20;
};

bool HasRule(const Flags& f) {
  const RuleFlags& r = f.rule;
  return !r.iface.empty() || !r.cgroup.empty() || !r.pid.empty() || !r.unit.empty() ||
         !r.container.empty() || !r.pod.empty();
}

int Usage(const std::string& message) {
  fprintf(stderr, "lossd: %s\n", message.c_str());
  return 2;
}

void AddListenerOptions(CLI::Option_group* daemon, DaemonOptions& d);
void AddRuleAndObserverOptions(CLI::Option_group* daemon, Flags& f);
void AddLimitOptions(CLI::Option_group* daemon, Flags& f);

void AddOptions(CLI::App& app, Flags& f) {
  AddRuleOptions(&app, &f.rule);
  app.add_option("--interval", f.interval, "Counter report interval");
  app.add_option("--duration", f.duration, "Stop after this long (default: until signalled)");
  app.add_option("--lease", f.lease,
                 "Drop nothing once this long passes without lossd renewing (200ms..60s)");
  app.add_option("--xdp-mode", f.xdp_mode, "auto | native | generic");
  app.add_option("--state-dir", f.state_dir, "Crash-recovery state");
  app.add_flag("--json", f.json, "JSON lines on stdout");
  app.add_flag("--observe", f.observe, "Run the TCP observer (totals at exit; implies --json)");
  app.add_flag("--events", f.events,
               "Print every retransmission and flow close (implies --observe)");
  app.add_option("--watch-port", f.watch_ports,
                 "Observe only sockets with this local/remote port (range); repeatable, OR; "
                 "filters in the kernel (also in daemon mode)");
  app.add_option("--watch-addr", f.watch_addrs,
                 "Observe only sockets with this local/remote address (CIDR); repeatable, OR");
  app.add_option("--watch-cgroup", f.watch_cgroups,
                 "Observe only sockets of this cgroup id; repeatable, OR");
  app.add_option("--observe-netns", f.observe_netns,
                 "Network namespaces the observer watches: all (the daemon's default), own "
                 "(lossd's; the default of --observe) or PATH[,PATH...] (/proc/PID/ns/net, "
                 "/run/netns/NAME, own; at most 64)");
  app.add_option("--log-level", f.log_level, "debug | info | warn | error");
  app.add_option("--log-format", f.log_format,
                 "text | json: stderr lines 'TIME LEVEL MESSAGE', or one JSON object each (time, "
                 "level, msg and the line's fields); TIME is RFC 3339 UTC with microseconds")
      ->capture_default_str();
  app.add_option("--protect-port", f.protect_ports,
                 "A TCP port no lossy rule may cut without force, beside 22, the control port and "
                 "every port sshd listens on; repeatable");
  app.add_flag("--force", f.force,
               "Let the rule on the command line past host protection (logged)");
  auto* daemon =
      app.add_option_group("daemon", "Serving the gRPC API (when no rule or --observe is given)");
  AddListenerOptions(daemon, f.daemon);
  AddRuleAndObserverOptions(daemon, f);
  AddLimitOptions(daemon, f);
  daemon->add_option("--rules", f.rules_file,
                     "Create the rules of this JSON file at start, before serving (what 'lossctl "
                     "rule add --file' takes); one refused: exit 2");
  daemon->add_flag("--sync-start", f.daemon.sync_start,
                   "Load every BPF program before serving (the old start-up; for benchmarks). "
                   "Default: serve at once, GetHealth reports what is still loading");
}

// Where the daemon serves: the Unix socket, TCP with TLS, HTTP.
void AddListenerOptions(CLI::Option_group* daemon, DaemonOptions& d) {
  daemon->add_option("--socket", d.socket, "Unix socket (mode 0660); empty: none");
  daemon->add_option(
      "--socket-group", d.socket_group,
      "The Unix socket's group (NAME or GID): its members may use lossd without root");
  daemon
      ->add_option("--max-connections", d.socket_limits.max_connections,
                   "Most open connections to the Unix socket (root has 32 more); over it a new "
                   "one is closed at once")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  daemon
      ->add_option("--max-connections-per-user", d.socket_limits.max_per_uid,
                   "Most open connections to the Unix socket of one uid (SO_PEERCRED)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  daemon->add_option(
      "--listen", d.listen,
      "Also listen on TCP host:port: mutual TLS, unless a flag below says otherwise");
  daemon->add_option("--tls-cert", d.tls_cert, "Server certificate (PEM)");
  daemon->add_option("--tls-key", d.tls_key, "Server key (PEM)");
  daemon->add_option("--tls-client-ca", d.tls_client_ca,
                     "Require client certificates from this CA (mutual TLS)");
  daemon->add_flag("--tls-no-client-auth", d.tls_no_client_auth,
                   "TLS without client certificates: anyone who reaches --listen may change rules");
  daemon->add_flag("--plaintext-loopback", d.plaintext_loopback,
                   "Plaintext TCP on a loopback --listen: every local user and container sharing "
                   "the network namespace may change rules");
  daemon->add_flag(
      "--insecure-tcp", d.insecure_tcp,
      "Plaintext TCP on a non-loopback --listen: anyone who reaches it may change rules");
  daemon
      ->add_option("--http", d.http,
                   "HTTP listener host:port (read-only: /metrics ...); '' = none. TLS unless "
                   "loopback")
      ->capture_default_str();
  daemon->add_option("--http-tls-cert", d.http_options.tls_cert, "HTTP server certificate (PEM)");
  daemon->add_option("--http-tls-key", d.http_options.tls_key, "HTTP server key (PEM)");
  daemon->add_option("--http-tls-client-ca", d.http_options.tls_client_ca,
                     "Require HTTP client certificates from this CA (mutual TLS)");
  daemon->add_flag("--http-plaintext", d.http_options.plaintext,
                   "Allow plaintext HTTP on a non-loopback address");
  daemon->add_option("--http-allowed-host", d.http_options.allowed_hosts,
                     "A host name HTTP requests may name (Host, Origin) besides IP addresses, "
                     "localhost and this machine's name (against DNS rebinding); repeatable");
  daemon
      ->add_option("--http-readers", d.http_readers,
                   "Who reads over HTTP: 'group' = among local users only root, lossd's user and "
                   "--http-group's members (clients of other hosts or namespaces: as --http's "
                   "address and TLS allow); 'any' = every process that reaches it")
      ->capture_default_str();
  daemon->add_option("--http-group", d.http_group,
                     "The group (NAME or GID) whose members read over HTTP (--http-readers "
                     "group); default: --socket-group's");
  daemon
      ->add_option("--http-max-connections", d.http_options.max_connections,
                   "Most open HTTP connections (streams included); over it: 503")
      ->capture_default_str();
  daemon
      ->add_option("--http-max-connections-per-address", d.http_options.max_per_address,
                   "Most open HTTP connections from one client address; over it: 503")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  daemon
      ->add_option("--http-max-streams", d.http_options.max_streams,
                   "Most long-lived HTTP streams at once; over it: 503")
      ->capture_default_str();
  daemon
      ->add_option("--metrics-max-rules", d.metrics.max_rules,
                   "GET /metrics: per-rule series for at most this many rules (the rest counted "
                   "in lossd_metrics_rules_omitted)")
      ->capture_default_str();
  daemon
      ->add_option("--metrics-top-flows", d.metrics.top_flows,
                   "GET /metrics: the K open flows with the most retransmits as series of their "
                   "own (their addresses become labels), the rest as flow=\"other\"; 0: none")
      ->capture_default_str();
}

// The rules' bounds and history, and the observer's stall threshold.
void AddRuleAndObserverOptions(CLI::Option_group* daemon, Flags& f) {
  DaemonOptions& d = f.daemon;
  daemon->add_option("--max-rules", f.max_rules, "Most rules at once");
  daemon->add_option("--max-ttl", f.max_ttl,
                     "Every rule must expire within this (e.g. 1h); default: no limit");
  daemon->add_option("--default-ttl", f.default_ttl,
                     "The TTL of a rule created without one (a forgotten rule stops by itself); "
                     "0 or none: until deleted; default: 1h, or --max-ttl if shorter");
  daemon->add_option("--keep-expired", f.keep_expired,
                     "How long expired, failed and deleted rules stay readable (GetRule, "
                     "GetRuleEffect) before they are forgotten (0s..1d)");
  daemon->add_option("--keep-expired-max", f.keep_expired_max,
                     "How many expired, failed and deleted rules stay readable at most (0..16384)");
  daemon->add_option("--unmatched-hint", f.unmatched_hint,
                     "A live rule that has matched no packet this long says what to check (its "
                     "direction, interface, ports) in its listing (0s: never; at most 1d)");
  daemon->add_flag("--no-observer", f.no_observer, "Do not run the TCP observer");
  daemon->add_option("--guard-all", f.guard_all,
                     "The daemon's guard over every rule (docs/guards.md): when a flow any rule "
                     "dropped from stalls too long (stall>DURATION) or RTOs pile up "
                     "(rtos>N/WINDOW), every rule stops in the kernel (STOPPED); e.g. stall>2s");
  daemon
      ->add_option("--stall-min", f.stall_min,
                   "A stall is a flow with data to deliver and no delivery for longer than "
                   "max(this, --stall-rtts x its minimum RTT) (1ms..1min)")
      ->capture_default_str();
  daemon
      ->add_option("--stall-rtts", d.stall_rtts,
                   "Times a flow's minimum RTT a stall must exceed (1..1000; see --stall-min)")
      ->capture_default_str();
}

// The daemon's bounds on what one client may ask (docs/architecture.md#limits).
void AddLimitOptions(CLI::Option_group* daemon, Flags& f) {
  ApiLimits& api = f.daemon.api;
  daemon->add_option("--max-streams", api.streams.max_streams, "Most client streams open at once")
      ->capture_default_str();
  daemon
      ->add_option("--max-streams-per-kind", api.streams.max_streams_per_kind,
                   "Most open streams of one kind (WatchRetransmits, WatchFlows, ...)")
      ->capture_default_str();
  daemon
      ->add_option("--max-queue", api.streams.max_queue,
                   "Longest queue (events, ~600 bytes each) a subscriber may ask for")
      ->capture_default_str();
  daemon
      ->add_option("--max-stream-memory", f.max_stream_mib,
                   "MiB that every stream's queues may hold together")
      ->capture_default_str();
  daemon->add_option("--max-filters", api.max_filters, "Most filters (allow + deny) in one request")
      ->capture_default_str();
  daemon->add_option("--max-labels", api.max_labels, "Most labels on one rule")
      ->capture_default_str();
  daemon->add_option("--max-label-bytes", api.max_label_bytes, "Longest label key or value (bytes)")
      ->capture_default_str();
  daemon
      ->add_option("--max-batch", api.max_batch,
                   "Most specs in one CreateRules (and ids in one WatchRuleCounters)")
      ->capture_default_str();
  daemon
      ->add_option("--max-message-bytes", api.max_message_bytes,
                   "Largest request the daemon receives (gRPC)")
      ->capture_default_str();
}

// --watch-*: the observer's kernel-side filters (OR).
Status WatchFilters(const Flags& f, std::vector<ObsFilterSpec>* out) {
  for (const auto& p : f.watch_ports) {
    auto r = ParsePortRange(p);
    if (!r.ok()) return InvalidArgument("--watch-port: " + r.status().message());
    out->emplace_back().ports = *r;
  }
  for (const auto& a : f.watch_addrs) {
    auto c = ParseCidr(a);
    if (!c.ok()) return InvalidArgument("--watch-addr: " + c.status().message());
    out->emplace_back().addr = *c;
  }
  for (uint64_t cg : f.watch_cgroups) out->emplace_back().cgroup_id = cg;
  return Status::Ok();
}

// A duration flag; `positive`: 0 is refused.
Status DurationFlag(const char* flag, const std::string& text, bool positive,
                    std::chrono::nanoseconds* out) {
  auto d = ParseDuration(text);
  if (!d.ok()) return InvalidArgument(std::string(flag) + ": " + d.status().message());
  if (positive && d->count() <= 0) return InvalidArgument(std::string(flag) + " must be > 0");
  *out = *d;
  return Status::Ok();
}

// --default-ttl: 1 h unless given (or --max-ttl if shorter); "0"/"none":
// until deleted, which a --max-ttl does not allow.
Result<uint64_t> DefaultTtl(const std::string& text, uint64_t max_ttl_ns) {
  constexpr uint64_t kHour = 3600ull * 1000000000ull;
  if (text.empty()) return max_ttl_ns && max_ttl_ns < kHour ? max_ttl_ns : kHour;
  std::string t = TrimSpace(text);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::chrono::nanoseconds d{0};
  if (t != "none") LOSSD_RETURN_IF_ERROR(DurationFlag("--default-ttl", text, false, &d));
  uint64_t ns = static_cast<uint64_t>(d.count());
  if (max_ttl_ns && (ns == 0 || ns > max_ttl_ns))
    return InvalidArgument("--default-ttl " + Shown(text) + " exceeds --max-ttl (" +
                           std::to_string(max_ttl_ns / 1000000000ull) + " s)");
  return ns;
}

Status InjectorFlags(const Flags& f, InjectorOptions* opts) {
  std::chrono::nanoseconds lease;
  LOSSD_RETURN_IF_ERROR(DurationFlag("--lease", f.lease, false, &lease));
  // The lease is the fail-safe of a dead daemon's clsact filters: it cannot
  // be switched off, and under ~150 ms renewal races the data plane's clock.
  if (lease < std::chrono::milliseconds(200) || lease > std::chrono::seconds(60))
    return InvalidArgument("--lease must lie between 200ms and 60s (got " + Shown(f.lease) + ")");
  opts->lease = std::chrono::duration_cast<std::chrono::milliseconds>(lease);
  for (const std::string& text : f.protect_ports) {
    auto p = ParsePortRange(text);
    if (!p.ok() || p->lo != p->hi || p->lo == 0)
      return InvalidArgument("--protect-port: '" + Shown(text) + "' is not a port (1-65535)");
    opts->limits.protected_ports.push_back(p->lo);
  }
  opts->state_dir = f.state_dir;
  if (f.xdp_mode == "native")
    opts->xdp_mode = XdpMode::kNative;
  else if (f.xdp_mode == "generic")
    opts->xdp_mode = XdpMode::kGeneric;
  else if (f.xdp_mode != "auto")
    return InvalidArgument("--xdp-mode must be auto, native or generic");
  return Status::Ok();
}

// The soft NOFILE limit up to the hard one: systemd gives a unit a soft
// limit of 1,024 (for select()), which the daemon's connections, maps and
// links would reach; lossd uses poll and epoll only.
void RaiseFileLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    LOG_WARN("raise the open-file limit from %llu: %s", static_cast<unsigned long long>(was),
             strerror(errno));
  else
    LOG_DEBUG("open-file limit %llu (was %llu)", static_cast<unsigned long long>(rl.rlim_cur),
              static_cast<unsigned long long>(was));
}

// --observe-netns: all (the daemon's default), own (--observe's) or paths.
Status ObserveNetnsFlag(const Flags& f, bool daemon_mode, NetnsWatch* out) {
  auto w = ParseNetnsWatch(f.observe_netns.empty() ? (daemon_mode ? "all" : "own")
                                                    : f.observe_netns);
  if (!w.ok()) return w.status();
  // Named namespaces must exist now: a typo is a usage error, not a daemon
  // that observes nothing.
  for (const auto& p : w->paths) {
    if (p == "own") continue;
    auto ns = OpenNetns(p);
    if (!ns.ok()) return InvalidArgument("--observe-netns: " + ns.status().message());
  }
  *out = *w;
  return Status::Ok();
}

// A duration flag within [lo, hi] (text: as given, for the message).
Status BoundedDurationFlag(const char* flag, const std::string& text, bool positive,
                           std::chrono::nanoseconds lo, std::chrono::nanoseconds hi,
                           const char* range, std::chrono::nanoseconds* out) {
  LOSSD_RETURN_IF_ERROR(DurationFlag(flag, text, positive, out));
  if (*out < lo || *out > hi)
    return InvalidArgument(std::string(flag) + " must lie between " + range + " (got " +
                           Shown(text) + ")");
  return Status::Ok();
}

// The daemon's options from its flags (the one-shot run's have been read).
Status DaemonFlags(const Flags& f, const InjectorOptions& injector,
                   const std::vector<ObsFilterSpec>& filters, const NetnsWatch& netns,
                   DaemonOptions* out) {
  DaemonOptions d = f.daemon;
  d.injector = injector;
  RuleLimits& limits = d.injector.limits;
  limits.max_rules = f.max_rules;
  std::chrono::nanoseconds max_ttl{0};
  if (!f.max_ttl.empty()) LOSSD_RETURN_IF_ERROR(DurationFlag("--max-ttl", f.max_ttl, true, &max_ttl));
  limits.max_ttl_ns = static_cast<uint64_t>(max_ttl.count());
  auto dflt = DefaultTtl(f.default_ttl, limits.max_ttl_ns);
  if (!dflt.ok()) return dflt.status();
  limits.default_ttl_ns = *dflt;
  LOSSD_RETURN_IF_ERROR(BoundedDurationFlag("--keep-expired", f.keep_expired, false,
                                            std::chrono::nanoseconds(0), std::chrono::hours(24),
                                            "0s and 1d", &d.injector.keep_retired));
  if (f.keep_expired_max > LOSS_MAX_RULES)
    return InvalidArgument("--keep-expired-max must lie between 0 and " +
                           std::to_string(LOSS_MAX_RULES));
  d.injector.keep_retired_max = f.keep_expired_max;
  LOSSD_RETURN_IF_ERROR(BoundedDurationFlag("--unmatched-hint", f.unmatched_hint, false,
                                            std::chrono::nanoseconds(0), std::chrono::hours(24),
                                            "0s and 1d", &d.injector.unmatched_after));
  std::chrono::nanoseconds stall_min;
  LOSSD_RETURN_IF_ERROR(BoundedDurationFlag("--stall-min", f.stall_min, true,
                                            std::chrono::milliseconds(1), std::chrono::minutes(1),
                                            "1ms and 1min", &stall_min));
  if (d.stall_rtts < 1 || d.stall_rtts > 1000)
    return InvalidArgument("--stall-rtts must lie between 1 and 1000");
  d.stall_min_ns = static_cast<uint64_t>(stall_min.count());
  const ApiLimits& api = d.api;
  if (api.streams.max_streams == 0 || api.streams.max_streams_per_kind == 0 ||
      api.streams.max_queue == 0 || f.max_stream_mib == 0 || api.max_filters == 0 ||
      api.max_label_bytes == 0 || api.max_batch == 0)
    return InvalidArgument(
        "--max-streams, --max-streams-per-kind, --max-queue, --max-stream-memory, "
        "--max-filters, --max-label-bytes and --max-batch must be > 0");
  if (f.max_stream_mib > (1u << 20))
    return InvalidArgument("--max-stream-memory must be at most 1048576 MiB");
  if (api.max_message_bytes < 4096 || api.max_message_bytes > (1u << 30))
    return InvalidArgument("--max-message-bytes must lie between 4096 and 1073741824");
  d.api.streams.max_queue_bytes = f.max_stream_mib << 20;
  d.observer = !f.no_observer;
  if (!f.guard_all.empty()) {
    Status st = ParseGuard(f.guard_all, &d.injector.guard_all);
    if (!st.ok()) return InvalidArgument("--guard-all: " + st.message());
    if (d.injector.guard_all.watch_port || d.injector.guard_all.misbehaves)
      return InvalidArgument("--guard-all: watch=PORT and misbehaves are for a rule's guard; the "
                             "daemon's judges the flows any rule dropped from");
    if (!d.observer)
      return InvalidArgument("--guard-all: it is decided by the TCP observer's program: not "
                             "with --no-observer");
  }
  d.observer_filters = filters;  // --watch-*: pushed into the kernel for every subscriber
  d.observer_netns = netns;
  if (!f.rules_file.empty()) {
    auto rules = ReadRulesFile(f.rules_file);
    if (!rules.ok()) return rules.status();
    d.rules_file = f.rules_file;
    d.startup_rules = std::move(*rules);
  }
  *out = std::move(d);
  return Status::Ok();
}

// --print-config-example: how the build writes dist/lossd.conf.
int PrintConfigExample(CLI::App& app) {
  std::string example = ConfigExample(
      &app,
      "# lossd's configuration file: TOML, one `key = value` per flag of lossd --help (the\n"
      "# long name without \"--\"). lossd reads /etc/lossd/lossd.conf if it exists, or the\n"
      "# file of --config FILE; a flag given on the command line wins over the file (the\n"
      "# systemd unit gives --socket, --socket-group and --max-ttl on its command line). A\n"
      "# key that names no flag stops lossd (exit 2). Generated from lossd " LOSSD_VERSION
      " at build time:\n"
      "# every setting below is commented out and shows its default. Giving a rule's flags\n"
      "# here (iface, cgroup, ...) makes lossd a one-shot run: start-up rules go in --rules.\n\n");
  fputs(example.c_str(), stdout);
  return 0;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"lossd: eBPF packet-loss injector"};
  app.set_version_flag("--version", "lossd " LOSSD_VERSION);
  AddOptions(app, f);
  // Hidden: how the build writes dist/lossd.conf (dist/CMakeLists.txt).
  app.add_flag("--print-config-example", f.print_config_example)->group("")->configurable(false);
  AddConfigOption(&app, kDefaultConfigPath);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A bad flag is a usage error: exit 2, as every other bad input and lossctl.
    fprintf(stderr, "lossd: %s\nRun 'lossd --help' for the options.\n",
            ParseErrorMessage(app, e).c_str());
    return 2;
  }
  if (f.print_config_example) return PrintConfigExample(app);

  LogLevel level;
  if (!ParseLogLevel(f.log_level.c_str(), &level))
    return Usage("--log-level must be debug, info, warn or error");
  SetLogLevel(level);
  LogFormat format;
  if (!ParseLogFormat(f.log_format.c_str(), &format))
    return Usage("--log-format must be text or json");
  SetLogFormat(format);
  RouteLibbpfLogs();
  RaiseFileLimit();
  if (f.events) f.observe = true;
  if (f.observe) f.json = true;
  std::vector<ObsFilterSpec> filters;
  InjectorOptions injector;
  OneShotOptions o;
  Status st = WatchFilters(f, &filters);
  bool daemon_mode = !HasRule(f) && !f.observe;
  NetnsWatch netns;
  if (st.ok()) st = ObserveNetnsFlag(f, daemon_mode, &netns);
  if (st.ok()) st = InjectorFlags(f, &injector);
  if (st.ok() && !f.duration.empty())
    st = DurationFlag("--duration", f.duration, false, &o.duration);
  if (st.ok()) st = DurationFlag("--interval", f.interval, true, &o.interval);

  if (daemon_mode) {
    if (!st.ok()) return Usage(st.message());
    DaemonOptions d;
    st = DaemonFlags(f, injector, filters, netns, &d);
    if (!st.ok()) return Usage(st.message());
    return RunDaemon(d);
  }

  if (st.ok() && !f.rules_file.empty())
    st = InvalidArgument("--rules is for the daemon (no rule flags, no --observe)");
  o.injector = injector;
  o.json = f.json;
  o.observe = f.observe;
  o.events = f.events;
  o.filters = filters;
  o.netns = netns;
  if (st.ok() && HasRule(f)) {
    auto rule = BuildRuleSpec(f.rule);
    if (rule.ok()) {
      o.rule = *rule;
      o.rule->force = f.force;
    } else {
      st = rule.status();
    }
  }
  if (!st.ok()) return Usage(st.message());
  return RunOneShot(o);
}

}  // namespace
}  // namespace lossd

int main(int argc, char** argv) {
  return lossd::Main(argc, argv);
}
