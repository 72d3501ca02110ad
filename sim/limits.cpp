#include "sim/limits.hpp"

#include <string>

#include "core/error.hpp"

namespace foresight::sim {

long long scheduled_passes(const Experiment& e) {
  const PlanSpec& p = e.plan;
  const long long v = p.model_chunks();
  const long long slices = p.token_slices.empty() ? 1 : (long long)p.token_slices.size();
  // pp * v <= layers and micro-batches < 2^31, but with up to 10^6 token slices the product can
  // pass 2^63: long double, saturated.
  const long double n = (long double)p.pp * v * 2 * p.micro_batches(e.training) * slices;
  return n > 4e18L ? (long long)4e18 : (long long)n;
}

std::optional<PlanViolation> simulation_size_violation(const Experiment& e, SimulationSize size) {
  const PlanSpec& p = e.plan;
  const long long passes = scheduled_passes(e);
  const long long limit = size == SimulationSize::fast           ? kMaxScheduledPasses
                          : size == SimulationSize::traced_graph ? kMaxTracedPasses
                                                                 : kMaxGraphPasses;
  const char* what = size == SimulationSize::fast           ? "the analytic engine holds"
                     : size == SimulationSize::traced_graph ? "a trace holds"
                                                            : "the workload graph holds";
  if (passes > limit)
    return PlanViolation{"training.global_batch", std::to_string(e.training.global_batch),
                         "gives plan.pp * 2 * micro-batches per pipeline (" +
                             std::to_string(p.micro_batches(e.training)) + ") * virtual stages * token slices = " +
                             std::to_string(passes) + " scheduled passes; " + what + " at most " +
                             std::to_string(limit) + " (a larger plan.micro_batch or plan.dp gives fewer)"};
  if (size == SimulationSize::simgrid && (long double)passes * p.dp > kMaxSimgridPasses)
    return PlanViolation{"plan.dp", std::to_string(p.dp),
                         "the simgrid engine replays every data-parallel replica: plan.dp * scheduled passes = " +
                             std::to_string(p.dp) + " * " + std::to_string(passes) + ", more than the " +
                             std::to_string(kMaxSimgridPasses) + " it replays at most; use --engine analytic"};
  return std::nullopt;
}

void check_simulation_size(const Experiment& e, SimulationSize size) {
  if (auto v = simulation_size_violation(e, size)) throw SpecError(e.location_of(v->field), v->field, v->value, v->rule);
}

}  // namespace foresight::sim
