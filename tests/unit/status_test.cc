// Status helpers: quoted input stays bounded and valid UTF-8.
#include "base/status.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "host/interface.h"

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

// Out of file descriptors is the daemon running out, not a wrong request
// (issue 25 item 1): RESOURCE_EXHAUSTED, never NOT_FOUND.
TEST(FromErrno, OutOfDescriptorsIsResourceExhausted) {
  EXPECT_EQ(Status::FromErrno(EMFILE, "x").code(), Code::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(ENFILE, "x").code(), Code::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(ENOENT, "x").code(), Code::kNotFound);
}

TEST(IfIndex, AnInterfaceLookupOutOfDescriptorsIsNotAMissingInterface) {
  ASSERT_TRUE(IfIndex("lo").ok());
  rlimit was{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  rlimit low = was;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> held;
  for (int fd; (fd = dup(0)) >= 0;) held.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  auto r = IfIndex("lo");  // if_nametoindex needs a socket
  for (int fd : held) close(fd);
  setrlimit(RLIMIT_NOFILE, &was);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted) << r.status().message();
  EXPECT_NE(r.status().message().find("Too many open files"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace lossd
