#include "service/convert.h"

#include "base/address.h"
#include "base/clock.h"
#include "observer/diagnosis.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

namespace lossd {

namespace {

grpc::StatusCode GrpcCode(Code code) {
  switch (code) {
    case Code::kOk: return grpc::StatusCode::OK;
    case Code::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case Code::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case Code::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case Code::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case Code::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case Code::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Code::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case Code::kInternal: return grpc::StatusCode::INTERNAL;
    case Code::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
  }
  return grpc::StatusCode::UNKNOWN;
}

}  // namespace

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  grpc::StatusCode code = GrpcCode(st.code());
  if (st.reason().empty()) return grpc::Status(code, st.message());
  return grpc::Status(code, st.message(), ErrorDetails(code, st));
}

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const Status& st) {
  auto* r = ctx->DefaultReactor();
  r->Finish(ToGrpc(st));
  return r;
}

Result<std::chrono::nanoseconds> StreamPeriod(uint64_t ns, const char* field) {
  constexpr uint64_t kMin = 100000000ull, kMax = 3600000000000ull, kDefault = 1000000000ull;
  if (ns == 0) return std::chrono::nanoseconds(kDefault);
  if (ns < kMin || ns > kMax)
    return InvalidArgument(std::string(field) + ": must lie between 100 ms and 1 h (got " +
                           std::to_string(ns) + " ns)");
  return std::chrono::nanoseconds(ns);
}

void OwnerToProto(const CgroupOwner& o, v1::CgroupOwner* out) {
  out->set_path(o.path);
  out->set_unit(o.unit);
  out->set_container(o.container);
  out->set_runtime(o.runtime);
  out->set_pod(o.pod);
}

void RuleToProto(const RuleInfo& r, v1::Rule* out) {
  out->set_id(r.id);
  SpecToProto(r.spec, out->mutable_spec());
  out->set_state(r.deleted                       ? v1::RULE_STATE_DELETED
                 : !r.guard_stop.condition.empty() ? v1::RULE_STATE_STOPPED
                 : r.expired                     ? v1::RULE_STATE_EXPIRED
                 : !r.failed.empty() ? v1::RULE_STATE_FAILED
                                     : v1::RULE_STATE_ACTIVE);
  out->set_reason(!r.failed.empty() ? r.failed : r.note);
  for (const auto& h : r.hooks) out->add_attachments(h);
  out->set_created_unix_ns(r.created_unix_ns);
  out->set_expires_unix_ns(r.expires_unix_ns);
  CountersToProto(r.counters, r.spec.action, out->mutable_counters());
  out->set_hint(r.hint);
  out->set_schedule_start_mono_ns(r.schedule_start_mono_ns);
  out->set_schedule_start_unix_ns(r.schedule_start_unix_ns);
  if (!r.guard_stop.condition.empty()) {
    const GuardStopInfo& g = r.guard_stop;
    v1::GuardStop* gs = out->mutable_guard_stop();
    gs->set_condition(g.condition);
    gs->set_crossed_mono_ns(g.crossed_ns);
    gs->set_stopped_mono_ns(g.stopped_ns);
    gs->set_last_drop_mono_ns(g.last_drop_ns);
    gs->set_evidence_start_mono_ns(g.start_ns);
    gs->set_rtos(g.rtos);
    gs->set_flow(g.flow);
    gs->set_socket_cookie(g.cookie);
    gs->set_daemon_guard(g.all);
    gs->set_evidence_rule_id(g.rule_id);
    gs->set_segs(g.segs);
  }
  if (!r.cgroup.empty()) {
    std::string rel = r.CgroupRelative();
    out->set_cgroup(rel);
    out->set_cgroup_id(r.cgroup_id);
    OwnerToProto(CgroupOwnerOf(rel), out->mutable_owner());
  }
}

