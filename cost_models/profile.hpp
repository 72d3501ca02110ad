// Calibration profiles (DESIGN.md "Calibration profiles"): what `foresight calibrate` measured on
// a GPU, and compute times interpolated from it. GEMM times come from the measured shapes nearest
// the query (in log m, log n, log k), as achieved efficiency, so a shape between measured ones
// inherits their efficiency; a query outside the measured range is flagged as extrapolated.
// Streaming kernels use the measured copy bandwidth. Left out: per-kernel fits of attention and
// norms beyond one efficiency each (calibrate/ fits them with Eigen once it measures them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/units.hpp"

namespace foresight::cost_models {

struct GemmSample {
  double m = 0, n = 0, k = 0, batch = 1;
  double time_s = 0;  // median
};

struct CalibrationProfile {
  std::string device;                      // e.g. "NVIDIA H100 80GB HBM3"
  std::string source;                      // file it was read from
  double peak_tflops = 0;                  // dense peak of the measured dtype, TFLOP/s
  std::vector<GemmSample> gemm;            // measured GEMMs
  std::optional<double> copy_GBps;         // device-to-device copy bandwidth (read + write counted)
  std::optional<double> flash_efficiency;  // attention fwd+bwd achieved / peak
  std::optional<double> launch_overhead_us;
};

/// Reads a profile JSON: {device: {name, peak_tflops}, measurements: [{kernel: "gemm", m, n, k,
/// batch?, time_s}, {kernel: "copy", bytes, time_s}, {kernel: "attention", flops, time_s}, ...],
/// fitted: {launch_overhead_us?}}. Unknown kernels are kept out; bad values are SpecErrors naming
/// the file and the entry.
CalibrationProfile load_profile(const std::string& path);
CalibrationProfile parse_profile(const std::string& text, const std::string& source);

/// A GEMM time from the profile.
struct GemmEstimate {
  double time_s = 0;
  double efficiency = 0;  // achieved fraction of peak
  bool extrapolated = false;  // outside the measured range in m, n or k
};

/// Inverse-distance weighting of the achieved efficiency of the 4 nearest measured shapes.
GemmEstimate profile_gemm(const CalibrationProfile& p, double m, double n, double k, double batch);

}  // namespace foresight::cost_models
