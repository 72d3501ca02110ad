// The bf16 recipe's parts, each against numbers worked by hand: round-to-nearest-even on bit
// patterns (ties both ways, overflow, NaN, denormals); a GEMM reading bf16 operands, summing in
// fp32 or wider and rounding only a bf16 output; the parameter store's fp32 master values, bf16
// working copy and its 18 bytes per parameter; and small AdamW updates that the fp32 master keeps
// while a bf16 weight would lose them.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "trainer/cpu_backend.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/params.hpp"
#include "trainer/precision.hpp"

namespace foresight::trainer {
namespace {

/// The trainer's in-place rounding of one float given by its bits; returns the result's bits.
std::uint32_t rounded_bits(std::uint32_t bits) {
  float f = std::bit_cast<float>(bits);
  round_to_bf16(&f, 1);
  return std::bit_cast<std::uint32_t>(f);
}

TEST(Bf16Rounding, TiesGoToTheEvenNeighbourBothWays) {
  // Near 1 a bf16 step is 2^-7 (float bits 0x00010000). 1 + 2^-8 (0x3F808000) lies half-way
  // between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81, odd): down to even.
  EXPECT_EQ(rounded_bits(0x3F808000u), 0x3F800000u);
  // 1 + 2^-7 + 2^-8 (0x3F818000) lies half-way between 0x3F81 (odd) and 0x3F82 (even): up to even.
  EXPECT_EQ(rounded_bits(0x3F818000u), 0x3F820000u);
  // The same magnitudes negative: the sign plays no part.
  EXPECT_EQ(rounded_bits(0xBF808000u), 0xBF800000u);
  EXPECT_EQ(rounded_bits(0xBF818000u), 0xBF820000u);
  // One float step off the tie decides it: above rounds up, below rounds down.
  EXPECT_EQ(rounded_bits(0x3F808001u), 0x3F810000u);
  EXPECT_EQ(rounded_bits(0x3F807FFFu), 0x3F800000u);
  // A carry out of the mantissa bumps the exponent: 2 - 2^-8 (0x3FFF8000) is half-way between
  // 0x3FFF (odd) and 0x4000 (2.0, even).
  EXPECT_EQ(rounded_bits(0x3FFF8000u), 0x40000000u);
}

TEST(Bf16Rounding, OverflowGoesToInfinity) {
  // The largest finite bf16 is 0x7F7F; half-way to the next step (0x7F7F8000) is a tie with an odd
  // lower neighbour, so it rounds up to 0x7F80 = +inf, as IEEE does. Just below stays finite.
  EXPECT_EQ(rounded_bits(0x7F7F8000u), 0x7F800000u);
  EXPECT_EQ(rounded_bits(0x7F7F7FFFu), 0x7F7F0000u);
  EXPECT_EQ(rounded_bits(0x7F7FFFFFu), 0x7F800000u);  // FLT_MAX
  EXPECT_EQ(rounded_bits(0xFF7F8000u), 0xFF800000u);  // to -inf
  EXPECT_EQ(rounded_bits(0x7F800000u), 0x7F800000u);  // inf stays inf
  EXPECT_EQ(rounded_bits(0xFF800000u), 0xFF800000u);
}

TEST(Bf16Rounding, NaNStaysNaN) {
  EXPECT_EQ(rounded_bits(0x7FC00000u), 0x7FC00000u);  // the quiet NaN
  // A NaN whose payload is only in the dropped bits: plain rounding would make it +inf (0x7F80);
  // it becomes the quiet NaN of its sign.
  EXPECT_EQ(rounded_bits(0x7F800001u), 0x7FC00000u);
  EXPECT_EQ(rounded_bits(0xFF800001u), 0xFFC00000u);
  // All payload bits set: adding 0x7FFF + 1 would carry into the sign bit; kept as a NaN.
  EXPECT_EQ(rounded_bits(0x7FFFFFFFu), 0x7FFF0000u);
}

TEST(Bf16Rounding, DenormalsRoundLikeEveryOtherValue) {
  // bf16 denormals step by 0x00010000 in float bits. 0x00008000 is half-way between 0 (even) and
  // 0x0001 (odd): down to +0. 0x00018000 is half-way between 0x0001 (odd) and 0x0002: up.
  EXPECT_EQ(rounded_bits(0x00008000u), 0x00000000u);
  EXPECT_EQ(rounded_bits(0x00018000u), 0x00020000u);
  EXPECT_EQ(rounded_bits(0x00008001u), 0x00010000u);
  EXPECT_EQ(rounded_bits(0x80008000u), 0x80000000u);  // to -0
  // The largest float denormal rounds up into the smallest normal bf16, 2^-126 (0x0080).
  EXPECT_EQ(rounded_bits(0x007FFFFFu), 0x00800000u);
  EXPECT_EQ(rounded_bits(0x807FFFFFu), 0x80800000u);
  EXPECT_EQ(rounded_bits(0x80000000u), 0x80000000u);  // -0 keeps its sign
}

Tensor tensor(Backend& be, std::int64_t rows, std::int64_t cols, const std::vector<float>& v, ElementType t) {
  Tensor x = t == ElementType::fp32 ? be.zeros_fp32(rows, cols) : be.zeros(rows, cols);
  be.copy_from_host(x, v);
  return x;
}

float only(Backend& be, const Tensor& t) {
  std::vector<float> v(1);
  be.copy_to_host(v, t);
  return v[0];
}

TEST(Bf16Gemm, SumsInFp32AndRoundsOnlyABf16Output) {
  auto be = make_cpu_backend(Precision::bf16);
  const float e8 = std::ldexp(1.0f, -8), e9 = std::ldexp(1.0f, -9);
  const Tensor ones = tensor(*be, 3, 1, {1, 1, 1}, ElementType::bf16);
  // [1, 2^-8, 2^-8] . [1, 1, 1] = 1 + 2^-7, a bf16. Summed in bf16 each 2^-8 would be a tie
  // rounding back to 1 (even), and the result would be 1.
  {
    Tensor c = be->zeros(1, 1);
    be->matmul(c, tensor(*be, 1, 3, {1, e8, e8}, ElementType::bf16), false, ones, false, false);
    EXPECT_EQ(c.element_type(), ElementType::bf16);
    EXPECT_EQ(only(*be, c), 1.0f + std::ldexp(1.0f, -7));
  }
  // [1, 2^-8, 2^-9] . [1, 1, 1] = 1 + 3 * 2^-9 = 1.005859375, 3/4 of a bf16 step above 1.
  const Tensor a = tensor(*be, 1, 3, {1, e8, e9}, ElementType::bf16);
  {
    Tensor c = be->zeros(1, 1);  // an activation: rounded up to 1 + 2^-7
    be->matmul(c, a, false, ones, false, false);
    EXPECT_EQ(only(*be, c), 1.0078125f);
  }
  {
    // A main gradient: fp32, accumulated as is (0.5 + 1.005859375, exact in fp32).
    Tensor g = tensor(*be, 1, 1, {0.5f}, ElementType::fp32);
    be->matmul(g, a, false, ones, false, true);
    EXPECT_EQ(only(*be, g), 1.505859375f);
  }
  {
    // An fp32 operand is read as the tensor core would read it: rounded to bf16. 1 + 2^-9 + 2^-12
    // is less than half a step (2^-8) above 1, so it reads as 1.
    const Tensor a32 = tensor(*be, 1, 1, {1.0f + e9 + std::ldexp(1.0f, -12)}, ElementType::fp32);
    Tensor g = be->zeros_fp32(1, 1);
    be->matmul(g, a32, false, tensor(*be, 1, 1, {1}, ElementType::bf16), false, false);
    EXPECT_EQ(only(*be, g), 1.0f);
  }
}

TEST(Bf16Gemm, ALinearLayersBiasJoinsTheSumBeforeItsOneRounding) {
  // matmul_bias rounds a bf16 output once, after the bias (cuBLASLt's BIAS epilogue); matmul then
  // add_bias rounds twice. [1, 2^-8] . [1, 1] = 1 + 2^-8, exactly half a bf16 step above 1, and the
  // bias is 2^-9: once, 1 + 3 * 2^-9 rounds up to 1 + 2^-7; twice, the tie goes to 1 (even) and
  // 1 + 2^-9, a quarter step, rounds back to 1.
  auto be = make_cpu_backend(Precision::bf16);
  const float e8 = std::ldexp(1.0f, -8), e9 = std::ldexp(1.0f, -9);
  const Tensor a = tensor(*be, 1, 2, {1, e8}, ElementType::bf16), ones = tensor(*be, 2, 1, {1, 1}, ElementType::bf16);
  const Tensor bias = tensor(*be, 1, 1, {e9}, ElementType::bf16);
  Tensor once = be->zeros(1, 1), twice = be->zeros(1, 1);
  be->matmul_bias(once, a, false, ones, false, bias);
  EXPECT_EQ(only(*be, once), 1.0f + std::ldexp(1.0f, -7));
  be->matmul(twice, a, false, ones, false, false);
  be->add_bias(twice, bias);
  EXPECT_EQ(only(*be, twice), 1.0f);
  // Under fp32 the two are the same float sums: (1 + 2^-8) + 2^-9.
  auto be32 = make_cpu_backend(Precision::fp32);
  Tensor f = be32->zeros(1, 1);
  be32->matmul_bias(f, tensor(*be32, 1, 2, {1, e8}, ElementType::fp32), false,
                    tensor(*be32, 2, 1, {1, 1}, ElementType::fp32), false, tensor(*be32, 1, 1, {e9}, ElementType::fp32));
  EXPECT_EQ(only(*be32, f), 1.0f + e8 + e9);
}

TEST(Bf16Gemm, FusedGeluReadsTheUnroundedSum) {
  // matmul_bias_gelu (cuBLASLt's GELU_AUX_BIAS): [1, 2^-9] . [1, 1] + 2^-11 = 1.00244140625, a
  // fifth of a bf16 step above 1. The kept pre-activation rounds to 1; the GeLU is taken of the
  // unrounded sum: GeLU(1.00244140625) = 0.84383 (tanh form), which rounds to 0.84375, where
  // GeLU(1) = 0.84119 would round to 0.83984375 (steps of 2^-8 there).
  auto be = make_cpu_backend(Precision::bf16);
  const float e9 = std::ldexp(1.0f, -9), e11 = std::ldexp(1.0f, -11);
  const Tensor a = tensor(*be, 1, 2, {1, e9}, ElementType::bf16), ones = tensor(*be, 2, 1, {1, 1}, ElementType::bf16);
  Tensor y = be->zeros(1, 1), pre = be->zeros(1, 1);
  be->matmul_bias_gelu(y, pre, a, false, ones, false, tensor(*be, 1, 1, {e11}, ElementType::bf16));
  EXPECT_EQ(only(*be, pre), 1.0f);
  EXPECT_EQ(only(*be, y), 0.84375f);
  Tensor twice = be->zeros(1, 1);
  be->gelu_forward(twice, pre);
  EXPECT_EQ(only(*be, twice), 0.83984375f);
  // matmul_dgelu (DGELU): the same 1 + 2^-9 sum times GeLU'(1.5) = 1.1277108 is 1.1299142, which
  // rounds to 1.1328125 (steps of 2^-7); the rounded sum, 1, would give 1.125.
  Tensor dx = be->zeros(1, 1);
  be->matmul_dgelu(dx, a, false, ones, false, tensor(*be, 1, 1, {1.5f}, ElementType::bf16));
  EXPECT_EQ(only(*be, dx), 1.1328125f);
}

TEST(Bf16Gemm, UnderFp32TheFusedGeluOpsAreThePairsExactly) {
  // No rounding between the GEMM and the GeLU under fp32: the fused calls and the pairs they
  // replace give the same bits (random operands, every element compared).
  auto be = make_cpu_backend(Precision::fp32);
  const std::int64_t M = 7, K = 5, N = 6;
  std::vector<float> va(M * K), vb(K * N), vbias(N), vdy(M * N);
  for (std::size_t i = 0; i < va.size(); ++i) va[i] = std::sin(0.7 * double(i) + 0.3);
  for (std::size_t i = 0; i < vb.size(); ++i) vb[i] = std::cos(1.3 * double(i));
  for (std::size_t i = 0; i < vbias.size(); ++i) vbias[i] = 0.1f * float(i) - 0.2f;
  const Tensor a = tensor(*be, M, K, va, ElementType::fp32), b = tensor(*be, K, N, vb, ElementType::fp32);
  const Tensor bias = tensor(*be, 1, N, vbias, ElementType::fp32);
  Tensor y = be->zeros(M, N), pre = be->zeros(M, N), y2 = be->zeros(M, N), pre2 = be->zeros(M, N);
  be->matmul_bias_gelu(y, pre, a, false, b, false, bias);
  be->matmul_bias(pre2, a, false, b, false, bias);
  be->gelu_forward(y2, pre2);
  std::vector<float> h1(M * N), h2(M * N);
  be->copy_to_host(h1, y);
  be->copy_to_host(h2, y2);
  EXPECT_EQ(h1, h2);
  be->copy_to_host(h1, pre);
  be->copy_to_host(h2, pre2);
  EXPECT_EQ(h1, h2);
  // dx (M,K) = dy (M,N) b^T (N,K) through GeLU' of an (M,K) pre-activation.
  const Tensor dy = tensor(*be, M, N, std::vector<float>(vdy.size(), 0.25f), ElementType::fp32);
  const Tensor x = tensor(*be, M, K, va, ElementType::fp32);
  Tensor dx = be->zeros(M, K), dx2 = be->zeros(M, K), t = be->zeros(M, K);
  be->matmul_dgelu(dx, dy, false, b, true, x);
  be->matmul(t, dy, false, b, true, false);
  be->gelu_backward(dx2, t, x);
  std::vector<float> d1(M * K), d2(M * K);
  be->copy_to_host(d1, dx);
  be->copy_to_host(d2, dx2);
  EXPECT_EQ(d1, d2);
}

TEST(Bf16Params, Fp32MasterAndABf16WorkingCopyOf18BytesPerParameter) {
  auto be = make_cpu_backend(Precision::bf16);
  ParamStore store(1, 0);
  store.declare(ParamDecl{.name = "w", .rows = 30, .cols = 20, .init = Init::normal, .stddev = 0.02f});
  store.declare(ParamDecl{.name = "b", .rows = 1, .cols = 20, .init = Init::ones});
  store.allocate(*be, 5);
  // Megatron-LM's bf16 count per parameter: bf16 weight 2 + fp32 main gradient 4 + fp32 master 4 +
  // two fp32 AdamW moments 8 = 18 bytes (fp32 training: 16, the weight being its own master).
  EXPECT_EQ(be->bytes_in_use(), 18 * store.elements());
  const Param& w = store[0];
  EXPECT_EQ(w.value.element_type(), ElementType::bf16);
  EXPECT_EQ(w.master.element_type(), ElementType::fp32);
  EXPECT_EQ(w.grad.element_type(), ElementType::fp32);
  std::vector<float> value(std::size_t(w.value.numel())), master(value.size());
  be->copy_to_host(value, w.value);
  be->copy_to_host(master, w.master);
  int differ = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    EXPECT_EQ(value[i], kernels::round_bf16(master[i]));
    differ += value[i] != master[i];
  }
  EXPECT_GT(differ, int(value.size()) / 2);  // random normals are bf16 by chance only

