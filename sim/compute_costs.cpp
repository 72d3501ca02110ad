// compute_costs: the compute side of costing from an experiment's resolved execution model: the
// roofline on its GPU (with the part of the GPU's calibration profile that matches what the
// execution runs), the framework's attention kernel, MoE dispatch and elementwise kernels
// (cost_models/roofline.hpp layer_times, edge_times, optimizer_time).
#include "cost_models/roofline.hpp"
#include "sim/costing.hpp"

namespace foresight::sim {

ComputeCosts compute_costs(const Experiment& e, const cost_models::ExecutionModel& x) {
  using namespace cost_models;
  const ModelSpec model = e.model;
  const PlanSpec plan = e.plan;
  ComputeCosts c;
  c.layer = [x, model, plan](int tokens, int context, bool moe, int window) {
    const LayerTimes t = layer_times(x, model, plan, tokens, context, moe, window);
    Seconds recompute;
    if (plan.recompute == Recompute::full) recompute = t.recompute_full();
    if (plan.recompute == Recompute::selective) recompute = t.recompute_selective();
    if (plan.recompute == Recompute::selective_op) recompute = t.recompute_selective_op();
    const LayerOpTimes& F = t.forward_ops;
    const LayerOpTimes& B = t.backward_ops;
    return LayerCompute{t.forward(),
                        t.backward(),
                        recompute,
                        F.attention_core,
                        B.attention_core,
                        {F.qkv, F.projection, F.fc1, F.fc2},
                        {B.qkv, B.projection, B.fc1, B.fc2},
                        F.fc1 + F.gelu + F.fc2 + F.moe_permute,
                        B.fc1 + B.gelu + B.fc2 + B.moe_permute};
  };
  c.edges = [x, model, plan](int tokens) {
    const EdgeTimes t = edge_times(x, model, plan, tokens);
    return EdgeCompute{t.embedding_forward, t.embedding_backward, t.head_forward, t.head_backward};
  };
  c.optimizer = [x](double params) { return optimizer_time(x, params); };
  const std::shared_ptr<const RooflineCompute> rc = x.compute;
  c.memory_bound = [rc](Bytes bytes, int launches) { return rc->memory_bound(bytes, launches); };
  return c;
}

}  // namespace foresight::sim
