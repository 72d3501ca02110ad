// Validation against published runs: every experiment with a `measured:` block is predicted and
// compared under the source's own definitions (iteration time; TFLOP/s per GPU counting recompute
// when the source does; one layer's forward/backward for Korthikanti 2022 Table 4; tokens/s for
// DeepSpeed-MoE; TeraPipe's speedup over its baseline). Cases marked `measured.role:
// calibration` pin the calibrated parameters (cost_models/calibrated.hpp, fitted by
// fit_calibration) and are reported apart, with a leave-one-out check; every other case is a
// prediction, and the prediction MAPE is the headline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_models/calibrated.hpp"
#include "sim/prediction.hpp"

namespace foresight::planner {

struct ValidationCase {
  std::string experiment;
  std::string source;     // measured.source
  std::string group;      // "MT-NLG", "Megatron-LM SC21", "Korthikanti 2022", "TeraPipe", "DeepSpeed-MoE", ...
  std::string quantity;   // "iteration_s", "tflops_per_gpu (hardware)", "forward_ms", ...
  double published = 0;
  double predicted = 0;
  MeasuredRole role = MeasuredRole::prediction;
  /// Calibration cases: the prediction of a fit made without this case (leave-one-out); 0 when
  /// not computed.
  double predicted_left_out = 0;
  Framework framework = Framework::generic;  // the execution's, for error bars per scope
  double compute_capability = 0;
  std::optional<cost_models::ErrorBand> band = std::nullopt;  // the error bar its prediction carried
  /// Measured time over predicted time (tokens/s: predicted over measured); 0 for a speedup.
  double time_ratio() const;
  bool inside_band() const;
  double error_pct() const { return 100.0 * (predicted - published) / published; }
  double left_out_error_pct() const { return 100.0 * (predicted_left_out - published) / published; }
  /// Counted in the MAPE: time-like quantities (TFLOP/s restates the same run's time).
  bool timed() const { return !quantity.starts_with("tflops") && !quantity.starts_with("peak_memory"); }
};

struct ValidationSummary {
  std::string group;
  int cases = 0;
  double mape_pct = 0;
  double max_abs_pct = 0;
};

struct ValidationReport {
  std::vector<ValidationCase> cases;
  /// Prediction cases per group, then "overall" last: the headline figures.
  std::vector<ValidationSummary> groups;
  /// Calibration cases: in-sample (the fit's own residuals) and leave-one-out.
  ValidationSummary calibration{"calibration cases (in-sample)"};
  ValidationSummary leave_one_out{"calibration cases (leave-one-out)"};
  /// Prediction cases (time-like, not speedups) whose measurement falls inside their error bar.
  int band_cases = 0, inside_band = 0;
  /// The engine the leave-one-out refits ran on: the one scenarios/calibration.yaml was fitted with.
  EngineKind refit_engine = EngineKind::analytic;
};

/// Error bars from a report's prediction cases (cost_models::error_bands).
std::vector<cost_models::ErrorBand> error_bands_of(const ValidationReport& r);

/// Runs every experiment with a measured block under `scenarios_root`/experiments. Time-based
/// quantities only enter the MAPE (TFLOP/s duplicates iteration time for the same run).
/// `progress(done, total)` after each experiment file. `calibration`: the calibrated parameters
/// (default the bundled scenarios/calibration.yaml); with `leave_one_out` each calibration case
/// is also predicted by a fit made without it.
ValidationReport validate_all(const std::string& scenarios_root, sim::EngineKind engine,
                              const std::function<void(long done, long total)>& progress = {},
                              const cost_models::CalibrationSet* calibration = nullptr, bool leave_one_out = true);

/// Fits the declared parameters of `declared` on the calibration cases under `scenarios_root`
/// (all but `exclude`, an experiment name): least squares on log(predicted / published) over
/// each case's time-like quantity, bounded by each parameter's range (projected Gauss-Newton with
/// Eigen). Parameters no calibration case falls in the scope of keep their neutral value.
/// Deterministic: the same inputs give the same values.
cost_models::CalibrationSet fit_calibration(const std::string& scenarios_root, const cost_models::CalibrationSet& declared,
                                            sim::EngineKind engine, const std::string& exclude = "");

/// The report as JSON: {engine, cases: [...], groups: [...], mape_pct, max_abs_pct} (overall).
nlohmann::ordered_json validation_json(const ValidationReport& r, sim::EngineKind engine);

/// The report as a markdown table with per-group MAPE.
std::string validation_markdown(const ValidationReport& r, sim::EngineKind engine);

}  // namespace foresight::planner
