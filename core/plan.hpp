// The training setup (batch, precision, optimizer) and a parallel plan: how one iteration is split
// over GPUs. check_plan() holds every rule that makes a plan runnable; the loader and the planner
// both call it, so a plan file and a generated plan are judged alike.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan_violation.hpp"

namespace foresight {

struct TrainingSpec {
  int global_batch = 0;  // sequences per iteration
  Dtype dtype = Dtype::bf16;
  /// With dtype fp8: how the linears' inputs are scaled (delayed: Transformer Engine's recipe;
  /// tensorwise / rowwise: torchao's float8 training with dynamic scales, as torchtitan runs it).
  Fp8Scaling fp8_scaling = Fp8Scaling::delayed;
  Optimizer optimizer = Optimizer::adam;
  /// The optimizer state's dtype: fp32 (mixed-precision Adam: an fp32 master copy and fp32 moments,
  /// ZeRO paper sec. 3.1), or bf16: moments in bf16, and the bf16 weights updated in place with no
  /// master copy, except that FP8 parameters (plan.fp8_param_gather) keep a bf16 one. That is NeMo's
  /// distributed fused Adam with optim.dtype bf16 (megatron_base_model.py: store_params False when
  /// the optimizer dtype is the model's, True under fp8_params).
  Dtype optimizer_state_dtype = Dtype::fp32;
  /// The measurement is a short run on a cool GPU (a benchmark of a few seconds): its GEMMs and
  /// attention ran at burst clocks, not at the power-capped clock a long run settles to
  /// (GpuKernelFigures::sustained_clock_scale). Default false: a training run.
  bool burst_clocks = false;
};

struct OffloadSpec {
  bool optimizer = false;    // optimizer state (and fp32 master weights) live in host memory
  double activations = 0.0;  // fraction of stashed activations kept in host memory, 0..1
};

/// Megatron-Core's --recompute-modules (core_r0.13+, selective granularity), each independent of
/// plan.recompute's attention-core choice. The first three are cheap ops whose outputs are not
/// stored but re-run in the backward (output-discarding checkpoints); DeepSeek-V3 (sec. 3.4,
/// 3.3.2) recomputes all three. The last three checkpoint a whole submodule: only its input is
/// kept and its forward, collectives included, runs again before its backward
/// (megatron/core/transformer/transformer_config.py recompute_modules; transformer_layer.py,
/// moe/moe_layer.py, moe/shared_experts.py).
struct RecomputeModules {
  bool layernorm = false;       // the norms' outputs (the QKV and FFN inputs)
  bool mla_up_proj = false;     // MLA's up-projections: queries, keys and values from the latents
  bool moe_act = false;         // the routed experts' activation (SwiGLU) output, the FC2 input
  bool mlp = false;             // a dense layer's MLP (its fused norm, FC1, activation, FC2)
  bool moe = false;             // an MoE layer's MoE block: router, dispatch, experts, combine
  bool shared_experts = false;  // an MoE layer's shared experts
  bool any() const { return layernorm || mla_up_proj || moe_act || mlp || moe || shared_experts; }
};
/// The modules set, by Megatron-Core's --recompute-modules names, joined by `separator`.
std::string recompute_module_names(const RecomputeModules& mods, const std::string& separator);

struct PlanSpec {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  /// Context parallelism: each sequence is split over cp ranks (2 cp chunks, rank i holding i and
  /// 2cp - 1 - i, so causal attention work is even: Megatron-Core's load balancing).
  int cp = 1;
  CpComm cp_comm = CpComm::ring;
  /// cp_comm a2a+p2p: the cp ranks of each all-to-all group (the rest of cp is the ring's).
  int cp_a2a = 0;
  /// Ranks a context-parallel rank exchanges Q, K, V and the output with by all-to-all (head
  /// split), and ranks of its ring (sequence split): cp and 1, 1 and cp, or cp_a2a and cp / cp_a2a.
  int cp_heads() const {
    return cp_comm == CpComm::all_to_all ? cp : cp_comm == CpComm::all_to_all_ring ? std::max(1, cp_a2a) : 1;
  }
  int cp_ring() const { return cp / std::max(1, cp_heads()); }
  int micro_batch = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  // Data-parallel gradient reduction in buckets while the last micro-batch's backward runs
  // (PyTorch DDP outside no_sync, Megatron-LM's --overlap-grad-reduce); false: after the backward
  // (Megatron-LM's local DDP of 2021, DeepSpeed's pipeline engine, the bundled trainer).
  bool dp_overlap = false;
  /// Tensor-parallel collectives overlapped with the GEMMs they feed, chunk by chunk (Megatron-Core
  /// --tp-comm-overlap with Transformer Engine's userbuffers; torchtitan's async TP). Needs
  /// sequence parallelism.
  bool tp_overlap = false;
  Recompute recompute = Recompute::none;
  /// torch.compile (Inductor) over the model's blocks: elementwise kernels fused into fewer,
  /// larger ones (the framework's compiled traffic, core/framework.hpp). Frameworks that compile:
  /// pytorch, torchtitan (--training.compile).
  bool compile = false;
  /// torch.compile over the loss too (cross-entropy on the .float() logits fused into one kernel
  /// each way: no fp32 copies of the logits). torchtitan compiles it with --training.compile since
  /// pytorch/torchtitan#1033 (commit bbb1b616e, 2025-04-02); before that train.py left it eager
  /// ("compiling loss function causes CUDA errors", e.g. at 9dec370, 2024-12-26). Needs compile.
  bool compile_loss = false;
  /// Megatron-Core's fused cross-entropy (CrossEntropyFusion; FrameworkTraits::cross_entropy_fusion):
  /// NeMo's cross_entropy_loss_fusion (NeMo 1.0 yaml, Megatron-Core core_r0.8+) is native; NeMo 2.0
  /// performance scripts and Megatron-Bridge set cross_entropy_fusion_impl te.
  CrossEntropyFusion cross_entropy_fusion = CrossEntropyFusion::none;
  /// With recompute = full: how many transformer layers of each pipeline stage (of each model
  /// chunk under interleaving) are recomputed, counted from the stage's first layer; the others
  /// keep all their activations (Megatron-LM --recompute-method block --recompute-num-layers N).
  /// 0: every layer (--recompute-method uniform --recompute-num-layers 1).
  int recompute_layers = 0;
  /// Micro-batch-level recompute (Korthikanti et al. 2022's micro-batch granularity; Megatron-Core's
  /// schedules num_microbatches_with_partial_activation_checkpoints, which NeMo drives): in each
  /// window of a stage's outstanding micro-batches (1F1B: min(pp - stage - 1, m) + 1), the first
  /// K recompute only their first recompute_layers layers, the others recompute every layer. 0: off.
  int partial_recompute_microbatches = 0;
  int zero = 0;  // 0..3; 1 = distributed optimizer (optimizer state sharded over dp)
  /// The data-parallel ranks ZeRO shards over: the innermost `shard_group` ranks of each
  /// data-parallel group, replicated across dp / shard_group such groups (PyTorch HSDP,
  /// DeepSpeed ZeRO++ hpZ-like, Megatron-Core's distributed-optimizer instances). 0: all of dp.
  int shard_group = 0;
  /// ZeRO-3 frees a unit's gathered parameters after its forward and gathers them again before
  /// its backward (FSDP FULL_SHARD, FSDP2 reshard_after_forward=True); false keeps them from the
  /// forward to the backward (more memory, one gather per micro-batch instead of two).
  bool reshard_after_forward = true;
  /// ZeRO-1/2: the parameter all-gather after the optimizer step overlaps the next forward, bucket
  /// by bucket (Megatron-Core --overlap-param-gather); only the first bucket waits.
  bool param_gather_overlap = false;
  /// Gradient elements per reduction bucket where the framework reduces in buckets of elements
  /// (DeepSpeed's reduce_bucket_size; FrameworkTraits::dp_bucket_elements and
  /// zero3_reduce_bucket_elements). 0: the framework's default.
  int reduce_bucket = 0;
  OffloadSpec offload;
  RecomputeModules recompute_modules;
  int ep = 1;  // expert-parallel degree: ranks the experts of a layer are spread over
  /// Tensor-parallel degree of the expert layers (Megatron-Core's --expert-tensor-parallel-size,
  /// MoE parallel folding: Liu et al. 2025, arXiv:2504.14960). The tp x cp x dp ranks of a stage
  /// are regrouped for the experts as expert_tp (innermost) x ep x expert-data-parallel, so ep may
  /// span the attention's tensor- and context-parallel ranks. 0: tp (the experts split like the
  /// dense FFN, ep carved out of dp: every framework's layout before folding).
  int expert_tp = 0;
  /// FP8 training: the transformer layers' GEMM weights are all-gathered in FP8, one byte each,
  /// instead of the gather dtype. Under ZeRO-3 (FSDP2 with torchao float8: Float8LinearConfig
  /// enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp; tensorwise
  /// scaling) each shard is cast before the gather and the gathered weight is already FP8, so the
  /// per-micro-batch weight cast goes; under ZeRO-1/2 (Megatron-Core's --fp8-param-gather) the
  /// distributed optimizer's parameter all-gather carries FP8 (FrameworkTraits::fp8_param_gather).
  bool fp8_param_gather = false;
  /// MoE: each layer's all-to-alls overlapped with another micro-batch's compute (Megatron-Core's
  /// --overlap-moe-expert-parallel-comm --delay-wgrad-compute; FrameworkTraits::ep_overlap).
  bool ep_overlap = false;
  /// MoE: how dispatch and combine cross nodes (EpDispatcher): NCCL's all-to-all, or DeepEP's
  /// node-deduplicated, NVLink-forwarded kernels (Megatron-Core --moe-enable-deepep; DeepSeek-V3).
  EpDispatcher ep_dispatcher = EpDispatcher::nccl;
  /// MoE: Transformer Engine's fused permute and unpermute (Megatron-Core --moe-permute-fusion, off
  /// by default; FrameworkTraits::moe_te_fusions): each routed token row is read once and written
  /// to each of its copies (the unpermute the reverse), where the unfused index_select and
  /// scatter-add read and write every copy.
  bool moe_permute_fusion = false;
  /// MoE: the shared experts' tensor-parallel all-gather and reduce-scatter on a stream of their own,
  /// overlapped with the all-to-all dispatcher (Megatron-Core --moe-shared-expert-overlap, off by
  /// default); off, they block the layer as a dense MLP's do under sequence parallelism.
  bool moe_shared_expert_overlap = false;
  /// The last pipeline stage defers its LM head's weight-gradient GEMMs to the pipeline flush
  /// (Megatron-Core --defer-embedding-wgrad-compute): the first wgrad_deferral_limit micro-batches
  /// (0: all of them) keep their logits' gradient and the head's input until then, and the GEMMs
  /// run after the stage's last backward, while the earlier stages finish theirs.
  bool defer_embedding_wgrad = false;
  int wgrad_deferral_limit = 0;
  std::vector<int> token_slices;  // TeraPipe slice lengths, summing to seq_len
  /// Transformer layers per pipeline stage, first to last, summing to model.layers (empty: an even
  /// split). Llama 3 405B's 126 layers on 16 stages, DeepSpeed's partition_method results. With
  /// the interleaved schedule one count per model chunk, pp x virtual_stages of them in stage
  /// order: stage k runs on rank k mod pp as its chunk k / pp (torchtitan's
  /// pipeline_parallel_split_points with a looped schedule).
  std::vector<int> stage_layers;
  /// Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: the
  /// first (last) stage holds this many layers and the others split the rest evenly (0: unset).
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  /// DeepSpeed's PipelineModule partition_method: `uniform` (every entry of the layer list, the
  /// embedding, final norm, LM head and cast functions included, counts one), `parameters` (balance
  /// the parameters per stage) or `type:<regex>` (balance the entries whose class name matches;
  /// Megatron-DeepSpeed uses type:transformer). Empty: unset. core/pipeline_partition.hpp turns it
  /// into transformer layers per stage.
  std::string partition_method;
  Framework framework = Framework::megatron;
  /// The attention kernel, when it is not the framework's own (e.g. Megatron-LM with
  /// --use-flash-attn); unset: core/framework.hpp's entry decides.
  std::optional<AttentionImpl> attention;
  /// The dtype data parallelism reduces gradients in, when it is not the gradient buffer's: FSDP's
  /// MixedPrecision reduce_dtype (Composer's PURE mode: bf16; torchtitan's
  /// mixed_precision_reduce), a DDP compression hook. Unset: the framework's gradient dtype.
  std::optional<Dtype> reduce_dtype;
  /// Megatron-LM's gradient accumulation fusion (--no-gradient-accumulation-fusion turns it off):
  /// the weight-gradient GEMM adds into the fp32 main_grad buffer in its epilogue instead of a
  /// separate main_grad.add_(grad) pass per micro-batch. Unset: the framework's default
  /// (FrameworkTraits::gradient_accumulation_fusion).
  std::optional<bool> gradient_accumulation_fusion;
  /// Megatron-Core's overlapped pipeline sends (overlap_p2p_comm; --no-overlap-p2p-communication
  /// turns it off): under the interleaved schedule each send and receive is posted and waited for
  /// only before the chunk that needs it, so the sender's compute goes on. Unset: the framework's
  /// default (FrameworkTraits::p2p_overlap); only the interleaved schedule has it.
  std::optional<bool> p2p_overlap;
  /// The optimizer's implementation (OptimizerImpl): fused where unset; foreach where the run's
  /// code stepped Adam with torch.optim's foreach ops (torchtitan before 2025: foreach=not fused,
  /// --optimizer.fused off by default); for-loop with Composer's DecoupledAdamW (llm-foundry).
  std::optional<OptimizerImpl> optimizer_impl;
  /// Megatron's fused scale-mask-softmax kernel on the unfused attention's scores
  /// (FrameworkTraits::fused_softmax; megatron/model/fused_softmax.py). false: the PyTorch path it
  /// falls back to when the kernel's size conditions fail or --no-masked-softmax-fusion is given
  /// (forward_torch_softmax: the 16-bit scores cast to fp32, scaled, masked, softmaxed in fp32 and
  /// cast back; cost_models/roofline.cpp prices its passes). Unset: the fused kernel.
  std::optional<bool> fused_softmax;
  /// DeepSpeed's BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py, v0.6.3+; BigScience's
  /// olruwase/bf16-updates branch before): bf16 training with ZeRO stage 0 in the DeepSpeed config,
  /// the fp32 master and moments sharded over data parallelism as ZeRO-1 (plan.zero 1), every
  /// micro-batch's bf16 gradients cast to fp32 and added into an unsharded fp32 buffer
  /// (update_hp_grads), which is all-reduced cast back to bf16. false: DeepSpeed's ZeRO optimizer
  /// (bf16 gradients accumulated in place), as DeepSpeed v0.5 ran bf16 (MT-NLG).
  bool bf16_optimizer = false;
  /// DeepSpeed's pipeline engine sends each stage's input gradient back as 1/t partitions, one
  /// from each TP rank, which the receiver all-gathers (is_grad_partitioned = is_model_parallel,
  /// deepspeed/runtime/pipe/engine.py from v0.5.4, PR #1407). false: the engine before it, which
  /// sent the whole gradient from every TP rank (v0.5.0-v0.5.3; EleutherAI's DeeperSpeed of 2021,
  /// GPT-NeoX-20B's). Unset: partitions (FrameworkTraits::pipe_grads_partitioning).
  std::optional<bool> partitioned_pipe_grads;
  /// DeepSpeed's ZeRO-3 with a complete parameter trace: the next modules gathered under the
  /// current one's compute, and parameters used again within stage3_max_reuse_distance kept (a
  /// recomputed layer gathered once for its recompute and backward; the last layers of the forward
  /// not gathered again). The trace fixes of v0.6.3-v0.7.7 (PRs #1901, #1916, #2016, #2550) and the
  /// ZeRO++ tutorial's logs of 2023 say later releases run so. false: the coordinator without a
  /// complete trace, as the Azure runs of v0.6.2 measured (gathers on demand, nothing kept).
  /// Unset: the framework's default (FrameworkTraits::zero3_prefetch, false for deepspeed).
  std::optional<bool> zero3_prefetch;
  Placement placement = Placement::tp_dp_pp;

