#include "service/convert.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmath>
#include <cstring>

namespace lossd {

grpc::Status ToGrpc(const Status& st) {
  switch (st.code()) {
    case Code::kOk: return grpc::Status::OK;
    case Code::kInvalidArgument: return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, st.message());
    case Code::kNotFound: return grpc::Status(grpc::StatusCode::NOT_FOUND, st.message());
    case Code::kAlreadyExists: return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, st.message());
    case Code::kPermissionDenied: return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, st.message());
    case Code::kFailedPrecondition:
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, st.message());
    case Code::kResourceExhausted:
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, st.message());
    case Code::kUnavailable: return grpc::Status(grpc::StatusCode::UNAVAILABLE, st.message());
    case Code::kInternal: return grpc::Status(grpc::StatusCode::INTERNAL, st.message());
  }
  return grpc::Status(grpc::StatusCode::UNKNOWN, st.message());
}

namespace {

Status Field(const std::string& name, const Status& st) {
  if (st.ok()) return st;
  return Status(st.code(), name + ": " + st.message());
}

Status Ports(const std::string& name, const v1::PortRange& p, PortRange* out) {
  if (p.lo() == 0 && p.hi() == 0) return Status::Ok();
  uint32_t hi = p.hi() ? p.hi() : p.lo();
  if (p.lo() > 65535 || hi > 65535)
    return InvalidArgument(name + ": ports must lie within 0-65535");
  if (p.lo() > hi) return InvalidArgument(name + ": low end above high end");
  out->lo = static_cast<uint16_t>(p.lo());
  out->hi = static_cast<uint16_t>(hi);
  return Status::Ok();
}

}  // namespace

Status SpecFromProto(const v1::RuleSpec& in, RuleSpec* out) {
  RuleSpec s;
  s.iface = in.interface();
  s.cgroup = in.cgroup();
  switch (in.hook()) {
    case v1::HOOK_AUTO: s.hook = Hook::kAuto; break;
    case v1::HOOK_XDP: s.hook = Hook::kXdp; break;
    case v1::HOOK_TC: s.hook = Hook::kTc; break;
    case v1::HOOK_CGROUP: s.hook = Hook::kCgroup; break;
    default: return InvalidArgument("hook: unknown value " + std::to_string(in.hook()));
  }
  switch (in.direction()) {
    case v1::DIRECTION_INGRESS: s.dir = Direction::kIngress; break;
    case v1::DIRECTION_EGRESS: s.dir = Direction::kEgress; break;
    case v1::DIRECTION_BOTH: s.dir = Direction::kBoth; break;
    default: return InvalidArgument("direction: unknown value " + std::to_string(in.direction()));
  }
  const v1::Match& m = in.match();
  if (!m.src().empty()) {
    auto c = ParseCidr(m.src());
    if (!c.ok()) return Field("match.src", c.status());
    s.src = *c;
  }
  if (!m.dst().empty()) {
    auto c = ParseCidr(m.dst());
    if (!c.ok()) return Field("match.dst", c.status());
    s.dst = *c;
  }
  LOSSD_RETURN_IF_ERROR(Ports("match.sport", m.sport(), &s.sport));
  LOSSD_RETURN_IF_ERROR(Ports("match.dport", m.dport(), &s.dport));
  if (!m.protocol().empty()) {
    auto p = ParseProtocol(m.protocol());
    if (!p.ok()) return Field("match.protocol", p.status());
    s.l4proto = *p;
  }
  if (m.family() != 0 && m.family() != 4 && m.family() != 6)
    return InvalidArgument("match.family: must be 0 (any), 4 or 6");
  s.family = static_cast<int>(m.family());
  if (!m.tcp_flags().empty())
    LOSSD_RETURN_IF_ERROR(Field("match.tcp_flags", ParseTcpFlags(m.tcp_flags(), &s.tcp_flags_mask, &s.tcp_flags_value)));
  switch (m.payload()) {
    case v1::PAYLOAD_ANY: s.payload = LOSS_PAYLOAD_ANY; break;
    case v1::PAYLOAD_ONLY: s.payload = LOSS_PAYLOAD_ONLY; break;
    case v1::PAYLOAD_NONE: s.payload = LOSS_PAYLOAD_NONE; break;
    default: return InvalidArgument("match.payload: unknown value");
  }
  const v1::LossModel& lm = in.loss();
  auto prob = [](double v) { return std::isfinite(v) && v >= 0 && v <= 1; };
  switch (lm.model_case()) {
    case v1::LossModel::kBernoulli:
      if (!prob(lm.bernoulli().rate()))
        return InvalidArgument("loss.bernoulli.rate: must lie between 0 and 1 (0.01 = 1 %), got " +
                               std::to_string(lm.bernoulli().rate()));
      s.model.kind = LossModel::Kind::kBernoulli;
      s.model.p = lm.bernoulli().rate();
      break;
    case v1::LossModel::kGilbertElliott: {
      const auto& g = lm.gilbert_elliott();
      if (!prob(g.p()) || !prob(g.r()) || !prob(g.bad_loss()) || !prob(g.good_loss()))
        return InvalidArgument("loss.gilbert_elliott: every parameter must lie between 0 and 1");
      s.model.kind = LossModel::Kind::kGilbertElliott;
      s.model.p = g.p();
      s.model.r = g.r();
      s.model.bad_loss = g.bad_loss();
      s.model.good_loss = g.good_loss();
      break;
    }
    case v1::LossModel::kEveryNth:
      s.model.kind = LossModel::Kind::kEveryNth;
      s.model.n = lm.every_nth();
      break;
    case v1::LossModel::kFirstK:
      s.model.kind = LossModel::Kind::kFirstK;
      s.model.n = lm.first_k();
      break;
    case v1::LossModel::MODEL_NOT_SET:
      return InvalidArgument("loss: give a model (bernoulli, gilbert_elliott, every_nth or first_k)");
  }
  if (lm.has_seed()) s.seed = lm.seed();
  s.priority = in.priority();
  s.ttl = std::chrono::nanoseconds(static_cast<int64_t>(std::min<uint64_t>(in.ttl_ns(), INT64_MAX)));
  s.per_segment = in.per_segment();
  LOSSD_RETURN_IF_ERROR(Validate(s));
  *out = s;
  return Status::Ok();
}

