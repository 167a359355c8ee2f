// The state dir's record lines (daemon/host/records.h): what is applied, what is junk.
#include "host/records.h"

#include <gtest/gtest.h>

namespace lossd {
namespace {

TEST(Records, OffloadRecordsInTheKernelsRanges) {
  OffloadRecord r;
  ASSERT_TRUE(ParseOffloadRecord("4026531840 2 eth0 1 65535", &r));
  EXPECT_EQ(r.netns, 4026531840u);
  EXPECT_EQ(r.ifindex, 2u);
  EXPECT_EQ(r.ifname, "eth0");
  EXPECT_EQ(r.gro, 1u);
  EXPECT_EQ(r.gso_max_segs, 65535u);
  EXPECT_EQ(OffloadRecordLine(r), "4026531840 2 eth0 1 65535");
  ASSERT_TRUE(ParseOffloadRecord("veth0 0 64", &r));  // an older lossd's form: this namespace
  EXPECT_EQ(r.netns, 0u);
  EXPECT_EQ(r.ifindex, 0u);
  EXPECT_TRUE(ParseOffloadRecord("18446744073709551615 2147483647 abcdefghijklmno 0 1", &r));
  for (const char* junk :
       {"", "eth0", "1 2 eth0 1", "1 2 eth0 1 0", "1 2 eth0 1 65536", "1 2 eth0 1 4294967296",
        "1 2 eth0 2 64", "1 0 eth0 1 64", "1 2147483648 eth0 1 64", "18446744073709551616 2 eth0 1 64",
        "-1 2 eth0 1 64", "+1 2 eth0 1 64", "1 2 eth0 1 64 extra", "1  2 eth0 1 64", "1 2 eth0 1 64 ",
        "1 2 abcdefghijklmnop 1 64", "1 2 a/b 1 64", "1 2 e\x01 1 64", "1 2 e\x7f 1 64", "0x1 2 eth0 1 64", "1 2 . 1 64", "1 2 .. 1 64", "1 2 e:1 1 64",
        "1 2 eth0 1 0064x"})
    EXPECT_FALSE(ParseOffloadRecord(junk, &r)) << "'" << junk << "'";
  EXPECT_FALSE(ParseOffloadRecord(std::string("1 2 e\0x 1 64", 12), &r));
}

TEST(Records, FilterRecords) {
  FilterRecord r;
  ASSERT_TRUE(ParseFilterRecord("4026532481 7 e2ea", &r));
  EXPECT_EQ(r.netns, 4026532481u);
  EXPECT_EQ(r.ifindex, 7u);
  EXPECT_EQ(r.ifname, "e2ea");
  EXPECT_EQ(FilterRecordLine(r), "4026532481 7 e2ea");
  for (const char* junk : {"0 7 e2ea", "1 0 e2ea", "1 -7 e2ea", "1 7", "1 7 e2ea x", "1 99999999999 e2ea",
                           "1 7 abcdefghijklmnop", "1 7 ../x"})
    EXPECT_FALSE(ParseFilterRecord(junk, &r)) << "'" << junk << "'";
}

}  // namespace
}  // namespace lossd
