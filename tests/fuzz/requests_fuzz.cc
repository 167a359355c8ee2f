// libFuzzer target of the gRPC requests as lossd checks them before it touches
// the kernel (daemon/service/injector_service.cc, observer_service.cc). Input:
// byte 0, modulo 19, picks a method of lossd.v1 in the .proto's order (0
// CreateRule .. 8 GetRuleEffect, 9 WatchRetransmits .. 15 GetTotals, 16
// GetCapabilities .. 18 GetVersion); the rest is that method's request, parsed as
// gRPC parses it (ParseFromArray; a request that does not parse ends there) and
// handed to the pure checks its handler runs:
//   CreateRule, CreateRules (each spec), UpdateRule: rules/proto.h SpecFromProto,
//     the daemon's default TTL (ApplyDefaultTtl), rules/rule.h Validate;
//   ListRules: its label selector's keys and values, as CheckLabels passes
//     them to CheckNoControlChars;
//   WatchRuleCounters, WatchAggregates: StreamPeriod (service/convert.h);
//   WatchRetransmits, WatchStalls, ListFlows, WatchFlows: ParseRequestFilters
//     (service/requests.h; only FiltersFromProto, its pure part, when a filter
//     names a unit, container, pod or pid: resolving one reads the host and runs
//     systemctl, docker or kubectl), the queue length (StreamBudget::QueueLength),
//     StreamPeriod;
//   TraceFlow: ParseTraceRequest (FiltersFromProto alone when its flow names a
//     service, as above);
//   DeleteRule, GetRule, ClearRules, GetRuleEffect, GetTotals and the System
//     service: parsed only (their handlers check nothing before the parts).
// Not reached: CheckLabels' count and size limits (file-local in
// injector_service.cc), the max_batch and netns_ino checks written inline in the
// handlers, Injector::Check's --max-ttl (a member of the injector). The
// Components the checks read limits from has no part loaded, and nothing waits on it.
// Besides crashes and sanitizer reports it checks what the checks promise:
//   - every refusal is INVALID_ARGUMENT, with a message of 1..1024 bytes that
//     quotes no string of the request longer than 64 bytes whole;
//   - the refusals of SpecFromProto, FiltersFromProto, StreamPeriod,
//     QueueLength and ParseTraceRequest begin with the field they refuse, a path
//     of the request's message type ("match.src: ", "allow[2].port: ",
//     "interval_ns: ", "queue 70000 ..."), but for a limit's message
//     ("(lossd --max-filters)") and TraceFlow's two about naming the flow, which
//     name both cookie and flow;
//   - a spec SpecFromProto accepts converts back (SpecToProto), serializes,
//     parses and converts again to an equal spec, and that spec to the same
//     message; with the daemon's default TTL, Validate says the same of both,
//     and a spec it accepts holds what it promises (a target, no control
//     character, ranges, probabilities, a TTL >= 0);
//   - StreamPeriod is 1 s for 0, else its input, accepted within 100 ms .. 1 h
//     only; QueueLength the default for 0, else its input up to --max-queue;
//   - accepted filters are one per EventFilter, with ports lo <= hi, types
//     below OBS_RTX_MAX, a 32-bit netns and names without control characters
//     of at most 256 bytes; ParseRequestFilters sets its output even when it
//     refuses, and refuses more than --max-filters;
//   - ParseTraceRequest accepts exactly when one of cookie and flow is given (a
//     flow without types whose filter parses) and wait_ns <= 1 h, max_samples
//     <= 1,000,000, duration_ns <= 24 h, and then fills in the defaults;
//   - CheckNoControlChars refuses exactly a text with a byte below 0x20 or 0x7f,
//     naming the first one's offset.
// Run: tests/fuzz/run.sh FUZZER [SECONDS] (ctest fuzz_requests, label unit).
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "components.h"
#include "lossd/v1/lossd.pb.h"
#include "rules/proto.h"
#include "rules/rule.h"
#include "service/convert.h"
#include "service/requests.h"

