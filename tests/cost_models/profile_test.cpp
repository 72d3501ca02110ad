// Calibration-profile compute source: interpolation between measured GEMM shapes, the
// extrapolation flag, the copy bandwidth, and refusal of malformed profiles.
#include <gtest/gtest.h>

#include "core/scenario.hpp"
#include "cost_models/profile.hpp"
#include "cost_models/roofline.hpp"

using namespace foresight;
using namespace foresight::cost_models;

namespace {
// Two measured shapes at known efficiencies of a 1000 TFLOP/s device: 4096^3 at 0.8 and 8192^3 at 0.6.
const char* kProfile = R"({
  "device": {"name": "test-gpu", "peak_tflops": 1000},
  "measurements": [
    {"kernel": "gemm", "m": 4096, "n": 4096, "k": 4096, "time_s": 1.7179869184e-4},
    {"kernel": "gemm", "m": 8192, "n": 8192, "k": 8192, "time_s": 1.8325193796266667e-3},
    {"kernel": "copy", "bytes": 2e9, "time_s": 1e-3},
    {"kernel": "copy", "bytes": 2e6, "time_s": 2e-6},
    {"kernel": "attention", "flops": 1e12, "time_s": 2.5e-3}
  ],
  "fitted": {"launch_overhead_us": 3}
})";
}  // namespace

TEST(Profile, MeasuredShapeReturnsItsOwnTime) {
  const CalibrationProfile p = parse_profile(kProfile, "test.json");
  const GemmEstimate e = profile_gemm(p, 4096, 4096, 4096, 1);
  EXPECT_NEAR(e.efficiency, 0.8, 1e-9);
  EXPECT_NEAR(e.time_s, 1.7179869184e-4, 1e-15);
  EXPECT_FALSE(e.extrapolated);
}

TEST(Profile, BetweenShapesIsWeightedByLogDistance) {
  // 5793 ~ 4096 * sqrt(2): the log-midpoint, equally far from both: efficiency (0.8 + 0.6) / 2.
  const CalibrationProfile p = parse_profile(kProfile, "test.json");
  const double mid = std::exp((std::log(4096.0) + std::log(8192.0)) / 2);
  const GemmEstimate e = profile_gemm(p, mid, mid, mid, 1);
  EXPECT_NEAR(e.efficiency, 0.7, 1e-9);
  EXPECT_FALSE(e.extrapolated);
}

TEST(Profile, OutsideTheMeasuredRangeIsFlagged) {
  const CalibrationProfile p = parse_profile(kProfile, "test.json");
  EXPECT_TRUE(profile_gemm(p, 65536, 8192, 8192, 1).extrapolated);
  EXPECT_TRUE(profile_gemm(p, 1024, 4096, 4096, 1).extrapolated);
}

TEST(Profile, DrivesTheRooflineModel) {
  GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  RooflineCompute rc(g, Dtype::bf16);
  rc.use_profile(parse_profile(kProfile, "test.json"));
  EXPECT_NEAR(rc.gemm({4096, 4096, 4096, 1}).value(), 1.7179869184e-4, 1e-15);
  // Copy: the largest measured copy, 2e9 B in 1 ms = 2000 GB/s; 1 GB then takes 0.5 ms + 3 us.
  EXPECT_NEAR(rc.memory_bound(Bytes(1e9)).value(), 0.5e-3 + 3e-6, 1e-12);
  EXPECT_NEAR(rc.params().flash_efficiency, 0.4, 1e-12);  // 1e12 / 2.5e-3 / 1e15
  EXPECT_EQ(rc.extrapolated_queries(), 0);
  rc.gemm({100000, 100000, 100000, 1});
  EXPECT_EQ(rc.extrapolated_queries(), 1);
}

TEST(Profile, MalformedProfilesAreRefused) {
  auto refused = [](const std::string& text, const std::string& field) {
    try {
      parse_profile(text, "bad.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
  };
  refused("[1,2", "");
  refused(R"({"measurements": []})", "device");
  refused(R"({"device": {"peak_tflops": -1}, "measurements": []})", "device.peak_tflops");
  refused(R"({"device": {"peak_tflops": 1000}, "measurements": [{"kernel": "gemm", "m": 8, "n": 8, "time_s": 1}]})",
          "measurements[0].k");
  // Faster than the device's peak: a broken measurement.
  refused(R"({"device": {"peak_tflops": 1}, "measurements": [{"kernel": "gemm", "m": 8192, "n": 8192, "k": 8192, "time_s": 1e-3}]})",
          "measurements[0].time_s");
  // Found by fuzzing (tests/data/fuzz-regressions/profile_json): these escaped as nlohmann exceptions.
  refused(R"({"device": {"name": 5, "peak_tflops": 1}, "measurements": []})", "device.name");
  refused(R"({"device": {"peak_tflops": 1e999}, "measurements": []})", "");
}