  // The working copy follows the master: 1 + 2^-8 + 2^-20 is just above a tie, so 1 + 2^-7.
  std::vector<float> one = {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)};
  be->copy_from_host(w.master.row_slice(0, 1).reshaped(1, 1), one);
  store.update_working_copy(*be);
  EXPECT_EQ(only(*be, w.value.row_slice(0, 1).reshaped(1, 1)), 1.0078125f);

  auto fp32 = make_cpu_backend();
  ParamStore plain(1, 0);
  plain.declare(ParamDecl{.name = "w", .rows = 30, .cols = 20, .init = Init::normal, .stddev = 0.02f});
  plain.allocate(*fp32, 5);
  EXPECT_EQ(fp32->bytes_in_use(), 16 * plain.elements());
  EXPECT_EQ(plain[0].value.data(), plain[0].master.data());  // one buffer
}

TEST(Bf16Params, SmallUpdatesAccumulateInTheMasterUntilTheWorkingCopyMoves) {
  // A weight at 1 and a constant gradient of 1: AdamW's first steps move it by lr (m^ / sqrt(v^)
  // = 1, up to eps) each. With lr = 2^-10, a quarter of the bf16 step below 1 (2^-8): a bf16
  // weight stepped in bf16 would round back to 1 every time. The fp32 master reaches 1 - 2^-10,
  // 1 - 2 * 2^-10, 1 - 3 * 2^-10; the working copy rounds these to 1, then to the tie 1 - 2^-9,
  // which goes to the even neighbour 1 (0x3F80, not 0x3F7F), then to 1 - 2^-8.
  auto be = make_cpu_backend(Precision::bf16);
  ParamStore store(1, 0);
  store.declare(ParamDecl{.name = "g", .rows = 1, .cols = 1, .init = Init::ones});
  store.allocate(*be, 1);
  const OptimizerConfig c{.lr = std::ldexp(1.0, -10), .min_lr = std::ldexp(1.0, -10), .warmup_steps = 0,
                          .total_steps = 10, .weight_decay = 0, .clip_norm = 0};
  const float expected_value[] = {1.0f, 1.0f, 1.0f - std::ldexp(1.0f, -8)};
  for (int step = 1; step <= 3; ++step) {
    be->fill(store.grads(), 1.0f);
    adamw_step(*be, store, c, step, 1.0);
    store.update_working_copy(*be);
    EXPECT_NEAR(only(*be, store[0].master), 1.0 - step * std::ldexp(1.0, -10), 1e-7) << "step " << step;
    EXPECT_EQ(only(*be, store[0].value), expected_value[step - 1]) << "step " << step;
  }
}

}  // namespace
}  // namespace foresight::trainer
