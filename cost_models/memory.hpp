// Device memory per GPU: weights, gradients and optimizer state of mixed-precision training under
// ZeRO 0-3 / Megatron's distributed optimizer; stashed activations per layer and micro-batch after
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// arXiv:2205.05198) with tensor/sequence parallelism and recompute; micro-batches in flight per
// pipeline schedule; embeddings on the first and last stages; MoE experts and dispatch buffers;
// communication buffers and allocator headroom. Left out: KV caches (training only), fused
// kernels that avoid storing the s x s attention matrix (FlashAttention), CPU-side memory (see
// cost_models/offload.hpp), and small tensors Korthikanti also drops (layernorm mean/variance).
#pragma once

#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"

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
// The same accounting generalised to a ModelSpec and a PlanSpec: any ffn_hidden, grouped-query
// attention, MoE FFNs, TeraPipe token slices. For ffn = 4h and kv_heads = heads every function
// below reduces exactly to the Table 2 row the plan selects (tested).
// ---------------------------------------------------------------------------------------------

/// Stashed activation bytes of one transformer layer for one micro-batch of `micro_batch`
/// sequences of length `seq`, per GPU, under the plan's tp, sequence_parallel and recompute
/// (Korthikanti Table 2, generalised). Per layer, in units of sbh bytes with f = ffn_hidden and
/// k = kv_heads * head_dim: replicated under TP (not divided by t unless sequence parallel):
/// 10 = 2 QKV input + 2 FFN input + 4 two layernorm inputs + 2 dropout masks; divided by t:
/// 4 + 4k/h + 4f/h = 2 Q + 2k/h K + 2k/h V + 2 projection input + 4f/h FC2 input and GeLU input
/// (= 24 for Megatron's GPT); attention core 5as/h (softmax output 2, its dropout mask 1, dropout
/// output 2, per a*s*s*b) divided by t. Selective recompute drops the attention core; full
/// recompute keeps only the 2sbh layer input (divided by t with sequence parallelism, where
/// Megatron's layer input is already sharded along the sequence). `moe_layer` replaces the FFN
/// part by expert FFNs that process capacity_factor * top_k times the tokens, plus the router's
/// fp32 logits (4 * tokens * experts).
Bytes activation_bytes_per_layer(const ModelSpec& model, const PlanSpec& plan, int micro_batch,
                                 int seq, bool moe_layer = false);

/// TeraPipe (Li et al. 2021, arXiv:2102.07988, sec. 3): one layer's activations for a micro-batch
/// split into token slices l_1..l_n. Each slice stores the linear-in-tokens part for its own
/// tokens and its attention core against its context c_i = l_1 + ... + l_i, so the s*s term
/// becomes sum_i l_i * c_i. The keys and values of earlier slices that later slices attend to are
/// part of the earlier slices' stash already (the K and V terms), so nothing is counted twice.
/// With one slice of length s this equals activation_bytes_per_layer.
Bytes terapipe_activation_bytes_per_layer(const ModelSpec& model, const PlanSpec& plan,
                                          int micro_batch, const std::vector<int>& slices,
                                          bool moe_layer = false);

/// Transient memory of the backward pass under recompute, for one layer and one micro-batch:
/// full recompute re-materialises the whole layer (the no-recompute row of Table 2 for this tp
/// and sequence parallelism); selective recompute re-materialises the attention core (5as^2b/t).
/// Zero without recompute. Korthikanti's totals leave this out; we add it once per GPU.
Bytes recompute_working_bytes(const ModelSpec& model, const PlanSpec& plan, int micro_batch,
                              int seq);

/// Units of activations a stage holds at its peak, per schedule (`micro_batches` per pipeline per
/// iteration, `stage` 0-based): gpipe: m (all forwards before any backward, Huang et al. 2019);
/// 1f1b: min(pp - stage, m) (Narayanan et al. 2021 sec. 2.2.1; Korthikanti sec. 4.2.3);
/// interleaved: model-chunk forwards, Megatron-LM's warm-up count plus the one in steady state,
/// min((pp - stage - 1) * 2 + (v - 1) * pp + 1, m * v) (schedules.py,
/// forward_backward_pipelining_with_interleaving), each chunk holding layers/(pp*v) layers;
/// terapipe: m, GPipe-style over micro-batches with every token slice of each in flight.
int microbatches_in_flight(const PlanSpec& plan, int micro_batches, int stage);

/// Transformer layers' worth of activations one in-flight unit holds on a stage: layers/pp, or
/// layers/(pp*v) for the interleaved schedule (a unit is then one model chunk's forward).
double layers_per_in_flight_unit(const ModelSpec& model, const PlanSpec& plan);

/// Input-embedding activations on the first stage: the embedding dropout mask, sbh bytes per
/// micro-batch in flight (divided by t with sequence parallelism); Korthikanti sec. 4.3 "sbhp/t".
Bytes input_embedding_activation_bytes(const ModelSpec& model, const PlanSpec& plan,
                                       int micro_batch, int seq, int in_flight);

