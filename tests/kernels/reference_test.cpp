// The dense CPU reference twins against hand-computed values, float64 naive formulas and central
// finite differences (backward passes). Each tolerance test prints the error it measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace k = foresight::kernels;
namespace ref = foresight::kernels::ref;
using k::test::finite_difference;
using k::test::max_rel_error;
using k::test::random_vector;
using k::test::weighted_sum;

TEST(GemmRef, HandComputed2x2) {
  const std::vector<float> A = {1, 2, 3, 4}, B = {5, 6, 7, 8};
  std::vector<float> C(4);
  ref::gemm(A.data(), B.data(), C.data(), {.m = 2, .n = 2, .k = 2}, nullptr, k::Epilogue::none);
  EXPECT_EQ(C, (std::vector<float>{19, 22, 43, 50}));
  const std::vector<float> bias = {1, -1};
  ref::gemm(A.data(), B.data(), C.data(), {.m = 2, .n = 2, .k = 2}, bias.data(), k::Epilogue::bias);
  EXPECT_EQ(C, (std::vector<float>{20, 21, 44, 49}));
  // B stored transposed ((n, k) = [[5, 7], [6, 8]]) gives the same product.
  const std::vector<float> Bt = {5, 7, 6, 8};
  ref::gemm(A.data(), Bt.data(), C.data(), {.m = 2, .n = 2, .k = 2, .trans_b = true}, nullptr, k::Epilogue::none);
  EXPECT_EQ(C, (std::vector<float>{19, 22, 43, 50}));
  // alpha = 2, beta = 1 on top of C = [19, 22, 43, 50]: 3 x C.
  ref::gemm(A.data(), B.data(), C.data(), {.m = 2, .n = 2, .k = 2}, nullptr, k::Epilogue::none, 2.0f, 1.0f);
  EXPECT_EQ(C, (std::vector<float>{57, 66, 129, 150}));
  EXPECT_THROW(ref::gemm(A.data(), B.data(), C.data(), {.m = 2, .n = 2, .k = 2}, bias.data(), k::Epilogue::bias, 1, 1),
               std::invalid_argument);
}

// Views into wider buffers (the trainer's slices of a packed qkv, a parameter inside a flat
// buffer): leading dimensions and batch strides, by hand.
TEST(GemmRef, LeadingDimensionsAndStridesReadAndWriteViews) {
  // A = rows of a 2x3 buffer, columns 0-1: [[1, 2], [4, 5]]; B = [[5, 6], [7, 8]] inside a 2x4
  // buffer at columns 1-2; C written into columns 0-1 of a 2x3 buffer, column 2 left alone.
  const std::vector<float> A = {1, 2, 3, 4, 5, 6}, B = {0, 5, 6, 0, 0, 7, 8, 0};
  std::vector<float> C = {-1, -1, -1, -1, -1, -1};
  ref::gemm(A.data(), B.data() + 1, C.data(), {.m = 2, .n = 2, .k = 2, .lda = 3, .ldb = 4, .ldc = 3}, nullptr,
            k::Epilogue::none);
  EXPECT_EQ(C, (std::vector<float>{19, 22, -1, 55, 64, -1}));
  // Two products 3 elements apart of A (1x1 times 1x1): stride_a 3, stride_b 1, stride_c 2.
  std::vector<float> D(4, 0.0f);
  ref::gemm(A.data(), B.data() + 1, D.data(),
            {.m = 1, .n = 1, .k = 1, .batch = 2, .stride_a = 3, .stride_b = 1, .stride_c = 2}, nullptr,
            k::Epilogue::none);
  EXPECT_EQ(D, (std::vector<float>{1 * 5, 0, 4 * 6, 0}));
  // A leading dimension below the stored width is refused.
  EXPECT_THROW(ref::gemm(A.data(), B.data(), C.data(), {.m = 2, .n = 2, .k = 2, .lda = 1}, nullptr, k::Epilogue::none),
               std::invalid_argument);
}

TEST(GemmRef, TransposesAndBatchesMatchANaiveDoubleProduct) {
  const int m = 5, n = 7, kk = 3, batch = 2;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const auto A = random_vector(std::size_t(batch) * m * kk, 1 + ta), B = random_vector(std::size_t(batch) * kk * n, 3 + tb);
      const auto bias = random_vector(n, 5);
      std::vector<float> C(std::size_t(batch) * m * n);
      ref::gemm(A.data(), B.data(), C.data(), {.m = m, .n = n, .k = kk, .trans_a = ta == 1, .trans_b = tb == 1, .batch = batch},
                bias.data(), k::Epilogue::bias_gelu);
      std::vector<double> want(C.size());
      for (int b = 0; b < batch; ++b)
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = bias[j];
            for (int p = 0; p < kk; ++p) {
              const double a = ta ? A[b * m * kk + p * m + i] : A[b * m * kk + i * kk + p];
              const double bb = tb ? B[b * kk * n + j * kk + p] : B[b * kk * n + p * n + j];
              s += a * bb;
            }
            // GeLU tanh form written out independently of kernels::gelu.
            want[(b * m + i) * n + j] = 0.5 * s * (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
          }
      const double err = max_rel_error(C, want);
      EXPECT_LT(err, 1e-6) << "trans_a " << ta << " trans_b " << tb;
    }
}