namespace lossd {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr size_t kShown = 64;         // Shown(): what a message may quote of an input
constexpr size_t kMaxMessage = 1024;  // no message grows past this, whatever the input
constexpr uint64_t kSecond = 1000000000ull, kHour = 3600 * kSecond;

const char* g_method = "";  // the method of the input being checked

[[noreturn]] void Fail(const char* what, const Message& req, const std::string& detail) {
  std::fprintf(stderr, "requests_fuzz: %s: %s\n  request: %s\n  %s\n", g_method, what,
               req.ShortDebugString().c_str(), detail.c_str());
  std::abort();
}

// Every string of a message, its nested messages' and its maps' included.
void StringsOf(const Message& m, std::vector<std::string>* out) {
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      if (!f->is_repeated()) {
        out->push_back(r->GetString(m, f));
      } else {
        for (int i = 0; i < r->FieldSize(m, f); i++) out->push_back(r->GetRepeatedString(m, f, i));
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!f->is_repeated()) {
        StringsOf(r->GetMessage(m, f), out);
      } else {
        for (int i = 0; i < r->FieldSize(m, f); i++) StringsOf(r->GetRepeatedMessage(m, f, i), out);
      }
    }
  }
}

// Whether `msg` begins with a path of `d`'s fields ("match.src", "allow[2].port",
// "queue") followed by ':' or ' '.
bool BeginsWithField(const Descriptor* d, const std::string& msg) {
  size_t i = 0;
  for (;;) {
    size_t start = i;
    while (i < msg.size() && (std::islower(static_cast<unsigned char>(msg[i])) ||
                              std::isdigit(static_cast<unsigned char>(msg[i])) || msg[i] == '_'))
      i++;
    if (i == start || !d) return false;
    const FieldDescriptor* f = d->FindFieldByName(msg.substr(start, i - start));
    if (!f) return false;
    if (i < msg.size() && msg[i] == '[') {  // an index: only a repeated field has one
      size_t close = msg.find(']', i);
      if (!f->is_repeated() || close == std::string::npos) return false;
      for (size_t j = i + 1; j < close; j++)
        if (!std::isdigit(static_cast<unsigned char>(msg[j]))) return false;
      i = close + 1;
    }
    d = f->message_type();
    if (i < msg.size() && (msg[i] == ':' || msg[i] == ' ')) return true;
    if (i >= msg.size() || msg[i] != '.') return false;
    i++;
  }
}

// A refusal of the pure checks: INVALID_ARGUMENT, a bounded message quoting
// no long string of the request whole.
void CheckRefusal(const Status& st, const Message& req, const char* who) {
  std::string m = st.message();
  if (st.code() != Code::kInvalidArgument)
    Fail("a refusal other than INVALID_ARGUMENT", req, std::string(who) + ": " + st.ToString());
  if (m.empty()) Fail("a refusal without a message", req, who);
  if (m.size() > kMaxMessage)
    Fail("a refusal's message is too long", req,
         std::string(who) + ": " + std::to_string(m.size()) + " bytes");
  std::vector<std::string> strings;
  StringsOf(req, &strings);
  for (const std::string& s : strings)
    if (s.size() > kShown && m.find(s) != std::string::npos)
      Fail("a refusal quotes a whole string of the request", req, std::string(who) + ": " + m);
}

void CheckNamesField(const Status& st, const Message& req, const char* who) {
  if (!BeginsWithField(req.GetDescriptor(), st.message()))
    Fail("a refusal does not begin with the field it refuses", req,
         std::string(who) + ": " + st.message());
}

bool SameCidr(const std::optional<Cidr>& a, const std::optional<Cidr>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->family == b->family && a->prefix == b->prefix && a->addr == b->addr);
}

bool Same(const RuleSpec& a, const RuleSpec& b) {
  const LossModel &x = a.model, &y = b.model;
  return a.iface == b.iface && a.cgroup == b.cgroup && a.service == b.service && a.hook == b.hook &&
         a.dir == b.dir && SameCidr(a.src, b.src) && SameCidr(a.dst, b.dst) &&
         a.sport.lo == b.sport.lo && a.sport.hi == b.sport.hi && a.dport.lo == b.dport.lo &&
         a.dport.hi == b.dport.hi && a.l4proto == b.l4proto &&
         a.tcp_flags_mask == b.tcp_flags_mask && a.tcp_flags_value == b.tcp_flags_value &&
         a.payload == b.payload && a.family == b.family && x.kind == y.kind && x.p == y.p &&
         x.r == y.r && x.bad_loss == y.bad_loss && x.good_loss == y.good_loss && x.n == y.n &&
         a.seed == b.seed && a.priority == b.priority && a.ttl == b.ttl &&
         a.ttl_given == b.ttl_given && a.per_segment == b.per_segment &&
         a.reattach == b.reattach && a.labels == b.labels && a.force == b.force;
}

size_t FirstControl(const std::string& s) {
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return i;
  }
  return std::string::npos;
}

