// The trainer's CUDA backend under --precision bf16 against its CPU backend under the same recipe
// (precision.hpp; the CPU's bf16 is itself checked against fp32 in tests/trainer/bf16.cmake): the
// GPU stores packed 2-byte bf16, the CPU floats holding bf16 values, and both start from the same
// inputs (rounded once, identically, by copy_from_host). Every Backend op, outputs poisoned with
// NaN first; bf16 results compared in bf16 ulps, fp32 ones (statistics, main gradients, masters)
// normwise, each tolerance with its reason. Then whole bf16 runs (dense, TeraPipe slices with
// recompute, selective recompute, MoE) against the CPU's bf16 losses. Skips itself without a GPU.
// The fp32 twin: trainer_backend_gpu_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/bf16.hpp"
#include "kernels/device.hpp"
#include "tests/gpu/trainer_runs.hpp"
#include "trainer/backend.hpp"
#include "trainer/precision.hpp"

namespace foresight::trainer {
namespace {

using gpu_test::RunResult;

// fp32 results computed in fp32 on both sides from identical inputs (AdamW on the masters): the
// fp32 backend test's bound, summation order only.
constexpr double kTol = 2e-5;

/// How far a bf16 result may be from the CPU's, and why (each use states its reason).
struct Bf16Tol {
  double rel = 0;            // max |gpu - cpu| / max |cpu|, normwise over the compared elements
  int ulps = 0;              // max distance in bf16 steps of any element (-1: not bounded)
  double fraction = 0;       // most elements allowed to differ at all
};
// Ops computed in double on both sides from identical inputs: the float each side rounds differs
// by a few double ulps at most (device exp/tanh vs glibc, summation order of row reductions), so
// a bf16 rounding can only flip for a value within that of a half-way point. Exact in practice;
// one ulp on one element in a thousand allowed. A wrong rounding mode (truncation, or ties away
// from zero) makes about half the elements differ, so this also pins __float2bfloat16_rn.
constexpr Bf16Tol kBf16Exact{.rel = 1.0 / 256, .ulps = 1, .fraction = 1e-3};
// bf16 GEMMs: identical bf16 operands, products exact in fp32 on both sides; the CPU sums in double
// and rounds to float, cuBLAS sums in fp32 in its own order (tensor cores, split-K): the sums
// differ by ~K * 2^-24 relative to the sum of |products|, which flips a bf16 rounding now and then
// (one ulp of the largest element = 2^-8 normwise) and, where the sum cancels to near zero, by many
// ulps of that small element (hence no per-element ulp bound).
constexpr Bf16Tol kBf16Gemm{.rel = 1.0 / 256, .ulps = -1, .fraction = 0.05};
// Attention: three (forward) or four (backward) GEMMs in a chain, each rounding its output to bf16
// (scores, probs, dL/dprobs, dL/dscores), so a flip in one feeds the next: a few ulps of the
// largest element normwise; the fraction of differing elements is printed, not bounded.
constexpr Bf16Tol kBf16Attention{.rel = 4.0 / 256, .ulps = -1, .fraction = 1.0};

/// A bf16 element's position on the number line in bf16 steps (sign-magnitude to ordered integer).
std::int64_t bf16_ordinal(float v) {
  const std::uint16_t b = kernels::to_bf16(v).bits;
  return (b & 0x8000u) ? -std::int64_t(b & 0x7fffu) : std::int64_t(b);
}

class CudaBackendBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto c = kernels::device_count();
    if (c.count == 0) GTEST_SKIP() << c.reason;
    gpu = make_backend("cuda", Precision::bf16);
    cpu = make_backend("cpu", Precision::bf16);
  }

