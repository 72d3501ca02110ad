// Kernel times from a GPU's spec and a few efficiency parameters (roofline with wave
// quantization and launch overhead), and the per-op times of a transformer layer built on it.
// The parameters come from kernel-level measurements, never from end-to-end training results;
// each default names its source. A calibration profile (calibrate/) replaces them when measured.
// Left out: L2 reuse between kernels, clock throttling, tile shapes other than one default,
// kernel fusion beyond what Megatron-LM (2021-22) and FlashAttention do.
#pragma once

#include <atomic>
#include <optional>

#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/profile.hpp"

namespace foresight::cost_models {

/// The compute model's parameters. The defaults are the H100 SXM's figures (used as a fit's
/// starting point by calibrate/); an execution takes its GPU's sourced figures from the GPU file
/// (roofline_params_for) and a matching calibration profile replaces what it measured.
struct RooflineParams {
  /// Fraction of the dense tensor-core peak cuBLAS sustains on training-size GEMMs (the roofline's
  /// ceiling; the wave and tile terms derate it per shape). The GPU files give it per generation:
  /// a per-shape sweep's median fit where one exists (GH100: 0.764, this project's own; A100:
  /// 0.862, public aiconfigurator tables), else a best-of-a-sweep figure (V100).
  double gemm_efficiency = 0.72;
  /// A tile's fixed work (pipeline fill, epilogue) in elements of K at the bf16 rate
  /// (GpuKernelFigures::gemm_k_overhead); 0: none. With it a GEMM takes (1 + k0 / K) times its
  /// mainloop, so the ceiling above is the mainloop's, reached only as K grows.
  double gemm_k_overhead = 0;
  /// Output tile of the GEMM kernels (cuBLAS/CUTLASS Ampere and Hopper default 256 x 128) for
  /// wave quantization: a GEMM runs ceil(tiles / SMs) waves of SMs.
  int tile_m = 256, tile_n = 128;
  /// Tiles the library chooses among per shape (GpuKernelFigures::gemm_tile_candidates): 1, the
  /// default tile above; 3, the fastest of it, its transpose and the square of its short side.
  int tile_candidates = 1;
  /// FP8 GEMMs with split accumulation relative to fast accumulation
  /// (GpuKernelFigures::fp8_split_accumulation_slowdown); applies to gradient GEMMs under FP8.
  double fp8_split_accumulation_slowdown = 1.0;
  /// Achievable fraction of HBM bandwidth for streaming kernels (a large device-to-device copy).
  double memory_efficiency = 0.885;
  /// Fraction of peak the execution's fused attention kernel (FlashAttention or cuDNN) reaches
  /// forward + backward, counting backward as 2.5x the forward FLOPs (FlashAttention-2's
  /// convention).
  double flash_efficiency = 0.33;
  /// Scale that efficiency with head dim and context length as FlashAttention-2 does
  /// (fused_attention_shape_factor); off for a kernel with another shape dependence (the fit of
  /// this project's own attention kernel in calibrate/).
  bool fused_attention_shape = true;
  /// The fused kernel is FlashAttention's Triton kernel, whose shape dependence is its own
  /// (triton_attention_shape_factor) rather than FlashAttention-2's.
  bool triton_attention_shape = false;
  /// The fused kernel is the original FlashAttention (v1) CUDA kernel: its own shape dependence
  /// (flash1_attention_shape_factor).
  bool flash1_attention_shape = false;
  /// Fraction of peak HBM bandwidth at which unfused attention moves its (b, heads, s, s) score
  /// matrices: the batched GEMMs writing and reading them, the masked softmax and the dropout.
  /// Unset: the streaming figure above (no unfused-attention measurement for that GPU).
  std::optional<double> score_memory_efficiency;
  /// Fraction of peak HBM bandwidth at which PyTorch's eager RMSNorm chain moves its bytes
  /// (GpuKernelFigures::eager_norm_efficiency). Unset: the streaming figure.
  std::optional<double> eager_norm_memory_efficiency;
  /// Fraction of peak HBM bandwidth at which PyTorch's eager elementwise kernels move bytes when
  /// an operand is broadcast or strided (GpuKernelFigures::eager_strided_efficiency). Unset: the
  /// streaming figure.
  std::optional<double> eager_strided_memory_efficiency;
  /// Device-side cost of one kernel launch, seen when kernels are tiny.
  Seconds launch_overhead = Seconds(2.433e-6);
};

/// The parameters of a GPU for an execution running `attention`: each figure from the GPU file's
/// kernels block with its source (scenarios/gpus/*.yaml); the fused-attention efficiency of the
/// implementation that runs (none needed for unfused attention; std::nullopt when the file has
/// no figure for it). Nothing here is fitted to an end-to-end training result.
RooflineParams roofline_params_for(const GpuSpec& gpu, AttentionImpl attention, bool* has_attention_figure = nullptr);

/// How a fused attention kernel's efficiency varies with head dim and context length, relative to
/// head dim 128 at sequence 2k (where the GPU files' fused-attention figures are taken):
/// FlashAttention-2's published H100 sweep (roofline.cpp), applied to every GPU's fused kernel.
double fused_attention_shape_factor(double head_dim, double context);

/// MLA's attention (query/key head dim 192, value head dim 128) on cuDNN's fused kernel for
/// Hopper: its speed relative to what the d128 pricing gives it at the same context (the FLOPs of
/// the mean head width 160 at head dim 128's efficiency), from cuDNN's own benchmark (roofline.cpp);
/// 1 below compute capability 9 or above it, where no such measurement was found.
double cudnn_mla_attention_factor(double compute_capability, double context);

/// The same for FlashAttention's Triton kernel, from its own column of FlashAttention-2's A100 sweep
/// (roofline.cpp): flatter in the sequence, and faster at head dim 64 than at 128.
double triton_attention_shape_factor(double head_dim, double context);
/// The same for the original FlashAttention CUDA kernel (v1) on an A100.
double flash1_attention_shape_factor(double head_dim, double context);

/// A GEMM C(m x n) = A(m x k) B(k x n), `batch` times, 2-byte inputs and outputs.
struct GemmShape {
  double m = 0, n = 0, k = 0;
  double batch = 1;
};

class RooflineCompute {
 public:
  RooflineCompute(const GpuSpec& gpu, Dtype dtype, RooflineParams params = {});

