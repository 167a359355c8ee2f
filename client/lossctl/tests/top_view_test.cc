#include "top_view.h"

#include <gtest/gtest.h>

#include <sstream>

namespace lossctl {
namespace {

v1::Flow MakeFlow(uint64_t cookie, uint32_t lport, uint64_t sent, uint64_t fast) {
  v1::Flow f;
  f.set_cookie(cookie);
  f.mutable_tuple()->set_local_addr("192.0.2.1");
  f.mutable_tuple()->set_local_port(lport);
  f.mutable_tuple()->set_remote_addr("192.0.2.2");
  f.mutable_tuple()->set_remote_port(5201);
  f.set_cwnd(10 + cookie);
  f.set_srtt_us(1500);
  f.set_bytes_sent(sent);
  (*f.mutable_retransmitted_segments())["fast"] = fast;
  return f;
}

v1::Aggregate Window(uint64_t fast, uint64_t rto, uint64_t lost, uint64_t cookie, uint64_t segs) {
  v1::Aggregate a;
  a.set_window_ns(1000000000);
  a.set_window_start_unix_ns(1700000000ull * 1000000000);
  (*a.mutable_retransmits_by_type())["fast"] = fast;
  (*a.mutable_retransmits_by_type())["rto"] = rto;
  if (lost) {
    auto* g = a.add_gaps();
    g->set_source(v1::GAP_SOURCE_SUBSCRIBER);
    g->set_count(lost);
  }
  if (cookie) (*a.mutable_retransmits_by_flow())[cookie] = segs;
  return a;
}

// The numbers after the row's label "... (...)": TOTAL, the eight types, EVENTS LOST.
std::vector<uint64_t> Numbers(const std::string& row) {
  std::vector<uint64_t> out;
  std::istringstream in(row.substr(row.find(')') + 1));
  uint64_t n;
  while (in >> n) out.push_back(n);
  return out;
}

std::string Text(const std::vector<TopLine>& lines) {
  std::string s;
  for (const auto& l : lines) s += l.text + "\n";
  return s;
}

// The line that starts with `prefix` (after spaces), or "".
std::string LineStarting(const std::vector<TopLine>& lines, const std::string& prefix) {
  for (const auto& l : lines) {
    auto p = l.text.find_first_not_of(' ');
    if (p != std::string::npos && l.text.compare(p, prefix.size(), prefix) == 0) return l.text;
  }
  return "";
}

TEST(TopSort, NamesRoundTripAndCycle) {
  TopSort s = TopSort::kRetrans;
  for (int i = 0; i < 6; i++) {
    TopSort parsed;
    ASSERT_TRUE(ParseTopSort(TopSortName(s), &parsed));
    EXPECT_EQ(parsed, s);
    s = NextTopSort(s);
  }
  EXPECT_EQ(s, TopSort::kRetrans);  // back to the first after all six
  TopSort out;
  EXPECT_FALSE(ParseTopSort("bogus", &out));
}

TEST(TopTracker, WindowAndSinceStartTotals) {
  TopTracker t("unix:/run/lossd/lossd.sock", 1000000000);
  t.AddWindow(Window(5, 1, 0, 0, 0));
  t.AddWindow(Window(7, 0, 3, 0, 0));
  const TopFrame& f = t.Frame(1700000001ull * 1000000000);
  EXPECT_EQ(f.windows, 2u);
  EXPECT_EQ(f.since_start.at("fast"), 12u);
  EXPECT_EQ(f.since_start.at("rto"), 1u);
  EXPECT_EQ(f.lost_since_start, 3u);
  TopLayout layout;
  auto lines = RenderTop(f, layout);
  // last window: total 7 = fast 7 + rto 0, 3 events lost
  std::string last = LineStarting(lines, "last 1s");
  ASSERT_FALSE(last.empty()) << Text(lines);
  EXPECT_EQ(Numbers(last), (std::vector<uint64_t>{7, 7, 0, 0, 0, 0, 0, 0, 0, 3})) << last;
  std::string since = LineStarting(lines, "since top started (2s)");
  ASSERT_FALSE(since.empty()) << Text(lines);
  EXPECT_EQ(Numbers(since), (std::vector<uint64_t>{13, 12, 1, 0, 0, 0, 0, 0, 0, 3})) << since;
}

TEST(TopTracker, FlowRatesAndWindowRetransmits) {
  TopTracker t("x", 1000000000);
  v1::ListFlowsResponse r1, r2;
  *r1.add_flows() = MakeFlow(1, 40000, 1000, 0);
  *r2.add_flows() = MakeFlow(1, 40000, 3000, 4);
  *r2.add_flows() = MakeFlow(2, 40001, 500, 0);
  t.SetFlows(r1, 1000000000);
  t.AddWindow(Window(4, 0, 0, 1, 4));
  t.SetFlows(r2, 3000000000);  // 2 s later: flow 1 sent 2000 bytes more
  const TopFrame& f = t.Frame(0);
  ASSERT_EQ(f.flows.size(), 2u);
  EXPECT_DOUBLE_EQ(f.flows[0].bytes_per_sec, 1000.0);
  EXPECT_EQ(f.flows[0].window_retrans, 4u);
  EXPECT_LT(f.flows[1].bytes_per_sec, 0);  // new flow: no rate yet
  EXPECT_EQ(f.flows[1].window_retrans, 0u);
}

// The screen at width x height; no line wider than the terminal.
std::vector<TopLine> RenderAt(const TopFrame& f, size_t width, size_t height, TopLayout* layout) {
  layout->width = width;
  layout->height = height;
  auto lines = RenderTop(f, *layout);
  EXPECT_LE(lines.size(), height);
  for (const auto& l : lines) EXPECT_LE(l.text.size(), width) << l.text;
  return lines;
}

TEST(TopView, FlowsSortedAndCutToTheTerminal) {
  TopTracker t("x", 1000000000);
  v1::ListFlowsResponse r;
  for (uint64_t c = 1; c <= 30; c++) *r.add_flows() = MakeFlow(c, 40000 + c, c * 100, c % 7);
  t.AddWindow(Window(0, 0, 0, 9, 50));
  t.SetFlows(r, 1);
  TopLayout layout;
  auto lines = RenderAt(t.Frame(0), 80, 24, &layout);
  std::string head = LineStarting(lines, "FLOWS");
  EXPECT_NE(head.find(" of 30, by retrans"), std::string::npos) << Text(lines);
  // The flow with the window's retransmits first.
  size_t at = 0;
  for (size_t i = 0; i < lines.size(); i++)
    if (lines[i].text.find("LOCAL") != std::string::npos) at = i;
  ASSERT_GT(at, 0u);
  ASSERT_LT(at + 1, lines.size());
  EXPECT_NE(lines[at + 1].text.find("192.0.2.1:40009"), std::string::npos) << Text(lines);

  layout.sort = TopSort::kSent;
  lines = RenderTop(t.Frame(0), layout);
  for (size_t i = 0; i < lines.size(); i++)
    if (lines[i].text.find("LOCAL") != std::string::npos) at = i;
  EXPECT_NE(lines[at + 1].text.find("192.0.2.1:40030"), std::string::npos) << Text(lines);
}

TEST(TopView, OwnersShownWhenAFlowHasOne) {
  TopTracker t("x", 1000000000);
  v1::ListFlowsResponse r;
  *r.add_flows() = MakeFlow(1, 40001, 100, 3);
  t.AddWindow(Window(0, 0, 0, 3, 0));
  t.SetFlows(r, 1);
  TopLayout layout;
  layout.width = 200;
  layout.height = 24;
  auto lines = RenderTop(t.Frame(0), layout);
  EXPECT_EQ(Text(lines).find("OWNER"), std::string::npos) << Text(lines);  // none: no column

  v1::Flow* f = r.mutable_flows(0);
  f->mutable_owner()->set_path("/system.slice/nginx.service");
  f->mutable_owner()->set_unit("nginx.service");
  t.SetFlows(r, 2);
  lines = RenderTop(t.Frame(0), layout);
  std::string head = LineStarting(lines, "LOCAL");
  EXPECT_NE(head.find("OWNER"), std::string::npos) << Text(lines);
  EXPECT_NE(Text(lines).find("nginx.service"), std::string::npos) << Text(lines);
}

// Rule 3, 2 % on veth0's egress, with its effect: 2.01 % measured, 1.8 - 2.25 % interval.
TopRule MakeRule() {
  TopRule r;
  r.rule.set_id(3);
  r.rule.set_state(v1::RULE_STATE_ACTIVE);
  r.rule.mutable_spec()->set_interface("veth0");
  r.rule.mutable_spec()->set_direction(v1::DIRECTION_EGRESS);
  r.rule.mutable_spec()->mutable_loss()->mutable_bernoulli()->set_rate(0.02);
  r.has_effect = true;
  r.effect.set_measured_rate(0.0201234);
  r.effect.set_rate_ci_low(0.018);
  r.effect.set_rate_ci_high(0.022549);
  r.effect.set_configured_within_ci(true);
  return r;
}

TEST(TopView, RuleEffectAndDropRate) {
  TopTracker t("x", 1000000000);
  TopRule r = MakeRule();
  r.rule.set_created_unix_ns(5);
  r.effect.mutable_counters()->set_matched_segments(10000);
  r.effect.mutable_counters()->set_dropped_segments(100);
  (*r.effect.mutable_retransmitted_segments())["fast"] = 90;
  (*r.effect.mutable_retransmitted_segments())["rto"] = 12;
  t.SetRules({r}, 1, 1000000000);
  r.effect.mutable_counters()->set_dropped_segments(300);
  t.SetRules({r}, 1, 3000000000);  // 200 more in 2 s
  auto lines = RenderTop(t.Frame(0), TopLayout{});
  std::string row = LineStarting(lines, "3  active");
  ASSERT_FALSE(row.empty()) << Text(lines);
  for (const char* want :
       {"veth0", "egress", "2%", "2.01%", "1.8% - 2.25%", "100", "300", "102", "10000", "no limit"})
    EXPECT_NE(row.find(want), std::string::npos) << want << " in: " << row;
}

TEST(TopView, AnEightyColumnTerminalKeepsTheRetransmitColumns) {
  TopTracker t("x", 1000000000);
  TopRule r = MakeRule();
  r.rule.mutable_spec()->mutable_match()->set_protocol("tcp");
  r.rule.mutable_spec()->mutable_match()->mutable_dport()->set_lo(5201);
  r.effect.mutable_counters()->set_matched_segments(123456);
  r.effect.mutable_counters()->set_matched_bytes(987654321);
  r.effect.mutable_counters()->set_dropped_segments(2469);
  (*r.effect.mutable_retransmitted_segments())["fast"] = 2400;
  (*r.effect.mutable_retransmitted_segments())["rto"] = 77;
  t.SetRules({r}, 1, 1000000000);
  v1::ListFlowsResponse fl;
  v1::Flow* f = fl.add_flows();
  *f = MakeFlow(9, 40009, 123456789, 2400);
  (*f->mutable_retransmitted_segments())["rto"] = 77;
  f->mutable_owner()->set_path("/system.slice/web.service");
  f->mutable_owner()->set_unit("web.service");
  t.AddWindow(Window(0, 0, 0, 9, 50));
  t.SetFlows(fl, 1);
  TopLayout layout;
  auto lines = RenderAt(t.Frame(0), 80, 40, &layout);
  // The retransmit totals keep TOTAL, the common types and EVENTS LOST.
  std::string totals = LineStarting(lines, "RETRANSMITTED SEGMENTS");
  for (const char* want : {"TOTAL", "FAST", "RTO", "LOSS", "TLP", "EVENTS LOST"})
    EXPECT_NE(totals.find(want), std::string::npos) << want << " in: " << Text(lines);
  // The rules: what a retransmit watcher reads stays (before: RETRANS was cut off).
  std::string head = LineStarting(lines, "ID");
  for (const char* want : {"TARGET", "MATCH", "MEASURED", "DROPPED", "RETRANS"})
    EXPECT_NE(head.find(want), std::string::npos) << want << " in: " << Text(lines);
  std::string row = LineStarting(lines, "3 ");
  for (const char* want : {"veth0", "2.01%", "2469", "2477"})
    EXPECT_NE(row.find(want), std::string::npos) << want << " in: " << row;
  // The flows: the endpoints and the retransmits stay.
  head = LineStarting(lines, "LOCAL");
  for (const char* want : {"REMOTE", "RETR/", "RETRANS", "BY TYPE"})
    EXPECT_NE(head.find(want), std::string::npos) << want << " in: " << Text(lines);
  row = LineStarting(lines, "192.0.2.1:40009");
  for (const char* want : {"192.0.2.2:5201", "2477", "fast:2400"})
    EXPECT_NE(row.find(want), std::string::npos) << want << " in: " << row;
  // A wide terminal keeps every column.
  lines = RenderAt(t.Frame(0), 200, 40, &layout);
  for (const char* want : {"BYTES", "LEFT", "99.9% INTERVAL"})
    EXPECT_NE(LineStarting(lines, "ID").find(want), std::string::npos) << want;
  for (const char* want : {"SENT", "CA STATE", "OWNER"})
    EXPECT_NE(LineStarting(lines, "LOCAL").find(want), std::string::npos) << want;
}

TEST(TopView, WaitingAndErrorsAreSaid) {
  TopTracker t("unix:/s", 1000000000);
  t.SetRulesError("UNAVAILABLE: loading");
  t.SetFlowsError("UNAVAILABLE: loading");
  auto text = Text(RenderTop(t.Frame(0), TopLayout{}));
  EXPECT_NE(text.find("waiting for the first 1s window"), std::string::npos) << text;
  EXPECT_NE(text.find("RULES: UNAVAILABLE: loading"), std::string::npos) << text;
  EXPECT_NE(text.find("FLOWS: UNAVAILABLE: loading"), std::string::npos) << text;
}

}  // namespace
}  // namespace lossctl
