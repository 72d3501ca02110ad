// torchao's rowwise FP8 Linear against torchao's own published benchmark: the roofline's FP8 GEMMs
// and torchao_fp8_casts (cost_models/roofline.cpp) priced for a LayerNorm -> Linear -> Sigmoid
// forward + backward and compared, shape by shape, with the speedups over bf16 that torchao
// measured on an H100.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/scenario.hpp"
#include "cost_models/roofline.hpp"

namespace {
using namespace foresight;
using namespace foresight::cost_models;

// pytorch/ao docs/static/fp8-rowwise-perf.png, added by "[BE/docs] Add fp8 rowwise perf table to
// float8 training readme" (pytorch/ao#2312, commit fdddb2cfa, 2025-06-06), shown in
// torchao/float8/README.md: "Speedup observed vs bfloat16 for LayerNorm -> Linear -> Sigmoid fwd +
// bwd by forward M, K, N, dynamic row-wise scaling, PyTorch version 2.8.0a0+git48807d5", one
// NVIDIA H100. Rows: M, K, then the speedup at N = 1024, 2048, 4096, 8192, 16384, 32768.
struct Row {
  double m, k;
  double speedup[6];
};
constexpr double kN[6] = {1024, 2048, 4096, 8192, 16384, 32768};
const Row kTable[] = {
    {1024, 1024, {0.42, 0.42, 0.50, 0.51, 0.56, 0.56}},
    {1024, 2048, {0.40, 0.38, 0.42, 0.50, 0.50, 0.56}},
    {1024, 4096, {0.48, 0.43, 0.46, 0.53, 0.57, 0.60}},
    {1024, 8192, {0.45, 0.48, 0.54, 0.62, 0.60, 0.62}},
    {1024, 16384, {0.46, 0.48, 0.54, 0.60, 0.60, 0.61}},
    {1024, 32768, {0.45, 0.50, 0.55, 0.60, 0.62, 0.65}},
    {2048, 1024, {0.43, 0.43, 0.48, 0.55, 0.62, 0.65}},
    {2048, 2048, {0.38, 0.45, 0.58, 0.65, 0.72, 0.75}},
    {2048, 4096, {0.43, 0.50, 0.68, 0.78, 0.81, 0.82}},
    {2048, 8192, {0.46, 0.58, 0.73, 0.82, 0.87, 0.89}},
    {2048, 16384, {0.48, 0.62, 0.75, 0.83, 0.84, 0.85}},
    {2048, 32768, {0.50, 0.64, 0.75, 0.84, 0.83, 0.99}},
    {4096, 1024, {0.45, 0.47, 0.57, 0.66, 0.72, 0.76}},
    {4096, 2048, {0.43, 0.53, 0.70, 0.83, 0.90, 0.91}},
    {4096, 4096, {0.44, 0.64, 0.84, 1.01, 1.01, 1.04}},
    {4096, 8192, {0.53, 0.72, 0.91, 1.01, 1.07, 1.13}},
    {4096, 16384, {0.53, 0.74, 0.92, 1.05, 1.10, 1.18}},
    {4096, 32768, {0.54, 0.75, 0.93, 1.02, 1.17, 1.18}},
    {8192, 1024, {0.48, 0.52, 0.65, 0.77, 0.83, 0.84}},
    {8192, 2048, {0.45, 0.64, 0.82, 1.01, 1.03, 1.06}},
    {8192, 4096, {0.52, 0.76, 1.00, 1.13, 1.17, 1.19}},
    {8192, 8192, {0.59, 0.85, 1.05, 1.20, 1.31, 1.41}},
    {8192, 16384, {0.58, 0.82, 1.03, 1.22, 1.37, 1.40}},
    {8192, 32768, {0.59, 0.82, 1.04, 1.30, 1.36, 1.46}},
    {16384, 1024, {0.48, 0.58, 0.73, 0.86, 0.85, 0.89}},
    {16384, 2048, {0.51, 0.70, 0.90, 1.05, 1.07, 1.15}},
    {16384, 4096, {0.57, 0.79, 1.02, 1.20, 1.26, 1.40}},
    {16384, 8192, {0.61, 0.87, 1.08, 1.33, 1.39, 1.49}},
    {16384, 16384, {0.59, 0.83, 1.07, 1.34, 1.42, 1.55}},
    {16384, 32768, {0.60, 0.85, 1.16, 1.35, 1.48, 1.72}},
    {32768, 1024, {0.51, 0.62, 0.77, 0.87, 0.88, 0.94}},
    {32768, 2048, {0.54, 0.73, 0.91, 1.08, 1.14, 1.27}},
    {32768, 4096, {0.59, 0.81, 1.04, 1.28, 1.35, 1.49}},
    {32768, 8192, {0.63, 0.87, 1.11, 1.41, 1.50, 1.62}},
    {32768, 16384, {0.60, 0.83, 1.16, 1.39, 1.49, 1.73}},
    {32768, 32768, {0.63, 0.93, 1.16, 1.48, 1.70, 1.52}},
};

/// The benchmark's forward + backward, priced: LayerNorm forward (read and write the (M, K) input,
/// 4 bytes per element in bf16) and backward (read x and dy, write dx, and the weight-gradient
/// reduction re-reading both: 10, two kernels), Sigmoid forward (4 per (M, N) element) and
/// backward (read y and dy, write dx: 6), the Linear's three GEMMs; under FP8 the forward GEMM
/// with fast accumulation, the two gradient GEMMs without, and torchao's casts compiled.
double step_seconds(const RooflineCompute& bf16, const RooflineCompute* fp8, Fp8Scaling scaling, double M, double K,
                    double N) {
  const double elementwise = bf16.memory_bound(Bytes(4 * M * K), 1).value() + bf16.memory_bound(Bytes(4 * M * N), 1).value() +
                             bf16.memory_bound(Bytes(6 * M * N), 1).value() + bf16.memory_bound(Bytes(10 * M * K), 2).value();
  if (!fp8) return elementwise + (bf16.gemm({M, N, K, 1}) + bf16.gemm({M, K, N, 1}) + bf16.gemm({N, K, M, 1})).value();
  const Fp8CastTimes casts = torchao_fp8_casts(bf16, scaling, /*compile=*/true, /*fp8_param_gather=*/false,
                                               {.inputs = M * K, .grads = M * N, .weights = N * K});
  return elementwise + (fp8->gemm({M, N, K, 1}) + fp8->gemm_grad({M, K, N, 1}) + fp8->gemm_grad({N, K, M, 1})).value() +
         (casts.forward + casts.backward).value();
}

/// log(model speedup / published speedup) over the training-size shapes (M >= 8192 tokens; below
/// it the benchmark's kernels last microseconds and launch and host overheads rule, which a
/// training step of these sizes does not see).
std::vector<double> log_errors(Fp8Scaling scaling) {
  const GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  const RooflineParams p = roofline_params_for(g, AttentionImpl::flash2);
  const RooflineCompute bf16(g, Dtype::bf16, p), fp8(g, Dtype::fp8, p);
  std::vector<double> e;
  for (const Row& r : kTable) {
    if (r.m < 8192) continue;
    for (int j = 0; j < 6; ++j) {
      const double model = step_seconds(bf16, nullptr, scaling, r.m, r.k, kN[j]) /
                           step_seconds(bf16, &fp8, scaling, r.m, r.k, kN[j]);
      e.push_back(std::log(model / r.speedup[j]));
    }
  }
  return e;
}

double median_abs(std::vector<double> e) {
  for (double& x : e) x = std::fabs(x);
  std::nth_element(e.begin(), e.begin() + e.size() / 2, e.end());
  return e[e.size() / 2];
}
double mean(const std::vector<double>& e) {
  double s = 0;
  for (double x : e) s += x;
  return s / double(e.size());
}
}  // namespace