namespace {

// Where the time of flows went (FlowLimits of one flow, LimitTotals of a
// rule's): Flow.limit_ns and RuleEffect.limit_ns.
template <typename Limits>
void LimitsToProto(const Limits& l, google::protobuf::Map<std::string, uint64_t>* out) {
  auto& lim = *out;
  lim["busy"] = l.busy_ns;
  for (size_t i = 0; i < l.within_busy_ns.size(); i++)
    lim[LimitName(static_cast<Limit>(i))] = l.within_busy_ns[i];
  lim["idle"] = l.idle_ns;
}

}  // namespace

void RuleEffectToProto(const RuleInfo& r, const RuleEffect& e, v1::RuleEffect* out) {
  out->set_id(r.id);
  out->set_hint(r.hint);
  out->set_configured_rate(e.configured);
  out->set_measured_rate(e.measured);
  out->set_rate_ci_low(e.ci_low);
  out->set_rate_ci_high(e.ci_high);
  out->set_configured_within_ci(e.configured_within_ci);
  out->set_deterministic(e.deterministic);
  if (e.expectation) {
    v1::Expectation* x = out->mutable_expectation();
    x->set_expected_dropped_packets(e.expectation->expected);
    x->set_matched_packets(e.expectation->matched);
    x->set_dropped_packets(e.expectation->dropped);
    x->set_flows(e.expectation->flows);
  }
  CountersToProto(r.counters, r.spec.action, out->mutable_counters());
  for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
    (*out->mutable_retransmitted_segments())[RtxTypeName(ty)] = e.caused.segs[ty];
    if (e.caused.resent_dropped[ty])
      (*out->mutable_resent_dropped_segments())[RtxTypeName(ty)] = e.caused.resent_dropped[ty];
    if (e.caused.dsacked[ty]) (*out->mutable_dsacked_segments())[RtxTypeName(ty)] = e.caused.dsacked[ty];
  }
  for (const StepEffect& se : e.steps) {
    v1::StepEffect* o = out->add_steps();
    o->set_configured_rate(se.configured);
    o->set_start_offset_ns(se.start_offset_ns);
    o->set_duration_ns(se.duration_ns);
    o->set_matched_packets(se.counts.matched_pkts);
    o->set_matched_segments(se.counts.matched_segs);
    o->set_dropped_packets(se.counts.dropped_pkts);
    o->set_dropped_segments(se.counts.dropped_segs);
    o->set_measured_rate(se.measured);
    o->set_rate_ci_low(se.ci_low);
    o->set_rate_ci_high(se.ci_high);
    o->set_configured_within_ci(se.configured_within_ci);
  }
  out->set_flows(e.caused.flows.size());
  out->set_drops_recorded(e.drops_recorded);
  for (int ty = 0; ty < OBS_RTX_MAX; ty++) {
    const DurationHist& h = e.caused.recovery[ty];
    if (!h.count) continue;
    v1::Durations& d = (*out->mutable_recovery())[RtxTypeName(ty)];
    d.set_count(h.count);
    d.set_sum_ns(h.sum_ns);
    d.set_max_ns(h.max_ns);
    for (uint64_t b : DurationHist::kBoundsNs) d.add_bounds_ns(b);
    for (uint64_t c : h.counts) d.add_counts(c);
  }
  for (int c = 0; c < OBS_STALL_MAX; c++) {
    auto put = [&](const StallTotal& t, google::protobuf::Map<std::string, v1::StallTotals>* m) {
      if (!t.count) return;
      v1::StallTotals& o = (*m)[StallCauseName(c)];
      o.set_count(t.count);
      o.set_time_ns(t.time_ns);
    };
    put(e.caused.stalls_caused[c], out->mutable_stalls_caused());
    put(e.caused.stalls_on_flows[c], out->mutable_stalls_on_flows());
  }
  LimitsToProto(e.caused.limits, out->mutable_limit_ns());
  for (int s = 0; s < OBS_CA_STATES; s++)
    (*out->mutable_ca_entries())[CaStateName(s)] = e.caused.answers.ca_entries[s];
  out->set_ece_acks(e.caused.answers.ece_acks);
  out->set_dsacked_copies(e.caused.answers.dsacked_copies);
}

