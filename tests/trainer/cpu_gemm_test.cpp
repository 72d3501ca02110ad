// The CPU backend's GEMM (trainer/cpu_backend.cpp) against a plain float64 triple loop: every
// element is the sum over k, in increasing k, of exact float products in double, rounded once to
// float. That contract is what keeps every tensor-parallel layout within rounding of the
// single-rank run, so the backend must meet it bit for bit in every layout, whatever its blocking:
// shapes here span several column panels (with a partial last one), several blocks of k, and k
// counts that leave a remainder after the backend's unrolling.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "trainer/cpu_backend.hpp"

namespace foresight::trainer {
namespace {

/// Fills t with floats of mixed sign and magnitude, so that the order of the additions shows in
/// the rounded sums.
void fill(Tensor t, std::mt19937& rng) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = std::ldexp(mantissa(rng), exponent(rng));
}

/// c = op(a) op(b) (+ c when accumulate) (+ bias), as the contract states it.
std::vector<float> reference(const Tensor& a, bool ta, const Tensor& b, bool tb, const std::vector<float>& c0,
                             bool accumulate, const Tensor* bias) {
  const std::int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols();
  const std::int64_t N = tb ? b.rows() : b.cols();
  std::vector<float> c(static_cast<std::size_t>(M * N));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double x = ta ? a.data()[k * a.cols() + i] : a.data()[i * a.cols() + k];
        const double y = tb ? b.data()[j * b.cols() + k] : b.data()[k * b.cols() + j];
        sum += x * y;
      }
      float v = accumulate ? float(double(c0[i * N + j]) + sum) : float(sum);
      if (bias) v += bias->data()[j];
      c[i * N + j] = v;
    }
  return c;
}

TEST(CpuGemm, EveryLayoutSumsExactProductsInIncreasingKAsAFloat64Loop) {
  auto be = make_cpu_backend();
  std::mt19937 rng(7);
  const std::int64_t M = 5, N = 300;  // 300 columns: two full panels of 128 and a partial one
  for (const std::int64_t K : {71, 603})  // one block of k, and three (256, 256, 91)
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const bool accumulate : {false, true}) {
        SCOPED_TRACE(testing::Message() << "K " << K << " ta " << ta << " tb " << tb << " accumulate " << accumulate);
        Tensor a = ta ? be->zeros(K, M) : be->zeros(M, K);
        Tensor b = tb ? be->zeros(N, K) : be->zeros(K, N);
        Tensor c = be->zeros(M, N);
        fill(a, rng);
        fill(b, rng);
        fill(c, rng);
        const std::vector<float> c0(c.data(), c.data() + c.numel());
        const std::vector<float> want = reference(a, ta, b, tb, c0, accumulate, nullptr);
        be->matmul(c, a, ta, b, tb, accumulate);
        for (std::int64_t e = 0; e < c.numel(); ++e)
          ASSERT_EQ(c.data()[e], want[e]) << "element (" << e / N << ", " << e % N << ")";
      }
}

TEST(CpuGemm, AdditionsRunInIncreasingKAcrossTheUnrollingTheBlocksAndThePanels) {
  // Each column's products are 1, +2^60 and -2^60 (A all ones) at k positions p < q < r, in one of
  // two arrangements: (1, +L, -L) or (+L, 1, -L). Summed in increasing k the 1 is absorbed by 2^60
  // and the element is 0; any order that adds the two large terms before the 1 (k descending,
  // groups of k summed apart and then added, pairwise sums) gives 1. The positions straddle the
  // backend's four-k groups and their remainder (K = 11: two groups and three), and with K = 603
  // its blocks of 256 k as well (the last block 91: a remainder again), in every column panel.
  auto be = make_cpu_backend();
  struct Case {
    std::int64_t K;
    std::vector<std::array<int, 3>> positions;
  };
  const Case cases[] = {
      {11, {{0, 4, 5}, {1, 5, 7}, {3, 4, 6}, {2, 8, 9}, {0, 1, 2}, {6, 9, 10}, {3, 7, 8}}},
      {603, {{0, 4, 5}, {254, 255, 256}, {255, 256, 600}, {100, 300, 301}, {511, 512, 513}, {3, 257, 513}, {600, 601, 602}}},
  };
  const std::int64_t M = 2, N = 300;
  const float L = std::ldexp(1.0f, 60);
  for (const Case& cs : cases)
    for (const bool tb : {false, true}) {
      const std::int64_t K = cs.K;
      SCOPED_TRACE(testing::Message() << "K " << K << " tb " << tb);
      Tensor a = be->zeros(M, K), c = be->zeros(M, N);
      Tensor b = tb ? be->zeros(N, K) : be->zeros(K, N);
      for (std::int64_t e = 0; e < a.numel(); ++e) a.data()[e] = 1.0f;
      const std::size_t n = cs.positions.size();
      for (std::int64_t j = 0; j < N; ++j) {
        const std::array<int, 3>& pqr = cs.positions[j % n];
        const bool one_first = (j / n) % 2 == 0;
        const float v[3] = {one_first ? 1.0f : L, one_first ? L : 1.0f, -L};
        for (int t = 0; t < 3; ++t) (tb ? b.data()[j * K + pqr[t]] : b.data()[pqr[t] * N + j]) = v[t];
      }
      be->matmul(c, a, false, b, tb, false);
      for (std::int64_t e = 0; e < c.numel(); ++e)
        ASSERT_EQ(c.data()[e], 0.0f) << "element (" << e / N << ", " << e % N << ")";
    }
}

TEST(CpuGemm, AnOutputOverlappingAnInputIsRefused) {
  auto be = make_cpu_backend();
  Tensor a = be->zeros(4, 4), b = be->zeros(4, 4);
  EXPECT_THROW(be->matmul(a, a, false, b, false, false), InternalError);
  EXPECT_THROW(be->matmul(b, a, false, b, true, true), InternalError);
}

TEST(CpuGemm, ALinearLayersBiasJoinsAfterTheRoundedSumUnderFp32) {
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  const std::int64_t M = 3, K = 6, N = 130;  // K under the unrolling's four plus two; a partial panel
  Tensor a = be->zeros(M, K), b = be->zeros(N, K), bias = be->zeros(1, N), c = be->zeros(M, N);
  fill(a, rng);
  fill(b, rng);
  fill(bias, rng);
  const std::vector<float> want = reference(a, false, b, true, {}, false, &bias);
  be->matmul_bias(c, a, false, b, true, bias);
  for (std::int64_t e = 0; e < c.numel(); ++e) ASSERT_EQ(c.data()[e], want[e]) << "element " << e;
}

}  // namespace
}  // namespace foresight::trainer
