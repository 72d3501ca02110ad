// What each training framework does when it executes a plan, as data: one FrameworkTraits entry
// per Framework, each behaviour with its source. Every cost model reads these fields; nothing
// outside framework.cpp compares Framework values (STYLE.md item 16). Adding a framework is adding
// one entry. Left out: behaviours no supported plan exercises yet (FSDP unit wrapping, context
// TP-communication overlap: later entries of the table).
#pragma once

#include <optional>
#include <string>

#include "core/enums.hpp"
#include "core/model.hpp"
#include "core/plan_violation.hpp"

namespace foresight {

struct PlanSpec;

/// How an offloaded optimizer's gradients reach the host (FrameworkTraits::offloaded_gradient_path).
enum class OffloadGradientPath { gradient_dtype, deepspeed };

/// Gradient traffic of an offloaded optimizer, per parameter updated on the host, in one step.
struct OffloadedGradientBytes {
  double to_host = 0;    // bytes over PCIe to the host
  double to_device = 0;  // bytes over PCIe back to the GPU (the weights' return not included)
  double host_kept = 0;  // gradient bytes the host holds
};

/// How a pipeline stage hands an activation (or its gradient) to the next stage when tensor
/// parallelism is on and sequence parallelism is off. With sequence parallelism every framework
/// sends each rank's own sequence shard.
enum class PipelineSend {
  whole,                // every TP rank sends the whole (b, s, h) tensor to its peer
  split_then_gather,    // every TP rank sends 1/t of it; the receiver all-gathers over NVLink
  one_rank_broadcast,   // one rank sends the whole tensor; the receiver broadcasts it to its TP group
};

/// How ZeRO stage >= 1 reduces gradients across data-parallel ranks.
enum class ZeroReduction {
  reduce_scatter,  // each rank receives the reduced shard it updates (Megatron distributed optimizer)
  all_reduce,      // all-reduce in buckets, then each rank steps its shard (DeepSpeed v0.5 under its
                   // pipeline engine: contiguous_gradients and overlap_comm forced off)
};

/// What `foresight plan` writes beside plan.json for a plan of a framework, and in which dialect
/// (core/plan_json.cpp): every plan gets Megatron-LM arguments where flags exist for it.
enum class Launcher {
  megatron_lm,         // Megatron-LM 2021-22's flags (megatron_args.txt)
  megatron_core,       // Megatron-Core's: Megatron-FSDP for ZeRO-2/3, distributed-optimizer
                       // instances, --pipeline-model-parallel-layout, --cpu-offloading-num-layers
  megatron_deepspeed,  // Megatron-DeepSpeed's (Ulysses as --ds-sequence-parallel-size) and a
                       // DeepSpeed configuration (ds_config.json)
  fms_fsdp,            // fms-fsdp's torchrun main_training_llama.py line (fms_fsdp_launch.txt)
};

/// HBM bytes per element of the (tokens, hidden) stream (or, for the activation function, of the
/// (tokens, ffn) tensor) that a framework's elementwise kernels move in one transformer layer,
/// reads plus writes, for its 16-bit recipe; with their kernel launches. The backward entries
/// include what the framework's autograd adds (casts back to fp32, gradient adds, bias-gradient
/// reductions where counted).
struct ElementwiseTraffic {
  double norms_forward = 0, norms_backward = 0;        // both layer norms (+ autocast casts of their outputs)
  int norms_launches_forward = 0, norms_launches_backward = 0;
  double residual_forward = 0, residual_backward = 0;  // dropout + residual add at both sites
  int residual_launches_forward = 0, residual_launches_backward = 0;
  double layout_forward = 0, layout_backward = 0;      // re-layout copies around attention (q/k/v, output)
  int layout_launches_forward = 0, layout_launches_backward = 0;
  /// TeraPipe's K/V cache under token slicing: the backward of a slice's `cache[:, :context]`
  /// read zero-fills a K and a V gradient buffer as long as the whole sequence and copies the
  /// slice's context into it, and the gradient of the cached prefix is then added into the earlier
  /// slices' (backward_step's `grad[:, :cache_len] += ...`). layout_backward already counts a
  /// zero-filled buffer and the copy over the slice's own tokens (what an unsliced sequence moves);
  /// this adds the rest, per (token, hidden / t) element: zero-fill of the other sequence - tokens
  /// positions (write 2, K and V), the copy over the prefix (read and write 2, K and V) and the
  /// prefix's add (read 2 + 2, write 2, K and V). O(sequence) per slice, so fine slices pay it most.
  bool kv_cache_slice_gradient = false;
  /// Rotary embeddings applied as separate kernels, per element of q and k (RoPE models only).
  double rope_forward = 0, rope_backward = 0;
  int rope_launches = 0;
  /// Grouped-query K and V materialised for every query head (eager repeat_kv): bytes per element
  /// read and per element written, each way (0: the attention kernel reads shared K/V itself).
  double kv_repeat = 0;
  double activation_forward = 0, activation_backward = 0;  // GeLU, per (tokens, ffn) element
  /// Per element of each linear layer's output, read once to reduce its bias gradient (0: not counted).
  double bias_grad = 0;
  /// The input embedding (word lookup + positions), per (tokens, hidden) element of its output.
  double embedding_forward = 0, embedding_backward = 0;
  int embedding_launches = 0;
  /// The loss over the logits, per (tokens, vocab / t) element: casts, softmax and cross-entropy.
  double loss_forward = 0, loss_backward = 0;
  int loss_launches_forward = 0, loss_launches_backward = 0;
  /// Per parameter of the layer's weights and per step: autocast's cast of each fp32 weight to
  /// 16 bits in the forward (read 4, write 2) and the cast of its 16-bit gradient back to fp32 in
  /// the backward (read 2, write 4); zero where weights are stored in 16 bits.
  double weight_cast_forward = 0, weight_cast_backward = 0;
  /// Unfused attention only: bytes per (query, key) score element that the kernels between its two
  /// GEMMs move, beyond what the GEMMs write and read. Megatron-LM's fused scale-mask-softmax on
  /// 16-bit scores (read and write: 4) and attention dropout (read, write, 1-byte mask: 5);
  /// backward the softmax's gradient (read y and dy, write dx: 6) and dropout's (read dy and the
  /// mask, write dx: 5).
  double score_forward = 9, score_backward = 11;
  /// The norms are PyTorch's eager RMSNorm chain (x.float(), pow, mean, rsqrt, multiply, cast
  /// back, weight scale, and autograd's passes back through them), whose kernels move their bytes
  /// below the streaming rate (GpuKernelFigures::eager_norm_efficiency, where the GPU has one).
  bool norms_eager_chain = false;
  /// Of the RoPE, layout and GQA-expansion bytes above, those eager PyTorch moves on
  /// TensorIterator's non-vectorized path because an operand is broadcast (a stride of 0) or
  /// strided: the RoPE's product with its broadcast frequencies and its sums over a size-2 pair
  /// dimension, the transpose copies around attention, the GQA expansion's copies from an
  /// expanded view and their sums back. Priced at GpuKernelFigures::eager_strided_efficiency where
  /// the GPU has one; the contiguous rest (upcasts and casts back) at the streaming rate.
  double rope_strided_forward = 0, rope_strided_backward = 0;
  double layout_strided_forward = 0, layout_strided_backward = 0;
  bool kv_repeat_strided = false;
};

/// The precision recipe: how many bytes each kind of element takes, for 16-bit (bf16/fp16/fp8)
/// training. fp32/tf32 training stores everything in 4 bytes (state_bytes / element sizes in
/// cost_models/execution.hpp apply that).
struct PrecisionRecipe {
  /// Parameters kept in fp32 and cast to 16 bits by autocast in the forward (PyTorch AMP), instead
  /// of 16-bit parameters with an fp32 master copy in the optimizer (Megatron-LM, DeepSpeed).
  bool fp32_parameters = false;
  /// Bytes per element of the residual stream and of the layer norms' inputs and outputs
  /// (Megatron-LM: 16 bits, --fp32-residual-connection off; autocast: fp32, layer_norm autocasts to fp32).
  double residual_bytes = 2;
  /// 16-bit weights accumulate micro-batch gradients into an fp32 main-grad buffer (Megatron-LM:
  /// bf16 forces --accumulate-allreduce-grads-in-fp32) rather than in the parameter dtype.
  bool fp32_main_grads = false;
  /// Gradients are freed after each optimizer step (PyTorch's zero_grad(set_to_none=True), the
  /// default since 2.0): with one micro-batch per step none exists while activations peak.
  bool grads_freed_between_steps = false;
  /// fp32 parameters are cast to 16 bits by autocast, which keeps the copies for the step (PyTorch
  /// AMP's weight cache); false where the 16-bit copies are transient (FSDP2's MixedPrecisionPolicy
  /// param_dtype bf16: each unit's gathered bf16 parameters are freed after use).
  bool autocast_weight_copies = false;
  /// Bytes per gradient element as data parallelism reduces it when the plan does not say
  /// (plan.reduce_dtype): 0 for the gradient's own dtype; 2 where the framework's FSDP
  /// MixedPrecision reduces in 16 bits (fms-fsdp's bfSixteen: param, reduce and buffer dtypes bf16).
  double reduce_bytes = 0;
};

/// Stored activations a framework keeps beyond Korthikanti et al. 2022's accounting.
struct ActivationLayout {
  /// Dropout masks are stored (1 byte per element): GPT-3-style recipes of Megatron-LM and
  /// DeepSpeed use hidden and attention dropout 0.1; Llama-style recipes and the PyTorch baseline
  /// use none.
  bool dropout = true;
  /// The attention output is copied into a new (b, s, h) tensor before the projection (eager
  /// PyTorch's transpose(1, 2).reshape), so both the attention's saved output and the
  /// projection's input are stored.
  bool attention_output_copy = false;
  /// Bytes per element of (tokens, vocab) logits alive at the loss's peak: Megatron's
  /// vocab-parallel cross-entropy keeps the fp32 softmax (4, Korthikanti 2022 sec. 4.3); eager
  /// F.cross_entropy on .float() logits holds, in its backward, nll_loss's dense fp32 gradient,
  /// log_softmax's saved fp32 output and the fp32 input gradient at once (12).
  double logits_bytes = 4;
  /// Under FP8 training, what a Linear saves for its backward is its FP8-cast input (1 byte per
  /// element: DeepSeek-V3 sec. 3.3.3, which also stores the attention output in a 12-bit E5M6 and
  /// the SwiGLU inputs in FP8). Transformer Engine's FP8 Linear and LayerNormLinear save their
  /// quantized input (or norm output) too.
  bool fp8_linear_inputs = false;
  /// With fp8_linear_inputs, the activation function's inputs are stored in FP8 as well
  /// (DeepSeek-V3); Megatron-Core's fused bias-SwiGLU saves its 16-bit input
  /// (fused_bias_swiglu.py, fp8_input_store off by default).
  bool fp8_activation_inputs = true;
  /// With fp8_linear_inputs, bytes per element of the attention output kept for the backward:
  /// DeepSeek-V3's one E5M6 copy (1.5); Transformer Engine keeps the attention's own 16-bit output
  /// (its fused backward reads O) beside the projection's FP8 input (2 + 1).
  double fp8_attention_output_bytes = 1.5;
};

struct FrameworkTraits {
  Framework id = Framework::generic;
  const char* name = "";     // as in scenario files
  const char* version = "";  // the version (or era) whose behaviour the entry describes
  const char* source = "";   // where the behaviours below were read