TEST(GemmRef, BiasGradSumsColumnsAndAccumulates) {
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};  // (2, 3)
  std::vector<float> db = {10, 0, 0};
  ref::bias_grad(dy.data(), db.data(), 2, 3);
  EXPECT_EQ(db, (std::vector<float>{15, 7, 9}));
}

TEST(GeluRef, KnownValues) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) at x = 1: tanh(0.8335392) = 0.6823837.
  EXPECT_NEAR(k::gelu(1.0f), 0.8411920f, 1e-6);
  EXPECT_NEAR(k::gelu(-1.0f), -0.1588080f, 1e-6);
  EXPECT_EQ(k::gelu(0.0f), 0.0f);
  EXPECT_NEAR(k::gelu(6.0f), 6.0f, 1e-6);  // tanh saturates: identity for large x
  EXPECT_NEAR(k::gelu_grad(0.0f), 0.5f, 1e-7);
}

TEST(GeluRef, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(64, 7, -4, 4);
  const auto w = random_vector(64, 8);
  std::vector<float> y(64), dx(64);
  ref::gelu_backward(x.data(), w.data(), dx.data(), 64);
  const auto fd = finite_difference(x, [&] {
    ref::gelu_forward(x.data(), y.data(), 64);
    return weighted_sum(y, w);
  }, 1e-3f);
  const double err = max_rel_error(dx, fd);
  std::printf("gelu backward vs finite differences: max rel error %.2e\n", err);
  EXPECT_LT(err, 2e-3);
}

TEST(ResidualRef, Adds) {
  const std::vector<float> a = {1, 2.5f}, b = {-1, 0.25f};
  std::vector<float> o(2);
  ref::residual_add(a.data(), b.data(), o.data(), 2);
  EXPECT_EQ(o, (std::vector<float>{0, 2.75f}));
}

TEST(LayerNormRef, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25, rstd 1/sqrt(1.25) = 0.8944272.
  const std::vector<float> x = {1, 2, 3, 4}, g = {1, 1, 2, 1}, b = {0, 0, 0, 1};
  std::vector<float> y(4), mean(1), rstd(1);
  ref::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), 1, 4, 0.0f);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(rstd[0], 0.8944272f, 1e-6);
  EXPECT_NEAR(y[0], -1.3416408f, 1e-6);
  EXPECT_NEAR(y[1], -0.4472136f, 1e-6);
  EXPECT_NEAR(y[2], 2 * 0.4472136f, 1e-6);
  EXPECT_NEAR(y[3], 1.3416408f + 1, 1e-6);
}

TEST(LayerNormRef, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 16;
  auto x = random_vector(N * C, 11, -2, 2);
  auto g = random_vector(C, 12, 0.5, 1.5);
  auto b = random_vector(C, 13);
  const auto w = random_vector(N * C, 14);
  std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dg(C, 0.0f), db(C, 0.0f);
  auto loss = [&] {
    ref::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    return weighted_sum(y, w);
  };
  loss();
  ref::layernorm_backward(w.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), N, C);
  const double ex = max_rel_error(dx, finite_difference(x, loss, 1e-3f));
  const double eg = max_rel_error(dg, finite_difference(g, loss, 1e-3f));
  const double eb = max_rel_error(db, finite_difference(b, loss, 1e-3f));
  std::printf("layernorm backward vs finite differences: dx %.2e dgamma %.2e dbeta %.2e\n", ex, eg, eb);
  EXPECT_LT(ex, 5e-3);
  EXPECT_LT(eg, 2e-3);
  EXPECT_LT(eb, 2e-3);
  // dgamma, dbeta accumulate: a second call doubles them.
  const auto dg1 = dg;
  ref::layernorm_backward(w.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), N, C);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dg[c], 2 * dg1[c], 1e-5);
}

TEST(CrossEntropyRef, HandComputed) {
  // logits [0, ln 3]: softmax [1/4, 3/4]; target 0: loss ln 4; grad (p - onehot) * dloss.
  const std::vector<float> logits = {0.0f, std::log(3.0f), 5.0f, 5.0f};
  const std::vector<std::int32_t> t = {0, -1};  // second row ignored
  std::vector<float> loss(2), dl(4);
  ref::softmax_cross_entropy(logits.data(), t.data(), loss.data(), dl.data(), 2, 2, 0.5f);
  EXPECT_NEAR(loss[0], std::log(4.0f), 1e-6);
  EXPECT_NEAR(dl[0], (0.25f - 1) * 0.5f, 1e-7);
  EXPECT_NEAR(dl[1], 0.75f * 0.5f, 1e-7);
  EXPECT_EQ(loss[1], 0.0f);
  EXPECT_EQ(dl[2], 0.0f);
  EXPECT_EQ(dl[3], 0.0f);
}