void SpecToProto(const RuleSpec& s, v1::RuleSpec* out) {
  out->set_interface(s.iface);
  out->set_cgroup(s.cgroup);
  out->set_hook(s.hook == Hook::kXdp ? v1::HOOK_XDP
                : s.hook == Hook::kTc ? v1::HOOK_TC
                : s.hook == Hook::kCgroup ? v1::HOOK_CGROUP
                                          : v1::HOOK_AUTO);
  out->set_direction(s.dir == Direction::kEgress ? v1::DIRECTION_EGRESS
                     : s.dir == Direction::kBoth ? v1::DIRECTION_BOTH
                                                 : v1::DIRECTION_INGRESS);
  v1::Match* m = out->mutable_match();
  if (s.src) m->set_src(s.src->ToString());
  if (s.dst) m->set_dst(s.dst->ToString());
  if (!s.sport.Any()) {
    m->mutable_sport()->set_lo(s.sport.lo);
    m->mutable_sport()->set_hi(s.sport.hi);
  }
  if (!s.dport.Any()) {
    m->mutable_dport()->set_lo(s.dport.lo);
    m->mutable_dport()->set_hi(s.dport.hi);
  }
  switch (s.l4proto) {
    case 0: break;
    case IPPROTO_TCP: m->set_protocol("tcp"); break;
    case IPPROTO_UDP: m->set_protocol("udp"); break;
    case IPPROTO_ICMP: m->set_protocol("icmp"); break;
    case IPPROTO_ICMPV6: m->set_protocol("icmpv6"); break;
    default: m->set_protocol(std::to_string(s.l4proto));
  }
  m->set_family(static_cast<uint32_t>(s.family));
  if (s.tcp_flags_mask) {
    static const char* kNames[] = {"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"};
    std::string f;
    for (int b = 0; b < 8; b++) {
      if (!(s.tcp_flags_mask & (1 << b))) continue;
      if (!f.empty()) f += ",";
      if (!(s.tcp_flags_value & (1 << b))) f += "!";
      f += kNames[b];
    }
    m->set_tcp_flags(f);
  }
  m->set_payload(s.payload == LOSS_PAYLOAD_ONLY ? v1::PAYLOAD_ONLY
                 : s.payload == LOSS_PAYLOAD_NONE ? v1::PAYLOAD_NONE
                                                  : v1::PAYLOAD_ANY);
  v1::LossModel* lm = out->mutable_loss();
  switch (s.model.kind) {
    case LossModel::Kind::kBernoulli: lm->mutable_bernoulli()->set_rate(s.model.p); break;
    case LossModel::Kind::kGilbertElliott: {
      auto* g = lm->mutable_gilbert_elliott();
      g->set_p(s.model.p);
      g->set_r(s.model.r);
      g->set_bad_loss(s.model.bad_loss);
      g->set_good_loss(s.model.good_loss);
      break;
    }
    case LossModel::Kind::kEveryNth: lm->set_every_nth(s.model.n); break;
    case LossModel::Kind::kFirstK: lm->set_first_k(s.model.n); break;
  }
  if (s.seed) lm->set_seed(*s.seed);
  out->set_priority(s.priority);
  out->set_ttl_ns(static_cast<uint64_t>(s.ttl.count()));
  out->set_per_segment(s.per_segment);
}

void CountersToProto(const RuleCounters& c, v1::RuleCounters* out) {
  out->set_matched_packets(c.matched_pkts);
  out->set_matched_segments(c.matched_segs);
  out->set_matched_bytes(c.matched_bytes);
  out->set_dropped_packets(c.dropped_pkts);
  out->set_dropped_segments(c.dropped_segs);
  out->set_dropped_bytes(c.dropped_bytes);
}