  /// The same random (rows, cols) tensor on both backends: bf16 (zeros(), the activation type) or
  /// fp32 (zeros_fp32(): master weights, main gradients, statistics).
  std::pair<Tensor, Tensor> pair(std::int64_t rows, std::int64_t cols, float scale = 1.0f, bool fp32 = false) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> h(std::size_t(rows * cols));
    for (float& x : h) x = d(rng);
    Tensor c = fp32 ? cpu->zeros_fp32(rows, cols) : cpu->zeros(rows, cols);
    Tensor g = fp32 ? gpu->zeros_fp32(rows, cols) : gpu->zeros(rows, cols);
    cpu->copy_from_host(c, h);
    gpu->copy_from_host(g, h);
    return {c, g};
  }
  std::pair<Tensor, Tensor> pair_fp32(std::int64_t rows, std::int64_t cols, float scale = 1.0f) {
    return pair(rows, cols, scale, true);
  }
  /// An output tensor: zeros on the CPU, NaN on the GPU (overwriting ops must write every element).
  std::pair<Tensor, Tensor> out(std::int64_t rows, std::int64_t cols, bool fp32 = false) {
    Tensor c = fp32 ? cpu->zeros_fp32(rows, cols) : cpu->zeros(rows, cols);
    Tensor g = fp32 ? gpu->zeros_fp32(rows, cols) : gpu->zeros(rows, cols);
    gpu->fill(g, std::numeric_limits<float>::quiet_NaN());
    return {c, g};
  }
  std::vector<float> host(Backend& be, const Tensor& t) {
    std::vector<float> v(std::size_t(t.numel()));
    be.copy_to_host(v, t);
    return v;
  }
  /// A bf16 result against the CPU's over columns [first_col, last_col): normwise error, largest
  /// distance in bf16 steps, fraction of elements that differ; all printed.
  void expect_bf16(const std::string& what, const std::pair<Tensor, Tensor>& t, const Bf16Tol& tol,
                   std::int64_t first_col = 0, std::int64_t last_col = -1) {
    ASSERT_EQ(t.first.element_type(), ElementType::bf16) << what;
    ASSERT_EQ(t.second.storage(), Storage::packed_bf16) << what << ": the GPU tensor is not packed bf16";
    const std::vector<float> want = host(*cpu, t.first), got = host(*gpu, t.second);
    const std::int64_t cols = t.first.cols();
    if (last_col < 0) last_col = cols;
    double err = 0, scale = 1e-30;
    std::int64_t worst_ulps = 0;
    long bad = 0, differ = 0, count = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::int64_t col = std::int64_t(i) % cols;
      if (col < first_col || col >= last_col) continue;
      ++count;
      if (!std::isfinite(got[i])) {
        ++bad;
        continue;
      }
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, std::abs(double(want[i])));
      const std::int64_t u = std::abs(bf16_ordinal(got[i]) - bf16_ordinal(want[i]));
      worst_ulps = std::max(worst_ulps, u);
      differ += u != 0;
    }
    const double fraction = count ? double(differ) / double(count) : 0.0;
    std::printf("  %-40s rel %.3e  max %lld bf16 ulps  %5.2f%% differ\n", what.c_str(), err / scale,
                static_cast<long long>(worst_ulps), 100.0 * fraction);
    EXPECT_EQ(bad, 0) << what << ": non-finite outputs";
    EXPECT_LE(err / scale, tol.rel) << what;
    if (tol.ulps >= 0) {
      EXPECT_LE(worst_ulps, tol.ulps) << what;
    }
    EXPECT_LE(fraction, tol.fraction) << what;
  }
  /// An fp32 result (statistics, main gradients, master weights) against the CPU's, normwise.
  void expect_fp32(const std::string& what, const std::pair<Tensor, Tensor>& t, double tol) {
    ASSERT_EQ(t.second.storage(), Storage::float32) << what;
    const std::vector<float> want = host(*cpu, t.first), got = host(*gpu, t.second);
    double err = 0, scale = 1e-30;
    long bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(got[i])) {
        ++bad;
        continue;
      }
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    std::printf("  %-40s rel %.3e  (fp32)\n", what.c_str(), err / scale);
    EXPECT_EQ(bad, 0) << what << ": non-finite outputs";
    EXPECT_LE(err / scale, tol) << what;
  }

  /// LayerNorm forward and backward on a random (rows, cols) input: y and dx in bf16 (computed in
  /// double on both sides: kBf16Exact), the fp32 statistics and gamma/beta gradients normwise.
  void expect_layernorm(std::int64_t rows, std::int64_t cols, const std::string& tag) {
    auto x = pair(rows, cols, 3.0f), gamma = pair(1, cols), beta = pair(1, cols);
    auto y = out(rows, cols), mean = out(rows, 1, true), rstd = out(rows, 1, true);
    cpu->layernorm_forward(y.first, mean.first, rstd.first, x.first, gamma.first, beta.first);
    gpu->layernorm_forward(y.second, mean.second, rstd.second, x.second, gamma.second, beta.second);
    expect_bf16("layernorm_forward y" + tag, y, kBf16Exact);
    expect_fp32("layernorm_forward mean" + tag, mean, 1e-6);
    expect_fp32("layernorm_forward rstd" + tag, rstd, 1e-6);
    auto dy = pair(rows, cols), dx = out(rows, cols), dgamma = pair_fp32(1, cols), dbeta = pair_fp32(1, cols);
    cpu->layernorm_backward(dx.first, dgamma.first, dbeta.first, dy.first, x.first, mean.first, rstd.first,
                            gamma.first);
    gpu->layernorm_backward(dx.second, dgamma.second, dbeta.second, dy.second, x.second, mean.second, rstd.second,
                            gamma.second);
    expect_bf16("layernorm_backward dx" + tag, dx, kBf16Exact);
    expect_fp32("layernorm_backward dgamma" + tag, dgamma, 1e-6);
    expect_fp32("layernorm_backward dbeta" + tag, dbeta, 1e-6);
  }

  std::unique_ptr<Backend> gpu, cpu;
  std::mt19937 rng{20261124};
};