/// Output-layer activations on the last stage for one micro-batch: final layernorm input 2sbh,
/// output projection input 2sbh (each divided by t with sequence parallelism) and the fp32 logits
/// 4sbv/t (vocab-parallel); Korthikanti sec. 4.3 "4sbh/t (1 + v/h)".
Bytes output_layer_activation_bytes(const ModelSpec& model, const PlanSpec& plan, int micro_batch,
                                    int seq);

/// Global layer indices (0-based) whose weights live on `stage`: a contiguous block of
/// layers/pp, or for the interleaved schedule chunk c holding block c*pp + stage of layers/(pp*v).
std::vector<int> stage_layers(const ModelSpec& model, const PlanSpec& plan, int stage);

/// Whether layer `layer` (0-based) has an MoE FFN: every `every`-th layer counting from the
/// `every`-th (DeepSpeed-MoE), the same rule core/flops.cpp counts parameters with.
bool is_moe_layer(const ModelSpec& model, int layer);

// ---------------------------------------------------------------------------------------------
// Model state: weights, gradients, optimizer.
// ---------------------------------------------------------------------------------------------

/// Parameters one GPU of `stage` holds, split by how ZeRO shards them: `dense` are replicated
/// over dp (transformer layers / tp, embeddings), `expert` over dp/ep (MoE experts / (ep * tp)).
/// First stage: word embeddings vocab*h/tp plus positions seq*h; last stage (pp > 1): Megatron's
/// copy of the tied word embedding vocab*h/tp and the final layernorm 2h. Layernorms and biases
/// are counted as if tensor-parallel (a < 0.1% error for h >= 1024).
struct StageParameters {
  double dense = 0;
  double expert = 0;
  double total() const { return dense + expert; }
};
StageParameters parameters_on_gpu(const ModelSpec& model, const PlanSpec& plan, int stage);

/// Bytes per parameter of model state, after sharding over `shard_ways` data-parallel ranks.
struct StateBytesPerParam {
  double weights = 0;    // the 16-bit (or fp32) model copy
  double grads = 0;      // the gradient buffer the backward pass accumulates into
  double optimizer = 0;  // fp32 master weights, fp32 main-grad copy where kept, Adam m and v
  double total() const { return weights + grads + optimizer; }
};

/// Bytes per parameter under ZeRO stage `zero` (0..3) over `shard_ways` ranks: 1 shards the
/// optimizer state, 2 also the gradients, 3 also the weights (Rajbhandari et al. 2020, ZeRO,
/// sec. 5 and Fig. 1). What is kept per parameter depends on the framework:
///  - megatron: Megatron-LM docs/distrib_optimizer.md table, bytes/param (non-distributed,
///    distributed): fp16 param + fp16 grads 20, 4 + 16/d (the optimizer keeps an fp32 main-grad
///    copy); bf16 (16-bit param, fp32 grads: bf16 forces --accumulate-allreduce-grads-in-fp32)
///    18, 6 + 12/d; fp32 param + fp32 grads 16, 8 + 8/d.
///  - deepspeed, terapipe, generic: ZeRO paper sec. 3.1 mixed-precision Adam, 2 + 2 + K with
///    K = 12 (fp32 master, m, v): 16, ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 16/N.
/// fp32/tf32 training keeps no master copy; fp8 keeps bf16 weights (as bf16). SGD with momentum
/// has K = 4 (+4 for the fp32 master with 16-bit weights).
StateBytesPerParam state_bytes_per_param(Dtype dtype, Optimizer optimizer, Framework framework,
                                         int zero, double shard_ways);

/// HBM bytes moved per parameter each time one micro-batch's (or token slice's) weight gradients
/// are added into the gradient buffer:
///  - megatron: fp32 main-grad accumulation, `param.main_grad.add_(param.grad.data)` in the
///    backward hook of Megatron-LM v2.x's local DDP (megatron/model/distributed.py): read the fp32
///    main grad (4), read the 16-bit grad (2), write fp32 (4) = 10 bytes; fp32 training 12.
///  - deepspeed, terapipe, generic: PyTorch's AccumulateGrad, `grad += new_grad` in the parameter
///    dtype (DeepSpeed ZeRO-1 with the pipeline engine keeps 16-bit grads until ReduceGrads,
///    deepspeed/runtime/zero/stage2.py @ v0.5.x): read both, write one = 3 x the grad bytes.
double grad_accumulation_bytes_per_param(Dtype dtype, Framework framework);

// ---------------------------------------------------------------------------------------------
// Buffers and headroom, and the per-GPU total.
// ---------------------------------------------------------------------------------------------

