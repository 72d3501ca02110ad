#include "calibrate/fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
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
  cm::RooflineParams p;
  p.launch_overhead = Seconds(0);
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

FitResult fit_roofline(const GpuSpec& gpu, Dtype dtype, const std::vector<KernelSample>& samples,
                       const cm::RooflineParams& start) {
  if (samples.empty()) throw std::invalid_argument("fit_roofline: no samples");
  std::vector<Features> feat;
  feat.reserve(samples.size());
  for (const auto& s : samples) {
    if (!(s.time_s > 0)) throw std::invalid_argument("fit_roofline: sample " + s.name + " has no positive time");
    feat.push_back(features(gpu, dtype, s));
  }
  // theta = (1 / gemm_eff, 1 / memory_eff, 1 / flash_eff, launch_s).
  Eigen::Vector4d theta(1.0 / start.gemm_efficiency, 1.0 / start.memory_efficiency, 1.0 / start.flash_efficiency,
                        start.launch_overhead.value());
  std::vector<bool> compute_bound(samples.size(), true);
  FitResult r;
  bool fix_launch = false;
  for (r.iterations = 1; r.iterations <= 20; ++r.iterations) {
    // GEMM regime from the current parameters: the larger side of the roofline's max().
    for (std::size_t i = 0; i < samples.size(); ++i)
      compute_bound[i] = feat[i].compute * theta[kGemm] >= feat[i].memory * theta[kMem];
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(long(samples.size()), kCols);
    Eigen::VectorXd b(long(samples.size()));
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      const double w = 1.0 / s.time_s;  // relative error: a 10 us kernel counts as much as a 10 ms one
      switch (s.kind) {
        case SampleKind::gemm:
          if (compute_bound[i]) A(long(i), kGemm) = feat[i].compute * w;
          else A(long(i), kMem) = feat[i].memory * w;
          A(long(i), kLaunch) = 1.0 * w;
          break;
        case SampleKind::memory:
          A(long(i), kMem) = feat[i].memory * w;
          A(long(i), kLaunch) = s.launches * w;
          break;
        case SampleKind::attention:
          A(long(i), kFlash) = feat[i].flash * w;
          A(long(i), kLaunch) = s.launches * w;
          break;
      }
      b[long(i)] = 1.0;  // t_i * w
    }
    // Solve for the columns that some sample informs; the others keep their start values.
    std::vector<int> cols;
    for (int c = 0; c < kCols; ++c) {
      if (c == kLaunch && fix_launch) continue;
      if (A.col(c).cwiseAbs().maxCoeff() > 0) cols.push_back(c);
    }
    Eigen::VectorXd rhs = b;
    for (int c = 0; c < kCols; ++c)
      if (std::find(cols.begin(), cols.end(), c) == cols.end()) rhs -= A.col(c) * theta[c];
    Eigen::MatrixXd As(A.rows(), long(cols.size()));
    for (std::size_t j = 0; j < cols.size(); ++j) As.col(long(j)) = A.col(cols[j]);
    const Eigen::VectorXd x = As.colPivHouseholderQr().solve(rhs);
    Eigen::Vector4d next = theta;
    for (std::size_t j = 0; j < cols.size(); ++j) next[cols[j]] = x[long(j)];
    if (next[kLaunch] < 0) {  // a negative launch cost is noise fitting: pin it at zero and refit
      fix_launch = true;
      theta[kLaunch] = 0;
      continue;
    }
    for (int c = 0; c < kLaunch; ++c)
      if (!(next[c] > 0)) throw std::runtime_error("fit_roofline: the fit gave a non-positive inverse efficiency");
    bool same = true;
    for (std::size_t i = 0; i < samples.size(); ++i)
      same = same && compute_bound[i] == (feat[i].compute * next[kGemm] >= feat[i].memory * next[kMem]);
    theta = next;
    if (same) break;
  }
  r.params = start;
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