  /// Uses the part of a calibration profile selected for this execution (select_profile): GEMM
  /// times interpolated from its shapes, its copy bandwidth, attention efficiency and launch
  /// overhead; the GPU file's figures elsewhere.
  void use_profile(CalibrationProfile profile);
  /// Scales on what the GPU file or the profile gives: the calibrated ones (cost_models/calibrated.hpp)
  /// times the slowest device's pace (cost_models/device_spread.hpp). GEMM times are divided by
  /// `gemm`, the fused-attention efficiency is multiplied by `attention`.
  void apply_calibrated_scales(double gemm, double attention);
  /// GEMM queries answered outside the profile's measured range so far (0 without a profile).
  long extrapolated_queries() const { return extrapolated_; }

  /// max(FLOPs / (peak * efficiency * wave efficiency), bytes / achievable bandwidth) + launch.
  Seconds gemm(const GemmShape& s) const;
  /// A gradient GEMM of the backward (data or weight gradient): gemm(s), except that under FP8 the
  /// recipes run it with split accumulation (Transformer Engine's _2X_ACC_DGRAD / _2X_ACC_WGRAD,
  /// torchao's gemm_config_grad_input / grad_weight without use_fast_accum), which takes
  /// RooflineParams::fp8_split_accumulation_slowdown times as long.
  Seconds gemm_grad(const GemmShape& s) const;
  /// The arithmetic alone of a GEMM: FLOPs / (peak * efficiency * wave and tile efficiency) +
  /// launch; with a profile, the measured time (which includes the kernel's own memory traffic).
  Seconds gemm_math(const GemmShape& s) const;
  /// A memory-bound kernel moving `bytes` (read + written).
  Seconds memory_bound(Bytes bytes, int launches = 1) const;
  /// Moving `bytes` of unfused-attention score matrices (RooflineParams::score_memory_efficiency),
  /// launches not included.
  Seconds score_traffic(Bytes bytes) const;
  /// PyTorch's eager RMSNorm chain moving `bytes` in `launches` kernels
  /// (RooflineParams::eager_norm_memory_efficiency).
  Seconds eager_norm_bound(Bytes bytes, int launches) const;
  /// PyTorch's eager elementwise kernels on broadcast or strided operands moving `bytes` in
  /// `launches` kernels (RooflineParams::eager_strided_memory_efficiency).
  Seconds eager_strided_bound(Bytes bytes, int launches) const;
  /// FP8 GEMMs without FP8 measurements: each shape's measured bf16 time from `bf16` (its cuBLAS
  /// kernel choice, waves and tiles as they ran) times the FP8 roofline's speedup over the bf16
  /// roofline at that shape (the peak ratio and the K term), rather than the FP8 roofline alone.
  void anchor_to_bf16_profile(const CalibrationProfile& bf16);
  /// True when GEMM times come from a measured profile.
  bool has_gemm_profile() const { return profile_.has_value(); }
  /// True when GEMM times are measured ones (a profile, or FP8 anchored to a bf16 profile): each GEMM
  /// of a batch then carries its own launch, where the roofline charges one launch per batch.
  bool gemm_times_measured() const { return profile_.has_value() || bf16_anchor_.has_value(); }
  /// A fused attention forward (causal when context == tokens and the slice is the whole
  /// sequence: half the score matrix; a later TeraPipe slice attends to its whole prefix), at the
  /// execution's fused-attention efficiency scaled by fused_attention_shape_factor.
  /// `window` > 0: sliding-window attention, each query sees at most `window` positions (itself
  /// included); the kernel skips the blocks outside the band (FlashAttention-2's window_size) and
  /// its efficiency follows the band's width rather than the context.
  Seconds flash_forward(double batch_heads, double tokens, double context, double head_dim, bool causal,
                        int window = 0) const;