  // ---- compute
  AttentionImpl attention = AttentionImpl::unfused;  // the attention kernel it runs unless the plan says otherwise
  /// From this compute capability on it runs `newer_attention` instead (0: never). Transformer
  /// Engine turns FlashAttention off on sm90 when cuDNN's fused attention applies.
  double newer_attention_from_cc = 0;
  AttentionImpl newer_attention = AttentionImpl::cudnn;
  MoeDispatch moe_dispatch = MoeDispatch::permute;  // how MoE tokens reach their experts
  /// Its grouped experts add the second Linear's bias outside the GEMM, scaled by each routed
  /// copy's probability, one small op pair per local expert (Megatron-Core's TEGroupedMLP
  /// _apply_bias, core_v0.15+, the models with expert biases: GPT-OSS).
  bool moe_fc2_bias_per_expert = false;
  ElementwiseTraffic elementwise;
  /// The elementwise traffic under torch.compile (plan.compile): Inductor's fused kernels. Unset:
  /// the framework does not compile.
  std::optional<ElementwiseTraffic> compiled_elementwise;

  // ---- precision and memory
  PrecisionRecipe precision;
  ActivationLayout activations;
  /// Transformer layers only: no embedding, LM head or loss (TeraPipe's evaluated model,
  /// zhuohan123/terapipe transformer_models.py).
  bool has_embedding_and_head = true;
  /// With pp > 1 the last stage holds its own copy of the tied word embedding (Megatron-LM).
  bool last_stage_embedding_copy = true;
  /// The two copies' gradients are summed once a step, an all-reduce between the first and the
  /// last stage (sim/cost_data_parallel.cpp): Megatron-LM's _allreduce_embedding_grads (Megatron-
  /// Core's finalize_model_grads), DeepSpeed's PipelineEngine._exec_reduce_tied_grads, this
  /// repository's trainer (trainer/trainer.cpp).
  bool sums_tied_embedding_copies = false;

