// Calibration-profile compute source: interpolation between measured GEMM shapes, the
// extrapolation flag, the copy bandwidth, and refusal of malformed profiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/scenario.hpp"
#include "cost_models/profile.hpp"
#include "cost_models/roofline.hpp"

using namespace foresight;
using namespace foresight::cost_models;

namespace {
// Two measured shapes at known efficiencies of a 1000 TFLOP/s device: 4096^3 at 0.8 and 8192^3 at
// 0.6 (cuBLASLt, bf16); an fp8 GEMM at 0.2; attention by two implementations: FlashAttention at
// 0.4 and this project's own kernel at 0.01.
const char* kProfile = R"({
  "device": {"name": "test-gpu", "peak_tflops": 1000},
  "measurements": [
    {"kernel": "gemm", "impl": "cublaslt", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "time_s": 1.7179869184e-4},
    {"kernel": "gemm", "impl": "cublaslt", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "time_s": 1.8325193796266667e-3},
    {"kernel": "gemm", "impl": "cublaslt", "dtype": "fp8", "m": 4096, "n": 4096, "k": 4096, "time_s": 6.871947673600e-4},
    {"kernel": "copy", "bytes": 2e9, "time_s": 1e-3},
    {"kernel": "copy", "bytes": 2e6, "time_s": 2e-6},
    {"kernel": "attention", "impl": "flash", "dtype": "bf16", "flops": 1e12, "time_s": 2.5e-3},
    {"kernel": "attention", "impl": "foresight-cuda-core", "dtype": "bf16", "flops": 1e12, "time_s": 1e-1}
  ],
  "fitted": {"launch_overhead_us": 3}
})";

// What an execution running cuBLASLt GEMMs and `attention` in `dtype` takes from kProfile.
CalibrationProfile selected(const char* attention = "flash", Dtype dtype = Dtype::bf16) {
  return select_profile(parse_profile(kProfile, "test.json"), "cublaslt", dtype, attention, Dtype::bf16);
}
}  // namespace

TEST(Profile, MeasuredShapeReturnsItsOwnTime) {
  const CalibrationProfile p = selected();
  const GemmEstimate e = profile_gemm(p, 4096, 4096, 4096, 1);
  EXPECT_NEAR(e.efficiency, 0.8, 1e-9);
  EXPECT_NEAR(e.time_s, 1.7179869184e-4, 1e-15);
  EXPECT_FALSE(e.extrapolated);
}

TEST(Profile, BetweenShapesIsWeightedByLogDistance) {
  // 5793 ~ 4096 * sqrt(2): the log-midpoint, equally far from both: efficiency (0.8 + 0.6) / 2.
  const CalibrationProfile p = selected();
  const double mid = std::exp((std::log(4096.0) + std::log(8192.0)) / 2);
  const GemmEstimate e = profile_gemm(p, mid, mid, mid, 1);
  EXPECT_NEAR(e.efficiency, 0.7, 1e-9);
  EXPECT_FALSE(e.extrapolated);
}

