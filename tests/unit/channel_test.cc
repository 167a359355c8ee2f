// The Unix socket's edges (service/channel.h): --socket-group's parser, and
// what Bind() leaves on disk before anyone may connect.
#include "service/channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <utility>

namespace lossd {
namespace {

TEST(SocketGroup, NameOrGid) {
  auto root = ParseGroup("root");
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, 0u);
  auto zero = ParseGroup("0");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, 0u);
  auto num = ParseGroup("4242");
  ASSERT_TRUE(num.ok());
  EXPECT_EQ(*num, 4242u);
  for (const char* bad : {"", "no-such-group-lossd-unit", "4294967295", "99999999999999999999"}) {
    auto r = ParseGroup(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find("--socket-group"), std::string::npos);
    }
  }
  auto huge = ParseGroup(std::string(100000, 'g'));
  ASSERT_FALSE(huge.ok());
  EXPECT_LT(huge.status().message().size(), 200u);  // the input is quoted bounded
}

// The connection table with a fake of "is (fd, inode) still open".
TEST(ConnectionTable, PerUidTotalAndRootReserve) {
  std::set<std::pair<int, ino_t>> open;
  ConnectionTable t(SocketLimits{4, 2, 1}, [&](int fd, ino_t ino) {
    return open.count({fd, ino}) > 0;
  });
  std::string why;
  auto admit = [&](uid_t uid, int fd, ino_t ino) {
    bool ok = t.Admit(uid, fd, ino, &why);
    if (ok) open.insert({fd, ino});
    return ok;
  };
  EXPECT_TRUE(admit(1000, 10, 100));
  EXPECT_TRUE(admit(1000, 11, 101));
  EXPECT_FALSE(admit(1000, 12, 102));  // its 2
  EXPECT_NE(why.find("2 connections of uid 1000"), std::string::npos) << why;
  EXPECT_TRUE(admit(1001, 12, 102));
  EXPECT_TRUE(admit(1002, 13, 103));
  EXPECT_FALSE(admit(1003, 14, 104));  // 4 in all
  EXPECT_NE(why.find("4 connections are open"), std::string::npos) << why;
  EXPECT_TRUE(admit(0, 14, 104));   // root's reserve
  EXPECT_FALSE(admit(0, 15, 105));  // reserve used
  // gRPC closed fd 10; fd 11 now names another socket (inode 200): both gone.
  open.erase({10, 100});
  open.erase({11, 101});
  open.insert({11, 200});
  EXPECT_TRUE(admit(1000, 16, 106));   // 4 again: 1001, 1002, root, this
  EXPECT_FALSE(admit(1000, 17, 107));  // root's connection counts toward the total
  EXPECT_EQ(t.open(), 4u);
}

TEST(ConnectionTable, SocketStillOpenByInode) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct stat st;
  ASSERT_EQ(fstat(sv[0], &st), 0);
  EXPECT_TRUE(SocketStillOpen(sv[0], st.st_ino));
  EXPECT_FALSE(SocketStillOpen(sv[0], st.st_ino + 1));
  close(sv[0]);
  EXPECT_FALSE(SocketStillOpen(sv[0], st.st_ino));
  close(sv[1]);
}

TEST(UnixSocket, BoundWithModeAndRefusedUntilStarted) {
  char tmpl[] = "/tmp/lossd-unit-sock.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/run", path = dir + "/lossd.sock";
  {
    auto l = UnixSocketListener::Bind(path, std::nullopt);
    ASSERT_TRUE(l.ok()) << l.status().message();
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0660u);
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750u);
    // Not listening yet: a client is refused, as if nobody served.
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_NE(connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(errno, ECONNREFUSED);
    close(fd);
  }
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0) << "the socket outlived its listener";
  auto long_path =
      UnixSocketListener::Bind(std::string(tmpl) + "/" + std::string(200, 'x'), std::nullopt);
  ASSERT_FALSE(long_path.ok());
  EXPECT_EQ(long_path.status().code(), Code::kInvalidArgument);
  rmdir(dir.c_str());
  rmdir(tmpl);
}

}  // namespace
}  // namespace lossd
