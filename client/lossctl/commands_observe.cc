// watch | flows | stats: the Observer service (and the Injector's counter
// stream for `stats --rules`).
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cinttypes>
#include <map>
#include <memory>

#include "commands.h"
#include "connect.h"
#include "filter_flags.h"
#include "flow_view.h"
#include "format.h"
#include "interrupt.h"
#include "rule_flags.h"
#include "rules/rule.h"

namespace lossctl {
namespace {

constexpr uint32_t kInfiniteSsthresh = 0x7fffffff;  // TCP_INFINITE_SSTHRESH

uint64_t NowMonoNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Event times are the daemon's CLOCK_MONOTONIC: wall-clock time when the
// daemon is on this host (a Unix socket), else monotonic seconds.
std::string EventTime(uint64_t mono_ns, bool same_host) {
  if (same_host) return FormatMonoTime(mono_ns);
  char buf[40];
  snprintf(buf, sizeof(buf), "%" PRIu64 ".%06" PRIu64, mono_ns / 1000000000,
           mono_ns / 1000 % 1000000);
  return buf;
}

std::string Srtt(uint32_t us) {
  return FormatDuration(static_cast<uint64_t>(us) * 1000);
}

std::string EventLine(const v1::RetransmitEvent& e, bool same_host) {
  const v1::SocketState& s = e.state();
  char head[256];
  snprintf(head, sizeof(head), "%s %-7s %s > %s", EventTime(e.time_mono_ns(), same_host).c_str(),
           RetransmitTypeName(e.type()),
           FormatEndpoint(e.tuple().local_addr(), e.tuple().local_port()).c_str(),
           FormatEndpoint(e.tuple().remote_addr(), e.tuple().remote_port()).c_str());
  std::string line = head;
  line += " segs " + std::to_string(e.segments()) + " seq " + std::to_string(e.seq());
  line += " cwnd " + std::to_string(s.cwnd());
  line += " ssthresh " +
          (s.ssthresh() >= kInfiniteSsthresh ? std::string("-") : std::to_string(s.ssthresh()));
  line += " srtt " + Srtt(s.srtt_us());
  line += " inflight " + std::to_string(s.in_flight());
  line += " ca " + CaStateName(s.ca_state());
  if (s.backoff()) line += " backoff " + std::to_string(s.backoff());
  if (e.rule_ids_size()) {
    std::string ids;
    for (uint32_t id : e.rule_ids()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    line += " rules " + ids;
  }
  // The root cgroup's sockets (no service of their own) carry no owner.
  if (!e.owner().path().empty() && e.owner().path() != "/")
    line += " owner " + OwnerSummary(e.owner());
  if (e.outcome() != v1::OUTCOME_SENT) {
    line += std::string(" ") + OutcomeName(e.outcome());
    if (e.err()) line += " err " + std::to_string(e.err());
  }
  return line;
}

std::string GapLine(const v1::Gap& g) {
  return "-- " + std::to_string(g.count()) + " event" + (g.count() == 1 ? "" : "s") + " lost (" +
         GapSourceText(g.source()) + ")";
}

// Reads a stream until it ends, the user interrupts it, or on_msg says stop
// (false). Interrupting or stopping is a clean end (exit 0).
template <typename Msg, typename OnMsg>
int ReadStream(Connection* conn, grpc::ClientContext* ctx, grpc::ClientReaderInterface<Msg>* reader,
               const CancelOnSignal& guard, const std::string& what, OnMsg on_msg) {
  Msg msg;
  bool stopped = false;
  uint64_t received = 0;
  while (reader->Read(&msg)) {
    received++;
    if (!on_msg(msg)) {
      stopped = true;
      ctx->TryCancel();
      while (reader->Read(&msg)) {
      }
      break;
    }
  }
  grpc::Status st = reader->Finish();
  if (stopped || guard.interrupted() || st.ok()) return kExitOk;
  // The connection was up (Stream waited for it): UNAVAILABLE now
  // means lossd went away, before or after the first message.
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE)
    return Fail(kExitUnavailable, what + ": lossd ended the stream" +
                                      (received ? "" : " before its first message") + ": " +
                                      st.error_message());
  return conn->Report(st, what);
}

// Connects within --timeout (streams carry no deadline), starts the stream
// with `start(connection, &context)` and reads it (ReadStream).
template <typename Start, typename OnMsg>
int Stream(const Globals& g, const std::string& what, Start start, OnMsg on_msg) {
  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  if (!conn->WaitConnected())
    return conn->Report(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, ""), what);
  grpc::ClientContext ctx;
  CancelOnSignal guard(&ctx);
  auto reader = start(*conn, &ctx);
  return ReadStream(conn.get(), &ctx, reader.get(), guard, what, on_msg);
}

// A stream's message as JSON (-o json); false when stdout is gone or
// `count` (0: no limit) messages are out.
bool JsonUntilCount(const google::protobuf::Message& m, uint64_t count, uint64_t* seen) {
  if (!PrintLine(ToJson(m))) return false;
  return !(count && ++*seen >= count);
}

bool ParseCount(const std::string& text, uint64_t* count, std::string* error) {
  *count = 0;
  return text.empty() || ParseUint(text, 1, UINT64_MAX, "--count", count, error);
}

void AddAllowFilterFlags(CLI::App* cmd, FilterFlags* f) {
  cmd->add_option("--addr", f->addrs, "Local or remote address/CIDR (repeatable: any of them)")
      ->allow_extra_args(false);
  cmd->add_option("--port", f->ports, "Local or remote port or LO-HI (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--cgroup", f->cgroups,
                  "cgroup id (stat -c %i DIR), or path below the cgroup v2 mount (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--unit", f->units, "Sockets of this systemd unit (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--container", f->containers,
                  "Sockets of this container: id or prefix (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--pod", f->pods, "Sockets of this pod: UID or prefix (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--pid", f->pids, "Sockets of this process's cgroup, as rule add --pid (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--rule", f->rules, "Flows a rule's match covers, by rule id (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--netns", f->netns,
                  "Sockets of this network namespace: its inode, /proc/PID/ns/net or "
                  "/run/netns/NAME (repeatable)")
      ->allow_extra_args(false);
}

void AddDenyFilterFlags(CLI::App* cmd, FilterFlags* f) {
  cmd->add_option("--deny-addr", f->deny_addrs, "Leave out this address/CIDR (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--deny-port", f->deny_ports, "Leave out this port or LO-HI (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--deny-cgroup", f->deny_cgroups, "Leave out this cgroup id (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--deny-rule", f->deny_rules, "Leave out flows of this rule (repeatable)")
      ->allow_extra_args(false);
}

// ---------------------------------------------------------------- watch --

struct WatchFlags {
  FilterFlags filter;
  std::string queue, count;
};

void AddStreamFlags(CLI::App* cmd, WatchFlags* f) {
  cmd->add_option("--queue", f->queue, "This client's queue in lossd, in events (default 65536)");
  cmd->add_option("--count", f->count, "Stop after this many events");
}

// A filtered event stream's request from the command line (watch, stalls):
// its allow/deny filters and queue; *count from --count. Exit code, kExitOk.
template <typename Req>
int StreamRequest(const WatchFlags& f, Req* req, uint64_t* count) {
  std::vector<v1::EventFilter> allow, deny;
  std::string error;
  if (!BuildFilters(f.filter, &allow, &deny, &error)) return UsageError(error);
  for (auto& a : allow) *req->add_allow() = std::move(a);
  for (auto& d : deny) *req->add_deny() = std::move(d);
  if (!f.queue.empty()) {
    uint64_t q;
    if (!ParseUint(f.queue, 1, UINT32_MAX, "--queue", &q, &error)) return UsageError(error);
    req->set_queue(static_cast<uint32_t>(q));
  }
  if (!ParseCount(f.count, count, &error)) return UsageError(error);
  return kExitOk;
}

// Prints a stream of batches of event/gap items, one line each (JSON with -o
// json), until --count events (0: until interrupted). `event_line(event,
// same_host)` renders an event.
template <typename Batch, typename Call, typename EventLine>
int PrintEvents(const Globals& g, const char* name, uint64_t count, Call call,
                EventLine event_line) {
  bool same_host = false;
  uint64_t events = 0;
  auto start = [&](Connection& c, grpc::ClientContext* ctx) {
    same_host = c.same_host();
    return call(c, ctx);
  };
  return Stream(g, name, start, [&](const Batch& b) {
    for (const auto& m : b.items()) {
      std::string line;
      if (g.json())
        line = ToJson(m);
      else if (m.has_event())
        line = event_line(m.event(), same_host);
      else if (m.has_gap())
        line = GapLine(m.gap());
      else
        continue;
      if (!PrintLine(line, false)) return false;  // stdout closed
      if (m.has_event() && count && ++events >= count) {
        fflush(stdout);
        return false;
      }
    }
    return fflush(stdout) == 0;  // once per batch
  });
}

int Watch(const Globals& g, const WatchFlags& f) {
  v1::WatchRetransmitsRequest req;
  uint64_t count;
  if (int rc = StreamRequest(f, &req, &count)) return rc;
  return PrintEvents<v1::RetransmitStreamBatch>(
      g, "watch", count,
      [&](Connection& c, grpc::ClientContext* ctx) { return c.observer().WatchRetransmits(ctx, req); },
      [](const v1::RetransmitEvent& e, bool same_host) { return EventLine(e, same_host); });
}

// ---------------------------------------------------------------- flows --

// The terminal's width (a table fits it), COLUMNS when stdout is not one;
// 0: no limit.
size_t TerminalWidth() {
  struct winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col)
    return ws.ws_col;
  const char* c = getenv("COLUMNS");
  uint64_t w;
  std::string error;
  if (c && *c && ParseUint(c, 1, 100000, "COLUMNS", &w, &error)) return w;
  return 0;
}

