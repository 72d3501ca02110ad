// The analytic engine's fast path for ranking plans: the same list schedule as run_analytic() on
// the workload graph, computed directly from the per-stage schedules without building the graph
// (blocking pipeline sends, no activation offload: the cases where every resource is used by one
// chain of tasks in a fixed order, so start = max(previous on the chain, producer's transfer)).
// tests/sim/fast_engine_test.cpp checks it equals the graph engine on every schedule.
#pragma once

#include <optional>

#include "sim/analytic_engine.hpp"

namespace foresight::sim {

/// Whether run_fast() handles these costs (else use the graph).
bool fast_engine_applies(const WorkloadCosts& c);

/// Iteration time and per-stage breakdown (no per-task timings).
SimResult run_fast(const WorkloadCosts& c);

}  // namespace foresight::sim
