// ParseListenAddress: loopback is decided on the parsed address; the IP
// helpers every part shares (families, text, prefix masks).
#include "base/address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace lossd {
namespace {

TEST(Address, FamiliesTextAndPrefixMasks) {
  EXPECT_EQ(AfOfVersion(4), AF_INET);
  EXPECT_EQ(AfOfVersion(6), AF_INET6);
  EXPECT_EQ(AfOfVersion(5), 0);
  EXPECT_EQ(VersionOfAf(AF_INET), 4);
  EXPECT_EQ(VersionOfAf(AF_INET6), 6);
  EXPECT_EQ(VersionOfAf(AF_UNIX), 0);
  uint8_t v4[4] = {10, 0, 0, 1}, v6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(AddrText(AF_INET, v4), "10.0.0.1");
  EXPECT_EQ(AddrText(AF_INET6, v6), "fd00::1");
  std::array<uint8_t, 16> none{}, all;
  all.fill(0xff);
  EXPECT_EQ(PrefixMask(0), none);
  EXPECT_EQ(PrefixMask(128), all);
  EXPECT_EQ(PrefixMask(200), all);  // bounded
  auto m20 = PrefixMask(20);
  EXPECT_EQ(m20[0], 0xff);
  EXPECT_EQ(m20[1], 0xff);
  EXPECT_EQ(m20[2], 0xf0);
  EXPECT_EQ(m20[3], 0x00);
}

TEST(ListenAddress, LoopbackIsDecidedOnTheParsedAddress) {
  struct Case {
    const char* text;
    bool ok, loopback;
    const char* bound;
  } cases[] = {
      {"127.0.0.1:7070", true, true, "127.0.0.1:7070"},
      {"127.9.8.7:7070", true, true, "127.9.8.7:7070"},
      {"localhost:9464", true, true, "127.0.0.1:9464"},
      {"[::1]:9464", true, true, "[::1]:9464"},
      {"[::ffff:127.0.0.1]:1", true, true, "[::ffff:127.0.0.1]:1"},
      {"0.0.0.0:7070", true, false, "0.0.0.0:7070"},
      {":7070", true, false, "0.0.0.0:7070"},
      {"[::]:7070", true, false, "[::]:7070"},
      {"10.1.2.3:7070", true, false, "10.1.2.3:7070"},
      {"[::ffff:10.0.0.1]:7070", true, false, "[::ffff:10.0.0.1]:7070"},
      {"128.0.0.1:7070", true, false, "128.0.0.1:7070"},
      // The old string-prefix test took these for loopback.
      {"127.x.example:7070", false, false, ""},
      {"127.0.0.1.evil.example:7070", false, false, ""},
      {"::1:7070", false, false, ""},  // IPv6 needs brackets
      {"[::1:7070", false, false, ""},
      {"127.0.0.1", false, false, ""},
      {"127.0.0.1:", false, false, ""},
      {"127.0.0.1:0", false, false, ""},
      {"127.0.0.1:65536", false, false, ""},
      {"127.0.0.1:-1", false, false, ""},
      {"127.0.0.1:80x", false, false, ""},
      {"example.com:80", false, false, ""},
  };
  for (const auto& c : cases) {
    auto a = ParseListenAddress(c.text);
    ASSERT_EQ(a.ok(), c.ok) << c.text << ": " << a.status().message();
    if (!c.ok) {
      EXPECT_EQ(a.status().code(), Code::kInvalidArgument) << c.text;
      continue;
    }
    EXPECT_EQ(a->loopback, c.loopback) << c.text;
    EXPECT_EQ(a->ToString(), c.bound) << c.text;
  }
}

TEST(ListenAddress, PortZeroOnlyWhenAsked) {
  EXPECT_FALSE(ParseListenAddress("127.0.0.1:0").ok());
  auto a = ParseListenAddress("127.0.0.1:0", /*allow_any_port=*/true);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 0);
}

TEST(ListenAddress, ErrorsQuoteABoundedInput) {
  auto a = ParseListenAddress(std::string(200000, 'x') + ":80");
  ASSERT_FALSE(a.ok());
  EXPECT_LT(a.status().message().size(), 300u);
}

}  // namespace
}  // namespace lossd
