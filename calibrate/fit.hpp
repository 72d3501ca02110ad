// Fits the compute model's parameters (cost_models/roofline.hpp RooflineParams: GEMM, memory and
// flash-attention efficiencies and the launch overhead) to kernel measurements, by weighted linear
// least squares (Eigen) on relative errors. Features come from RooflineCompute itself with unit
// efficiencies, so the fit and the cost model share one formula. GEMMs sit in the compute or the
// memory regime of the roofline's max(); the regime is re-chosen from the current fit until it is
// stable. Fitted in stages (streaming kernels: memory efficiency and launch; then GEMMs; then
// attention), each rejecting samples beyond 3 robust standard deviations and 5% (fit.cpp). Left
// out: the tile shape (kept at its default) and anything the roofline does not model.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::calibrate {

enum class SampleKind { gemm, memory, attention };

/// One measured kernel, described in the cost model's terms.
struct KernelSample {
  std::string name;  // kernel name as in the profile ("gemm", "gelu_forward", "attention_fwd_bwd", ...)
  SampleKind kind = SampleKind::gemm;
  cost_models::GemmShape gemm{};  // kind gemm
  double bytes = 0;             // kind memory: bytes read + written
  int launches = 1;             // kernel launches the measured call makes
  // kind attention: (batch * heads, tokens, context, head_dim), causal; `passes` is 1 for a forward,
  // 3.5 for forward + backward (backward = 2.5 forwards, the roofline's convention).
  double batch_heads = 0, tokens = 0, context = 0, head_dim = 0;
  double passes = 1;
  double time_s = 0;  // measured median
};

struct FitResult {
  cost_models::RooflineParams params;
  double rms_rel_error = 0;     // over the samples fitted
  double median_rel_error = 0;
  int iterations = 0;
  int samples = 0;
  int rejected = 0;  // samples left out of the fit as outliers (still counted in the errors)
  std::map<std::string, int> rejected_by_kernel;  // the same, per kernel name
};

/// The model's time for a sample with the given parameters.
double predict(const GpuSpec& gpu, Dtype dtype, const cost_models::RooflineParams& params, const KernelSample& s);

/// Least-squares fit of 1/gemm_efficiency, 1/memory_efficiency, 1/flash_efficiency and the launch
/// overhead, with each efficiency bounded at 1 and the launch overhead at 0. A parameter with no
/// sample of its kind keeps its value in `start`. Throws
/// std::invalid_argument without samples.
FitResult fit_roofline(const GpuSpec& gpu, Dtype dtype, const std::vector<KernelSample>& samples,
                       const cost_models::RooflineParams& start = {});

/// Median |predicted - measured| / measured per kind, of `params` on `samples`.
struct HeldOutError {
  double gemm = 0, memory = 0, attention = 0;
  int n_gemm = 0, n_memory = 0, n_attention = 0;
};
HeldOutError held_out_error(const GpuSpec& gpu, Dtype dtype, const cost_models::RooflineParams& params,
                            const std::vector<KernelSample>& samples);

/// Splits samples into (fit, held out): every `every`-th sample of each kind is held out.
std::pair<std::vector<KernelSample>, std::vector<KernelSample>> split_held_out(const std::vector<KernelSample>& samples,
                                                                              int every = 4);

}  // namespace foresight::calibrate
