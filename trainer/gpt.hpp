// The part of a GPT model (GPT-2 style: learned positions, pre-LayerNorm, GeLU MLP, embedding tied
// to the output layer) that one pipeline stage holds on one tensor-parallel rank, with forward and
// backward of one micro-batch. The first stage embeds (vocabulary-parallel table, Megatron-LM),
// the last stage applies the final LayerNorm, the tied output layer and a vocabulary-parallel
// cross-entropy. With pp > 1 the last stage keeps its own copy of the embedding table; the trainer
// all-reduces its gradient with the first stage's, so both copies stay equal. With the interleaved
// schedule a rank holds several model chunks (virtual stages, one GptStage each): chunk c of
// pipeline rank p is virtual stage c * pp + p, the embedding lives on virtual stage 0 and the head
// on the last (Narayanan et al. 2021 sec. 2.2).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/enums.hpp"
#include "core/model.hpp"
#include "trainer/layer.hpp"
#include "trainer/offload.hpp"
#include "trainer/layout.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {

/// The tokens of one micro-batch: inputs and next-token targets, (batch*seq) each.
struct MicroBatch {
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
};

/// How a stage runs: micro-batch size, recompute, sequence parallelism, and which model chunk
/// (virtual stage) of its pipeline rank it is.
struct StageConfig {
  int micro_batch = 1;
  Recompute recompute = Recompute::none;
  /// plan.recompute_layers: with full recompute only the chunk's first N layers re-run their
  /// forward; the others keep their activations (0: every layer).
  int recompute_layers = 0;
  bool sequence_parallel = false;  // effective only with tp > 1
  int chunk = 0;                   // model chunk of this pipeline rank
  int chunks = 1;                  // plan.virtual_stages
  double offload_activations = 0;  // plan.offload.activations: fraction of layers whose activations go to the host
  Communicator* ep_comm = nullptr;  // MoE: the expert-parallel group (size plan.ep; rank = dp rank % ep)
  std::vector<int> token_slices = {};  // TeraPipe slice lengths (sum seq_len); empty = the whole sequence
  /// This chunk's transformer layers [first_layer, first_layer + layers) (an uneven pipeline split,
  /// plan.stage_layers); layers < 0: layers / (pp * chunks) from chunk * pp + pp_rank on.
  int first_layer = 0;
  int layers = -1;
};

class GptStage {
 public:
  /// Declares this rank's parameters in `store` (which the caller then allocates).
  GptStage(const ModelSpec& model, const RankLayout& layout, const StageConfig& config, ParamStore& store);

  /// `id` names a pipeline unit: micro-batch id / slices(), TeraPipe slice id % slices() (every
  /// unit a whole micro-batch without slices). A micro-batch's slices run forward in order and
  /// backward in reverse order; a slice attends to the cached keys/values of the earlier ones.
  /// Runs the forward of unit `id`. `input` is the previous stage's output (unused on
  /// the first stage, which embeds `data.inputs`). Returns the output to send on (not on the last
  /// stage, which returns an undefined tensor and keeps the summed token loss for loss_sum()).
  Tensor forward(Backend& be, Communicator& tp, int id, const MicroBatch& data, const Tensor& input);

  /// Runs the backward of micro-batch `id`; `grad_output` comes from the next stage (unused on the
  /// last stage, whose gradient is `loss_scale` * d(summed token loss)). Returns the gradient for
  /// the previous stage (undefined on the first stage). `ready(i)` is called for each parameter
  /// index once its gradient for this micro-batch is complete, in backward order.
  Tensor backward(Backend& be, Communicator& tp, int id, const MicroBatch& data, const Tensor& grad_output,
                  float loss_scale, const std::function<void(int)>& ready);

  /// Summed (not averaged) token loss of micro-batch `id`'s forward, on the last stage.
  double loss_sum(int id) const { return stash_.at(id).loss_sum; }
  /// Index of the embedding table in the store (first stage, and last stage's tied copy), or -1.
  int embedding_param() const { return wte_; }
  /// Rows of the activation of unit `id` passed between stages (this rank's tokens of it).
  std::int64_t tokens(int id) const { return unit_dims(id).local_tokens(); }
  int slices() const { return int(slice_len_.size()); }
  int hidden() const { return dims_.hidden; }
  /// Virtual stage (chunk * pp + pp rank) of the virtual_stages() in the pipeline.
  int virtual_stage() const { return virtual_stage_; }
  int virtual_stages() const { return virtual_stages_; }
  bool embeds() const { return virtual_stage_ == 0; }
  bool has_head() const { return virtual_stage_ == virtual_stages_ - 1; }
  /// Activation offload traffic (bytes to the host and back) since the last call; resets it.
  std::int64_t take_offload_bytes();

 private:
  struct LayerIndex {
    int first = 0;  // index of ln1_g; the layer's parameters follow in LayerTensors order
    int count = 0;  // 12 dense; MoE: 8 (through ln2_b), the router, then 4 per local expert
  };
  /// Layer `layer`'s MoE FFN (values and gradients), or nullopt for a dense layer.
  std::optional<MoeLayer> moe_layer(int layer) const;
  struct Stash {
    std::vector<LayerActivations> layers;
    Tensor final_in, xf, meanf, rstdf, logits, row_max, stats;  // last stage
    double loss_sum = 0;
  };
  LayerTensors layer_tensors(int layer, bool grads) const;
  void head_forward(Backend& be, Communicator& tp, const LayerDims& d, const MicroBatch& data, Stash& s);
  TokenPositions positions(const LayerDims& d) const;
  /// The layer shapes of unit `id`: its slice's tokens, after `past` tokens of earlier slices.
  LayerDims unit_dims(int id) const;
  /// The inputs and targets of unit `id`'s slice of micro-batch `data`.
  MicroBatch slice_data(int id, const MicroBatch& data) const;
  /// The host-store key of layer `layer`'s activations of micro-batch `id`.
  std::int64_t offload_key(int id, int layer) const { return std::int64_t(id) * std::int64_t(layers_.size()) + layer; }

  ModelSpec model_;
  RankLayout layout_;
  Recompute recompute_;
  int recompute_layers_ = 0;
  /// Whether this chunk's layer `l` keeps only its input and re-runs its forward in the backward.
  bool recomputes(int l) const { return recompute_ == Recompute::full && (recompute_layers_ <= 0 || l < recompute_layers_); }
  int virtual_stage_ = 0, virtual_stages_ = 1;
  ParamStore& store_;
  LayerDims dims_;
  std::int64_t vocab_offset_ = 0;  // first vocabulary row this tensor-parallel rank holds
  int wte_ = -1, wpe_ = -1, lnf_g_ = -1, lnf_b_ = -1;
  std::vector<LayerIndex> layers_;
  std::map<int, Stash> stash_;  // units in flight
  std::vector<int> slice_len_, slice_off_;               // TeraPipe slices (one: the whole sequence)
  std::map<int, std::vector<Tensor>> kv_cache_, kv_grad_;  // per micro-batch, per layer (TeraPipe)
  Communicator* ep_comm_ = nullptr;
  int offloaded_layers_ = 0;    // the first ones of this chunk keep their activations on the host
  ActivationOffload offload_;
};

}  // namespace foresight::trainer
