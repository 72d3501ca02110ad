// A decoder-only transformer as the scenario files describe it (GPT-style: learned positions,
// pre-LayerNorm, GeLU MLP, tied input/output embeddings), optionally with Mixture-of-Experts FFNs.
// Parameter and FLOP counts for it live in core/flops.hpp.
#pragma once

#include <optional>
#include <string>

#include "core/enums.hpp"

namespace foresight {

/// Mixture-of-Experts FFN layers (Switch/GShard style, as in DeepSpeed-MoE).
struct MoeSpec {
  int experts = 0;               // experts per MoE layer
  int top_k = 1;                 // experts each token is routed to
  double capacity_factor = 1.0;  // expert capacity = factor * tokens * top_k / experts
  int every = 1;                 // every N-th layer's FFN is an MoE layer (2 = every other)
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
  int ffn_hidden = 0;  // defaults to 4 * hidden (complete_model, core/spec_fields.hpp)
  int kv_heads = 0;    // defaults to heads (multi-head attention); fewer = grouped-query
  std::optional<MoeSpec> moe;
  Activation activation = Activation::gelu;
  /// Width of one attention head; 0: hidden / heads. Set where heads x head_dim != hidden
  /// (GPT-OSS, Qwen3, PaLM).
  int attention_head_dim = 0;
  bool tie_embeddings = true;  // the LM head reuses the input embedding (GPT); false: its own matrix
  PositionEmbedding position = PositionEmbedding::learned;
  Norm norm = Norm::layernorm;
  bool bias = true;  // the linear layers have biases (GPT-2/3); Llama-style models have none

  int head_dim() const { return attention_head_dim > 0 ? attention_head_dim : hidden / heads; }
  /// Width of the queries (and of the attention output): heads x head_dim, = hidden by default.
  double q_width() const { return double(heads) * head_dim(); }
  bool gated() const { return activation == Activation::swiglu || activation == Activation::geglu; }
  /// Number of layers whose FFN is a Mixture-of-Experts layer.
  int moe_layers() const { return moe ? layers / moe->every : 0; }
  /// Whether layer `layer` (0-based) has an MoE FFN: every `every`-th layer counting from the
  /// `every`-th (DeepSpeed-MoE's placement, 1-based even layers for every = 2). The one rule the
  /// FLOP counts, the memory model and the trainer all use.
  bool is_moe_layer(int layer) const { return moe && moe->every > 0 && (layer + 1) % moe->every == 0; }
};

}  // namespace foresight
