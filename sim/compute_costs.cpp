// compute_costs_for: the default compute source, the roofline model on the experiment's GPU,
// driven by a bundled calibration profile (scenarios/profiles/<gpu name>.json) when one exists.
// Attention follows the software that ran the experiment: Megatron-LM and DeepSpeed runs of
// 2021-22 (SC21, MT-NLG, Korthikanti, DeepSpeed-MoE, TeraPipe) predate FlashAttention and used
// the unfused path; the bundled trainer (framework generic) uses a fused kernel. DeepSpeed's MoE
// layers of that time dispatch tokens with dense einsums (cost_models::MoeDispatch).
#include <filesystem>

#include "core/scenario.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costing.hpp"

namespace foresight::sim {

ComputeCosts compute_costs_for(const Experiment& e) {
  using namespace cost_models;
  const auto rc = std::make_shared<RooflineCompute>(e.cluster.gpu, e.training.dtype, roofline_params_for(e.cluster.gpu));
  const std::filesystem::path profile = std::filesystem::path(scenarios_dir()) / "profiles" / (e.cluster.gpu.name + ".json");
  if (std::filesystem::is_regular_file(profile)) rc->use_profile(load_profile(profile.string()));
  const AttentionImpl attn = e.plan.framework == Framework::generic ? AttentionImpl::flash : AttentionImpl::unfused;
  const MoeDispatch dispatch = e.plan.framework == Framework::deepspeed ? MoeDispatch::einsum : MoeDispatch::permute;
  const ModelSpec model = e.model;
  const PlanSpec plan = e.plan;
  ComputeCosts c;
  c.layer = [rc, model, plan, attn, dispatch](int tokens, int context, bool moe) {
    const LayerTimes t = layer_times(*rc, model, plan, tokens, context, moe, attn, dispatch);
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
  c.memory_bound = [rc](Bytes bytes, int launches) { return rc->memory_bound(bytes, launches); };
  return c;
}

}  // namespace foresight::sim
