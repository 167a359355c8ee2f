#include "http/metrics.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/fd.h"
#include "host/targets.h"
#include "observer/format.h"
#include "rules/model.h"

namespace lossd {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// One family being filled.
class Fam {
 public:
  Fam(std::vector<MetricFamily>* out, const char* name, const char* help, MetricType type)
      : out_(out) {
    f_.name = name;
    f_.help = help;
    f_.type = type;
  }
  ~Fam() {
    if (!f_.metric.empty()) out_->push_back(std::move(f_));
  }
  void Add(Labels labels, double v) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f_.type == MetricType::Counter)
      m.counter.value = v;
    else
      m.gauge.value = v;
    f_.metric.push_back(std::move(m));
  }

 private:
  std::vector<MetricFamily>* out_;
  MetricFamily f_;
};

const char* StateName(ComponentState s) {
  switch (s) {
    case ComponentState::kLoading: return "loading";
    case ComponentState::kReady: return "ready";
    case ComponentState::kFailed: return "failed";
    case ComponentState::kDisabled: return "disabled";
  }
  return "unknown";
}

const char* ModelName(const LossModel& m) {
  switch (m.kind) {
    case LossModel::Kind::kBernoulli: return "bernoulli";
    case LossModel::Kind::kGilbertElliott: return "gilbert_elliott";
    case LossModel::Kind::kEveryNth: return "every_nth";
    case LossModel::Kind::kFirstK: return "first_k";
  }
  return "unknown";
}