TEST(TorchaoRowwise, ReproducesTorchaosRowwiseSpeedupTable) {
  // 108 shapes with M >= 8192: the model's rowwise speedup over bf16 within a median 10% of the
  // published one and unbiased within 5% (fitted: median 6.9%, mean +2.4%).
  const std::vector<double> e = log_errors(Fp8Scaling::rowwise);
  ASSERT_EQ(e.size(), 108u);
  EXPECT_LT(median_abs(e), std::log(1.10));
  EXPECT_LT(std::fabs(mean(e)), std::log(1.05));
}

TEST(TorchaoRowwise, TensorwiseCastsAloneWouldBeFarTooOptimistic) {
  // The same Linear priced with only the casts tensorwise scaling needs: the published rowwise
  // speedups are then overestimated by more than 15% on average, the gap rowwise's own costs
  // (the gradient GEMMs' rescaling and per-input traffic) close.
  const std::vector<double> e = log_errors(Fp8Scaling::tensorwise);
  EXPECT_GT(mean(e), std::log(1.15));
}

TEST(TorchaoRowwise, SmallOutputWidthIsSlowerThanBf16) {
  // Where N is small the inputs outweigh the GEMM and FP8 loses: torchao measured 0.63x at
  // M 32768, K 8192, N 1024 and 1.41x at N 8192; the model must agree on which side of 1 each is.
  const GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  const RooflineParams p = roofline_params_for(g, AttentionImpl::flash2);
  const RooflineCompute bf16(g, Dtype::bf16, p), fp8(g, Dtype::fp8, p);
  auto speedup = [&](double n) {
    return step_seconds(bf16, nullptr, Fp8Scaling::rowwise, 32768, 8192, n) /
           step_seconds(bf16, &fp8, Fp8Scaling::rowwise, 32768, 8192, n);
  };
  EXPECT_LT(speedup(1024), 1.0);
  EXPECT_GT(speedup(8192), 1.2);
}
