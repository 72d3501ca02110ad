// compute_costs_for: the default compute source, the roofline model on the experiment's GPU.
// Attention follows the software that ran the experiment: Megatron-LM and DeepSpeed runs of
// 2021-22 (SC21, MT-NLG, Korthikanti, DeepSpeed-MoE, TeraPipe) predate FlashAttention and used
// the unfused path; the bundled trainer (framework generic) uses a fused kernel.
#include "cost_models/roofline.hpp"
#include "sim/costing.hpp"

namespace foresight::sim {

ComputeCosts compute_costs_for(const Experiment& e) {
  using namespace cost_models;
  const auto rc = std::make_shared<RooflineCompute>(e.cluster.gpu, e.training.dtype);
  const AttentionImpl attn = e.plan.framework == Framework::generic ? AttentionImpl::flash : AttentionImpl::unfused;
  const ModelSpec model = e.model;
  const PlanSpec plan = e.plan;
  ComputeCosts c;
  c.layer = [rc, model, plan, attn](int tokens, int context, bool moe) {
    const LayerTimes t = layer_times(*rc, model, plan, tokens, context, moe, attn);
    Seconds recompute;
    if (plan.recompute == Recompute::full) recompute = t.recompute_full();
    if (plan.recompute == Recompute::selective) recompute = t.recompute_selective();
    return LayerCompute{t.forward(), t.backward(), recompute};
  };
  c.edges = [rc, model, plan](int tokens) {
    const EdgeTimes t = edge_times(*rc, model, plan, tokens);
    return EdgeCompute{t.embedding_forward, t.embedding_backward, t.head_forward, t.head_backward};
  };
  c.optimizer = [rc](double params) { return optimizer_time(*rc, params); };
  return c;
}

}  // namespace foresight::sim
