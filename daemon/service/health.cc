#include "service/health.h"

#include <grpcpp/health_check_service_interface.h>

#include "base/json.h"

namespace lossd {
namespace {

const char* StateName(ComponentState s) {
  switch (s) {
    case ComponentState::kLoading: return "LOADING";
    case ComponentState::kReady: return "READY";
    case ComponentState::kFailed: return "FAILED";
    case ComponentState::kDisabled: return "DISABLED";
  }
  return "UNSPECIFIED";
}

// Ready to serve what was asked of this daemon: the injector, and the
// observer unless it was disabled.
bool AllReady(const Components& parts) {
  ComponentState obs = parts.observer_status().state;
  return parts.injector_status().state == ComponentState::kReady &&
         (obs == ComponentState::kReady || obs == ComponentState::kDisabled);
}

void SetHealth(grpc::Server* server, const Components& parts) {
  grpc::HealthCheckServiceInterface* h = server->GetHealthCheckService();
  if (!h) return;
  h->SetServingStatus("lossd.v1.System", true);
  h->SetServingStatus("lossd.v1.Injector", parts.injector_status().state == ComponentState::kReady);
  h->SetServingStatus("lossd.v1.Scenarios", parts.injector_status().state == ComponentState::kReady);
  h->SetServingStatus("lossd.v1.Observer", parts.observer_status().state == ComponentState::kReady);
  h->SetServingStatus("", AllReady(parts));
}

}  // namespace

void EnableGrpcHealth() { grpc::EnableDefaultHealthCheckService(true); }

void FollowGrpcHealth(grpc::Server* server, Components* parts) {
  parts->OnChange([server, parts] { SetHealth(server, *parts); });
  SetHealth(server, *parts);
}

void RegisterHealthRoutes(HttpServer* http, const Components* parts) {
  http->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  http->Get("/readyz", [parts](const httplib::Request&, httplib::Response& res) {
    ComponentStatus inj = parts->injector_status(), obs = parts->observer_status();
    Json body = {{"ready", AllReady(*parts)},
                 {"injector", {{"state", StateName(inj.state)}, {"message", inj.message}}},
                 {"observer", {{"state", StateName(obs.state)}, {"message", obs.message}}}};
    res.status = AllReady(*parts) ? 200 : 503;
    res.set_content(JsonLine(body) + "\n", "application/json");
  });
}

}  // namespace lossd
