// parse_size: the sizes admins write in the gateway's configuration and on skeinctl's command line.
#include "skein/size.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "skein/version.hpp"

namespace skein {
namespace {

TEST(ParseSize, PlainNumbersAreBytes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("12B"), 12u);
}

TEST(ParseSize, UnitsArePowersOf1024WrittenAnyOfTheUsualWays) {
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("64k"), 64u << 10);
  EXPECT_EQ(parse_size("64KB"), 64u << 10);
  EXPECT_EQ(parse_size("64KiB"), 64u << 10);
  EXPECT_EQ(parse_size("4M"), 4u << 20);
  EXPECT_EQ(parse_size("2G"), uint64_t{2} << 30);
  EXPECT_EQ(parse_size("1T"), uint64_t{1} << 40);
}

TEST(ParseSize, WhatIsNotASizeIsRefused) {
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("M"));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("4X"));
  EXPECT_FALSE(parse_size("4 M"));
  EXPECT_FALSE(parse_size("1.5G"));
}

TEST(ParseSize, SizesBeyond64BitsAreRefused) {
  EXPECT_EQ(parse_size("1844674407370955161"), UINT64_MAX / 10);
  EXPECT_FALSE(parse_size("18446744073709551616"));  // 2^64
  EXPECT_FALSE(parse_size("99999999999999999999"));
  EXPECT_FALSE(parse_size("16777216T"));  // 2^64
  EXPECT_EQ(parse_size("16777215T"), uint64_t{16777215} << 40);
}

TEST(Version, IsTheProjectsVersion) { EXPECT_STRNE(version(), "unknown"); }

}  // namespace
}  // namespace skein

namespace skein {
namespace {
TEST(ParseDuration, TakesSecondsMinutesHoursAndDays) {
  using std::chrono::seconds;
  EXPECT_EQ(parse_duration("90"), seconds(90));
  EXPECT_EQ(parse_duration("90s"), seconds(90));
  EXPECT_EQ(parse_duration("30m"), seconds(1800));
  EXPECT_EQ(parse_duration("24h"), seconds(86400));
  EXPECT_EQ(parse_duration("7d"), seconds(7 * 86400));
  for (const char* bad : {"", "h", "1x", "1hh", "-1", "1.5h", " 1h"})
    EXPECT_FALSE(parse_duration(bad)) << bad;
}

TEST(ParseDuration, RefusesMoreThanAHundredYears) {
  using std::chrono::seconds;
  EXPECT_EQ(parse_duration("36525d"), seconds(36525LL * 86400));
  EXPECT_EQ(parse_duration("3155760000"), seconds(3155760000LL));
  for (const char* bad :
       {"36526d", "3155760001", "876601h", "9223372036854775807", "106751991167300d"})
    EXPECT_FALSE(parse_duration(bad)) << bad;
}
}  // namespace
}  // namespace skein
