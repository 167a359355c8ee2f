#include "service/refusals.h"

#include <grpcpp/support/interceptor.h>

#include <mutex>

#include "base/clock.h"
#include "base/log.h"
#include "base/rate_limit.h"
#include "rules/proto.h"

namespace lossd {

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
