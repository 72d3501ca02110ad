// Summary statistics of repeated timings (STYLE.md item 11): median and spread, robust to the odd
// slow repetition (a clock ramp, a context switch). CPU only.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace foresight::calibrate {

struct Summary {
  int reps = 0;
  double median_s = 0, p10_s = 0, p90_s = 0, min_s = 0, max_s = 0;
  /// (p90 - p10) / median: the relative spread the profile records next to each median.
  double spread() const { return median_s > 0 ? (p90_s - p10_s) / median_s : 0; }
};

/// Quantile by linear interpolation between order statistics (numpy's default, "linear").
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) throw std::invalid_argument("quantile of no samples");
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

inline Summary summarize(const std::vector<double>& times_s) {
  Summary s;
  s.reps = static_cast<int>(times_s.size());
  s.median_s = quantile(times_s, 0.5);
  s.p10_s = quantile(times_s, 0.1);
  s.p90_s = quantile(times_s, 0.9);
  s.min_s = *std::min_element(times_s.begin(), times_s.end());
  s.max_s = *std::max_element(times_s.begin(), times_s.end());
  return s;
}

}  // namespace foresight::calibrate
