// GET /metrics: the Prometheus text format (prometheus-cpp's core:
// Collectable, Registry, TextSerializer), collected at scrape time from the
// counters lossd already keeps (the injector's per-rule and per-hook maps,
// the observer's totals and flows, the effect tracker's attributions, the
// kernel's own BPF run statistics). Nothing is added to the packet or event
// path. Cardinality is bounded: no per-flow or per-address label unless
// --metrics-top-flows asks for K flows (plus "other"); per-rule series for
// at most --metrics-max-rules rules (lossd_metrics_rules_omitted says how
// many were left out). A rule or flow that went away has no series at the
// next scrape. The metric list: docs/dashboards.md#metrics.
//
// A view of the parts (like the live page), registered on the HTTP listener:
// metrics.cc the collector and its scrape, the families of each part in
// injector_metrics.cc, observer_metrics.cc, bpf_metrics.cc (families.h).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "components.h"
#include "http/server.h"

namespace lossd {

struct MetricsOptions {
  uint32_t max_rules = 1000;  // --metrics-max-rules: rules with per-rule series
  uint32_t top_flows = 0;     // --metrics-top-flows: K busiest flows by retransmits (0: none)
};

// What the collector reads; owned by the daemon, outliving the collector.
struct MetricsSources {
  const Components* parts = nullptr;
  std::function<int()> subscribers;  // gRPC stream subscribers now
  const HttpServer* http = nullptr;  // the listener's own counters
};

// One BPF program's run statistics (kernel.bpf_stats_enabled), from the
// process's own program fds: /proc/self/fd, bpf_obj_get_info_by_fd.
struct BpfProgStats {
  std::string name;
  uint32_t id = 0;
  uint64_t run_cnt = 0, run_time_ns = 0;
};
std::vector<BpfProgStats> OwnBpfPrograms();
bool BpfStatsEnabled();  // /proc/sys/kernel/bpf_stats_enabled

class MetricsCollector final : public prometheus::Collectable {
 public:
  MetricsCollector(MetricsSources src, MetricsOptions opts);
  std::vector<prometheus::MetricFamily> Collect() const override;
  // The text format of everything (this collector and its own registry).
  std::string Scrape();
  // GET /metrics on `http`.
  void Register(HttpServer* http);

 private:
  MetricsSources src_;
  MetricsOptions opts_;
  // lossd's own exposition counters, kept in a prometheus-cpp registry.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* scrapes_ = nullptr;
  prometheus::Gauge* last_scrape_seconds_ = nullptr;
  prometheus::Gauge* last_scrape_bytes_ = nullptr;
};

}  // namespace lossd
