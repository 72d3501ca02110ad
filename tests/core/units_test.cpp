// Units: conversions by hand (GB vs GiB, Gb/s vs GB/s) and dimensional arithmetic.
#include <gtest/gtest.h>

#include "core/units.hpp"

using namespace foresight;
using namespace foresight::literals;

TEST(Units, GigabytesAreNotGibibytes) {
  EXPECT_DOUBLE_EQ((1_GB).value(), 1e9);
  EXPECT_DOUBLE_EQ((1_GiB).value(), 1073741824.0);
  EXPECT_NEAR(in_GiB(80_GB), 74.506, 1e-3);  // 80e9 / 2^30
}

TEST(Units, GigabitsPerSecondAreAnEighthOfGigabytes) {
  EXPECT_DOUBLE_EQ((200_Gbps).value(), 25e9);  // one HDR InfiniBand port: 25 GB/s
  EXPECT_DOUBLE_EQ(in_GBps(200_Gbps), 25.0);
}

TEST(Units, BytesOverBandwidthIsSeconds) {
  const Seconds t = 1_GB / 25_GBps;
  EXPECT_DOUBLE_EQ(in_ms(t), 40.0);
  const Seconds c = Flops(312e12) / 312_TFLOPs;
  EXPECT_DOUBLE_EQ(in_s(c), 1.0);
}

TEST(Units, RatesTimesTimeAndComparisons) {
  EXPECT_DOUBLE_EQ((25_GBps * 2_s).value(), 50e9);
  EXPECT_LT(3_us, 1_ms);
  EXPECT_EQ(max(3_us, 1_ms), 1_ms);
  EXPECT_DOUBLE_EQ((1_ms + 500_us) / 1_ms, 1.5);
}
