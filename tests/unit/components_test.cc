// Components (daemon/components.h): what an RPC gets while a part of
// the daemon loads, failed or is disabled (docs/architecture.md#start-up).
#include "components.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace lossd {
namespace {

using Clock = std::chrono::system_clock;

TEST(Components, ACallWaitsForALoadingPartWithinItsDeadline) {
  Components parts(RuleLimits{}, /*observer_wanted=*/true);
  EXPECT_EQ(parts.injector_status().state, ComponentState::kLoading);
  EXPECT_EQ(parts.observer_status().state, ComponentState::kLoading);
  EXPECT_EQ(parts.injector(), nullptr);
  // Past the call's deadline while still loading: DEADLINE_EXCEEDED, after waiting for it.
  auto t0 = Clock::now();
  auto inj = parts.NeedInjector(t0 + std::chrono::milliseconds(50));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(50));
  ASSERT_FALSE(inj.ok());
  EXPECT_EQ(inj.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(inj.status().message().find("loading"), std::string::npos) << inj.status().message();
  EXPECT_EQ(parts.injector_status().ready_after_ns, 0u);

  // A part that fails meanwhile ends the wait at once, FAILED_PRECONDITION; one that is
  // told about (OnChange) is called once per change.
  int changes = 0;
  parts.OnChange([&] { changes++; });
  std::thread loader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    parts.ObserverFailed("verifier said no");
  });
  t0 = Clock::now();
  auto obs = parts.NeedObserver(t0 + std::chrono::seconds(20));
  auto waited = Clock::now() - t0;
  loader.join();
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(obs.status().message().find("verifier said no"), std::string::npos);
  EXPECT_LT(waited, std::chrono::seconds(10)) << "the wait did not end with the change";
  EXPECT_EQ(changes, 1);
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