std::string LabelsText(const std::map<std::string, std::string>& labels) {
  std::string s;
  for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

void ComponentMetrics(const Components& parts, std::vector<MetricFamily>* out) {
  Fam st(out, "lossd_component_state",
         "1 for the state each part of lossd is in (loading, ready, failed, disabled)",
         MetricType::Gauge);
  const std::pair<const char*, ComponentStatus> comps[] = {{"injector", parts.injector_status()},
                                                           {"observer", parts.observer_status()}};
  for (const auto& [name, s] : comps) {
    for (ComponentState state : {ComponentState::kLoading, ComponentState::kReady,
                                 ComponentState::kFailed, ComponentState::kDisabled})
      st.Add({{"component", name}, {"state", StateName(state)}}, s.state == state ? 1 : 0);
  }
}

void InjectorMetrics(const Injector& inj, const Components& parts, EffectTracker* effects,
                     const MetricsOptions& opts, std::vector<MetricFamily>* out) {
  std::vector<RuleInfo> rules = inj.Rules();
  {
    Fam f(out, "lossd_rules", "Rules lossd holds, live or expired (kept listed)",
          MetricType::Gauge);
    size_t expired =
        std::count_if(rules.begin(), rules.end(), [](const RuleInfo& r) { return r.expired; });
    f.Add({{"state", "live"}}, double(rules.size() - expired));
    f.Add({{"state", "expired"}}, double(expired));
  }
  Fam(out, "lossd_rules_max", "Most live rules at once (--max-rules)", MetricType::Gauge)
      .Add({}, parts.limits().max_rules);
  Fam(out, "lossd_lease_remaining_seconds",
      "Time before the data plane stops dropping unless lossd renews its lease", MetricType::Gauge)
      .Add({}, double(inj.LeaseRemainingNs()) / 1e9);
  {
    Capabilities caps = parts.caps();
    Fam f(out, "lossd_injector_hook_available",
          "1 if this kernel lets lossd attach the injector at this hook (probed at start)",
          MetricType::Gauge);
    f.Add({{"hook", "xdp"}}, caps.xdp);
    f.Add({{"hook", "tcx"}}, caps.tcx);
    f.Add({{"hook", "clsact"}}, caps.clsact);
    f.Add({{"hook", "cgroup_skb"}}, caps.cgroup_skb && !caps.cgroup2.empty());
  }
  {
    std::vector<ProgLoadStats> loaded = inj.LoadedPrograms();
    Fam f(out, "lossd_injector_program_loaded",
          "1 if the injector's program is loaded (each loads with the first rule that needs it)",
          MetricType::Gauge);
    Fam verified(out, "lossd_injector_program_verified_instructions",
                 "Instructions the verifier processed to load the program", MetricType::Gauge);
    for (const auto& p : loaded) {
      f.Add({{"program", p.name}}, 1);
      verified.Add({{"program", p.name}}, p.verified_insns);
    }
  }
  {
    Fam seen(out, "lossd_hook_seen_packets_total", "Packets the injector's hook program ran on",
             MetricType::Counter);
    Fam passed(out, "lossd_hook_passed_packets_total",
               "Packets the hook passed (no rule matched, not dropped, or not IP)",
               MetricType::Counter);
    Fam dropped(out, "lossd_hook_dropped_packets_total", "Packets the hook dropped",
                MetricType::Counter);
    Fam unparsable(out, "lossd_hook_unparsable_packets_total",
                   "Packets the hook could not parse (truncated, malformed): passed",
                   MetricType::Counter);
    Fam always(out, "lossd_hook_always_pass_packets_total",
               "ARP and IPv6 neighbour discovery packets, always passed", MetricType::Counter);
    Fam lease(out, "lossd_hook_lease_expired_packets_total",
              "Packets a dropping rule matched after the lease ran out: passed",
              MetricType::Counter);
    for (int h = 0; h < LOSS_HOOK_MAX; h++) {
      HookCounters c = inj.HookTotals(h);
      Labels l{{"hook", LossHookName(h)}};
      seen.Add(l, c.seen);
      passed.Add(l, c.passed);
      dropped.Add(l, c.dropped);
      unparsable.Add(l, c.unparsable);
      always.Add(l, c.always_pass);
      lease.Add(l, c.lease_expired);
    }
  }

  {  // what the live rules hold attached (shared per interface/cgroup and hook)
    std::set<std::string> attached;
    for (const RuleInfo& r : rules)
      if (!r.expired) attached.insert(r.hooks.begin(), r.hooks.end());
    Fam f(out, "lossd_injector_attached",
          "1 for each attachment the live rules hold (e.g. \"tcx ingress to eth0\")",
          MetricType::Gauge);
    for (const std::string& a : attached) f.Add({{"attachment", a}}, 1);
  }

  // Per rule, capped: live rules first, then expired ones, each by id.
  std::stable_sort(rules.begin(), rules.end(), [](const RuleInfo& a, const RuleInfo& b) {
    return a.expired != b.expired ? !a.expired : a.id < b.id;
  });
  size_t shown = std::min<size_t>(rules.size(), opts.max_rules);
  Fam(out, "lossd_metrics_rules_omitted",
      "Rules without per-rule series here (over --metrics-max-rules)", MetricType::Gauge)
      .Add({}, double(rules.size() - shown));
  Fam info(out, "lossd_rule_info", "A rule's target and model (value 1)", MetricType::Gauge);
  Fam live(out, "lossd_rule_live", "1 while the rule drops, 0 once expired or failed",
           MetricType::Gauge);
  Fam mp(out, "lossd_rule_matched_packets_total", "Packets (skbs) the rule matched",
         MetricType::Counter);
  Fam ms(out, "lossd_rule_matched_segments_total", "Wire segments (gso_segs) the rule matched",
         MetricType::Counter);
  Fam mb(out, "lossd_rule_matched_bytes_total", "Bytes the rule matched", MetricType::Counter);
  Fam dp(out, "lossd_rule_dropped_packets_total", "Packets (skbs) the rule dropped",
         MetricType::Counter);
  Fam ds(out, "lossd_rule_dropped_segments_total", "Wire segments the rule dropped",
         MetricType::Counter);
  Fam db(out, "lossd_rule_dropped_bytes_total", "Bytes the rule dropped", MetricType::Counter);
  Fam conf(out, "lossd_rule_configured_loss_ratio",
           "The rule's configured long-run loss rate (absent for first-k)", MetricType::Gauge);
  Fam meas(out, "lossd_rule_measured_loss_ratio",
           "Dropped over matched segments since the rule was created", MetricType::Gauge);
  Fam lo(out, "lossd_rule_measured_loss_low_ratio",
         "Low end of the 99.9 % interval of the rule's drop rate (per packet)", MetricType::Gauge);
  Fam hi(out, "lossd_rule_measured_loss_high_ratio",
         "High end of the 99.9 % interval of the rule's drop rate (per packet)", MetricType::Gauge);
  Fam rtx(out, "lossd_rule_retransmitted_segments_total",
          "Retransmitted segments, by type, of the flows the rule matched", MetricType::Counter);
  Fam logged(out, "lossd_rule_drops_recorded_total",
             "Dropped TCP packets with payload whose sequence range the drop log recorded",
             MetricType::Counter);
  Fam linked(out, "lossd_rule_linked_retransmits_total",
             "Resends, by type, linked to one of the rule's drops (the range they resent)",
             MetricType::Counter);
  Fam recovery(out, "lossd_rule_recovery_seconds_total",
               "Drop-to-resend time, by resend type, summed over the linked resends",
               MetricType::Counter);
  Fam limit(out, "lossd_rule_flow_limit_seconds_total",
            "Seconds by limit (busy, its parts, idle) of the flows the rule matched while it was "
            "live: closed ones and the open ones as of this scrape",
            MetricType::Counter);
  Fam fstalls(out, "lossd_rule_flow_stalls_total",
              "Stalls, by cause, on the flows the rule matched", MetricType::Counter);
  Fam fstall_s(out, "lossd_rule_flow_stall_seconds_total",
               "Stall time, by cause, on the flows the rule matched", MetricType::Counter);
  Fam cstalls(out, "lossd_rule_caused_stalls_total",
              "Stalls, by cause, whose hole one of the rule's drops covers", MetricType::Counter);
  Fam cstall_s(out, "lossd_rule_caused_stall_seconds_total",
               "Stall time, by cause, of the stalls the rule's drops caused", MetricType::Counter);
  std::vector<RuleEffect> fx;
  if (effects) fx = effects->Effects(std::vector<RuleInfo>(rules.begin(), rules.begin() + shown));
  for (size_t i = 0; i < shown; i++) {
    const RuleInfo& r = rules[i];
    const std::string id = std::to_string(r.id);
    const RuleSpec& s = r.spec;
    // The target's owner as a user names it (docs/targeting.md): only on
    // these per-rule series, never per flow.
    CgroupOwner owner = r.cgroup.empty() ? CgroupOwner{} : CgroupOwnerOf(r.CgroupRelative());
    Labels il{{"rule", id},
              {"interface", s.iface},
              {"cgroup", r.cgroup.empty() ? s.cgroup : r.CgroupRelative()},
              {"direction", DirectionName(s.dir)},
              {"hook", HookName(s.hook)},
              {"model", ModelName(s.model)},
              {"labels", LabelsText(s.labels)}};
    // Only for a target that is one (Prometheus: an empty label is no label).
    if (!owner.unit.empty()) il.push_back({"unit", owner.unit});
    if (!owner.container.empty()) il.push_back({"container", owner.container});
    if (!owner.pod.empty()) il.push_back({"pod", owner.pod});
    info.Add(il, 1);
    Labels l{{"rule", id}};
    live.Add(l, r.expired || !r.failed.empty() ? 0 : 1);
    const RuleCounters& c = r.counters;
    mp.Add(l, c.matched_pkts);
    ms.Add(l, c.matched_segs);
    mb.Add(l, c.matched_bytes);
    dp.Add(l, c.dropped_pkts);
    ds.Add(l, c.dropped_segs);
    db.Add(l, c.dropped_bytes);
    double configured = ModelMeanLoss(s.model);
    if (configured >= 0) conf.Add(l, configured);
    logged.Add(l, c.logged_pkts);
    if (effects) {
      const RuleEffect& e = fx[i];
      meas.Add(l, e.measured);
      lo.Add(l, e.ci_low);
      hi.Add(l, e.ci_high);
      for (int t = 0; t < OBS_RTX_MAX; t++)
        rtx.Add({{"rule", id}, {"type", RtxTypeName(t)}}, e.caused.segs[t]);
      // Fixed label sets; a cause or type appears once it has happened.
      for (int t = 0; t < OBS_RTX_MAX; t++) {
        const DurationHist& h = e.caused.recovery[t];
        if (!h.count) continue;
        linked.Add({{"rule", id}, {"type", RtxTypeName(t)}}, h.count);
        recovery.Add({{"rule", id}, {"type", RtxTypeName(t)}}, h.sum_ns / 1e9);
      }
      const LimitTotals& lt = e.caused.limits;
      limit.Add({{"rule", id}, {"limit", "busy"}}, lt.busy_ns / 1e9);
      for (size_t k = 0; k < lt.within_busy_ns.size(); k++)
        limit.Add({{"rule", id}, {"limit", LimitName(static_cast<Limit>(k))}},
                  lt.within_busy_ns[k] / 1e9);
      limit.Add({{"rule", id}, {"limit", "idle"}}, lt.idle_ns / 1e9);
      for (int cause = 0; cause < OBS_STALL_MAX; cause++) {
        Labels cl{{"rule", id}, {"cause", StallCauseName(cause)}};
        const StallTotal& on = e.caused.stalls_on_flows[cause];
        if (on.count) {
          fstalls.Add(cl, on.count);
          fstall_s.Add(cl, on.time_ns / 1e9);
        }
        const StallTotal& by = e.caused.stalls_caused[cause];
        if (by.count) {
          cstalls.Add(cl, by.count);
          cstall_s.Add(cl, by.time_ns / 1e9);
        }
      }
    }
  }
}

void ObserverMetrics(Observer& obs, EffectTracker* effects, const MetricsOptions& opts,
                     std::vector<MetricFamily>* out) {
  ObsTotals t = obs.Totals();
  {
    Fam segs(out, "lossd_retransmitted_segments_total",
             "TCP retransmitted segments by type and outcome (sums to the kernel's "
             "TcpRetransSegs)",
             MetricType::Counter);
    Fam events(out, "lossd_retransmit_events_total",
               "TCP retransmission events (one per resent skb) by type and outcome",
               MetricType::Counter);
    for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
      for (int o = 0; o < OBS_OUTCOME_MAX; o++) {
        Labels l{{"type", RtxTypeName(ty)}, {"outcome", OutcomeName(o)}};
        segs.Add(l, t.by_type[ty][o].segs);
        events.Add(l, t.by_type[ty][o].events);
      }
    }
  }
  {
    Fam lost(out, "lossd_events_lost_total",
             "Observer events lost, by where: the kernel ring buffer (ring), BPF runs the kernel "
             "skipped (recursion), the effect tracker's queue (effects)",
             MetricType::Counter);
    lost.Add({{"source", "ring"}}, t.counters[OBS_CNT_RING_LOST]);
    lost.Add({{"source", "recursion"}}, t.recursion_misses);
    if (effects) lost.Add({{"source", "effects"}}, effects->lost());
  }
  Fam(out, "lossd_events_filtered_total", "Events the kernel-side filters left out",
      MetricType::Counter)
      .Add({}, t.counters[OBS_CNT_FILTERED]);
  Fam(out, "lossd_events_published_total", "Events the observer's hub published",
      MetricType::Counter)
      .Add({}, t.hub_published);
  uint64_t opened = t.counters[OBS_CNT_FLOWS_OPENED], closed = t.counters[OBS_CNT_FLOWS_CLOSED];
  Fam(out, "lossd_flows_open", "TCP flows the observer is tracking now", MetricType::Gauge)
      .Add({}, opened >= closed ? double(opened - closed) : 0);
  Fam(out, "lossd_flows_opened_total", "TCP flows the observer began tracking", MetricType::Counter)
      .Add({}, opened);
  Fam(out, "lossd_flow_table_full_total", "Flows not tracked: the flow table was full",
      MetricType::Counter)
      .Add({}, t.counters[OBS_CNT_FLOW_TABLE_FULL]);
  Fam(out, "lossd_sockets_arm_failed_total",
      "Sockets whose retransmission callback could not be armed", MetricType::Counter)
      .Add({}, t.counters[OBS_CNT_ARM_FAILED]);
  {
    Fam f(out, "lossd_observer_hook_attached", "1 if the observer's program is attached",
          MetricType::Gauge);
    for (const auto& h : obs.hooks()) f.Add({{"hook", h.name}}, h.attached);
  }
  if (opts.top_flows > 0) {  // opt-in: per-flow labels
    std::vector<ObsFlow> flows = obs.Flows();
    auto total = [](const ObsFlow& f) {
      uint64_t s = 0;
      for (uint64_t v : f.flow.rtx_segs) s += v;
      return s;
    };
    std::sort(flows.begin(), flows.end(), [&](const ObsFlow& a, const ObsFlow& b) {
      uint64_t ta = total(a), tb = total(b);
      return ta != tb ? ta > tb : a.cookie < b.cookie;
    });
    Fam f(out, "lossd_flow_retransmitted_segments",
          "Retransmitted segments of the --metrics-top-flows open flows with the most, and of "
          "all others together (flow=\"other\")",
          MetricType::Gauge);
    uint64_t other = 0;
    for (size_t i = 0; i < flows.size(); i++) {
      if (i >= opts.top_flows) {
        other += total(flows[i]);
        continue;
      }
      Json j = FlowJson(flows[i]);
      auto addr = [](const Json& a) {
        std::string s = a.get<std::string>();
        return s.find(':') != std::string::npos ? "[" + s + "]" : s;
      };
      std::string name = addr(j["saddr"]) + ":" + std::to_string(flows[i].flow.tuple.sport) + "->" +
                         addr(j["daddr"]) + ":" + std::to_string(flows[i].flow.tuple.dport);
      f.Add({{"flow", name}}, total(flows[i]));
    }
    f.Add({{"flow", "other"}}, other);
  }
}