  // ---- pipeline
  PipelineSend send_forward = PipelineSend::whole;
  /// The backward's send by default; a plan's comes from backward_send(plan).
  PipelineSend send_backward = PipelineSend::whole;
  /// Keeps only its TP partition of a stage's output after sending it and all-gathers it back
  /// before that micro-batch's backward (DeepSpeed's pipeline engine, without sequence parallelism).
  bool regathers_output_for_backward = false;

  // ---- data parallelism
  ZeroReduction zero_reduction = ZeroReduction::reduce_scatter;
  /// How its ZeRO-2 reduces, where that differs from stage 1's zero_reduction.
  std::optional<ZeroReduction> zero2_reduction;
  ZeroReduction reduction_at(int zero) const {
    return zero == 2 && zero2_reduction ? *zero2_reduction : zero_reduction;
  }
  /// Extra gradient bucket, in bytes of gradient elements (PyTorch DDP's bucket_cap_mb 25 MiB) or
  /// in elements (DeepSpeed's reduce_bucket_size); none when the framework reduces its contiguous
  /// gradient buffer in place (Megatron-LM).
  double dp_bucket_bytes = 0;
  double dp_bucket_elements = 0;
  /// Its ZeRO-1/2 optimizer allocates its reduction buckets whole (dp_bucket_elements each, or
  /// plan.reduce_bucket), whatever the model's size, wherever it runs with contiguous gradients:
  /// DeepSpeed's ipg_buffer (stage_1_and_2.py backward and reduce_gradients, v0.5.8 to v0.12).
  bool zero_whole_reduce_buckets = false;
  /// How many whole reduction buckets plan `p` of a model with (`moe`) or without MoE layers
  /// allocates on each GPU during its backward (zero_whole_reduce_buckets).
  int whole_reduce_buckets(const PlanSpec& p, bool moe) const;
  /// Elements per gradient-reduction bucket under plan `p`: plan.reduce_bucket where it sets one,
  /// else the framework's default for the plan's ZeRO stage (zero3_reduce_bucket_elements at stage
  /// 3 where the framework has one, else dp_bucket_elements); 0 for a framework without buckets of
  /// elements.
  double reduce_bucket_elements(const PlanSpec& p) const;
  /// The granularity at which an overlapped gradient reduction proceeds: the last bucket is what
  /// waits for the backward to finish. In bytes of gradients (PyTorch DDP: bucket_cap_mb), or in
  /// parameters, at least dp_overlap_bucket_elements and dp_overlap_bucket_elements_per_rank for
  /// each of the dp x cp ranks (Megatron-Core's bucket_size); with neither, the reduction bucket
  /// (reduce_bucket_elements: DeepSpeed's reduce_bucket_size under overlap_comm).
  double dp_overlap_bucket_bytes = 0;
  double dp_overlap_bucket_elements = 0, dp_overlap_bucket_elements_per_rank = 0;
  /// How the overlapped reduction's buckets take the word embedding, the parameter the backward
  /// finishes last (so it is in the last bucket reduced and the first gathered). Unset: a bucket
  /// closes once it has reached its size with the parameter that crosses it, so the embedding's
  /// holds the embedding, its positions and what came before them (Megatron-Core's
  /// _ParamAndGradBuffer, `for param in params[::-1]`; PyTorch DDP's bucket assignment in reverse
  /// parameter order). Set: a bucket is flushed before a parameter that would overflow it, so an
  /// embedding larger than the bucket goes alone (DeepSpeed's IPG bucket,
  /// reduce_independent_p_g_buckets_and_remove_grads: elements_in_ipg_bucket + numel >
  /// reduce_bucket_size flushes first).
  bool dp_bucket_flushes_before_overflow = false;
  /// A tied word embedding shared with a later pipeline stage is a bucket of its own under the
  /// distributed optimizer (Megatron-Core's _does_param_require_new_bucket: `shared_embedding` and
  /// use_distributed_optimizer), the positions going with the bucket before it.
  bool dp_shared_embedding_own_bucket = false;
  /// Only the first pipeline stage's first model chunk is split into buckets; every other stage
  /// and chunk reduces, and gathers, its parameters as one bucket (Megatron-Core's
  /// DistributedDataParallel: bucket_size = None where get_pipeline_model_parallel_rank() > 0, "not
  /// on the critical path", and for disable_bucketing, which get_model passes for model chunks
  /// after the first; core_r0.8.0 on).
  bool dp_buckets_first_stage_only = false;
  /// Parameters per overlapped-reduction bucket of plan `p` whose gradients reduce in
  /// `reduce_bytes` bytes each (as above).
  double overlap_bucket_elements(const PlanSpec& p, double reduce_bytes) const;
  /// Can reduce gradients while the backward runs (plan.dp_overlap), with and without pipelines,
  /// at ZeRO stages dp_overlap_min_zero..dp_overlap_max_zero.
  bool dp_overlap = true;
  bool dp_overlap_with_pipeline = true;
  int dp_overlap_min_zero = 0;
  int dp_overlap_max_zero = 3;
  const char* dp_overlap_refusal = "";  // why not, in the framework's terms
  const char* dp_overlap_zero_refusal = "";  // why not at the other ZeRO stages
  /// Whether it can reduce gradients during the backward of a plan with this many stages and
  /// this ZeRO stage.
  bool overlaps_dp_reduction(int pp, int zero) const {
    return dp_overlap && (pp == 1 || dp_overlap_with_pipeline) && zero >= dp_overlap_min_zero &&
           zero <= dp_overlap_max_zero;
  }
  /// Gathers the updated parameters of a ZeRO-1/2 step while the next forward runs
  /// (plan.param_gather_overlap: Megatron-Core's --overlap-param-gather).
  bool param_gather_overlap = false;