TEST_F(CudaBackendBf16Test, StorageIsTwoBytesPerElement) {
  EXPECT_EQ(gpu->compute_dtype(), "bf16");
  EXPECT_EQ(gpu->precision(), Precision::bf16);
  const std::int64_t before = gpu->bytes_in_use();
  {
    Tensor t = gpu->zeros(1000, 1000);
    EXPECT_EQ(t.storage(), Storage::packed_bf16);
    EXPECT_EQ(t.element_type(), ElementType::bf16);
    EXPECT_EQ(t.element_bytes(), 2u);
    EXPECT_EQ(gpu->bytes_in_use(), before + 2000000) << "a bf16 zeros() must take 2 bytes per element";
    EXPECT_THROW((void)t.data(), InternalError) << "data() must refuse packed bf16";
    Tensor f = gpu->zeros_fp32(1000, 1000);
    EXPECT_EQ(f.storage(), Storage::float32);
    EXPECT_EQ(gpu->bytes_in_use(), before + 6000000);
  }
  EXPECT_EQ(gpu->bytes_in_use(), before);
  Tensor z = gpu->zeros(3, 5);  // from the cache: must still come back zeroed
  for (float v : host(*gpu, z)) EXPECT_EQ(v, 0.0f);
}

TEST_F(CudaBackendBf16Test, ConversionsRoundToNearestEven) {
  // Half-way cases, both parities and signs, NaN and overflow, then random floats: through
  // copy_from_host (host rounding) into bf16, and through an fp32 tensor and copy() (the device's
  // __float2bfloat16_rn, as the master weights reach the working copy). Both must give the CPU's
  // bits exactly.
  std::vector<float> h;
  for (std::uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f807fffu, 0x3f808001u,
                             0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u, 0x7fc00000u, 0x7f800000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    h.push_back(f);
  }
  std::normal_distribution<float> d(0.0f, 3.0f);
  while (h.size() < 4096) h.push_back(d(rng));
  const std::int64_t n = std::int64_t(h.size());
  std::vector<float> want(h);
  round_to_bf16(want.data(), want.size());
  Tensor direct = gpu->zeros(n, 1), master = gpu->zeros_fp32(n, 1), working = gpu->zeros(n, 1);
  gpu->copy_from_host(direct, h);
  gpu->copy_from_host(master, h);
  gpu->copy(working, master);
  for (const Tensor* t : {&direct, &working}) {
    const std::vector<float> got = host(*gpu, *t);
    long wrong = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
      if (std::isnan(want[i])) {  // a NaN stays NaN; its payload is the converter's (0x7fff on a GPU)
        wrong += !std::isnan(got[i]);
        continue;
      }
      std::uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      wrong += a != b;
    }
    EXPECT_EQ(wrong, 0) << (t == &direct ? "copy_from_host" : "copy fp32 -> bf16") << ": bits differ from kernels::to_bf16";
  }
  // bf16 -> fp32 on the device is exact.
  Tensor widened = gpu->zeros_fp32(n, 1);
  gpu->copy(widened, working);
  const std::vector<float> w = host(*gpu, widened);
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!std::isnan(want[i])) {
      EXPECT_EQ(w[i], want[i]) << i;
    }
}

TEST_F(CudaBackendBf16Test, ElementwiseReductionsAndMixedTypes) {
  auto x = pair(37, 129), y = pair(37, 129);
  cpu->add(y.first, x.first);
  gpu->add(y.second, x.second);
  expect_bf16("add bf16 += bf16", y, kBf16Exact);
  auto f = pair_fp32(37, 129);
  cpu->add(y.first, f.first);  // dqkv rows += the fp32 key/value gradient (TeraPipe)
  gpu->add(y.second, f.second);
  expect_bf16("add bf16 += fp32", y, kBf16Exact);
  cpu->add(f.first, x.first);  // a main gradient += a bf16 partial
  gpu->add(f.second, x.second);
  expect_fp32("add fp32 += bf16", f, 0.0);
  const double ss = cpu->sum_squares(x.first);
  EXPECT_NEAR(gpu->sum_squares(x.second), ss, 1e-10 * ss) << "sum_squares of bf16: double sums of the same values";
  EXPECT_TRUE(gpu->all_finite(x.second));
  std::vector<float> h = host(*gpu, x.second);
  h[1000] = std::numeric_limits<float>::infinity();
  gpu->copy_from_host(x.second, h);
  EXPECT_FALSE(gpu->all_finite(x.second)) << "all_finite must read packed bf16";
  auto c = out(37, 129);
  cpu->copy(c.first, y.first);
  gpu->copy(c.second, y.second);
  expect_bf16("copy bf16", c, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});
  auto fl = out(5, 7);
  cpu->fill(fl.first, 0.1f);
  gpu->fill(fl.second, 0.1f);
  expect_bf16("fill 0.1 (rounded)", fl, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});
}

