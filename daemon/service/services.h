// The gRPC services: translation between lossd.v1 and the injector/observer,
// nothing more. They hold no BPF handles; every failure leaves with the
// status code that says what went wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "components.h"
#include "effects/effects.h"
#include "injector/injector.h"
#include "lossd/v1/lossd.grpc.pb.h"
#include "observer/observer.h"

namespace lossd {

class InjectorService final : public v1::Injector::CallbackService {
 public:
  explicit InjectorService(const Components* parts) : parts_(parts) {}

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
                                          const v1::GetRuleEffectRequest*,
                                          v1::RuleEffect*) override;

 private:
  Status Create(Injector* inj, const v1::RuleSpec& spec, v1::Rule* out,
                Components::Deadline deadline);

  const Components* parts_;  // every RPC needs the injector (UNAVAILABLE while it loads)
};

class ObserverService final : public v1::Observer::CallbackService {
 public:
  explicit ObserverService(const Components* parts) : parts_(parts) {}

  grpc::ServerWriteReactor<v1::RetransmitStreamBatch>* WatchRetransmits(
      grpc::CallbackServerContext*, const v1::WatchRetransmitsRequest*) override;
  grpc::ServerUnaryReactor* ListFlows(grpc::CallbackServerContext*, const v1::ListFlowsRequest*,
                                      v1::ListFlowsResponse*) override;
  grpc::ServerWriteReactor<v1::FlowStreamMessage>* WatchFlows(
      grpc::CallbackServerContext*, const v1::WatchFlowsRequest*) override;
  grpc::ServerWriteReactor<v1::Aggregate>* WatchAggregates(
      grpc::CallbackServerContext*, const v1::WatchAggregatesRequest*) override;
  grpc::ServerWriteReactor<v1::StallStreamBatch>* WatchStalls(
      grpc::CallbackServerContext*, const v1::WatchStallsRequest*) override;
  grpc::ServerWriteReactor<v1::TraceMessage>* TraceFlow(grpc::CallbackServerContext*,
                                                        const v1::TraceFlowRequest*) override;
  grpc::ServerUnaryReactor* GetTotals(grpc::CallbackServerContext*, const v1::GetTotalsRequest*,
                                      v1::GetTotalsResponse*) override;
  int subscribers() const { return subscribers_; }

 private:
  const Components* parts_;  // every RPC needs the observer (UNAVAILABLE while it loads)
  std::atomic<int> subscribers_{0};
};

class SystemService final : public v1::System::CallbackService {
 public:
  SystemService(const Components* parts, const ObserverService* observer)
      : parts_(parts), observer_(observer) {}

  grpc::ServerUnaryReactor* GetCapabilities(grpc::CallbackServerContext*,
                                            const v1::GetCapabilitiesRequest*,
                                            v1::Capabilities*) override;
  grpc::ServerUnaryReactor* GetHealth(grpc::CallbackServerContext*, const v1::GetHealthRequest*,
                                      v1::Health*) override;
  grpc::ServerUnaryReactor* GetVersion(grpc::CallbackServerContext*, const v1::GetVersionRequest*,
                                       v1::Version*) override;

 private:
  const Components* parts_;  // answers while the parts load
  const ObserverService* observer_;
};

// Scenarios (daemon/scenario/runner.h): a scenario's steps checked as
// CreateRule checks a rule, then run by the runner; a dry run checks only.
class ScenarioService final : public v1::Scenarios::CallbackService {
 public:
  explicit ScenarioService(const Components* parts) : parts_(parts) {}

  grpc::ServerUnaryReactor* RunScenario(grpc::CallbackServerContext*,
                                        const v1::RunScenarioRequest*, v1::ScenarioRun*) override;
  grpc::ServerUnaryReactor* ListScenarios(grpc::CallbackServerContext*,
                                          const v1::ListScenariosRequest*,
                                          v1::ListScenariosResponse*) override;
  grpc::ServerUnaryReactor* GetScenario(grpc::CallbackServerContext*,
                                        const v1::GetScenarioRequest*, v1::ScenarioRun*) override;
  grpc::ServerUnaryReactor* AbortScenario(grpc::CallbackServerContext*,
                                          const v1::AbortScenarioRequest*,
                                          v1::ScenarioRun*) override;

 private:
  const Components* parts_;  // the runner comes with the injector
};

}  // namespace lossd