bool Prob(double v) { return v >= 0 && v <= 1; }

// What Validate promises of a spec it accepts, checked on its own.
void CheckAccepted(const RuleSpec& s, const Message& req) {
  const ServiceTarget& t = s.service;
  for (const std::string* v : {&s.iface, &s.cgroup, &t.unit, &t.container, &t.pod})
    if (FirstControl(*v) != std::string::npos)
      Fail("an accepted name holds a control character", req, *v);
  for (const auto& [k, v] : s.labels)
    if (FirstControl(k) != std::string::npos || FirstControl(v) != std::string::npos)
      Fail("an accepted label holds a control character", req, k);
  if (s.iface.empty() && !NamesCgroup(s)) Fail("a rule without a target accepted", req, "");
  if (s.sport.lo > s.sport.hi || s.dport.lo > s.dport.hi) Fail("a port range lo > hi", req, "");
  if (s.family != 0 && s.family != 4 && s.family != 6) Fail("a family other than 0, 4, 6", req, "");
  for (const auto* c : {&s.src, &s.dst}) {
    if (!*c) continue;
    if ((*c)->family != 4 && (*c)->family != 6) Fail("an address of no family", req, "");
    if (s.family && s.family != (*c)->family) Fail("an address of the other family", req, "");
  }
  if (s.tcp_flags_value & ~s.tcp_flags_mask) Fail("TCP flags outside their mask", req, "");
  const LossModel& m = s.model;
  if (!Prob(m.p) || !Prob(m.r) || !Prob(m.bad_loss) || !Prob(m.good_loss))
    Fail("a loss probability outside [0, 1]", req, "");
  if ((m.kind == LossModel::Kind::kEveryNth || m.kind == LossModel::Kind::kFirstK) && m.n < 1)
    Fail("every-Nth / first-K with N 0", req, "");
  if (s.priority > kMaxPriority) Fail("a priority above kMaxPriority", req, "");
  if (s.ttl.count() < 0) Fail("a negative TTL", req, "");
}

RuleLimits Limits() {
  RuleLimits l;
  l.default_ttl_ns = kHour;
  return l;
}

// A spec as CreateRule, CreateRules and UpdateRule read it.
void CheckSpec(const v1::RuleSpec& in, const Message& req) {
  RuleSpec spec;
  Status st = SpecFromProto(in, &spec);
  if (!st.ok()) {
    CheckRefusal(st, req, "SpecFromProto");
    if (!BeginsWithField(in.GetDescriptor(), st.message()))
      Fail("SpecFromProto's refusal does not begin with a field of RuleSpec", req, st.message());
    return;
  }
  // Converted back (as Rule.spec shows it), over the wire, and again: the same.
  v1::RuleSpec out;
  SpecToProto(spec, &out);
  v1::RuleSpec wire;
  if (!wire.ParseFromString(out.SerializeAsString()) ||
      !google::protobuf::util::MessageDifferencer::Equals(out, wire))
    Fail("SpecToProto's message does not survive serializing", req, out.ShortDebugString());
  RuleSpec again;
  Status st2 = SpecFromProto(wire, &again);
  if (!st2.ok()) Fail("SpecToProto's message is refused", req, st2.message());
  if (!Same(spec, again)) Fail("a spec does not survive SpecToProto", req, out.ShortDebugString());
  v1::RuleSpec out2;
  SpecToProto(again, &out2);
  if (!google::protobuf::util::MessageDifferencer::Equals(out, out2))
    Fail("SpecToProto is no fixed point", req,
         out.ShortDebugString() + " / " + out2.ShortDebugString());

  // The daemon's default TTL, then Validate.
  ApplyDefaultTtl(Limits(), &spec);
  ApplyDefaultTtl(Limits(), &again);
  Status v = Validate(spec);
  if (Validate(again).ok() != v.ok())
    Fail("Validate changes its mind after a round trip", req, v.message());
  if (!v.ok()) {
    CheckRefusal(v, req, "Validate");
    return;
  }
  CheckAccepted(spec, req);
}

void CheckControlChars(const std::string& what, const std::string& text, const Message& req) {
  Status st = CheckNoControlChars(what, text);
  size_t at = FirstControl(text);
  if (st.ok() != (at == std::string::npos))
    Fail("CheckNoControlChars is wrong about a text", req, what + ": " + st.message());
  if (st.ok()) return;
  CheckRefusal(st, req, "CheckNoControlChars");
  if (st.message().compare(0, what.size(), what) != 0 ||
      st.message().find("at byte " + std::to_string(at) + ":") == std::string::npos)
    Fail("CheckNoControlChars' message does not name the text and the byte", req, st.message());
}

