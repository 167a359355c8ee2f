#include <gtest/gtest.h>
#include "injector/rule.h"
TEST(Rule, Placeholder) { EXPECT_TRUE(lossd::ParseRate("1%").ok()); }