// The 16-byte streaming kernels (counts multiples of 8, aligned tensors; the test above's 37 x 129
// and 50 x 300 shapes take the scalar ones): the scalar kernels' arithmetic, so the scalar
// kernels' bounds (one bf16 step, rarely: a float sum or exp rounded once more than the CPU's
// double), and the fp32 -> bf16 copy bit for bit.
TEST_F(CudaBackendBf16Test, VectorisedStreamingKernels) {
  // 61 rows (not a multiple of the LayerNorm kernels' 8 rows per block), 264 columns (a multiple of
  // 8, not of a warp's 256): idle lanes and an early-leaving warp are exercised.
  const std::int64_t N = 61, C = 264;
  auto y = pair(N, C), x = pair(N, C), bias = pair(1, C);
  cpu->add(y.first, x.first);
  gpu->add(y.second, x.second);
  expect_bf16("add bf16 += bf16 (16-byte)", y, kBf16Exact);
  cpu->add_bias(y.first, bias.first);
  gpu->add_bias(y.second, bias.second);
  expect_bf16("add_bias (16-byte)", y, kBf16Exact);
  auto g = pair(N, C, 3.0f), gy = out(N, C), dy = pair(N, C), gdx = out(N, C);
  cpu->gelu_forward(gy.first, g.first);
  gpu->gelu_forward(gy.second, g.second);
  expect_bf16("gelu_forward (16-byte)", gy, kBf16Exact);
  cpu->gelu_backward(gdx.first, dy.first, g.first);
  gpu->gelu_backward(gdx.second, dy.second, g.second);
  expect_bf16("gelu_backward (16-byte)", gdx, kBf16Exact);
  // LayerNorm, one warp per row (the same formulas, double sums in another order).
  expect_layernorm(N, C, " (warp per row)");
  auto master = pair_fp32(N, C), working = out(N, C);
  cpu->copy(working.first, master.first);
  gpu->copy(working.second, master.second);
  expect_bf16("copy fp32 -> bf16 (16-byte)", working, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});
}

TEST_F(CudaBackendBf16Test, MatmulIntoBf16ActivationsAndFp32MainGrads) {
  const std::int64_t M = 67, N = 45, K = 93;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const std::string tag = " ta " + std::to_string(ta) + " tb " + std::to_string(tb);
      auto a = ta ? pair(K, M) : pair(M, K);
      auto b = tb ? pair(N, K) : pair(K, N);
      // An activation: bf16 C, overwritten, and accumulated (beta = 1 reads and rounds bf16 C).
      for (int acc = 0; acc < 2; ++acc) {
        auto c = acc ? pair(M, N) : out(M, N);
        cpu->matmul(c.first, a.first, ta, b.first, tb, acc);
        gpu->matmul(c.second, a.second, ta, b.second, tb, acc);
        expect_bf16("matmul bf16 C acc " + std::to_string(acc) + tag, c, kBf16Gemm);
      }
      // A weight gradient: fp32 C accumulating (the main grad), fp32 sums on the GPU vs double on
      // the CPU, both rounded to fp32 once: 1e-4 covers K = 93 fp32 accumulations on tensor cores.
      auto g = pair_fp32(M, N);
      cpu->matmul(g.first, a.first, ta, b.first, tb, true);
      gpu->matmul(g.second, a.second, ta, b.second, tb, true);
      expect_fp32("matmul fp32 main-grad C" + tag, g, 1e-4);
    }
  // fp32 operands under bf16 are rounded to bf16 first (into scratch), as the CPU's gemm_operand.
  auto a = pair_fp32(M, K), b = pair_fp32(K, N);
  auto c = out(M, N);
  cpu->matmul(c.first, a.first, false, b.first, false, false);
  gpu->matmul(c.second, a.second, false, b.second, false, false);
  expect_bf16("matmul fp32 operands rounded", c, kBf16Gemm);
}

TEST_F(CudaBackendBf16Test, MatmulWithItsBiasRoundsOnceAsTheCpu) {
  // Backend::matmul_bias: cuBLASLt's BIAS epilogue where the pointers allow it, else an fp32 sum,
  // the bias, one conversion; both round the bf16 output once, after the bias, as the CPU does.
  // Same inputs as the plain GEMM test, so the GEMM tolerance: the bias adds no rounding. Shapes:
  // a Linear layer's (tokens x in) x (out x in)^T with the trainer's sizes in miniature, every
  // transpose, and the operands as the trainer hands them: whole tensors (256-byte aligned), a
  // row slice (2-byte aligned A: the heuristic must be told), a bias at an odd element offset
  // (not 16-byte aligned: the fallback).
  const std::int64_t M = 96, N = 72, K = 64;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const std::string tag = " ta " + std::to_string(ta) + " tb " + std::to_string(tb);
      auto a = ta ? pair(K, M) : pair(M, K);
      auto b = tb ? pair(N, K) : pair(K, N);
      auto bias = pair(1, N);
      auto c = out(M, N);
      cpu->matmul_bias(c.first, a.first, ta, b.first, tb, bias.first);
      gpu->matmul_bias(c.second, a.second, ta, b.second, tb, bias.second);
      expect_bf16("matmul_bias" + tag, c, kBf16Gemm);
    }
  // A from the 3rd row of a bigger tensor: 3 x 64 x 2 = 384 bytes in, aligned to 128 only.
  auto big = pair(M + 3, K);
  const Tensor a_cpu = big.first.row_slice(3, M), a_gpu = big.second.row_slice(3, M);
  auto w = pair(N, K);
  // A bias 1 element into a row: 2-byte aligned.
  auto biases = pair(1, N + 1);
  const Tensor bias_cpu(biases.first.buffer(), 0, 1, N), bias_gpu(biases.second.buffer(), 0, 1, N);
  auto c = out(M, N);
  cpu->matmul_bias(c.first, a_cpu, false, w.first, true, bias_cpu);
  gpu->matmul_bias(c.second, a_gpu, false, w.second, true, bias_gpu);
  expect_bf16("matmul_bias, aligned bias, sliced A", c, kBf16Gemm);
  auto c2 = out(M, N);
  const Tensor odd_cpu(biases.first.buffer(), 1, 1, N), odd_gpu(biases.second.buffer(), 1, 1, N);
  cpu->matmul_bias(c2.first, a_cpu, false, w.first, true, odd_cpu);
  gpu->matmul_bias(c2.second, a_gpu, false, w.second, true, odd_gpu);
  expect_bf16("matmul_bias, bias at an odd offset", c2, kBf16Gemm);
}

