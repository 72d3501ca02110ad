#include "calibrate/fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <stdexcept>

#include "calibrate/stats.hpp"

namespace foresight::calibrate {

namespace cm = cost_models;

namespace {

constexpr double kHuge = 1e30;  // an efficiency that makes one side of the roofline vanish

// Columns of the linear model: t = x_g / gemm_eff + x_m / memory_eff + x_f / flash_eff + n * launch.
enum Col { kGemm = 0, kMem = 1, kFlash = 2, kLaunch = 3, kCols = 4 };

struct Features {
  double compute = 0, memory = 0, flash = 0;  // seconds at unit efficiency, no launch cost
};

// The cost model's own formulas at unit efficiencies (so the fit inverts exactly what it predicts).
Features features(const GpuSpec& gpu, Dtype dtype, const KernelSample& s) {
  Features f;
  // The GPU file's parameters (its GEMM shape terms: per-tile K overhead, tile choice), so that the
  // fitted ceiling is the one the roofline divides by; each case below sets the efficiencies.
  cm::RooflineParams p = cm::roofline_params_for(gpu, AttentionImpl::unfused);
  p.launch_overhead = Seconds(0);
  p.fused_attention_shape = false;  // the measured kernel is this project's own, not FlashAttention-2
  switch (s.kind) {
    case SampleKind::gemm: {
      p.gemm_efficiency = 1;
      p.memory_efficiency = kHuge;
      f.compute = cm::RooflineCompute(gpu, dtype, p).gemm(s.gemm).value();
      p.gemm_efficiency = kHuge;
      p.memory_efficiency = 1;
      f.memory = cm::RooflineCompute(gpu, dtype, p).gemm(s.gemm).value();
      break;
    }
    case SampleKind::memory:
      p.memory_efficiency = 1;
      f.memory = cm::RooflineCompute(gpu, dtype, p).memory_bound(Bytes(s.bytes), 0).value();
      break;
    case SampleKind::attention:
      p.flash_efficiency = 1;
      f.flash = s.passes *
                cm::RooflineCompute(gpu, dtype, p).flash_forward(s.batch_heads, s.tokens, s.context, s.head_dim, true).value();
      break;
  }
  return f;
}

double median_of(std::vector<double> v) { return v.empty() ? 0.0 : quantile(std::move(v), 0.5); }

}  // namespace

double predict(const GpuSpec& gpu, Dtype dtype, const cm::RooflineParams& params, const KernelSample& s) {
  const cm::RooflineCompute rc(gpu, dtype, params);
  switch (s.kind) {
    case SampleKind::gemm: return rc.gemm(s.gemm).value();
    case SampleKind::memory: return rc.memory_bound(Bytes(s.bytes), s.launches).value();
    case SampleKind::attention: {
      // Forward F includes one launch; the backward is 2.5 forwards of work (roofline.cpp).
      const double L = params.launch_overhead.value();
      const double F = rc.flash_forward(s.batch_heads, s.tokens, s.context, s.head_dim, true).value();
      return s.passes * (F - L) + s.launches * L;
    }
  }
  return 0;
}

namespace {

bool compute_bound(const Features& f, const Eigen::Vector4d& theta) {
  return f.compute * theta[kGemm] >= f.memory * theta[kMem];  // the larger side of the roofline's max()
}

// The sample's row of the linear model, divided by its measured time (relative error: a 10 us
// kernel counts as much as a 10 ms one): row . theta = predicted / measured. A GEMM's row uses
// the side of the max() given by `gemm_compute_bound`.
Eigen::Vector4d model_row(const KernelSample& s, const Features& f, bool gemm_compute_bound) {
  Eigen::Vector4d a = Eigen::Vector4d::Zero();
  const double w = 1.0 / s.time_s;
  switch (s.kind) {
    case SampleKind::gemm:
      if (gemm_compute_bound) a[kGemm] = f.compute * w;
      else a[kMem] = f.memory * w;
      a[kLaunch] = 1.0 * w;
      break;
    case SampleKind::memory:
      a[kMem] = f.memory * w;
      a[kLaunch] = s.launches * w;
      break;
    case SampleKind::attention:
      a[kFlash] = f.flash * w;
      a[kLaunch] = s.launches * w;
      break;
  }
  return a;
}

// One least-squares stage over the samples of some kinds, solving for the `free` columns of theta
// (the others stay fixed and move to the right-hand side). GEMM rows switch between the compute
// and the memory column of the roofline's max() until the regimes are stable.
void solve_regimes(const std::vector<KernelSample>& samples, const std::vector<Features>& feat,
                   const std::vector<std::size_t>& rows, std::vector<int>& free, Eigen::Vector4d& theta,
                   int& iterations) {
  std::vector<bool> regime(rows.size());
  for (int it = 1; it <= 20; ++it) {
    ++iterations;
    Eigen::MatrixXd A(long(rows.size()), kCols);
    const Eigen::VectorXd b = Eigen::VectorXd::Ones(long(rows.size()));  // measured / measured
    for (std::size_t r = 0; r < rows.size(); ++r) {
      regime[r] = compute_bound(feat[rows[r]], theta);
      A.row(long(r)) = model_row(samples[rows[r]], feat[rows[r]], regime[r]).transpose();
    }
    std::vector<int> cols;
    for (int c : free)
      if (A.col(c).cwiseAbs().maxCoeff() > 0) cols.push_back(c);
    if (cols.empty()) return;
    Eigen::VectorXd rhs = b;
    for (int c = 0; c < kCols; ++c)
      if (std::find(cols.begin(), cols.end(), c) == cols.end()) rhs -= A.col(c) * theta[c];
    Eigen::MatrixXd As(A.rows(), long(cols.size()));
    for (std::size_t j = 0; j < cols.size(); ++j) As.col(long(j)) = A.col(cols[j]);
    const Eigen::VectorXd x = As.colPivHouseholderQr().solve(rhs);
    Eigen::Vector4d next = theta;
    for (std::size_t j = 0; j < cols.size(); ++j) next[cols[j]] = x[long(j)];
    if (next[kLaunch] < 0) {  // a negative launch cost is noise fitting: pin it at zero and refit
      free.erase(std::remove(free.begin(), free.end(), int(kLaunch)), free.end());
      theta[kLaunch] = 0;
      continue;
    }
    // An efficiency is a fraction of a peak: at most 1 (1/efficiency at least 1). Least squares
    // with that bound: an unconstrained solution beyond it is pinned at the bound and the other
    // free parameters refitted (the roofline's wave and tile terms can under-predict a library
    // that avoids wave quantization, which would otherwise push the GEMM efficiency above 1).
    bool pinned = false;
    for (int c : cols)
      if (c != kLaunch && next[c] > 0 && next[c] < 1.0) {
        free.erase(std::remove(free.begin(), free.end(), c), free.end());
        theta[c] = 1.0;
        pinned = true;
      }
    if (pinned) continue;
    static const char* const names[] = {"GEMM efficiency", "memory efficiency", "flash efficiency", "launch"};
    for (int c : cols)
      if (c != kLaunch && !(next[c] > 0))
        throw std::runtime_error(std::string("fit_roofline: the ") + names[c] + " came out non-positive (1/efficiency = " +
                                 std::to_string(next[c]) + ") over " + std::to_string(rows.size()) +
                                 " samples: the measurements do not follow the roofline");
    bool same = true;
    for (std::size_t r = 0; r < rows.size(); ++r) same = same && regime[r] == compute_bound(feat[rows[r]], next);
    theta = next;
    if (same) return;
  }
}

// Relative residual of one sample under theta, from the same row the fit solves with.
double residual(const KernelSample& s, const Features& f, const Eigen::Vector4d& th) {
  return model_row(s, f, compute_bound(f, th)).dot(th) - 1.0;
}

// Least squares with outlier rejection: a sample whose relative residual exceeds 3 robust standard
// deviations (1.4826 x the median absolute residual), and 5%, is left out and the stage refitted,
// until the kept set is stable (at most 10 rounds; never fewer rows than free parameters + 1).
// Kernels the roofline cannot describe (cuBLAS splitting K for a 256 x 256 output; on the H100
// profile, whole families: layernorm and cross-entropy stream at half the copy rate) must not
// bend the parameter for all the others. Rejected samples are counted per kernel name and still
// count in the reported errors.
void solve_stage(const std::vector<KernelSample>& samples, const std::vector<Features>& feat,
                 std::initializer_list<SampleKind> kinds, std::vector<int> free, Eigen::Vector4d& theta,
                 int& iterations, std::map<std::string, int>& rejected) {
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (std::find(kinds.begin(), kinds.end(), samples[i].kind) != kinds.end()) all.push_back(i);
  if (all.empty()) return;
  std::vector<std::size_t> kept = all;
  const Eigen::Vector4d start = theta;
  // theta always comes from a fit on exactly `kept`: the loop ends right after a fit.
  for (int round = 0;; ++round) {
    theta = start;
    std::vector<int> f = free;
    solve_regimes(samples, feat, kept, f, theta, iterations);
    if (round == 9) break;
    std::vector<double> abs_res;
    for (auto i : kept) abs_res.push_back(std::abs(residual(samples[i], feat[i], theta)));
    const double limit = std::max(0.05, 3.0 * 1.4826 * quantile(abs_res, 0.5));
    std::vector<std::size_t> next;
    for (auto i : all)
      if (std::abs(residual(samples[i], feat[i], theta)) <= limit) next.push_back(i);
    if (next == kept || next.size() <= free.size()) break;
    kept = std::move(next);
  }
  std::vector<bool> in(samples.size(), false);
  for (auto i : kept) in[i] = true;
  for (auto i : all)
    if (!in[i]) ++rejected[samples[i].name];
}

}  // namespace

FitResult fit_roofline(const GpuSpec& gpu, Dtype dtype, const std::vector<KernelSample>& samples,
                       const cm::RooflineParams& start) {
  if (samples.empty()) throw std::invalid_argument("fit_roofline: no samples");
  std::vector<Features> feat;
  feat.reserve(samples.size());
  int have[3] = {0, 0, 0};
  for (const auto& s : samples) {
    if (!(s.time_s > 0)) throw std::invalid_argument("fit_roofline: sample " + s.name + " has no positive time");
    feat.push_back(features(gpu, dtype, s));
    ++have[static_cast<int>(s.kind)];
  }
  // theta = (1 / gemm_eff, 1 / memory_eff, 1 / flash_eff, launch_s).
  Eigen::Vector4d theta(1.0 / start.gemm_efficiency, 1.0 / start.memory_efficiency, 1.0 / start.flash_efficiency,
                        start.launch_overhead.value());
  FitResult r;
  r.params = start;
  r.params.fused_attention_shape = false;  // as the features were computed
  // Stages, so that one kernel family cannot bend another's parameter: the streaming kernels fix
  // the memory efficiency and the launch cost (their small sizes are what measures it); the GEMMs
  // then fit the GEMM efficiency, and attention the flash efficiency, with those held. Without
  // streaming samples the launch cost is fitted with the GEMMs (and, failing those, attention).
  const bool mem = have[int(SampleKind::memory)] > 0, gemm = have[int(SampleKind::gemm)] > 0;
  solve_stage(samples, feat, {SampleKind::memory}, {kMem, kLaunch}, theta, r.iterations, r.rejected_by_kernel);
  solve_stage(samples, feat, {SampleKind::gemm}, mem ? std::vector<int>{kGemm} : std::vector<int>{kGemm, kMem, kLaunch},
              theta, r.iterations, r.rejected_by_kernel);
  solve_stage(samples, feat, {SampleKind::attention},
              (mem || gemm) ? std::vector<int>{kFlash} : std::vector<int>{kFlash, kLaunch}, theta, r.iterations,
              r.rejected_by_kernel);
  for (const auto& [name, n] : r.rejected_by_kernel) r.rejected += n;
  r.params.gemm_efficiency = 1.0 / theta[kGemm];
  r.params.memory_efficiency = 1.0 / theta[kMem];
  r.params.flash_efficiency = 1.0 / theta[kFlash];
  r.params.launch_overhead = Seconds(theta[kLaunch]);
  std::vector<double> rel;
  double sq = 0;
  for (const auto& s : samples) {
    const double e = std::abs(predict(gpu, dtype, r.params, s) - s.time_s) / s.time_s;
    rel.push_back(e);
    sq += e * e;
  }
  r.samples = int(samples.size());
  r.rms_rel_error = std::sqrt(sq / double(samples.size()));
  r.median_rel_error = median_of(rel);
  return r;
}

HeldOutError held_out_error(const GpuSpec& gpu, Dtype dtype, const cm::RooflineParams& params,
                            const std::vector<KernelSample>& samples) {
  std::vector<double> g, m, a;
  for (const auto& s : samples) {
    const double e = std::abs(predict(gpu, dtype, params, s) - s.time_s) / s.time_s;
    (s.kind == SampleKind::gemm ? g : s.kind == SampleKind::memory ? m : a).push_back(e);
  }
  return {median_of(g), median_of(m), median_of(a), int(g.size()), int(m.size()), int(a.size())};
}

std::pair<std::vector<KernelSample>, std::vector<KernelSample>> split_held_out(const std::vector<KernelSample>& samples,
                                                                              int every) {
  std::pair<std::vector<KernelSample>, std::vector<KernelSample>> out;
  int seen[3] = {0, 0, 0};
  for (const auto& s : samples) {
    const int k = static_cast<int>(s.kind);
    ((++seen[k] % every) == 0 ? out.second : out.first).push_back(s);
  }
  return out;
}

}  // namespace foresight::calibrate