void CheckPeriod(uint64_t ns, const char* field, const Message& req) {
  auto p = StreamPeriod(ns, field);
  bool want = ns == 0 || (ns >= kSecond / 10 && ns <= kHour);
  if (p.ok() != want) Fail("StreamPeriod is wrong about a period", req, std::to_string(ns));
  if (!p.ok()) {
    CheckRefusal(p.status(), req, "StreamPeriod");
    CheckNamesField(p.status(), req, "StreamPeriod");
    if (p.status().message().compare(0, std::strlen(field), field) != 0)
      Fail("StreamPeriod's refusal names another field", req, p.status().message());
    return;
  }
  if (uint64_t(p->count()) != (ns ? ns : kSecond))
    Fail("StreamPeriod's period is not its input", req, "");
}

const Components& Parts() {
  static const Components* parts = [] {
    ApiLimits api;
    api.max_filters = 16;  // reachable with a small input
    api.streams.max_queue = 4096;
    return new Components(Limits(), /*observer_wanted=*/false, api);
  }();
  return *parts;
}

void CheckQueue(uint32_t requested, const Message& req) {
  const uint32_t max = Parts().api().streams.max_queue;
  auto q = Parts().streams().QueueLength(requested, 65536, "queue");
  if (q.ok() != (requested <= max))
    Fail("QueueLength is wrong about a queue", req, std::to_string(requested));
  if (!q.ok()) {
    CheckRefusal(q.status(), req, "QueueLength");
    CheckNamesField(q.status(), req, "QueueLength");
  } else if (*q != (requested ? requested : max)) {
    Fail("QueueLength's length is not its input (or the default)", req, std::to_string(*q));
  }
}

bool NamesService(const v1::EventFilter& f) {
  return f.pid() || !f.unit().empty() || !f.container().empty() || !f.pod().empty();
}

bool NamesService(const FilterList& l) {
  for (const v1::EventFilter& f : l)
    if (NamesService(f)) return true;
  return false;
}

// FiltersFromProto on its own: refusals name the filter and its field,
// accepted filters lie in their ranges.
bool CheckFilters(const FilterList& in, const char* field, const Message& req) {
  std::vector<StreamFilter> out;
  Status st = FiltersFromProto(in, field, &out);
  if (!st.ok()) {
    CheckRefusal(st, req, "FiltersFromProto");
    std::string m = st.message();
    // TraceFlow's one flow is filter [0] of a list of one (requests.cc): "flow[0].addr".
    if (std::strcmp(field, "flow") == 0 && m.compare(0, 8, "flow[0].") == 0) m.erase(4, 3);
    if (!BeginsWithField(req.GetDescriptor(), m))
      Fail("FiltersFromProto's refusal does not begin with the filter's field", req, st.message());
    return false;
  }
  if (out.size() != size_t(in.size())) Fail("FiltersFromProto lost filters", req, "");
  for (int i = 0; i < in.size(); i++) {
    const StreamFilter& f = out[size_t(i)];
    if (f.port.lo > f.port.hi) Fail("a filter's port range lo > hi", req, "");
    for (int t : f.types)
      if (t < 0 || t >= OBS_RTX_MAX)
        Fail("a filter's type outside the observer's", req, std::to_string(t));
    if (f.netns > UINT32_MAX) Fail("a filter's netns past 32 bits", req, "");
    if (f.cgroup_id != in[i].cgroup_id() || f.rule_id != in[i].rule_id())
      Fail("a filter's ids changed", req, "");
    for (const std::string* s : {&in[i].cgroup(), &in[i].unit(), &in[i].container(), &in[i].pod()})
      if (s->size() > kMaxInputLength || FirstControl(*s) != std::string::npos)
        Fail("a filter's name past 256 bytes or with a control character accepted", req, *s);
    if (f.addr) {
      auto again = ParseCidr(f.addr->ToString());
      if (!again.ok() || !SameCidr(*again, f.addr))
        Fail("a filter's address does not survive", req, "");
    }
  }
  return true;
}