/// Memory that is neither model state nor activations. The defaults are estimates with their
/// source; a calibration profile may replace them.
struct MemoryOptions {
  /// CUDA context, cuBLAS/cuDNN workspaces and the framework's own allocations: nvidia-smi minus
  /// torch.cuda.memory_reserved() is typically 0.3-0.6 GiB on A100/H100 (an estimate).
  Bytes cuda_context = Bytes(512.0 * 1048576.0);
  /// One NCCL communicator's staging buffers: NCCL_BUFFSIZE (default 4 MiB, NCCL environment
  /// variable docs) per channel and peer, times 2 ring peers times 8 channels (an estimate; the
  /// channel count NCCL picks depends on the topology).
  Bytes nccl_per_communicator = Bytes(4.0 * 1048576.0 * 2 * 8);
  /// DeepSpeed's gradient reduce bucket: reduce_bucket_size, default 5e8 elements (DeepSpeed
  /// config-json docs, zero_optimization), in the gradient dtype.
  double deepspeed_reduce_bucket_elements = 5e8;
  /// PyTorch DDP's bucket_cap_mb default 25 MiB (torch.nn.parallel.DistributedDataParallel docs),
  /// used for the generic and terapipe frameworks. Megatron reduces its contiguous grad buffer in
  /// place: no extra bucket.
  Bytes ddp_bucket = Bytes(25.0 * 1048576.0);
  /// Caching-allocator fragmentation, as a fraction of everything allocated. ZeRO (Rajbhandari et
  /// al. 2020, sec. 3.2) reports OOM with over 30% of memory free in extreme cases; Korthikanti
  /// sec. 7 names fragmentation as open work. 5% is our default for steady-state training.
  double allocator_fragmentation = 0.05;
};

/// Memory of one GPU; the parts sum to total().
struct MemoryBreakdown {
  Bytes weights;      // model weights (16-bit, or fp32 for fp32 training), after ZeRO-3 sharding
  Bytes grads;        // gradient buffers, after ZeRO-2 sharding
  Bytes optimizer;    // fp32 master weights, main-grad copies, Adam moments; 0 when offloaded
  Bytes activations;  // stashed activations of in-flight micro-batches plus the transient ones
  Bytes buffers;      // CUDA context, NCCL, DP buckets, pipeline p2p, MoE dispatch, ZeRO-3 gathers
  Bytes headroom;     // allocator fragmentation
  Bytes total() const { return weights + grads + optimizer + activations + buffers + headroom; }
};

/// Stashed and transient activations of one GPU of `stage`: in-flight units x the stage's layer
/// activations per unit (times 1 - offload.activations, plus one unit staged for prefetch when
/// offloading), the input embedding (stage 0), the output layer (last stage) and the recompute
/// working set.
Bytes stage_activation_bytes(const ModelSpec& model, const TrainingSpec& training,
                             const PlanSpec& plan, int stage);

/// Transformer-layer activations of one in-flight unit on `stage` (one micro-batch through the
/// stage's layers, or through one model chunk's layers for the interleaved schedule).
Bytes layer_activation_bytes_per_unit(const ModelSpec& model, const PlanSpec& plan, int stage);

/// The stashed layer activations alone (before offload): in-flight units x the bytes per unit,
/// what activation offload can move.
Bytes stashed_layer_activation_bytes(const ModelSpec& model, const TrainingSpec& training,
                                     const PlanSpec& plan, int stage);

/// Communication buffers of one GPU of `stage` (see MemoryOptions), plus pipeline receive buffers
/// (an activation and a gradient tensor, 2sbh each, divided by t with sequence parallelism), the
/// MoE all-to-all send and receive buffers (2 x capacity_factor*top_k*sbh 16-bit), and ZeRO-3's
/// gathered weights (the largest layer's full weights, twice for prefetch).
Bytes buffer_bytes(const ModelSpec& model, const TrainingSpec& training, const PlanSpec& plan,
                   int stage, const MemoryOptions& options = {});

/// Memory per GPU of pipeline stage `stage` (0-based): weights, gradients and optimizer state of
/// the parameters it holds (state_bytes_per_param over dp, or dp/ep for experts), activations,
/// buffers and headroom. With plan.offload.optimizer the optimizer state lives on the host.
MemoryBreakdown memory_per_gpu(const ModelSpec& model, const TrainingSpec& training,
                               const PlanSpec& plan, const ClusterSpec& cluster, int stage,
                               const MemoryOptions& options = {});

/// memory_per_gpu for every stage, 0..pp-1.
std::vector<MemoryBreakdown> memory_per_stage(const ModelSpec& model, const TrainingSpec& training,
                                              const PlanSpec& plan, const ClusterSpec& cluster,
                                              const MemoryOptions& options = {});

/// Index of the stage whose total is largest (the first one on ties).
int most_loaded_stage(const std::vector<MemoryBreakdown>& stages);

/// By how much `memory` exceeds the GPU's capacity; zero when it fits.
Bytes memory_shortfall(const MemoryBreakdown& memory, const GpuSpec& gpu);

/// Whether `memory` fits in the GPU's capacity.
bool fits(const MemoryBreakdown& memory, const GpuSpec& gpu);

}  // namespace foresight::cost_models
