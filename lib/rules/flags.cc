#include "rules/flags.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace lossd {
namespace {

// "--rate: <the parser's message>"
Status Named(const std::string& name, const Status& st) {
  return Status(st.code(), name + ": " + st.message());
}

template <typename T>
Status Set(const std::string& name, Result<T> r, T* out) {
  if (!r.ok()) return Named(name, r.status());
  *out = std::move(*r);
  return Status::Ok();
}

Status Ports(const std::string& name, const std::string& text, PortRange* out) {
  if (text.empty()) return Status::Ok();
  LOSSD_RETURN_IF_ERROR(Set(name, ParsePortRange(text), out));
  if (out->hi == 0)
    return InvalidArgument(name +
                           ": port 0 cannot be matched (the API reads port 0 as any port): omit " +
                           name + " to match any port");
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseWholeNumber(const std::string& text, uint64_t min, uint64_t max,
                                  const std::string& name) {
  uint64_t v;
  if (!ParseDecimal(TrimSpace(text), min, max, &v))
    return InvalidArgument(name + ": invalid value '" + Shown(text) +
                           "': expected a whole number from " + std::to_string(min) + " to " +
                           std::to_string(max));
  return v;
}

Result<RuleSpec> BuildRuleSpec(const RuleFlags& f, const std::string& dash) {
  auto name = [&](const char* n) { return dash + n; };
  RuleSpec r;
  r.iface = f.iface;
  r.cgroup = f.cgroup;
  if (!f.pid.empty()) {
    auto pid = ParseWholeNumber(f.pid, 1, INT32_MAX, name("pid"));
    if (!pid.ok()) return pid.status();
    r.service.pid = static_cast<uint32_t>(*pid);
  }
  r.service.unit = f.unit;
  r.service.container = f.container;
  r.service.pod = f.pod;
  LOSSD_RETURN_IF_ERROR(Set(name("hook"), ParseHook(f.hook), &r.hook));
  LOSSD_RETURN_IF_ERROR(Set(name("dir"), ParseDirection(f.dir), &r.dir));
  for (auto [flag, text, out] :
       {std::make_tuple("src", &f.src, &r.src), std::make_tuple("dst", &f.dst, &r.dst)}) {
    if (text->empty()) continue;
    Cidr c;
    LOSSD_RETURN_IF_ERROR(Set(name(flag), ParseCidr(*text), &c));
    *out = c;
  }
  LOSSD_RETURN_IF_ERROR(Ports(name("sport"), f.sport, &r.sport));
  LOSSD_RETURN_IF_ERROR(Ports(name("dport"), f.dport, &r.dport));
  LOSSD_RETURN_IF_ERROR(Set(name("proto"), ParseProtocol(f.proto), &r.l4proto));
  LOSSD_RETURN_IF_ERROR(Set(name("family"), ParseFamily(f.family), &r.family));
  if (!f.tcp_flags.empty()) {
    Status st = ParseTcpFlags(f.tcp_flags, &r.tcp_flags_mask, &r.tcp_flags_value);
    if (!st.ok()) return Named(name("tcp-flags"), st);
  }
  LOSSD_RETURN_IF_ERROR(Set(name("payload"), ParsePayload(f.payload), &r.payload));

  int models = !f.rate.empty() + !f.ge.empty() + !f.every.empty() + !f.first.empty() +
               !f.ramp.empty() + !f.markov.empty() + !f.police.empty();
  std::string model_flags = name("rate") + ", " + name("ge") + ", " + name("every") + ", " +
                            name("first") + ", " + name("ramp") + ", " + name("markov") + " or " +
                            name("police");
  if (models == 0) return InvalidArgument("a loss model is needed: give " + model_flags);
  if (models > 1)
    return InvalidArgument("one loss model per rule: give only one of " + model_flags);
  if (!f.rate.empty()) {
    r.model.kind = LossModel::Kind::kBernoulli;
    LOSSD_RETURN_IF_ERROR(Set(name("rate"), ParseRate(f.rate), &r.model.p));
  } else if (!f.ge.empty()) {
    LOSSD_RETURN_IF_ERROR(Set(name("ge"), ParseGilbertElliott(f.ge), &r.model));
  } else if (!f.markov.empty()) {
    LOSSD_RETURN_IF_ERROR(Set(name("markov"), ParseMarkov(f.markov), &r.model));
  } else if (!f.police.empty()) {
    LOSSD_RETURN_IF_ERROR(Set(name("police"), ParsePolice(f.police), &r.model));
  } else if (!f.ramp.empty()) {
    r.model.kind = LossModel::Kind::kRamp;
    LOSSD_RETURN_IF_ERROR(Set(name("ramp"), ParseRamp(f.ramp), &r.model.steps));
  } else {
    bool every = !f.every.empty();
    auto n =
        ParseWholeNumber(every ? f.every : f.first, 1, UINT32_MAX, name(every ? "every" : "first"));
    if (!n.ok()) return n.status();
    r.model.kind = every ? LossModel::Kind::kEveryNth : LossModel::Kind::kFirstK;
    r.model.n = static_cast<uint32_t>(*n);
  }
  LOSSD_RETURN_IF_ERROR(Set(name("action"), ParseAction(f.action), &r.action));
  if (!f.seed.empty()) {
    auto seed = ParseWholeNumber(f.seed, 0, UINT64_MAX, name("seed"));
    if (!seed.ok()) return seed.status();
    r.seed = *seed;
  }
  if (!f.priority.empty()) {
    auto prio = ParseWholeNumber(f.priority, 0, kMaxPriority, name("priority"));
    if (!prio.ok()) return prio.status();
    r.priority = static_cast<uint32_t>(*prio);
  }
  if (!f.ttl.empty()) {
    std::string t = TrimSpace(f.ttl);
    for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t == "none" || t == "forever")
      r.ttl = std::chrono::nanoseconds(0);
    else
      LOSSD_RETURN_IF_ERROR(Set(name("ttl"), ParseDuration(f.ttl), &r.ttl));
    r.ttl_given = true;
  }
  if (!f.start_after.empty())
    LOSSD_RETURN_IF_ERROR(
        Set(name("start-after"), ParseDuration(f.start_after), &r.schedule.start_after));
  if (!f.pulse.empty()) {
    Status st = ParsePulse(f.pulse, &r.schedule);
    if (!st.ok()) return Named(name("pulse"), st);
  }
  if (!f.pulse_cycles.empty()) {
    if (f.pulse.empty())
      return InvalidArgument(name("pulse-cycles") + ": counts the active windows of " +
                             name("pulse") + ": give " + name("pulse") + " too");
    auto k = ParseWholeNumber(f.pulse_cycles, 1, kMaxPulseCycles, name("pulse-cycles"));
    if (!k.ok()) return k.status();
    r.schedule.cycles = static_cast<uint32_t>(*k);
  }
  if (!f.guard.empty()) {
    Status st = ParseGuard(f.guard, &r.guard);
    if (!st.ok()) return Named(name("guard"), st);
  }
  r.per_segment = f.per_segment;
  r.reattach = f.reattach;

  Status st = Validate(r);
  if (!st.ok()) {
    if (r.iface.empty() && !NamesCgroup(r))
      return Status(st.code(), st.message() + " (" + name("iface") + " and/or one of " +
                                   name("cgroup") + ", " + name("pid") + ", " + name("unit") +
                                   ", " + name("container") + ", " + name("pod") + ")");
    return st;
  }
  return r;
}

void AddRuleOptions(CLI::App* app, RuleFlags* f) {
  app->add_option("--iface,-i", f->iface, "Target interface");
  app->add_option("--cgroup", f->cgroup, "Target cgroup v2 path");
  app->add_option("--pid", f->pid, "Target the cgroup of process PID");
  app->add_option("--unit", f->unit,
                  "Target a systemd unit's cgroup: NAME[.service|.scope|.slice]");
  app->add_option("--container", f->container,
                  "Target a container's cgroup (docker, containerd, CRI-O, podman): ID or prefix");
  app->add_option("--pod", f->pod,
                  "Target a pod's cgroup: UID, or NAMESPACE/NAME (kubectl on lossd's PATH); "
                  "with --container, that container of the pod");
  app->add_option("--hook", f->hook, "auto (default) | xdp | tc | cgroup");
  app->add_option("--dir", f->dir, "ingress (default, or in) | egress (out) | both");
  app->add_option("--src", f->src, "Source address or CIDR (IPv4 or IPv6)");
  app->add_option("--dst", f->dst, "Destination address or CIDR");
  app->add_option("--sport", f->sport, "Source port or LO-HI (LO:HI)");
  app->add_option("--dport", f->dport, "Destination port or LO-HI (LO:HI)");
  app->add_option("--proto", f->proto, "tcp | udp | icmp | icmpv6 | any | 0-255");
  app->add_option("--family", f->family, "4 (ipv4, inet) | 6 (ipv6, inet6) | any (default)");
  app->add_option("--tcp-flags", f->tcp_flags, "Flags set, ! for clear, e.g. syn,!ack");
  app->add_option("--payload", f->payload, "any (default) | only | none");
  app->add_option("--rate", f->rate,
                  "Loss model: Bernoulli rate per segment, e.g. 1%, 0.005%, 50ppm or 0.01");
  app->add_option("--ge", f->ge,
                  "Loss model: Gilbert-Elliott p,r,1-h,1-k (netem gemodel), e.g. 1%,20%");
  app->add_option("--every", f->every, "Loss model: drop every N-th packet of each flow");
  app->add_option("--ramp", f->ramp,
                  "Loss model: Bernoulli by steps RATE/DURATION,..., e.g. 0.1%/2s,1%/2s,5%/2s "
                  "(the data plane's clock; each step counted apart; the rule ends after the last)");
  app->add_option("--first", f->first, "Loss model: drop the first K packets of each flow");
  app->add_option("--markov", f->markov,
                  "Loss model: netem's 4-state Markov p13,p31,p32,p23,p14 (loss state), e.g. "
                  "1%,30%,10%,40%,0.1%");
  app->add_option("--police", f->police,
                  "Loss model: a policer's token bucket RATE,BURST[,flow|rule] (tc's units), "
                  "e.g. 50mbit,64kib: what exceeds it is dropped (or marked: --action ecn); "
                  "one bucket for the rule, or with ,flow one per flow (5-tuple)");
  app->add_option("--action", f->action,
                  "What to do with the packets the model picks: drop (default) | corrupt (a "
                  "flipped bit the receiver's checksum check discards) | corrupt-payload (wrong "
                  "bytes, valid checksums) | duplicate | ecn (mark ECT packets CE, drop the "
                  "others) | ecn-pass (mark ECT packets CE, pass the others); all but drop at tc");
  app->add_option("--seed", f->seed, "Same seed, same packets: same drops (per flow)");
  app->add_option("--priority", f->priority, "Highest wins among overlapping rules (0-1000000)");
  app->add_option("--ttl", f->ttl,
                  "Lifetime, e.g. 30s, 5m, 2m30s, 1d (enforced in BPF); 0 or none: until deleted; "
                  "default: the daemon's --default-ttl");
  app->add_option("--start-after", f->start_after,
                  "Drop only from this long after creation, e.g. 2s (the data plane's clock)");
  app->add_option("--pulse", f->pulse,
                  "Drop in pulses ACTIVE/DORMANT, e.g. 200ms/800ms (each 1ms..1d; the data "
                  "plane's clock): dormant, the rule matches nothing");
  app->add_option("--pulse-cycles", f->pulse_cycles,
                  "End the rule (EXPIRED) after this many active windows (default: at its TTL)");
  app->add_option("--guard", f->guard,
                  "Stop the rule (STOPPED) in the kernel when TCP says enough: stall>DURATION "
                  "(a flow it dropped from stalls that long), rtos>N/WINDOW (more than N RTOs "
                  "of its drops in WINDOW), resends>N/WINDOW (more than N resends of any "
                  "type), resets>N/WINDOW (more than N of its flows reset or aborted), "
                  "retrans>RATE/WINDOW (a flow's retransmit share), misbehaves (its loss above "
                  "its rate's 99.9 % interval), stall(rto)>D (a stall of that cause), "
                  "comma-separated; watch=PORT judges that port's flows instead, e.g. "
                  "stall>500ms,rtos>5/2s or stall>1s,watch=8080");
  app->add_flag("--per-segment", f->per_segment,
                "Exact per-segment loss: GSO/GRO off on the interface while the rule lives");
  app->add_flag("--reattach", f->reattach,
                "If the interface is deleted, attach again when one of that name appears (the "
                "rule is FAILED meanwhile)");
}

std::string* RuleFlagsField(RuleFlags* f, const std::string& name) {
  static const std::pair<const char*, std::string RuleFlags::*> kFields[] = {
      {"iface", &RuleFlags::iface},
      {"cgroup", &RuleFlags::cgroup},
      {"pid", &RuleFlags::pid},
      {"unit", &RuleFlags::unit},
      {"container", &RuleFlags::container},
      {"pod", &RuleFlags::pod},
      {"hook", &RuleFlags::hook},
      {"dir", &RuleFlags::dir},
      {"src", &RuleFlags::src},
      {"dst", &RuleFlags::dst},
      {"sport", &RuleFlags::sport},
      {"dport", &RuleFlags::dport},
      {"proto", &RuleFlags::proto},
      {"family", &RuleFlags::family},
      {"tcp_flags", &RuleFlags::tcp_flags},
      {"payload", &RuleFlags::payload},
      {"rate", &RuleFlags::rate},
      {"ge", &RuleFlags::ge},
      {"every", &RuleFlags::every},
      {"first", &RuleFlags::first},
      {"seed", &RuleFlags::seed},
      {"priority", &RuleFlags::priority},
      {"ttl", &RuleFlags::ttl},
      {"start_after", &RuleFlags::start_after},
      {"pulse", &RuleFlags::pulse},
      {"pulse_cycles", &RuleFlags::pulse_cycles},
      {"guard", &RuleFlags::guard},
      {"ramp", &RuleFlags::ramp},
      {"action", &RuleFlags::action},
      {"markov", &RuleFlags::markov},
      {"police", &RuleFlags::police}};
  for (const auto& [n, m] : kFields)
    if (name == n) return &(f->*m);
  return nullptr;
}

}  // namespace lossd