int Flows(const Globals& g, const FilterFlags& f) {
  v1::ListFlowsRequest req;
  std::vector<v1::EventFilter> allow, deny;
  std::string error;
  if (!BuildFilters(f, &allow, &deny, &error)) return UsageError(error);
  for (auto& a : allow) *req.add_filter() = std::move(a);
  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  v1::ListFlowsResponse resp;
  if (int rc = Unary(conn.get(), "flows", [&](grpc::ClientContext* ctx) {
        return conn->observer().ListFlows(ctx, req, &resp);
      }))
    return rc;
  if (g.json()) {
    PrintLine(ToJson(resp));
    return kExitOk;
  }
  if (resp.flows().empty()) {
    printf("no flows\n");
    return kExitOk;
  }
  uint64_t now = conn->same_host() ? NowMonoNs() : 0;
  for (const auto& line : FlowsTable(resp, now, TerminalWidth()))
    if (!PrintLine(line, false)) return kExitOk;  // stdout closed
  fflush(stdout);
  return kExitOk;
}

// --------------------------------------------------------------- stalls --

int Stalls(const Globals& g, const WatchFlags& f) {
  v1::WatchStallsRequest req;
  uint64_t count;
  if (int rc = StreamRequest(f, &req, &count)) return rc;
  return PrintEvents<v1::StallStreamBatch>(
      g, "stalls", count,
      [&](Connection& c, grpc::ClientContext* ctx) { return c.observer().WatchStalls(ctx, req); },
      [](const v1::StallEvent& e, bool same_host) {
        return StallLine(e, EventTime(e.start_mono_ns(), same_host));
      });
}