// A request's allow and deny lists, as the streams and ListFlows read them.
void CheckRequestFilters(const FilterList& allow, const char* field, const FilterList& deny,
                         const Message& req) {
  bool allow_ok = CheckFilters(allow, field, req);
  bool deny_ok = CheckFilters(deny, "deny", req);
  if (NamesService(allow) || NamesService(deny)) return;  // FiltersOf would resolve it
  std::shared_ptr<const StreamFilters> filters;
  Status st = ParseRequestFilters(&Parts(), allow, field, deny, &filters);
  if (!filters) Fail("ParseRequestFilters left its output unset", req, st.message());
  size_t n = size_t(allow.size()) + size_t(deny.size());
  bool over = n > Parts().api().max_filters;
  if (st.ok() != (!over && allow_ok && deny_ok))
    Fail("ParseRequestFilters disagrees with FiltersFromProto and --max-filters", req,
         st.message());
  if (st.ok()) {
    if (filters->empty() != (n == 0)) Fail("ParseRequestFilters lost filters", req, "");
    return;
  }
  CheckRefusal(st, req, "ParseRequestFilters");
  if (over) {
    if (st.message().find("(lossd --max-filters)") == std::string::npos)
      Fail("a refusal over --max-filters does not name it", req, st.message());
  }
}

void CheckTrace(const v1::TraceFlowRequest& req) {
  bool by_flow = req.has_flow();
  bool flow_ok = true;
  if (by_flow) {
    FilterList one;
    *one.Add() = req.flow();
    flow_ok = CheckFilters(one, "flow", req) && req.flow().types_size() == 0;
    if (!req.cookie() && NamesService(req.flow())) return;  // FiltersOf would resolve it
  }
  TraceRequest tr;
  Status st = ParseTraceRequest(&Parts(), req, &tr);
  bool want = (req.cookie() != 0) != by_flow && (!by_flow || flow_ok) && req.wait_ns() <= kHour &&
              req.max_samples() <= 1000000 && req.duration_ns() <= 24 * kHour;
  if (st.ok() != want) Fail("ParseTraceRequest is wrong about a request", req, st.message());
  if (!st.ok()) {
    CheckRefusal(st, req, "ParseTraceRequest");
    std::string m = st.message();
    if (m.compare(0, 8, "flow[0].") == 0) m.erase(4, 3);
    bool names_both = m.find("cookie") != std::string::npos && m.find("flow") != std::string::npos;
    if (!BeginsWithField(req.GetDescriptor(), m) && !names_both)
      Fail("ParseTraceRequest's refusal names no field", req, st.message());
    return;
  }
  if (tr.cookie != req.cookie() || !tr.match ||
      uint64_t(tr.wait.count()) != (req.wait_ns() ? req.wait_ns() : 10 * kSecond) ||
      tr.opts.max_samples != (req.max_samples() ? req.max_samples() : 100000u) ||
      uint64_t(tr.opts.duration.count()) != req.duration_ns())
    Fail("ParseTraceRequest's defaults or values are wrong", req, "");
}

template <typename Request, typename Check>
void Run(const char* name, const uint8_t* data, size_t size, Check check) {
  g_method = name;
  Request req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;  // gRPC refuses it
  check(req);
}