TEST_F(CudaBackendBf16Test, FusedGeluGemmsMatchTheCpu) {
  // Backend::matmul_bias_gelu and matmul_dgelu: cuBLASLt's GELU_AUX_BIAS and DGELU epilogues by
  // default, the fp32-scratch fallback with FORESIGHT_GEMM_EPILOGUE=bias (a second backend made
  // with it set). Both take the GeLU (or GeLU') from the unrounded sum and round once, as the CPU
  // does; cuBLASLt's own GeLU formula differs from the kernels' in the last float bits. The GEMM
  // tolerance for all three outputs. An FC1-like (tokens x in) x (in x ffn) and FC2's input
  // gradient (tokens x h) x (ffn x h)^T with the pre-activation of FC1 as the aux.
  const std::int64_t M = 128, H = 64, F = 192;
  for (const char* mode : {"gelu", "bias"}) {
    ::setenv("FORESIGHT_GEMM_EPILOGUE", mode, 1);
    std::unique_ptr<Backend> g = make_backend("cuda", Precision::bf16);
    ::unsetenv("FORESIGHT_GEMM_EPILOGUE");
    // This mode's backend serves as the fixture's GPU backend for the block (pair, out and
    // expect_bf16 use `gpu`); declared first, so it outlives the block's tensors.
    std::swap(gpu, g);
    const std::string tag = std::string(" (FORESIGHT_GEMM_EPILOGUE=") + mode + ")";
    // Inputs at scale 0.35: the pre-activation is about N(0, 1) (64 products of two N(0, 0.35^2)
    // factors). Far below -4, cuBLASLt's float 1 + tanh u may cancel to an exact 0 where the CPU's
    // logistic form keeps a tiny value; at this scale that is a few elements in 10^5.
    auto x = pair(M, H, 0.35f), w1 = pair(H, F, 0.35f), b1 = pair(1, F, 0.35f), dy = pair(M, H), w2 = pair(F, H);
    auto y = out(M, F), pre = out(M, F);
    cpu->matmul_bias_gelu(y.first, pre.first, x.first, false, w1.first, false, b1.first);
    gpu->matmul_bias_gelu(y.second, pre.second, x.second, false, w1.second, false, b1.second);
    expect_bf16("matmul_bias_gelu pre" + tag, pre, kBf16Gemm);
    expect_bf16("matmul_bias_gelu y" + tag, y, kBf16Gemm);
    auto dx = out(M, F);
    cpu->matmul_dgelu(dx.first, dy.first, false, w2.first, true, pre.first);
    gpu->matmul_dgelu(dx.second, dy.second, false, w2.second, true, pre.second);
    expect_bf16("matmul_dgelu" + tag, dx, kBf16Gemm);
    std::swap(gpu, g);
  }
}

TEST_F(CudaBackendBf16Test, BiasLayerNormGelu) {
  const std::int64_t N = 50, C = 300;
  auto y = pair(N, C), bias = pair(1, C);
  cpu->add_bias(y.first, bias.first);
  gpu->add_bias(y.second, bias.second);
  expect_bf16("add_bias", y, kBf16Exact);
  auto db = pair_fp32(1, C);  // a bias gradient goes into the fp32 main grad
  cpu->bias_backward(db.first, y.first);
  gpu->bias_backward(db.second, y.second);
  expect_fp32("bias_backward into fp32", db, 1e-6);

  expect_layernorm(N, C, "");

  auto x = pair(N, C, 3.0f), dy = pair(N, C);
  auto gy = out(N, C), gdx = out(N, C);
  cpu->gelu_forward(gy.first, x.first);
  gpu->gelu_forward(gy.second, x.second);
  expect_bf16("gelu_forward", gy, kBf16Exact);
  cpu->gelu_backward(gdx.first, dy.first, x.first);
  gpu->gelu_backward(gdx.second, dy.second, x.second);
  expect_bf16("gelu_backward", gdx, kBf16Exact);
}

