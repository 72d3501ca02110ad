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
