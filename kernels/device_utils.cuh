// Device helpers shared by the kernels' .cu files (internal): bf16 <-> float on raw bits (so that
// 16-byte vector loads can be unpacked without unions over CUDA's bf16 class), warp reductions and
// launch-size arithmetic.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/bf16.hpp"

namespace foresight::kernels::dev {

inline const __nv_bfloat16* cu(const bf16* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __nv_bfloat16* cu(bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ __nv_bfloat16 to_b(float x) { return __float2bfloat16_rn(x); }

// Two bf16 packed in a 32-bit word, element 0 in the low half (little-endian memory order).
__device__ __forceinline__ float lo(std::uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(std::uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ std::uint32_t pack2(float a, float b) {
  return std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(a))) |
         (std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(b))) << 16);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// GeLU, tanh approximation, as kernels::gelu (reference.cpp) but in fp32.
__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

inline unsigned blocks_for(long n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace foresight::kernels::dev