void CountersToProto(const RuleCounters& c, Action action, v1::RuleCounters* out) {
  out->set_matched_packets(c.matched_pkts);
  out->set_matched_segments(c.matched_segs);
  out->set_matched_bytes(c.matched_bytes);
  out->set_dropped_packets(c.dropped_pkts);
  out->set_dropped_segments(c.dropped_segs);
  out->set_dropped_bytes(c.dropped_bytes);
  switch (action) {
    case Action::kDrop: break;
    case Action::kCorrupt:
    case Action::kCorruptPayload:
      out->set_corrupted_packets(c.acted_pkts);
      out->set_corrupted_segments(c.acted_segs);
      out->set_corrupted_bytes(c.acted_bytes);
      break;
    case Action::kDuplicate:
      out->set_duplicated_packets(c.acted_pkts);
      out->set_duplicated_segments(c.acted_segs);
      out->set_duplicated_bytes(c.acted_bytes);
      break;
    case Action::kEcn:
    case Action::kEcnPass:
      out->set_marked_packets(c.acted_pkts);
      out->set_marked_segments(c.acted_segs);
      out->set_marked_bytes(c.acted_bytes);
      break;
  }
  out->set_unacted_packets(c.unacted_pkts);
}

v1::RetransmitType TypeToProto(int t) {
  switch (t) {
    case OBS_RTX_FAST: return v1::RETRANSMIT_TYPE_FAST;
    case OBS_RTX_RTO: return v1::RETRANSMIT_TYPE_RTO;
    case OBS_RTX_LOSS: return v1::RETRANSMIT_TYPE_LOSS;
    case OBS_RTX_TLP: return v1::RETRANSMIT_TYPE_TLP;
    case OBS_RTX_SYN: return v1::RETRANSMIT_TYPE_SYN;
    case OBS_RTX_SYNACK: return v1::RETRANSMIT_TYPE_SYNACK;
    case OBS_RTX_PROBE0: return v1::RETRANSMIT_TYPE_PROBE0;
    default: return v1::RETRANSMIT_TYPE_UNKNOWN;
  }
}

namespace {

void StateToProto(const obs_sock_state& s, v1::SocketState* o) {
  o->set_cwnd(s.snd_cwnd);
  o->set_ssthresh(s.snd_ssthresh);
  o->set_srtt_us(s.srtt_us);
  o->set_rttvar_us(s.rttvar_us);
  o->set_mss(s.mss);
  o->set_packets_out(s.packets_out);
  o->set_retrans_out(s.retrans_out);
  o->set_lost_out(s.lost_out);
  o->set_sacked_out(s.sacked_out);
  o->set_in_flight(s.in_flight);
  o->set_snd_wnd(s.snd_wnd);
  o->set_rcv_wnd(s.rcv_wnd);
  o->set_total_retrans(s.total_retrans);
  o->set_ca_state(s.ca_state);
  o->set_backoff(s.backoff);
  o->set_retransmits(s.retransmits);
  o->set_tcp_state(s.tcp_state);
  o->set_bytes_acked(s.bytes_acked);
  o->set_bytes_sent(s.bytes_sent);
}

}  // namespace

void TupleToProto(const obs_tuple& t, v1::Tuple* out) {
  out->set_local_addr(AddrText(t.family, t.saddr));
  out->set_local_port(t.sport);
  out->set_remote_addr(AddrText(t.family, t.daddr));
  out->set_remote_port(t.dport);
}

void EventToProto(const obs_event& e, OwnerCache* owners, v1::RetransmitEvent* out) {
  out->set_time_mono_ns(e.time_ns);
  out->set_cookie(e.cookie);
  out->set_cgroup_id(e.cgroup_id);
  if (e.cgroup_id && owners) OwnerToProto(owners->Of(e.cgroup_id), out->mutable_owner());
  TupleToProto(e.tuple, out->mutable_tuple());
  out->set_type(TypeToProto(static_cast<int>(e.type)));
  out->set_outcome(static_cast<v1::Outcome>(e.outcome));
  out->set_err(e.err);
  out->set_segments(e.segs);
  out->set_seq(e.seq);
  StateToProto(e.st, out->mutable_state());
  out->set_netns_ino(e.netns);
}

