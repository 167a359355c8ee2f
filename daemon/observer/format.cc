#include "observer/format.h"

#include <arpa/inet.h>

#include <cstdint>

#include "common/clock.h"
#include "observer/diagnosis.h"

namespace lossd {

std::string AddrText(uint16_t family, const uint32_t* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, a, buf, sizeof(buf));
  return buf;
}

namespace {

uint64_t U(uint64_t v) {
  return v;
}
uint32_t U32(uint32_t v) {
  return v;
}

// "saddr", "sport", "daddr", "dport" into `j`.
void AddTuple(const obs_tuple& t, Json* j) {
  (*j)["saddr"] = AddrText(t.family, t.saddr);
  (*j)["sport"] = U32(t.sport);
  (*j)["daddr"] = AddrText(t.family, t.daddr);
  (*j)["dport"] = U32(t.dport);
}

void AddState(const obs_sock_state& s, Json* j) {
  Json& o = *j;
  o["cwnd"] = U32(s.snd_cwnd);
  o["ssthresh"] = U32(s.snd_ssthresh);
  o["srtt_us"] = U32(s.srtt_us);
  o["rttvar_us"] = U32(s.rttvar_us);
  o["mss"] = U32(s.mss);
  o["packets_out"] = U32(s.packets_out);
  o["retrans_out"] = U32(s.retrans_out);
  o["lost_out"] = U32(s.lost_out);
  o["sacked_out"] = U32(s.sacked_out);
  o["in_flight"] = U32(s.in_flight);
  o["snd_wnd"] = U32(s.snd_wnd);
  o["rcv_wnd"] = U32(s.rcv_wnd);
  o["total_retrans"] = U32(s.total_retrans);
  o["ca_state"] = U32(s.ca_state);
  o["backoff"] = U32(s.backoff);
  o["retransmits"] = U32(s.retransmits);
  o["tcp_state"] = U32(s.tcp_state);
  o["bytes_acked"] = U(s.bytes_acked);
  o["bytes_sent"] = U(s.bytes_sent);
}

// Where the time went and the stalls (observer/diagnosis.h); life: opened to
// the close (or now).
void AddDiagnosis(const obs_flow& f, uint64_t life_ns, Json* j) {
  Json& o = *j;
  FlowLimits l = LimitsOf(f, life_ns);
  Json lim = {{"busy", U(l.busy_ns)}, {"idle", U(l.idle_ns)}};
  for (size_t i = 0; i < l.within_busy_ns.size(); i++)
    lim[LimitName(static_cast<Limit>(i))] = U(l.within_busy_ns[i]);
  o["limit_ns"] = std::move(lim);
  o["dominant_limit"] = LimitName(l.dominant);
  o["dominant_share"] = l.dominant_share;
  o["stalls"] = U32(f.stalls);
  Json st = Json::object();
  for (int c = 0; c < OBS_STALL_MAX; c++)
    if (f.stall_ns[c]) st[StallCauseName(c)] = U(f.stall_ns[c]);
  o["stall_ns"] = std::move(st);
  o["min_rtt_us"] = U32(f.min_rtt_us);
}

void AddFlowBody(const obs_flow& f, Json* j) {
  Json& o = *j;
  AddTuple(f.tuple, j);
  o["cgroup_id"] = U(f.cgroup_id);
  o["netns"] = U(f.netns);
  o["opened_ns"] = U(f.opened_ns);
  o["updated_ns"] = U(f.updated_ns);
  o["cwnd"] = U32(f.cwnd);
  o["cwnd_min"] = U32(f.cwnd_min == 0xffffffff ? 0 : f.cwnd_min);
  o["cwnd_max"] = U32(f.cwnd_max);
  o["srtt_us"] = U32(f.srtt_us);
  o["srtt_min_us"] = U32(f.srtt_min_us == 0xffffffff ? 0 : f.srtt_min_us);
  o["srtt_max_us"] = U32(f.srtt_max_us);
  o["bytes_acked"] = U(f.bytes_acked);
  o["bytes_sent"] = U(f.bytes_sent);
  o["max_backoff"] = U32(f.max_backoff);
  o["preexisting"] = U32(f.preexisting);
  o["ca_state"] = U32(f.ca_state);
  Json rtx = Json::object();
  for (int t = 0; t < OBS_RTX_MAX; t++) rtx[RtxTypeName(t)] = U(f.rtx_segs[t]);
  o["rtx_segs"] = std::move(rtx);
  static const char* kCa[OBS_CA_STATES] = {"open", "disorder", "cwr", "recovery", "loss"};
  Json ca = Json::object();
  for (int s = 0; s < OBS_CA_STATES; s++) ca[kCa[s]] = U(f.ca_time_ns[s]);
  o["ca_time_ns"] = std::move(ca);
}

const char* KindName(uint32_t kind) {
  switch (kind) {
    case OBS_EV_RETRANSMIT: return "retransmit";
    case OBS_EV_FLOW_CLOSE: return "flow_close";
    case OBS_EV_STALL: return "stall";
    case OBS_EV_SAMPLE: return "sample";
  }
  return "?";
}

void AddStall(const obs_stall& s, Json* j) {
  Json& o = *j;
  o["cause"] = StallCauseName(static_cast<int>(s.cause));
  o["start_ns"] = U(s.start_ns);
  o["duration_ns"] = U(s.duration_ns);
  o["threshold_ns"] = U(s.threshold_ns);
  o["at_close"] = (s.flags & OBS_STALL_F_AT_CLOSE) != 0;
  o["snd_una"] = U32(s.snd_una);
  o["ack_seq"] = U32(s.ack_seq);
  o["unsent"] = U32(s.unsent);
  o["first_rtx"] = s.rtx_type < OBS_RTX_MAX ? RtxTypeName(static_cast<int>(s.rtx_type)) : "";
  o["first_rtx_seq"] = U32(s.rtx_seq);
  o["rtx_count"] = U32(s.rtx_count);
  o["stall_backoff"] = U32(s.backoff);
  o["acks"] = U32(s.acks);
  o["min_wnd"] = U32(s.min_wnd == 0xffffffff ? 0 : s.min_wnd);
  o["min_rtt_us"] = U32(s.min_rtt_us);
  o["nonagle"] = U32(s.nonagle);
}

}  // namespace

