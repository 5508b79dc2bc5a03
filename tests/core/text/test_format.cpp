// Numbers as the reports print them: a rate below one is not "0".
#include "core/text/format.hpp"

#include <gtest/gtest.h>

namespace stagecraft::text {
namespace {

TEST(Format, SmallRatesKeepThreeSignificantDigits) {
  // 8 sequences x 1024 tokens in an 89,607 s step: 8192 / 89607 = 0.0914 tokens/s, once printed "0".
  EXPECT_EQ(short_rate(8192.0 / 89607.0), "0.0914");
  EXPECT_EQ(short_count(8192.0 / 89607.0), "0.0914");
  EXPECT_EQ(short_rate(0.36), "0.36");
  EXPECT_EQ(short_rate(12.34), "12.3");
  EXPECT_EQ(short_rate(0), "0");
  // from 100 on, whole numbers, then K and M as before
  EXPECT_EQ(short_rate(456), "456");
  EXPECT_EQ(short_rate(456700), "456.7 K");
  EXPECT_EQ(short_rate(1.23e6), "1.23 M");
  EXPECT_EQ(short_count(999), "999");
  EXPECT_EQ(short_count(1.746e11), "174.60 B");
}

}  // namespace
}  // namespace stagecraft::text
