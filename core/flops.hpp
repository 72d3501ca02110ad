// Parameter and FLOP counts of a decoder-only transformer, per Narayanan et al. 2021 (SC21,
// "Efficient Large-Scale Language Model Training on GPU Clusters", sec. 5.1 and appendix eq. 3),
// generalised to any ffn_hidden, grouped-query attention and MoE FFNs. Conventions: a multiply-add
// is 2 FLOPs; attention scores count the full s^2 (no causal halving), as eq. 3 does; backward
// costs twice the forward. What is left out: layernorm, softmax, GeLU and bias FLOPs (<1%).
#pragma once

#include "core/enums.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"

namespace foresight {

/// Parameters of one dense transformer layer: QKV, output projection, two FFN GEMMs, their biases,
/// the norms (two; a parallel block's one or two) and attention sinks if any (Megatron: 12h^2 +
/// 13h when ffn = 4h and kv_heads = heads).
double dense_layer_parameters(const ModelSpec& m);
/// MLA: the up-projections' weights (query latent to queries, key/value latent to keys and values)
/// per layer; 0 without MLA.
double mla_up_projection_weights(const ModelSpec& m);

/// One FFN (or one expert): its weight matrices (2, or 3 for a gated activation) of h x ffn, and
/// biases where the model has them.
double ffn_parameters(const ModelSpec& m);
double ffn_parameters_of_width(const ModelSpec& m, double width);
/// One routed (or shared) expert: an FFN of model.moe.expert_ffn_hidden (default ffn_hidden).
double expert_ffn_parameters(const ModelSpec& m);
double ffn_weight_matrices(const ModelSpec& m);
/// One norm's parameters: gain and bias (LayerNorm), gain only (RMSNorm).
double norm_parameters(const ModelSpec& m);
/// A dense layer's parameters less its norms: its Linear layers' weights and biases (and sinks),
/// the GEMM operands a precision recipe casts.
double linear_layer_parameters(const ModelSpec& m);
/// Input embedding, learned positions (if any) and an untied output matrix (if any).
double embedding_parameters(const ModelSpec& m);

/// One MTP module's projection (ModelSpec::mtp_layers): 2h x h, no bias (Megatron-Core eh_proj).
double mtp_projection_parameters(const ModelSpec& m);
/// All MTP modules' own parameters: projection, three norms (enorm, hnorm, final) and the
/// transformer layer; their embedding and output head are the model's.
double mtp_parameters(const ModelSpec& m);

/// Parameters of one MoE layer's FFN part across all experts plus the router (experts x FFN).
double moe_ffn_parameters(const ModelSpec& m);

/// All parameters: layers, token and position embeddings (tied output), final layernorm, and the
/// MTP modules' own (mtp_parameters).
double parameter_count(const ModelSpec& m);

/// Parameters a token actually touches (MoE: top_k experts instead of all).
double active_parameter_count(const ModelSpec& m);

/// Forward FLOPs of one transformer layer for `tokens` tokens with context length `seq`:
/// GEMMs 2*tokens*(QKV + proj + FFN weights) plus attention 4*tokens*seq*h (QK^T and AV).
/// MoE layers count top_k experts per token and the router; a layer with a sliding window
/// (`window` > 0, ModelSpec::window_of) attends to min(window, seq) positions per token.
Flops layer_forward_flops(const ModelSpec& m, double tokens, double seq, bool moe_layer, int window = 0);

/// Forward FLOPs of the attention core alone (QK^T, AV): 4*tokens*seq*h, or with a window
/// 4*tokens*min(window, seq)*h.
Flops attention_core_forward_flops(const ModelSpec& m, double tokens, double seq, int window = 0);

/// Forward FLOPs of the LM head (logits): 2*tokens*h*V.
Flops logits_forward_flops(const ModelSpec& m, double tokens);

/// Model FLOPs of one iteration (forward + backward = 3x forward; no recompute), for `batch`
/// sequences. For a dense model with ffn = 4h this is Korthikanti 2022 eq. (model FLOPs):
/// 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
Flops model_flops_per_iteration(const ModelSpec& m, double batch);

/// Hardware FLOPs: model FLOPs plus what recompute adds (full: one more forward of every layer,
/// Narayanan eq. 3 = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)); selective: the attention core again).
Flops hardware_flops_per_iteration(const ModelSpec& m, double batch, Recompute recompute);
/// The same for a plan: with plan.recompute_layers (block recompute) only the layers it recomputes
/// (core/plan.hpp recomputes_layer) run their forward twice; with partial_recompute_microbatches
/// the others run it again for the micro-batches that recompute every layer. `batch` is the
/// global batch (micro-batches per pipeline follow from plan.dp and plan.micro_batch).
Flops hardware_flops_per_iteration(const ModelSpec& m, double batch, const PlanSpec& plan);

/// Narayanan et al. 2021 eq. 3 written literally (dense, ffn = 4h, full recompute): a cross-check.
Flops narayanan_eq3_flops(double batch, double seq, double layers, double hidden, double vocab);

}  // namespace foresight
