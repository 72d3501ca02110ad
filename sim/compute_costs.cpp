// compute_costs: the compute side of costing from an experiment's resolved execution model: the
// roofline on its GPU (with the part of the GPU's calibration profile that matches what the
// execution runs), the framework's attention kernel, MoE dispatch and elementwise kernels
// (cost_models/roofline.hpp layer_times, edge_times, optimizer_time).
#include <algorithm>

#include "core/flops.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costing.hpp"

namespace foresight::sim {

namespace {
Seconds recompute_mode(const cost_models::LayerTimes& t, Recompute mode) {
  switch (mode) {
    case Recompute::full: return t.recompute_full();
    case Recompute::selective: return t.recompute_selective();
    case Recompute::selective_op: return t.recompute_selective_op();
    case Recompute::none: break;
  }
  return Seconds(0);
}

/// What the backward re-runs: the plan's recompute mode and, beside it, its recompute modules
/// (plan.recompute_modules): the norms, MLA's up-projections, the routed experts' activation, and whole
/// checkpointed submodules: a dense layer's MLP (Transformer Engine's LayerNormMLP path: its norm,
/// FC1, activation, FC2), an MoE layer's MoE block (router, permutes, experts, shared experts) or
/// its shared experts alone. A checkpointed submodule's FP8 casts run again too: priced as the
/// submodule's share of the layer's GEMM time (the casts are per GEMM input and output gradient).
/// Its collectives are layer_step's (cost_chunks.cpp).
Seconds recompute_of(const cost_models::LayerTimes& t, const ModelSpec& m, const PlanSpec& p, bool moe) {
  Seconds r = recompute_mode(t, p.recompute);
  if (p.recompute == Recompute::full) return r;
  const RecomputeModules& mods = p.recompute_modules;
  const cost_models::LayerOpTimes& f = t.forward_ops;
  const Seconds gemms = f.qkv + f.projection + f.fc1 + f.fc2;
  auto casts_of = [&](Seconds part) { return gemms > Seconds(0) ? f.fp8_casts * (part / gemms) : Seconds(0); };
  if (mods.layernorm) r += f.layernorms;
  if (mods.mla_up_proj && m.mla) r += t.mla_up_projections;
  // Nested checkpoints add up: an output-discarding one inside a recomputed submodule discards
  // again what the submodule's recompute made, and re-runs it once more before its backward.
  if (mods.moe_act && moe) r += f.gelu - t.shared_experts_activation;
  // A dense layer's FFN norm is fused into FC1 (TELayerNormColumnParallelLinear), in the checkpoint.
  if (mods.mlp && !moe) r += 0.5 * f.layernorms + f.fc1 + f.gelu + f.fc2 + casts_of(f.fc1 + f.fc2);
  if (mods.moe && moe) {
    r += f.moe_router + f.moe_permute + f.fc1 + f.gelu + f.fc2 + casts_of(f.fc1 + f.fc2);
  } else if (mods.shared_experts && moe) {
    r += t.shared_experts_gemms + t.shared_experts_activation + casts_of(t.shared_experts_gemms);
  }
  return r;
}
}  // namespace

ComputeCosts compute_costs(const Experiment& e, const cost_models::ExecutionModel& x) {
  using namespace cost_models;
  const ModelSpec model = e.model;
  const PlanSpec plan = e.plan;
  ComputeCosts c;
  c.layer = [x, model, plan](int tokens, int context, bool moe, int window) {
    const LayerTimes t = layer_times(x, model, plan, tokens, context, moe, window);
    const Seconds recompute = recompute_of(t, model, plan, moe);
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
    return EdgeCompute{t.embedding_forward, t.embedding_backward, t.head_forward,
                       t.head_backward,     t.mtp_forward,        t.mtp_backward,
                       t.head_weight_grad};
  };
  c.optimizer = [x](double params) { return optimizer_time(x, params); };
  const std::shared_ptr<const RooflineCompute> rc = x.compute;
  c.memory_bound = [rc](Bytes bytes, int launches) { return rc->memory_bound(bytes, launches); };
  return c;
}

OpsBreakdown ops_breakdown(const Experiment& e, const cost_models::ExecutionModel& x) {
  const ModelSpec& m = e.model;
  const PlanSpec& p = e.plan;
  OpsBreakdown out;
  const int tokens = p.local_tokens(m), context = attention_context(e);
  for (int l = 0; l < m.layers; ++l) {
    const bool moe = m.is_moe_layer(l);
    const int window = m.window_of(l);
    auto it = std::find_if(out.kinds.begin(), out.kinds.end(),
                           [&](const LayerKindOps& k) { return k.moe == moe && k.window == window; });
    if (it != out.kinds.end()) {
      ++it->layers;
      continue;
    }
    LayerKindOps k;
    k.moe = moe;
    k.window = window;
    k.layers = 1;
    k.tokens = tokens;
    k.context = context;
    k.times = cost_models::layer_times(x, m, p, tokens, context, moe, window);
    k.recompute = recompute_of(k.times, m, p, moe);
    out.kinds.push_back(k);
  }
  out.edges = cost_models::edge_times(x, m, p, tokens);
  return out;
}

}  // namespace foresight::sim
