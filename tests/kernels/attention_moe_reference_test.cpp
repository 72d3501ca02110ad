// Causal attention and MoE routing twins: hand-worked cases, a float64 full-matrix formulation of
// attention (mask by -inf over the whole row, then softmax), and finite differences for backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/reference.hpp"
#include "tests/kernels/test_util.hpp"

namespace ref = foresight::kernels::ref;
using foresight::kernels::test::finite_difference;
using foresight::kernels::test::max_rel_error;
using foresight::kernels::test::random_vector;
using foresight::kernels::test::weighted_sum;

TEST(AttentionRef, HandComputedTwoTokens) {
  // T = 2, H = D = 1, scale 1. q = [1, 1], k = [0, ln 3], v = [2, 6].
  // Row 0 sees key 0 only: o = 2, lse = 0. Row 1: scores [0, ln 3] -> weights [1/4, 3/4]:
  // o = 0.5 + 4.5 = 5, lse = ln(1 + 3).
  const std::vector<float> q = {1, 1}, k = {0, std::log(3.0f)}, v = {2, 6};
  std::vector<float> o(2), lse(2);
  ref::attention_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), 1, 2, 1, 1, 1.0f);
  EXPECT_NEAR(o[0], 2.0f, 1e-6);
  EXPECT_NEAR(o[1], 5.0f, 1e-6);
  EXPECT_NEAR(lse[0], 0.0f, 1e-7);
  EXPECT_NEAR(lse[1], std::log(4.0f), 1e-6);
}

TEST(AttentionRef, MatchesFullMatrixFloat64Softmax) {
  const int B = 2, T = 7, H = 3, D = 8;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::size_t n = std::size_t(B) * T * H * D;
  const auto q = random_vector(n, 31), k = random_vector(n, 32), v = random_vector(n, 33);
  std::vector<float> o(n), lse(std::size_t(B) * H * T);
  ref::attention_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), B, T, H, D, scale);
  auto at = [&](int b, int t, int h, int d) { return ((std::size_t(b) * T + t) * H + h) * D + d; };
  std::vector<double> want(n), want_lse(lse.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      // Full (T, T) score matrix with the upper triangle set to -inf, softmax per row.
      std::vector<double> S(T * T);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += double(q[at(b, i, h, d)]) * k[at(b, j, h, d)];
          S[i * T + j] = j > i ? -std::numeric_limits<double>::infinity() : s * scale;
        }
      for (int i = 0; i < T; ++i) {
        double z = 0;
        for (int j = 0; j < T; ++j) z += std::exp(S[i * T + j]);
        want_lse[(b * H + h) * T + i] = std::log(z);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < T; ++j) acc += std::exp(S[i * T + j]) / z * v[at(b, j, h, d)];
          want[at(b, i, h, d)] = acc;
        }
      }
    }
  const double eo = max_rel_error(o, want), el = max_rel_error(lse, want_lse);
  std::printf("attention forward vs float64 full matrix: o %.2e lse %.2e\n", eo, el);
  EXPECT_LT(eo, 1e-6);
  EXPECT_LT(el, 1e-6);
}

TEST(AttentionRef, BackwardMatchesFiniteDifferences) {
  const int B = 1, T = 5, H = 2, D = 4;
  const float scale = 0.5f;
  const std::size_t n = std::size_t(B) * T * H * D;
  auto q = random_vector(n, 41), k = random_vector(n, 42), v = random_vector(n, 43);
  const auto w = random_vector(n, 44);
  std::vector<float> o(n), lse(std::size_t(B) * H * T), dq(n), dk(n), dv(n);
  auto loss = [&] {
    ref::attention_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), B, T, H, D, scale);
    return weighted_sum(o, w);
  };
  loss();
  ref::attention_backward(q.data(), k.data(), v.data(), o.data(), w.data(), lse.data(), dq.data(), dk.data(), dv.data(),
                          B, T, H, D, scale);
  const double eq = max_rel_error(dq, finite_difference(q, loss, 1e-3f));
  const double ek = max_rel_error(dk, finite_difference(k, loss, 1e-3f));
  const double ev = max_rel_error(dv, finite_difference(v, loss, 1e-3f));
  std::printf("attention backward vs finite differences: dq %.2e dk %.2e dv %.2e\n", eq, ek, ev);
  EXPECT_LT(eq, 3e-3);
  EXPECT_LT(ek, 3e-3);
  EXPECT_LT(ev, 3e-3);
}