TEST(CrossEntropyRef, StableForLargeLogitsAndGradientMatchesFiniteDifferences) {
  const std::vector<float> big = {1000.0f, 1000.0f};
  const std::int32_t t0 = 1;
  float l = 0;
  ref::softmax_cross_entropy(big.data(), &t0, &l, nullptr, 1, 2, 1.0f);
  EXPECT_NEAR(l, std::log(2.0f), 1e-6);  // no overflow: the max is subtracted
  const int N = 4, V = 9;
  auto x = random_vector(N * V, 21, -3, 3);
  const std::vector<std::int32_t> tg = {0, 8, 3, 3};
  std::vector<float> losses(N), dl(N * V);
  ref::softmax_cross_entropy(x.data(), tg.data(), losses.data(), dl.data(), N, V, 1.0f / N);
  const auto fd = finite_difference(x, [&] {
    ref::softmax_cross_entropy(x.data(), tg.data(), losses.data(), nullptr, N, V, 1.0f);
    double s = 0;
    for (float v : losses) s += v;
    return s / N;
  }, 1e-3f);
  const double err = max_rel_error(dl, fd);
  std::printf("cross-entropy gradient vs finite differences: max rel error %.2e\n", err);
  EXPECT_LT(err, 2e-3);
}

TEST(EmbeddingRef, ForwardAndBackwardByHand) {
  const std::vector<float> wte = {1, 2, 3, 4, 5, 6};  // V = 3, C = 2
  const std::vector<float> wpe = {10, 20, 30, 40};    // T = 2
  const std::vector<std::int32_t> tok = {2, 0, 2, 2};  // B = 2, T = 2
  std::vector<float> out(8);
  ref::embedding_forward(tok.data(), wte.data(), wpe.data(), out.data(), 2, 2, 2, 3);
  EXPECT_EQ(out, (std::vector<float>{15, 26, 31, 42, 15, 26, 35, 46}));
  const std::vector<float> dout = {1, 1, 2, 2, 3, 3, 4, 4};
  std::vector<float> dwte(6, 0.0f), dwpe(4, 0.0f);
  ref::embedding_backward(tok.data(), dout.data(), dwte.data(), dwpe.data(), 2, 2, 2, 3);
  EXPECT_EQ(dwte, (std::vector<float>{2, 2, 0, 0, 8, 8}));  // token 2 at three positions: 1 + 3 + 4
  EXPECT_EQ(dwpe, (std::vector<float>{4, 4, 6, 6}));
  const std::vector<std::int32_t> bad = {3};
  EXPECT_THROW(ref::embedding_forward(bad.data(), wte.data(), nullptr, out.data(), 1, 1, 2, 3), std::out_of_range);
}

TEST(AdamWRef, OneStepByHand) {
  // p = 1, g = 0.5, step 1: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25, update = 0.5 / (0.5 + eps);
  // p = 1 - lr wd 1 - lr update = 1 - 0.001 - 0.1 = 0.899 (PyTorch AdamW's arithmetic).
  std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  std::vector<k::bf16> pb(1);
  const k::AdamWConfig c{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  ref::adamw(p.data(), g.data(), m.data(), v.data(), pb.data(), 1, c, 1);
  // The betas are floats: 1 - 0.9f = 0.10000002 and 1 - 0.999f = 0.00099998713, which moves m and v
  // by 2.4e-7 and 1.3e-5 relative from the decimal hand values.
  EXPECT_NEAR(m[0], 0.05f, 0.05 * 1e-6);
  EXPECT_NEAR(v[0], 0.00025f, 0.00025 * 2e-5);
  EXPECT_NEAR(p[0], 0.899f, 1e-6);
  EXPECT_EQ(pb[0].bits, k::to_bf16(p[0]).bits);
  // Step 2 with the same gradient: m = 0.095, v = 0.00049975; mhat = 0.5, vhat = 0.25 again.
  ref::adamw(p.data(), g.data(), m.data(), v.data(), nullptr, 1, c, 2);
  EXPECT_NEAR(p[0], 0.899f - 0.1f * 0.01f * 0.899f - 0.1f, 1e-6);
  // grad_scale multiplies the gradient: 1.0 with scale 0.5 is the same as 0.5.
  std::vector<float> p2 = {1.0f}, g2 = {1.0f}, m2 = {0.0f}, v2 = {0.0f};
  k::AdamWConfig c2 = c;
  c2.grad_scale = 0.5f;
  ref::adamw(p2.data(), g2.data(), m2.data(), v2.data(), nullptr, 1, c2, 1);
  EXPECT_NEAR(p2[0], 0.899f, 1e-6);
  EXPECT_NEAR(m2[0], 0.05f, 0.05 * 1e-6);
}
