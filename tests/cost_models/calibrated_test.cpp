// Calibrated parameters: scope matching, what each knob does to an execution, and the file's
// rules (bad input names file, field, value and rule).
#include "cost_models/calibrated.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::cost_models {
namespace {

CalibratedParameter param(const char* name, CalibratedKnob knob, double value, CalibratedScope scope) {
  CalibratedParameter p;
  p.name = name;
  p.knob = knob;
  const bool scale = knob == CalibratedKnob::gemm_efficiency_scale || knob == CalibratedKnob::attention_efficiency_scale;
  p.unit.assign(1, scale ? '1' : 's');
  p.lo = 0;
  p.hi = 10;
  p.value = value;
  p.scope = std::move(scope);
  return p;
}

std::string write_temp(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("foresight_calibration_test_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST(Calibrated, ScopeSelectsFrameworkGpuAndZeroStage) {
  const ClusterSpec a100 = load_cluster(resolve_scenario("clusters", "selene"));
  const ClusterSpec h100 = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  const TrainingSpec t{.global_batch = 8};
  PlanSpec ds;
  ds.framework = Framework::deepspeed;
  PlanSpec fsdp;
  fsdp.framework = Framework::pytorch;
  fsdp.zero = 3;
  CalibrationSet set;
  set.parameters = {param("slot", CalibratedKnob::slot_overhead, 0.01, {.frameworks = {Framework::deepspeed}, .compute_capability = 8.0}),
                    param("unit", CalibratedKnob::unit_overhead, 0.002, {.frameworks = {Framework::pytorch}, .min_zero = 3}),
                    param("attn", CalibratedKnob::attention_efficiency_scale, 0.5,
                          {.frameworks = {Framework::pytorch}, .compute_capability = 9.0, .min_zero = 3})};
  const CalibratedTerms on_a100 = calibrated_terms(set, a100, t, ds);
  EXPECT_DOUBLE_EQ(on_a100.slot_overhead.value(), 0.01);
  EXPECT_EQ(on_a100.applied, std::vector<std::string>{"slot"});
  EXPECT_DOUBLE_EQ(calibrated_terms(set, h100, t, ds).slot_overhead.value(), 0.0);  // another GPU
  const CalibratedTerms f = calibrated_terms(set, h100, t, fsdp);
  EXPECT_DOUBLE_EQ(f.unit_overhead.value(), 0.002);
  EXPECT_DOUBLE_EQ(f.attention_efficiency_scale, 0.5);
  fsdp.zero = 1;  // DDP-style, not sharded parameters
  EXPECT_TRUE(calibrated_terms(set, h100, t, fsdp).applied.empty());
  // An upper bound on the ZeRO stage: stages 0-1 in, 2-3 out.
  set.parameters = {param("upto1", CalibratedKnob::slot_overhead, 0.01, {.frameworks = {Framework::deepspeed}, .max_zero = 1})};
  for (int z = 0; z <= 3; ++z) {
    ds.zero = z;
    EXPECT_EQ(calibrated_terms(set, a100, t, ds).applied.size(), z <= 1 ? 1u : 0u) << "zero " << z;
  }
  EXPECT_EQ(set.parameters[0].scope.describe(), "framework deepspeed, zero <= 1");
}

// A network scope: the socket-transport parameter reaches Ethernet clusters only, and its
// effect is the CommModel's (the execution only carries the scale).
TEST(Calibrated, NetworkScopeSelectsEthernetClusters) {
  const ClusterSpec selene = load_cluster(resolve_scenario("clusters", "selene"));
  const ClusterSpec p3 = load_cluster(resolve_scenario("clusters", "aws-p3-16xlarge"));
  const TrainingSpec t{.global_batch = 8};
  PlanSpec p;
  CalibrationSet set;
  CalibratedParameter s = param("socket", CalibratedKnob::socket_one_gpu_efficiency_scale, 0.8,
                                {.network = NetworkTopology::ethernet});
  s.unit = "1";
  set.parameters = {s};
  EXPECT_DOUBLE_EQ(calibrated_terms(set, p3, t, p).socket_one_gpu_efficiency_scale, 0.8);
  EXPECT_DOUBLE_EQ(calibrated_terms(set, selene, t, p).socket_one_gpu_efficiency_scale, 1.0);
  EXPECT_TRUE(calibrated_terms(set, selene, t, p).applied.empty());
  EXPECT_EQ(set.parameters[0].scope.describe(), "network ethernet");
}

TEST(Calibrated, ScalesDivideGemmTimesAndTheAttentionEfficiency) {
  // Half the GEMM throughput doubles a GEMM's time without its launch; the attention scale
  // multiplies the fused kernel's efficiency, so a compute-bound attention forward takes 1/0.5
  // as long (launch aside).
  const ClusterSpec c = load_cluster(resolve_scenario("clusters", "selene"));
  PlanSpec p;
  p.framework = Framework::megatron_core;
  const TrainingSpec t{.global_batch = 8};
  CalibrationSet half;
  half.parameters = {param("g", CalibratedKnob::gemm_efficiency_scale, 0.5, {}),
                     param("a", CalibratedKnob::attention_efficiency_scale, 0.5, {})};
  const ExecutionModel base = resolve_execution(c, t, p, nullptr);
  const ExecutionModel slow = resolve_execution(c, t, p, &half);
  const double launch = base.roofline().params().launch_overhead.value();
  const GemmShape s{8192, 8192, 8192, 1};
  EXPECT_NEAR(slow.roofline().gemm(s).value() - launch, 2 * (base.roofline().gemm(s).value() - launch), 1e-12);
  EXPECT_NEAR(slow.roofline().flash_forward(32, 2048, 2048, 128, true).value() - launch,
              2 * (base.roofline().flash_forward(32, 2048, 2048, 128, true).value() - launch), 1e-12);
}

TEST(Calibrated, FileRulesNameTheFieldAndValue) {
  const std::string head =
      "calibration:\n  parameters:\n    - {name: x, knob: slot_overhead, unit: \"s\", meaning: m, range_source: r, ";
  struct Case {
    std::string body, field, needle;
  };
  const std::vector<Case> cases = {
      {"range: [0, 1], value: 2}\n", "calibration.parameters[0].value", "must lie in the parameter's range [0, 1]"},
      {"range: [1, 0]}\n", "calibration.parameters[0].range", "0 <= low <= high"},
      {"range: [0, 1], colour: red}\n", "calibration.parameters[0].colour", "is not a known key"},
      {"range: [0, 1], scope: {frameworks: [jax]}}\n", "calibration.parameters[0].scope.frameworks", "must be one of"},
      {"range: [0, 1], scope: {network: infiniband}}\n", "calibration.parameters[0].scope.network", "must be one of"},
  };
  for (const auto& c : cases) {
    std::string text = head;
    text.append(c.body);
    const std::string path = write_temp(text);
    try {
      load_calibration(path);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  // The fit's engine: absent means analytic (files written before the field existed); anything
  // but the two engines is refused.
  const std::string engine_head = "calibration:\n  fitted_with: ";
  const std::string one = "\n  parameters:\n    - {name: x, knob: slot_overhead, unit: \"s\", meaning: m, range: [0, 1], "
                          "range_source: r}\n";
  EXPECT_EQ(load_calibration(write_temp(head + "range: [0, 1]}\n")).fit_engine, EngineKind::analytic);
  EXPECT_EQ(load_calibration(write_temp(engine_head + "simgrid" + one)).fit_engine, EngineKind::simgrid);
  try {
    load_calibration(write_temp(engine_head + "ns3" + one));
    ADD_FAILURE() << "fitted_with: ns3 was accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "calibration.fitted_with");
    EXPECT_NE(std::string(e.what()).find("ns3"), std::string::npos) << e.what();
  }
  const std::string unit = write_temp(
      "calibration:\n  parameters:\n    - {name: x, knob: gemm_efficiency_scale, unit: \"s\", meaning: m, range: [0.5, 1], "
      "range_source: r}\n");
  try {
    load_calibration(unit);
    ADD_FAILURE() << "a scale in seconds was accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "calibration.parameters[0].unit");
  }
}

TEST(Calibrated, WrittenFileReadsBackTheSame) {
  CalibrationSet set;
  CalibratedParameter p = param("slot", CalibratedKnob::slot_overhead, 0.0123456789, {.frameworks = {Framework::deepspeed}});
  p.meaning = "a \"quoted\" meaning";
  p.range_source = "somewhere";
  p.hi = 0.06;
  p.fit_cases = {"a", "b"};
  p.fit_rms_pct = 1.5;
  p.scope.network = NetworkTopology::ethernet;
  set.parameters = {p};
  set.fit_engine = EngineKind::simgrid;
  const std::string text = calibration_yaml(set);
  const CalibrationSet back = load_calibration(write_temp(text));
  ASSERT_EQ(back.parameters.size(), 1u);
  EXPECT_DOUBLE_EQ(back.parameters[0].value, 0.0123457);  // 6 significant digits
  EXPECT_EQ(back.parameters[0].meaning, p.meaning);
  EXPECT_EQ(back.parameters[0].fit_cases, p.fit_cases);
  EXPECT_EQ(back.parameters[0].scope.network, NetworkTopology::ethernet);
  EXPECT_EQ(back.fit_engine, EngineKind::simgrid);
  EXPECT_EQ(calibration_yaml(back), text);
}

TEST(ErrorBands, NearestRankPercentilesRoundedOutwardKeepTheEndCasesInside) {
  // Ten torchtitan cases on compute capability 9. Nearest rank (ceil(p n)): the 10th percentile is
  // the 1st smallest ratio, the 90th the 9th. Written with four significant digits, 0.951239 and
  // 1.429031 round to nearest as 0.9512 and 1.429, which would leave both cases outside their own
  // band; rounded outward they are 0.9512 and 1.43. At least 8 of the 10 cases are inside.
  const std::vector<double> ratios = {0.951239, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.429031, 1.6};
  std::vector<BandSample> samples;
  for (double r : ratios) samples.push_back({Framework::torchtitan, 9.0, r});
  const std::vector<ErrorBand> bands = error_bands(samples);
  ASSERT_FALSE(bands.empty());
  const ErrorBand& all = bands.front();  // every sample: the first band written
  EXPECT_EQ(all.cases, 10);
  EXPECT_DOUBLE_EQ(all.lo, 0.9512);
  EXPECT_DOUBLE_EQ(all.hi, 1.43);
  int inside = 0;
  for (double r : ratios) inside += r >= all.lo && r <= all.hi;
  EXPECT_EQ(inside, 9);
}

}  // namespace foresight::cost_models
