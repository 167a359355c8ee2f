#include "service/refusals.h"

#include <grpcpp/support/interceptor.h>

#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "common/rate_limit.h"

namespace lossd {

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

bool IsRefusal(const grpc::Status& st) {
  return !st.ok() && st.error_code() != grpc::StatusCode::CANCELLED;
}

RefusalLine FormatRefusal(const std::string& method, grpc::StatusCode code,
                          const std::string& message, const PeerInfo& peer, uint64_t suppressed) {
  RefusalLine line;
  line.text = method + " by " + peer.text + " refused: " + GrpcCodeName(code) + ": " + message;
  if (suppressed > 0)
    line.text += " (" + std::to_string(suppressed) + " refusals suppressed before this one)";
  Json f = {{"event", "refused"},
            {"method", method},
            {"code", GrpcCodeName(code)},
            {"reason", message},
            {"peer", peer.text},
            {"peer_address", peer.address},
            {"transport", peer.transport}};
  if (peer.has_cred) {
    f["uid"] = peer.uid;
    f["gid"] = peer.gid;
    f["pid"] = peer.pid;
  }
  if (!peer.x509_subject.empty()) f["x509_subject"] = peer.x509_subject;
  if (suppressed > 0) f["suppressed"] = suppressed;
  line.fields = std::move(f);
  return line;
}

void LogRefusal(const std::string& method, grpc::StatusCode code, const std::string& message,
                const PeerInfo& peer) {
  static std::mutex mu;
  static LineRateLimiter limiter(kRefusalLinesPerSecond, kRefusalBurst);
  uint64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!limiter.Admit(MonotonicNs(), &suppressed)) return;
  }
  RefusalLine line = FormatRefusal(method, code, message, peer, suppressed);
  LogFields(LogLevel::kWarn, line.text, line.fields);
}

namespace {

class RefusalInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RefusalInterceptor(grpc::experimental::ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status st = methods->GetSendStatus();
      if (IsRefusal(st) && LogEnabled(LogLevel::kWarn)) {
        grpc::ServerContextBase* ctx = info_->server_context();
        PeerInfo peer;
        if (ctx != nullptr) {
          peer = PeerOf(*ctx);
        } else {
          peer.text = "unknown peer";
        }
        LogRefusal(info_->method() ? info_->method() : "?", st.error_code(), st.error_message(),
                   peer);
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
};

class RefusalInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RefusalInterceptor(info);  // gRPC owns it for the call
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RefusalLogInterceptor() {
  return std::make_unique<RefusalInterceptorFactory>();
}

}  // namespace lossd
