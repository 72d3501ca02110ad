#include "cost_models/device_spread.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>

#include "core/error.hpp"

namespace foresight::cost_models {

double expected_max_of_normals(int n) {
  FORESIGHT_CHECK(n >= 1) << n;
  if (n == 1) return 0.0;
  // A pure function of n, asked for once per costed plan: each thread remembers its answers (the
  // integral below was a third of `foresight validate`'s time).
  thread_local std::map<int, double> known;
  if (auto k = known.find(n); k != known.end()) return k->second;
  // The maximum of n normals lies within [-10, 10] for any n a cluster has (its mode is near
  // sqrt(2 ln n) < 6 for n < 1e7); 8000 Simpson intervals give about 1e-9 against tabulated values.
  constexpr int kIntervals = 8000;
  constexpr double kLo = -10.0, kHi = 10.0;
  const double h = (kHi - kLo) / kIntervals;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
  double sum = 0.0;
  for (int i = 0; i <= kIntervals; ++i) {
    const double x = kLo + i * h;
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double density = n * inv_sqrt_2pi * std::exp(-0.5 * x * x) * std::pow(cdf, n - 1);
    const double weight = (i == 0 || i == kIntervals) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
    sum += weight * x * density;
  }
  const double e = sum * h / 3.0;
  known.emplace(n, e);
  return e;
}

SlowestDevice slowest_device(const GpuSpec& gpu, int devices, bool burst_clocks) {
  FORESIGHT_CHECK(devices >= 1) << devices;
  SlowestDevice s;
  s.devices = devices;
  if (gpu.kernels.sustained_clock_scale && !burst_clocks) s.sustained = gpu.kernels.sustained_clock_scale->value;
  if (!gpu.kernels.device_spread_cv) return s;
  s.cv = gpu.kernels.device_spread_cv->value;
  s.factor = 1.0 + s.cv * expected_max_of_normals(devices);
  return s;
}

std::string SlowestDevice::describe() const {
  char buf[200];
  if (devices == 1) {
    std::snprintf(buf, sizeof buf, "one GPU: it waits for no slower device");
  } else if (cv <= 0) {
    std::snprintf(buf, sizeof buf, "no device spread in the GPU file: every GPU at the median speed");
  } else {
    std::snprintf(buf, sizeof buf, "slowest of %d GPUs sets the pace: GEMM and attention x%.4f (device spread %.2f%%)",
                  devices, factor, 100.0 * cv);
  }
  std::string out = buf;
  if (sustained < 1) {
    std::snprintf(buf, sizeof buf, "; sustained clock under a long run: GEMM and attention x%.4f (GPU file)", 1.0 / sustained);
    out += buf;
  }
  return out;
}

}  // namespace foresight::cost_models