void BpfMetrics(std::vector<MetricFamily>* out) {
  bool enabled = BpfStatsEnabled();
  Fam(out, "lossd_bpf_stats_enabled",
      "1 if kernel.bpf_stats_enabled is on (run counts and times are counted only then)",
      MetricType::Gauge)
      .Add({}, enabled);
  std::map<std::string, BpfProgStats> by_name;  // a name loaded twice: summed
  for (const BpfProgStats& p : OwnBpfPrograms()) {
    BpfProgStats& s = by_name[p.name];
    s.run_cnt += p.run_cnt;
    s.run_time_ns += p.run_time_ns;
  }
  Fam cnt(out, "lossd_bpf_program_runs_total",
          "Runs of each of lossd's BPF programs (while kernel.bpf_stats_enabled)",
          MetricType::Counter);
  Fam secs(out, "lossd_bpf_program_run_seconds_total",
           "Time spent in each of lossd's BPF programs (while kernel.bpf_stats_enabled)",
           MetricType::Counter);
  for (const auto& [name, s] : by_name) {
    cnt.Add({{"program", name}}, double(s.run_cnt));
    secs.Add({{"program", name}}, double(s.run_time_ns) / 1e9);
  }
}

void HttpMetrics(const HttpServer& http, std::vector<MetricFamily>* out) {
  HttpStats st = http.stats();
  Fam(out, "lossd_http_requests_total", "HTTP requests answered by a route", MetricType::Counter)
      .Add({}, st.requests);
  {
    Fam f(out, "lossd_http_refused_total",
          "HTTP requests refused: busy (503, over a cap), bad (404, 405, 413, 431)",
          MetricType::Counter);
    f.Add({{"reason", "busy"}}, st.rejected_busy);
    f.Add({{"reason", "bad"}}, st.refused);
  }
  Fam(out, "lossd_http_connections_open", "Open HTTP connections", MetricType::Gauge)
      .Add({}, st.connections_open);
  Fam(out, "lossd_http_streams_open", "Open HTTP streams", MetricType::Gauge)
      .Add({}, st.streams_open);
}

}  // namespace