  // ---- what it can run (the planner offers only these)
  /// Indexed by Schedule: gpipe, 1f1b, interleaved, terapipe, zb-h1, dualpipe.
  bool schedules[kSchedules] = {true, true, true, false, false, false};
  bool sequence_parallel = true;
  bool selective_recompute = true;
  bool full_recompute = true;
  /// PyTorch's per-op selective activation checkpointing of whole blocks (plan.recompute
  /// selective-op, torchtitan's selective_ac_option "op").
  bool op_selective_recompute = false;
  /// Full recompute of only the first N layers of each stage (plan.recompute_layers; Megatron-LM's
  /// --recompute-method block).
  bool partial_recompute = true;
  /// Varies recompute by micro-batch (plan.partial_recompute_microbatches).
  bool microbatch_recompute = false;
  /// Splits the layers over pipeline stages (plan.pp > 1) and the layers' GEMMs over tensor-parallel
  /// ranks (plan.tp > 1).
  bool pipeline_parallel = true;
  bool tensor_parallel = true;
  /// Shards the optimizer state alone (ZeRO-1: a distributed optimizer, DeepSpeed stage 1).
  bool zero1 = true;
  /// Its ZeRO-2 is FSDP's SHARD_GRAD_OP: parameters sharded between steps, gathered for every
  /// micro-batch's forward and kept to its backward, gradients reduce-scattered every micro-batch.
  /// That is ZeRO-3 with reshard_after_forward false in this vocabulary, which prices it so; plan.zero
  /// 2 (a distributed optimizer's one reduction and one gather a step) is refused with that advice.
  bool zero2_is_shard_grad_op = false;
  int max_zero = 3;
  int max_zero_with_pipeline = 3;
  /// The lowest ZeRO stage it runs with its precision recipe (torchtitan: FSDP2, zero 3; its DDP
  /// and single-device paths use autocast instead, framework pytorch).
  int min_zero = 0;
  /// Its tensor parallelism always shards the norms over the sequence (torchtitan's TP plan).
  bool tp_needs_sequence_parallel = false;
  /// Its sequence-parallel activations are batch-first (b, s, h) tensors sharded on the sequence
  /// (dim 1) while NCCL gathers and scatters along dim 0: each blocking all-gather is followed, and
  /// each reduce-scatter preceded, by a chunk-and-cat copy of the whole (b, s, h) activation when
  /// b > 1 (PyTorch DTensor over torch.distributed._functional_collectives all_gather_tensor and
  /// reduce_scatter_tensor; _maybe_view_chunk_cat returns a view only when every dim before the
  /// gather dim is 1). Megatron-LM's (s, b, h) layout gathers along dim 0 and needs no copy.
  bool tp_batch_first_relayout = false;
  /// With dtype fp8 and tensorwise scaling its forward sequence-parallel all-gathers carry the
  /// column-parallel linears' inputs already cast to float8, 1 byte per element (torchtitan's
  /// enable_float8_tensorwise_tp: torchao Float8ColwiseParallel / PrepareFloat8ModuleInput; rowwise
  /// recipes gather in bf16). Reduce-scatters and the backward stay bf16.
  bool fp8_tensorwise_tp_gather = false;
  /// Gathers the layers' GEMM weights in FP8 when the plan asks (PlanSpec::fp8_param_gather): under
  /// ZeRO-3 torchao's FSDP float8 all-gather (tensorwise scaling only: torchao/float8
  /// fsdp_utils.py), under ZeRO-1/2 Megatron-Core's --fp8-param-gather.
  bool fp8_param_gather = false;
  /// Under ZeRO-3 its sharding is FSDP2 (fully_shard): a unit's parameters are all-gathered into
  /// one flat buffer and copied out into per-parameter tensors (split_with_sizes_copy: read and
  /// write the gathered dtype), and its gradients copied into the flat reduce-scatter buffer,
  /// cast to reduce_dtype on the way (chunk_cat: read the compute dtype, write the reduce dtype),
  /// both on the compute stream (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:
  /// foreach_all_gather_copy_out waits for the gather on the current stream; foreach_reduce copies
  /// in before reduce_scatter_stream.wait_stream(current_stream)). FSDP1's FlatParameter gathers
  /// into the flat parameter its views already point at and reduces the flat gradient in place.
  bool fsdp2_unit_copies = false;
  /// Under ZeRO-3 with a pipeline (pp > 1), gradients are reduced once per step rather than per
  /// micro-batch: torch.distributed.pipelining's PipelineStage.backward_maybe_with_nosync turns
  /// FSDP2's requires_gradient_sync and reshard_after_backward off for every micro-batch's
  /// backward and, after the last one, runs post_backward on every parameter group at once
  /// (pytorch/pytorch torch/distributed/pipelining/stage.py, 2024-25). So the parameters stay
  /// gathered from the first micro-batch on (with reshard_after_forward false: one gather per
  /// unit per step), the unsharded gradients accumulate in reduce_dtype across micro-batches, and
  /// the stage's whole gradient is reduce-scattered after its last backward, exposed.
  bool fsdp_pipeline_step_sync = false;
  /// ZeRO-3's gather unit: a transformer layer (FSDP wrapping each block, one all-gather per layer
  /// and pass) or each module holding parameters (DeepSpeed stage 3: the pre-forward and
  /// pre-backward hooks of every nn.Module fetch its own parameters, v0.6+ as one coalesced
  /// all-gather per module: a layer's QKV, output projection and the MLP's two or three
  /// projections; partitioned_param_coordinator.py fetch_sub_module).
  Zero3Unit zero3_unit = Zero3Unit::layer;
  /// ZeRO-3 reduces gradients in buckets of this many elements rather than once per unit (0):
  /// DeepSpeed's reduce_bucket_size (5e8 by default; plan.reduce_bucket overrides it), each bucket
  /// one reduce-scatter.
  double zero3_reduce_bucket_elements = 0;
  /// Gathered parameters are copied out of the flat gather buffer on the gather stream (DeepSpeed's
  /// AllGatherCoalescedHandle.wait: a torch.cat per parameter, read + write in the gather dtype).
  bool zero3_gather_copies = false;
  /// Passes over each reduced gradient before its reduce-scatter on the reduction stream, each a
  /// read and a write in the reduce dtype (DeepSpeed: the copy into the IPG bucket, the
  /// interleaving cat of reduce_scatter_coalesced, the div_ by the world size).
  int zero3_reduce_copy_passes = 0;
  /// A gradient at least a bucket's size (zero3_reduce_bucket_elements) is reduce-scattered alone
  /// and whole, in one collective, with one pass over it (the div_): DeepSpeed's stage 3 flushes
  /// the bucket when a gradient would overflow it and appends the big gradient without copying it
  /// into the contiguous buffer; the next gradient then flushes it alone, and
  /// reduce_scatter_coalesced of one tensor skips its interleaving copy (stage3.py
  /// reduce_independent_p_g_buckets_and_remove_grads and __add_grad_to_ipg_bucket, v0.6.2 and
  /// v0.10.0). The biases and norms that arrive between two such gradients are one small flush each.
  bool zero3_large_gradients_alone = false;
  /// The backward's host work per ZeRO-3 unit (its hooks, the calibrated unit_overhead) runs while
  /// the GPU has little queued, so the GPU waits for it unless it is waiting for the unit's gather
  /// anyway: DeepSpeed's stage 3 gradient hooks run on the autograd thread, queue each reduction
  /// behind the compute stream (reduce_and_partition_stream.wait_stream(default_stream)) and block
  /// the thread on the reduction two flushes back (param_reduce_events beyond
  /// max_param_reduce_events = 2, .synchronize(); stage3.py v0.6.2 l.1494-1531, v0.9.2
  /// l.1065-1097), so the backward's kernels are launched no further ahead than that. Unset
  /// (FSDP): the host runs ahead in the backward too and a unit costs the longer of its GPU time
  /// and its host work (sim/cost_data_parallel.cpp sharded_exposure).
  bool zero3_backward_host_serial = false;
  /// With a complete prefetch trace a module's fetch that gathers one parameter gathers it in place,
  /// without the copy-out of zero3_gather_copies (all_gather_coalesced of a single parameter,
  /// partition_parameters.py v0.6.2 and v0.10.0): the small parameters below
  /// zero3_persistence_elements are never released, so a weight is fetched alone unless its bias
  /// is above the threshold.
  bool zero3_lone_gathers_in_place = false;
  /// Before each unit's reduce-scatter, on the stream that runs it, FSDP1's post-backward hook casts
  /// the unsharded gradient to the reduce dtype where it differs (read the gradient's, write the
  /// reduce dtype) and divides it in place by the predivide factor (read and write; every shard
  /// group of 2 or more ranks has a factor above 1): torch/distributed/fsdp/_runtime_utils.py
  /// _post_backward_hook and _reduce_grad (_div_if_needed), PyTorch 2.0-2.3.
  bool fsdp1_reduce_passes = false;
  /// ZeRO-3's next unit is gathered while this one computes (FSDP's prefetch; DeepSpeed's
  /// trace-driven prefetch once its module trace is complete). false: each unit is gathered when it
  /// starts and waited for, behind the reduce-scatter before it on the same NCCL stream, and
  /// nothing is kept for reuse (the reuse distance is read off that trace), so a recomputed layer
  /// is gathered for its recompute and again for its backward.
  bool zero3_prefetch = true;
  /// Its ZeRO-3 came in releases with and without a working prefetch trace (plan.zero3_prefetch:
  /// DeepSpeed's parameter coordinator); zero3_prefetch is the default.
  bool zero3_prefetch_choice = false;
  /// Whether a plan's ZeRO-3 prefetches and keeps parameters for reuse: its choice, else this
  /// framework's zero3_prefetch.
  bool prefetches_zero3(const PlanSpec& p) const;
  /// ZeRO-3 can keep each unit gathered from its forward to its backward (plan.reshard_after_forward
  /// false: FSDP's SHARD_GRAD_OP, FSDP2's reshard_after_forward=False). DeepSpeed's stage 3 has no
  /// such mode: it releases every module after use and keeps only what stage3_max_reuse_distance
  /// and stage3_param_persistence_threshold say.
  bool zero3_keep_gathered = true;
  /// Under ZeRO-3 only the transformer layers are sharding units: the embedding and the output
  /// layer (with the final norm) are gathered once per step and stay gathered across its
  /// micro-batches, their gradients still reduce-scattered every micro-batch (Megatron-FSDP,
  /// core_v0.14-0.15: TransformerLayer is the FSDP unit, mcore_fsdp_adapter.py; the other
  /// buckets have no post-forward release and are freed by AllGatherPipeline.reset at the step's
  /// end, megatron_fsdp/param_and_grad_buffer.py, and gathered again by start_param_sync after the
  /// optimizer step).
  bool zero3_edges_gathered_per_step = false;
  /// Under ZeRO-3 without gradient-accumulation fusion, each unit's gradients are copied into its
  /// reduce-scatter bucket on the compute stream (read the compute dtype, write the reduce
  /// dtype: Megatron-FSDP's _grad_acc, main_grad.copy_(param.grad), megatron_fsdp.py); with the
  /// fusion the weight-gradient GEMMs write into the bucket and nothing is copied.
  bool zero3_grad_copy_unless_fused = false;
  /// Unsharded gradient units alive under ZeRO-3: the unit being reduce-scattered (1), or two
  /// where the framework double-buffers its reduce-scatter buckets (Megatron-FSDP: the older
  /// reduce-scatter is waited for before a third unit's bucket is taken, param_and_grad_buffer.py
  /// _enforce_double_buffer_limit).
  int zero3_unsharded_grad_units = 1;
  /// Under HSDP (plan.shard_group), the shards are all-reduced across the replicas in the step's
  /// last backward only, not every micro-batch's (Megatron-FSDP: no_sync's is_last_microbatch
  /// gates its outer-DP reduction alone, megatron_fsdp.py; PyTorch's HYBRID_SHARD and FSDP2's
  /// foreach_reduce all-reduce every time they reduce-scatter).
  bool hsdp_outer_reduce_per_step = false;
  /// Parameters used again within this many elements stay gathered instead of being released
  /// (DeepSpeed stage3_max_reuse_distance, 1e9): the last layers of the forward are not gathered
  /// again for the backward. 0: every released unit is gathered again. Only where the plan's ZeRO-3
  /// prefetches (prefetches_zero3: the distance is read off the prefetch trace).
  double zero3_reuse_elements = 0;
  /// Parameters of at most this many elements are kept whole on every rank (DeepSpeed
  /// stage3_param_persistence_threshold, 1e5: the norms' and the biases' vectors) and, after each
  /// optimizer step, gathered again one collective per parameter (_post_step). 0: none.
  double zero3_persistence_elements = 0;
  /// Offloaded activations move layer by layer: each layer's checkpoint to the host as the layer
  /// finishes and back as its backward begins (DeepSpeed's activation checkpointing with
  /// cpu_checkpointing, runtime/activation_checkpointing/checkpointing.py), so two layers' are staged
  /// on the device rather than a whole chunk's.
  bool activation_offload_per_layer = false;
  /// Host memory traffic of one parameter's optimizer step on the CPUs when the optimizer is
  /// offloaded (plan.offload.optimizer), bytes: the step streams the fp32 state, so its time is
  /// this times the parameters over the host's memory bandwidth (cost_models::offload_cost).
  /// Default 80: PyTorch's AdamW on CPU tensors, which takes its single-tensor path (foreach and
  /// fused default to accelerator tensors only: torch/optim/optimizer.py
  /// _default_to_fused_or_foreach), pass by pass in torch/optim/adam.py _single_tensor_adam with
  /// 4-byte elements: the decoupled weight decay param.mul_ (read 4, write 4), exp_avg.lerp_ (8 +
  /// 4), exp_avg_sq.mul_ (4 + 4) and addcmul_ (8 + 4), the denominator's sqrt, division and add_
  /// (3 x (4 + 4)), param.addcdiv_ (12 + 4): 80.
  double host_optimizer_bytes_per_param = 80;
  /// The weight-gradient GEMMs accumulate into the fp32 main gradients (Megatron-LM's
  /// gradient_accumulation_fusion, fused_weight_gradient_mlp_cuda / Transformer Engine's
  /// fuse_wgrad_accumulation), so no separate accumulation pass follows each micro-batch.
  /// Megatron-LM added it on 2022-02-13 (NVIDIA/Megatron-LM 83b1e42, default on, fp32 main-grad
  /// accumulation only; fp16 from 2022-09-27, 07916bf); plan.gradient_accumulation_fusion
  /// overrides it where main gradients are fp32.
  bool gradient_accumulation_fusion = false;
  /// Whether a plan fuses the accumulation: the plan's choice, else this framework's default.
  /// (Megatron-FSDP fuses into its sharded buckets too: the weight-gradient GEMMs write into them.)
  bool fuses_gradient_accumulation(const PlanSpec& p) const;
  /// Its interleaved schedule can post pipeline sends and receives asynchronously and wait for each
  /// only before the chunk that needs it (Megatron-Core's overlap_p2p_comm), and does so by default
  /// (core_v0.15.0 megatron/training/arguments.py: --no-overlap-p2p-communication is store_false;
  /// it is forced off without virtual stages). Everything else sends blocking.
  bool p2p_overlap = false;
  /// Whether a plan's pipeline sends leave the sender's stream going: its choice, else this
  /// framework's default; the interleaved schedule with pp > 1 only.
  bool overlaps_pipeline_sends(const PlanSpec& p) const;
  /// How a plan's pipeline sends the backward's gradient: send_backward, or whole from every TP
  /// rank where the plan picks DeepSpeed's engine before v0.5.4 (plan.partitioned_pipe_grads false).
  PipelineSend backward_send(const PlanSpec& p) const;
  /// Its unfused attention runs Megatron's fused scale-mask-softmax kernel
  /// (megatron/model/fused_softmax.py FusedScaleMaskSoftmax: Megatron-LM, Megatron-DeepSpeed,
  /// Megatron-Core's local attention), which falls back to PyTorch ops when its size conditions
  /// fail (plan.fused_softmax false).
  bool fused_softmax = false;
  /// It has DeepSpeed's BF16_Optimizer (plan.bf16_optimizer): bf16 training with its own ZeRO-1-style
  /// sharding of the fp32 state and an unsharded fp32 gradient buffer.
  bool bf16_optimizer = false;
  /// Its pipeline engine came in two releases that send the backward's gradient differently
  /// (plan.partitioned_pipe_grads: DeepSpeed before and after v0.5.4); the later one is the default.
  bool pipe_grads_partitioning = false;
  /// Its ZeRO-2/3 path runs beside expert parallelism (plan.ep > 1).
  bool sharded_expert_parallel = true;
  /// Builds MoE layers into pipeline stages (a MoE model with plan.pp > 1).
  bool moe_with_pipeline = true;
  /// Runs ZeRO-3 on a model with MoE layers (any plan.ep).
  bool moe_zero3 = true;
  /// Runs context parallelism (plan.cp > 1).
  bool context_parallel = false;
  /// The K/V exchanges it runs context parallelism with (plan.cp_comm, indexed by CpComm): a
  /// ring, one all-gather, or Ulysses-style all-to-alls around attention.
  bool cp_comms[kCpComms] = {true, true, false};
  /// Runs context parallelism beside tensor parallelism (plan.cp > 1 with plan.tp > 1).
  bool cp_with_tensor_parallel = true;
  /// Copies of each tensor an all-to-all context-parallel exchange moves (plan.cp_comm
  /// all-to-all), each reading and writing it once: the re-layouts around the collective.
  double cp_all_to_all_copies = 2;
  /// Context parallelism is PyTorch's experimental context_parallel around SDPA
  /// (torch/distributed/tensor/experimental/_attention.py, 2024-25): it exchanges K and V as SDPA
  /// receives them, so with GQA after the model's repeat_kv (every query head's copy), and in the
  /// backward passes dK and dV, accumulated in fp32 (convert_to_f32), around the ring one step
  /// at a time (the ALL_TO_ALL rotater), each send hidden under the next step's block and the last
  /// one waited for after the loop; forward K/V all-gathered once (ALL_GATHER rotater) under the
  /// first, local block. Otherwise Transformer Engine's: the kv heads only, 16-bit gradients, an
  /// exposed all-gather forward and reduce-scatter backward (cp_comm all-gather).
  bool cp_torch_sdpa = false;
  /// Overlaps TP collectives with GEMMs (plan.tp_overlap).
  bool tp_overlap = false;
  /// Its TP overlap is an Inductor pass (async TP: torch._inductor micro-pipeline TP), so it runs
  /// only under torch.compile (plan.compile).
  bool tp_overlap_needs_compile = false;
  /// Splits layers unevenly over pipeline stages (plan.stage_layers, first/last_stage_layers).
  bool uneven_pipeline = true;
  /// Splits layers unevenly over the interleaved schedule's model chunks (plan.stage_layers with
  /// pp x virtual_stages counts): torchtitan's split points name any layer as a stage boundary.
  bool uneven_interleaved = false;
  /// Splits layers over stages by DeepSpeed's PipelineModule partition_method (plan.partition_method).
  bool partition_method = false;
  /// Shards ZeRO state over part of the data-parallel group and replicates it across the rest
  /// (plan.shard_group: PyTorch HSDP and the like).
  bool hybrid_sharding = true;
  /// Its hybrid sharding shards within a node and replicates across nodes, nothing else (FSDP1's
  /// HYBRID_SHARD without a device mesh builds its shard groups from the node's local ranks): a
  /// plan.shard_group other than the data-parallel group must be the node's GPUs.
  bool hybrid_sharding_per_node = false;
  /// Takes one optimizer step per micro-batch (its training loop has no gradient accumulation):
  /// global_batch = micro_batch x dp x cp.
  bool gradient_accumulation = true;
  /// Trains in FP8 when training.dtype says so (torchao's float8 or Transformer Engine's recipes).
  bool fp8_training = true;
  /// Runs ZeRO-1 (a sharded optimizer) beside expert parallelism (plan.zero 1 with plan.ep > 1).
  bool zero1_expert_parallel = true;

