// Device memory per GPU: weights, gradients and optimizer state of mixed-precision training under
// ZeRO 0-3 / Megatron's distributed optimizer; stashed activations per layer and micro-batch after
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// arXiv:2205.05198) with tensor/sequence parallelism and recompute; micro-batches in flight per
// pipeline schedule; embeddings on the first and last stages; MoE experts and dispatch buffers;
// communication buffers and allocator headroom. How the plan is executed (the framework's
// precision recipe, which attention kernel runs, what it stores) comes in as the ExecutionModel
// resolved once with the compute side (cost_models/execution.hpp), so both price the same
// attention. Left out: KV caches (training only), CPU-side memory (see cost_models/offload.hpp),
// and small tensors Korthikanti also drops (layernorm mean/variance).
#pragma once

#include <vector>

#include "core/enums.hpp"
#include "core/framework.hpp"
#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "cost_models/execution.hpp"

namespace foresight::cost_models {

// ---------------------------------------------------------------------------------------------
// Korthikanti et al. 2022, written literally. All assume Megatron's GPT layer (ffn = 4h, multi-head
// attention), 16-bit activations and 1-byte dropout masks (paper sec. 4, "we also assume ...").
// s: sequence length, b: micro-batch size, h: hidden size, a: attention heads, t: tensor-parallel
// size, L: transformer layers, p: pipeline stages, v: vocabulary size. Results are bytes per GPU.
// ---------------------------------------------------------------------------------------------

/// Korthikanti 2022 sec. 4.1 eq. 1 (Table 2 row "no parallelism"): sbh(34 + 5as/h) per layer.
Bytes activations_no_parallelism(double s, double b, double h, double a);

/// Korthikanti 2022 sec. 4.2.1 eq. 2 (Table 2 "tensor parallel (baseline)"):
/// sbh(10 + 24/t + 5as/(ht)) per layer.
Bytes activations_tensor_parallel(double s, double b, double h, double a, double t);

/// Korthikanti 2022 sec. 4.2.2 eq. 4 (Table 2 "tensor + sequence parallel"):
/// sbh(34/t + 5as/(ht)) per layer.
Bytes activations_tensor_sequence_parallel(double s, double b, double h, double a, double t);

/// Korthikanti 2022 sec. 5, Table 2 "tensor parallel + selective activation recomputation":
/// sbh(10 + 24/t) per layer (the 5as/h attention-core term is recomputed).
Bytes activations_tensor_parallel_selective(double s, double b, double h, double t);

/// Korthikanti 2022 sec. 5 eq. 6 per layer, Table 2 "tensor + sequence parallel + selective
/// activation recomputation": sbh(34/t) per layer.
Bytes activations_tensor_sequence_parallel_selective(double s, double b, double h, double t);

/// Korthikanti 2022 sec. 5, Table 2 "full activation recomputation": sbh*2 per layer (only the
/// 16-bit layer input is kept; the paper does not shard it over t, see sec. 5 first paragraph).
Bytes activations_full_recompute(double s, double b, double h);

/// Korthikanti 2022 sec. 4.2.3 eq. 5: activations the first 1F1B stage holds, sbhL/t (34 + 5as/h)
/// (p micro-batches x L/p layers = L layers' worth, with tensor + sequence parallelism).
Bytes first_stage_activations_eq5(double s, double b, double h, double a, double t, double L);

/// Korthikanti 2022 sec. 4.2.3 (and sec. 5 after eq. 6): the interleaved schedule with v model
/// chunks per stage ("m interleaving stages" in the paper) stores L(1 + (p-1)/(p v)) layers'
/// worth on the first stage, i.e. eq. 5 scaled by this factor (dimensionless).
double interleaved_activation_factor(int p, int v);

/// Korthikanti 2022 sec. 4.3: activations outside the transformer layers on the first stage,
/// sbhL/t (p/L + delta_{p=1} 4/L (1 + v/h)) = sbhp/t (embedding dropout masks of p micro-batches)
/// + [p = 1] 4sbh/t (1 + v/h) (final layernorm input 2sbh/t, output projection input 2sbh/t and
/// the fp32 logits 4sbv/t), with sequence parallelism.
Bytes embedding_and_output_activations_sec43(double s, double b, double h, double v, double t,
                                             int p);

// ---------------------------------------------------------------------------------------------
// The same accounting generalised to a ModelSpec, a PlanSpec and the way it is executed: any
// ffn_hidden, grouped-query attention, MoE FFNs, TeraPipe token slices, element sizes, dropout,
// fused attention. For Megatron-LM's recipe (16-bit, dropout, unfused attention), ffn = 4h and
// kv_heads = heads every function below reduces exactly to the Table 2 row the plan selects (tested).
// ---------------------------------------------------------------------------------------------

/// Stashed activation bytes of one transformer layer for one micro-batch of `micro_batch`
/// sequences of length `seq`, per GPU, under the plan's tp, sequence_parallel and recompute
/// (Korthikanti Table 2, generalised). With a = activation bytes, r = residual-stream bytes, m = 1
/// with dropout (a mask byte) else 0, f = ffn_hidden and k = kv_heads * head_dim, per layer in
/// units of sbh: replicated under TP (not divided by t unless sequence parallel): a QKV input + a
/// FFN input + 2r layernorm inputs + 2m dropout masks (= 10 for Megatron); divided by t: a Q + 2ak/h
/// K and V + a projection input + 2af/h FC2 input and GeLU input (+ a when the framework copies the
/// attention output before the projection) (= 24 for Megatron's GPT); the attention core, unfused:
/// (a softmax output + m mask + a dropout output with dropout) as/h divided by t (5as/h for
/// Megatron); fused (flash, cuDNN): the fp32 softmax statistics, 4a/h divided by t. Selective
/// recompute drops the attention core; full recompute keeps only the r sbh layer input (divided by
/// t with sequence parallelism, where Megatron's layer input is already sharded along the
/// sequence). `moe_layer` replaces the FFN part by expert FFNs that process capacity_factor *
/// top_k times the tokens, plus the router's fp32 logits (4 * tokens * experts).
Bytes activation_bytes_per_layer(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                 int micro_batch, int seq, bool moe_layer = false);

/// TeraPipe (Li et al. 2021, arXiv:2102.07988, sec. 3): one layer's activations for a micro-batch
/// split into token slices l_1..l_n. Each slice stores the linear-in-tokens part for its own
/// tokens and its attention core against its context c_i = l_1 + ... + l_i, so the s*s term
/// becomes sum_i l_i * c_i. The keys and values of earlier slices that later slices attend to are
/// part of the earlier slices' stash already (the K and V terms), so nothing is counted twice.
/// With one slice of length s this equals activation_bytes_per_layer.
Bytes terapipe_activation_bytes_per_layer(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                          int micro_batch, const std::vector<int>& slices, bool moe_layer = false);

/// Transient memory of the backward pass under recompute, for one layer and one micro-batch:
/// full recompute re-materialises the whole layer (the no-recompute row of Table 2 for this tp
/// and sequence parallelism); selective recompute re-materialises the attention core (5as^2b/t
/// unfused). Zero without recompute. Korthikanti's totals leave this out; we add it once per GPU.
Bytes recompute_working_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                              int micro_batch, int seq);

