// What the calibration fit relies on to re-predict only some cases (planner/validation.cpp,
// fit_on): a calibrated parameter moves the predictions of the cases its scope matches and of no
// other. Checked on the bundled parameters and calibration cases by moving each parameter across
// its range and comparing every prediction with the unmoved one: a scope predicate that a future
// change lets drift from where the execution model reads a parameter (a plan field rewritten
// before the lookup, a knob read outside calibrated_terms) would make the fit's Jacobian silently
// wrong, and fails here instead. About 250 predictions (2 s; uninstrumented: the sanitizers add
// nothing to a comparison of numbers the other tests take through them).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include <unistd.h>

#include "core/scenario.hpp"
#include "cost_models/calibrated.hpp"
#include "planner/validation.hpp"

namespace foresight::planner {
namespace {

namespace fs = std::filesystem;

/// The bundled library with its calibration cases as the only experiments.
fs::path calibration_cases_tree() {
  const fs::path src = scenarios_dir();
  const fs::path root = fs::temp_directory_path() / ("foresight_scope_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "experiments");
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.path().filename() != "experiments") fs::create_directory_symlink(entry.path(), root / entry.path().filename());
  for (const auto& entry : fs::directory_iterator(src / "experiments")) {
    const Experiment e = load_experiment(entry.path().string());
    if (e.measured && e.measured->role == MeasuredRole::calibration)
      fs::copy_file(entry.path(), root / "experiments" / entry.path().filename());
  }
  return root;
}

using Predictions = std::map<std::pair<std::string, std::string>, double>;  // (experiment, quantity)

Predictions predict_all(const fs::path& root, const cost_models::CalibrationSet& set) {
  Predictions out;
  for (const auto& c : validate_all(root.string(), sim::EngineKind::analytic, {}, &set, false).cases)
    out[{c.experiment, c.quantity}] = c.predicted;
  return out;
}

}  // namespace

TEST(CalibrationScope, EachParameterMovesOnlyTheCasesItsScopeMatches) {
  const fs::path root = calibration_cases_tree();
  std::map<std::string, Experiment> cases;
  for (const auto& entry : fs::directory_iterator(root / "experiments")) {
    Experiment e = load_experiment(entry.path().string());
    cases.emplace(e.name, std::move(e));
  }
  ASSERT_GE(cases.size(), 10u);
  const cost_models::CalibrationSet& bundled = cost_models::bundled_calibration();
  const Predictions base = predict_all(root, bundled);
  int moved_parameters = 0;
  for (std::size_t i = 0; i < bundled.parameters.size(); ++i) {
    const cost_models::CalibratedParameter& p = bundled.parameters[i];
    if (!(p.hi > p.lo)) continue;
    cost_models::CalibrationSet moved = bundled;
    // The far end of the range from the fitted value: a change no prediction in scope can miss.
    moved.parameters[i].value = p.value - p.lo > p.hi - p.value ? p.lo : p.hi;
    const Predictions after = predict_all(root, moved);
    int in_scope_changed = 0, in_scope = 0;
    for (const auto& [key, value] : base) {
      const Experiment& e = cases.at(key.first);
      ASSERT_TRUE(after.count(key)) << key.first << " " << key.second;
      if (p.scope.matches(e.cluster, e.training, e.plan)) {
        ++in_scope;
        in_scope_changed += after.at(key) != value;
      } else {
        EXPECT_EQ(after.at(key), value) << p.name << " is out of scope of " << key.first << " (" << key.second
                                        << ") but moved its prediction";
      }
    }
    // Not every parameter moves a case in its scope across its whole range (FSDP's unit host time
    // stays under those cases' kernels even at 2 ms), but most must, or the check above compares
    // nothing that moved.
    if (in_scope > 0 && in_scope_changed > 0) ++moved_parameters;
  }
  EXPECT_GE(moved_parameters, 8) << "of " << bundled.parameters.size() << " parameters";
  fs::remove_all(root);
}

}  // namespace foresight::planner