  // ---- offload (what it can move to host memory)
  /// Keeps the optimizer state and fp32 master weights in host memory and steps them on the CPUs
  /// (plan.offload.optimizer), at ZeRO stages optimizer_offload_min_zero..max_zero: offloading is
  /// a mode of its sharded optimizer where it has one. Where it cannot, optimizer_offload_refusal
  /// says why in its terms.
  bool optimizer_offload = true;
  int optimizer_offload_min_zero = 0;
  int optimizer_offload_max_zero = 3;
  const char* optimizer_offload_refusal = "";
  /// With the optimizer on the host at ZeRO-2, each reduction bucket's gradients go to the host's
  /// fp32 partition as the backward completes the bucket, so the device keeps no gradient buffer
  /// beyond its reduction bucket and a staging buffer of its largest parameter, even on one GPU
  /// (DeepSpeed's ZeRO-Offload). At ZeRO-1 the whole .grad fills first: its backward hooks exist
  /// only with partition_gradients or overlap_comm, which stage 1 ignores.
  bool offloaded_optimizer_streams_gradients = false;
  /// Whether plan `p` runs that way under this framework.
  bool streams_gradients_to_host(const PlanSpec& p) const;
  /// How an offloaded optimizer's gradients reach the host. gradient_dtype: once a step, in the
  /// gradient dtype, into a host buffer of that dtype. deepspeed: DeepSpeed's ZeRO-Offload paths
  /// (offloaded_gradient_bytes says which bytes they move).
  OffloadGradientPath offloaded_gradient_path = OffloadGradientPath::gradient_dtype;
  /// Per parameter a GPU of pipeline stage `stage` updates on the host, for a step of
  /// `microbatches` micro-batches whose gradients are `grad_bytes` wide: the bytes its gradients
  /// move to the host and back over PCIe, and the gradient bytes the host keeps for them.
  OffloadedGradientBytes offloaded_gradient_bytes(const PlanSpec& p, int stage, int microbatches,
                                                  double grad_bytes) const;
  /// Moves stored activations to host memory between a layer's forward and its backward
  /// (plan.offload.activations). activation_offload_refusal says why not where it cannot.
  bool activation_offload = true;
  /// The offloaded layers stream out and back one at a time on copy streams of their own, each
  /// copy overlapping the layers computed until the next window boundary, where the compute
  /// stream waits for it (Transformer Engine's AsyncDoubleBufferGroupOffloadHandler, which
  /// Megatron-Core's TransformerConfig.cpu_offloading drives: cpu_offload.py, TE v2.7-v2.9; the
  /// first cpu_offloading_num_layers layers of the model are offloaded, group i when layer
  /// (L / N)(i + 1) - 1 commits, and reloaded group by group in the backward). Otherwise a
  /// chunk's activations move as one transfer after its forward and back before its backward.
  bool activation_offload_windows = false;
  const char* activation_offload_refusal = "";
  /// Only what a fully recomputed layer keeps (its input checkpoint) goes to the host: the plan
  /// must recompute every layer (DeepSpeed's activation checkpointing with cpu_checkpointing).
  bool activation_offload_needs_full_recompute = false;
  /// Offload and recompute exclude each other: no recompute of any kind (Megatron-Core's
  /// TransformerConfig: "CPU offloading does not work when activation recomputation is enabled").
  bool activation_offload_without_recompute = false;
  /// Offloads with a pipeline (plan.pp > 1).
  bool activation_offload_with_pipeline = true;
  /// Can offload every layer's activations (Megatron-Core: cpu_offloading_num_layers must be below
  /// num_layers, so at most layers - 1 of them; plan.offload.activations < 1).
  bool activation_offload_every_layer = true;
  /// The largest plan.offload.activations it can run for a model of `layers` layers.
  double max_activation_offload(int layers) const {
    return activation_offload_every_layer || layers < 2 ? 1.0 : double(layers - 1) / layers;
  }

