// bfloat16 on the host: 1 sign, 8 exponent, 7 mantissa bits (the top half of an IEEE float).
// The storage type of every bf16 tensor in the kernel API (layout-compatible with CUDA's
// __nv_bfloat16, so the same pointers go to the launchers) and the rounding the CPU references use
// to see exactly the inputs the GPU sees. Conversion rounds to nearest, ties to even, like
// __float2bfloat16_rn; NaN stays NaN (quiet); overflow rounds to infinity as IEEE does.
#pragma once

#include <bit>
#include <cstdint>

namespace foresight::kernels {

struct bf16 {
  std::uint16_t bits = 0;

  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must match __nv_bfloat16's layout");

/// Rounds a float to the nearest bf16 (ties to even). NaN maps to a quiet NaN of the same sign.
constexpr bf16 to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)  // NaN: keep sign, force quiet bit
    return bf16::from_bits(static_cast<std::uint16_t>((u >> 16) | 0x0040u));
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases to the even neighbour; a carry
  // out of the mantissa bumps the exponent, which is the correct rounding (up to infinity).
  const std::uint32_t lsb = (u >> 16) & 1u;
  return bf16::from_bits(static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16));
}

/// Exact: every bf16 is a float.
constexpr float to_float(bf16 b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16); }

/// The float the GPU sees after a bf16 round trip.
constexpr float round_bf16(float f) { return to_float(to_bf16(f)); }

}  // namespace foresight::kernels
