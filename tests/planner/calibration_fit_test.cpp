// The fit of calibrated parameters against a ground truth it must recover: an experiment whose
// "measurement" is the model's own prediction with a known parameter value (a synthetic case, so
// the right answer is known exactly), in a scenario tree of its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "core/scenario.hpp"
#include "planner/validation.hpp"

namespace foresight::planner {
namespace {

namespace fs = std::filesystem;

cost_models::CalibrationSet slot_parameter(double value) {
  cost_models::CalibratedParameter p;
  p.name = "slot";
  p.knob = cost_models::CalibratedKnob::slot_overhead;
  p.unit = "s";
  p.lo = 0;
  p.hi = 0.06;
  p.value = value;
  p.scope.frameworks = {Framework::deepspeed};
  cost_models::CalibrationSet set;
  set.parameters = {p};
  return set;
}

/// A scenario tree with the bundled models, clusters and GPUs and one experiment: MT-NLG on 350
/// nodes with `iteration_s` as its measurement and `role`.
fs::path tree_with(double iteration_s, const char* role) {
  // One directory per test process: CTest runs this file's tests in parallel processes, and a
  // shared directory was removed under a sibling test (a CI failure of RecoversAKnownSlotOverhead).
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path root = fs::temp_directory_path() /
                        ("foresight_fit_test_" + std::string(t ? t->name() : "none") + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "experiments");
  for (const char* dir : {"models", "clusters", "gpus"}) fs::create_directory_symlink(fs::path(scenarios_dir()) / dir, root / dir);
  std::ifstream in(resolve_scenario("experiments", "mt-nlg-530b-selene-350"));
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = std::regex_replace(text.str(), std::regex("iteration_s: 50.2"),
                                        "role: " + std::string(role) + "\n    iteration_s: " + std::to_string(iteration_s));
  std::ofstream(root / "experiments" / "mt-nlg-synthetic.yaml") << yaml;
  return root;
}

double predicted_iteration(const fs::path& root, const cost_models::CalibrationSet& set) {
  const ValidationReport r = validate_all(root.string(), sim::EngineKind::analytic, {}, &set, false);
  for (const auto& c : r.cases)
    if (c.quantity == "iteration_s") return c.predicted;
  ADD_FAILURE() << "no iteration case";
  return 0;
}

}  // namespace

TEST(FitCalibration, RecoversAKnownSlotOverhead) {
  // 20 ms per micro-batch and stage: MT-NLG at 350 nodes runs 192 micro-batches over 35 stages,
  // so the iteration grows by about (192 + 34) x 20 ms = 4.5 s. The fit, starting from 0, must
  // find 20 ms again from that iteration time alone.
  const fs::path probe = tree_with(50.2, "prediction");
  const double without = predicted_iteration(probe, slot_parameter(0.0));
  const double truth = predicted_iteration(probe, slot_parameter(0.02));
  EXPECT_NEAR(truth - without, (192 + 34) * 0.02, 0.5);
  const fs::path root = tree_with(truth, "calibration");
  const cost_models::CalibrationSet fitted = fit_calibration(root.string(), slot_parameter(0.0), sim::EngineKind::analytic);
  EXPECT_NEAR(fitted.parameters[0].value, 0.02, 2e-5);
  EXPECT_EQ(fitted.parameters[0].fit_cases, std::vector<std::string>{"mt-nlg-synthetic"});
  EXPECT_LT(fitted.parameters[0].fit_rms_pct, 0.01);
  // Left out, nothing pins it: it stays at its neutral value.
  const cost_models::CalibrationSet alone =
      fit_calibration(root.string(), slot_parameter(0.03), sim::EngineKind::analytic, "mt-nlg-synthetic");
  EXPECT_EQ(alone.parameters[0].value, 0.0);
  EXPECT_TRUE(alone.parameters[0].fit_cases.empty());
  fs::remove_all(root);
}

TEST(FitCalibration, StaysInsideTheDeclaredRange) {
  // A measurement 20% slower than the model with no overhead would need more than the range
  // allows at 60 ms per slot: the fit stops at the bound.
  const fs::path probe = tree_with(50.2, "prediction");
  const double without = predicted_iteration(probe, slot_parameter(0.0));
  const fs::path root = tree_with(without * 1.5, "calibration");
  const cost_models::CalibrationSet fitted = fit_calibration(root.string(), slot_parameter(0.0), sim::EngineKind::analytic);
  EXPECT_DOUBLE_EQ(fitted.parameters[0].value, 0.06);
  fs::remove_all(root);
}
}  // namespace foresight::planner
