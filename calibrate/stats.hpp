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

/// A timing taken in rounds: the mean within each round, the median across rounds. Within a round
/// the repeats run back to back and their mean keeps what accumulates over a step (two ranks'
/// mismatch, the odd slow repeat); a shared host's slow spell lasts milliseconds to seconds and
/// lands on whole rounds, which the median across rounds sets aside. Rounds without repeats are
/// skipped; std::invalid_argument when none has any.
inline double median_of_round_means(const std::vector<std::vector<double>>& rounds) {
  std::vector<double> means;
  for (const auto& r : rounds) {
    if (r.empty()) continue;
    double sum = 0;
    for (double t : r) sum += t;
    means.push_back(sum / double(r.size()));
  }
  if (means.empty()) throw std::invalid_argument("median of round means: no round has a repeat");
  return quantile(means, 0.5);
}

}  // namespace foresight::calibrate
