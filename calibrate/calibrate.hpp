// `foresight calibrate`: measure the kernels, NCCL collectives and host copies of this machine
// through one harness and fit the compute model (DESIGN.md "Calibration profiles"). The shapes are
// the ones the planner asks the cost model about for a model, plus a generic grid; the GPU side
// lives in runner_cuda.cpp (built with CUDA), and a build without CUDA says so.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibrate/profile_json.hpp"
#include "core/model.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::calibrate {

/// No GPU to measure (no driver, no device, or a build without CUDA): the CLI exits 1 with this.
class NoDevice : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CalibrateOptions {
  std::vector<ModelSpec> models;  // whose planner shapes to measure (the CLI's default: GPT-3 1.3B and 175B)
  bool quick = false;             // a small grid (smoke test, about a minute)
  double budget_s_per_point = 0.2;  // timed repetitions stop after this much GPU time (>= min reps)
  std::string git_sha;
};

/// stage ("gemm", "attention", "nccl all_reduce x8", ...), points done, points in the stage.
using ProgressFn = std::function<void(const std::string& stage, int done, int total)>;

/// Why this process cannot calibrate ("no CUDA device (...)", "this build has no CUDA support"), or
/// "" when a GPU is usable.
std::string no_device_reason();

/// Measures and fits. Throws NoDevice without a usable GPU, CudaError when a CUDA call fails.
Profile run_calibration(const CalibrateOptions& options, const ProgressFn& progress);

/// GEMMs the planner prices for `m` (cost_models/roofline.cpp layer_times and edge_times): QKV,
/// projection, FC1, FC2 forward and their two backward GEMMs, and the LM head, for tp in
/// {1, 2, 4, 8} dividing the heads and micro-batches of 1 and 2 sequences. Deduplicated.
std::vector<cost_models::GemmShape> planner_gemm_shapes(const ModelSpec& m);
/// A generic grid: m, n, k over powers of two from 256 to 16384 (quick: 1024 to 8192, coarser).
std::vector<cost_models::GemmShape> generic_gemm_grid(bool quick);

}  // namespace foresight::calibrate