/// Units of activations a stage holds at its peak, per schedule (`micro_batches` per pipeline per
/// iteration, `stage` 0-based): gpipe: m (all forwards before any backward, Huang et al. 2019);
/// 1f1b: min(pp - stage, m) (Narayanan et al. 2021 sec. 2.2.1; Korthikanti sec. 4.2.3);
/// interleaved: model-chunk forwards, Megatron-LM's warm-up count plus the one in steady state,
/// min((pp - stage - 1) * 2 + (v - 1) * pp + 1, m * v) (schedules.py,
/// forward_backward_pipelining_with_interleaving), each chunk holding its chunk_layer_counts entry
/// (layers/(pp*v) when even);
/// terapipe: m, GPipe-style over micro-batches with every token slice of each in flight.
/// plan.ep_overlap (Megatron-Core's combined 1F1B) keeps one micro-batch more.
int microbatches_in_flight(const PlanSpec& plan, int micro_batches, int stage);
/// Micro-batches of a step whose LM-head weight gradients the last stage defers to the flush
/// (plan.defer_embedding_wgrad): the first wgrad_deferral_limit of them, all where the limit is 0;
/// none without the deferral.
int deferred_head_wgrad_micro_batches(const PlanSpec& plan, int micro_batches);

/// Transformer layers' worth of activations one in-flight unit holds on the stage with the most
/// layers: layers/pp for an even split, or for the interleaved schedule that stage's layers / v,
/// the mean of its model chunks (a unit is then one chunk's forward).
double layers_per_in_flight_unit(const ModelSpec& model, const PlanSpec& plan);

