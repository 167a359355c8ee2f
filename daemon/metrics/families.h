// The pieces of a /metrics scrape (metrics.h): the families each part of
// lossd contributes, filled from what that part already keeps, and `Fam`,
// the one way a family is filled. Internal to lossd_metrics (and its tests).
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <map>
#include <string>
#include <vector>

#include "components.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace lossd {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

// One family being filled; appended to `out` when it goes out of scope, if
// it has a sample (so a family's place in the text is where its Fam ends).
class Fam {
 public:
  Fam(std::vector<prometheus::MetricFamily>* out, const char* name, const char* help,
      prometheus::MetricType type)
      : out_(out) {
    f_.name = name;
    f_.help = help;
    f_.type = type;
  }
  ~Fam() {
    if (!f_.metric.empty()) out_->push_back(std::move(f_));
  }
  Fam(const Fam&) = delete;
  Fam& operator=(const Fam&) = delete;
  void Add(MetricLabels labels, double v) {
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    if (f_.type == prometheus::MetricType::Counter)
      m.counter.value = v;
    else
      m.gauge.value = v;
    f_.metric.push_back(std::move(m));
  }

 private:
  std::vector<prometheus::MetricFamily>* out_;
  prometheus::MetricFamily f_;
};

using Families = std::vector<prometheus::MetricFamily>;

// lossd_component_state (metrics.cc).
void ComponentMetrics(const Components& parts, Families* out);
// lossd_http_* (metrics.cc).
void HttpMetrics(const HttpServer& http, Families* out);

// The injector's totals (rules, lease, hooks, programs, attachments), then
// the per-rule series (injector_metrics.cc).
void InjectorMetrics(const Injector& inj, const Components& parts, EffectTracker* effects,
                     const MetricsOptions& opts, Families* out);
// The per-rule series of at most `max_rules` rules (live ones first, each by
// id), lossd_metrics_rules_omitted for the rest; with the effect tracker's
// attributions when there is one.
void RuleMetrics(std::vector<RuleInfo> rules, EffectTracker* effects, uint32_t max_rules,
                 Families* out);
// Text forms of a rule's model and labels, as the lossd_rule_info labels show them.
const char* ModelName(const LossModel& m);  // "bernoulli", "gilbert_elliott", ...
std::string LabelsText(const std::map<std::string, std::string>& labels);  // "k=v,k2=v2"

// The observer's totals and, with --metrics-top-flows, its busiest flows
// (observer_metrics.cc).
void ObserverMetrics(Observer& obs, EffectTracker* effects, const MetricsOptions& opts,
                     Families* out);
// The `flow` label of a flow: "10.0.0.1:4000->10.0.0.2:80",
// "[fd00::1]:4000->[fd00::2]:80".
std::string FlowLabel(const obs_tuple& t);

// kernel.bpf_stats_enabled and the run statistics of lossd's own programs
// (bpf_metrics.cc).
void BpfMetrics(Families* out);

}  // namespace lossd