TEST(Profile, SamplesAsNearAsTheFourthAllCountWhateverTheirOrder) {
  // A 2x2x2 sweep (m, n, k in {1024, 4096}) with efficiencies 0.1 .. 0.8, and a query at the
  // log-centre of the cube: all eight corners are equally near, so all eight count with equal
  // weight, giving their mean 0.45 (a 4-nearest rule would pick four of the eight by listing order).
  // Reversing the listing must not change the answer.
  auto profile = [](bool reversed) {
    CalibrationProfile p;
    p.peak_tflops = 1000;
    int i = 0;
    for (double m : {1024.0, 4096.0})
      for (double n : {1024.0, 4096.0})
        for (double k : {1024.0, 4096.0}) {
          const double eff = 0.1 * ++i;
          p.gemm.push_back({m, n, k, 1, 2 * m * n * k / (eff * 1e15)});
        }
    if (reversed) std::reverse(p.gemm.begin(), p.gemm.end());
    return p;
  };
  for (bool reversed : {false, true}) {
    const GemmEstimate e = profile_gemm(profile(reversed), 2048, 2048, 2048, 1);
    EXPECT_NEAR(e.efficiency, 0.45, 1e-12) << reversed;
  }
  // Nearer one corner (m 1024, n 1024, k 1024 at 0.1): distances in log2 units 0.5^2 * 3 for it,
  // 1.5^2 + 0.5^2 * 2 for its three neighbours at 0.2, 0.3, 0.5, so the weights are 1/0.75 and
  // 1/2.75 (x3): (0.1/0.75 + (0.2+0.3+0.5)/2.75) / (1/0.75 + 3/2.75).
  const double c = std::exp2(10.5);
  const double want = (0.1 / 0.75 + 1.0 / 2.75) / (1 / 0.75 + 3 / 2.75);
  EXPECT_NEAR(profile_gemm(profile(false), c, c, c, 1).efficiency, want, 1e-12);
  EXPECT_NEAR(profile_gemm(profile(true), c, c, c, 1).efficiency, want, 1e-12);
}

TEST(Profile, OutsideTheMeasuredRangeIsFlagged) {
  const CalibrationProfile p = selected();
  EXPECT_TRUE(profile_gemm(p, 65536, 8192, 8192, 1).extrapolated);
  EXPECT_TRUE(profile_gemm(p, 1024, 4096, 4096, 1).extrapolated);
}

TEST(Profile, DrivesTheRooflineModel) {
  GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  RooflineCompute rc(g, Dtype::bf16);
  rc.use_profile(selected());
  EXPECT_NEAR(rc.gemm({4096, 4096, 4096, 1}).value(), 1.7179869184e-4, 1e-15);
  // Copy: the largest measured copy, 2e9 B in 1 ms = 2000 GB/s; 1 GB then takes 0.5 ms + 3 us.
  EXPECT_NEAR(rc.memory_bound(Bytes(1e9)).value(), 0.5e-3 + 3e-6, 1e-12);
  EXPECT_NEAR(rc.params().flash_efficiency, 0.4, 1e-12);  // 1e12 / 2.5e-3 / 1e15
  EXPECT_EQ(rc.extrapolated_queries(), 0);
  rc.gemm({100000, 100000, 100000, 1});
  EXPECT_EQ(rc.extrapolated_queries(), 1);
}