  // ---- Mixture-of-Experts
  /// Folds expert parallelism over tp x cp x dp with the experts' own tensor-parallel degree
  /// (plan.expert_tp): Megatron-Core's MoE parallel folding (core_r0.10+, expert_tensor_parallel_size;
  /// Liu et al. 2025, arXiv:2504.14960). Without it, ep divides dp and the experts split over tp.
  bool expert_folding = false;
  /// Its all-to-all dispatcher sends the routed copies' router probabilities in an all-to-all of
  /// their own beside the tokens, each direction (Megatron-Core's MoEAlltoAllTokenDispatcher,
  /// core_r0.13-r0.17 token_dispatcher.py token_dispatch / _AllToAll.backward): a third exchange
  /// per layer and direction, latency-bound.
  bool moe_probs_all_to_all = false;
  /// Overlaps each MoE layer's all-to-alls with another micro-batch's compute (plan.ep_overlap):
  /// Megatron-Core's --overlap-moe-expert-parallel-comm with --delay-wgrad-compute (core_r0.14+,
  /// pipeline_parallel/combined_1f1b.py): the forward of one micro-batch runs layer by layer beside
  /// the backward of another, their all-to-alls on a communication stream under each other's
  /// attention and expert compute; PP 1 or the interleaved schedule only.
  bool ep_overlap = false;
  /// Runs Transformer Engine's fused MoE permute and unpermute (plan.moe_permute_fusion) and
  /// overlaps shared experts with the dispatcher (plan.moe_shared_expert_overlap): Megatron-Core's
  /// --moe-permute-fusion (TE pytorch/triton/permutation.py, core_r0.12+) and
  /// --moe-shared-expert-overlap (transformer/moe/shared_experts.py).
  bool moe_te_fusions = false;
  /// Can dispatch through DeepEP (plan.ep_dispatcher = deepep): Megatron-Core's flex dispatcher
  /// (--moe-token-dispatcher-type flex --moe-enable-deepep, core_r0.13+).
  bool deepep = false;
  /// Its DeepEP dispatch sends FP8 tokens under FP8 training (one fp32 scale per 128 elements), as
  /// DeepSeek-V3's own system does (report sec. 3.3); false: the 16-bit hidden states, as
  /// Megatron-Core's flex dispatcher passes them to buffer.dispatch in every release through
  /// core_v0.17 (fused_a2a.py FusedDispatch; its FP8 dispatch, moe_dispatch_fwd_dtype mxfp8 on the
  /// ncclep backend, is on main only, 2026-08).
  bool deepep_fp8_dispatch = false;
  /// Re-runs cheap modules in the backward instead of storing their outputs
  /// (plan.recompute_modules): Megatron-Core's --recompute-modules layernorm mla_up_proj moe_act.
  bool recompute_modules = false;
  /// Builds multi-token prediction modules (model.mtp_layers): Megatron-Core's --mtp-num-layers
  /// (core_r0.13+, megatron/core/transformer/multi_token_prediction.py).
  bool mtp = false;
  /// Builds only GPT-2/3 blocks (the bundled trainer's model, trainer/gpt.hpp): LayerNorm, a GeLU
  /// MLP, biases, learned positions, a tied LM head, heads x head_dim = hidden with a K/V head per
  /// query head; MoE layers with a capacity, experts as wide as the dense FFN, no shared experts and
  /// no leading dense layers. model_refusal names the first feature outside that.
  bool gpt_blocks_only = false;
  /// Its refusals are features not built yet rather than the framework's design (this repository's
  /// trainer): they say so ("... yet").
  bool in_development = false;
  /// " yet" for a framework in development, "" otherwise: the end of a refusal's "does not run X".
  const char* not_yet() const { return in_development ? " yet" : ""; }
  /// Fuses the vocabulary-parallel cross-entropy (plan.cross_entropy_fusion): Megatron-Core's
  /// --cross-entropy-loss-fusion [--cross-entropy-fusion-impl native|te].
  bool cross_entropy_fusion = false;
  /// With tp > 1 its eager loss runs on the vocabulary-sharded logits through PyTorch's
  /// loss_parallel (torch/distributed/tensor/parallel/loss.py): log-softmax and NLL decomposed into
  /// separate fp32 passes, the row max, sum and target logit all-reduced over TP. torchtitan turns
  /// it on whenever TP is (ParallelDims.loss_parallel_enabled, 9dec370).
  bool dtensor_loss_parallel = false;
  /// Pipelines keep every micro-batch's last-stage output (the 16-bit logits) until the step
  /// ends: torch.distributed.pipelining's stage appends each to output_chunks for the schedule's
  /// final merge.
  bool pp_keeps_stage_outputs = false;
  /// Defers the last stage's LM-head weight-gradient GEMMs to the pipeline flush
  /// (plan.defer_embedding_wgrad): Megatron-Core's --defer-embedding-wgrad-compute.
  bool defers_embedding_wgrad = false;

