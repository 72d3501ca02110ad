// The host bf16 conversion rounds to nearest even, keeps NaN and infinities, and overflows to inf,
// as __float2bfloat16_rn does (bit patterns worked by hand from the IEEE layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/bf16.hpp"

using foresight::kernels::bf16;
using foresight::kernels::round_bf16;
using foresight::kernels::to_bf16;
using foresight::kernels::to_float;

TEST(Bf16, ExactValuesKeepTheirBits) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_bf16(-2.0f).bits, 0xC000);
  EXPECT_EQ(to_bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_float(bf16::from_bits(0x3FC0)), 1.5f);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  // Near 1 the bf16 spacing is 2^-7. 1 + 2^-8 is half-way between 1 (even mantissa) and 1 + 2^-7.
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3F80);
  // 1 + 3 * 2^-8 is half-way between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up to even.
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3F82);
  // Just above half-way rounds up, just below rounds down.
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits, 0x3F81);
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) - std::ldexp(1.0f, -20)).bits, 0x3F80);
  // 0.1f = 0x3DCCCCCD: the dropped 0xCCCD is above half: 0x3DCD.
  EXPECT_EQ(to_bf16(0.1f).bits, 0x3DCD);
  EXPECT_NEAR(round_bf16(3.14159265f), 3.140625f, 0.0f);
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_bf16(inf).bits, 0x7F80);
  EXPECT_EQ(to_bf16(-inf).bits, 0xFF80);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload lives only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::bit_cast<float>(0x7F800001u)))));
  // FLT_MAX lies above the largest bf16 (0x7F7F) plus half a step: IEEE rounding gives infinity.
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80);
  // The smallest float denormal rounds to zero; the largest bf16 denormal survives.
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x007F0000u)).bits, 0x007F);
}

TEST(Bf16, RelativeRoundingErrorIsAtMostHalfAnUlp) {
  // bf16 keeps 8 significant bits: half an ulp is 2^-8 of the binade's lower end, so
  // |round(x) - x| <= 2^-8 |x| for normal x, reached just above a power of two.
  double worst = 0;
  for (float x = 1e-3f; x < 1e4f; x *= 1.0137f) worst = std::max(worst, std::abs(double(round_bf16(x)) - x) / x);
  EXPECT_LE(worst, std::ldexp(1.0, -8));
  EXPECT_GT(worst, std::ldexp(1.0, -9));  // and the bound is nearly reached
}