double ModelMeanLoss(const LossModel& m) {
  switch (m.kind) {
    case LossModel::Kind::kBernoulli: return m.p;
    case LossModel::Kind::kGilbertElliott: {
      double sum = m.p + m.r;
      double bad = sum > 0 ? m.p / sum : 0;
      return bad * m.bad_loss + (1 - bad) * m.good_loss;
    }
    case LossModel::Kind::kEveryNth: return m.n ? 1.0 / m.n : 0;
    case LossModel::Kind::kFirstK: return -1;
  }
  return -1;
}

void WilsonInterval(uint64_t k, uint64_t n, double* lo, double* hi) {
  if (n == 0) {
    *lo = 0;
    *hi = 1;
    return;
  }
  const double z = 3.2905267314919255;  // two-sided 99.9 %
  double p = double(k) / double(n), nn = double(n);
  double denom = 1 + z * z / nn;
  double centre = (p + z * z / (2 * nn)) / denom;
  double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / denom;
  *lo = k == 0 ? 0.0 : std::max(0.0, centre - half);
  *hi = k == n ? 1.0 : std::min(1.0, centre + half);  // no rounding below 1 at 100 %
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

std::string AddrString(uint16_t family, const uint32_t* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, a, buf, sizeof(buf));
  return buf;
}

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
  o->set_tcp_state(s.tcp_state);
  o->set_bytes_acked(s.bytes_acked);
  o->set_bytes_sent(s.bytes_sent);
}

// Does [lo, hi] of the rule contain port?
bool PortIn(const PortRange& r, uint16_t port) { return port >= r.lo && port <= r.hi; }

bool AddrIn(const std::optional<Cidr>& c, uint16_t family, const uint32_t* a) {
  return !c || AddrInCidr(*c, family, a);
}

}  // namespace

bool AddrInCidr(const Cidr& c, uint16_t family, const uint32_t* a) {
  if ((c.family == 4) != (family == AF_INET)) return false;
  const auto* b = reinterpret_cast<const uint8_t*>(a);
  for (int bit = 0; bit < c.prefix; bit++) {
    uint8_t m = 0x80 >> (bit % 8);
    if ((b[bit / 8] & m) != (c.addr[bit / 8] & m)) return false;
  }
  return true;
}

void TupleToProto(const obs_tuple& t, v1::Tuple* out) {
  out->set_local_addr(AddrString(t.family, t.saddr));
  out->set_local_port(t.sport);
  out->set_remote_addr(AddrString(t.family, t.daddr));
  out->set_remote_port(t.dport);
}

void EventToProto(const obs_event& e, v1::RetransmitEvent* out) {
  out->set_time_mono_ns(e.time_ns);
  out->set_cookie(e.cookie);
  out->set_cgroup_id(e.cgroup_id);
  TupleToProto(e.tuple, out->mutable_tuple());
  out->set_type(TypeToProto(static_cast<int>(e.type)));
  out->set_outcome(static_cast<v1::Outcome>(e.outcome));
  out->set_err(e.err);
  out->set_segments(e.segs);
  out->set_seq(e.seq);
  StateToProto(e.st, out->mutable_state());
}

void FlowToProto(uint64_t cookie, const obs_flow& f, v1::Flow* out) {
  out->set_cookie(cookie);
  TupleToProto(f.tuple, out->mutable_tuple());
  out->set_cgroup_id(f.cgroup_id);
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
  static const char* kCa[OBS_CA_STATES] = {"open", "disorder", "cwr", "recovery", "loss"};
  for (int s = 0; s < OBS_CA_STATES; s++) (*out->mutable_ca_time_ns())[kCa[s]] = f.ca_time_ns[s];
  out->set_max_backoff(f.max_backoff);
  out->set_preexisting(f.preexisting != 0);
  out->set_ca_state(f.ca_state);
}

bool RuleCoversFlow(const RuleSpec& s, const obs_tuple& t) {
  if (s.l4proto != 0 && s.l4proto != IPPROTO_TCP) return false;
  if (s.family && (s.family == 4) != (t.family == AF_INET)) return false;
  // Ingress: packets remote -> local; egress: local -> remote.
  auto in = [&] {
    return AddrIn(s.src, t.family, t.daddr) && AddrIn(s.dst, t.family, t.saddr) &&
           PortIn(s.sport, t.dport) && PortIn(s.dport, t.sport);
  };
  auto out = [&] {
    return AddrIn(s.src, t.family, t.saddr) && AddrIn(s.dst, t.family, t.daddr) &&
           PortIn(s.sport, t.sport) && PortIn(s.dport, t.dport);
  };
  switch (s.dir) {
    case Direction::kIngress: return in();
    case Direction::kEgress: return out();
    case Direction::kBoth: return in() || out();
  }
  return false;
}

}  // namespace lossd