void FlowToProto(uint64_t cookie, const obs_flow& f, OwnerCache* owners, v1::Flow* out,
                 uint64_t closed_ns) {
  out->set_cookie(cookie);
  TupleToProto(f.tuple, out->mutable_tuple());
  out->set_cgroup_id(f.cgroup_id);
  if (f.cgroup_id && owners) OwnerToProto(owners->Of(f.cgroup_id), out->mutable_owner());
  out->set_opened_mono_ns(f.opened_ns);
  out->set_cwnd(f.cwnd);
  out->set_cwnd_min(f.cwnd_min == 0xffffffff ? 0 : f.cwnd_min);
  out->set_cwnd_max(f.cwnd_max);
  out->set_srtt_us(f.srtt_us);
  out->set_srtt_min_us(f.srtt_min_us == 0xffffffff ? 0 : f.srtt_min_us);
  out->set_srtt_max_us(f.srtt_max_us);
  out->set_bytes_acked(f.bytes_acked);
  out->set_bytes_sent(f.bytes_sent);
  for (int t = 0; t < OBS_RTX_MAX; t++)
    if (f.rtx_segs[t]) (*out->mutable_retransmitted_segments())[RtxTypeName(t)] = f.rtx_segs[t];
  out->set_dsacked_segments(f.dsack_segs);
  for (int s = 0; s < OBS_CA_STATES; s++) {
    (*out->mutable_ca_time_ns())[CaStateName(s)] = f.ca_time_ns[s];
    (*out->mutable_ca_entries())[CaStateName(s)] = f.ca_entries[s];
  }
  out->set_ece_acks(f.ece_acks);
  out->set_dsacked_copies(f.dsack_copy_segs);
  out->set_max_backoff(f.max_backoff);
  out->set_preexisting(f.preexisting != 0);
  out->set_ca_state(f.ca_state);
  uint64_t end = closed_ns ? closed_ns : MonotonicNs();
  uint64_t life = end > f.opened_ns ? end - f.opened_ns : 0;
  if (closed_ns) {
    out->set_closed(true);
    out->set_duration_ns(life);
  }
  FlowLimits l = LimitsOf(f, life);
  LimitsToProto(l, out->mutable_limit_ns());
  out->set_dominant_limit(LimitName(l.dominant));
  out->set_dominant_share(l.dominant_share);
  out->set_stalls(f.stalls);
  for (int c = 0; c < OBS_STALL_MAX; c++)
    if (f.stall_ns[c]) (*out->mutable_stall_ns())[StallCauseName(c)] = f.stall_ns[c];
  if (!closed_ns) out->set_stalled_ns(StalledFor(f, end));
  out->set_min_rtt_us(f.min_rtt_us);
  out->set_netns_ino(f.netns);
}

v1::StallCause StallCauseToProto(int c) {
  switch (c) {
    case OBS_STALL_RTO: return v1::STALL_CAUSE_RTO;
    case OBS_STALL_TLP: return v1::STALL_CAUSE_TLP;
    case OBS_STALL_FAST_RECOVERY: return v1::STALL_CAUSE_FAST_RECOVERY;
    case OBS_STALL_ZERO_WINDOW: return v1::STALL_CAUSE_ZERO_WINDOW;
    case OBS_STALL_RWND_LIMITED: return v1::STALL_CAUSE_RWND_LIMITED;
    case OBS_STALL_NAGLE_DELAYED_ACK: return v1::STALL_CAUSE_NAGLE_DELAYED_ACK;
    case OBS_STALL_CWND_LIMITED: return v1::STALL_CAUSE_CWND_LIMITED;
    case OBS_STALL_SNDBUF_LIMITED: return v1::STALL_CAUSE_SNDBUF_LIMITED;
    case OBS_STALL_APP_LIMITED: return v1::STALL_CAUSE_APP_LIMITED;
    default: return v1::STALL_CAUSE_UNKNOWN;
  }
}

