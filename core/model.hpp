// A decoder-only transformer as the scenario files describe it (GPT-style: learned positions,
// pre-LayerNorm, GeLU MLP, tied input/output embeddings), optionally with Mixture-of-Experts FFNs.
// Parameter and FLOP counts for it live in core/flops.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace foresight {

/// Mixture-of-Experts FFN layers (Switch/GShard style, as in DeepSpeed-MoE).
struct MoeSpec {
  int experts = 0;               // experts per MoE layer
  int top_k = 1;                 // experts each token is routed to
  double capacity_factor = 1.0;  // expert capacity = factor * tokens * top_k / experts
  int every = 1;                 // every N-th layer's FFN is an MoE layer (2 = every other)
  /// Dropless routing (MegaBlocks, Gale et al. 2023; Megatron-Core's grouped GEMM without a
  /// capacity): every routed token is processed, no padding; capacity_factor does not apply.
  bool dropless = false;
  /// Dropless: tokens of the busiest expert over the mean (>= 1): the load imbalance the step
  /// waits for (a stated factor; 1 = perfectly balanced).
  double imbalance = 1.0;
  int expert_ffn_hidden = 0;  // one expert's FFN width; 0: model.ffn_hidden (fine-grained experts are narrower)
  int shared_experts = 0;     // experts every token passes through (DeepSeekMoE), expert_ffn_hidden wide each
  int first_dense = 0;        // the first N layers keep a dense FFN (DeepSeek-V3: 3)
  /// Node-limited routing: each token's experts lie on at most this many nodes of its expert-
  /// parallel group (DeepSeek-V3 sec. 2.1.2: M = 4; DeepSeek-V2's device-limited routing limits
  /// devices instead). 0: unlimited. Only the node-deduplicating dispatcher (plan.ep_dispatcher
  /// = deepep) sends less for it.
  int max_nodes = 0;
  /// Expert passes per token a GPU's experts see on the busiest rank: top_k x capacity_factor, or
  /// dropless top_k x imbalance.
  double routed_factor() const { return top_k * (dropless ? imbalance : capacity_factor); }
};

/// Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, sec. 2.1): queries and keys/values
/// pass through low-rank latents; each head's query/key has a no-position part and a RoPE part.
struct MlaSpec {
  int q_lora_rank = 0;        // 0: queries projected directly from the hidden state
  int kv_lora_rank = 512;
  int qk_nope_head_dim = 128;
  int qk_rope_head_dim = 64;  // shared across heads for the keys (one RoPE key per token)
  int v_head_dim = 128;
};

/// Sliding-window (local) attention: a query attends to itself and the size - 1 positions before
/// it (Mistral 7B, Jiang et al. 2023, arXiv:2310.06825; GPT-OSS, OpenAI 2025 model card: 128
/// tokens on every other layer; Gemma 2/3: local layers between global ones).
struct AttentionWindowSpec {
  int size = 0;  // tokens visible to a query, itself included
  /// Which layers are windowed, repeating from layer 0: 1 = windowed, 0 = full attention
  /// (GPT-OSS [1, 0]; Gemma 3 [1, 1, 1, 1, 1, 0]). Empty: every layer.
  std::vector<int> pattern;
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
  std::optional<MlaSpec> mla = std::nullopt;  // multi-head latent attention instead of (grouped-query) attention
  Activation activation = Activation::gelu;
  /// Width of one attention head; 0: hidden / heads. Set where heads x head_dim != hidden
  /// (GPT-OSS, Qwen3, PaLM).
  int attention_head_dim = 0;
  bool tie_embeddings = true;  // the LM head reuses the input embedding (GPT); false: its own matrix
  PositionEmbedding position = PositionEmbedding::learned;
  Norm norm = Norm::layernorm;
  bool bias = true;  // the linear layers have biases (GPT-2/3); Llama-style models have none
  std::optional<AttentionWindowSpec> attention_window = std::nullopt;
  /// A learned logit per head added to every softmax's denominator (GPT-OSS "attention sinks"):
  /// heads parameters per layer, no GEMM work.
  bool attention_sinks = false;
  /// Attention and MLP read the same layer input and their outputs are summed into the residual
  /// (GPT-J, GPT-NeoX, PaLM sec. 2): with tensor parallelism one all-reduce (or all-gather +
  /// reduce-scatter) per direction instead of two, as GPT-NeoX's gpt_j_residual does.
  bool parallel_block = false;
  /// Norms per layer in a parallel block: 1 (GPT-J, PaLM: one norm feeds both branches) or 2
  /// (GPT-NeoX-20B: one per branch, both over the same input). A sequential block has 2.
  int parallel_block_norms = 1;
  /// Multi-token prediction modules (DeepSeek-V3, arXiv:2412.19437 sec. 2.2, depth D; Megatron-Core
  /// --mtp-num-layers, megatron/core/transformer/multi_token_prediction.py): D sequential modules
  /// after the last layer, each an RMSNorm of the hidden state and of the next token's embedding,
  /// a linear projection of their concatenation from 2h to h, one transformer layer of the last
  /// layer's kind and its own final norm; each reads the shared embedding and ends in the shared
  /// output head with its own loss. They sit with the head on the last pipeline segment
  /// (Megatron-Core's default layout; DeepSeek-V3 keeps embedding, head and MTP on one PP rank).
  /// Their transformer layers are numbered layers .. layers + mtp_layers - 1.
  int mtp_layers = 0;
  /// Whether the training recipe applies hidden and attention dropout (stored 1-byte masks).
  /// Unset: the framework's recipe default (ActivationLayout::dropout: Megatron-LM's and
  /// DeepSpeed's GPT recipes use 0.1). Llama-, Qwen-, DeepSeek- and Nemotron-style recipes train
  /// without (false); with probability 0 no mask is made (ATen's dropout returns its input).
  std::optional<bool> dropout = std::nullopt;
  /// Masks stored: the recipe's choice, else the framework's.
  bool stores_dropout_masks(bool framework_default) const { return dropout.value_or(framework_default); }

