#include "trainer/op_profile.hpp"

#include <algorithm>
#include <cstdlib>

namespace foresight::trainer {

bool op_profiling_requested() {
  const char* e = std::getenv("FORESIGHT_PROFILE_OPS");
  return e && *e && std::string_view(e) != "0";
}

std::vector<OpProfileRow> op_profile_rows(const OpTimesMs& times) {
  std::vector<OpProfileRow> rows;
  for (const auto& [name, calls] : times) {
    if (calls.empty()) continue;
    std::vector<double> t = calls;
    double sum = 0;
    for (double x : t) sum += x;
    // The upper median of an even count, as the CUDA profile has always printed it.
    std::nth_element(t.begin(), t.begin() + std::ptrdiff_t(t.size() / 2), t.end());
    const double median = t[t.size() / 2];
    rows.push_back({name, calls.size(), median, median * double(calls.size()), sum});
  }
  std::sort(rows.begin(), rows.end(), [](const OpProfileRow& a, const OpProfileRow& b) {
    return a.steady_ms != b.steady_ms ? a.steady_ms > b.steady_ms : a.name < b.name;
  });
  return rows;
}

void print_op_profile(std::FILE* out, const char* clock, const OpTimesMs& times) {
  const std::vector<OpProfileRow> rows = op_profile_rows(times);
  double steady = 0, sum = 0;
  for (const OpProfileRow& r : rows) {
    steady += r.steady_ms;
    sum += r.sum_ms;
  }
  std::fprintf(out,
               "foresight-train: %s time per op (FORESIGHT_PROFILE_OPS), all steps: %.1f ms as calls x median, "
               "%.1f ms summed\n",
               clock, steady, sum);
  std::fprintf(out, "  %12s %7s %12s %10s %6s  %s\n", "calls x med", "calls", "median ms", "sum ms", "share", "op");
  for (const OpProfileRow& r : rows)
    std::fprintf(out, "  %12.2f %7zu %12.4f %10.2f %5.1f%%  %s\n", r.steady_ms, r.calls, r.median_ms, r.sum_ms,
                 steady > 0 ? 100 * r.steady_ms / steady : 0.0, r.name.c_str());
}

}  // namespace foresight::trainer
