// The MoE FFN on one rank (expert-parallel group of 1): routing, capacity and combine against a
// hand computation, and the gradients of sum(y * r) + aux_scale * L_aux against central finite
// differences (float64 sums over the fp32 forward).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/trainer/host_copy.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/moe.hpp"

namespace foresight::trainer {
namespace {

Tensor from(Backend& be, const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  Tensor t = be.zeros(rows, cols);
  be.copy_from_host(t, v);
  return t;
}

using test::host;

TEST(Moe, RoutingCapacityAndCombineByHand) {
  auto be = make_cpu_backend();
  auto self = make_self_communicator();
  // 4 tokens, hidden 2, 2 experts, top-1, capacity ceil(1.0 * 4 * 1 / 2) = 2. Router = identity,
  // so logits = the inputs: tokens 0-2 prefer expert 0 (token 2 finds it full: dropped), token 3
  // expert 1. Experts: ffn 1, w_fc1 = 0, b_fc1 = 1, so fc1 = 1 and GeLU(1) = 0.8411920 (tanh form);
  // w_fc2 = [2, 3] (expert 0) and [5, 7] (expert 1), b_fc2 = 0.
  const MoeDims d{.tokens = 4, .hidden = 2, .ffn = 1, .experts = 2, .top_k = 1, .ep = 1, .capacity_factor = 1.0};
  ASSERT_EQ(d.capacity(), 2);
  MoeTensors w;
  w.router = from(*be, {1, 0, 0, 1}, 2, 2);
  for (int e = 0; e < 2; ++e) {
    w.w_fc1.push_back(from(*be, {0, 0}, 2, 1));
    w.b_fc1.push_back(from(*be, {1}, 1, 1));
    w.w_fc2.push_back(from(*be, e == 0 ? std::vector<float>{2, 3} : std::vector<float>{5, 7}, 1, 2));
    w.b_fc2.push_back(from(*be, {0, 0}, 1, 2));
  }
  MoeActivations a;
  const Tensor y = moe_forward(*be, *self, d, w, from(*be, {1, 0, 2, 0, 3, 0, 0, 1}, 4, 2), a);
  EXPECT_EQ(a.expert, (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(a.slot, (std::vector<int>{0, 1, -1, 0}));
  const double gelu1 = 0.8411919906082768;
  auto p = [](double a0, double a1) { return std::exp(a0) / (std::exp(a0) + std::exp(a1)); };
  const double g[4] = {p(1, 0), p(2, 0), p(3, 0), p(1, 0)};  // token 3: p(logit 1 vs 0) for expert 1
  const std::vector<float> yh = host(*be, y);
  const double want[8] = {g[0] * gelu1 * 2, g[0] * gelu1 * 3, g[1] * gelu1 * 2, g[1] * gelu1 * 3,
                          0, 0,  // dropped: the residual alone carries it
                          g[3] * gelu1 * 5, g[3] * gelu1 * 7};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(yh[std::size_t(i)], want[i], 1e-6) << i;
  // L_aux = 0.01 * E * sum_e f_e P_e with f = (3/4, 1/4) and P_e the mean probabilities.
  const double P0 = (p(1, 0) + p(2, 0) + p(3, 0) + p(0, 1)) / 4, P1 = 1 - P0;
  EXPECT_NEAR(a.aux_loss, 0.01 * 2 * (0.75 * P0 + 0.25 * P1), 1e-12);
}

// The backend ops the combine runs on (trainer/moe.cpp), by hand: a weighted gather of k rows per
// output (negative rows skipped), summed in double and rounded once, and row dot products.
TEST(Moe, WeightedRowGatherAndRowDotsByHand) {
  auto be = make_cpu_backend();
  const Tensor src = from(*be, {1, 2, 3, 4, 5, 6}, 3, 2);  // rows (1,2), (3,4), (5,6)
  Tensor y = be->zeros(2, 2);
  be->fill(y, 99.0f);  // overwritten, not accumulated into
  // Row 0: 0.5 * (5,6) + 2 * (1,2) = (4.5, 7); row 1: both choices dropped, so 0.
  be->gather_rows_weighted(y, src, std::vector<std::int32_t>{2, 0, -1, -1}, std::vector<double>{0.5, 2, 7, 7}, 2);
  EXPECT_EQ(host(*be, y), (std::vector<float>{4.5f, 7.0f, 0.0f, 0.0f}));
  // dots: (1,2).(5,6) = 17, (3,4).(3,4) = 25, and a pair with a dropped row gives 0.
  EXPECT_EQ(be->row_dots(src, std::vector<std::int32_t>{0, 1, 2}, src, std::vector<std::int32_t>{2, 1, -1}),
            (std::vector<double>{17.0, 25.0, 0.0}));

  // bf16 (steps of 2^-7 above 1): 1 + 3 x 2^-9 = 1.005859375 lies above the tie 1.00390625, so
  // the one rounding gives 1.0078125. Rounding after each term would keep 1 + 2^-9 at 1.0 three
  // times over and return 1.0.
  auto bf = make_cpu_backend(Precision::bf16);
  const Tensor s16 = from(*bf, {1.0f, 1.0f / 512}, 2, 1);
  Tensor y16 = bf->zeros(1, 1);
  bf->gather_rows_weighted(y16, s16, std::vector<std::int32_t>{0, 1, 1, 1}, std::vector<double>{1, 1, 1, 1}, 4);
  EXPECT_EQ(host(*bf, y16)[0], 1.0078125f);

  // Bad arguments fail loudly: a row beyond the source, and index lists of the wrong length.
  EXPECT_ANY_THROW(be->gather_rows_weighted(y, src, std::vector<std::int32_t>{3, 0, 0, 0}, std::vector<double>(4, 1.0), 2));
  EXPECT_ANY_THROW(be->gather_rows_weighted(y, src, std::vector<std::int32_t>{0, 0}, std::vector<double>(2, 1.0), 2));
  EXPECT_ANY_THROW(be->row_dots(src, std::vector<std::int32_t>{0}, src, std::vector<std::int32_t>{0, 1}));
}

TEST(Moe, GradientsMatchFiniteDifferences) {
  auto be = make_cpu_backend();
  auto self = make_self_communicator();
  const MoeDims d{.tokens = 6, .hidden = 4, .ffn = 5, .experts = 3, .top_k = 2, .ep = 1, .capacity_factor = 3.0};
  const double aux_scale = 20.0;  // large enough that the load-balancing term shows
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  auto rnd = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  std::vector<std::vector<float>> hv = {rnd(4 * 3)};  // router, then per expert w_fc1 b_fc1 w_fc2 b_fc2
  for (int e = 0; e < 3; ++e) {
    hv.push_back(rnd(4 * 5));
    hv.push_back(rnd(5));
    hv.push_back(rnd(5 * 4));
    hv.push_back(rnd(4));
  }
  std::vector<float> x = rnd(6 * 4);
  const std::vector<float> r = rnd(6 * 4);
  const std::pair<int, int> shape[4] = {{4, 5}, {1, 5}, {5, 4}, {1, 4}};
  auto tensors = [&](bool zero) {
    MoeTensors t;
    t.router = zero ? be->zeros(4, 3) : from(*be, hv[0], 4, 3);
    for (int e = 0; e < 3; ++e) {
      std::vector<Tensor>* parts[4] = {&t.w_fc1, &t.b_fc1, &t.w_fc2, &t.b_fc2};
      for (int k = 0; k < 4; ++k)
        parts[k]->push_back(zero ? be->zeros(shape[k].first, shape[k].second)
                                 : from(*be, hv[std::size_t(1 + 4 * e + k)], shape[k].first, shape[k].second));
    }
    return t;
  };
  auto loss = [&] {
    MoeActivations a;
    const std::vector<float> y = host(*be, moe_forward(*be, *self, d, tensors(false), from(*be, x, 6, 4), a));
    double s = aux_scale * a.aux_loss;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * r[i];
    return s;
  };
  MoeActivations a;
  const MoeTensors w = tensors(false), g = tensors(true);
  moe_forward(*be, *self, d, w, from(*be, x, 6, 4), a);
  const std::vector<float> dx = host(*be, moe_backward(*be, *self, d, w, g, a, from(*be, r, 6, 4), aux_scale));
  auto check = [&](std::vector<float>& param, const std::vector<float>& grad, const char* what) {
    const float h = 1e-2f;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < param.size(); ++i) {
      const float keep = param[i];
      param[i] = keep + h;
      const double up = loss();
      param[i] = keep - h;
      const double down = loss();
      param[i] = keep;
      const double fd = (up - down) / (2.0 * h);
      diff = std::max(diff, std::abs(fd - grad[i]));
      scale = std::max(scale, std::abs(fd));
    }
    std::printf("moe %-8s: max error / max |grad| = %.3e\n", what, diff / scale);
    EXPECT_LT(diff / scale, 2e-3) << what;
  };
  check(hv[0], host(*be, g.router), "router");
  check(hv[1], host(*be, g.w_fc1[0]), "w_fc1.0");
  check(hv[7], host(*be, g.w_fc2[1]), "w_fc2.1");
  check(hv[12], host(*be, g.b_fc2[2]), "b_fc2.2");
  check(x, dx, "input");
}

}  // namespace
}  // namespace foresight::trainer