TEST(MoeRouterRef, CapacityDropsLateAssignmentsChoiceMajor) {
  // N = 4 tokens, E = 2 experts, k = 2, capacity 3. Logits make every token prefer expert 0.
  // First choices (all expert 0) take slots 0, 1, 2 for tokens 0..2 and token 3 is dropped; then
  // second choices (all expert 1) take slots 0..2 for tokens 0..2 and token 3 is dropped again.
  const std::vector<float> logits = {2, 0, 1, 0, 3, 0, 0.5f, 0};
  std::vector<std::int32_t> expert(8), slot(8), counts(2);
  std::vector<float> gate(8);
  ref::moe_router_forward(logits.data(), 4, 2, 2, 3, /*normalize=*/false, expert.data(), gate.data(), slot.data(),
                          counts.data());
  EXPECT_EQ(expert, (std::vector<std::int32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(slot, (std::vector<std::int32_t>{0, 0, 1, 1, 2, 2, -1, -1}));
  EXPECT_EQ(counts, (std::vector<std::int32_t>{3, 3}));
  // Token 0: softmax([2, 0]) = [e^2, 1] / (e^2 + 1) = [0.8807971, 0.1192029].
  EXPECT_NEAR(gate[0], 0.8807971f, 1e-6);
  EXPECT_NEAR(gate[1], 0.1192029f, 1e-6);
  // k = 1, normalized: each gate is 1; ties (token 3 of a [0, 0] row) pick the lower id.
  const std::vector<float> tie = {0, 0};
  std::int32_t e1, s1, c1[2];
  float g1;
  ref::moe_router_forward(tie.data(), 1, 2, 1, 1, true, &e1, &g1, &s1, c1);
  EXPECT_EQ(e1, 0);
  EXPECT_EQ(g1, 1.0f);
  EXPECT_EQ(s1, 0);
}

TEST(MoeRouterRef, BackwardMatchesFiniteDifferences) {
  const int N = 3, E = 6, k = 2;
  for (bool normalize : {false, true}) {
    auto logits = random_vector(N * E, 51, -2, 2);
    const auto w = random_vector(N * k, 52);
    std::vector<std::int32_t> expert(N * k), slot(N * k), counts(E);
    std::vector<float> gate(N * k), dl(N * E);
    auto loss = [&] {
      ref::moe_router_forward(logits.data(), N, E, k, 100, normalize, expert.data(), gate.data(), slot.data(),
                              counts.data());
      return weighted_sum(gate, w);
    };
    loss();
    const auto picked = expert;
    ref::moe_router_backward(logits.data(), expert.data(), w.data(), N, E, k, normalize, dl.data());
    const auto fd = finite_difference(logits, loss, 1e-3f);
    loss();
    ASSERT_EQ(expert, picked) << "the finite-difference step changed the top-k choice";
    const double err = max_rel_error(dl, fd);
    std::printf("router backward (normalize %d) vs finite differences: %.2e\n", int(normalize), err);
    EXPECT_LT(err, 3e-3);
  }
}

TEST(MoePermuteRef, RoundTripAndAdjoints) {
  // N = 3 tokens, k = 2, C = 2, E = 2, capacity 2; both of token 2's choices are dropped.
  const std::vector<std::int32_t> expert = {0, 1, 1, 0, 0, 1}, slot = {0, 0, 1, 1, -1, -1};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> buf(8);
  ref::moe_permute(x.data(), expert.data(), slot.data(), buf.data(), 3, 2, 2, 2, 2);
  // Expert 0: slot 0 = token 0, slot 1 = token 1; expert 1: slot 0 = token 0, slot 1 = token 1.
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  // Token 2 is dropped entirely here (slot -1 on its first choice too); it contributes nothing.
  const std::vector<float> gate = {0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 1.0f};
  std::vector<float> y(6);
  ref::moe_unpermute(buf.data(), expert.data(), slot.data(), gate.data(), y.data(), 3, 2, 2, 2);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4, 0, 0}));
  // Permute is linear: <permute(x), w> = <x, permute_backward(w)>.
  const auto w = random_vector(8, 61);
  std::vector<float> dx(6);
  ref::moe_permute_backward(w.data(), expert.data(), slot.data(), dx.data(), 3, 2, 2, 2);
  EXPECT_NEAR(weighted_sum(buf, w), weighted_sum(x, dx), 1e-6);
}

TEST(MoeUnpermuteRef, BackwardMatchesFiniteDifferences) {
  const int N = 4, k = 2, C = 3, E = 3, cap = 2;
  const std::vector<std::int32_t> expert = {0, 1, 1, 2, 0, 2, 0, 1}, slot = {0, 0, 1, 0, 1, 1, -1, -1};
  auto eo = random_vector(E * cap * C, 71);
  auto gate = random_vector(N * k, 72, 0, 1);
  const auto w = random_vector(N * C, 73);
  std::vector<float> y(N * C), deo(E * cap * C), dg(N * k);
  auto loss = [&] {
    ref::moe_unpermute(eo.data(), expert.data(), slot.data(), gate.data(), y.data(), N, k, C, cap);
    return weighted_sum(y, w);
  };
  ref::moe_unpermute_backward(w.data(), eo.data(), expert.data(), slot.data(), gate.data(), deo.data(), dg.data(), N, k,
                              C, E, cap);
  const double e1 = max_rel_error(deo, finite_difference(eo, loss, 1e-3f));
  const double e2 = max_rel_error(dg, finite_difference(gate, loss, 1e-3f));
  std::printf("unpermute backward vs finite differences: d_expert_out %.2e dgate %.2e\n", e1, e2);
  EXPECT_LT(e1, 1e-3);
  EXPECT_LT(e2, 1e-3);
  EXPECT_EQ(dg[6], 0.0f);  // dropped
}