  /// Transformer layers the model computes: its own and those of its MTP modules.
  int transformer_layers() const { return layers + mtp_layers; }
  int head_dim() const { return attention_head_dim > 0 ? attention_head_dim : hidden / heads; }
  /// Width of the queries and keys (QK^T's inner dimension summed over heads): heads x head_dim,
  /// = hidden by default; MLA: heads x (nope + rope).
  double q_width() const {
    return mla ? double(heads) * (mla->qk_nope_head_dim + mla->qk_rope_head_dim) : double(heads) * head_dim();
  }
  /// Width of the values and of the attention output: q_width, MLA heads x v_head_dim.
  double v_width() const { return mla ? double(heads) * mla->v_head_dim : q_width(); }
  /// Width of the keys and of the values each stored per token after projection (one of the
  /// two): kv_heads x head_dim; MLA (keys and values expanded from the latent per head) the mean
  /// of q_width and v_width.
  double kv_width() const { return mla ? (q_width() + v_width()) / 2 : double(kv_heads) * head_dim(); }
  /// Norms in one layer (the final norm not included).
  int norms_per_layer() const { return parallel_block ? parallel_block_norms : 2; }
  /// Positions a query of layer `layer` (0-based) may see at most: the window, or 0 for full
  /// (causal) attention.
  int window_of(int layer) const {
    if (layer >= layers && layers > 0) return window_of(layers - 1);  // an MTP module's layer
    if (!attention_window || attention_window->size <= 0) return 0;
    const std::vector<int>& pat = attention_window->pattern;
    if (pat.empty()) return attention_window->size;
    return pat[std::size_t(layer) % pat.size()] != 0 ? attention_window->size : 0;
  }
  bool gated() const { return activation == Activation::swiglu || activation == Activation::geglu; }
  /// Number of layers whose FFN is a Mixture-of-Experts layer.
  int moe_layers() const {
    int n = 0;
    for (int l = 0; l < layers; ++l) n += is_moe_layer(l);
    return n;
  }
  /// One expert's FFN width.
  int expert_ffn() const { return moe && moe->expert_ffn_hidden > 0 ? moe->expert_ffn_hidden : ffn_hidden; }
  /// Whether layer `layer` (0-based) has an MoE FFN: every `every`-th layer counting from the
  /// `every`-th (DeepSpeed-MoE's placement, 1-based even layers for every = 2). The one rule the
  /// FLOP counts, the memory model and the trainer all use.
  /// An MTP module's layer (layer >= layers) is of the last layer's kind (Megatron-Core builds it
  /// from the decoder's last layer spec; DeepSeek-V3's is an MoE layer).
  bool is_moe_layer(int layer) const {
    if (layer >= layers && layers > 0) return is_moe_layer(layers - 1);
    return moe && moe->every > 0 && layer >= moe->first_dense && (layer + 1) % moe->every == 0;
  }
};

}  // namespace foresight