void StallToProto(const obs_stall_event& e, OwnerCache* owners, v1::StallEvent* out) {
  const obs_stall& s = e.stall;
  out->set_start_mono_ns(s.start_ns);
  out->set_duration_ns(s.duration_ns);
  out->set_cookie(e.ev.cookie);
  out->set_cgroup_id(e.ev.cgroup_id);
  out->set_netns_ino(e.ev.netns);
  if (e.ev.cgroup_id && owners) OwnerToProto(owners->Of(e.ev.cgroup_id), out->mutable_owner());
  TupleToProto(e.ev.tuple, out->mutable_tuple());
  out->set_cause(StallCauseToProto(static_cast<int>(s.cause)));
  out->set_at_close((s.flags & OBS_STALL_F_AT_CLOSE) != 0);
  out->set_closing((s.flags & OBS_STALL_F_CLOSING) != 0);
  out->set_threshold_ns(s.threshold_ns);
  out->set_snd_una(s.snd_una);
  out->set_ack_seq(s.ack_seq);
  out->set_unsent_bytes(s.unsent);
  if (s.rtx_type < OBS_RTX_MAX) {
    out->set_first_retransmit(TypeToProto(static_cast<int>(s.rtx_type)));
    out->set_first_retransmit_seq(s.rtx_seq);
  }
  out->set_retransmits(s.rtx_count);
  out->set_backoff(s.backoff);
  out->set_acks(s.acks);
  out->set_min_window(s.min_wnd == 0xffffffff ? 0 : s.min_wnd);
  out->set_min_rtt_us(s.min_rtt_us);
  out->set_nagle((s.nonagle & 3) == 0);
  StateToProto(e.ev.st, out->mutable_state());
}

void DropToProto(const DropRecord& d, v1::DropLink* out) {
  out->set_rule_id(d.rule_id);
  out->set_time_mono_ns(d.time_ns);
  out->set_seq(d.seq);
  out->set_length(d.len);
  out->set_segments(d.segs);
}

void GapToProto(const StreamLoss& l, v1::Gap* out) {
  switch (l.source) {
    case LossSource::kKernelRing: out->set_source(v1::GAP_SOURCE_KERNEL_RING); break;
    case LossSource::kHub: out->set_source(v1::GAP_SOURCE_DAEMON_HUB); break;
    case LossSource::kSubscriber: out->set_source(v1::GAP_SOURCE_SUBSCRIBER); break;
    case LossSource::kDropLog: out->set_source(v1::GAP_SOURCE_DROP_LOG); break;
  }
  out->set_count(l.count);
}

