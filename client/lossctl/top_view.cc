#include "top_view.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdlib>
#include <tuple>

#include "format.h"

namespace lossctl {
namespace {

struct SortName {
  TopSort sort;
  const char* name;
};
constexpr SortName kSorts[] = {{TopSort::kRetrans, "retrans"}, {TopSort::kTotal, "total"},
                               {TopSort::kRate, "rate"},       {TopSort::kCwnd, "cwnd"},
                               {TopSort::kSrtt, "srtt"},       {TopSort::kSent, "sent"}};

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

uint64_t Sum(const google::protobuf::Map<std::string, uint64_t>& m) {
  uint64_t total = 0;
  for (const auto& kv : m) total += kv.second;
  return total;
}

std::string Count(uint64_t n) {
  return std::to_string(n);
}

std::string PerSecond(double v) {
  if (v < 0) return "-";
  char buf[32];
  snprintf(buf, sizeof(buf), v < 10 && v > 0 ? "%.1f" : "%.0f", v);
  return buf;
}

std::string ByteRate(double v) {
  if (v < 0) return "-";
  return FormatBytes(static_cast<uint64_t>(v)) + "/s";
}

std::string Srtt(uint32_t us) {
  return FormatDuration(static_cast<uint64_t>(us) * 1000);
}

// "fast 12, loss 3" (non-zero types in their order), "-" for none.
std::string ByType(const google::protobuf::Map<std::string, uint64_t>& m) {
  std::string out;
  for (const auto& kv : OrderedByType(m)) {
    if (!kv.second) continue;
    out += (out.empty() ? "" : " ") + kv.first + ":" + std::to_string(kv.second);
  }
  return out.empty() ? "-" : out;
}

// "12:00:03", or "12:00:03.250" (millis) for windows below a second.
std::string Clock(uint64_t unix_ns, bool millis = false) {
  return FormatUnixTime(unix_ns, true).substr(0, millis ? 12 : 8);
}

std::string Left(const v1::Rule& r, uint64_t now_unix_ns) {
  if (r.state() == v1::RULE_STATE_EXPIRED || r.state() == v1::RULE_STATE_DELETED ||
      r.state() == v1::RULE_STATE_STOPPED)
    return RuleStateName(r.state());
  if (!r.expires_unix_ns()) return "no limit";
  if (r.expires_unix_ns() <= now_unix_ns) return "0s";
  uint64_t left = r.expires_unix_ns() - now_unix_ns;
  return FormatDuration(left < 60000000000ull ? left / 100000000 * 100000000 : left);
}

void Section(std::vector<TopLine>* out, const std::string& text) {
  out->push_back({text, true});
}

// The table's lines, fit to `width` (0: as they are) by leaving out the
// columns of `drop` in that order (the least useful to a retransmit watcher
// first), so that a narrow terminal loses those and not the ones on the right.
void AddTable(std::vector<TopLine>* out, const Table& t, size_t width = 0,
              const std::vector<size_t>& drop = {}, size_t indent = 2) {
  bool first = true;
  for (auto& l : width > indent ? t.FitLines(width - indent, drop) : t.Lines()) {
    out->push_back({std::string(indent, ' ') + l, first});
    first = false;
  }
}

std::vector<TopLine> RetransmitLines(const TopFrame& f, size_t width) {
  std::vector<TopLine> out;
  std::vector<std::string> head = {"RETRANSMITTED SEGMENTS", "TOTAL"};
  for (const auto& t : RetransmitTypeNames()) head.push_back(Upper(t));
  head.push_back("EVENTS LOST");
  Table t(head);
  for (size_t c = 1; c < head.size(); c++) t.RightAlign(c);
  auto row = [&](const std::string& label, auto get, uint64_t lost) {
    std::vector<std::string> cells = {label, ""};
    uint64_t total = 0;
    for (const auto& name : RetransmitTypeNames()) {
      uint64_t n = get(name);
      total += n;
      cells.push_back(Count(n));
    }
    cells[1] = Count(total);
    cells.push_back(Count(lost));
    t.AddRow(cells);
  };
  if (f.have_window) {
    const auto& by = f.window.retransmits_by_type();
    uint64_t lost = 0;
    for (const auto& g : f.window.gaps()) lost += g.count();
    uint64_t w = f.window.window_ns() ? f.window.window_ns() : f.interval_ns;
    row(
        "last " + FormatDuration(w) + " (" +
            Clock(f.window.window_start_unix_ns(), w < 1000000000) + ")",
        [&](const std::string& n) {
          auto it = by.find(n);
          return it == by.end() ? uint64_t{0} : it->second;
        },
        lost);
    row(
        "since top started (" + FormatDuration(f.windows * w) + ")",
        [&](const std::string& n) {
          auto it = f.since_start.find(n);
          return it == f.since_start.end() ? uint64_t{0} : it->second;
        },
        f.lost_since_start);
  } else {
    t.AddRow({"waiting for the first " + FormatDuration(f.interval_ns) + " window"});
  }
  // Narrow: PROBE0, SYNACK, SYN and UNKNOWN go first (TOTAL still counts them); EVENTS LOST stays.
  AddTable(&out, t, width, {8, 7, 6, 9}, 0);
  return out;
}

std::string HealthLine(const TopFrame& f) {
  if (!f.health_error.empty()) return "lossd: " + f.health_error;
  if (!f.have_health) return "lossd: -";
  const v1::Health& h = f.health;
  std::string s = std::string("lossd: ") + (h.serving() ? "serving" : "NOT serving") + ", " +
                  Count(h.rules()) + " rule" + (h.rules() == 1 ? "" : "s") + ", " +
                  Count(h.subscribers()) + " subscriber" + (h.subscribers() == 1 ? "" : "s") +
                  ", lease " + FormatDuration(h.lease_remaining_ns() / 100000000 * 100000000) +
                  ", " + Count(h.events_lost_kernel()) + " events lost in the kernel";
  for (const auto& c : h.components()) {
    if (c.state() == v1::COMPONENT_STATE_READY) continue;
    std::string state = c.state() == v1::COMPONENT_STATE_LOADING    ? "loading"
                        : c.state() == v1::COMPONENT_STATE_FAILED   ? "FAILED"
                        : c.state() == v1::COMPONENT_STATE_DISABLED ? "disabled"
                                                                    : "?";
    s += "; " + c.name() + " " + state;
  }
  return s;
}

std::vector<TopLine> RuleLines(const TopFrame& f, size_t width, size_t max_rows) {
  std::vector<TopLine> out;
  size_t shown = std::min(f.rules.size(), max_rows);
  std::string title = "RULES";
  if (!f.rules_error.empty()) {
    Section(&out, title + ": " + f.rules_error);
    return out;
  }
  if (f.rules_total == 0) {
    Section(&out, title + ": none");
    return out;
  }
  title += shown < f.rules_total
               ? "  " + Count(shown) + " of " + Count(f.rules_total) + " (active first)"
               : "  " + Count(f.rules_total);
  Section(&out, title +
                    "  (measured = dropped / matched segments; 99.9 % interval of the drop "
                    "probability; RETRANS: segments its flows retransmitted)");
  Table t({"ID", "STATE", "TARGET", "DIR", "MATCH", "CONFIGURED", "MEASURED", "99.9% INTERVAL",
           "DROPS/s", "DROPPED", "RETRANS", "MATCHED", "BYTES", "LEFT"});
  for (size_t c : {0, 8, 9, 10, 11, 12}) t.RightAlign(c);
  for (size_t i = 0; i < shown; i++) {
    const TopRule& r = f.rules[i];
    const v1::RuleSpec& s = r.rule.spec();
    std::string configured = ImpairmentSummary(s), measured = "-", ci = "-", retrans = "-";
    const v1::RuleCounters& c = r.has_effect ? r.effect.counters() : r.rule.counters();
    if (r.has_effect) {
      const v1::RuleEffect& e = r.effect;
      if (c.matched_segments()) {
        measured = Rate3(e.measured_rate());
        ci = Rate3(e.rate_ci_low()) + " - " + Rate3(e.rate_ci_high()) +
             (e.configured_within_ci() || e.configured_rate() < 0 ? "" : " (!)");
      }
      retrans = Count(Sum(e.retransmitted_segments()));
    } else if (!r.effect_error.empty()) {
      measured = "?";
    }
    t.AddRow({Count(r.rule.id()), RuleStateName(r.rule.state()), TargetSummary(r.rule),
              DirectionName(s.direction()), MatchSummary(s.match()), configured, measured, ci,
              PerSecond(r.drops_per_sec), Count(c.dropped_segments()), retrans,
              Count(c.matched_segments()), FormatBytes(c.matched_bytes()),
              Left(r.rule, f.now_unix_ns)});
  }
  // Narrow: BYTES, MATCHED, LEFT, STATE, DIR, the interval, CONFIGURED go first;
  // ID, TARGET, MATCH, MEASURED, DROPS/s, DROPPED and RETRANS stay.
  AddTable(&out, t, width, {12, 11, 13, 1, 3, 7, 5});
  return out;
}

std::vector<TopLine> FlowLines(const TopFrame& f, const TopLayout& layout, size_t max_rows) {
  std::vector<TopLine> out;
  if (!f.flows_error.empty()) {
    Section(&out, "FLOWS: " + f.flows_error);
    return out;
  }
  if (f.flows.empty()) {
    Section(&out, "FLOWS: none");
    return out;
  }
  std::vector<TopFlow> flows = f.flows;
  SortFlows(&flows, layout.sort);
  size_t shown = std::min(flows.size(), max_rows);
  uint64_t w = f.have_window && f.window.window_ns() ? f.window.window_ns() : f.interval_ns;
  std::string title =
      "FLOWS  " +
      (shown < flows.size() ? Count(shown) + " of " + Count(flows.size()) : Count(flows.size())) +
      ", by " + TopSortName(layout.sort);
  Section(&out, title);
  std::string last = "RETR/" + FormatDuration(w);
  // The sockets' owners (unit, container, pod, cgroup), when any shown flow
  // has one below the root cgroup.
  bool owners = false;
  for (size_t i = 0; i < shown; i++) {
    const std::string& p = flows[i].flow.owner().path();
    owners = owners || (!p.empty() && p != "/");
  }
  std::vector<std::string> head = {"LOCAL", "REMOTE", "CA STATE", "CWND",    "SRTT",
                                   "SENT",  "RATE",   last,       "RETRANS", "BY TYPE"};
  if (owners) head.insert(head.begin() + 2, "OWNER");
  Table t(head);
  for (size_t c : {3, 4, 5, 6, 7, 8}) t.RightAlign(owners ? c + 1 : c);
  for (size_t i = 0; i < shown; i++) {
    const v1::Flow& fl = flows[i].flow;
    std::vector<std::string> row = {
        FormatEndpoint(fl.tuple().local_addr(), fl.tuple().local_port()),
        FormatEndpoint(fl.tuple().remote_addr(), fl.tuple().remote_port()),
        CaStateName(fl.ca_state()) + (fl.closed() ? " (closed)" : ""),
        Count(fl.cwnd()),
        Srtt(fl.srtt_us()),
        FormatBytes(fl.bytes_sent()),
        ByteRate(flows[i].bytes_per_sec),
        Count(flows[i].window_retrans),
        Count(Sum(fl.retransmitted_segments())),
        ByType(fl.retransmitted_segments())};
    if (owners) row.insert(row.begin() + 2, OwnerSummary(fl.owner()));
    t.AddRow(row);
  }
  // Narrow: SENT, CA STATE, SRTT, RATE, CWND, OWNER go first; the endpoints and
  // the retransmits (the window's, the total, by type) stay.
  std::vector<size_t> drop = {5, 2, 4, 6, 3};
  if (owners) {
    for (size_t& c : drop) c++;
    drop.push_back(2);
  }
  AddTable(&out, t, layout.width, drop);
  return out;
}

// Cuts a line to `width` characters (UTF-8 aware enough for our text: only
// whole code points are kept).
std::string Cut(const std::string& s, size_t width) {
  if (!width) return s;
  size_t cols = 0, i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (cols + 1 > width) break;
    cols++;
    i += len;
  }
  return s.substr(0, i);
}

}  // namespace