Json EventJson(const ObsEvent& e) {
  const obs_event& ev = e.data.ev;
  bool rtx = ev.kind == OBS_EV_RETRANSMIT;
  Json j = {{"event", KindName(ev.kind)},
            {"seq", U(e.seq)},
            {"time_ns", U(ev.time_ns)},
            {"cookie", U(ev.cookie)},
            {"cgroup_id", U(ev.cgroup_id)},
            {"netns", U(ev.netns)}};
  AddTuple(ev.tuple, &j);
  if (rtx) {
    j["type"] = RtxTypeName(ev.type);
    j["outcome"] = OutcomeName(ev.outcome);
    j["err"] = static_cast<int>(ev.err);
    j["segs"] = U32(ev.segs);
    j["seq_no"] = U32(ev.seq);
  } else if (ev.kind == OBS_EV_STALL) {
    AddStall(e.As<obs_stall_event>().stall, &j);
  } else if (ev.kind == OBS_EV_FLOW_CLOSE) {
    uint64_t life =
        e.data.closed_ns > e.data.flow.opened_ns ? e.data.closed_ns - e.data.flow.opened_ns : 0;
    j["duration_ns"] = U(life);
    Json flow = Json::object();
    AddFlowBody(e.data.flow, &flow);
    AddDiagnosis(e.data.flow, life, &flow);
    j["flow"] = std::move(flow);
  }
  AddState(ev.st, &j);
  return j;
}

Json FlowJson(const ObsFlow& f) {
  Json j = {{"cookie", U(f.cookie)}};
  AddFlowBody(f.flow, &j);
  uint64_t now = MonotonicNs();
  AddDiagnosis(f.flow, now > f.flow.opened_ns ? now - f.flow.opened_ns : 0, &j);
  j["stalled_ns"] = U(StalledFor(f.flow, now));
  return j;
}

namespace {

Json TypesJson(const RtxTotals& by_type) {
  Json types = Json::object();
  for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
    Json outs = Json::object();
    for (int o = 0; o < OBS_OUTCOME_MAX; o++)
      outs[OutcomeName(o)] = {{"events", U(by_type[ty][o].events)},
                              {"segs", U(by_type[ty][o].segs)}};
    types[RtxTypeName(ty)] = std::move(outs);
  }
  return types;
}

}  // namespace

Json NetnsTotalsJson(const NetnsTotals& n) {
  return {{"event", "netns_totals"},           {"netns", U(n.ino)},
          {"path", n.path},                    {"own", n.own},
          {"retrans_segs", U(RetransSegsOf(n.by_type))}, {"types", TypesJson(n.by_type)}};
}

Json TotalsJson(const ObsTotals& t, const std::vector<ObsHookStatus>& hooks) {
  Json types = TypesJson(t.by_type);
  Json hs = Json::array();
  for (const auto& h : hooks)
    hs.push_back({{"name", h.name}, {"attached", h.attached}, {"error", h.error}});
  return {{"event", "observer_totals"},
          {"retrans_segs", U(t.RetransSegs())},
          {"types", std::move(types)},
          {"ring_lost", U(t.counters[OBS_CNT_RING_LOST])},
          {"filtered", U(t.counters[OBS_CNT_FILTERED])},
          {"flows_opened", U(t.counters[OBS_CNT_FLOWS_OPENED])},
          {"flows_closed", U(t.counters[OBS_CNT_FLOWS_CLOSED])},
          {"ring_consumed", U(t.ring_consumed)},
          {"hub_published", U(t.hub_published)},
          {"recursion_misses", U(t.recursion_misses)},
          {"flow_table_full", U(t.counters[OBS_CNT_FLOW_TABLE_FULL])},
          {"arm_failed", U(t.counters[OBS_CNT_ARM_FAILED])},
          {"armed_existing", U(t.counters[OBS_CNT_ARMED_EXISTING])},
          {"stalls", U(t.counters[OBS_CNT_STALLS])},
          {"samples", U(t.counters[OBS_CNT_SAMPLES])},
          {"hooks", std::move(hs)}};
}

}  // namespace lossd