/// Input-embedding activations on the first stage: the embedding dropout mask, sbh bytes per
/// micro-batch in flight (divided by t with sequence parallelism); Korthikanti sec. 4.3 "sbhp/t".
/// Zero without dropout.
Bytes input_embedding_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                       int micro_batch, int seq, int in_flight);

/// Output-layer activations on the last stage for one micro-batch: final layernorm input r sbh,
/// output projection input a sbh (each divided by t with sequence parallelism) and the logits at
/// the loss's peak, logits_bytes sbv/t (Megatron's vocab-parallel cross-entropy: the fp32 softmax,
/// 4; Korthikanti sec. 4.3 "4sbh/t (1 + v/h)").
Bytes output_layer_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                    int micro_batch, int seq);

/// Global layer indices (0-based) whose weights live on `stage`: its contiguous block of
/// stage_layer_counts, or for the interleaved schedule its chunks in order, chunk c holding
/// segment c*pp + stage of chunk_layer_counts. The last segment's chunk also holds the MTP
/// modules' layers (indices model.layers and up, ModelSpec::mtp_layers).
std::vector<int> stage_layers(const ModelSpec& model, const PlanSpec& plan, int stage);
/// The layers of one model chunk of `stage` (chunk 0 when not interleaved: all of them).
std::vector<int> chunk_layers(const ModelSpec& model, const PlanSpec& plan, int stage, int chunk);

// ---------------------------------------------------------------------------------------------
// Model state: weights, gradients, optimizer.
// ---------------------------------------------------------------------------------------------

/// With pp > 1 the last stage keeps its own copy of the tied word embedding (FrameworkTraits::
/// last_stage_embedding_copy): held beside the head (parameters_on_gpu) and, where the framework
/// sums the two copies' gradients, all-reduced with the first stage's (sim/cost_data_parallel.cpp).
bool last_stage_holds_tied_copy(const FrameworkTraits& framework, const ModelSpec& model, const PlanSpec& plan);

/// Parameters one GPU of `stage` holds, split by how ZeRO shards them: `dense` are replicated
/// over dp (transformer layers / tp, embeddings), `expert` over dp/ep (MoE experts / (ep * tp)).
/// First stage: word embeddings vocab*h/tp plus positions seq*h; last stage (pp > 1): the copy of
/// the tied word embedding vocab*h/tp where the framework keeps one, and the final layernorm 2h;
/// none of these for a framework whose model has no embedding or head (TeraPipe). Layernorms and
/// biases are counted as if tensor-parallel (a < 0.1% error for h >= 1024).
struct StageParameters {
  double dense = 0;
  double expert = 0;
  double total() const { return dense + expert; }
};
StageParameters parameters_on_gpu(const FrameworkTraits& framework, const ModelSpec& model, const PlanSpec& plan,
                                  int stage);
/// The parameters of transformer layer `layer` on one GPU (tensor- and expert-parallel shares).
StageParameters layer_parameters_on_gpu(const ModelSpec& model, const PlanSpec& plan, int layer);
/// The parameters of stage `stage`'s transformer layers on one GPU (the sum of
/// layer_parameters_on_gpu; without the embedding, the head and the final norm).
StageParameters stage_layer_parameters(const ModelSpec& model, const PlanSpec& plan, int stage);
/// Bytes per parameter of a transformer layer's parameter all-gather (and of its gathered copy)
/// when its elements are otherwise `element` bytes: `element`, or with plan.fp8_param_gather one
/// byte for the layer's GEMM weights, its norms keeping `element` (they are not FP8 operands).
/// Norms are replicated over the tensor-parallel ranks, the weights split: per GPU the norms'
/// share is norms / (norms + weights / tp). Under the MXFP8 recipe the weights travel in 16 bits
/// (Megatron-Core gathers MXFP8 parameters through the gradient buffer as bf16 and each rank
/// quantizes them again, reuse_grad_buf_for_mxfp8_param_ag), so `element` throughout.
double layer_gather_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, double element);

/// Bytes per parameter of model state, after sharding over `shard_ways` data-parallel ranks.
struct StateBytesPerParam {
  double weights = 0;    // the model copy (16-bit or fp32), plus autocast's 16-bit copy of fp32 weights
  double grads = 0;      // the gradient buffer the backward pass accumulates into
  double optimizer = 0;  // fp32 master weights, fp32 main-grad copy where kept, Adam m and v
  double total() const { return weights + grads + optimizer; }
};

