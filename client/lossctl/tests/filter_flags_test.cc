#include "filter_flags.h"

#include <gtest/gtest.h>

namespace lossctl {
namespace {

TEST(BuildFilters, NothingGivenNoFilter) {
  std::vector<v1::EventFilter> allow, deny;
  std::string err;
  ASSERT_TRUE(BuildFilters(FilterFlags(), &allow, &deny, &err));
  EXPECT_TRUE(allow.empty());
  EXPECT_TRUE(deny.empty());
}

TEST(BuildFilters, CrossProductAndTypesInEach) {
  FilterFlags f;
  f.ports = {"80", "443"};
  f.addrs = {"10.0.0.0/8"};
  f.types = {"fast,rto", "tlp"};
  std::vector<v1::EventFilter> allow, deny;
  std::string err;
  ASSERT_TRUE(BuildFilters(f, &allow, &deny, &err)) << err;
  ASSERT_EQ(allow.size(), 2u);
  for (const auto& a : allow) {
    EXPECT_EQ(a.addr(), "10.0.0.0/8");
    EXPECT_EQ(a.types_size(), 3);
  }
  EXPECT_EQ(allow[0].port().lo(), 80u);
  EXPECT_EQ(allow[1].port().lo(), 443u);
  EXPECT_EQ(allow[1].port().hi(), 443u);
}

TEST(BuildFilters, OwnersByNameAreOneDimension) {
  FilterFlags f;
  f.units = {"nginx.service"};
  f.containers = {"3f2a"};
  f.pods = {"8d1e"};
  f.cgroups = {"/system.slice", "42"};
  f.ports = {"80"};
  std::vector<v1::EventFilter> allow, deny;
  std::string err;
  ASSERT_TRUE(BuildFilters(f, &allow, &deny, &err)) << err;
  // (cgroup path or id) x (unit or container or pod), each with port 80.
  ASSERT_EQ(allow.size(), 6u);
  EXPECT_EQ(allow[0].cgroup(), "/system.slice");
  EXPECT_EQ(allow[0].unit(), "nginx.service");
  EXPECT_EQ(allow[1].container(), "3f2a");
  EXPECT_EQ(allow[1].unit(), "");
  EXPECT_EQ(allow[2].pod(), "8d1e");
  EXPECT_EQ(allow[3].cgroup_id(), 42u);
  EXPECT_EQ(allow[3].cgroup(), "");
  for (const auto& a : allow) EXPECT_EQ(a.port().lo(), 80u);
}

TEST(BuildFilters, DeniesStandAlone) {
  FilterFlags f;
  f.deny_ports = {"22"};
  f.deny_addrs = {"192.168.0.0/16"};
  f.deny_types = {"syn", "synack"};
  f.deny_rules = {"4"};
  std::vector<v1::EventFilter> allow, deny;
  std::string err;
  ASSERT_TRUE(BuildFilters(f, &allow, &deny, &err)) << err;
  EXPECT_TRUE(allow.empty());
  ASSERT_EQ(deny.size(), 4u);
  EXPECT_EQ(deny[0].addr(), "192.168.0.0/16");
  EXPECT_EQ(deny[1].port().lo(), 22u);
  EXPECT_EQ(deny[2].rule_id(), 4u);
  EXPECT_EQ(deny[3].types_size(), 2);
}

TEST(BuildFilters, Errors) {
  std::vector<v1::EventFilter> allow, deny;
  std::string err;
  FilterFlags f;
  f.types = {"slow"};
  EXPECT_FALSE(BuildFilters(f, &allow, &deny, &err));
  EXPECT_EQ(err.rfind("--type: invalid type 'slow'", 0), 0u) << err;
  f = FilterFlags();
  f.addrs = {"10.0.0.1/8"};
  EXPECT_FALSE(BuildFilters(f, &allow, &deny, &err));
  EXPECT_EQ(err.rfind("--addr: invalid CIDR", 0), 0u) << err;
  f = FilterFlags();
  f.cgroups = {"0"};  // digits are an id (not 0); anything else is a path
  EXPECT_FALSE(BuildFilters(f, &allow, &deny, &err));
  EXPECT_EQ(err.rfind("--cgroup", 0), 0u) << err;
  f = FilterFlags();
  f.units = {std::string(300, 'x')};
  EXPECT_FALSE(BuildFilters(f, &allow, &deny, &err));
  EXPECT_EQ(err.rfind("--unit", 0), 0u) << err;
}

}  // namespace
}  // namespace lossctl