// ---------------------------------------------------------------- stats --

struct StatsFlags {
  std::string interval = "1s", count;
  std::vector<std::string> rule_ids;
  bool rules = false;
};

// "12:00:03", or "12:00:03.250" for windows below a second.
std::string Clock(uint64_t unix_ns, bool millis = false) {
  return FormatUnixTime(unix_ns, true).substr(0, millis ? 12 : 8);
}

std::string AggregateHeader(bool millis) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%*s %7s", millis ? 12 : 8, "TIME", "TOTAL");
  std::string h = buf;
  for (const auto& t : RetransmitTypeNames()) {
    std::string upper = t;
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    snprintf(buf, sizeof(buf), " %7s", upper.c_str());
    h += buf;
  }
  return h + "    LOST  BY-RULE";
}

// One window: its start, the total, each type, events lost, "rule:segments".
std::string AggregateRow(const v1::Aggregate& a, bool millis) {
  uint64_t total = 0;
  for (const auto& kv : a.retransmits_by_type()) total += kv.second;
  char buf[64];
  snprintf(buf, sizeof(buf), "%*s %7" PRIu64, millis ? 12 : 8,
           Clock(a.window_start_unix_ns(), millis).c_str(), total);
  std::string line = buf;
  for (const auto& t : RetransmitTypeNames()) {
    auto it = a.retransmits_by_type().find(t);
    snprintf(buf, sizeof(buf), " %7" PRIu64, it == a.retransmits_by_type().end() ? 0 : it->second);
    line += buf;
  }
  uint64_t lost = 0;
  for (const auto& gap : a.gaps()) lost += gap.count();
  snprintf(buf, sizeof(buf), " %7" PRIu64 "  ", lost);
  line += buf;
  std::map<uint32_t, uint64_t> by_rule(a.retransmits_by_rule().begin(),
                                       a.retransmits_by_rule().end());
  std::string rules;
  for (const auto& kv : by_rule)
    rules +=
        (rules.empty() ? "" : " ") + std::to_string(kv.first) + ":" + std::to_string(kv.second);
  return line + (rules.empty() ? "-" : rules);
}

