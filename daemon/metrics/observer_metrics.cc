// The observer's families: its totals, the events lost and filtered, its
// flows and hooks, and (opt-in, --metrics-top-flows) its busiest flows.
#include <sys/socket.h>

#include <algorithm>

#include "base/address.h"
#include "metrics/families.h"

namespace lossd {
namespace {

using prometheus::MetricType;

// Retransmitted segments of a flow, all types together.
uint64_t FlowRetransmits(const ObsFlow& f) {
  uint64_t s = 0;
  for (uint64_t v : f.flow.rtx_segs) s += v;
  return s;
}

// The `top` flows with the most retransmitted segments, one series each
// (ties by cookie), and all others together (flow="other").
void TopFlowMetrics(std::vector<ObsFlow> flows, uint32_t top, Families* out) {
  std::sort(flows.begin(), flows.end(), [](const ObsFlow& a, const ObsFlow& b) {
    uint64_t ta = FlowRetransmits(a), tb = FlowRetransmits(b);
    return ta != tb ? ta > tb : a.cookie < b.cookie;
  });
  Fam f(out, "lossd_flow_retransmitted_segments",
        "Retransmitted segments of the --metrics-top-flows open flows with the most, and of "
        "all others together (flow=\"other\")",
        MetricType::Gauge);
  uint64_t other = 0;
  for (size_t i = 0; i < flows.size(); i++) {
    if (i >= top) {
      other += FlowRetransmits(flows[i]);
      continue;
    }
    f.Add({{"flow", FlowLabel(flows[i].flow.tuple)}}, FlowRetransmits(flows[i]));
  }
  f.Add({{"flow", "other"}}, other);
}

}  // namespace

std::string FlowLabel(const obs_tuple& t) {
  auto addr = [&t](const uint32_t* a) {
    std::string s = AddrText(t.family, a);
    return t.family == AF_INET6 ? "[" + s + "]" : s;
  };
  return addr(t.saddr) + ":" + std::to_string(t.sport) + "->" + addr(t.daddr) + ":" +
         std::to_string(t.dport);
}

void ObserverMetrics(Observer& obs, EffectTracker* effects, const MetricsOptions& opts,
                     Families* out) {
  ObsTotals t = obs.Totals();
  {
    Fam segs(out, "lossd_retransmitted_segments_total",
             "TCP retransmitted segments of lossd's own network namespace by type and outcome "
             "(sums to its TcpRetransSegs; every namespace: lossd_netns_*)",
             MetricType::Counter);
    Fam events(out, "lossd_retransmit_events_total",
               "TCP retransmission events (one per resent skb) of lossd's own network namespace "
               "by type and outcome",
               MetricType::Counter);
    for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
      for (int o = 0; o < OBS_OUTCOME_MAX; o++) {
        MetricLabels l{{"type", RtxTypeName(ty)}, {"outcome", OutcomeName(o)}};
        segs.Add(l, t.by_type[ty][o].segs);
        events.Add(l, t.by_type[ty][o].events);
      }
    }
  }
  {
    // Per watched network namespace (bounded: OBS_MAX_NETNS and the "other"
    // bucket; never per flow). The unlabelled families above are lossd's own
    // namespace's.
    Fam segs(out, "lossd_netns_retransmitted_segments_total",
             "TCP retransmitted segments (sent and failed) by network namespace (inode; "
             "\"other\": namespaces beyond the observer's table) and type (each namespace's "
             "sum is its TcpRetransSegs)",
             MetricType::Counter);
    NetnsTotals other;
    auto by_ns = obs.TotalsByNetns(0, &other);
    auto add = [&segs](const std::string& label, const NetnsTotals& n) {
      for (int ty = 0; ty < OBS_RTX_MAX; ty++)
        segs.Add({{"netns", label}, {"type", RtxTypeName(ty)}},
                 n.by_type[ty][OBS_SENT].segs + n.by_type[ty][OBS_FAILED].segs);
    };
    for (const NetnsTotals& n : by_ns) add(std::to_string(n.ino), n);
    add("other", other);
  }
  {
    Fam lost(out, "lossd_events_lost_total",
             "Observer events lost, by where: the kernel ring buffer (ring), the effect "
             "tracker's queue (effects)",
             MetricType::Counter);
    lost.Add({{"source", "ring"}}, t.counters[OBS_CNT_RING_LOST]);
    if (effects) lost.Add({{"source", "effects"}}, effects->lost());
  }
  {
    Fam skipped(out, "lossd_bpf_runs_skipped_total",
                "Runs of an observer tracing program the kernel skipped because the same "
                "program was running on that CPU (a nested call): flow samples and limit "
                "accounting missed, no event lost (retransmissions are counted by sock_ops, "
                "which is never skipped)",
                MetricType::Counter);
    for (const auto& [program, n] : t.skipped_runs) skipped.Add({{"program", program}}, n);
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
  // Opt-in: per-flow labels.
  if (opts.top_flows > 0) TopFlowMetrics(obs.Flows(), opts.top_flows, out);
}

}  // namespace lossd
