// The analytic engine: list scheduling of the workload graph over its resources with the
// durations the cost models gave, no network contention. A task starts when its predecessors
// have finished and every resource it holds is free; ready tasks go in (ready time, creation)
// order. Fast enough to rank thousands of plans per second.
#pragma once

#include <array>
#include <vector>

#include "sim/workload.hpp"

namespace foresight::sim {

struct TaskTiming {
  Seconds start, finish;
};

/// Where one stage's iteration time went; the parts add up to the iteration time.
struct StageBreakdown {
  int stage = 0;
  std::array<Seconds, kCategories> busy{};  // compute-stream time by category (dp_comm: exposed only)
  Seconds idle;                             // compute stream waiting: pipeline bubble and exposed transfers
  Seconds pp_wait;                          // part of idle spent waiting for a transfer that was running
  Seconds offload_wait;                     // part of idle spent waiting for a prefetch from host memory
  Seconds total() const;
  Seconds busy_total() const;
};

struct SimResult {
  Seconds iteration;
  std::vector<TaskTiming> timings;  // by TaskId
  std::vector<StageBreakdown> stages;
  int critical_stage = 0;  // the stage with the most busy time (it sets the pace)
};

SimResult run_analytic(const Workload& w);

/// Sets each stage's idle time (iteration - busy) and the critical stage (most busy; first on ties).
void settle_stages(SimResult& r);

/// The iteration time and per-stage breakdown from task timings (any engine's).
SimResult summarize(const Workload& w, std::vector<TaskTiming> timings);

}  // namespace foresight::sim
