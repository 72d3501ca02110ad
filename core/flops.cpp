#include "core/flops.hpp"

#include <algorithm>

namespace foresight {

namespace {
/// Weights of the attention block: Q (h x q), K and V (h x kv_dim each), output projection (q x h),
/// q = heads x head_dim (= h unless the model sets head_dim).
double attention_weights(const ModelSpec& m) {
  const double h = m.hidden, q = m.q_width();
  if (m.mla) {
    // MLA: queries through a q_lora_rank latent (with its RMSNorm gain) or directly; keys and
    // values from a kv_lora_rank latent plus one shared RoPE key (latent RMSNorm gain), expanded
    // per head to nope + v; output projection from heads x v.
    const MlaSpec& a = *m.mla;
    const double query = a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank + double(a.q_lora_rank) * q : h * q;
    const double kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
                      double(a.kv_lora_rank) * m.heads * (a.qk_nope_head_dim + a.v_head_dim);
    return query + kv + m.v_width() * h;
  }
  const double kv_dim = double(m.kv_heads) * m.head_dim();
  return h * (q + 2.0 * kv_dim) + q * h;
}
double attention_biases(const ModelSpec& m) {
  if (!m.bias) return 0;
  const double kv_dim = double(m.kv_heads) * m.head_dim();
  return (m.q_width() + 2.0 * kv_dim) + m.hidden;
}
}  // namespace

double mla_up_projection_weights(const ModelSpec& m) {
  if (!m.mla) return 0.0;
  const MlaSpec& a = *m.mla;
  const double q_up = a.q_lora_rank > 0 ? double(a.q_lora_rank) * m.q_width() : 0.0;
  return q_up + double(a.kv_lora_rank) * m.heads * (a.qk_nope_head_dim + a.v_head_dim);
}

double ffn_weight_matrices(const ModelSpec& m) { return m.gated() ? 3.0 : 2.0; }

double ffn_parameters(const ModelSpec& m) { return ffn_parameters_of_width(m, m.ffn_hidden); }

double expert_ffn_parameters(const ModelSpec& m) { return ffn_parameters_of_width(m, m.expert_ffn()); }

double ffn_parameters_of_width(const ModelSpec& m, double width) {
  const double f = width, h = m.hidden;
  const double biases = m.bias ? (m.gated() ? 2.0 * f : f) + h : 0.0;
  return ffn_weight_matrices(m) * h * f + biases;
}

double norm_parameters(const ModelSpec& m) { return m.norm == Norm::rmsnorm ? double(m.hidden) : 2.0 * m.hidden; }

double dense_layer_parameters(const ModelSpec& m) {
  const double sinks = m.attention_sinks ? double(m.heads) : 0.0;
  return attention_weights(m) + attention_biases(m) + sinks + ffn_parameters(m) + m.norms_per_layer() * norm_parameters(m);
}

double linear_layer_parameters(const ModelSpec& m) {
  return dense_layer_parameters(m) - m.norms_per_layer() * norm_parameters(m);
}

double embedding_parameters(const ModelSpec& m) {
  const double positions = m.position == PositionEmbedding::learned ? double(m.seq_len) * m.hidden : 0.0;
  const double head = m.tie_embeddings ? 0.0 : double(m.vocab) * m.hidden;
  return double(m.vocab) * m.hidden + positions + head;
}

double moe_ffn_parameters(const ModelSpec& m) {
  if (!m.moe) return ffn_parameters(m);
  const double router = double(m.hidden) * m.moe->experts;
  return (m.moe->experts + m.moe->shared_experts) * expert_ffn_parameters(m) + router;
}

double mtp_projection_parameters(const ModelSpec& m) { return 2.0 * double(m.hidden) * m.hidden; }

namespace {
/// Transformer layer `l`'s parameters (an MoE layer's with all its experts).
double layer_parameters(const ModelSpec& m, int l) {
  return dense_layer_parameters(m) + (m.is_moe_layer(l) ? moe_ffn_parameters(m) - ffn_parameters(m) : 0.0);
}
/// What the MTP modules hold beside their layers: a projection and three norms each.
double mtp_extra_parameters(const ModelSpec& m) {
  return m.mtp_layers * (mtp_projection_parameters(m) + 3.0 * norm_parameters(m));
}
}  // namespace

double mtp_parameters(const ModelSpec& m) {
  double p = mtp_extra_parameters(m);
  for (int l = m.layers; l < m.transformer_layers(); ++l) p += layer_parameters(m, l);
  return p;
}

double parameter_count(const ModelSpec& m) {
  double layers = 0;
  for (int l = 0; l < m.transformer_layers(); ++l) layers += layer_parameters(m, l);
  return layers + embedding_parameters(m) + norm_parameters(m) + mtp_extra_parameters(m);
}

double active_parameter_count(const ModelSpec& m) {
  if (!m.moe) return parameter_count(m);
  const double embeddings = embedding_parameters(m);
  const double active_moe_ffn =
      (m.moe->top_k + m.moe->shared_experts) * expert_ffn_parameters(m) + double(m.hidden) * m.moe->experts;
  double layers = 0;
  for (int l = 0; l < m.transformer_layers(); ++l)
    layers += dense_layer_parameters(m) + (m.is_moe_layer(l) ? active_moe_ffn - ffn_parameters(m) : 0.0);
  return layers + embeddings + norm_parameters(m) + mtp_extra_parameters(m);
}

Flops attention_core_forward_flops(const ModelSpec& m, double tokens, double seq, int window) {
  // QK^T (2 tokens seq q) and AV (2 tokens seq v); q = v = heads x head_dim unless MLA. A
  // windowed layer's queries see at most `window` keys (same convention: no causal halving).
  const double context = window > 0 ? std::min(seq, double(window)) : seq;
  return Flops(2.0 * tokens * context * (m.q_width() + m.v_width()));
}

Flops layer_forward_flops(const ModelSpec& m, double tokens, double seq, bool moe_layer, int window) {
  const double gemm_weights_attn = attention_weights(m);
  double ffn_weights = ffn_weight_matrices(m) * double(m.hidden) * m.ffn_hidden;
  double router = 0;
  if (moe_layer && m.moe) {
    // top_k routed experts and the shared ones, each expert_ffn wide (capacity padding is not
    // counted: model FLOPs).
    ffn_weights = ffn_weight_matrices(m) * double(m.hidden) * m.expert_ffn() * (m.moe->top_k + m.moe->shared_experts);
    router = double(m.hidden) * m.moe->experts;
  }
  return Flops(2.0 * tokens * (gemm_weights_attn + ffn_weights + router)) +
         attention_core_forward_flops(m, tokens, seq, window);
}

Flops logits_forward_flops(const ModelSpec& m, double tokens) {
  return Flops(2.0 * tokens * m.hidden * double(m.vocab));
}

namespace {
Flops layers_forward(const ModelSpec& m, double batch) {
  const double tokens = batch * m.seq_len;
  Flops sum;
  for (int l = 0; l < m.transformer_layers(); ++l)
    sum += layer_forward_flops(m, tokens, m.seq_len, m.is_moe_layer(l), m.window_of(l));
  return sum;
}
}  // namespace

Flops model_flops_per_iteration(const ModelSpec& m, double batch) {
  const double tokens = batch * m.seq_len;
  // Each MTP module adds its layer (in layers_forward), its 2h -> h projection and another pass
  // through the output head (Megatron-Core's num_floating_point_operations: "MTP + final logit").
  const Flops mtp = Flops(2.0 * tokens * mtp_projection_parameters(m) * m.mtp_layers) +
                    logits_forward_flops(m, tokens) * double(m.mtp_layers);
  return 3.0 * (layers_forward(m, batch) + logits_forward_flops(m, tokens) + mtp);
}

Flops hardware_flops_per_iteration(const ModelSpec& m, double batch, Recompute recompute) {
  const Flops model = model_flops_per_iteration(m, batch);
  switch (recompute) {
    case Recompute::none: return model;
    case Recompute::full: return model + layers_forward(m, batch);
    case Recompute::selective_op: {
      // torchtitan's per-op policy re-runs the unsaved matmuls: wk and wo, and w3 of a gated block
      // (fc2 of an ungated one); MoE and MLA blocks are refused with it (check_plan).
      const double tokens = batch * m.seq_len;
      const double k = double(m.kv_heads) * m.head_dim();
      const double per_layer = double(m.hidden) * (k + m.v_width()) + double(m.hidden) * m.ffn_hidden;
      return model + Flops(2.0 * tokens * per_layer * m.transformer_layers());
    }
    case Recompute::selective: {
      Flops cores;
      for (int l = 0; l < m.transformer_layers(); ++l)
        cores += attention_core_forward_flops(m, batch * m.seq_len, m.seq_len, m.window_of(l));
      return model + cores;
    }
  }
  return model;
}

Flops hardware_flops_per_iteration(const ModelSpec& m, double batch, const PlanSpec& plan) {
  if (plan.recompute != Recompute::full || plan.recompute_layers <= 0) {
    Flops f = hardware_flops_per_iteration(m, batch, plan.recompute);
    // Recomputed MLA up-projections (plan.recompute_modules.mla_up_proj) re-run their GEMMs in
    // every layer: 2 FLOPs per weight and token; the norms and the activation are elementwise.
    if (plan.recompute != Recompute::full) {
      const RecomputeModules& mods = plan.recompute_modules;
      const double tokens = batch * m.seq_len;
      if (mods.mla_up_proj) f += Flops(2.0 * tokens * mla_up_projection_weights(m) * m.transformer_layers());
      // Checkpointed submodules re-run their GEMMs: a dense layer's FFN, an MoE layer's router and
      // its top_k routed and shared experts (model FLOPs: no capacity padding), or its shared
      // experts alone.
      const double matrices = ffn_weight_matrices(m) * double(m.hidden);
      for (int l = 0; l < m.transformer_layers(); ++l) {
        const bool moe = m.is_moe_layer(l) && m.moe;
        double weights = 0;
        if (mods.mlp && !moe) weights = matrices * m.ffn_hidden;
        if (mods.moe && moe)
          weights = matrices * m.expert_ffn() * (m.moe->top_k + m.moe->shared_experts) + double(m.hidden) * m.moe->experts;
        else if (mods.shared_experts && moe)
          weights = matrices * m.expert_ffn() * m.moe->shared_experts;
        f += Flops(2.0 * tokens * weights);
      }
    }
    return f;
  }
  const double tokens = batch * m.seq_len;
  // Micro-batch-level recompute (1F1B only): a layer outside the block re-runs its forward for the
  // share of its stage's micro-batches that recompute every layer.
  const int micro_batches = int(batch / (double(plan.dp) * plan.micro_batch));
  const std::vector<int> first = stage_first_layers(m, plan);
  Flops again;
  for (int l = 0; l < m.transformer_layers(); ++l) {
    double share = recomputes_layer(m, plan, l) ? 1.0 : 0.0;
    if (share == 0.0 && plan.partial_recompute_microbatches > 0 && l < m.layers) {
      const int stage = int(std::upper_bound(first.begin(), first.end(), l) - first.begin()) - 1;
      share = whole_recompute_microbatch_share(plan, stage, micro_batches);
    }
    again += layer_forward_flops(m, tokens, m.seq_len, m.is_moe_layer(l), m.window_of(l)) * share;
  }
  return model_flops_per_iteration(m, batch) + again;
}

Flops narayanan_eq3_flops(double B, double s, double l, double h, double V) {
  return Flops(96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h)));
}

}  // namespace foresight
