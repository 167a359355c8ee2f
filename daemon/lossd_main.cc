// lossd: the daemon (default: gRPC lossd.v1 on /run/lossd/lossd.sock), or,
// given a rule or --observe on the command line, a one-shot run that applies
// the rule / observes and reports until stopped (SIGINT/SIGTERM detach
// everything; SIGKILL leaves no loss behind either: see the lease).
//
//   lossd                                   serve the API (lossctl, Python)
//   lossd --iface veth0 --dport 8080 --rate 1%
//   lossd --iface eth0 --dir egress --proto tcp --tcp-flags syn,!ack --first 3
//   lossd --observe --events --watch-port 5201      TCP retransmits, live
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <string>

#include <atomic>
#include <thread>

#include "common/log.h"
#include "injector/injector.h"
#include "observer/format.h"
#include "observer/observer.h"
#include "daemon.h"

namespace lossd {
namespace {

struct Flags {
  RuleSpec rule;
  std::string hook = "auto", dir = "ingress", src, dst, sport, dport, proto, tcp_flags,
              payload = "any", family = "any", rate, ge, ttl, interval = "1s", duration,
              lease = "3s", xdp_mode = "auto", log_level = "info";
  uint32_t every = 0, first = 0;
  uint64_t seed = 0;
  bool seeded = false, json = false;
  bool observe = false, events = false;
  std::vector<std::string> watch_ports, watch_addrs;
  std::vector<uint64_t> watch_cgroups;
  std::string state_dir = "/run/lossd";
  // daemon mode
  std::string socket = "/run/lossd/lossd.sock", listen, tls_cert, tls_key, tls_client_ca, max_ttl;
  bool insecure_tcp = false, no_observer = false;
  uint32_t max_rules = 10000;
};

bool HasRule(const Flags& f) {
  return !f.rule.iface.empty() || !f.rule.cgroup.empty();
}

Status BuildRule(Flags& f) {
  RuleSpec& r = f.rule;
  if (f.hook == "auto") r.hook = Hook::kAuto;
  else if (f.hook == "xdp") r.hook = Hook::kXdp;
  else if (f.hook == "tc") r.hook = Hook::kTc;
  else if (f.hook == "cgroup") r.hook = Hook::kCgroup;
  else return InvalidArgument("--hook must be auto, xdp, tc or cgroup");
  if (f.dir == "ingress") r.dir = Direction::kIngress;
  else if (f.dir == "egress") r.dir = Direction::kEgress;
  else if (f.dir == "both") r.dir = Direction::kBoth;
  else return InvalidArgument("--dir must be ingress, egress or both");
  if (f.family == "4" || f.family == "ipv4") r.family = 4;
  else if (f.family == "6" || f.family == "ipv6") r.family = 6;
  else if (f.family != "any") return InvalidArgument("--family must be 4, 6 or any");
  if (f.payload == "only") r.payload = LOSS_PAYLOAD_ONLY;
  else if (f.payload == "none") r.payload = LOSS_PAYLOAD_NONE;
  else if (f.payload != "any") return InvalidArgument("--payload must be any, only or none");
  if (!f.src.empty()) {
    auto c = ParseCidr(f.src);
    if (!c.ok()) return c.status();
    r.src = *c;
  }
  if (!f.dst.empty()) {
    auto c = ParseCidr(f.dst);
    if (!c.ok()) return c.status();
    r.dst = *c;
  }
  if (!f.sport.empty()) {
    auto p = ParsePortRange(f.sport);
    if (!p.ok()) return p.status();
    r.sport = *p;
  }
  if (!f.dport.empty()) {
    auto p = ParsePortRange(f.dport);
    if (!p.ok()) return p.status();
    r.dport = *p;
  }
  if (!f.proto.empty()) {
    auto p = ParseProtocol(f.proto);
    if (!p.ok()) return p.status();
    r.l4proto = *p;
  }
  if (!f.tcp_flags.empty())
    LOSSD_RETURN_IF_ERROR(ParseTcpFlags(f.tcp_flags, &r.tcp_flags_mask, &r.tcp_flags_value));
  int models = !f.rate.empty() + !f.ge.empty() + (f.every > 0) + (f.first > 0);
  if (models > 1) return InvalidArgument("give one loss model: --rate, --ge, --every or --first");
  if (models == 0) return InvalidArgument("give a loss model: --rate, --ge, --every or --first");
  if (!f.rate.empty()) {
    auto p = ParseRate(f.rate);
    if (!p.ok()) return p.status();
    r.model.kind = LossModel::Kind::kBernoulli;
    r.model.p = *p;
  } else if (!f.ge.empty()) {
    auto m = ParseGilbertElliott(f.ge);
    if (!m.ok()) return m.status();
    r.model = *m;
  } else if (f.every) {
    r.model.kind = LossModel::Kind::kEveryNth;
    r.model.n = f.every;
  } else {
    r.model.kind = LossModel::Kind::kFirstK;
    r.model.n = f.first;
  }
  if (f.seeded) r.seed = f.seed;
  if (!f.ttl.empty()) {
    auto d = ParseDuration(f.ttl);
    if (!d.ok()) return d.status();
    r.ttl = *d;
  }
  return Validate(r);
}

double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// final_counters: the counters Remove() returned (the rule is gone by then).
void Report(const Injector& inj, uint32_t id, bool json, bool final,
            const RuleCounters* final_counters = nullptr) {
  Result<RuleCounters> c = final_counters ? Result<RuleCounters>(*final_counters) : inj.Counters(id);
  HookCounters h[LOSS_HOOK_MAX];
  for (int i = 0; i < LOSS_HOOK_MAX; i++) h[i] = inj.HookTotals(i);
  if (json) {
    std::string hooks;
    for (int i = 0; i < LOSS_HOOK_MAX; i++) {
      char buf[256];
      snprintf(buf, sizeof(buf),
               "%s\"%s\":{\"seen\":%" PRIu64 ",\"passed\":%" PRIu64 ",\"dropped\":%" PRIu64
               ",\"unparsable\":%" PRIu64 ",\"always_pass\":%" PRIu64 ",\"lease_expired\":%" PRIu64 "}",
               i ? "," : "", LossHookName(i), h[i].seen, h[i].passed, h[i].dropped,
               h[i].unparsable, h[i].always_pass, h[i].lease_expired);
      hooks += buf;
    }
    if (c.ok()) {
      printf("{\"event\":\"%s\",\"time\":%.3f,\"rule\":%u,\"matched_pkts\":%" PRIu64
             ",\"matched_segs\":%" PRIu64 ",\"matched_bytes\":%" PRIu64 ",\"dropped_pkts\":%" PRIu64
             ",\"dropped_segs\":%" PRIu64 ",\"dropped_bytes\":%" PRIu64 ",\"hooks\":{%s}}\n",
             final ? "final" : "counters", Now(), id, c->matched_pkts, c->matched_segs,
             c->matched_bytes, c->dropped_pkts, c->dropped_segs, c->dropped_bytes, hooks.c_str());
    } else {
      printf("{\"event\":\"%s\",\"time\":%.3f,\"rule\":%u,\"status\":\"gone\",\"hooks\":{%s}}\n",
             final ? "final" : "counters", Now(), id, hooks.c_str());
    }
  } else if (c.ok()) {
    double rate = c->matched_segs ? 100.0 * c->dropped_segs / c->matched_segs : 0;
    printf("rule %u: matched %" PRIu64 " pkts / %" PRIu64 " segs, dropped %" PRIu64 " pkts / %" PRIu64
           " segs (%.4f%% of segments)\n",
           id, c->matched_pkts, c->matched_segs, c->dropped_pkts, c->dropped_segs, rate);
  } else {
    printf("rule %u: %s\n", id, c.status().message().c_str());
  }
  fflush(stdout);
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"lossd: eBPF packet-loss injector"};
  app.add_option("--iface,-i", f.rule.iface, "Target interface");
  app.add_option("--cgroup", f.rule.cgroup, "Target cgroup v2 path");
  app.add_option("--hook", f.hook, "auto | xdp | tc | cgroup");
  app.add_option("--dir", f.dir, "ingress | egress | both");
  app.add_option("--src", f.src, "Source address or CIDR");
  app.add_option("--dst", f.dst, "Destination address or CIDR");
  app.add_option("--sport", f.sport, "Source port or LO-HI");
  app.add_option("--dport", f.dport, "Destination port or LO-HI");
  app.add_option("--proto", f.proto, "tcp | udp | icmp | icmpv6 | any | number");
  app.add_option("--family", f.family, "4 | 6 | any");
  app.add_option("--tcp-flags", f.tcp_flags, "e.g. syn,!ack");
  app.add_option("--payload", f.payload, "any | only | none");
  app.add_option("--rate", f.rate, "Bernoulli loss per segment, e.g. 1% or 0.005%");
  app.add_option("--ge", f.ge, "Gilbert-Elliott p,r,1-h,1-k (netem gemodel)");
  app.add_option("--every", f.every, "Drop every N-th packet of each flow");
  app.add_option("--first", f.first, "Drop the first K packets of each flow");
  app.add_option("--seed", f.seed, "Reproducible per-flow drop sequence")->each([&](const std::string&) { f.seeded = true; });
  app.add_option("--priority", f.rule.priority, "Higher wins among overlapping rules");
  app.add_option("--ttl", f.ttl, "Rule lifetime, e.g. 30s (enforced in BPF)");
  app.add_flag("--per-segment", f.rule.per_segment,
               "Turn GRO/GSO/TSO off on the interface while the rule lives: exact per-segment loss");
  app.add_option("--interval", f.interval, "Counter report interval");
  app.add_option("--duration", f.duration, "Stop after this long (default: until signalled)");
  app.add_option("--lease", f.lease, "Drop nothing once this long passes without lossd renewing");
  app.add_option("--xdp-mode", f.xdp_mode, "auto | native | generic");
  app.add_option("--state-dir", f.state_dir, "Crash-recovery state");
  app.add_flag("--json", f.json, "JSON lines on stdout");
  app.add_flag("--observe", f.observe, "Run the TCP observer (totals at exit; implies --json)");
  app.add_flag("--events", f.events, "Print every retransmission and flow close (implies --observe)");
  app.add_option("--watch-port", f.watch_ports, "Observe only sockets with this local/remote port (range); repeatable, OR; filters in the kernel (also in daemon mode)");
  app.add_option("--watch-addr", f.watch_addrs, "Observe only sockets with this local/remote address (CIDR); repeatable, OR");
  app.add_option("--watch-cgroup", f.watch_cgroups, "Observe only sockets of this cgroup id; repeatable, OR");
  app.add_option("--log-level", f.log_level, "debug | info | warn | error");
  auto* daemon = app.add_option_group("daemon", "Serving the gRPC API (when no rule or --observe is given)");
  daemon->add_option("--socket", f.socket, "Unix socket (mode 0660); empty: none");
  daemon->add_option("--listen", f.listen, "Also listen on TCP host:port (TLS unless loopback)");
  daemon->add_option("--tls-cert", f.tls_cert, "Server certificate (PEM)");
  daemon->add_option("--tls-key", f.tls_key, "Server key (PEM)");
  daemon->add_option("--tls-client-ca", f.tls_client_ca, "Require client certificates from this CA (mutual TLS)");
  daemon->add_flag("--insecure-tcp", f.insecure_tcp, "Allow plaintext TCP on a non-loopback address");
  daemon->add_option("--max-rules", f.max_rules, "Most rules at once");
  daemon->add_option("--max-ttl", f.max_ttl, "Every rule must expire within this (e.g. 1h); default: no limit");
  daemon->add_flag("--no-observer", f.no_observer, "Do not run the TCP observer");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  LogLevel level;
  if (!ParseLogLevel(f.log_level.c_str(), &level)) {
    fprintf(stderr, "lossd: --log-level must be debug, info, warn or error\n");
    return 2;
  }
  SetLogLevel(level);
  RouteLibbpfLogs();
  if (f.events) f.observe = true;
  if (f.observe) f.json = true;
  std::vector<ObsFilterSpec> filters;
  for (const auto& p : f.watch_ports) {
    auto r = ParsePortRange(p);
    if (!r.ok()) {
      fprintf(stderr, "lossd: --watch-port: %s\n", r.status().message().c_str());
      return 2;
    }
    ObsFilterSpec fs;
    fs.ports = *r;
    filters.push_back(fs);
  }
  for (const auto& a : f.watch_addrs) {
    auto c = ParseCidr(a);
    if (!c.ok()) {
      fprintf(stderr, "lossd: --watch-addr: %s\n", c.status().message().c_str());
      return 2;
    }
    ObsFilterSpec fs;
    fs.addr = *c;
    filters.push_back(fs);
  }
  for (uint64_t cg : f.watch_cgroups) {
    ObsFilterSpec fs;
    fs.cgroup_id = cg;
    filters.push_back(fs);
  }

