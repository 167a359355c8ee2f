// rule add | ls | get | rm | clear | effect: the Injector service.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "commands.h"
#include "connect.h"
#include "format.h"
#include "rule_flags.h"

namespace lossctl {
namespace {

std::string Ratio(double v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

uint64_t NowUnixNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string ExpiresText(const v1::Rule& r) {
  if (r.state() == v1::RULE_STATE_EXPIRED || r.state() == v1::RULE_STATE_DELETED ||
      r.state() == v1::RULE_STATE_STOPPED)
    return RuleStateName(r.state());
  if (r.expires_unix_ns() == 0) return "never";
  uint64_t now = NowUnixNs();
  if (r.expires_unix_ns() <= now) return "now";
  return "in " + FormatDuration(r.expires_unix_ns() - now);
}

// A rule's share of drops, in its decisions: packets (skbs; segments when
// per-segment), the unit its rate and interval are stated in (a GSO packet is
// one decision however many segments it carries).
std::string DropShare(uint64_t dropped, uint64_t matched) {
  if (matched == 0) return "-";
  return FormatRate(static_cast<double>(dropped) / static_cast<double>(matched));
}

// What a rule's action did, under the action's name ("corrupted", ...).
struct Acted {
  const char* name;
  uint64_t pkts, segs, bytes;
};
Acted ActedOf(v1::Action action, const v1::RuleCounters& c) {
  const char* name = lossd::ActedName(static_cast<lossd::Action>(action));
  switch (action) {
    case v1::ACTION_CORRUPT:
    case v1::ACTION_CORRUPT_PAYLOAD:
      return {name, c.corrupted_packets(), c.corrupted_segments(), c.corrupted_bytes()};
    case v1::ACTION_DUPLICATE:
      return {name, c.duplicated_packets(), c.duplicated_segments(), c.duplicated_bytes()};
    case v1::ACTION_ECN:
    case v1::ACTION_ECN_PASS:
      return {name, c.marked_packets(), c.marked_segments(), c.marked_bytes()};
    default: return {name, c.dropped_packets(), c.dropped_segments(), c.dropped_bytes()};
  }
}

// "eth0 ingress via tc"
std::string Where(const v1::Rule& r) {
  const v1::RuleSpec& s = r.spec();
  return TargetSummary(r) + " " + DirectionName(s.direction()) + " via " + HookName(s.hook());
}

void PrintRuleLine(const v1::Rule& r, const char* verb) {
  const v1::RuleSpec& s = r.spec();
  std::string ttl = s.ttl_ns() ? ", ttl " + FormatDuration(s.ttl_ns()) + " (expires " +
                                     ExpiresText(r) + ")"
                               : ", no ttl (until deleted)";
  std::string schedule = lossd::ScheduleFromProto(s.schedule()).Describe();
  std::string guard = lossd::GuardFromProto(s.guard()).Describe();
  printf("rule %u %s: %s, %s, loss %s%s%s%s\n", r.id(), verb, Where(r).c_str(),
         MatchSummary(s.match()).c_str(), ImpairmentSummary(s).c_str(),
         schedule.empty() ? "" : (", " + schedule).c_str(),
         guard.empty() ? "" : (", " + guard).c_str(), ttl.c_str());
  for (const auto& a : r.attachments()) printf("  attached: %s\n", a.c_str());
  if (r.state() == v1::RULE_STATE_FAILED) printf("  FAILED: %s\n", r.reason().c_str());
  if (r.state() == v1::RULE_STATE_STOPPED) printf("  STOPPED: %s\n", r.reason().c_str());
  if (!r.hint().empty()) printf("  CHECK: %s\n", r.hint().c_str());
}

void KeyValue(const char* key, const std::string& value) {
  printf("  %-12s %s\n", key, value.c_str());
}

void PrintRuleDetail(const v1::Rule& r) {
  const v1::RuleSpec& s = r.spec();
  const v1::RuleCounters& c = r.counters();
  printf("rule %u  %s\n", r.id(), RuleStateName(r.state()));
  if (r.state() == v1::RULE_STATE_FAILED || r.state() == v1::RULE_STATE_STOPPED)
    KeyValue("reason", r.reason());
  if (!r.hint().empty()) KeyValue("CHECK", r.hint());
  KeyValue("target", Where(r));
  if (!r.cgroup().empty())
    KeyValue("cgroup", r.cgroup() + " (id " + std::to_string(r.cgroup_id()) + ")");
  KeyValue("match", MatchSummary(s.match()));
  KeyValue("loss", ImpairmentSummary(s));
  std::string schedule = lossd::ScheduleFromProto(s.schedule()).Describe();
  if (!schedule.empty())
    KeyValue("schedule", schedule + ", from " + FormatUnixTime(r.schedule_start_unix_ns()));
  std::string guard = lossd::GuardFromProto(s.guard()).Describe();
  if (!guard.empty()) KeyValue("guard", guard);
  KeyValue("priority", std::to_string(s.priority()));
  KeyValue("ttl",
           s.ttl_ns()
               ? FormatDuration(s.ttl_ns()) + ", expires " + ExpiresText(r) +
                     (r.expires_unix_ns() ? " (" + FormatUnixTime(r.expires_unix_ns()) + ")" : "")
               : "none (until deleted)");
  std::string opts;
  if (s.per_segment()) opts += "per-segment ";
  if (s.force()) opts += "force ";
  if (s.reattach()) opts += "reattach ";
  if (!opts.empty()) KeyValue("options", opts);
  if (!s.labels().empty()) KeyValue("labels", LabelsSummary(s.labels()));
  if (r.created_unix_ns()) KeyValue("created", FormatUnixTime(r.created_unix_ns()));
  for (const auto& a : r.attachments()) KeyValue("attached", a);
  KeyValue("matched", std::to_string(c.matched_packets()) + " pkts, " +
                          std::to_string(c.matched_segments()) + " segs, " +
                          FormatBytes(c.matched_bytes()));
  KeyValue("dropped", std::to_string(c.dropped_packets()) + " pkts, " +
                          std::to_string(c.dropped_segments()) + " segs, " +
                          FormatBytes(c.dropped_bytes()) + " (" +
                          DropShare(c.dropped_packets(), c.matched_packets()) +
                          " of packets: one decision each)");
  if (s.action() != v1::ACTION_DROP) {
    const Acted a = ActedOf(s.action(), c);
    KeyValue(a.name, std::to_string(a.pkts) + " pkts, " + std::to_string(a.segs) + " segs, " +
                         FormatBytes(a.bytes) + " (" + DropShare(a.pkts, c.matched_packets()) +
                         " of packets)");
    KeyValue("unchanged", std::to_string(c.unacted_packets()) +
                              " pkts its model picked that the action could not apply to "
                              "(passed as they were)");
  }
}

// The DROPPED cell: the drops, and what another action did ("12 +1036 marked").
std::string DroppedCell(const v1::RuleSpec& s, const v1::RuleCounters& c) {
  std::string out = std::to_string(c.dropped_packets());
  if (s.action() == v1::ACTION_DROP) return out;
  const Acted a = ActedOf(s.action(), c);
  return out + " +" + std::to_string(a.pkts) + " " + a.name;
}

void PrintRuleTable(const google::protobuf::RepeatedPtrField<v1::Rule>& rules) {
  Table t({"ID", "STATE", "TARGET", "DIR", "HOOK", "MATCH", "LOSS", "PRIO", "EXPIRES", "MATCHED",
           "DROPPED", "DROP%", "TRAFFIC", "LABELS"});
  for (size_t c : {0, 7, 9, 10, 11, 12}) t.RightAlign(c);
  for (const auto& r : rules) {
    const auto& s = r.spec();
    const auto& c = r.counters();
    t.AddRow({std::to_string(r.id()), RuleStateName(r.state()), TargetSummary(r),
              DirectionName(s.direction()), HookName(s.hook()), MatchSummary(s.match()),
              ImpairmentSummary(s), std::to_string(s.priority()), ExpiresText(r),
              std::to_string(c.matched_packets()), DroppedCell(s, c),
              DropShare(c.dropped_packets(), c.matched_packets()), FormatBytes(c.matched_bytes()),
              LabelsSummary(s.labels())});
  }
  t.Print(stdout);
  // A rule that matched nothing says what to check, below the table (which stays one row each).
  for (const auto& r : rules)
    if (!r.hint().empty()) printf("rule %u %s\n", r.id(), r.hint().c_str());
}

bool ParseRuleId(const std::string& text, uint32_t* id, std::string* error) {
  uint64_t v;
  if (!ParseUint(text, 1, UINT32_MAX, "rule id", &v, error)) return false;
  *id = static_cast<uint32_t>(v);
  return true;
}

bool ReadInput(const std::string& path, std::string* out, std::string* error) {
  if (path == "-") {
    out->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return true;
  }
  std::ifstream in(path);
  if (!in) {
    *error = "--file: cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// ---------------------------------------------------------------- add --

struct AddFlags {
  RuleFlags rule;
  std::string file;
  bool atomic = false, quiet = false;
};

int AddOne(const Globals& g, const AddFlags& f) {
  v1::CreateRuleRequest req;
  std::string error;
  if (!BuildRuleSpec(f.rule, "--", req.mutable_spec(), &error)) return UsageError(error);
  v1::Rule rule;
  if (int rc = CallOnce(g, "rule add", [&](Connection& c, grpc::ClientContext* ctx) {
        return c.injector().CreateRule(ctx, req, &rule);
      }))
    return rc;
  if (g.json())
    PrintLine(ToJson(rule));
  else if (f.quiet)
    printf("%u\n", rule.id());
  else
    PrintRuleLine(rule, "added");
  if (rule.state() == v1::RULE_STATE_FAILED)
    return Fail(kExitError, "rule " + std::to_string(rule.id()) + " failed: " + rule.reason());
  return kExitOk;
}

int AddBatch(const Globals& g, const AddFlags& f) {
  std::string text, error;
  if (!ReadInput(f.file, &text, &error)) return UsageError(error);
  v1::CreateRulesRequest req;
  std::vector<v1::RuleSpec> specs;
  std::string source = f.file == "-" ? "stdin" : f.file;
  std::vector<std::string> where;
  if (!ParseRulesJson(text, source, f.rule, &specs, &error, &where)) return UsageError(error);
  for (auto& s : specs) *req.add_specs() = std::move(s);
  req.set_atomic(f.atomic);

  v1::CreateRulesResponse resp;
  if (int rc = CallOnce(g, "rule add --file", [&](Connection& c, grpc::ClientContext* ctx) {
        grpc::Status st = c.injector().CreateRules(ctx, req, &resp);
        // --atomic: the first refused spec's status, "specs[i]: ..."
        return st.ok() ? st
                       : grpc::Status(st.error_code(), LocateSpecError(st.error_message(), where));
      }))
    return rc;

  int failed = 0;
  for (int i = 0; i < resp.errors_size(); i++) {
    if (resp.errors(i).empty()) continue;
    failed++;
    std::string msg = LocateSpecError(resp.errors(i), where);
    if (msg == resp.errors(i) && i < static_cast<int>(where.size())) msg = where[i] + ": " + msg;
    fprintf(stderr, "lossctl: %s\n", msg.c_str());
  }
  if (g.json()) {
    PrintLine(ToJson(resp));
  } else if (f.quiet) {
    for (const auto& r : resp.rules()) printf("%u\n", r.id());
  } else if (resp.rules_size() > 0) {
    PrintRuleTable(resp.rules());
  }
  if (failed) {
    return Fail(kExitInvalid, std::to_string(failed) + " of " + std::to_string(req.specs_size()) +
                                  " rules refused" + (f.atomic ? " (--atomic: none created)" : ""));
  }
  return kExitOk;
}

// -------------------------------------------------------- ls get rm ... --

int List(const Globals& g, const std::vector<std::string>& labels, bool deleted) {
  v1::ListRulesRequest req;
  req.set_include_deleted(deleted);
  std::map<std::string, std::string> m;
  std::string error;
  if (!ParseLabels(labels, "--label", &m, &error)) return UsageError(error);
  for (const auto& kv : m) (*req.mutable_labels())[kv.first] = kv.second;
  v1::ListRulesResponse resp;
  if (int rc = CallOnce(g, "rule ls", [&](Connection& c, grpc::ClientContext* ctx) {
        return c.injector().ListRules(ctx, req, &resp);
      }))
    return rc;
  if (g.json())
    PrintLine(ToJson(resp));
  else if (resp.rules().empty())
    printf("no rules\n");
  else
    PrintRuleTable(resp.rules());
  return kExitOk;
}

// A call about one rule, by the id as typed: `call(stub, context, id)`.
template <typename Call>
int CallForRule(const Globals& g, const std::string& what, const std::string& id_text, Call call) {
  uint32_t id;
  std::string error;
  if (!ParseRuleId(id_text, &id, &error)) return UsageError(error);
  return CallOnce(g, what + " " + id_text, [&](Connection& c, grpc::ClientContext* ctx) {
    return call(c.injector(), ctx, id);
  });
}

int Get(const Globals& g, const std::string& id_text) {
  v1::Rule rule;
  if (int rc = CallForRule(g, "rule get", id_text,
                           [&](v1::Injector::Stub& s, grpc::ClientContext* ctx, uint32_t id) {
                             v1::GetRuleRequest req;
                             req.set_id(id);
                             return s.GetRule(ctx, req, &rule);
                           }))
    return rc;
  if (g.json())
    PrintLine(ToJson(rule));
  else
    PrintRuleDetail(rule);
  return kExitOk;
}

int Remove(const Globals& g, const std::vector<std::string>& id_texts) {
  std::vector<uint32_t> ids;
  std::string error;
  for (const auto& t : id_texts) {
    uint32_t id;
    if (!ParseRuleId(t, &id, &error)) return UsageError(error);
    ids.push_back(id);
  }
  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  int result = kExitOk;
  for (uint32_t id : ids) {
    v1::DeleteRuleRequest req;
    req.set_id(id);
    grpc::ClientContext ctx;
    conn->SetDeadline(&ctx);
    v1::DeleteRuleResponse resp;
    grpc::Status st = conn->injector().DeleteRule(&ctx, req, &resp);
    if (!st.ok()) {
      int rc = conn->Report(st, "rule rm " + std::to_string(id));
      if (result == kExitOk) result = rc;  // the first failure decides; go on with the others
      if (rc == kExitUnavailable) break;
      continue;
    }
    if (g.json()) {
      PrintLine(ToJson(resp));
    } else {
      const auto& c = resp.rule().counters();
      printf("rule %u removed: dropped %" PRIu64 " of %" PRIu64 " packets (%s), %" PRIu64
             " segments, %s\n",
             id, c.dropped_packets(), c.matched_packets(),
             DropShare(c.dropped_packets(), c.matched_packets()).c_str(), c.dropped_segments(),
             FormatBytes(c.dropped_bytes()).c_str());
    }
  }
  return result;
}

int Clear(const Globals& g) {
  v1::ClearRulesResponse resp;
  if (int rc = CallOnce(g, "rule clear", [&](Connection& c, grpc::ClientContext* ctx) {
        return c.injector().ClearRules(ctx, v1::ClearRulesRequest(), &resp);
      }))
    return rc;
  if (g.json())
    PrintLine(ToJson(resp));
  else
    printf("%u rule%s removed\n", resp.deleted(), resp.deleted() == 1 ? "" : "s");
  return kExitOk;
}

int Effect(const Globals& g, const std::string& id_text) {
  v1::RuleEffect e;
  if (int rc = CallForRule(g, "rule effect", id_text,
                           [&](v1::Injector::Stub& s, grpc::ClientContext* ctx, uint32_t id) {
                             v1::GetRuleEffectRequest req;
                             req.set_id(id);
                             return s.GetRuleEffect(ctx, req, &e);
                           }))
    return rc;
  if (g.json()) {
    PrintLine(ToJson(e));
    return kExitOk;
  }
  const auto& c = e.counters();
  printf("rule %u\n", e.id());
  if (e.deterministic()) {
    // First-k, every-n-th: drops by count, held against the count the model gives
    // for the packets each flow sent (the data plane's per-flow counts).
    if (!e.has_expectation()) {
      KeyValue("expected", c.matched_packets() ? "- (the data plane's per-flow counts did not add "
                                                 "up to the matched packets: traffic still moving, "
                                                 "a flow's state evicted, or the rule re-attached)"
                                               : "- (no packet matched yet)");
    } else {
      const auto& x = e.expectation();
      uint64_t want = x.expected_dropped_packets(), got = x.dropped_packets();
      std::string verdict =
          got == want ? "as configured"
                      : std::string("NOT as configured: ") + (got > want ? "+" : "-") +
                            std::to_string(got > want ? got - want : want - got);
      KeyValue("expected", std::to_string(want) + " drops of the " +
                               std::to_string(x.matched_packets()) + " packets of " +
                               std::to_string(x.flows()) + " flow" + (x.flows() == 1 ? "" : "s") +
                               "; " + std::to_string(got) + " dropped  (" + verdict + ")");
    }
  } else if (c.matched_packets() == 0) {
    KeyValue("configured", FormatRate(e.configured_rate()));
    KeyValue("measured", e.hint().empty() ? "- (no packet matched yet)" : "- (" + e.hint() + ")");
  } else if (e.steps_size() > 0) {  // a ramp: each step against its own rate
    KeyValue("configured", "a ramp of " + std::to_string(e.steps_size()) + " steps (mean " +
                               Rate3(e.configured_rate()) + " over its time)");
    KeyValue("measured", e.configured_within_ci()
                             ? "every step's rate within its 99.9% CI"
                             : "a step's rate OUTSIDE its 99.9% CI (or none matched)");
    Table t({"STEP", "FROM", "FOR", "RATE", "MATCHED", "DROPPED", "MEASURED", "99.9% CI", ""});
    for (size_t col : {0, 1, 2, 3, 4, 5, 6}) t.RightAlign(col);
    int i = 0;
    for (const auto& st : e.steps()) {
      bool none = st.matched_packets() == 0;
      t.AddRow({std::to_string(++i), "+" + FormatDuration(st.start_offset_ns()),
                FormatDuration(st.duration_ns()), FormatRate(st.configured_rate()),
                std::to_string(st.matched_packets()), std::to_string(st.dropped_packets()),
                none ? "-" : Rate3(st.measured_rate()),
                none ? "-" : Rate3(st.rate_ci_low()) + " .. " + Rate3(st.rate_ci_high()),
                none ? "(no packet)" : st.configured_within_ci() ? "ok" : "OUTSIDE"});
    }
    for (const auto& line : t.Lines()) printf("    %s\n", line.c_str());
  } else if (e.configured_rate() < 0) {  // a policer: what it picks follows from the traffic
    KeyValue("configured", "a policer (no rate: what it picks follows from the traffic)");
    KeyValue("measured", FormatRate(e.measured_rate()) + " of packets picked");
  } else {  // over packets, the trial unit (docs/architecture.md#measured-rate)
    KeyValue("configured", FormatRate(e.configured_rate()));
    KeyValue("measured", FormatRate(e.measured_rate()) + " of packets  99.9% CI " +
                             FormatRate(e.rate_ci_low()) + " .. " + FormatRate(e.rate_ci_high()) +
                             (e.configured_within_ci() ? "  (configured rate within)"
                                                       : "  (configured rate OUTSIDE)"));
  }
  KeyValue("matched", std::to_string(c.matched_segments()) + " segs, " +
                          std::to_string(c.matched_packets()) + " pkts, " +
                          FormatBytes(c.matched_bytes()) + ", " + std::to_string(e.flows()) +
                          " flow" + (e.flows() == 1 ? "" : "s"));
  KeyValue("dropped", std::to_string(c.dropped_segments()) + " segs, " +
                          std::to_string(c.dropped_packets()) + " pkts, " +
                          FormatBytes(c.dropped_bytes()));
  uint64_t total = 0;
  std::string by_type;
  for (const auto& kv : OrderedByType(e.retransmitted_segments())) {
    total += kv.second;
    by_type += (by_type.empty() ? "" : ", ") + kv.first + " " + std::to_string(kv.second);
  }
  KeyValue("retransmits", std::to_string(total) + " segs" +
                              (by_type.empty() ? "" : " (" + by_type + ")") +
                              " in the flows matched");
  if (c.dropped_segments() > 0)
    KeyValue("ratio", Ratio(static_cast<double>(total) / c.dropped_segments()) +
                          " retransmitted per dropped segment");
  // Of those: the resends of its drops, the others the loss caused, the needless ones.
  uint64_t of_drops = 0, dsacked = 0;
  for (const auto& kv : e.resent_dropped_segments()) of_drops += kv.second;
  std::string dsack_by_type;
  for (const auto& kv : OrderedByType(e.dsacked_segments())) {
    if (!kv.second) continue;
    dsacked += kv.second;
    dsack_by_type += (dsack_by_type.empty() ? "" : ", ") + kv.first + " " + std::to_string(kv.second);
  }
  KeyValue("of which", std::to_string(of_drops) + " resent its dropped segments, " +
                           std::to_string(total > of_drops ? total - of_drops : 0) +
                           " other resends (after a timeout TCP resends what was in flight)");
  KeyValue("needless", std::to_string(dsacked) + " segs the receivers D-SACKed (they had arrived)" +
                           (dsack_by_type.empty() ? "" : ": " + dsack_by_type));
  // How its flows answered: congestion state entries (CWR: ECN echoes), the echoes, the copies.
  std::string entries;
  for (uint32_t st = 1; st < 5; st++) {  // not "open": every recovery ends there
    auto it = e.ca_entries().find(CaStateName(st));
    uint64_t n = it == e.ca_entries().end() ? 0 : it->second;
    entries += (entries.empty() ? "" : ", ") + CaStateName(st) + " " + std::to_string(n);
  }
  KeyValue("entered", entries + " (congestion states, by its flows)");
  KeyValue("ecn echoes", std::to_string(e.ece_acks()) + " ACKs with ECE received");
  KeyValue("copies", std::to_string(e.dsacked_copies()) +
                         " segs D-SACKed that were never resent (copies the path made)");
  // Drop by drop: the resends of its drops and the time they took, the stalls they made.
  KeyValue("drops logged", std::to_string(e.drops_recorded()) + " TCP data skbs (their ranges kept)");
  std::string recovery;
  for (const std::string& type : RetransmitTypeNames()) {
    auto it = e.recovery().find(type);
    if (it == e.recovery().end() || !it->second.count()) continue;
    const v1::Durations& d = it->second;
    recovery += (recovery.empty() ? "" : ", ") + type + " " + std::to_string(d.count()) +
                " (mean " + FormatDuration(d.sum_ns() / d.count()) + ", max " +
                FormatDuration(d.max_ns()) + ")";
  }
  KeyValue("resent drops", recovery.empty() ? "-" : recovery + ": drop to resend");
  auto stalls = [](const google::protobuf::Map<std::string, v1::StallTotals>& m) {
    std::vector<std::pair<uint64_t, std::string>> by_time;
    for (const auto& kv : m)
      if (kv.second.count()) by_time.emplace_back(kv.second.time_ns(), kv.first);
    std::sort(by_time.rbegin(), by_time.rend());
    std::string out;
    for (const auto& [ns, cause] : by_time)
      out += (out.empty() ? "" : ", ") + cause + " " + std::to_string(m.at(cause).count()) + "/" +
             FormatDuration(ns);
    return out.empty() ? std::string("-") : out;
  };
  KeyValue("stalls caused", stalls(e.stalls_caused()) + " (by its drops; count/time)");
  KeyValue("stalls on flows", stalls(e.stalls_on_flows()) + " (every stall of the flows matched)");
  return kExitOk;
}

}  // namespace

void AddRuleCommands(CLI::App* app, const Globals* g, Run* run) {
  CLI::App* rule = app->add_subcommand("rule", "Loss rules: add, list, inspect, remove");
  rule->callback([rule, run] {
    if (rule->get_subcommands().empty())
      *run = [] { return UsageError("rule: give a command: add, ls, get, rm, clear or effect"); };
  });

  // add
  auto af = std::make_shared<AddFlags>();
  RuleFlags& f = af->rule;
  CLI::App* add = rule->add_subcommand("add", "Add a loss rule (or the rules of --file)");
  AddRuleFlags(add, &f);
  add->add_option("--file,-f", af->file,
                  "Add the rules of a JSON file (- for stdin): an array, or one object per line, "
                  "fields named as the flags (flags given here are their defaults), or as "
                  "-o json rule get / rule ls print them");
  add->add_flag("--atomic", af->atomic, "With --file: all rules or none");
  add->add_flag("--quiet,-q", af->quiet, "Print only the new rule ids");
  add->callback([g, af, run] {
    *run = [g, af] {
      if (af->atomic && af->file.empty()) return UsageError("--atomic goes with --file");
      return af->file.empty() ? AddOne(*g, *af) : AddBatch(*g, *af);
    };
  });

  // ls
  auto labels = std::make_shared<std::vector<std::string>>();
  CLI::App* ls = rule->add_subcommand("ls", "List rules with their counters");
  ls->alias("list");
  ls->add_option("--label", *labels, "Only rules carrying key=value (repeatable: all of them)")
      ->allow_extra_args(false);
  auto deleted = std::make_shared<bool>(false);
  ls->add_flag("--deleted", *deleted,
               "Deleted rules too (lossd keeps them, with their effect, for --keep-expired)");
  ls->callback([g, labels, deleted, run] {
    *run = [g, labels, deleted] { return List(*g, *labels, *deleted); };
  });

  // get
  auto get_id = std::make_shared<std::string>();
  CLI::App* get = rule->add_subcommand("get", "Show one rule");
  get->add_option("ID", *get_id, "Rule id")->required();
  get->callback([g, get_id, run] { *run = [g, get_id] { return Get(*g, *get_id); }; });

  // rm
  auto rm_ids = std::make_shared<std::vector<std::string>>();
  CLI::App* rm = rule->add_subcommand("rm", "Remove rules (prints their final counters)");
  rm->alias("del");
  rm->add_option("ID", *rm_ids, "Rule ids")->required();
  rm->callback([g, rm_ids, run] { *run = [g, rm_ids] { return Remove(*g, *rm_ids); }; });

  // clear
  CLI::App* clear = rule->add_subcommand("clear", "Remove every rule");
  clear->callback([g, run] { *run = [g] { return Clear(*g); }; });

  // effect
  auto eff_id = std::make_shared<std::string>();
  CLI::App* effect = rule->add_subcommand(
      "effect",
      "A rule's drops beside the retransmissions they caused; measured vs configured rate");
  effect->add_option("ID", *eff_id, "Rule id")->required();
  effect->callback([g, eff_id, run] { *run = [g, eff_id] { return Effect(*g, *eff_id); }; });
}

}  // namespace lossctl
