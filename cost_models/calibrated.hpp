// Calibrated parameters (DESIGN.md, Fidelity rules): what neither a kernel measurement nor a
// hardware spec can pin, such as a 2021 pipeline engine's host time per micro-batch, fitted on the
// experiments marked `measured.role: calibration` and nowhere else. Each parameter has a name, a
// unit, a physical meaning, a plausible range with its source and a scope (frameworks, a GPU
// generation, a ZeRO stage); an execution whose plan falls in the scope gets the parameter's
// effect, every other execution is untouched. The declarations and the fitted values live in one
// file, scenarios/calibration.yaml, written by `foresight calibrate --published`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"

namespace foresight::cost_models {

/// Which part of the cost model a calibrated parameter moves.
enum class CalibratedKnob {
  slot_overhead,               // seconds per micro-batch per pipeline stage (half forward, half backward)
  unit_overhead,               // seconds per ZeRO-3 / FSDP unit per forward and per backward
  step_overhead,               // seconds per iteration (host work outside the micro-batches)
  gemm_efficiency_scale,       // multiplies the GEMM ceiling of the GPU file
  attention_efficiency_scale,  // multiplies the fused-attention efficiency
  clock_scale,                 // multiplies both (a sustained tensor-core clock below the datasheet's)
  fp8_gemm_efficiency_scale,   // multiplies the GEMM ceiling of FP8 GEMMs only
  all_to_all_efficiency_scale, // multiplies the bandwidth an all-to-all reaches on its links
  tp_comm_efficiency_scale,    // multiplies the bandwidth tensor-parallel collectives reach
  socket_one_gpu_efficiency_scale,  // multiplies the line-rate share of one GPU's NCCL socket connection
};

/// Where a parameter applies: every listed condition must hold (an empty list or an unset value
/// matches anything).
struct CalibratedScope {
  std::vector<Framework> frameworks = {};
  std::optional<double> compute_capability = std::nullopt;  // e.g. 8.0 for A100, 9.0 for H100
  std::optional<int> min_zero = std::nullopt;               // e.g. 3: sharded-parameter (FSDP) runs only
  std::optional<int> max_zero = std::nullopt;               // e.g. 1: runs without sharded gradients
  std::optional<Dtype> dtype = std::nullopt;
  std::vector<std::string> gpus = {};  // GPU file names (e.g. h100-grand-teton)
  std::optional<Fp8Scaling> fp8_scaling = std::nullopt;  // with dtype fp8: the scaling recipe
  std::optional<NetworkTopology> network = std::nullopt;  // the cluster's inter-node network
  bool matches(const ClusterSpec& cluster, const TrainingSpec& training, const PlanSpec& plan) const;
  std::string describe() const;
};

struct CalibratedParameter {
  std::string name;
  CalibratedKnob knob = CalibratedKnob::slot_overhead;
  std::string unit;     // "s" or "1" (a dimensionless scale)
  std::string meaning;  // the physical mechanism it stands for
  double lo = 0, hi = 0;
  std::string range_source;  // where the plausible range comes from
  CalibratedScope scope;
  double value = 0;          // the fitted value (lo..hi)
  /// The fit that produced `value`: its calibration cases and their log residuals.
  std::vector<std::string> fit_cases;
  double fit_rms_pct = 0;
  /// The value at which the parameter has no effect (0 for overheads, 1 for scales).
  double neutral() const;
};

/// An error bar from the validation residuals of one scope: over the prediction cases whose
/// execution falls in it, the measured iteration time over the predicted one lies between `lo`
/// and `hi` (nearest-rank 10th and 90th percentiles, so at least 80% of those cases fall inside).
/// A prediction takes the band of the most specific scope with cases: its framework on its GPU
/// generation, else its framework, else every case.
struct ErrorBand {
  std::optional<Framework> framework = std::nullopt;
  std::optional<double> compute_capability = std::nullopt;
  int cases = 0;
  double lo = 1, hi = 1;
  std::string describe() const;
};

struct CalibrationSet {
  std::string file;  // where it was read ("" when built in code)
  std::vector<CalibratedParameter> parameters;
  std::vector<ErrorBand> bands;  // written with the fit (foresight calibrate --published)
  /// The engine the fit ran on (`fitted_with` in the file, analytic when absent). validate's
  /// leave-one-out refits repeat the fit as it was made, whichever engine then predicts the
  /// left-out case.
  EngineKind fit_engine = EngineKind::analytic;
};

/// The effect of the parameters whose scope an execution falls in.
struct CalibratedTerms {
  Seconds slot_overhead, unit_overhead, step_overhead;
  double gemm_efficiency_scale = 1.0, attention_efficiency_scale = 1.0, fp8_gemm_efficiency_scale = 1.0;
  double all_to_all_efficiency_scale = 1.0;
  double tp_comm_efficiency_scale = 1.0;
  double socket_one_gpu_efficiency_scale = 1.0;  // CommParams::socket_efficiency_one (CommModel applies it)
  std::vector<std::string> applied;  // names of the parameters in effect
  std::optional<ErrorBand> band;     // the error bar this execution's predictions carry
};

/// The band of the most specific scope (framework and GPU generation, framework, all) with cases.
std::optional<ErrorBand> band_for(const std::vector<ErrorBand>& bands, Framework framework, double compute_capability);

/// One prediction case's measured / predicted time, with its framework and GPU generation.
struct BandSample {
  Framework framework = Framework::generic;
  double compute_capability = 0;
  double ratio = 1;  // measured time / predicted time
};
/// Bands from (framework, GPU generation, measured / predicted time) of prediction cases: one per
/// framework and generation, one per framework, one over all, each with at least `min_cases`.
/// Ten by default: below that the nearest-rank 10th and 90th percentiles are the smallest and the
/// largest case, so a band of a few like cases (four dense Blackwell rows within 2%) would be
/// their range and claim more certainty than it holds; such scopes take the wider scope's band.
std::vector<ErrorBand> error_bands(const std::vector<BandSample>& samples, int min_cases = 10);

CalibratedTerms calibrated_terms(const CalibrationSet& set, const ClusterSpec& cluster, const TrainingSpec& training,
                                 const PlanSpec& plan);

/// Reads a calibration file; bad input is a SpecError naming the file, field, value and rule.
CalibrationSet load_calibration(const std::string& path);
/// scenarios/calibration.yaml, read once per process; an empty set when the file is absent.
const CalibrationSet& bundled_calibration();
/// The file's text for `set` (values with 6 significant digits, fixed key order), so that writing
/// the same fit twice gives the same bytes.
std::string calibration_yaml(const CalibrationSet& set);

}  // namespace foresight::cost_models
