// DeepSpeed's pipeline partitioning (PipelineModule partition_method), reproduced: the model is
// the list of layer specs Megatron-DeepSpeed's GPTModelPipe hands to DeepSpeed (a cast function,
// the embedding, the transformer layers, the final norm, the LM head, a cast back), and the
// stage boundaries are what DeepSpeed v0.5's partition_uniform / partition_balanced return for
// it (deepspeed/runtime/pipe/module.py _partition_layers, runtime/utils.py). Left out: the
// padding of the vocabulary to a multiple of 128 x tp, BLOOM's embedding layer norm and the
// transposes some Megatron-DeepSpeed versions add as extra (parameter-free) list entries.
#pragma once

#include <string>
#include <vector>

#include "core/model.hpp"

namespace foresight {

struct PlanSpec;

/// One entry of the layer list: the class (or function) name DeepSpeed's `type:` regex is matched
/// against, its trainable parameters on one tensor-parallel rank, and whether it is a transformer
/// layer (which the simulator's stages count).
struct PipeLayerSpec {
  std::string name;
  double parameters = 0;
  bool transformer = false;
};

/// GPTModelPipe's list for `model` on `tp` ranks (microsoft/Megatron-DeepSpeed
/// megatron/model/gpt_model.py): _to_float16, EmbeddingPipe (word + learned positions), L x
/// ParallelTransformerLayerPipe, LayerNorm or MixedFusedRMSNorm, the LM head (a tied
/// EmbeddingPipe, which builds and counts the whole embedding again, or LMHeadPipe), and
/// float16_to_fp32 (present when training in 16 bits, as every DeepSpeed run modelled here does).
std::vector<PipeLayerSpec> deepspeed_layer_specs(const ModelSpec& model, int tp);

/// DeepSpeed v0.5 partition_uniform: stage p starts at floor(n / parts) * p, the last stage takes
/// the remainder (parts + 1 boundaries).
std::vector<int> deepspeed_partition_uniform(int items, int parts);

/// DeepSpeed v0.5 partition_balanced: bisection (eps 1e-3) on the heaviest part's weight, each
/// probe placing boundaries greedily on the inclusive prefix sums (_lprobe) (parts + 1 boundaries).
std::vector<int> deepspeed_partition_balanced(const std::vector<double>& weights, int parts);

/// Transformer layers per stage under plan.partition_method (`uniform`, `parameters` or
/// `type:<regex>`, matched case-insensitively against the spec names). `problem` is set (and the
/// counts may hold zeros) when the partition leaves a stage without a transformer layer or moves
/// the embedding off the first stage or the LM head off the last, which the simulator's stages
/// cannot represent, or when the method is not one DeepSpeed knows.
struct DeepSpeedPartition {
  std::vector<int> stage_layers;
  std::string problem;
};
DeepSpeedPartition deepspeed_partition(const ModelSpec& model, const PlanSpec& plan);

}  // namespace foresight
