// The log's pure parts (lib/base/log.h, rate_limit.h, service/refusals.h):
// RFC 3339 times, the text and json lines, the rate limit of refusals and
// their line.
#include <gtest/gtest.h>

#include <regex>

#include "base/json.h"
#include "base/log.h"
#include "base/rate_limit.h"
#include "service/refusals.h"

namespace lossd {
namespace {

struct timespec At(time_t s, long ns) {
  struct timespec ts;
  ts.tv_sec = s;
  ts.tv_nsec = ns;
  return ts;
}

TEST(LogTime, Rfc3339UtcWithMicroseconds) {
  // 2026-12-02T03:52:52Z is 1796183572.
  EXPECT_EQ(FormatRfc3339(At(1796183572, 123456789)), "2026-12-02T03:52:52.123456Z");
  EXPECT_EQ(FormatRfc3339(At(0, 0)), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatRfc3339(At(951782400, 999999999)), "2000-02-29T00:00:00.999999Z");  // leap day
  EXPECT_EQ(FormatRfc3339(At(1796183572, 1000)), "2026-12-02T03:52:52.000001Z");
}

TEST(LogLine, Text) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(1796183572, 5000), LogLevel::kWarn, "x y", nullptr),
            "2026-12-02T03:52:52.000005Z warn  x y");
  Json fields = {{"a", 1}};
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(0, 0), LogLevel::kError, "m", &fields),
            "1970-01-01T00:00:00.000000Z error m")
      << "the text format prints the message only";
}

TEST(LogLine, JsonIsOneObjectWithTimeLevelMsgAndFields) {
  Json fields = {{"method", "/lossd.v1.Injector/CreateRule"},
                 {"uid", 1000},
                 {"msg", "not this one"},
                 {"time", "nor this"}};
  std::string line = FormatLogLine(LogFormat::kJson, At(1796183572, 123456000), LogLevel::kInfo,
                                   "quote \" newline \n tab \t \x01 bytes \xff", &fields);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  Json j = Json::parse(line);
  ASSERT_TRUE(j.is_object());
  auto it = j.begin();
  EXPECT_EQ(it.key(), "time");
  EXPECT_EQ(j["time"], "2026-12-02T03:52:52.123456Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["msg"], "quote \" newline \n tab \t \x01 bytes \xEF\xBF\xBD");
  EXPECT_EQ(j["method"], "/lossd.v1.Injector/CreateRule");
  EXPECT_EQ(j["uid"], 1000);
  EXPECT_EQ(j.size(), 5u) << "fields named time/level/msg are left out: " << line;
  std::string bare = FormatLogLine(LogFormat::kJson, At(0, 0), LogLevel::kDebug, "m", nullptr);
  EXPECT_EQ(bare, R"({"time":"1970-01-01T00:00:00.000000Z","level":"debug","msg":"m"})");
}

TEST(LogFormat, Names) {
  LogFormat f;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("JSON", &f));
  EXPECT_FALSE(ParseLogFormat("", &f));
}

constexpr uint64_t kSec = 1000000000ull;

TEST(LineRateLimiter, BurstThenRateAndTheSuppressedCount) {
  LineRateLimiter l(10, 20);
  uint64_t t = 5 * kSec, suppressed = 99;
  int admitted = 0;
  for (int i = 0; i < 1000; i++) admitted += l.Admit(t, &suppressed);
  EXPECT_EQ(admitted, 20) << "the burst, then nothing at the same instant";
  EXPECT_EQ(l.suppressed(), 980u);
  // 100 ms later one more line is allowed, and it reports the 980.
  EXPECT_FALSE(l.Admit(t + kSec / 20, &suppressed));
  EXPECT_TRUE(l.Admit(t + kSec / 10, &suppressed));
  EXPECT_EQ(suppressed, 981u);
  EXPECT_EQ(l.suppressed(), 0u);
  // A flood of 100,000 lines over 10 s: about 10 a second get through.
  admitted = 0;
  uint64_t total_suppressed = 0;
  for (int i = 0; i < 100000; i++) {
    if (l.Admit(t + kSec / 10 + uint64_t(i) * (10 * kSec / 100000), &suppressed)) {
      admitted++;
      total_suppressed += suppressed;
    }
  }
  EXPECT_GE(admitted, 99);
  EXPECT_LE(admitted, 101);
  EXPECT_EQ(total_suppressed + l.suppressed() + uint64_t(admitted), 100000u)
      << "every line is either written or counted";
}

TEST(LineRateLimiter, RefillsToTheBurstOnlyAndIgnoresAClockGoingBack) {
  LineRateLimiter l(1, 3);
  uint64_t s = 0;
  for (int i = 0; i < 3; i++) EXPECT_TRUE(l.Admit(100 * kSec, &s));
  EXPECT_FALSE(l.Admit(100 * kSec, &s));
  EXPECT_FALSE(l.Admit(50 * kSec, &s)) << "a clock that went back refills nothing";
  int admitted = 0;
  for (int i = 0; i < 10; i++) admitted += l.Admit(1000 * kSec, &s);
  EXPECT_EQ(admitted, 3) << "a long pause refills the burst, no more";
}

TEST(Refusal, LineHasCodeReasonMethodAndCaller) {
  PeerInfo peer;
  peer.text = "uid=1000 gid=1000 pid=4242 (unix socket)";
  peer.address = "fd:17";
  peer.transport = "unix";
  peer.has_cred = true;
  peer.uid = 1000;
  peer.gid = 1000;
  peer.pid = 4242;
  RefusalLine l = FormatRefusal("/lossd.v1.Injector/CreateRule", grpc::StatusCode::INVALID_ARGUMENT,
                                "loss.rate: 2 is not a probability", peer, 0);
  EXPECT_EQ(l.text,
            "/lossd.v1.Injector/CreateRule by uid=1000 gid=1000 pid=4242 (unix socket) refused: "
            "INVALID_ARGUMENT: loss.rate: 2 is not a probability");
  EXPECT_EQ(l.fields["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(l.fields["reason"], "loss.rate: 2 is not a probability");
  EXPECT_EQ(l.fields["method"], "/lossd.v1.Injector/CreateRule");
  EXPECT_EQ(l.fields["uid"], 1000);
  EXPECT_EQ(l.fields["pid"], 4242);
  EXPECT_FALSE(l.fields.contains("suppressed"));
  PeerInfo tcp;
  tcp.text = "ipv4:127.0.0.1:4242 (no client certificate)";
  tcp.transport = "tcp";
  l = FormatRefusal("/lossd.v1.Injector/GetRule", grpc::StatusCode::NOT_FOUND, "no rule 7", tcp, 12);
  EXPECT_FALSE(l.fields.contains("uid"));
  EXPECT_EQ(l.fields["suppressed"], 12);
  EXPECT_NE(l.text.find("12 refusals suppressed"), std::string::npos) << l.text;
  EXPECT_FALSE(IsRefusal(grpc::Status::OK));
  EXPECT_FALSE(IsRefusal(grpc::Status(grpc::StatusCode::CANCELLED, "")));
  EXPECT_TRUE(IsRefusal(grpc::Status(grpc::StatusCode::UNAVAILABLE, "loading")));
}

}  // namespace
}  // namespace lossd
