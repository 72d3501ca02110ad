// Calibration profiles (DESIGN.md "Calibration profiles"): what `foresight calibrate` measured on
// a GPU, each measurement tagged with the implementation that ran it (GEMM: "cublaslt"; attention:
// "flash", "cudnn", "unfused", or this project's own "foresight-cuda-core" kernel) and its dtype.
// An execution uses only what matches the implementation and dtype it runs (select_profile): a
// FlashAttention run never inherits the speed of another attention kernel, an fp8 run never the
// bf16 GEMMs. GEMM times come from the matching shapes nearest the query (in log m, log n, log k),
// as achieved efficiency; a query outside the measured range is flagged as extrapolated.
// Streaming kernels use the measured copy bandwidth, whatever ran. Left out: per-kernel fits of
// norms and activations beyond the copy bandwidth (calibrate/ fits them with Eigen).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/units.hpp"
#include "cost_models/comm.hpp"

namespace foresight::cost_models {

struct GemmSample {
  double m = 0, n = 0, k = 0, batch = 1;
  double time_s = 0;  // median
};

/// A measured GEMM with what ran it.
struct TaggedGemm {
  std::string impl;  // "cublaslt"
  Dtype dtype = Dtype::bf16;
  GemmSample sample;
};

/// A measured attention forward + backward with what ran it, as achieved fraction of the peak.
struct TaggedAttention {
  std::string impl;  // "flash", "cudnn", "unfused", "foresight-cuda-core"
  Dtype dtype = Dtype::bf16;
  double efficiency = 0;
};

/// A single-node NCCL collective `foresight calibrate` timed (calibrate/nccl_sweep.cpp): NCCL's
/// message convention (CommModel::time), the median time.
struct NcclSample {
  Collective collective = Collective::all_reduce;
  int ranks = 2, nodes = 1;
  double bytes = 0, time_s = 0;
};

/// Everything a profile file holds that the cost models can use.
struct ProfileData {
  std::string device;      // e.g. "NVIDIA H100 80GB HBM3"
  std::string source;      // file it was read from
  double peak_tflops = 0;  // dense 16-bit peak the measured efficiencies refer to, TFLOP/s
  std::vector<TaggedGemm> gemm;
  std::vector<TaggedAttention> attention;
  std::optional<double> copy_GBps;  // device-to-device copy bandwidth (read + write counted)
  std::optional<double> launch_overhead_us;
  std::vector<NcclSample> nccl;     // the comm model's in-node curves (cost_models/in_node_nccl.hpp)
};

/// The part of a profile one execution uses (select_profile): GEMMs and attention of its own
/// implementations and dtype only.
struct CalibrationProfile {
  std::string device;
  std::string source;
  double peak_tflops = 0;
  std::vector<GemmSample> gemm;             // empty: the roofline prices GEMMs
  std::optional<double> attention_efficiency;  // unset: the GPU file's figure for the implementation
  std::optional<double> copy_GBps;
  std::optional<double> launch_overhead_us;
};

/// Reads a profile JSON: {device: {name, peak_tflops}, measurements: [{kernel: "gemm", impl,
/// dtype, m, n, k, batch?, time_s}, {kernel: "copy", bytes, time_s}, {kernel: "attention", impl,
/// dtype, flops, time_s}, ...], fitted: {launch_overhead_us?, *_efficiency?}}. Unknown kernels
/// are kept out; bad values (a GEMM or attention faster than the peak, a fitted efficiency above 1,
/// a GEMM or attention entry without its implementation) are SpecErrors naming the file and entry.
ProfileData load_profile(const std::string& path);
ProfileData parse_profile(const std::string& text, const std::string& source);

/// What an execution running `gemm_impl` GEMMs in `gemm_dtype` and `attention` in
/// `attention_dtype` may take from a profile.
CalibrationProfile select_profile(const ProfileData& data, const std::string& gemm_impl, Dtype gemm_dtype,
                                  const std::string& attention_impl, Dtype attention_dtype);

/// A GEMM time from the profile.
struct GemmEstimate {
  double time_s = 0;
  double efficiency = 0;      // achieved fraction of peak
  bool extrapolated = false;  // outside the measured range in m, n or k
};

/// A profile's GEMM samples as profile_gemm searches them: log m, log n, log k and the achieved
/// efficiency of each, and the measured range. Built once per execution (index_gemm) rather than
/// per GEMM priced: the planner and validate price millions.
struct GemmIndex {
  std::vector<std::array<double, 4>> points;  // log m, log n, log k, efficiency
  std::array<double, 3> lo{}, hi{};           // the measured range of log m, log n, log k
  double peak_tflops = 0;
};
GemmIndex index_gemm(const CalibrationProfile& p);

/// Inverse-square-distance (in log m, log n, log k) weighting of the achieved efficiency of the 4
/// nearest measured shapes and any others exactly as near as the 4th.
GemmEstimate profile_gemm(const GemmIndex& index, double m, double n, double k, double batch);
GemmEstimate profile_gemm(const CalibrationProfile& p, double m, double n, double k, double batch);

}  // namespace foresight::cost_models