  int gpus() const { return tp * cp * pp * dp; }
  /// Model chunks each pipeline stage holds: virtual_stages under the interleaved schedule; 2
  /// under DualPipe (stage s runs segment s for the micro-batches fed in at the first stage and
  /// segment pp - 1 - s for those fed in at the last, so every layer is held by two stages;
  /// DeepSeek-AI 2024 sec. 3.2.1); else 1.
  int model_chunks() const {
    if (schedule == Schedule::interleaved) return std::max(1, virtual_stages);
    return schedule == Schedule::dualpipe ? 2 : 1;
  }
  /// The pipeline segment (an index into chunk_layer_counts, in model order) that model chunk
  /// `chunk` of `stage` runs: chunk x pp + stage interleaved, the mirrored stage for DualPipe's
  /// second chunk.
  int chunk_segment(int stage, int chunk) const { return pipeline_segment(schedule, pp, stage, chunk); }
  /// Pipeline segments one micro-batch passes through: pp x model chunks, or pp under DualPipe.
  int segments() const { return pipeline_segments(schedule, pp, model_chunks()); }
  /// Whether `stage` holds the first (embedding) or the last (head) pipeline segment: the end
  /// stages, both of them under DualPipe.
  bool holds_first_segment(int stage) const { return stage == 0 || (schedule == Schedule::dualpipe && stage == pp - 1); }
  bool holds_last_segment(int stage) const { return stage == pp - 1 || (schedule == Schedule::dualpipe && stage == 0); }
  /// Whether layers are split over stages other than evenly (stage_layers, first/last counts or a
  /// DeepSpeed partition method).
  bool uneven_split() const {
    return !stage_layers.empty() || first_stage_layers > 0 || last_stage_layers > 0 || !partition_method.empty();
  }
  /// Ranks holding the same parameters, whose gradients are reduced together: dp x cp.
  int grad_ranks() const { return dp * cp; }
  /// Ranks ZeRO shards model state over (plan.shard_group, or all of dp x cp).
  int shard_ways() const { return shard_group > 0 ? shard_group : grad_ranks(); }
  /// The experts' tensor-parallel degree (plan.expert_tp, or tp when unset).
  int etp() const { return expert_tp > 0 ? expert_tp : tp; }
  /// Ranks holding the same experts, whose expert gradients are reduced together (and over which
  /// ZeRO shards expert state): tp x cp x dp / (expert_tp x ep); dp / ep without folding.
  int expert_dp() const { return std::max(1, tp * cp * dp / std::max(1, etp() * ep)); }
  /// Tokens of one sequence each rank processes.
  int local_tokens(const ModelSpec& m) const { return m.seq_len / std::max(1, cp); }
  /// Micro-batches per pipeline per iteration.
  int micro_batches(const TrainingSpec& t) const { return int(t.global_batch / ((long long)dp * micro_batch)); }
};

/// Transformer layers on each pipeline stage (pp entries): plan.stage_layers, or DeepSpeed's
/// partition of plan.partition_method, or the stages plan.first_stage_layers / last_stage_layers
/// fix with the rest even, or an even split. Assumes check_plan passed (a split it refuses comes
/// back as the even split's rounding).
std::vector<int> stage_layer_counts(const ModelSpec& model, const PlanSpec& plan);
/// Transformer layers of each pipeline segment in stage order (pp x v entries for the interleaved
/// schedule, segment k on rank k mod pp as chunk k / pp; otherwise stage_layer_counts).
std::vector<int> chunk_layer_counts(const ModelSpec& model, const PlanSpec& plan);
/// The first transformer layer of each stage (pp entries), from stage_layer_counts.
std::vector<int> stage_first_layers(const ModelSpec& model, const PlanSpec& plan);

/// Whether the backward of transformer layer `layer` (0-based, model order) first re-runs its
/// forward: recompute = full and the layer among the first plan.recompute_layers of its stage's
/// model chunk (or recompute_layers = 0). Selective recompute re-runs only the attention core and
/// is not counted here.
bool recomputes_layer(const ModelSpec& model, const PlanSpec& plan, int layer);
/// Whether DeepEP (plan.ep_dispatcher = deepep) has a kernel configuration for `ep` ranks: its
/// Buffer.get_dispatch_config / get_combine_config tables (deepseek-ai/DeepEP
/// deep_ep/buffers/legacy.py @ dd758ca) cover 2-8 ranks in one node and 16-160 across nodes.
bool deepep_runs_ep(int ep);
/// The same, for the layer at position `index_in_chunk` (0-based) of its stage's model chunk.
inline bool recomputes_position(const PlanSpec& plan, int index_in_chunk) {
  return plan.recompute == Recompute::full && (plan.recompute_layers <= 0 || index_in_chunk < plan.recompute_layers);
}

/// Of a stage's micro-batches, the share that recompute every layer under micro-batch-level
/// recompute (plan.partial_recompute_microbatches = K > 0): those whose index k has k % W >= K,
/// W = min(pp - stage - 1, m) + 1 (Megatron-Core's forward_backward_pipelining_without_interleaving);
/// 0 without it.
double whole_recompute_microbatch_share(const PlanSpec& plan, int stage, int micro_batches);
/// How often per micro-batch (0..1, on average over the stage's micro-batches) the layer at
/// `index_in_chunk` of `stage` re-runs its forward: 1 where block recompute covers it (or every
/// layer is recomputed), the share above for the others, 0 without full recompute.
double layer_recompute_share(const PlanSpec& plan, int index_in_chunk, int stage, int micro_batches);
/// The same for model layer `layer` at that place: an MTP module's layer (layer >= model.layers)
/// is recomputed under uniform full recompute only (recomputes_layer), whatever its place.
double layer_recompute_share(const ModelSpec& model, const PlanSpec& plan, int layer, int index_in_chunk, int stage,
                             int micro_batches);

/// Every rule a runnable plan obeys (divisibility, ranges, schedule options), checked in order;
/// returns the first one broken. `gpus_used` is how many GPUs the run occupies.
std::optional<PlanViolation> check_plan(const ModelSpec& model, const ClusterSpec& cluster,
                                        const TrainingSpec& training, const PlanSpec& plan,
                                        int gpus_used);

struct FrameworkTraits;  // core/framework.hpp

/// check_plan's rules for plan.fp8_param_gather as if the plan asked for it (FP8 training, zero >= 1,
/// tensorwise scales with torchao's float8); the framework's support is FrameworkTraits'
/// (fp8_param_gather, refused in its refusal()). The planner asks this to turn it on.
std::optional<PlanViolation> fp8_param_gather_violation(const FrameworkTraits& framework, const TrainingSpec& training,
                                                        const PlanSpec& plan);

/// check_plan's rules for training.fp8_scaling that the plan's shape does not change: the framework
/// runs the recipe (Transformer Engine's delayed, tensorwise and mxfp8; torchao's tensorwise and
/// rowwise) and, for mxfp8, the GPU has block-scaled FP8 tensor cores (compute capability 10.x).
/// The planner asks it before searching, so the rule is named rather than "no plan fits".
std::optional<PlanViolation> fp8_recipe_violation(const FrameworkTraits& framework, const TrainingSpec& training,
                                                  const GpuSpec& gpu);

/// Rules the model alone must obey (hidden % heads, kv_heads, MoE settings).
std::optional<PlanViolation> check_model(const ModelSpec& model);

}  // namespace foresight