  InjectorOptions opts;
  auto lease = ParseDuration(f.lease);
  auto interval = ParseDuration(f.interval);
  std::chrono::nanoseconds duration{0};
  if (!f.duration.empty()) {
    auto d = ParseDuration(f.duration);
    if (!d.ok()) {
      fprintf(stderr, "lossd: --duration: %s\n", d.status().message().c_str());
      return 2;
    }
    duration = *d;
  }
  if (!lease.ok() || !interval.ok() || interval->count() <= 0) {
    fprintf(stderr, "lossd: %s\n",
            (!lease.ok() ? lease.status() : interval.ok() ? InvalidArgument("--interval must be > 0") : interval.status())
                .message().c_str());
    return 2;
  }
  opts.lease = std::chrono::duration_cast<std::chrono::milliseconds>(*lease);
  opts.state_dir = f.state_dir;
  if (f.xdp_mode == "native") opts.xdp_mode = XdpMode::kNative;
  else if (f.xdp_mode == "generic") opts.xdp_mode = XdpMode::kGeneric;
  else if (f.xdp_mode != "auto") {
    fprintf(stderr, "lossd: --xdp-mode must be auto, native or generic\n");
    return 2;
  }
  if (!HasRule(f) && !f.observe) {
    DaemonOptions d;
    d.socket = f.socket;
    d.listen = f.listen;
    d.tls_cert = f.tls_cert;
    d.tls_key = f.tls_key;
    d.tls_client_ca = f.tls_client_ca;
    d.insecure_tcp = f.insecure_tcp;
    opts.limits.max_rules = f.max_rules;
    if (!f.max_ttl.empty()) {
      auto t = ParseDuration(f.max_ttl);
      if (!t.ok() || t->count() <= 0) {
        fprintf(stderr, "lossd: --max-ttl: %s\n", t.ok() ? "must be > 0" : t.status().message().c_str());
        return 2;
      }
      opts.limits.max_ttl_ns = static_cast<uint64_t>(t->count());
    }
    d.injector = opts;
    d.observer = !f.no_observer;
    d.observer_filters = filters;  // --watch-*: pushed into the kernel for every subscriber
    return RunDaemon(d);
  }
  if (HasRule(f)) {
    Status st = BuildRule(f);
    if (!st.ok()) {
      fprintf(stderr, "lossd: %s\n", st.message().c_str());
      return 2;
    }
  }