void OneInput(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t* d = data + 1;
  size_t n = size - 1;
  switch (data[0] % 19) {
    case 0:
      return Run<v1::CreateRuleRequest>("CreateRule", d, n,
                                        [](const auto& r) { CheckSpec(r.spec(), r); });
    case 1:
      return Run<v1::CreateRulesRequest>("CreateRules", d, n, [](const auto& r) {
        for (const v1::RuleSpec& s : r.specs()) CheckSpec(s, r);
      });
    case 2:
      return Run<v1::UpdateRuleRequest>("UpdateRule", d, n,
                                        [](const auto& r) { CheckSpec(r.spec(), r); });
    case 3: return Run<v1::DeleteRuleRequest>("DeleteRule", d, n, [](const auto&) {});
    case 4: return Run<v1::GetRuleRequest>("GetRule", d, n, [](const auto&) {});
    case 5:
      return Run<v1::ListRulesRequest>("ListRules", d, n, [](const auto& r) {
        for (const auto& kv : r.labels()) {
          CheckControlChars("labels key", kv.first, r);
          CheckControlChars("labels['" + Shown(kv.first) + "']", kv.second, r);
        }
      });
    case 6: return Run<v1::ClearRulesRequest>("ClearRules", d, n, [](const auto&) {});
    case 7:
      return Run<v1::WatchRuleCountersRequest>("WatchRuleCounters", d, n, [](const auto& r) {
        CheckPeriod(r.interval_ns(), "interval_ns", r);
      });
    case 8: return Run<v1::GetRuleEffectRequest>("GetRuleEffect", d, n, [](const auto&) {});
    case 9:
      return Run<v1::WatchRetransmitsRequest>("WatchRetransmits", d, n, [](const auto& r) {
        CheckRequestFilters(r.allow(), "allow", r.deny(), r);
        CheckQueue(r.queue(), r);
      });
    case 10:
      return Run<v1::ListFlowsRequest>("ListFlows", d, n, [](const auto& r) {
        CheckRequestFilters(r.filter(), "filter", FilterList(), r);
      });
    case 11:
      return Run<v1::WatchFlowsRequest>("WatchFlows", d, n, [](const auto& r) {
        CheckRequestFilters(r.filter(), "filter", FilterList(), r);
        CheckPeriod(r.interval_ns(), "interval_ns", r);
        CheckQueue(r.queue(), r);
      });
    case 12:
      return Run<v1::WatchAggregatesRequest>("WatchAggregates", d, n, [](const auto& r) {
        CheckPeriod(r.window_ns(), "window_ns", r);
      });
    case 13:
      return Run<v1::WatchStallsRequest>("WatchStalls", d, n, [](const auto& r) {
        CheckRequestFilters(r.allow(), "allow", r.deny(), r);
        CheckQueue(r.queue(), r);
      });
    case 14:
      return Run<v1::TraceFlowRequest>("TraceFlow", d, n, [](const auto& r) { CheckTrace(r); });
    case 15: return Run<v1::GetTotalsRequest>("GetTotals", d, n, [](const auto&) {});
    case 16: return Run<v1::GetCapabilitiesRequest>("GetCapabilities", d, n, [](const auto&) {});
    case 17: return Run<v1::GetHealthRequest>("GetHealth", d, n, [](const auto&) {});
    default: return Run<v1::GetVersionRequest>("GetVersion", d, n, [](const auto&) {});
  }
}

[[noreturn]] void Unreached(const char* what) {
  std::fprintf(
      stderr, "requests_fuzz: %s: %s reached: the target must not read the host or run a program\n",
      g_method, what);
  std::abort();
}

}  // namespace

// The daemon's functions the compiled sources name beyond themselves, never
// reached here: requests.cc's owner and rule lookups (LookupsOf: no part is
// loaded) and its resolution of a service to a cgroup (FiltersOf: filters naming a
// service go to FiltersFromProto alone); convert.cc's conversions of the
// observer's events and the rules' effects (the checks convert nothing). Their
// real sources would bring in the observer, the effect tracker and the BPF
// skeletons; each aborts if reached, so the target provably reads nothing of the
// host and runs nothing. A link error naming another such function (convert.cc
// using more of the observer): add it here.
CgroupOwner OwnerCache::Of(uint64_t) { Unreached("OwnerCache::Of"); }
CgroupOwner CgroupOwnerOf(const std::string&) { Unreached("CgroupOwnerOf"); }
std::string Cgroup2Mount() { Unreached("Cgroup2Mount"); }
Result<std::string> ResolveServiceCgroup(const ServiceTarget&, const std::string&) {
  Unreached("ResolveServiceCgroup");
}
const char* RtxTypeName(int) { Unreached("RtxTypeName"); }
const char* CaStateName(int) { Unreached("CaStateName"); }
uint64_t RetransSegsOf(const RtxTotals&) { Unreached("RetransSegsOf"); }
const std::array<uint64_t, DurationHist::kBounds> DurationHist::kBoundsNs = {};  // never read
std::vector<uint32_t> EffectTracker::RulesShownFor(uint64_t, const obs_tuple&) {
  Unreached("EffectTracker::RulesShownFor");
}
// The tracker's virtual functions too: UBSan's vptr check needs its type
// information, emitted with its first one (the destructor).
EffectTracker::~EffectTracker() { Unreached("EffectTracker::~EffectTracker"); }
void EffectTracker::RulePublished(uint32_t, const RuleSpec&) {
  Unreached("EffectTracker::RulePublished");
}
void EffectTracker::RuleRetired(uint32_t) { Unreached("EffectTracker::RuleRetired"); }
void EffectTracker::RuleForgotten(uint32_t) { Unreached("EffectTracker::RuleForgotten"); }

}  // namespace lossd

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // a string field's invalid UTF-8 is logged: not here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lossd::OneInput(data, size);
  return 0;
}
