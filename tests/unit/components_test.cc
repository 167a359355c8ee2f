// Components (daemon/components.h): what an RPC gets while a part of
// the daemon loads, failed or is disabled (docs/architecture.md#start-up).
#include "components.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

TEST(Components, LoadingPartsAnswerUnavailableLoading) {
  Components parts(RuleLimits{}, /*observer_wanted=*/true);
  EXPECT_EQ(parts.injector_status().state, ComponentState::kLoading);
  EXPECT_EQ(parts.observer_status().state, ComponentState::kLoading);
  EXPECT_EQ(parts.injector(), nullptr);
  auto inj = parts.NeedInjector();
  ASSERT_FALSE(inj.ok());
  EXPECT_EQ(inj.status().code(), Code::kUnavailable);
  EXPECT_NE(inj.status().message().find("loading"), std::string::npos) << inj.status().message();
  auto obs = parts.NeedObserver();
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().code(), Code::kUnavailable);
  EXPECT_NE(obs.status().message().find("loading"), std::string::npos);
  EXPECT_EQ(parts.injector_status().ready_after_ns, 0u);
}

TEST(Components, FailedAndDisabledAreNotLoading) {
  Components parts(RuleLimits{}, /*observer_wanted=*/false);
  EXPECT_EQ(parts.observer_status().state, ComponentState::kDisabled);
  auto obs = parts.NeedObserver();
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(obs.status().message().find("loading"), std::string::npos) << obs.status().message();
  EXPECT_NE(obs.status().message().find("--no-observer"), std::string::npos);

  parts.InjectorFailed("create the injector's BPF maps: Operation not permitted");
  ComponentStatus s = parts.injector_status();
  EXPECT_EQ(s.state, ComponentState::kFailed);
  EXPECT_GT(s.ready_after_ns, 0u);
  auto inj = parts.NeedInjector();
  ASSERT_FALSE(inj.ok());
  EXPECT_EQ(inj.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(inj.status().message().find("Operation not permitted"), std::string::npos);
}

TEST(Components, LimitsAreKnownBeforeTheInjector) {
  RuleLimits l;
  l.max_rules = 7;
  Components parts(l, true);
  EXPECT_EQ(parts.limits().max_rules, 7u);
}

}  // namespace
}  // namespace lossd
