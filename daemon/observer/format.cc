#include "observer/format.h"

#include <arpa/inet.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace lossd {
namespace {

std::string Addr(uint16_t family, const uint32_t* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, a, buf, sizeof(buf));
  return buf;
}

unsigned long long U(uint64_t v) { return v; }

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string StateJson(const obs_sock_state& s) {
  return Fmt("\"cwnd\":%u,\"ssthresh\":%u,\"srtt_us\":%u,\"rttvar_us\":%u,\"mss\":%u,"
             "\"packets_out\":%u,\"retrans_out\":%u,\"lost_out\":%u,\"sacked_out\":%u,"
             "\"in_flight\":%u,\"snd_wnd\":%u,\"rcv_wnd\":%u,\"total_retrans\":%u,"
             "\"ca_state\":%u,\"backoff\":%u,\"retransmits\":%u,\"tcp_state\":%u,"
             "\"bytes_acked\":%llu,\"bytes_sent\":%llu",
             s.snd_cwnd, s.snd_ssthresh, s.srtt_us, s.rttvar_us, s.mss, s.packets_out,
             s.retrans_out, s.lost_out, s.sacked_out, s.in_flight, s.snd_wnd, s.rcv_wnd,
             s.total_retrans, s.ca_state, s.backoff, s.retransmits, s.tcp_state, s.bytes_acked,
             s.bytes_sent);
}

std::string FlowBody(const obs_flow& f) {
  std::string rtx;
  for (int t = 0; t < OBS_RTX_MAX; t++)
    rtx += Fmt("%s\"%s\":%llu", t ? "," : "", RtxTypeName(t), f.rtx_segs[t]);
  static const char* kCa[OBS_CA_STATES] = {"open", "disorder", "cwr", "recovery", "loss"};
  std::string ca;
  for (int s = 0; s < OBS_CA_STATES; s++)
    ca += Fmt("%s\"%s\":%llu", s ? "," : "", kCa[s], f.ca_time_ns[s]);
  return TupleJson(f.tuple) +
         Fmt(",\"cgroup_id\":%llu,\"opened_ns\":%llu,\"updated_ns\":%llu"
             ",\"cwnd\":%u,\"cwnd_min\":%u,\"cwnd_max\":%u,\"srtt_us\":%u,\"srtt_min_us\":%u,"
             "\"srtt_max_us\":%u,\"bytes_acked\":%llu,\"bytes_sent\":%llu"
             ",\"max_backoff\":%u,\"preexisting\":%u,\"ca_state\":%u,",
             f.cgroup_id, f.opened_ns, f.updated_ns, f.cwnd,
             f.cwnd_min == 0xffffffff ? 0 : f.cwnd_min, f.cwnd_max, f.srtt_us,
             f.srtt_min_us == 0xffffffff ? 0 : f.srtt_min_us, f.srtt_max_us, f.bytes_acked,
             f.bytes_sent, f.max_backoff, f.preexisting, f.ca_state) +
         "\"rtx_segs\":{" + rtx + "},\"ca_time_ns\":{" + ca + "}";
}

}  // namespace

std::string TupleJson(const obs_tuple& t) {
  return Fmt("\"saddr\":\"%s\",\"sport\":%u,\"daddr\":\"%s\",\"dport\":%u",
             Addr(t.family, t.saddr).c_str(), t.sport, Addr(t.family, t.daddr).c_str(), t.dport);
}

std::string EventJson(const ObsEvent& e) {
  const obs_event& ev = e.data.ev;
  std::string head = Fmt("{\"seq\":%llu,\"time_ns\":%llu,\"cookie\":%llu"
                         ",\"cgroup_id\":%llu,",
                         U(e.seq), U(ev.time_ns), U(ev.cookie), U(ev.cgroup_id)) +
                     TupleJson(ev.tuple);
  if (ev.kind == OBS_EV_RETRANSMIT)
    return "{\"event\":\"retransmit\"," + head.substr(1) +
           Fmt(",\"type\":\"%s\",\"outcome\":\"%s\",\"err\":%d,\"segs\":%u,\"seq_no\":%u,",
               RtxTypeName(ev.type), OutcomeName(ev.outcome), ev.err, ev.segs, ev.seq) +
           StateJson(ev.st) + "}";
  return "{\"event\":\"flow_close\"," + head.substr(1) +
         Fmt(",\"duration_ns\":%llu,",
             e.data.closed_ns > e.data.flow.opened_ns ? e.data.closed_ns - e.data.flow.opened_ns : 0) +
         "\"flow\":{" + FlowBody(e.data.flow) + "}," + StateJson(ev.st) + "}";
}

std::string FlowJson(const ObsFlow& f) {
  return Fmt("{\"cookie\":%llu,", U(f.cookie)) + FlowBody(f.flow) + "}";
}

std::string TotalsJson(const ObsTotals& t, const std::vector<ObsHookStatus>& hooks) {
  std::string types;
  for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
    std::string outs;
    for (int o = 0; o < OBS_OUTCOME_MAX; o++)
      outs += Fmt("%s\"%s\":{\"events\":%llu,\"segs\":%llu}", o ? "," : "",
                  OutcomeName(o), t.by_type[ty][o].events, t.by_type[ty][o].segs);
    types += Fmt("%s\"%s\":{", ty ? "," : "", RtxTypeName(ty)) + outs + "}";
  }
  std::string hs;
  for (size_t i = 0; i < hooks.size(); i++)
    hs += Fmt("%s{\"name\":\"%s\",\"attached\":%s,\"error\":\"%s\"}", i ? "," : "",
              hooks[i].name.c_str(), hooks[i].attached ? "true" : "false", hooks[i].error.c_str());
  return "{\"event\":\"observer_totals\",\"retrans_segs\":" + std::to_string(t.RetransSegs()) +
         ",\"types\":{" + types + "}" +
         Fmt(",\"ring_lost\":%llu,\"filtered\":%llu,\"flows_opened\":%llu"
             ",\"flows_closed\":%llu,\"ring_consumed\":%llu,\"hub_published\":%llu"
             ",\"recursion_misses\":%llu,\"flow_table_full\":%llu"
             ",\"arm_failed\":%llu,\"armed_existing\":%llu",
             U(t.counters[OBS_CNT_RING_LOST]), U(t.counters[OBS_CNT_FILTERED]),
             U(t.counters[OBS_CNT_FLOWS_OPENED]), U(t.counters[OBS_CNT_FLOWS_CLOSED]),
             U(t.ring_consumed), U(t.hub_published), U(t.recursion_misses),
             U(t.counters[OBS_CNT_FLOW_TABLE_FULL]), U(t.counters[OBS_CNT_ARM_FAILED]),
             U(t.counters[OBS_CNT_ARMED_EXISTING])) +
         ",\"hooks\":[" + hs + "]}";
}

}  // namespace lossd
