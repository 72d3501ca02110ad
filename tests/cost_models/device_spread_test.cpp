// The slowest device of a synchronous step (cost_models/device_spread.hpp), against tabulated
// expected maxima of standard normal samples and hand computations of the factor.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/scenario.hpp"
#include "cost_models/device_spread.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/roofline.hpp"

using namespace foresight;
using namespace foresight::cost_models;

TEST(DeviceSpread, ExpectedMaximumOfNormalsMatchesTheTables) {
  // Closed forms for n = 2 and 3 (1/sqrt(pi), 3/(2 sqrt(pi))); the rest from Harter's 1961 table
  // of expected normal order statistics (Biometrika 48, 151-165), as Tippett (1925) first gave them.
  EXPECT_EQ(expected_max_of_normals(1), 0.0);
  EXPECT_NEAR(expected_max_of_normals(2), 1.0 / std::sqrt(std::numbers::pi), 1e-7);
  EXPECT_NEAR(expected_max_of_normals(3), 1.5 / std::sqrt(std::numbers::pi), 1e-7);
  EXPECT_NEAR(expected_max_of_normals(5), 1.16296, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(8), 1.42360, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(10), 1.53875, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(100), 2.50759, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(1000), 3.24144, 1e-5);
  // It keeps growing like sqrt(2 ln n) far beyond the tables: 16k GPUs lie between 3.8 and 4.0.
  const double big = expected_max_of_normals(16384);
  EXPECT_GT(big, expected_max_of_normals(4096));
  EXPECT_GT(big, 3.8);
  EXPECT_LT(big, std::sqrt(2.0 * std::log(16384.0)));
}

TEST(DeviceSpread, FactorIsOnePlusSpreadTimesTheExpectedMaximum) {
  GpuSpec g;
  g.name = "test";
  EXPECT_EQ(slowest_device(g, 512).factor, 1.0);  // no spread in the file: the median device
  g.kernels.device_spread_cv = SourcedValue{0.02, "test"};
  EXPECT_EQ(slowest_device(g, 1).factor, 1.0);  // one GPU waits for nobody
  EXPECT_NEAR(slowest_device(g, 8).factor, 1.0 + 0.02 * 1.42360, 1e-6);
  EXPECT_NEAR(slowest_device(g, 1000).factor, 1.0 + 0.02 * 3.24144, 1e-6);
  EXPECT_NE(slowest_device(g, 8).describe().find("slowest of 8 GPUs"), std::string::npos);
}

TEST(DeviceSpread, ThePlansGpusSlowItsGemmsNotItsMemoryTraffic) {
  // The same cluster and model with 1 and 8 GPUs (dp 8): a large GEMM on the 8-GPU plan takes
  // 1 + 0.0148 x 1.42360 of its 1-GPU time (the A100 file's spread), a streaming kernel the same.
  Experiment e = load_experiment(resolve_scenario("experiments", "korthikanti-table4-no-recompute"));
  ASSERT_TRUE(e.cluster.gpu.kernels.device_spread_cv.has_value());
  const double cv = e.cluster.gpu.kernels.device_spread_cv->value;
  EXPECT_NEAR(cv, 0.08 / (4 * 1.34898), 1e-4);  // Sinha et al.'s 8% whisker span of a normal spread
  PlanSpec one = e.plan;
  one.tp = 1, one.dp = 1, one.pp = 1;
  PlanSpec eight = one;
  eight.dp = 8;
  const ExecutionModel x1 = resolve_execution(e.cluster, e.training, one);
  const ExecutionModel x8 = resolve_execution(e.cluster, e.training, eight);
  EXPECT_EQ(x1.slowest.factor, 1.0);
  EXPECT_EQ(x8.slowest.devices, 8);
  const GemmShape big{8192, 8192, 8192, 1};
  // The launch (the GPU file's 2.555 us, host-side queueing) does not scale with the clock.
  const double launch = e.cluster.gpu.kernels.launch_overhead_us.value * 1e-6;
  const double ratio = (x8.roofline().gemm(big).value() - launch) / (x1.roofline().gemm(big).value() - launch);
  EXPECT_NEAR(ratio, 1.0 + cv * 1.42360, 1e-7);
  EXPECT_DOUBLE_EQ(x8.roofline().memory_bound(Bytes(1e9)).value(), x1.roofline().memory_bound(Bytes(1e9)).value());
}

TEST(SustainedClock, ALongRunPacesGemmsAtTheSoakedClockAShortOneAtBurst) {
  // The H100 SXM file's sustained_clock_scale is its profile's own soak: a bf16 8192^3 GEMM at
  // 685.4 TFLOP/s after 30 s against 731.6 cold (scenarios/profiles/h100-sxm.json). A training run
  // (the default) runs GEMMs and attention that much slower than the burst figures; a run declared
  // short (training.burst_clocks, the shared bench's 12-step runs) keeps them; streaming kernels
  // do not change. The A100 files have no soak: no change there.
  Experiment e = load_experiment(resolve_scenario("experiments", "gpt3-1.3b-local-h100"));
  ASSERT_TRUE(e.training.burst_clocks);
  ASSERT_TRUE(e.cluster.gpu.kernels.sustained_clock_scale.has_value());
  EXPECT_NEAR(e.cluster.gpu.kernels.sustained_clock_scale->value, 685.3785 / 731.5563, 1e-4);
  const ExecutionModel burst = resolve_execution(e);
  TrainingSpec long_run = e.training;
  long_run.burst_clocks = false;
  const ExecutionModel sustained = resolve_execution(e.cluster, long_run, e.plan);
  EXPECT_EQ(burst.slowest.sustained, 1.0);
  EXPECT_EQ(sustained.slowest.sustained, e.cluster.gpu.kernels.sustained_clock_scale->value);
  const GemmShape big{8192, 8192, 8192, 1};
  const double launch = burst.roofline().params().launch_overhead.value();
  // (Within 0.1%: the profile's GEMM timings carry their own launch share.)
  EXPECT_NEAR((sustained.roofline().gemm(big).value() - launch) / (burst.roofline().gemm(big).value() - launch),
              731.5563 / 685.3785, 1e-3);
  EXPECT_NEAR((sustained.roofline().flash_forward(64, 2048, 2048, 128, true, 0).value() - launch) /
                  (burst.roofline().flash_forward(64, 2048, 2048, 128, true, 0).value() - launch),
              731.5563 / 685.3785, 1e-3);
  EXPECT_DOUBLE_EQ(sustained.roofline().memory_bound(Bytes(1e9)).value(), burst.roofline().memory_bound(Bytes(1e9)).value());
  EXPECT_NE(sustained.slowest.describe().find("sustained clock"), std::string::npos);

  const Experiment a = load_experiment(resolve_scenario("experiments", "korthikanti-table4-no-recompute"));
  EXPECT_FALSE(a.cluster.gpu.kernels.sustained_clock_scale.has_value());
  EXPECT_EQ(resolve_execution(a).slowest.sustained, 1.0);
}
