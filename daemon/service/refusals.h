// Every call lossd refuses is logged (warn): the RPC method, the status code,
// the whole message (the reason the client was given) and who asked
// (PeerOf: uid/gid/pid over the Unix socket, the certificate's subject over
// TLS, else gRPC's peer), in the json format as fields. At most
// kRefusalLinesPerSecond lines a second in all (burst kRefusalBurst), so that
// one client cannot flood the log; the line after a pause says how many were
// suppressed. A gRPC server interceptor sees every status a service sends
// (CANCELLED, the client gone, is no refusal); CreateRules' per-spec errors,
// which travel inside an OK reply, are logged by the service itself.
// docs/architecture.md#logs.
#pragma once

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/json.h"
#include "service/channel.h"

namespace lossd {

constexpr uint32_t kRefusalLinesPerSecond = 10;
constexpr uint32_t kRefusalBurst = 20;

// Is this status one to log (not OK, not CANCELLED)?
bool IsRefusal(const grpc::Status& st);

// The line (pure: unit-tested): its text and its fields.
struct RefusalLine {
  std::string text;
  Json fields;
};
RefusalLine FormatRefusal(const std::string& method, grpc::StatusCode code,
                          const std::string& message, const PeerInfo& peer, uint64_t suppressed);

// Logs one refusal, within the rate limit (thread-safe).
void LogRefusal(const std::string& method, grpc::StatusCode code, const std::string& message,
                const PeerInfo& peer);

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RefusalLogInterceptor();

}  // namespace lossd
