// The slowest device of a synchronous step. Identical GPUs of one SKU do not run at one speed:
// manufacturing variation and each chip's power management give every device its own sustained
// clock, and the ranking persists from run to run (Sinha et al., SC22, arXiv 2208.11035). A
// synchronous training step waits for its slowest device: tensor-parallel collectives every layer,
// pipeline stages every micro-batch and the data-parallel reduction every step all pace the job at
// the slowest member, so the step's tensor-core work runs at the speed of the slowest of the N
// GPUs, not the median one a kernel benchmark measures.
//
// With per-device times t_i = median x (1 + cv Z_i), Z_i standard normal (the GPU file's
// device_spread_cv), the slowest of N takes median x (1 + cv E[max of N Z]) in expectation.
#pragma once

#include <string>

#include "core/hardware.hpp"

namespace foresight::cost_models {

/// E[max(Z_1..Z_n)] for n independent standard normals (0 for n = 1), by Simpson's rule over the
/// density of the maximum, n phi(x) Phi(x)^(n-1).
double expected_max_of_normals(int n);

/// What the slowest of an execution's devices costs its tensor-core work.
struct SlowestDevice {
  int devices = 1;     // GPUs that synchronise every step (the whole plan)
  double cv = 0;       // coefficient of variation of per-device sustained throughput (GPU file)
  double factor = 1;   // time of the slowest device's GEMM and attention kernels over a median device's
  /// Sustained over burst tensor-core throughput for a long run (GpuKernelFigures::
  /// sustained_clock_scale; 1 where the GPU file has none or the run is declared short).
  double sustained = 1;
  std::string describe() const;  // one line for the console
};

/// The slowest of `devices` GPUs of this kind: factor 1 + cv E[max of devices normals]; factor 1
/// where the GPU file gives no spread (a CPU device, a GPU without a measurement).
SlowestDevice slowest_device(const GpuSpec& gpu, int devices, bool burst_clocks = false);

}  // namespace foresight::cost_models
