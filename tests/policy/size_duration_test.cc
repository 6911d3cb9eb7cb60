// Sizes and durations: every accepted spelling, the refusals, and canonical formatting.
#include <gtest/gtest.h>

#include "policy/loader.h"

namespace cordon::policy {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(ParseSize, AcceptsBinaryUnitsInEverySpelling) {
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("unlimited"), 0u);
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("64k"), 64u << 10);
  EXPECT_EQ(parse_size("64KB"), 64u << 10);
  EXPECT_EQ(parse_size("64KiB"), 64u << 10);
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("512MB"), 512ull << 20);
  EXPECT_EQ(parse_size("1G"), 1ull << 30);
  EXPECT_EQ(parse_size("1 G"), 1ull << 30);
  EXPECT_EQ(parse_size("2T"), 2ull << 40);
  EXPECT_EQ(parse_size("100B"), 100u);
}

TEST(ParseSize, FractionsAreExact) {
  EXPECT_EQ(parse_size("1.5G"), 1610612736ull);
  EXPECT_EQ(parse_size("0.5K"), 512u);
  EXPECT_EQ(parse_size("1.25M"), 1310720u);
  // Not a whole number of bytes: refused rather than rounded.
  EXPECT_EQ(parse_size("1.5"), std::nullopt);
  EXPECT_EQ(parse_size("0.0001K"), std::nullopt);
}

TEST(ParseSize, RejectsGarbageNegativesAndOverflow) {
  for (const char* bad : {"",      " ",
                          "-1",    "-1G",
                          "1X",    "G",
                          "1.G",   ".5G",
                          "1GG",   "1 ",
                          "1  G",  "0x10",
                          "1e3",   "18446744073709551616",
                          "16E",   "99999999999T",
                          "1,5G",  "+5",
                          "5 G B", "inf",
                          "nan",   "1Gi"}) {
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615ull);
  EXPECT_EQ(parse_size("15E"), 15ull << 60);
}

TEST(ParseDuration, AcceptsUnitsCompoundsAndBareSeconds) {
  EXPECT_EQ(parse_duration("250ms"), milliseconds(250));
  EXPECT_EQ(parse_duration("90s"), seconds(90));
  EXPECT_EQ(parse_duration("30m"), minutes(30));
  EXPECT_EQ(parse_duration("2h"), hours(2));
  EXPECT_EQ(parse_duration("1d"), hours(24));
  EXPECT_EQ(parse_duration("1m30s"), seconds(90));
  EXPECT_EQ(parse_duration("1h30m15s500ms"), milliseconds(5415500));
  EXPECT_EQ(parse_duration("90"), seconds(90));
  EXPECT_EQ(parse_duration("1.5"), milliseconds(1500));
  EXPECT_EQ(parse_duration("1.5h"), minutes(90));
  EXPECT_EQ(parse_duration("0"), milliseconds(0));
  EXPECT_EQ(parse_duration("0s"), milliseconds(0));
}

TEST(ParseDuration, RejectsGarbageOrderAndOverflow) {
  for (const char* bad :
       {"", "s", "-1s", "1x", "1 s", "30s1m", "1m1m", "1.5ms", "1ms5s", "10000000000000000d",
        "99999999999999999999", "1m30", "m30s", "1e3s", "1.s", "ms"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
}

TEST(FormatSize, IsCanonicalAndRoundTrips) {
  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(512), "512");
  EXPECT_EQ(format_size(1024), "1K");
  EXPECT_EQ(format_size(64ull << 20), "64M");
  EXPECT_EQ(format_size(1ull << 30), "1G");
  EXPECT_EQ(format_size(1610612736ull), "1536M");
  EXPECT_EQ(format_size(1025), "1025");
  for (uint64_t v : {0ull, 1ull, 1023ull, 1024ull, 1536ull, 1ull << 40, 3ull << 50,
                     18446744073709551615ull, 1ull << 63}) {
    EXPECT_EQ(parse_size(format_size(v)), v) << v;
  }
}

TEST(FormatDuration, IsCanonicalAndRoundTrips) {
  EXPECT_EQ(format_duration(milliseconds(0)), "0");
  EXPECT_EQ(format_duration(milliseconds(250)), "250ms");
  EXPECT_EQ(format_duration(seconds(90)), "1m30s");
  EXPECT_EQ(format_duration(minutes(30)), "30m");
  EXPECT_EQ(format_duration(hours(26)), "1d2h");
  for (int64_t ms : {0ll, 1ll, 999ll, 1000ll, 61001ll, 86400000ll * 365, 5415500ll}) {
    EXPECT_EQ(parse_duration(format_duration(milliseconds(ms))), milliseconds(ms)) << ms;
  }
}

}  // namespace
}  // namespace cordon::policy