// Plain causal attention (kv = qkv), and a TeraPipe slice whose key/value gradient goes to an fp32
// accumulator (layer.cpp's dkv) while dq is bf16.
TEST_F(CudaBackendBf16Test, AttentionForwardBackward) {
  for (const int context : {0, 32}) {
    AttentionShape s{.batch = 2, .seq = context ? 8 : 24, .heads = 3, .head_dim = 16, .context = context};
    const std::int64_t HD = s.heads * s.head_dim, N = std::int64_t(s.batch) * s.seq, NK = std::int64_t(s.batch) * s.keys();
    auto qkv = pair(N, 3 * HD), kv = context ? pair(NK, 3 * HD) : qkv;
    auto o = out(N, HD), probs = out(std::int64_t(s.batch) * s.heads * s.seq, s.keys());
    cpu->attention_forward(o.first, probs.first, qkv.first, kv.first, s);
    gpu->attention_forward(o.second, probs.second, qkv.second, kv.second, s);
    const std::string tag = context ? " (slice after 24)" : " (causal)";
    expect_bf16("attention_forward out" + tag, o, kBf16Attention);
    expect_bf16("attention_forward probs (bf16)" + tag, probs, kBf16Attention);
    // The backward from the CPU's probs on both sides (copied bit for bit), so that it is checked
    // on its own rather than through the forward's differences.
    gpu->copy_from_host(probs.second, host(*cpu, probs.first));
    auto dout = pair(N, HD);
    auto dqkv = pair(N, 3 * HD);
    auto dkv = context ? pair_fp32(NK, 3 * HD) : dqkv;
    cpu->attention_backward(dqkv.first, dkv.first, dout.first, o.first, probs.first, qkv.first, kv.first, s);
    gpu->attention_backward(dqkv.second, dkv.second, dout.second, o.second, probs.second, qkv.second, kv.second, s);
    expect_bf16("attention_backward dq" + tag, dqkv, kBf16Attention, 0, HD);
    if (context)
      expect_fp32("attention_backward dk, dv (fp32 acc)" + tag, dkv, kBf16Attention.rel);
    else
      expect_bf16("attention_backward dk, dv" + tag, dqkv, kBf16Attention, HD, 3 * HD);
  }
}

// The fused path (kernels/attention.cu through the backend: head dims 64 and 128, lse saved instead
// of probs) against the CPU's unfused bf16 attention, plain causal and a TeraPipe slice (80
// queries after 96 cached positions; neither a multiple of the kernels' 64-row tiles). The two
// round different intermediates to bf16 (normalised probabilities vs the online softmax's
// unnormalised ones, then 1/sum in fp32), so the bound is the attention one, doubled for the
// backward's chained products; a wrong tile, mask or fragment layout gives errors of order 1.
TEST_F(CudaBackendBf16Test, FusedAttentionMatchesTheCpu) {
  for (const int D : {64, 128})
    for (const int context : {0, 176}) {
      AttentionShape s{.batch = 2, .seq = 80, .heads = 2, .head_dim = D, .context = context};
      const std::int64_t HD = s.heads * s.head_dim, N = std::int64_t(s.batch) * s.seq;
      const std::int64_t NK = std::int64_t(s.batch) * s.keys();
      const Backend::AttentionSaved saved = gpu->attention_saved(s);
      ASSERT_TRUE(saved.fp32 && saved.cols == 1 && saved.rows == std::int64_t(s.batch) * s.heads * s.seq)
          << "D " << D << ": the bf16 CUDA backend should save lse (fused attention)";
      const Backend::AttentionSaved cpu_saved = cpu->attention_saved(s);
      EXPECT_EQ(cpu_saved.cols, s.keys()) << "the CPU backend saves probabilities";
      auto qkv = pair(N, 3 * HD), kv = context ? pair(NK, 3 * HD) : qkv;
      auto o = out(N, HD);
      Tensor probs = cpu->zeros(cpu_saved.rows, cpu_saved.cols), lse = gpu->zeros_fp32(saved.rows, 1);
      cpu->attention_forward(o.first, probs, qkv.first, kv.first, s);
      gpu->attention_forward(o.second, lse, qkv.second, kv.second, s);
      const std::string tag = " D" + std::to_string(D) + (context ? " (slice after 96)" : " (causal)");
      expect_bf16("fused attention_forward out" + tag, o, kBf16Attention);
      // The backward from each side's own forward; the GPU's out as the CPU computed it would
      // differ only by the forward's rounding, so both read their own.
      auto dout = pair(N, HD);
      auto dqkv = pair(N, 3 * HD);
      auto dkv = context ? pair_fp32(NK, 3 * HD) : dqkv;
      cpu->attention_backward(dqkv.first, dkv.first, dout.first, o.first, probs, qkv.first, kv.first, s);
      gpu->attention_backward(dqkv.second, dkv.second, dout.second, o.second, lse, qkv.second, kv.second, s);
      const Bf16Tol back{.rel = 2 * kBf16Attention.rel, .ulps = -1, .fraction = 1.0};
      expect_bf16("fused attention_backward dq" + tag, dqkv, back, 0, HD);
      if (context)
        expect_fp32("fused attention_backward dk, dv (fp32 acc)" + tag, dkv, back.rel);
      else
        expect_bf16("fused attention_backward dk, dv" + tag, dqkv, back, HD, 3 * HD);
    }
}