int StatsAggregates(const Globals& g, uint64_t interval_ns, uint64_t count) {
  v1::WatchAggregatesRequest req;
  req.set_window_ns(interval_ns);
  uint64_t seen = 0;
  bool header = false;
  auto start = [&](Connection& c, grpc::ClientContext* ctx) {
    return c.observer().WatchAggregates(ctx, req);
  };
  return Stream(g, "stats", start, [&](const v1::Aggregate& a) {
    if (g.json()) return JsonUntilCount(a, count, &seen);
    bool millis = interval_ns < 1000000000;
    if (!header) {
      uint64_t window = a.window_ns() ? a.window_ns() : interval_ns;
      if (!PrintLine("retransmitted segments per " + FormatDuration(window)) ||
          !PrintLine(AggregateHeader(millis)))
        return false;
      header = true;
    }
    std::string line = AggregateRow(a, millis);
    if (!PrintLine(line)) return false;
    return !(count && ++seen >= count);
  });
}

int StatsRules(const Globals& g, const std::vector<uint32_t>& ids, uint64_t interval_ns,
               uint64_t count) {
  v1::WatchRuleCountersRequest req;
  for (uint32_t id : ids) req.add_ids(id);
  req.set_interval_ns(interval_ns);
  std::map<uint32_t, v1::RuleCounters> prev;
  uint64_t prev_time = 0, seen = 0;
  bool header = false;
  auto start = [&](Connection& c, grpc::ClientContext* ctx) {
    return c.injector().WatchRuleCounters(ctx, req);
  };
  return Stream(g, "stats", start, [&](const v1::RuleCountersUpdate& u) {
    if (g.json()) return JsonUntilCount(u, count, &seen);
    if (!header) {
      if (!PrintLine(
              "    TIME   RULE    STATE  MATCHED/s  DROPPED/s     DROP%    DROPPED  TRAFFIC/s"))
        return false;
      header = true;
    }
    double secs =
        prev_time && u.time_unix_ns() > prev_time ? (u.time_unix_ns() - prev_time) / 1e9 : 0;
    std::map<uint32_t, v1::RuleCounters> next;
    for (const auto& r : u.rules()) {
      const auto& c = r.counters();
      next[r.id()] = c;
      auto it = prev.find(r.id());
      std::string matched = "-", dropped = "-", share = "-", traffic = "-";
      // A rule seen for the first time, or whose counters restarted
      // (UpdateRule), has no rate yet.
      // Packets: the rule's decisions, the unit of its rate (DropShare).
      if (it != prev.end() && secs > 0 && c.matched_packets() >= it->second.matched_packets() &&
          c.dropped_packets() >= it->second.dropped_packets() &&
          c.matched_bytes() >= it->second.matched_bytes()) {
        uint64_t dm = c.matched_packets() - it->second.matched_packets();
        uint64_t dd = c.dropped_packets() - it->second.dropped_packets();
        uint64_t db = c.matched_bytes() - it->second.matched_bytes();
        char buf[32];
        snprintf(buf, sizeof(buf), "%.0f", dm / secs);
        matched = buf;
        snprintf(buf, sizeof(buf), "%.0f", dd / secs);
        dropped = buf;
        if (dm) share = FormatRate(static_cast<double>(dd) / dm);
        traffic = FormatBytes(static_cast<uint64_t>(db / secs)) + "/s";
      }
      char line[256];
      snprintf(line, sizeof(line), "%8s %6u %8s %10s %10s %9s %10" PRIu64 " %10s",
               Clock(u.time_unix_ns()).c_str(), r.id(), RuleStateName(r.state()), matched.c_str(),
               dropped.c_str(), share.c_str(), c.dropped_packets(), traffic.c_str());
      if (!PrintLine(line)) return false;
    }
    if (u.rules().empty() && !PrintLine(Clock(u.time_unix_ns()) + "  no rules")) return false;
    prev = std::move(next);
    prev_time = u.time_unix_ns();
    return !(count && ++seen >= count);
  });
}

