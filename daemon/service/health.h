// The standard health surfaces, fed by the parts' states (Components):
// grpc.health.v1 per service (lossd.v1.Injector and lossd.v1.Observer are
// NOT_SERVING while they load or when they failed or are disabled, SERVING
// once ready; lossd.v1.System always SERVING; "" (the server) SERVING once
// every wanted part is), and HTTP GET /healthz (alive: 200 whenever it
// answers) and /readyz (200 once every wanted part is ready, else 503 with
// each part's state), for probes that speak HTTP.
#pragma once

#include <grpcpp/grpcpp.h>

#include "components.h"
#include "http/server.h"

namespace lossd {

// Call before grpc::ServerBuilder builds the server: the default health
// service is then part of it.
void EnableGrpcHealth();
// Sets the statuses now and on every change of a part's state.
void FollowGrpcHealth(grpc::Server* server, Components* parts);
void RegisterHealthRoutes(HttpServer* http, const Components* parts);

}  // namespace lossd
