// How large an iteration the simulators take on. Every engine holds every scheduled pass of every
// pipeline stage (pp x micro-batches x virtual stages x token slices, forward and backward); the
// graph the trace, offload and SimGrid paths build costs far more per pass than the analytic fast
// path; SimGrid instantiates every data-parallel replica. An input beyond these bounds is refused
// with the rule named, rather than exhausting memory. Describing the same input needs no bound.
#pragma once

#include <optional>

#include "core/experiment.hpp"
#include "core/plan.hpp"
#include "sim/prediction.hpp"

namespace foresight::sim {

/// Scheduled passes (forward or backward of one micro-batch through one model chunk, one token
/// slice) the analytic fast path holds: about 45 bytes and 1 us each (10^7: 450 MB, 9 s).
inline constexpr long long kMaxScheduledPasses = 10'000'000;
/// Scheduled passes when the workload graph is built (offload, SimGrid): about 3 KB and 25 us each
/// (3*10^5: 0.9 GB, 8 s). With a trace, about 9 KB each (10^5: 0.9 GB).
inline constexpr long long kMaxGraphPasses = 300'000;
inline constexpr long long kMaxTracedPasses = 100'000;
/// Scheduled passes times data-parallel replicas SimGrid replays: about 3.5 KB and 80 us each
/// (10^6: 3.5 GB, 80 s; the largest bundled experiment, sc21-table1-530b, replays 5.3*10^5).
inline constexpr long long kMaxSimgridPasses = 1'000'000;

/// What a simulation builds, each with its bound(s) above.
enum class SimulationSize {
  fast,          // the analytic fast path
  graph,         // the workload graph
  traced_graph,  // the workload graph and its Chrome trace
  simgrid,       // the workload graph, replayed for every data-parallel replica
};

/// Scheduled passes of one pipeline replica per iteration: pp * 2 * micro-batches * v * slices.
long long scheduled_passes(const Experiment& e);

/// The bound a simulation of `e` would exceed, if any (the planner skips such plans).
std::optional<PlanViolation> simulation_size_violation(const Experiment& e, SimulationSize size);

/// Throws SpecError at the experiment's offending field when the simulation would exceed its bound.
void check_simulation_size(const Experiment& e, SimulationSize size);

}  // namespace foresight::sim