  // Signals are taken synchronously in the loop below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto inj = Injector::Create(opts);
  if (!inj.ok()) {
    fprintf(stderr, "lossd: %s\n", inj.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Observer> obs;
  std::shared_ptr<Subscription> sub;
  std::thread printer;
  std::atomic<bool> printing{true};
  if (f.observe) {
    ObserverOptions oo;
    oo.filters = filters;
    auto o = Observer::Create(oo);
    if (!o.ok()) {
      fprintf(stderr, "lossd: %s\n", o.status().ToString().c_str());
      return 1;
    }
    obs = std::move(*o);
    for (const auto& h : obs->hooks())
      if (!h.attached) LOG_WARN("observer: %s not attached: %s", h.name.c_str(), h.error.c_str());
    if (f.events) {
      sub = obs->hub().Subscribe(1 << 16);
      printer = std::thread([&] {
        for (;;) {
          auto e = sub->Next(std::chrono::milliseconds(100));
          if (e) {
            printf("%s\n", EventJson(*e).c_str());
          } else if (!printing) {
            break;
          }
        }
        fflush(stdout);
      });
    }
  }

  uint32_t id = 0;
  if (HasRule(f)) {
    auto r = (*inj)->Add(f.rule);
    if (!r.ok()) {
      fprintf(stderr, "lossd: %s\n", r.status().ToString().c_str());
      return 1;
    }
    id = *r;
    auto info = (*inj)->Get(id);
    std::string hooks;
    for (const auto& h : info->hooks) hooks += (hooks.empty() ? "" : ", ") + h;
    if (f.json)
      printf("{\"event\":\"ready\",\"rule\":%u,\"pid\":%d,\"hooks\":\"%s\"}\n", id, getpid(), hooks.c_str());
    else
      printf("rule %u active: %s\n", id, hooks.c_str());
  } else {  // --observe alone
    if (f.json) printf("{\"event\":\"ready\",\"pid\":%d}\n", getpid());
  }
  fflush(stdout);

  double start = Now();
  for (;;) {
    auto wait = *interval;
    if (duration.count() > 0) {
      double left = start + duration.count() / 1e9 - Now();
      if (left <= 0) break;
      if (left < wait.count() / 1e9) wait = std::chrono::nanoseconds(int64_t(left * 1e9));
    }
    struct timespec ts = {static_cast<time_t>(wait.count() / 1000000000),
                          static_cast<long>(wait.count() % 1000000000)};
    int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      LOG_INFO("signal %d: detaching", sig);
      break;
    }
    if (id) Report(**inj, id, f.json, false);
  }
  if (obs) {
    obs->Drain();
    if (printer.joinable()) {
      printing = false;  // the printer empties its queue, then stops
      printer.join();
    }
    ObsTotals t = obs->Totals();
    printf("%s\n", TotalsJson(t, obs->hooks()).c_str());
    if (sub)
      printf("{\"event\":\"subscriber\",\"delivered\":%llu,\"lost\":%llu}\n",
             (unsigned long long)sub->delivered(), (unsigned long long)sub->lost());
    for (const auto& fl : obs->Flows()) printf("{\"event\":\"flow\",\"flow\":%s}\n", FlowJson(fl).c_str());
  }
  if (id) {
    // Detach first, then report: no drop can happen after the final count.
    auto gone = (*inj)->Remove(id);
    Report(**inj, id, f.json, true, gone.ok() ? &gone->counters : nullptr);
  }
  fflush(stdout);
  return 0;  // the injector's destructor detaches everything
}

}  // namespace
}  // namespace lossd

int main(int argc, char** argv) { return lossd::Main(argc, argv); }