/// Bytes per parameter under ZeRO stage `zero` (0..3) over `shard_ways` ranks: 1 shards the
/// optimizer state, 2 also the gradients, 3 also the weights (Rajbhandari et al. 2020, ZeRO,
/// sec. 5 and Fig. 1), from the execution's element sizes (cost_models/precision.hpp). Megatron-LM
/// docs/distrib_optimizer.md table, bytes/param (non-distributed, distributed): fp16 20, 4 + 16/d;
/// bf16 18, 6 + 12/d; fp32 16, 8 + 8/d. ZeRO paper sec. 3.1 mixed-precision Adam (DeepSpeed,
/// TeraPipe, generic): 16, ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 16/N. PyTorch AMP on fp32
/// parameters: 4 + 4 + 8 = 16, plus the 2-byte autocast copy while a step runs.
StateBytesPerParam state_bytes_per_param(const ElementSizes& bytes, int zero, double shard_ways);

/// Memory of one GPU at its peak; the parts sum to total().
struct MemoryBreakdown {
  Bytes weights;      // model weights (16-bit, or fp32) after ZeRO-3 sharding, with autocast's 16-bit copies
  Bytes grads;        // gradient buffers, after ZeRO-2 sharding (none at the peak when freed between steps)
  Bytes optimizer;    // fp32 master weights, main-grad copies, Adam moments; 0 when offloaded
  Bytes activations;  // stashed activations of in-flight micro-batches plus the transient ones
  Bytes buffers;      // the framework's own buffers: DP buckets, pipeline p2p, MoE dispatch, ZeRO-3 gathers
  Bytes headroom;     // allocator fragmentation (reserved but not allocated)
  Bytes runtime;      // CUDA context and NCCL communicator buffers (outside the framework's allocator)
  /// What the framework's caching allocator hands out at the peak (torch.cuda.max_memory_allocated).
  Bytes allocated() const { return weights + grads + optimizer + activations + buffers; }
  /// What the allocator holds from the device (torch.cuda.max_memory_reserved).
  Bytes reserved() const { return allocated() + headroom; }
  /// What the GPU must have (nvidia-smi).
  Bytes total() const { return reserved() + runtime; }
};

/// Stashed and transient activations of one GPU of `stage`: in-flight units x the stage's layer
/// activations per unit (times 1 - offload.activations, plus one unit staged for prefetch when
/// offloading), the input embedding (stage 0), the output layer (last stage) and the recompute
/// working set.
Bytes stage_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                             const PlanSpec& plan, int stage);

/// Transformer-layer activations of one in-flight unit on `stage` (one micro-batch through the
/// stage's layers, or through one model chunk's layers for the interleaved schedule).
Bytes layer_activation_bytes_per_unit(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                      int stage);

/// The stashed layer activations alone (before offload): in-flight units x the bytes per unit,
/// what activation offload can move.
Bytes stashed_layer_activation_bytes(const ExecutionModel& x, const ModelSpec& model,
                                     const TrainingSpec& training, const PlanSpec& plan, int stage);

/// The framework's own communication buffers on one GPU of `stage`: its gradient bucket
/// (FrameworkTraits::dp_bucket_*), pipeline receive buffers (an activation and a gradient tensor,
/// a sbh each, divided by t with sequence parallelism), the MoE all-to-all send and receive
/// buffers (2 x capacity_factor*top_k*a sbh), and ZeRO-3's gathered weights (the largest layer's
/// full weights, twice for prefetch).
Bytes buffer_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, int stage);
/// DeepEP's communication buffer (plan.ep_dispatcher = deepep), allocated once per rank: its NVLink
/// receive queues and, across nodes, its RDMA queues, as Config::get_nvl_buffer_size_hint and
/// get_rdma_buffer_size_hint size them for the dispatch configuration of plan.ep ranks with the
/// default 20 SMs (deepseek-ai/DeepEP csrc/legacy/config.hpp, deep_ep/buffers/legacy.py @
/// dd758ca; Megatron-Core's fused_a2a.get_buffer passes hidden x max(element size, 2) bytes).
Bytes deepep_buffer_bytes(const ModelSpec& model, const PlanSpec& plan);

/// Width per token of the keys (and of the values) a context-parallel rank exchanges: its share of
/// the kv heads, at least one head (MLA: the latent width), or with PyTorch's SDPA context
/// parallelism (FrameworkTraits::cp_torch_sdpa) one head per local query head, as SDPA receives
/// them after the model's repeat_kv. The comm model and the memory model both read it.
double cp_kv_width(const FrameworkTraits& fw, const ModelSpec& model, const PlanSpec& plan);