TEST_F(CudaBackendBf16Test, EmbeddingsPositionsAndCrossEntropy) {
  const std::int64_t N = 40, C = 24, V = 30, offset = 10;
  std::vector<std::int32_t> tokens(N);
  std::uniform_int_distribution<int> tok(0, 49);  // some below, some above this rank's rows
  for (auto& t : tokens) t = tok(rng);
  auto table = pair(V, C), x = out(N, C);
  cpu->embedding_forward(x.first, table.first, tokens, offset);
  gpu->embedding_forward(x.second, table.second, tokens, offset);
  expect_bf16("embedding_forward", x, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});
  auto dx = pair(N, C), dtable = pair_fp32(V, C);
  cpu->embedding_backward(dtable.first, dx.first, tokens, offset);
  gpu->embedding_backward(dtable.second, dx.second, tokens, offset);
  expect_fp32("embedding_backward into fp32", dtable, 0.0);  // same float additions in the same order
  auto dtable16 = pair(V, C);
  cpu->embedding_backward(dtable16.first, dx.first, tokens, offset);
  gpu->embedding_backward(dtable16.second, dx.second, tokens, offset);
  expect_bf16("embedding_backward into bf16", dtable16, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});

  const TokenPositions p{.first_row = 5, .period = 16, .offset = 3};
  auto positions = pair(20, C), xp = pair(N, C);
  cpu->add_positions(xp.first, positions.first, p);
  gpu->add_positions(xp.second, positions.second, p);
  expect_bf16("add_positions", xp, kBf16Exact);
  auto dpos = pair_fp32(20, C);
  cpu->positions_backward(dpos.first, dx.first, p);
  gpu->positions_backward(dpos.second, dx.second, p);
  expect_fp32("positions_backward into fp32", dpos, 1e-6);

  auto logits = pair(N, V, 4.0f), row_max = out(N, 1, true), stats = out(N, 2, true);
  cpu->logits_row_max(row_max.first, logits.first);
  gpu->logits_row_max(row_max.second, logits.second);
  expect_fp32("logits_row_max (fp32)", row_max, 0.0);
  cpu->logits_sum_exp_and_target(stats.first, logits.first, row_max.first, tokens, offset);
  gpu->logits_sum_exp_and_target(stats.second, logits.second, row_max.second, tokens, offset);
  expect_fp32("logits_sum_exp_and_target (fp32)", stats, 1e-6);
  const double lc = cpu->cross_entropy_loss_sum(row_max.first, stats.first);
  EXPECT_NEAR(gpu->cross_entropy_loss_sum(row_max.second, stats.second), lc, 1e-6 * std::abs(lc));
  auto dl = out(N, V);
  cpu->cross_entropy_backward(dl.first, logits.first, row_max.first, stats.first, tokens, offset, 0.25f);
  gpu->cross_entropy_backward(dl.second, logits.second, row_max.second, stats.second, tokens, offset, 0.25f);
  expect_bf16("cross_entropy_backward", dl, kBf16Exact);
}

// The MoE combine's ops (trainer/moe.cpp): the weighted row gather rounds the same double sums
// (no fused multiply-add on either side), so it is exact; the row dots sum in another order on the
// GPU (lanes, then a shuffle), so they agree to double rounding.
TEST_F(CudaBackendBf16Test, MoeGatherAndRowDotsMatchTheCpu) {
  const std::int64_t tokens = 37, slots = 29, C = 72;
  const int k = 2;
  std::uniform_int_distribution<int> slot(-1, int(slots) - 1);  // -1: a dropped choice
  std::uniform_real_distribution<double> gate(0.0, 1.0);
  std::vector<std::int32_t> rows(std::size_t(tokens * k));
  std::vector<double> weights(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i] = slot(rng);
    weights[i] = gate(rng);
  }
  for (const bool fp32 : {false, true}) {
    auto src = pair(slots, C, 1.0f, fp32), y = out(tokens, C, fp32);
    cpu->gather_rows_weighted(y.first, src.first, rows, weights, k);
    gpu->gather_rows_weighted(y.second, src.second, rows, weights, k);
    if (fp32) {
      expect_fp32("gather_rows_weighted k=2 (fp32)", y, 0.0);
    } else {
      expect_bf16("gather_rows_weighted k=2", y, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});
    }
  }
  // k = 1 from the tokens into the slots (the combine's backward): unused slots must become 0.
  std::vector<std::int32_t> token_of_slot(std::size_t(slots), -1);
  std::vector<double> w1(std::size_t(slots), 0.0);
  for (std::int64_t s = 0; s < slots; s += 2) {
    token_of_slot[std::size_t(s)] = std::int32_t((s * 7) % tokens);
    w1[std::size_t(s)] = gate(rng);
  }
  auto dy = pair(tokens, C), dslots = out(slots, C);
  cpu->gather_rows_weighted(dslots.first, dy.first, token_of_slot, w1, 1);
  gpu->gather_rows_weighted(dslots.second, dy.second, token_of_slot, w1, 1);
  expect_bf16("gather_rows_weighted k=1 into slots", dslots, Bf16Tol{.rel = 0, .ulps = 0, .fraction = 0});

  auto combined = pair(slots, C);
  std::vector<std::int32_t> token_rows(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) token_rows[i] = std::int32_t(i / k);
  const std::vector<double> want = cpu->row_dots(dy.first, token_rows, combined.first, rows);
  const std::vector<double> got = gpu->row_dots(dy.second, token_rows, combined.second, rows);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (rows[i] < 0) {
      EXPECT_EQ(got[i], 0.0) << "pair " << i << ": a dropped choice";
    }
    // 72 products of bf16 values, exact in double, summed in two orders: a few double ulps.
    EXPECT_NEAR(got[i], want[i], 1e-13 * (1.0 + std::abs(want[i]))) << "pair " << i;
  }
}

