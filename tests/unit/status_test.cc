// Status helpers: quoted input stays bounded and valid UTF-8.
#include "base/status.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

// Found by the daemon fuzz suite: Shown() cut a multi-byte character in two,
// the message (a CreateRules error string) was invalid UTF-8 and the client
// could not parse the response ("Exception deserializing response").
TEST(Shown, CutsAtACharacterBoundary) {
  std::string euro = "\xE2\x82\xAC";                    // 3 bytes
  std::string in = std::string(60, 'a') + euro + euro;  // byte 61 is inside the first euro
  std::string out = Shown(in);
  EXPECT_EQ(out, std::string(60, 'a') + "...");
  EXPECT_EQ(Shown(std::string(58, 'a') + euro + "b" + euro), std::string(58, 'a') + euro + "...");
  EXPECT_EQ(Shown("short " + euro), "short " + euro);
  EXPECT_LE(Shown(std::string(1000, 'x')).size(), 64u);
  EXPECT_EQ(Utf8Prefix("\xF0\x9F\x98\x80z", 2), "");
  EXPECT_EQ(Utf8Prefix("ab", 5), "ab");
}

}  // namespace
}  // namespace lossd
