// GET /metrics without a kernel (daemon/metrics/): the per-rule series from
// RuleInfo values, the flow label, and the collector over parts still
// loading. The series against a running daemon: tests/e2e/http/metrics_test.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "metrics/families.h"
#include "metrics/metrics.h"

namespace lossd {
namespace {

const prometheus::MetricFamily* Find(const Families& out, const std::string& name) {
  for (const auto& f : out)
    if (f.name == name) return &f;
  return nullptr;
}

std::string Label(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label)
    if (l.name == name) return l.value;
  return "<none>";
}

RuleInfo Rule(uint32_t id, bool expired) {
  RuleInfo r;
  r.id = id;
  r.expired = expired;
  r.spec.iface = "eth0";
  r.spec.dir = Direction::kEgress;
  r.spec.model.p = 0.01;
  r.counters.matched_pkts = 100 + id;
  return r;
}

obs_tuple Tuple(int family, const char* src, const char* dst, uint16_t sport, uint16_t dport) {
  obs_tuple t{};
  t.family = family;
  inet_pton(family, src, t.saddr);
  inet_pton(family, dst, t.daddr);
  t.sport = sport;
  t.dport = dport;
  return t;
}

TEST(FlowLabel, IsTheTupleWithV6AddressesBracketed) {
  EXPECT_EQ(FlowLabel(Tuple(AF_INET, "10.0.0.1", "10.0.0.2", 40000, 5202)),
            "10.0.0.1:40000->10.0.0.2:5202");
  EXPECT_EQ(FlowLabel(Tuple(AF_INET6, "fd00::1", "fd00::2", 1, 80)), "[fd00::1]:1->[fd00::2]:80");
}

TEST(RuleMetrics, LiveRulesFirstByIdCappedWithTheRestCounted) {
  std::vector<RuleInfo> rules = {Rule(5, true), Rule(9, false), Rule(1, true), Rule(3, false)};
  Families out;
  RuleMetrics(rules, /*effects=*/nullptr, /*max_rules=*/3, &out);
  const auto* omitted = Find(out, "lossd_metrics_rules_omitted");
  ASSERT_NE(omitted, nullptr);
  EXPECT_EQ(omitted->metric.at(0).gauge.value, 1);
  const auto* live = Find(out, "lossd_rule_live");
  ASSERT_NE(live, nullptr);
  ASSERT_EQ(live->metric.size(), 3u);
  std::vector<std::string> ids;
  for (const auto& m : live->metric) ids.push_back(Label(m, "rule"));
  EXPECT_EQ(ids, (std::vector<std::string>{"3", "9", "1"}));
  EXPECT_EQ(live->metric[0].gauge.value, 1);
  EXPECT_EQ(live->metric[2].gauge.value, 0) << "expired";
  const auto* matched = Find(out, "lossd_rule_matched_packets_total");
  ASSERT_NE(matched, nullptr);
  EXPECT_EQ(matched->metric[1].counter.value, 109);
  // Without an effect tracker no measured series; the families in the order
  // the scrape has always had them (the omitted count, then lossd_rule_info last).
  EXPECT_EQ(Find(out, "lossd_rule_measured_loss_ratio"), nullptr);
  EXPECT_EQ(out.front().name, "lossd_metrics_rules_omitted");
  EXPECT_EQ(out.back().name, "lossd_rule_info");
  EXPECT_EQ(out[out.size() - 2].name, "lossd_rule_live");
}

TEST(RuleMetrics, InfoNamesTheTargetAndItsOwner) {
  RuleInfo r = Rule(2, false);
  r.spec.iface.clear();
  r.spec.hook = Hook::kCgroup;
  r.spec.model.kind = LossModel::Kind::kEveryNth;
  r.spec.model.n = 10;
  r.spec.labels = {{"team", "web"}, {"case", "a"}};
  r.cgroup_mount = "/sys/fs/cgroup";
  r.cgroup = "/sys/fs/cgroup/system.slice/nginx.service";
  Families out;
  RuleMetrics({r}, nullptr, 10, &out);
  const auto* info = Find(out, "lossd_rule_info");
  ASSERT_NE(info, nullptr);
  const auto& m = info->metric.at(0);
  EXPECT_EQ(Label(m, "cgroup"), "/system.slice/nginx.service");
  EXPECT_EQ(Label(m, "unit"), "nginx.service");
  EXPECT_EQ(Label(m, "container"), "<none>") << "an empty label is no label";
  EXPECT_EQ(Label(m, "model"), "every_nth");
  EXPECT_EQ(Label(m, "labels"), "case=a,team=web");
  EXPECT_EQ(Label(m, "direction"), DirectionName(Direction::kEgress));
  EXPECT_EQ(Find(out, "lossd_metrics_rules_omitted")->metric.at(0).gauge.value, 0);
}

TEST(RuleMetrics, ModelNamesAPolicersScope) {
  LossModel m;
  m.kind = LossModel::Kind::kPolice;
  EXPECT_STREQ(ModelName(m), "police");
  m.police_per_flow = true;
  EXPECT_STREQ(ModelName(m), "police_flow");
}

TEST(MetricsCollector, ScrapesPartsStillLoading) {
  Components parts(RuleLimits{}, /*observer_wanted=*/false);
  MetricsCollector metrics(MetricsSources{&parts, [] { return 4; }, nullptr}, MetricsOptions{});
  std::string text = metrics.Scrape();
  EXPECT_NE(text.find("lossd_component_state{component=\"injector\",state=\"loading\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("lossd_component_state{component=\"observer\",state=\"disabled\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("lossd_subscribers 4"), std::string::npos);
  EXPECT_NE(text.find("lossd_build_info{version=\""), std::string::npos);
  EXPECT_EQ(text.find("lossd_rules{"), std::string::npos) << "no injector yet: no rule series";
  EXPECT_EQ(text.find("lossd_http_"), std::string::npos) << "no listener given";
  text = metrics.Scrape();
  EXPECT_NE(text.find("lossd_metrics_scrapes_total 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace lossd
