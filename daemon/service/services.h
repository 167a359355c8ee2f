// The gRPC services: translation between lossd.v1 and the injector/observer,
// nothing more. They hold no BPF handles; every failure leaves with the
// status code that says what went wrong.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "injector/injector.h"
#include "lossd/v1/lossd.grpc.pb.h"
#include "observer/observer.h"
#include "service/effects.h"

namespace lossd {

struct ServiceLimits {
  uint32_t max_rules = 10000;
  uint64_t max_ttl_ns = 0;               // 0: no limit
  std::vector<uint16_t> protected_ports{22};  // SSH, plus the daemon's TCP port
};

class InjectorService final : public v1::Injector::CallbackService {
 public:
  InjectorService(Injector* inj, EffectTracker* effects, ServiceLimits limits);

  grpc::ServerUnaryReactor* CreateRule(grpc::CallbackServerContext*, const v1::CreateRuleRequest*,
                                       v1::Rule*) override;
  grpc::ServerUnaryReactor* CreateRules(grpc::CallbackServerContext*, const v1::CreateRulesRequest*,
                                        v1::CreateRulesResponse*) override;
  grpc::ServerUnaryReactor* UpdateRule(grpc::CallbackServerContext*, const v1::UpdateRuleRequest*,
                                       v1::Rule*) override;
  grpc::ServerUnaryReactor* DeleteRule(grpc::CallbackServerContext*, const v1::DeleteRuleRequest*,
                                       v1::DeleteRuleResponse*) override;
  grpc::ServerUnaryReactor* GetRule(grpc::CallbackServerContext*, const v1::GetRuleRequest*,
                                    v1::Rule*) override;
  grpc::ServerUnaryReactor* ListRules(grpc::CallbackServerContext*, const v1::ListRulesRequest*,
                                      v1::ListRulesResponse*) override;
  grpc::ServerUnaryReactor* ClearRules(grpc::CallbackServerContext*, const v1::ClearRulesRequest*,
                                       v1::ClearRulesResponse*) override;
  grpc::ServerWriteReactor<v1::RuleCountersUpdate>* WatchRuleCounters(
      grpc::CallbackServerContext*, const v1::WatchRuleCountersRequest*) override;
  grpc::ServerUnaryReactor* GetRuleEffect(grpc::CallbackServerContext*,
                                          const v1::GetRuleEffectRequest*, v1::RuleEffect*) override;

  size_t rule_count() const;
  uint64_t lease_remaining_ns() const { return inj_->LeaseRemainingNs(); }

 private:
  struct Meta {
    std::map<std::string, std::string> labels;
    bool force = false;
    uint64_t created_unix_ns = 0;
    uint64_t expires_unix_ns = 0;
  };
  Status Create(const v1::RuleSpec& spec, v1::Rule* out);
  // Convert, limits (the rule count only for a new rule), safety.
  Status Check(const v1::RuleSpec& in, RuleSpec* spec, bool new_rule);
  Status Fill(uint32_t id, v1::Rule* out) const;
  void SyncEffects();

  Injector* inj_;
  EffectTracker* effects_;
  ServiceLimits limits_;
  mutable std::mutex mu_;
  std::map<uint32_t, Meta> meta_;
  std::mutex create_mu_;  // count check and creation are one step
};

class ObserverService final : public v1::Observer::CallbackService {
 public:
  ObserverService(Observer* obs, EffectTracker* effects) : obs_(obs), effects_(effects) {}

  grpc::ServerWriteReactor<v1::RetransmitStreamBatch>* WatchRetransmits(
      grpc::CallbackServerContext*, const v1::WatchRetransmitsRequest*) override;
  grpc::ServerUnaryReactor* ListFlows(grpc::CallbackServerContext*, const v1::ListFlowsRequest*,
                                      v1::ListFlowsResponse*) override;
  grpc::ServerWriteReactor<v1::FlowStreamMessage>* WatchFlows(grpc::CallbackServerContext*,
                                                               const v1::WatchFlowsRequest*) override;
  grpc::ServerWriteReactor<v1::Aggregate>* WatchAggregates(grpc::CallbackServerContext*,
                                                            const v1::WatchAggregatesRequest*) override;
  int subscribers() const { return subscribers_; }

 private:
  Observer* obs_;  // null when the observer could not start
  EffectTracker* effects_;
  std::atomic<int> subscribers_{0};
};

class SystemService final : public v1::System::CallbackService {
 public:
  SystemService(const Capabilities& caps, Observer* obs, const InjectorService* inj,
                const ObserverService* observer, ServiceLimits limits, std::string observer_error)
      : caps_(caps), obs_(obs), inj_(inj), observer_(observer), limits_(limits),
        observer_error_(std::move(observer_error)) {}

  grpc::ServerUnaryReactor* GetCapabilities(grpc::CallbackServerContext*,
                                            const v1::GetCapabilitiesRequest*, v1::Capabilities*) override;
  grpc::ServerUnaryReactor* GetHealth(grpc::CallbackServerContext*, const v1::GetHealthRequest*,
                                      v1::Health*) override;
  grpc::ServerUnaryReactor* GetVersion(grpc::CallbackServerContext*, const v1::GetVersionRequest*,
                                       v1::Version*) override;

 private:
  Capabilities caps_;
  Observer* obs_;
  const InjectorService* inj_;
  const ObserverService* observer_;
  ServiceLimits limits_;
  std::string observer_error_;
};

}  // namespace lossd