  const GpuSpec& gpu() const { return gpu_; }
  FlopsPerSecond peak() const { return peak_; }
  const RooflineParams& params() const { return p_; }

 private:
  GpuSpec gpu_;
  Dtype dtype_;
  FlopsPerSecond peak_;
  FlopsPerSecond attention_peak_;  // fp8 recipes run attention in bf16
  double in_bytes_, out_bytes_;     // a GEMM's input and output element sizes
  double k_overhead_;               // a tile's fixed work in elements of K at this dtype's rate
  RooflineParams p_;
  std::optional<CalibrationProfile> profile_;
  std::optional<GemmIndex> gemm_index_;  // profile_'s GEMM samples, indexed once
  std::optional<GemmIndex> bf16_anchor_;  // anchor_to_bf16_profile's bf16 samples
  double bf16_peak_ = 0;                  // the 16-bit peak the anchor's samples ran at
  double gemm_scale_ = 1.0;  // calibrated: GEMM throughput relative to the figures above
  mutable std::atomic<long> extrapolated_{0};  // shared by the planner's worker threads
  /// FLOPs / (peak * efficiency * wave and tile efficiency), in seconds.
  double math_seconds(const GemmShape& s) const;
  /// `bytes` moved at `efficiency` of peak HBM bandwidth, plus `launches` kernel launches.
  Seconds traffic_at(Bytes bytes, double efficiency, int launches) const;
  /// max(math_seconds * math_scale, memory time) + launch: a GEMM priced by the roofline (no
  /// profile), its arithmetic slowed by math_scale.
  Seconds roofline_gemm(const GemmShape& s, double math_scale) const;
};

/// Per-op compute times of one transformer layer on one GPU for one micro-batch (or token slice),
/// communication excluded.
struct LayerOpTimes {
  Seconds layernorms, qkv, attention_core, projection, dropout_residual, fc1, gelu, fc2;
  Seconds moe_router, moe_permute;  // MoE layers only
  Seconds fp8_casts;                // FP8 training: quantizing GEMM inputs (and gradients, transposes)
  Seconds forward() const;
};

struct LayerTimes {
  LayerOpTimes forward_ops, backward_ops;
  /// Forward time of what per-op selective checkpointing saves (torchtitan's op policy: the
  /// attention kernel and every other matmul of the block in call order, wq, wv, w1, w2 of a
  /// Llama block: the 1st, 3rd, 5th and 7th aten.mm).
  Seconds op_checkpoint_saved;
  /// Of forward_ops, an MoE layer's shared experts: their FC1 and FC2 GEMMs (in fc1, fc2) and their
  /// activation (in gelu), which plan.recompute_modules.shared_experts re-runs and moe_act does not.
  Seconds shared_experts_gemms, shared_experts_activation;
  /// Of forward_ops.qkv, MLA's up-projections (queries from their latent, keys and values from
  /// theirs), which plan.recompute_modules.mla_up_proj re-runs; 0 without MLA.
  Seconds mla_up_projections;
  /// Of forward_ops.dropout_residual, all-to-all context parallelism's copies around its
  /// exchanges, which run inside the attention core that selective recompute re-runs.
  Seconds cp_exchange_copies;
  Seconds forward() const { return forward_ops.forward(); }
  Seconds backward() const { return backward_ops.forward(); }
  Seconds recompute_full() const { return forward(); }
  Seconds recompute_selective() const { return forward_ops.attention_core + cp_exchange_copies; }
  /// The block's forward less what the policy saved: the other matmuls and every elementwise op.
  Seconds recompute_selective_op() const { return forward() - op_checkpoint_saved; }
};

/// Times of one layer: `tokens` tokens of each of `micro_batch` sequences, attending to
/// `context` positions, after the plan's tensor/sequence parallelism (GEMM shapes as
/// Narayanan et al. 2021 sec. 3.2: QKV (T, 3h/t, h), projection (T, h, h/t), FC1 (T, f/t, h),
/// FC2 (T, h, f/t), T = micro_batch * tokens), run as the execution runs it: its attention kernel,
/// MoE dispatch and elementwise kernels (FrameworkTraits::elementwise, scaled by the element size).
/// `window`: the layer's sliding window (ModelSpec::window_of), 0 for full attention.
LayerTimes layer_times(const ExecutionModel& x, const ModelSpec& m, const PlanSpec& plan, int tokens, int context,
                       bool moe_layer, int window = 0);

/// The operands of a layer's (or one Linear's) GEMMs on this GPU, for their FP8 casts.
struct Fp8Operands {
  double inputs = 0;   // elements of the GEMMs' inputs
  double grads = 0;    // elements of their output gradients
  double weights = 0;  // parameters of their weights
  /// Of `inputs`, the elements that reach their GEMM through a sequence-parallel all-gather already
  /// in FP8 (FrameworkTraits::fp8_tensorwise_tp_gather): cast on the 1/tp shard before the gather.
  double gathered_inputs = 0;
  double tp = 1;
};
/// Bytes of HBM traffic per element Transformer Engine's MXFP8 quantize kernel moves: it reads the
/// 16-bit tensor once and writes both usages (row-wise and column-wise, one byte each) with one
/// E8M0 scale byte per 32 elements of each (MXFP8Quantizer, TE v2.7-2.9).
inline constexpr double kMxfp8QuantizeBytes = 4.0 + 2.0 / 32.0;

/// FP8 casts of torchao's dynamic scaling (training.fp8_scaling tensorwise or rowwise on a
/// framework whose FP8 linears are not Transformer Engine's): forward and backward times, with
/// what rowwise scaling adds (roofline.cpp).
struct Fp8CastTimes {
  Seconds forward, backward;
};
Fp8CastTimes torchao_fp8_casts(const RooflineCompute& rc, Fp8Scaling scaling, bool compile, bool fp8_param_gather,
                               const Fp8Operands& ops);

struct EdgeTimes {
  Seconds embedding_forward, embedding_backward, head_forward, head_backward;
  /// One MTP module (ModelSpec::mtp_layers) beside its transformer layer: the next tokens'
  /// embedding, the two norms, the concatenation, the 2h -> h projection, then its final norm and
  /// another pass through the head and loss (last stage). Zero without MTP.
  Seconds mtp_forward, mtp_backward;
  /// The LM head's weight-gradient GEMM, part of head_backward (what plan.defer_embedding_wgrad
  /// moves to the pipeline flush).
  Seconds head_weight_grad;
};

/// Embedding lookup (first stage) and final layernorm + vocab-parallel LM head + fused softmax
/// cross-entropy (last stage), per micro-batch of `tokens` tokens; the MTP modules' own work
/// beside their layers (per module).
EdgeTimes edge_times(const ExecutionModel& x, const ModelSpec& m, const PlanSpec& plan, int tokens);

/// The fused optimizer step over `params` parameters: ElementSizes::optimizer_step bytes each
/// (fused Adam with 16-bit weights: reads grad, master, m, v as fp32 and writes master, m, v and
/// the 16-bit copy, 30 bytes), one launch.
Seconds optimizer_time(const ExecutionModel& x, double params);

}  // namespace foresight::cost_models