int Stats(const Globals& g, const StatsFlags& f) {
  auto d = lossd::ParseDuration(f.interval);
  if (!d.ok()) return UsageError("--interval: " + d.status().message());
  if (d->count() < 100000000) return UsageError("--interval: '" + f.interval + "' is below 100ms");
  std::string error;
  uint64_t count;
  if (!ParseCount(f.count, &count, &error)) return UsageError(error);
  std::vector<uint32_t> ids;
  for (const auto& t : f.rule_ids) {
    uint64_t id;
    if (!ParseUint(t, 1, UINT32_MAX, "--rule", &id, &error)) return UsageError(error);
    ids.push_back(static_cast<uint32_t>(id));
  }
  uint64_t interval = static_cast<uint64_t>(d->count());
  if (f.rules || !ids.empty()) return StatsRules(g, ids, interval, count);
  return StatsAggregates(g, interval, count);
}

}  // namespace

void AddObserveCommands(CLI::App* app, const Globals* g, Run* run) {
  // watch
  auto wf = std::make_shared<WatchFlags>();
  CLI::App* watch = app->add_subcommand(
      "watch", "Print TCP retransmissions as they happen, one line each (Ctrl-C ends)");
  AddAllowFilterFlags(watch, &wf->filter);
  watch
      ->add_option("--type", wf->filter.types,
                   "fast | rto | loss | tlp | syn | synack | probe0 | unknown (repeatable or a,b)")
      ->allow_extra_args(false);
  AddDenyFilterFlags(watch, &wf->filter);
  watch
      ->add_option("--deny-type", wf->filter.deny_types,
                   "Leave out these types (repeatable or a,b)")
      ->allow_extra_args(false);
  AddStreamFlags(watch, wf.get());
  watch->callback([g, wf, run] { *run = [g, wf] { return Watch(*g, *wf); }; });

  // stalls
  auto stf = std::make_shared<WatchFlags>();
  CLI::App* stalls = app->add_subcommand(
      "stalls",
      "Print TCP stalls (no delivery past the threshold) with their cause, one line each");
  AddAllowFilterFlags(stalls, &stf->filter);
  AddDenyFilterFlags(stalls, &stf->filter);
  AddStreamFlags(stalls, stf.get());
  stalls->callback([g, stf, run] { *run = [g, stf] { return Stalls(*g, *stf); }; });

  // flows
  auto ff = std::make_shared<FilterFlags>();
  CLI::App* flows = app->add_subcommand("flows", "List the TCP flows lossd observes (like ss)");
  AddAllowFilterFlags(flows, ff.get());
  flows->callback([g, ff, run] { *run = [g, ff] { return Flows(*g, *ff); }; });

  // stats
  auto sf = std::make_shared<StatsFlags>();
  CLI::App* stats = app->add_subcommand(
      "stats",
      "Retransmitted segments by type per interval; with --rules, rule counters per second");
  stats->add_option("--interval", sf->interval, "Window, e.g. 1s, 500ms (at least 100ms)")
      ->capture_default_str();
  stats->add_flag("--rules", sf->rules, "Every rule's matched/dropped segments per second");
  stats->add_option("--rule", sf->rule_ids,
                    "Only this rule's counters (repeatable; implies --rules)");
  stats->add_option("--count", sf->count, "Stop after this many intervals");
  stats->callback([g, sf, run] { *run = [g, sf] { return Stats(*g, *sf); }; });
}

}  // namespace lossctl