  // ---- precision
  /// Its FP8 linears are Transformer Engine's: with training.fp8_scaling tensorwise, TE's
  /// Float8CurrentScaling (an amax pass and a cast per quantized tensor, FP8 weights cached across
  /// micro-batches); otherwise tensorwise and rowwise mean torchao's dynamic casts.
  bool fp8_transformer_engine = false;
  /// Runs blockwise-scaled FP8 (training.fp8_scaling blockwise: Transformer Engine's
  /// Float8BlockScaling, or DeepSeek-V3's own 1 x 128 / 128 x 128 kernels).
  bool fp8_blockwise = false;
  /// Under delayed scaling, each FP8 region (Megatron-Core wraps a model chunk's TransformerBlock
  /// forward in te.fp8_autocast) ends with Transformer Engine's amax reduction: one all-reduce
  /// (MAX, async_op=False) of the region's amaxes over the stage's tensor-, context- and
  /// data-parallel ranks (parallel_state.get_amax_reduction_group(with_context_parallel=True),
  /// the default from core_r0.7.0 on; --tp-only-amax-red, core_r0.10+, narrows it), at the
  /// region's exit in the forward and after its first module's backward (TE v1.11 fp8.py
  /// fp8_autocast_exit -> reduce_and_update_fp8_tensors; module/base.py
  /// reduce_and_update_bwd_fp8_tensors). The compute stream waits for it before the next pass.
  bool fp8_amax_reduction = false;
  /// What `foresight plan` writes for its plans beside plan.json (see Launcher).
  Launcher launcher = Launcher::megatron_lm;

