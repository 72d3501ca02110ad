// Simulator benchmarks (issue: simulator targets): how many MT-NLG-size iterations the analytic
// engine evaluates per second on one core, and the wall time and peak memory of one SimGrid
// iteration of MT-NLG 530B on 420 Selene nodes, with the default cost models.
// Usage: bench_sim [--repeat N] [--json]; prints medians of N runs.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario.hpp"
#include "sim/costing.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json")) json = true;
  }
  nlohmann::ordered_json out;

  // Analytic engine: full predict() (costing + graph + schedule) per evaluation.
  {
    const Experiment e = load_experiment(resolve_scenario("experiments", "mt-nlg-530b-selene-280"));
    const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
    const CommModel comm(e.cluster, x.calibrated);
    const ComputeCosts compute = compute_costs(e, x);
    std::vector<double> rates;
    for (int r = 0; r < repeat; ++r) {
      const int n = 200;
      const double t0 = now_s();
      for (int i = 0; i < n; ++i) predict({e, x, compute, comm}, EngineKind::analytic);
      rates.push_back(n / (now_s() - t0));
    }
    out["analytic_mtnlg280_evaluations_per_s"] = median(rates);
  }
  // SimGrid engine on 420 nodes (3360 GPUs): one iteration, wall time and child peak memory.
  if (simgrid_available()) {
    const Experiment e = load_experiment(resolve_scenario("experiments", "mt-nlg-530b-selene-420"));
    const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
    const CommModel comm(e.cluster, x.calibrated);
    const ComputeCosts compute = compute_costs(e, x);
    std::vector<double> walls;
    Prediction p;
    for (int r = 0; r < std::min(repeat, 3); ++r) {
      const double t0 = now_s();
      p = predict({e, x, compute, comm}, EngineKind::simgrid);
      walls.push_back(now_s() - t0);
    }
    struct rusage ru {};
    getrusage(RUSAGE_CHILDREN, &ru);
    out["simgrid_mtnlg420_wall_s"] = median(walls);
    out["simgrid_mtnlg420_child_peak_rss_MiB"] = ru.ru_maxrss / 1024.0;
    out["simgrid_mtnlg420_iteration_s"] = p.iteration.value();
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    for (auto& [k, v] : out.items()) std::cout << k << ": " << v << "\n";
  }
  return 0;
}
