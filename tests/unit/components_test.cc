// Components (daemon/components.h): what an RPC gets while a part of
// the daemon loads, failed or is disabled (docs/architecture.md#start-up).
#include "components.h"

#include <gtest/gtest.h>

#include "service/convert.h"

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
  // Past the call's deadline while still loading: DEADLINE_EXCEEDED, after waiting for it
  // (to a quarter of the time before the deadline, at most 100 ms: the answer must arrive).
  auto t0 = Clock::now();
  auto inj = parts.NeedInjector(t0 + std::chrono::milliseconds(50));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(37));
  ASSERT_FALSE(inj.ok());
  EXPECT_EQ(inj.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(inj.status().message().find("loading"), std::string::npos) << inj.status().message();
  EXPECT_EQ(inj.status().reason(), "PART_LOADING");
  EXPECT_EQ(inj.status().metadata(),
            (Status::Metadata{{"part", "injector"}, {"state", "loading"}}));
  t0 = Clock::now();
  auto later = parts.NeedInjector(t0 + std::chrono::seconds(2));
  auto early = t0 + std::chrono::seconds(2) - Clock::now();
  // (a loaded CI host once woke the waiter 17 ms late: 83 ms before; the point is that the
  // answer leaves well before the deadline, not the wake-up's precision)
  EXPECT_GE(early, std::chrono::milliseconds(50)) << "answered less than 50 ms before the deadline";
  EXPECT_LE(early, std::chrono::milliseconds(100));
  EXPECT_EQ(later.status().code(), Code::kDeadlineExceeded);
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
  EXPECT_EQ(obs.status().reason(), "PART_FAILED");
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
  EXPECT_EQ(obs.status().reason(), "PART_DISABLED");
  EXPECT_EQ(obs.status().metadata(),
            (Status::Metadata{{"part", "observer"}, {"state", "disabled"}}));

  parts.InjectorFailed("create the injector's BPF maps: Operation not permitted");
  ComponentStatus s = parts.injector_status();
  EXPECT_EQ(s.state, ComponentState::kFailed);
  EXPECT_GT(s.ready_after_ns, 0u);
  auto inj = parts.NeedInjector();
  ASSERT_FALSE(inj.ok());
  EXPECT_EQ(inj.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(inj.status().message().find("Operation not permitted"), std::string::npos);
}

// The reason travels as gRPC's standard detail: a StatusDetails (google.rpc.Status's
// fields) holding an ErrorInfo under Google's type URL, which the clients decode.
TEST(Components, TheReasonReachesTheCallerAsItsErrorInfo) {
  Components parts(RuleLimits{}, /*observer_wanted=*/false);
  grpc::Status st = ToGrpc(parts.NeedObserver().status());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::StatusDetails details;
  ASSERT_TRUE(details.ParseFromString(st.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(details.message(), st.error_message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/google.rpc.ErrorInfo");
  v1::ErrorInfo info;
  ASSERT_TRUE(ErrorInfoOf(st, &info));
  EXPECT_EQ(info.reason(), "PART_DISABLED");
  EXPECT_EQ(info.domain(), "lossd");
  EXPECT_EQ(info.metadata().at("part"), "observer");
  // A status without a reason carries no detail.
  grpc::Status plain = ToGrpc(InvalidArgument("rate: must lie in [0, 1]"));
  EXPECT_TRUE(plain.error_details().empty());
  EXPECT_FALSE(ErrorInfoOf(plain, &info));
  EXPECT_FALSE(ErrorInfoOf(grpc::Status(grpc::StatusCode::INTERNAL, "x", "not a proto \xff"), &info));
}

TEST(Components, LimitsAreKnownBeforeTheInjector) {
  RuleLimits l;
  l.max_rules = 7;
  Components parts(l, true);
  EXPECT_EQ(parts.limits().max_rules, 7u);
}

}  // namespace
}  // namespace lossd
