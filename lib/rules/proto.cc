#include "rules/proto.h"

#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>

#include <cmath>
#include <utility>

namespace lossd {

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

Schedule ScheduleFromProto(const v1::Schedule& in) {
  auto ns = [](uint64_t v) {
    return std::chrono::nanoseconds(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
  };
  Schedule s;
  s.start_after = ns(in.start_after_ns());
  s.active = ns(in.active_ns());
  s.dormant = ns(in.dormant_ns());
  s.cycles = in.cycles();
  return s;
}

namespace {

// A guard's stall causes (kGuardStallCauses) as lossd.v1 names them.
constexpr std::pair<v1::StallCause, const char*> kGuardCauseNames[] = {
    {v1::STALL_CAUSE_RTO, "rto"},
    {v1::STALL_CAUSE_TLP, "tlp"},
    {v1::STALL_CAUSE_FAST_RECOVERY, "fast_recovery"},
    {v1::STALL_CAUSE_ZERO_WINDOW, "zero_window"},
};

}  // namespace

Guard GuardFromProto(const v1::Guard& in) {
  auto ns = [](uint64_t v) {
    return std::chrono::nanoseconds(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
  };
  Guard g;
  g.stall = ns(in.stall_ns());
  g.rtos = in.rtos();
  g.rtos_window = ns(in.rtos_window_ns());
  g.resends = in.resends();
  g.resends_window = ns(in.resends_window_ns());
  g.resets = in.resets();
  g.resets_window = ns(in.resets_window_ns());
  g.watch_port = in.watch_port();  // CheckGuard bounds it
  g.retrans = std::isfinite(in.retrans()) ? in.retrans() : -1;  // refused by CheckGuard
  g.retrans_window = ns(in.retrans_window_ns());
  g.misbehaves = in.misbehaves();
  if (in.stall_cause() != v1::STALL_CAUSE_UNSPECIFIED) {
    // a cause a guard takes by its name; any other by its number (refused by CheckGuard)
    g.stall_cause = std::to_string(int(in.stall_cause()));
    for (const auto& [cause, name] : kGuardCauseNames)
      if (cause == in.stall_cause()) g.stall_cause = name;
  }
  return g;
}

void GuardToProto(const Guard& in, v1::Guard* out) {
  if (!in.Any()) return;
  out->set_stall_ns(static_cast<uint64_t>(in.stall.count()));
  out->set_rtos(in.rtos);
  out->set_rtos_window_ns(static_cast<uint64_t>(in.rtos_window.count()));
  out->set_resends(in.resends);
  out->set_resends_window_ns(static_cast<uint64_t>(in.resends_window.count()));
  out->set_resets(in.resets);
  out->set_resets_window_ns(static_cast<uint64_t>(in.resets_window.count()));
  out->set_watch_port(in.watch_port);
  out->set_retrans(in.retrans);
  out->set_retrans_window_ns(static_cast<uint64_t>(in.retrans_window.count()));
  out->set_misbehaves(in.misbehaves);
  for (const auto& [cause, name] : kGuardCauseNames)
    if (in.stall_cause == name) out->set_stall_cause(cause);
}

Status SpecFromProto(const v1::RuleSpec& in, RuleSpec* out) {
  RuleSpec s;
  s.iface = in.interface();
  s.cgroup = in.cgroup();
  s.service.pid = in.pid();
  s.service.unit = in.unit();
  s.service.container = in.container();
  s.service.pod = in.pod();
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
  switch (in.action()) {
    case v1::ACTION_DROP: s.action = Action::kDrop; break;
    case v1::ACTION_CORRUPT: s.action = Action::kCorrupt; break;
    case v1::ACTION_CORRUPT_PAYLOAD: s.action = Action::kCorruptPayload; break;
    case v1::ACTION_DUPLICATE: s.action = Action::kDuplicate; break;
    case v1::ACTION_ECN: s.action = Action::kEcn; break;
    case v1::ACTION_ECN_PASS: s.action = Action::kEcnPass; break;
    default: return InvalidArgument("action: unknown value " + std::to_string(in.action()));
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
    LOSSD_RETURN_IF_ERROR(Field(
        "match.tcp_flags", ParseTcpFlags(m.tcp_flags(), &s.tcp_flags_mask, &s.tcp_flags_value)));
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
    case v1::LossModel::kRamp:
      s.model.kind = LossModel::Kind::kRamp;
      if (size_t(lm.ramp().steps_size()) > kMaxRampSteps)
        return InvalidArgument("loss.ramp: a ramp has 1 to " + std::to_string(kMaxRampSteps) +
                               " steps (got " + std::to_string(lm.ramp().steps_size()) + ")");
      for (const auto& st : lm.ramp().steps())
        s.model.steps.push_back(
            {st.rate(), std::chrono::nanoseconds(static_cast<int64_t>(
                            std::min<uint64_t>(st.duration_ns(), INT64_MAX)))});
      if (Status rs = CheckRamp(s.model); !rs.ok())
        return InvalidArgument("loss.ramp: " + rs.message());
      break;
    case v1::LossModel::kMarkov: {
      const auto& mk = lm.markov();
      s.model.kind = LossModel::Kind::kMarkov4;
      s.model.p13 = mk.p13();
      s.model.p31 = mk.p31();
      s.model.p32 = mk.p32();
      s.model.p23 = mk.p23();
      s.model.p14 = mk.p14();
      if (Status st = CheckMarkov(s.model); !st.ok())
        return InvalidArgument("loss.markov: " + st.message());
      break;
    }
    case v1::LossModel::kPolice:
      s.model.kind = LossModel::Kind::kPolice;
      s.model.rate_bps = lm.police().rate_bps();
      s.model.burst_bytes = lm.police().burst_bytes();
      s.model.police_per_flow = lm.police().per_flow();
      if (Status st = CheckPolice(s.model); !st.ok())
        return InvalidArgument("loss.police: " + st.message());
      break;
    case v1::LossModel::MODEL_NOT_SET:
      return InvalidArgument(
          "loss: give a model (bernoulli, gilbert_elliott, every_nth, first_k, ramp, markov or "
          "police)");
  }
  if (lm.has_seed()) s.seed = lm.seed();
  s.priority = in.priority();
  s.ttl =
      std::chrono::nanoseconds(static_cast<int64_t>(std::min<uint64_t>(in.ttl_ns(), INT64_MAX)));
  s.ttl_given = in.has_ttl_ns();
  if (in.has_schedule()) s.schedule = ScheduleFromProto(in.schedule());
  if (in.has_guard()) s.guard = GuardFromProto(in.guard());
  s.per_segment = in.per_segment();
  s.reattach = in.reattach();
  for (const auto& [k, v] : in.labels()) s.labels[k] = v;
  s.force = in.force();
  *out = s;
  return Status::Ok();
}

void SpecToProto(const RuleSpec& s, v1::RuleSpec* out) {
  out->set_interface(s.iface);
  out->set_cgroup(s.cgroup);
  out->set_pid(s.service.pid);
  out->set_unit(s.service.unit);
  out->set_container(s.service.container);
  out->set_pod(s.service.pod);
  out->set_hook(s.hook == Hook::kXdp      ? v1::HOOK_XDP
                : s.hook == Hook::kTc     ? v1::HOOK_TC
                : s.hook == Hook::kCgroup ? v1::HOOK_CGROUP
                                          : v1::HOOK_AUTO);
  out->set_direction(s.dir == Direction::kEgress ? v1::DIRECTION_EGRESS
                     : s.dir == Direction::kBoth ? v1::DIRECTION_BOTH
                                                 : v1::DIRECTION_INGRESS);
  out->set_action(static_cast<v1::Action>(s.action));
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
  m->set_protocol(ProtocolName(s.l4proto));
  m->set_family(static_cast<uint32_t>(s.family));
  if (s.tcp_flags_mask) m->set_tcp_flags(TcpFlagsText(s.tcp_flags_mask, s.tcp_flags_value));
  m->set_payload(s.payload == LOSS_PAYLOAD_ONLY   ? v1::PAYLOAD_ONLY
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
    case LossModel::Kind::kMarkov4: {
      auto* mk = lm->mutable_markov();
      mk->set_p13(s.model.p13);
      mk->set_p31(s.model.p31);
      mk->set_p32(s.model.p32);
      mk->set_p23(s.model.p23);
      mk->set_p14(s.model.p14);
      break;
    }
    case LossModel::Kind::kPolice:
      lm->mutable_police()->set_rate_bps(s.model.rate_bps);
      lm->mutable_police()->set_burst_bytes(s.model.burst_bytes);
      lm->mutable_police()->set_per_flow(s.model.police_per_flow);
      break;
    case LossModel::Kind::kEveryNth: lm->set_every_nth(s.model.n); break;
    case LossModel::Kind::kFirstK: lm->set_first_k(s.model.n); break;
    case LossModel::Kind::kRamp: {
      auto* rp = lm->mutable_ramp();
      for (const auto& st : s.model.steps) {
        auto* o = rp->add_steps();
        o->set_rate(st.rate);
        o->set_duration_ns(static_cast<uint64_t>(st.duration.count()));
      }
      break;
    }
  }
  if (s.seed) lm->set_seed(*s.seed);
  out->set_priority(s.priority);
  for (const auto& [k, v] : s.labels) (*out->mutable_labels())[k] = v;
  out->set_force(s.force);
  if (s.ttl_given || s.ttl.count()) out->set_ttl_ns(static_cast<uint64_t>(s.ttl.count()));
  if (s.schedule.Any()) {
    v1::Schedule* sc = out->mutable_schedule();
    sc->set_start_after_ns(static_cast<uint64_t>(s.schedule.start_after.count()));
    sc->set_active_ns(static_cast<uint64_t>(s.schedule.active.count()));
    sc->set_dormant_ns(static_cast<uint64_t>(s.schedule.dormant.count()));
    sc->set_cycles(s.schedule.cycles);
  }
  if (s.guard.Any()) GuardToProto(s.guard, out->mutable_guard());
  out->set_per_segment(s.per_segment);
  out->set_reattach(s.reattach);
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

std::string ErrorDetails(grpc::StatusCode code, const Status& st) {
  v1::ErrorInfo info;
  info.set_reason(st.reason());
  info.set_domain(kErrorDomain);
  for (const auto& [k, v] : st.metadata()) (*info.mutable_metadata())[k] = v;
  v1::StatusDetails details;
  details.set_code(static_cast<int32_t>(code));
  details.set_message(st.message());
  google::protobuf::Any* any = details.add_details();
  any->set_type_url(kErrorInfoTypeUrl);
  any->set_value(info.SerializeAsString());
  return details.SerializeAsString();
}

bool ErrorInfoOf(const grpc::Status& st, v1::ErrorInfo* out) {
  if (st.error_details().empty()) return false;
  v1::StatusDetails details;
  if (!details.ParseFromString(st.error_details())) return false;
  for (const google::protobuf::Any& any : details.details())
    if (any.type_url() == kErrorInfoTypeUrl && out->ParseFromString(any.value())) return true;
  return false;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, opts).ok())
    return JsonLine({{"error", "cannot render " + m.GetTypeName() + " as JSON"}});
  return out;
}

Json JsonOf(const google::protobuf::Message& m) {
  Json j = Json::parse(ToJson(m), nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json{{"error", "cannot render " + m.GetTypeName() + " as JSON"}} : j;
}

}  // namespace lossd