/// CUDA context and NCCL buffers of one GPU of `stage` (ExecutionModel::memory options): one communicator per
/// group the GPU belongs to (tp, dp, two pipeline neighbours, ep, the embedding group).
Bytes runtime_bytes(const ExecutionModel& x, const PlanSpec& plan, int stage);

/// Memory per GPU of pipeline stage `stage` (0-based) at its peak: weights, gradients and
/// optimizer state of the parameters it holds (state_bytes_per_param over dp, or dp/ep for
/// experts), activations, buffers, headroom and runtime. With plan.offload.optimizer the optimizer
/// state lives on the host. When the framework frees gradients between steps and a step has one
/// micro-batch, no gradient exists while activations peak: the peak is the larger of the end of
/// the forward (no gradients) and the optimizer step (no activations), reported as that moment.
MemoryBreakdown memory_per_gpu(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                               const PlanSpec& plan, int stage);

/// memory_per_gpu for every stage, 0..pp-1.
std::vector<MemoryBreakdown> memory_per_stage(const ExecutionModel& x, const ModelSpec& model,
                                              const TrainingSpec& training, const PlanSpec& plan);

/// Index of the stage whose total is largest (the first one on ties).
int most_loaded_stage(const std::vector<MemoryBreakdown>& stages);

/// By how much `memory` exceeds the GPU's capacity; zero when it fits.
Bytes memory_shortfall(const MemoryBreakdown& memory, const GpuSpec& gpu);

/// Whether `memory` fits in the GPU's capacity.
bool fits(const MemoryBreakdown& memory, const GpuSpec& gpu);

/// The shares of a transformer layer's ZeRO-3 gather unit that the framework gathers one
/// collective each: {1} for a layer unit; for a module unit (DeepSpeed) the dense layer's QKV,
/// output projection, up (with gate) and down projections in proportion to their weights (MLA and
/// MoE layers: one share).
std::vector<double> zero3_module_shares(const FrameworkTraits& fw, const ModelSpec& m);
/// Which of a chunk's layers (in forward order, `layer_params` elements each) ZeRO-3 keeps gathered
/// from their forward to their backward under a reuse distance of `reuse_elements` (DeepSpeed's
/// stage3_max_reuse_distance, partitioned_param_coordinator.py __params_to_release): a layer whose
/// next use comes before a walk of that many elements from its release, through the rest of the
/// forward (the later layers, then the `tail` after them: the head) and then the backward up to
/// it (the tail once, each later layer `backward_passes` times: 2 when recomputed, its recompute
/// and its backward). reuse_elements 0 keeps nothing.
std::vector<bool> zero3_kept_layers(const std::vector<double>& layer_params, const std::vector<double>& backward_passes,
                                    double tail, double reuse_elements);
/// Parameters of a stage's layers that ZeRO-3 keeps gathered from their forward to their backward
/// where the plan's ZeRO-3 prefetches with a reuse distance (FrameworkTraits::zero3_reuse_elements):
/// zero3_kept_layers over the last stage, the head being all it holds beyond its layers. 0
/// elsewhere. cost_sharded_parameters walks the same trace per chunk with each layer's recompute
/// share.
double zero3_reused_parameters(const FrameworkTraits& fw, const ModelSpec& m, const PlanSpec& p, int stage);
/// The vectors of one transformer layer that stay whole on every rank under the framework's ZeRO-3
/// persistence threshold (norm weights and biases, linear biases; after tensor parallelism), in
/// elements: each gathered again after every optimizer step (FrameworkTraits::zero3_persistence_elements).
std::vector<double> zero3_persistent_vectors(const FrameworkTraits& fw, const ModelSpec& m, const PlanSpec& p);

/// Whether each rank of an MoE layer routes its own tokens (its sequence shard under sequence
/// parallelism, everything at tp 1) and the experts of an expert-tensor-parallel group see all of
/// their ranks' copies (Megatron-Core's dispatchers, where the framework folds experts): true; or
/// every tensor-parallel rank routes the whole micro-batch and the experts split like the dense
/// FFN (DeepSpeed-MoE, the bundled trainer: the layout before folding).
bool moe_routes_own_tokens(const FrameworkTraits& fw, const PlanSpec& plan);

}  // namespace foresight::cost_models