bool ParseTopSort(const std::string& name, TopSort* out) {
  for (const auto& s : kSorts) {
    if (name == s.name) {
      *out = s.sort;
      return true;
    }
  }
  return false;
}

const char* TopSortName(TopSort s) {
  for (const auto& k : kSorts)
    if (k.sort == s) return k.name;
  return "?";
}

TopSort NextTopSort(TopSort s) {
  constexpr size_t n = sizeof(kSorts) / sizeof(kSorts[0]);
  for (size_t i = 0; i < n; i++)
    if (kSorts[i].sort == s) return kSorts[(i + 1) % n].sort;
  return TopSort::kRetrans;
}

std::string TopSortNames() {
  std::string out;
  for (const auto& s : kSorts) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

TopTracker::TopTracker(std::string server, uint64_t interval_ns) {
  frame_.server = std::move(server);
  frame_.interval_ns = interval_ns;
}

void TopTracker::AddWindow(const v1::Aggregate& a) {
  frame_.have_window = true;
  frame_.window = a;
  frame_.windows++;
  for (const auto& kv : a.retransmits_by_type()) frame_.since_start[kv.first] += kv.second;
  for (const auto& g : a.gaps()) frame_.lost_since_start += g.count();
  // A flow's retransmits in the window, for the flows gathered after it.
  for (auto& fl : frame_.flows) {
    auto it = a.retransmits_by_flow().find(fl.flow.cookie());
    fl.window_retrans = it == a.retransmits_by_flow().end() ? 0 : it->second;
  }
}

void TopTracker::SetHealth(const v1::Health& h, const v1::Capabilities* caps) {
  frame_.have_health = true;
  frame_.health = h;
  frame_.health_error.clear();
  if (caps) {
    frame_.not_attached.clear();
    for (const auto& hook : caps->observer_hooks())
      if (!hook.available())
        frame_.not_attached.push_back(hook.name() +
                                      (hook.reason().empty() ? "" : " (" + hook.reason() + ")"));
  }
}

void TopTracker::SetHealthError(const std::string& error) {
  frame_.have_health = false;
  frame_.health_error = error;
}

void TopTracker::SetRules(std::vector<TopRule> rules, size_t total, uint64_t now_mono_ns) {
  double secs = prev_rules_ns_ && now_mono_ns > prev_rules_ns_
                    ? static_cast<double>(now_mono_ns - prev_rules_ns_) / 1e9
                    : 0;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> next;
  for (auto& r : rules) {
    const v1::RuleCounters& c = r.has_effect ? r.effect.counters() : r.rule.counters();
    auto it = prev_drops_.find(r.rule.id());
    // The same rule (not a new one with a reused id) whose counters did not
    // restart (UpdateRule) has a rate.
    if (secs > 0 && it != prev_drops_.end() && it->second.first == r.rule.created_unix_ns() &&
        c.dropped_segments() >= it->second.second)
      r.drops_per_sec = static_cast<double>(c.dropped_segments() - it->second.second) / secs;
    next[r.rule.id()] = {r.rule.created_unix_ns(), c.dropped_segments()};
  }
  prev_drops_ = std::move(next);
  prev_rules_ns_ = now_mono_ns;
  frame_.rules = std::move(rules);
  frame_.rules_total = total;
  frame_.rules_error.clear();
}

void TopTracker::SetRulesError(const std::string& error) {
  frame_.rules.clear();
  frame_.rules_error = error;
}

void TopTracker::SetFlows(const v1::ListFlowsResponse& flows, uint64_t now_mono_ns) {
  double secs = prev_flows_ns_ && now_mono_ns > prev_flows_ns_
                    ? static_cast<double>(now_mono_ns - prev_flows_ns_) / 1e9
                    : 0;
  std::map<uint64_t, uint64_t> next;
  frame_.flows.clear();
  const auto& by_flow = frame_.window.retransmits_by_flow();
  for (const auto& fl : flows.flows()) {
    TopFlow t;
    t.flow = fl;
    auto w = by_flow.find(fl.cookie());
    t.window_retrans = w == by_flow.end() ? 0 : w->second;
    auto it = prev_sent_.find(fl.cookie());
    if (secs > 0 && it != prev_sent_.end() && fl.bytes_sent() >= it->second)
      t.bytes_per_sec = static_cast<double>(fl.bytes_sent() - it->second) / secs;
    next[fl.cookie()] = fl.bytes_sent();
    frame_.flows.push_back(std::move(t));
  }
  prev_sent_ = std::move(next);
  prev_flows_ns_ = now_mono_ns;
  frame_.flows_error.clear();
}

void TopTracker::SetFlowsError(const std::string& error) {
  frame_.flows.clear();
  frame_.flows_error = error;
}

const TopFrame& TopTracker::Frame(uint64_t now_unix_ns) {
  frame_.now_unix_ns = now_unix_ns;
  return frame_;
}

std::vector<v1::Rule> ShownRules(const v1::ListRulesResponse& rules, size_t max) {
  std::vector<v1::Rule> out(rules.rules().begin(), rules.rules().end());
  std::sort(out.begin(), out.end(), [](const v1::Rule& a, const v1::Rule& b) {
    bool aa = a.state() == v1::RULE_STATE_ACTIVE, ba = b.state() == v1::RULE_STATE_ACTIVE;
    return aa != ba ? aa : a.id() < b.id();
  });
  if (out.size() > max) out.resize(max);
  return out;
}

void SortFlows(std::vector<TopFlow>* flows, TopSort sort) {
  auto key = [sort](const TopFlow& f) -> std::tuple<double, double> {
    const v1::Flow& fl = f.flow;
    double total = static_cast<double>(Sum(fl.retransmitted_segments()));
    switch (sort) {
      case TopSort::kRetrans: return {static_cast<double>(f.window_retrans), total};
      case TopSort::kTotal: return {total, static_cast<double>(f.window_retrans)};
      case TopSort::kRate: return {f.bytes_per_sec, static_cast<double>(fl.bytes_sent())};
      case TopSort::kCwnd: return {static_cast<double>(fl.cwnd()), 0};
      case TopSort::kSrtt: return {static_cast<double>(fl.srtt_us()), 0};
      case TopSort::kSent: return {static_cast<double>(fl.bytes_sent()), 0};
    }
    return {0, 0};
  };
  std::stable_sort(flows->begin(), flows->end(), [&](const TopFlow& a, const TopFlow& b) {
    auto ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a.flow.cookie() < b.flow.cookie();
  });
}

std::vector<TopLine> RenderTop(const TopFrame& f, const TopLayout& layout) {
  std::vector<TopLine> out;
  std::string title = "lossctl top: " + f.server + "  " + Clock(f.now_unix_ns) + "  every " +
                      FormatDuration(f.interval_ns) + "  flows by " + TopSortName(layout.sort);
  if (layout.keys)
    title += "  (q quits, s sorts by " + std::string(TopSortName(NextTopSort(layout.sort))) + ")";
  out.push_back({title, false});
  out.push_back({HealthLine(f), false});
  if (!f.not_attached.empty()) {
    std::string s = "not attached:";
    for (const auto& h : f.not_attached) s += " " + h;
    out.push_back({s, false});
  }
  if (!f.note.empty()) out.push_back({f.note, false});
  out.push_back({"", false});
  for (auto& l : RetransmitLines(f, layout.width)) out.push_back(std::move(l));
  out.push_back({"", false});

  // Rows left for the two tables: each takes a title and a column heading.
  size_t rule_rows = std::min(layout.max_rules, f.rules.size());
  size_t flow_rows = std::min(layout.max_flows, f.flows.size());
  if (layout.height) {
    size_t fixed = out.size() + 2 + (rule_rows ? 1 : 0) + 1 + 2;  // titles, headings, blank
    size_t avail = layout.height > fixed ? layout.height - fixed : 0;
    // Flows give way first, but keep at least a few of each.
    size_t want_flows =
        std::min(flow_rows, std::max<size_t>(3, avail > rule_rows ? avail - rule_rows : 0));
    flow_rows = std::min(want_flows, avail);
    rule_rows = std::min(rule_rows, avail - flow_rows);
  }
  for (auto& l : RuleLines(f, layout.width, rule_rows)) out.push_back(std::move(l));
  out.push_back({"", false});
  for (auto& l : FlowLines(f, layout, flow_rows)) out.push_back(std::move(l));

  if (layout.height && out.size() > layout.height) out.resize(layout.height);
  for (auto& l : out) l.text = Cut(l.text, layout.width);
  return out;
}

}  // namespace lossctl