TEST_F(CudaBackendBf16Test, AdamWOnFp32MastersThenTheBf16WorkingCopy) {
  auto p = pair_fp32(100, 77), g = pair_fp32(100, 77), m = pair_fp32(100, 77, 0.1f), v = pair_fp32(100, 77, 0.1f);
  for (auto* be : {cpu.get(), gpu.get()}) {  // second moments must be non-negative
    Tensor t = be == cpu.get() ? v.first : v.second;
    std::vector<float> h(std::size_t(t.numel()));
    be->copy_to_host(h, t);
    for (float& x : h) x = x * x;
    be->copy_from_host(t, h);
  }
  const AdamWStep h{.lr = 3e-3f, .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 7};
  cpu->adamw(p.first, g.first, m.first, v.first, h);
  gpu->adamw(p.second, g.second, m.second, v.second, h);
  expect_fp32("adamw master", p, kTol);
  expect_fp32("adamw m", m, kTol);
  expect_fp32("adamw v", v, kTol);
  // The working copy is written from the masters: the same rounding on both sides, except where a
  // master differs in its last fp32 bits across a bf16 half-way point.
  auto w = out(100, 77);
  cpu->copy(w.first, p.first);
  gpu->copy(w.second, p.second);
  expect_bf16("working copy from masters", w, kBf16Exact);
  // A bf16 tensor is no AdamW target: the recipe steps fp32 masters.
  auto wb = pair(100, 77);
  EXPECT_THROW(gpu->adamw(wb.second, g.second, m.second, v.second, h), InternalError);
}

// Whole bf16 runs: the GPU's losses against the CPU's bf16 losses. Every GEMM sums in a different
// order, so bf16 roundings flip here and there and AdamW carries the runs apart slowly; on this
// model bf16 and fp32 runs differ by up to 1.2e-4 (dense) and 3.1e-4 (MoE) relative over 20 steps
// (tests/trainer/bf16.cmake), a broken op by far more (a wrong gradient moves step 2 by > 1e-2).
// Bounds: 1e-3 relative per step (5e-4 for the first, a forward alone). The runs must report
// bf16, differ from the fp32 GPU run (the bf16 path really ran) and peak at the CPU bf16 run's
// memory (which counts 2 bytes per bf16 element, as the GPU must really hold them).
TEST_F(CudaBackendBf16Test, TrainingRunsMatchTheCpuBackend) {
  for (const gpu_test::RunCase& c : gpu_test::run_cases()) {
    const std::string plan = gpu_test::tiny_plan(c.plan, c.model, c.heads);
    const RunResult want = gpu_test::run(plan, "cpu", Precision::bf16), got = gpu_test::run(plan, "cuda", Precision::bf16);
    const RunResult fp32 = gpu_test::run(plan, "cuda", Precision::fp32);
    EXPECT_EQ(got.compute_dtype, "bf16") << c.name;
    ASSERT_EQ(got.losses.size(), want.losses.size()) << c.name;
    ASSERT_EQ(fp32.losses.size(), want.losses.size()) << c.name;
    double fp32_gap = 0;
    for (std::size_t i = 0; i < want.losses.size(); ++i) {
      std::printf("  %-34s step %zu  loss cpu bf16 %.7f  cuda bf16 %.7f  cuda fp32 %.7f\n", c.name, i + 1,
                  want.losses[i], got.losses[i], fp32.losses[i]);
      const double tol = (i == 0 ? 5e-4 : 1e-3) * std::abs(want.losses[i]);
      EXPECT_NEAR(got.losses[i], want.losses[i], tol) << c.name << " step " << i + 1;
      fp32_gap = std::max(fp32_gap, std::abs(got.losses[i] - fp32.losses[i]));
    }
    EXPECT_GT(fp32_gap, 1e-7) << c.name << ": bf16 and fp32 GPU runs agree exactly; bf16 did not run";
    std::printf("  %-34s memory cpu bf16 %.3f MiB  cuda bf16 %.3f MiB  cuda fp32 %.3f MiB\n", c.name, want.memory_MiB,
                got.memory_MiB, fp32.memory_MiB);
    EXPECT_NEAR(got.memory_MiB, want.memory_MiB, 0.01 * want.memory_MiB) << c.name;
    EXPECT_LT(want.losses.back(), want.losses.front()) << c.name << ": the loss should fall";
    EXPECT_LT(got.losses.back(), got.losses.front()) << c.name << ": the loss should fall";
  }
}

}  // namespace
}  // namespace foresight::trainer