  /// Why the framework cannot execute `plan` (schedule, sequence parallelism, recompute, ZeRO,
  /// pipeline splits, overlaps, buckets), as the plan field, its value and the rule, naming the
  /// frameworks that can; nothing when it can. The one home of these rules: check_plan reports
  /// them for a written plan and the planner's search skips such candidates (runs).
  std::optional<PlanViolation> refusal(const PlanSpec& plan) const;
  /// Why the framework cannot build `model` (its multi-token prediction modules), as the model
  /// field, its value and the rule; nothing when it can. check_plan reports it.
  std::optional<PlanViolation> model_refusal(const ModelSpec& model) const;
  /// Why the framework cannot execute `plan` on `model` where the rule needs both (MoE layers in
  /// pipeline stages or under ZeRO-3); nothing when it can. check_plan reports it.
  std::optional<PlanViolation> model_plan_refusal(const ModelSpec& model, const PlanSpec& plan) const;
  /// Whether the framework can execute `plan`: no refusal.
  bool runs(const PlanSpec& plan) const { return !refusal(plan).has_value(); }
  /// "megatron (Megatron-LM v2.x-v3.0, 2021-22)".
  std::string describe() const;
};

/// The table entry of a framework.
const FrameworkTraits& framework_traits(Framework f);

}  // namespace foresight
