#include "planner/terapipe_slicing.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace foresight::planner {

Seconds slicing_latency(const std::vector<int>& slices, int stages, const SliceTime& time, int microbatches) {
  Seconds sum, worst;
  int end = 0;
  for (int l : slices) {
    end += l;
    const Seconds t = time(l, end);
    sum += t;
    worst = max(worst, t);
  }
  return sum * double(microbatches) + worst * double(stages - 1);
}

Slicing optimal_token_slices(int seq_len, int stages, const SliceTime& time, int granularity, int microbatches) {
  FORESIGHT_CHECK(granularity >= 1 && seq_len % granularity == 0 && stages >= 1 && microbatches >= 1)
      << "seq_len " << seq_len << ", granularity " << granularity << ", stages " << stages;
  const int n = seq_len / granularity;  // units
  // t[i][j]: time of the slice covering units [i, j), ending at token j*granularity.
  std::vector<std::vector<double>> t(n + 1, std::vector<double>(n + 1, 0.0));
  std::vector<double> candidates;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j <= n; ++j) {
      t[i][j] = time((j - i) * granularity, j * granularity).value();
      candidates.push_back(t[i][j]);
    }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  const double inf = std::numeric_limits<double>::infinity();
  Slicing best;
  double best_latency = inf;
  std::vector<double> f(n + 1);
  std::vector<int> from(n + 1);
  // A slice's time from the table (the slice covering tokens [end - tokens, end)).
  const SliceTime table = [&](int tokens, int end) {
    return Seconds(t[std::size_t((end - tokens) / granularity)][std::size_t(end / granularity)]);
  };
  for (double tmax : candidates) {
    // Bounds are tried in increasing order and the objective is at least (K-1)*tmax, so once that
    // alone reaches the best latency found, no larger bound can win.
    if (double(stages - 1) * tmax >= best_latency) break;
    std::fill(f.begin(), f.end(), inf);
    f[0] = 0;
    for (int j = 1; j <= n; ++j)
      for (int i = 0; i < j; ++i)
        if (f[i] < inf && t[i][j] <= tmax && f[i] + t[i][j] < f[j]) {
          f[j] = f[i] + t[i][j];
          from[j] = i;
        }
    if (f[n] == inf) continue;
    // The slicing's real slowest slice may be below tmax; evaluate the true objective, with each
    // slice's time read from the table rather than by calling time() again: each call can cost a
    // whole workload costing, and this loop runs per candidate bound.
    std::vector<int> slices;
    for (int j = n; j > 0; j = from[j]) slices.push_back((j - from[j]) * granularity);
    std::reverse(slices.begin(), slices.end());
    const double lat = slicing_latency(slices, stages, table, microbatches).value();
    if (lat < best_latency) {
      best_latency = lat;
      best.slices = slices;
    }
  }
  best.latency = Seconds(best_latency);
  return best;
}

}  // namespace foresight::planner
