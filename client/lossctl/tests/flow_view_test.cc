#include "flow_view.h"

#include <gtest/gtest.h>

#include "format.h"

namespace lossctl {
namespace {

v1::Flow SlowFlow() {
  v1::Flow f;
  f.set_cookie(4242);
  f.mutable_tuple()->set_local_addr("10.13.0.1");
  f.mutable_tuple()->set_local_port(45678);
  f.mutable_tuple()->set_remote_addr("10.13.0.2");
  f.mutable_tuple()->set_remote_port(8080);
  f.set_cwnd(10);
  f.set_cwnd_min(2);
  f.set_cwnd_max(80);
  f.set_srtt_us(1200);
  f.set_srtt_min_us(100);
  f.set_srtt_max_us(250000);
  f.set_bytes_sent(123456789);
  f.set_bytes_acked(123456000);
  (*f.mutable_retransmitted_segments())["fast"] = 12;
  (*f.mutable_retransmitted_segments())["rto"] = 3;
  f.set_dominant_limit("rwnd_limited");
  f.set_dominant_share(0.9649);
  f.set_stalls(3);
  (*f.mutable_stall_ns())["rto"] = 120000000;
  (*f.mutable_stall_ns())["tlp"] = 11000000;
  f.mutable_owner()->set_path("/lab/svc");
  return f;
}

TEST(LimitCell, DominantLimitAndShare) {
  v1::Flow f = SlowFlow();
  EXPECT_EQ(LimitCell(f), "rwnd 96%");
  f.set_dominant_limit("app_limited");
  f.set_dominant_share(1);
  EXPECT_EQ(LimitCell(f), "app 100%");
  f.set_dominant_limit("");  // nothing was busy
  EXPECT_EQ(LimitCell(f), "-");
}

TEST(StallsCell, CountTotalAndStalledNow) {
  v1::Flow f = SlowFlow();
  EXPECT_EQ(StallsCell(f), "3/131ms");
  f.set_stalled_ns(2100000000);
  EXPECT_EQ(StallsCell(f), "3/131ms stalled 2.1s");
  v1::Flow none;
  EXPECT_EQ(StallsCell(none), "-");
  none.set_stalled_ns(500000000);
  EXPECT_EQ(StallsCell(none), "- stalled 500ms");
}

TEST(FlowsTable, FitsEightyAndOneSixtyColumnsKeepingLimitAndStalls) {
  v1::ListFlowsResponse resp;
  *resp.add_flows() = SlowFlow();
  v1::Flow other = SlowFlow();
  other.set_stalled_ns(2100000000);
  other.set_dominant_limit("");
  *resp.add_flows() = other;
  for (size_t width : {80u, 160u}) {
    auto lines = FlowsTable(resp, 0, width);
    ASSERT_EQ(lines.size(), 3u);
    for (const auto& l : lines) EXPECT_LE(l.size(), width) << l;
    EXPECT_NE(lines[0].find("LIMIT"), std::string::npos) << width;
    EXPECT_NE(lines[0].find("STALLS"), std::string::npos) << width;
    EXPECT_NE(lines[0].find("RETRANS"), std::string::npos) << width;
    EXPECT_NE(lines[1].find("10.13.0.1:45678"), std::string::npos);
    EXPECT_NE(lines[1].find("rwnd 96%"), std::string::npos);
    EXPECT_NE(lines[1].find("3/131ms"), std::string::npos);
    EXPECT_NE(lines[2].find("stalled 2.1s"), std::string::npos);
  }
  // 160 columns keep more than 80.
  EXPECT_GT(FlowsTable(resp, 0, 160)[0].size(), FlowsTable(resp, 0, 80)[0].size());
  EXPECT_NE(FlowsTable(resp, 0, 160)[0].find("COOKIE"), std::string::npos);
  // No limit: every column.
  auto all = FlowsTable(resp, 0, 0);
  EXPECT_NE(all[0].find("BY-TYPE"), std::string::npos);
  EXPECT_NE(all[0].find("OWNER"), std::string::npos);
  EXPECT_NE(all[1].find("fast:12,rto:3"), std::string::npos);
}

TEST(FitLines, DropsColumnsInOrderOnlyWhileTooWide) {
  Table t({"A", "BBBBBBBBBB", "C"});
  t.AddRow({"1", "2", "3"});
  EXPECT_EQ(t.FitLines(100, {1})[0], "A  BBBBBBBBBB  C");
  EXPECT_EQ(t.FitLines(10, {1})[0], "A  C");
  EXPECT_EQ(t.FitLines(1, {1, 0})[0], "C");  // as far as the order goes
  EXPECT_EQ(t.FitLines(0, {0, 1})[0], "A  BBBBBBBBBB  C");
}

v1::StallEvent Stall(v1::StallCause cause) {
  v1::StallEvent e;
  e.mutable_tuple()->set_local_addr("10.13.0.1");
  e.mutable_tuple()->set_local_port(45678);
  e.mutable_tuple()->set_remote_addr("10.13.0.2");
  e.mutable_tuple()->set_remote_port(8080);
  e.set_cause(cause);
  e.set_duration_ns(41000000);
  return e;
}

TEST(StallEvidence, NamesWhatDecidedEachCause) {
  auto rto = Stall(v1::STALL_CAUSE_RTO);
  rto.set_backoff(2);
  rto.set_retransmits(1);
  rto.set_first_retransmit(v1::RETRANSMIT_TYPE_RTO);
  rto.set_first_retransmit_seq(1234);
  EXPECT_EQ(StallEvidence(rto), "rto backoff 2, 1 resend (first rto seq 1234)");

  auto zw = Stall(v1::STALL_CAUSE_ZERO_WINDOW);
  zw.set_acks(5);
  EXPECT_EQ(StallEvidence(zw), "zero window, 5 probe answers");

  auto nagle = Stall(v1::STALL_CAUSE_NAGLE_DELAYED_ACK);
  nagle.set_unsent_bytes(120);
  EXPECT_EQ(StallEvidence(nagle), "nagle: 120B held, peer ACK after 41ms");

  auto rwnd = Stall(v1::STALL_CAUSE_RWND_LIMITED);
  rwnd.set_min_window(32768);
  rwnd.set_unsent_bytes(65536);
  EXPECT_EQ(StallEvidence(rwnd), "peer window 32KiB, 64KiB waiting");

  auto tlp = Stall(v1::STALL_CAUSE_TLP);
  tlp.mutable_caused_by()->set_rule_id(3);
  tlp.mutable_caused_by()->set_seq(1234);
  tlp.mutable_caused_by()->set_length(1448);
  EXPECT_EQ(StallEvidence(tlp), "tail loss probe, caused by rule 3's drop of seq 1234+1448");
  tlp.set_closing(true);
  EXPECT_EQ(StallEvidence(tlp),
            "tail loss probe, caused by rule 3's drop of seq 1234+1448, after the application's close");

  auto unknown = Stall(v1::STALL_CAUSE_UNKNOWN);
  unknown.set_snd_una(99);
  unknown.set_at_close(true);
  EXPECT_EQ(StallEvidence(unknown),
            "hole at seq 99, 0 acks delivering nothing, window 0B, 0B unsent, nagle off, "
            "ended by the close");
}

TEST(StallLine, TimeFlowCauseDurationEvidence) {
  auto e = Stall(v1::STALL_CAUSE_RTO);
  e.set_backoff(1);
  e.add_rule_ids(3);
  e.set_cookie(4242);
  EXPECT_EQ(StallLine(e, "12:00:03.000001"),
            "12:00:03.000001 10.13.0.1:45678 > 10.13.0.2:8080 rto                  41ms  rto "
            "backoff 1; rules 3; cookie 4242");
  EXPECT_EQ(StallCauseText(v1::STALL_CAUSE_NAGLE_DELAYED_ACK), "nagle_delayed_ack");
  EXPECT_EQ(StallCauseText(static_cast<v1::StallCause>(77)), "cause 77");
}

}  // namespace
}  // namespace lossctl
