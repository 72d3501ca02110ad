// The fixture the coster tests share: an experiment, its execution model (element sizes and the
// framework's entry; the compute source is the test's own), the comm model of its cluster and a
// WorkloadCosts shaped for its plan, for the costers to fill one at a time.
#pragma once

#include <utility>

#include "cost_models/memory.hpp"
#include "sim/costers.hpp"

namespace foresight::sim::fixtures {

struct Costed {
  Experiment e;
  cost_models::ExecutionModel x;
  ComputeCosts compute;
  CommModel comm;
  WorkloadCosts c;
  Costed(Experiment ex, ComputeCosts cc)
      : e(std::move(ex)), x(cost_models::execution_model(e.training, e.plan)), compute(std::move(cc)), comm(e.cluster) {
    c.shape = ScheduleShape{e.plan.schedule, e.plan.pp, e.plan.micro_batches(e.training),
                            e.plan.schedule == Schedule::interleaved ? e.plan.virtual_stages : 1,
                            e.plan.token_slices.empty() ? 1 : int(e.plan.token_slices.size())};
  }
  CostInputs in() const { return {e, x, compute, comm}; }
  /// Parameters one GPU of `stage` holds.
  double params(int stage) const {
    return cost_models::parameters_on_gpu(*x.framework, e.model, e.plan, stage).total();
  }
};

}  // namespace foresight::sim::fixtures
