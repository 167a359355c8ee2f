// observer/diagnosis: a flow's limits from its kernel record, and "stalled now".
#include "observer/diagnosis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "service/convert.h"

namespace lossd {
namespace {

constexpr uint64_t kMs = 1000 * 1000;

TEST(LimitsOf, PartsOfBusyAndIdle) {
  obs_flow f{};
  f.limit_ns[OBS_LIM_BUSY] = 1000 * kMs;
  f.limit_ns[OBS_LIM_RWND] = 600 * kMs;
  f.limit_ns[OBS_LIM_SNDBUF] = 100 * kMs;
  f.limit_ns[OBS_LIM_CWND] = 200 * kMs;
  FlowLimits l = LimitsOf(f, 1500 * kMs);
  EXPECT_EQ(l.busy_ns, 1000 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kRwnd)], 600 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kSndbuf)], 100 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kCwnd)], 200 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kApp)], 100 * kMs);  // the rest of busy
  EXPECT_EQ(l.idle_ns, 500 * kMs);
  EXPECT_EQ(l.dominant, Limit::kRwnd);
  EXPECT_DOUBLE_EQ(l.dominant_share, 0.6);
  EXPECT_STREQ(LimitName(l.dominant), "rwnd_limited");
  EXPECT_STREQ(LimitShortName(l.dominant), "rwnd");
}

TEST(LimitsOf, SampledCwndTimeIsClampedToWhatBusyLeaves) {
  // busy comes in jiffies, cwnd-limited time in ns: it may exceed the rest.
  obs_flow f{};
  f.limit_ns[OBS_LIM_BUSY] = 100 * kMs;
  f.limit_ns[OBS_LIM_RWND] = 40 * kMs;
  f.limit_ns[OBS_LIM_CWND] = 70 * kMs;
  FlowLimits l = LimitsOf(f, 50 * kMs);  // life shorter than busy (close rounding): no idle
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kCwnd)], 60 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kApp)], 0u);
  EXPECT_EQ(l.idle_ns, 0u);
  EXPECT_EQ(l.dominant, Limit::kCwnd);
}

TEST(LimitsOf, NagleWaitsAreNotTheApplications) {
  // Busy time that the kernel's chrono leaves to the application but the flow's
  // stalls name nagle_delayed_ack: it is Nagle's, up to what busy leaves.
  obs_flow f{};
  f.limit_ns[OBS_LIM_BUSY] = 500 * kMs;
  f.limit_ns[OBS_LIM_CWND] = 20 * kMs;
  f.stall_ns[OBS_STALL_NAGLE_DELAYED_ACK] = 440 * kMs;
  f.stall_ns[OBS_STALL_RTO] = 300 * kMs;  // other causes stay where the kernel put them
  FlowLimits l = LimitsOf(f, 600 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kNagle)], 440 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kApp)], 40 * kMs);
  EXPECT_EQ(l.dominant, Limit::kNagle);
  EXPECT_STREQ(LimitName(l.dominant), "nagle_limited");
  EXPECT_STREQ(LimitShortName(l.dominant), "nagle");
  f.stall_ns[OBS_STALL_NAGLE_DELAYED_ACK] = 900 * kMs;  // more than busy leaves: clamped
  l = LimitsOf(f, 600 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kNagle)], 480 * kMs);
  EXPECT_EQ(l.within_busy_ns[size_t(Limit::kApp)], 0u);
}

TEST(LimitsOf, NothingBusyHasNoDominantLimit) {
  obs_flow f{};
  FlowLimits l = LimitsOf(f, 5 * kMs);
  EXPECT_EQ(l.dominant, Limit::kCount);
  EXPECT_STREQ(LimitName(l.dominant), "");
  EXPECT_EQ(l.idle_ns, 5 * kMs);
}

TEST(StalledFor, OnlyPastTheThresholdWithDataToDeliver) {
  obs_flow f{};
  f.delivered_ns = 1000 * kMs;
  f.threshold_ns = 10 * kMs;
  f.idle = 0;
  EXPECT_EQ(StalledFor(f, 1005 * kMs), 0u);
  EXPECT_EQ(StalledFor(f, 1010 * kMs), 0u);
  EXPECT_EQ(StalledFor(f, 1011 * kMs), 11 * kMs);
  f.idle = 1;  // nothing to deliver: never stalled
  EXPECT_EQ(StalledFor(f, 2000 * kMs), 0u);
}

TEST(StallCauseName, EveryCauseHasTheProtoSpelling) {
  EXPECT_STREQ(StallCauseName(OBS_STALL_NAGLE_DELAYED_ACK), "nagle_delayed_ack");
  EXPECT_STREQ(StallCauseName(OBS_STALL_ZERO_WINDOW), "zero_window");
  EXPECT_STREQ(StallCauseName(OBS_STALL_MAX), "?");
  for (int c = 0; c < OBS_STALL_MAX; c++) {
    std::string name = v1::StallCause_Name(StallCauseToProto(c)).substr(strlen("STALL_CAUSE_"));
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    EXPECT_EQ(name, StallCauseName(c)) << c;
  }
}

}  // namespace
}  // namespace lossd