Status FiltersFromProto(const google::protobuf::RepeatedPtrField<v1::EventFilter>& in,
                        const char* field, std::vector<StreamFilter>* out) {
  for (int i = 0; i < in.size(); i++) {
    const v1::EventFilter& f = in[i];
    std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    StreamFilter p;
    if (!f.addr().empty()) {
      auto c = ParseCidr(f.addr());
      if (!c.ok()) return InvalidArgument(name + ".addr: " + c.status().message());
      p.addr = *c;
    }
    if (f.port().lo() || f.port().hi()) {
      uint32_t hi = f.port().hi() ? f.port().hi() : f.port().lo();
      if (f.port().lo() > hi || hi > 65535) return InvalidArgument(name + ".port: invalid range");
      p.port.lo = static_cast<uint16_t>(f.port().lo());
      p.port.hi = static_cast<uint16_t>(hi);
    }
    p.cgroup_id = f.cgroup_id();
    if (f.types_size() > v1::RetransmitType_ARRAYSIZE * 4)
      return InvalidArgument(name + ".types: " + std::to_string(f.types_size()) +
                             " entries (there are " +
                             std::to_string(v1::RetransmitType_ARRAYSIZE - 1) + " types)");
    for (int t : f.types()) {
      if (t <= v1::RETRANSMIT_TYPE_UNSPECIFIED || t > v1::RETRANSMIT_TYPE_UNKNOWN)
        return InvalidArgument(name + ".types: unknown type " + std::to_string(t));
      p.types.insert(t - 1);  // proto enum = obs_rtx_type + 1
    }
    p.rule_id = f.rule_id();
    if (f.netns_ino() > UINT32_MAX)
      return InvalidArgument(name + ".netns_ino: " + std::to_string(f.netns_ino()) +
                             " is no network namespace inode (they are 32-bit)");
    p.netns = f.netns_ino();
    for (auto [field, in, to] : {std::make_tuple("cgroup", &f.cgroup(), &p.cgroup),
                                 std::make_tuple("unit", &f.unit(), &p.unit),
                                 std::make_tuple("container", &f.container(), &p.container),
                                 std::make_tuple("pod", &f.pod(), &p.pod)}) {
      if (in->size() > kMaxInputLength)
        return InvalidArgument(name + "." + field + ": at most " + std::to_string(kMaxInputLength) +
                               " characters: '" + Shown(*in) + "'");
      LOSSD_RETURN_IF_ERROR(CheckNoControlChars(name + "." + field, *in));
      *to = *in;
    }
    p.NormalizeOwner();
    out->push_back(p);
  }
  return Status::Ok();
}

void AggregateToProto(const RtxWindow& w, uint64_t window_ns, uint64_t unix_minus_mono,
                      v1::Aggregate* out) {
  out->set_window_start_unix_ns(w.start_ns + unix_minus_mono);
  out->set_window_start_mono_ns(w.start_ns);
  out->set_window_ns(window_ns);
  for (int t = 0; t < OBS_RTX_MAX; t++)
    (*out->mutable_retransmits_by_type())[RtxTypeName(t)] = w.by_type[t];
  for (const auto& [cookie, n] : w.by_flow) (*out->mutable_retransmits_by_flow())[cookie] = n;
  for (const auto& [id, n] : w.by_rule) (*out->mutable_retransmits_by_rule())[id] = n;
  out->set_late_segments(w.late);
}

void SampleToProto(const obs_sample_event& e, v1::TraceSample* out) {
  const obs_sample& s = e.sample;
  out->set_time_mono_ns(e.ev.time_ns);
  out->set_ack_seq(s.ack_seq);
  out->set_snd_una(s.snd_una);
  out->set_snd_nxt(s.snd_nxt);
  out->set_write_seq(s.write_seq);
  out->set_cwnd(s.cwnd);
  out->set_ssthresh(s.ssthresh);
  out->set_srtt_us(s.srtt_us);
  out->set_in_flight(s.in_flight);
  out->set_snd_wnd(s.snd_wnd);
  out->set_ack_window(s.ack_wnd);
  out->set_sacked_out(s.sacked_out);
  out->set_lost_out(s.lost_out);
  out->set_ca_state(s.ca_state);
  out->set_delivered(s.delivered);
}

void NetnsTotalsToProto(const NetnsTotals& n, v1::NetnsTotals* out) {
  out->set_netns_ino(n.ino);
  out->set_path(n.path);
  out->set_own(n.own);
  for (int t = 0; t < OBS_RTX_MAX; t++) {
    const char* name = RtxTypeName(t);
    (*out->mutable_sent_segments())[name] = n.by_type[t][OBS_SENT].segs;
    (*out->mutable_failed_segments())[name] = n.by_type[t][OBS_FAILED].segs;
    (*out->mutable_sent_events())[name] = n.by_type[t][OBS_SENT].events;
    (*out->mutable_failed_events())[name] = n.by_type[t][OBS_FAILED].events;
  }
  out->set_retrans_segs(RetransSegsOf(n.by_type));
}

}  // namespace lossd