TEST(Profile, Fp8GemmsFollowTheMeasuredBf16ShapeTimesTheirSpeedup) {
  // An FP8 execution whose profile has no FP8 GEMM of this implementation: each GEMM takes the
  // bf16 profile's time at its shape divided by the FP8 roofline's speedup there, the peak ratio
  // r = 1978.9 / 989.4 times (1 + 256 / K) / (1 + 256 r / K) (the H100 file's K term of 256, which
  // the FP8 mainloop covers r times as fast). 4096^3 is measured at 1.7179869184e-4 s in bf16.
  GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  RooflineCompute rc(g, Dtype::fp8, roofline_params_for(g, AttentionImpl::flash, nullptr));
  const double plain = rc.gemm({4096, 4096, 4096, 1}).value();  // the FP8 roofline alone
  rc.anchor_to_bf16_profile(selected());
  const double r = 1978.9 / 989.4;
  const double speedup = r * (1 + 256.0 / 4096) / (1 + 256.0 * r / 4096);
  EXPECT_NEAR(rc.gemm({4096, 4096, 4096, 1}).value(), 1.7179869184e-4 / speedup, 1e-12);
  EXPECT_NE(rc.gemm({4096, 4096, 4096, 1}).value(), plain);
  // The gradient GEMMs keep their split-accumulation slowdown (1.15 in the H100 file).
  EXPECT_NEAR(rc.gemm_grad({4096, 4096, 4096, 1}).value(), 1.15 * 1.7179869184e-4 / speedup, 1e-12);
  // A bf16 execution ignores the anchor (it has the profile itself).
  RooflineCompute bf16(g, Dtype::bf16, roofline_params_for(g, AttentionImpl::flash, nullptr));
  bf16.anchor_to_bf16_profile(selected());
  EXPECT_NEAR(bf16.gemm({4096, 4096, 4096, 1}).value(), RooflineCompute(g, Dtype::bf16, roofline_params_for(g, AttentionImpl::flash, nullptr)).gemm({4096, 4096, 4096, 1}).value(), 1e-15);
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
  refused(R"({"device": {"peak_tflops": 1000}, "measurements": [{"kernel": "gemm", "impl": "cublaslt", "dtype": "bf16", "m": 8, "n": 8, "time_s": 1}]})",
          "measurements[0].k");
  // Faster than the device's peak: a broken measurement.
  refused(R"({"device": {"peak_tflops": 1}, "measurements": [{"kernel": "gemm", "impl": "cublaslt", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "time_s": 1e-3}]})",
          "measurements[0].time_s");
  // Attention faster than the peak, and a fitted efficiency above 1: refused, not used.
  refused(R"({"device": {"peak_tflops": 1}, "measurements": [{"kernel": "attention", "impl": "flash", "dtype": "bf16", "flops": 2e12, "time_s": 1}]})",
          "measurements[0].time_s");
  refused(R"({"device": {"peak_tflops": 1}, "measurements": [], "fitted": {"gemm_efficiency": 1.057}})",
          "fitted.gemm_efficiency");
  // A GEMM or attention entry must say which implementation measured it, and in which dtype.
  refused(R"({"device": {"peak_tflops": 1000}, "measurements": [{"kernel": "gemm", "dtype": "bf16", "m": 8, "n": 8, "k": 8, "time_s": 1}]})",
          "measurements[0].impl");
  refused(R"({"device": {"peak_tflops": 1000}, "measurements": [{"kernel": "attention", "impl": "flash", "dtype": "bf17", "flops": 1, "time_s": 1}]})",
          "measurements[0].dtype");
  // Found by fuzzing (tests/data/fuzz-regressions/profile_json): these escaped as nlohmann exceptions.
  refused(R"({"device": {"name": 5, "peak_tflops": 1}, "measurements": []})", "device.name");
  refused(R"({"device": {"peak_tflops": 1e999}, "measurements": []})", "");
}

TEST(Profile, AttentionOfAnotherImplementationChangesNothing) {
  // FlashAttention measured at 0.4; the project's own kernel at 0.01 (1e12 FLOP in 0.1 s on a
  // 1000 TFLOP/s device). Each execution sees only its own; an implementation the profile never
  // measured (cuDNN) sees none, so the GPU file's figure stays.
  EXPECT_NEAR(*selected("flash").attention_efficiency, 0.4, 1e-12);
  EXPECT_NEAR(*selected("foresight-cuda-core").attention_efficiency, 0.01, 1e-12);
  EXPECT_FALSE(selected("cudnn").attention_efficiency.has_value());
  GpuSpec g = load_gpu(resolve_scenario("gpus", "h100-sxm"));
  RooflineCompute rc(g, Dtype::bf16, roofline_params_for(g, AttentionImpl::cudnn));
  const double before = rc.params().flash_efficiency;
  rc.use_profile(selected("cudnn"));
  EXPECT_EQ(rc.params().flash_efficiency, before);
}

TEST(Profile, GemmsOfAnotherDtypeAreNotUsed) {
  // An fp8 execution takes the fp8 GEMM only (4096^3 at 0.2), never the bf16 ones.
  const CalibrationProfile fp8 = selected("flash", Dtype::fp8);
  ASSERT_EQ(fp8.gemm.size(), 1u);
  EXPECT_NEAR(profile_gemm(fp8, 4096, 4096, 4096, 1).efficiency, 0.2, 1e-9);
  // fp16 was never measured: the roofline prices fp16 GEMMs from the GPU file.
  EXPECT_TRUE(selected("flash", Dtype::fp16).gemm.empty());
  EXPECT_EQ(selected("flash", Dtype::bf16).gemm.size(), 2u);
}
