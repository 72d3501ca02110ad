// The trainer's precision recipes. fp32: every tensor fp32 (the reference). bf16: Megatron-LM's
// mixed precision (Micikevicius et al. 2018 with bf16; Megatron's --bf16
// --accumulate-allreduce-grads-in-fp32): the working copy of the weights and every activation and
// activation gradient are bf16, GEMMs read bf16 and accumulate in fp32 before rounding their
// output, LayerNorm and softmax statistics stay fp32, weight gradients accumulate over
// micro-batches in an fp32 main-grad buffer that is also what data parallelism all-reduces, and
// AdamW steps fp32 master weights and then writes the bf16 working copy. Rounding is the
// hardware's: to nearest, ties to even, NaN kept (kernels/bf16.hpp, one function for the trainer,
// the kernels and their references).
#pragma once

#include <cstddef>

#include "core/enums.hpp"
#include "kernels/bf16.hpp"
#include "trainer/tensor.hpp"

namespace foresight::trainer {

enum class Precision { fp32, bf16 };

/// The element type of activations and of the weights' working copy under precision `p`.
constexpr ElementType activation_type(Precision p) { return p == Precision::bf16 ? ElementType::bf16 : ElementType::fp32; }

/// Rounds each of the n floats at p to the nearest bf16 (ties to even), in place.
inline void round_to_bf16(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = kernels::round_bf16(p[i]);
}

/// Packs n floats into bf16, each rounded to nearest even (NaN kept): what a packed bf16 buffer
/// receives from host floats (the CUDA backend's copy_from_host).
inline void pack_bf16(const float* src, kernels::bf16* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::to_bf16(src[i]);
}

/// Unpacks n bf16 into floats, exactly (every bf16 is a float): the CUDA backend's copy_to_host.
inline void unpack_bf16(const kernels::bf16* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::to_float(src[i]);
}

/// Rounds a host tensor's elements in place when it is a bf16 tensor (a no-op for fp32 ones):
/// what an op or a collective does last when it writes into one.
inline void round_if_bf16(const Tensor& t) {
  if (t.defined() && t.element_type() == ElementType::bf16) round_to_bf16(t.data(), std::size_t(t.numel()));
}

}  // namespace foresight::trainer

namespace foresight {
// core/enums.hpp's name table (its macro is local to that header): to_string, parse_enum and
// allowed_values read it.
template <>
struct EnumNames<trainer::Precision> {
  static constexpr auto kList = std::to_array<std::pair<trainer::Precision, const char*>>(
      {{trainer::Precision::fp32, "fp32"}, {trainer::Precision::bf16, "bf16"}});
};
}  // namespace foresight
