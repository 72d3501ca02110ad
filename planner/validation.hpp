// Validation against published runs: every experiment with a `measured:` block is predicted and
// compared under the source's own definitions (iteration time; TFLOP/s per GPU counting recompute
// when the source does; one layer's forward/backward for Korthikanti 2022 Table 4; tokens/s for
// DeepSpeed-MoE; TeraPipe's speedup over its baseline). Nothing here feeds back into a parameter.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/prediction.hpp"

namespace foresight::planner {

struct ValidationCase {
  std::string experiment;
  std::string source;     // measured.source
  std::string group;      // "MT-NLG", "Megatron-LM SC21", "Korthikanti 2022", "TeraPipe", "DeepSpeed-MoE", ...
  std::string quantity;   // "iteration_s", "tflops_per_gpu (hardware)", "forward_ms", ...
  double published = 0;
  double predicted = 0;
  double error_pct() const { return 100.0 * (predicted - published) / published; }
};

struct ValidationSummary {
  std::string group;
  int cases = 0;
  double mape_pct = 0;
  double max_abs_pct = 0;
};

struct ValidationReport {
  std::vector<ValidationCase> cases;
  std::vector<ValidationSummary> groups;  // per group, then "overall" last
};

/// Runs every experiment with a measured block under `scenarios_root`/experiments. Time-based
/// quantities only enter the MAPE (TFLOP/s duplicates iteration time for the same run).
/// `progress(done, total)` after each experiment file.
ValidationReport validate_all(const std::string& scenarios_root, sim::EngineKind engine,
                              const std::function<void(long done, long total)>& progress = {});

/// The report as JSON: {engine, cases: [...], groups: [...], mape_pct, max_abs_pct} (overall).
nlohmann::ordered_json validation_json(const ValidationReport& r, sim::EngineKind engine);

/// The report as a markdown table with per-group MAPE.
std::string validation_markdown(const ValidationReport& r, sim::EngineKind engine);

}  // namespace foresight::planner