bool BpfStatsEnabled() {
  std::ifstream in("/proc/sys/kernel/bpf_stats_enabled");
  int v = 0;
  return in >> v && v != 0;
}

std::vector<BpfProgStats> OwnBpfPrograms() {
  std::vector<BpfProgStats> progs;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return progs;
  std::vector<uint32_t> seen;
  int dfd = dirfd(d);
  while (struct dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dfd) continue;
    char target[64] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0 || std::strcmp(target, "anon_inode:bpf-prog") != 0) continue;
    // The fd may have been closed (and reused) since: the info call then
    // fails or returns another program of ours; either is harmless.
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    if (std::find(seen.begin(), seen.end(), info.id) != seen.end()) continue;
    seen.push_back(info.id);
    BpfProgStats s;
    s.name = info.name;
    s.id = info.id;
    s.run_cnt = info.run_cnt;
    s.run_time_ns = info.run_time_ns;
    progs.push_back(std::move(s));
  }
  closedir(d);
  return progs;
}

MetricsCollector::MetricsCollector(MetricsSources src, MetricsOptions opts)
    : src_(std::move(src)), opts_(opts), registry_(std::make_shared<prometheus::Registry>()) {
  scrapes_ = &prometheus::BuildCounter()
                  .Name("lossd_metrics_scrapes_total")
                  .Help("Scrapes of /metrics served")
                  .Register(*registry_)
                  .Add({});
  last_scrape_seconds_ = &prometheus::BuildGauge()
                              .Name("lossd_metrics_last_scrape_duration_seconds")
                              .Help("Time the previous scrape took to collect and serialize")
                              .Register(*registry_)
                              .Add({});
  last_scrape_bytes_ = &prometheus::BuildGauge()
                            .Name("lossd_metrics_last_scrape_bytes")
                            .Help("Size of the previous scrape's text")
                            .Register(*registry_)
                            .Add({});
}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  std::vector<MetricFamily> out;
  Fam(&out, "lossd_build_info", "lossd's version (value 1)", MetricType::Gauge)
      .Add({{"version", LOSSD_VERSION}}, 1);
  const Components& parts = *src_.parts;
  ComponentMetrics(parts, &out);
  EffectTracker* effects = parts.effects();
  if (const Injector* inj = parts.injector()) InjectorMetrics(*inj, parts, effects, opts_, &out);
  if (Observer* obs = parts.observer()) ObserverMetrics(*obs, effects, opts_, &out);
  if (src_.subscribers)
    Fam(&out, "lossd_subscribers", "gRPC stream subscribers of the observer now", MetricType::Gauge)
        .Add({}, src_.subscribers());
  BpfMetrics(&out);
  if (src_.http) HttpMetrics(*src_.http, &out);
  return out;
}

std::string MetricsCollector::Scrape() {
  auto t0 = std::chrono::steady_clock::now();
  scrapes_->Increment();
  std::vector<MetricFamily> families = Collect();
  std::vector<MetricFamily> own = registry_->Collect();
  families.insert(families.end(), std::make_move_iterator(own.begin()),
                  std::make_move_iterator(own.end()));
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families);
  std::string s = text.str();
  last_scrape_seconds_->Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  last_scrape_bytes_->Set(double(s.size()));
  return s;
}

void MetricsCollector::Register(HttpServer* http) {
  http->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace lossd
