// AdamW and the learning-rate schedule against hand-worked values.
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/cpu_backend.hpp"
#include "trainer/optimizer.hpp"

namespace foresight::trainer {
namespace {

TEST(Optimizer, WarmupThenCosine) {
  const OptimizerConfig c{.lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 2, .total_steps = 12};
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 5e-4);  // lr * 1/2
  EXPECT_DOUBLE_EQ(learning_rate(c, 2), 1e-3);
  EXPECT_NEAR(learning_rate(c, 7), 1e-4 + 0.45e-3 * (1 + std::cos(M_PI * 0.5)), 1e-15);  // half-way: 5.5e-4
  EXPECT_NEAR(learning_rate(c, 12), 1e-4, 1e-15);
}

TEST(Optimizer, AdamWFirstStepByHand) {
  auto be = make_cpu_backend();
  Tensor p = be->zeros(1, 2), g = be->zeros(1, 2), m = be->zeros(1, 2), v = be->zeros(1, 2);
  const float p0[] = {1.0f, -2.0f}, g0[] = {0.5f, -4.0f};
  be->copy_from_host(p, p0);
  be->copy_from_host(g, g0);
  // Step 1: m = 0.1 g, v = 0.05 g^2; bias correction gives mhat = g, vhat = g^2, so the update is
  // lr * (sign(g) * |g| / (|g| + eps) + wd * p) (Loshchilov & Hutter 2019, algorithm 2).
  be->adamw(p, g, m, v, AdamWStep{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f,
                                  .grad_scale = 1.0f, .step = 1});
  std::vector<float> out(2);
  be->copy_to_host(out, p);
  EXPECT_NEAR(out[0], 1.0 - 0.1 * (1.0 + 0.01 * 1.0), 1e-6);
  EXPECT_NEAR(out[1], -2.0 - 0.1 * (-1.0 + 0.01 * -2.0), 1e-6);
  be->copy_to_host(out, m);
  EXPECT_NEAR(out[1], 0.1 * -4.0, 1e-6);
  be->copy_to_host(out, v);
  EXPECT_NEAR(out[1], 0.05 * 16.0, 1e-6);
}

}  // namespace
}  // namespace foresight::trainer
