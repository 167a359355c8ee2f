// The collector: the families of every part at each scrape, then its own
// registry's counters, in the text format; the components' and the HTTP
// listener's families.
#include "metrics/metrics.h"

#include <prometheus/text_serializer.h>

#include <chrono>
#include <sstream>

#include "metrics/families.h"

namespace lossd {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

const char* StateName(ComponentState s) {
  switch (s) {
    case ComponentState::kLoading: return "loading";
    case ComponentState::kReady: return "ready";
    case ComponentState::kFailed: return "failed";
    case ComponentState::kDisabled: return "disabled";
  }
  return "unknown";
}

}  // namespace

void ComponentMetrics(const Components& parts, Families* out) {
  Fam st(out, "lossd_component_state",
         "1 for the state each part of lossd is in (loading, ready, failed, disabled)",
         MetricType::Gauge);
  const std::pair<const char*, ComponentStatus> comps[] = {{"injector", parts.injector_status()},
                                                           {"observer", parts.observer_status()}};
  for (const auto& [name, s] : comps) {
    for (ComponentState state : {ComponentState::kLoading, ComponentState::kReady,
                                 ComponentState::kFailed, ComponentState::kDisabled})
      st.Add({{"component", name}, {"state", StateName(state)}}, s.state == state ? 1 : 0);
  }
}

void HttpMetrics(const HttpServer& http, Families* out) {
  HttpStats st = http.stats();
  Fam(out, "lossd_http_requests_total", "HTTP requests answered by a route", MetricType::Counter)
      .Add({}, st.requests);
  {
    Fam f(out, "lossd_http_refused_total",
          "HTTP requests refused: busy (503, over a cap), bad (404, 405, 413, 431), slow "
          "(the connection closed: a request head not complete within its deadline), "
          "forbidden (403: a local user --http-readers does not allow)",
          MetricType::Counter);
    f.Add({{"reason", "busy"}}, st.rejected_busy);
    f.Add({{"reason", "forbidden"}}, st.forbidden);
    f.Add({{"reason", "bad"}}, st.refused);
    f.Add({{"reason", "slow"}}, st.timed_out);
  }
  Fam(out, "lossd_http_connections_open", "Open HTTP connections", MetricType::Gauge)
      .Add({}, st.connections_open);
  Fam(out, "lossd_http_streams_open", "Open HTTP streams", MetricType::Gauge)
      .Add({}, st.streams_open);
}

MetricsCollector::MetricsCollector(MetricsSources src, MetricsOptions opts)
    : src_(std::move(src)), opts_(opts), registry_(std::make_shared<prometheus::Registry>()) {
  scrapes_ = &prometheus::BuildCounter()
                  .Name("lossd_metrics_scrapes_total")
                  .Help("Scrapes of /metrics served")
                  .Register(*registry_)
                  .Add({});
  last_scrape_seconds_ = &prometheus::BuildGauge()
                              .Name("lossd_metrics_last_scrape_duration_seconds")
                              .Help("Time the previous scrape took to collect and serialize")
                              .Register(*registry_)
                              .Add({});
  last_scrape_bytes_ = &prometheus::BuildGauge()
                            .Name("lossd_metrics_last_scrape_bytes")
                            .Help("Size of the previous scrape's text")
                            .Register(*registry_)
                            .Add({});
}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  std::vector<MetricFamily> out;
  Fam(&out, "lossd_build_info", "lossd's version (value 1)", MetricType::Gauge)
      .Add({{"version", LOSSD_VERSION}}, 1);
  const Components& parts = *src_.parts;
  ComponentMetrics(parts, &out);
  EffectTracker* effects = parts.effects();
  if (const Injector* inj = parts.injector()) InjectorMetrics(*inj, parts, effects, opts_, &out);
  if (Observer* obs = parts.observer()) ObserverMetrics(*obs, effects, opts_, &out);
  if (src_.subscribers)
    Fam(&out, "lossd_subscribers", "gRPC stream subscribers of the observer now", MetricType::Gauge)
        .Add({}, src_.subscribers());
  BpfMetrics(&out);
  if (src_.http) HttpMetrics(*src_.http, &out);
  return out;
}

std::string MetricsCollector::Scrape() {
  auto t0 = std::chrono::steady_clock::now();
  scrapes_->Increment();
  std::vector<MetricFamily> families = Collect();
  std::vector<MetricFamily> own = registry_->Collect();
  families.insert(families.end(), std::make_move_iterator(own.begin()),
                  std::make_move_iterator(own.end()));
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families);
  std::string s = text.str();
  last_scrape_seconds_->Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  last_scrape_bytes_->Set(double(s.size()));
  return s;
}

void MetricsCollector::Register(HttpServer* http) {
  http->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace lossd
