// Kernel times from a GPU's spec and a few efficiency parameters (roofline with wave
// quantization and launch overhead), and the per-op times of a transformer layer built on it.
// The parameters come from kernel-level measurements, never from end-to-end training results;
// each default names its source. A calibration profile (calibrate/) replaces them when measured.
// Left out: L2 reuse between kernels, clock throttling, tile shapes other than one default,
// kernel fusion beyond what Megatron-LM (2021-22) and FlashAttention do.
#pragma once

#include <optional>

#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "cost_models/profile.hpp"

namespace foresight::cost_models {

/// How attention is computed: Megatron-LM 2021-22's unfused path (two batched GEMMs around a
/// fused scale-mask-softmax and a dropout over the (b, a/t, s, s) scores), or one fused
/// FlashAttention kernel that never writes the scores (Dao et al. 2022).
enum class AttentionImpl { unfused, flash };

/// How MoE tokens reach their experts: a gather/scatter permute (Megatron-core, our kernels), or
/// DeepSpeed-MoE 2021's dense one-hot einsums, `sec,sm->ecm` to dispatch and `sec,ecm->sm` to
/// combine, each a GEMM of 2*S*(E*C)*M FLOPs over the S tokens of a GPU (deepspeed/moe/
/// sharded_moe.py, USE_EINSUM = True, before 2021-12-10).
enum class MoeDispatch { permute, einsum };

struct RooflineParams {
  /// Best fraction of the dense tensor-core peak a large cuBLAS GEMM reaches. Source: our own
  /// measurement of cuBLAS bf16 8192^3 on an H100 SXM, 800 of 989 TFLOP/s (shared/bench README,
  /// 2026-11-22), taken as the same fraction on A100 until an A100 profile measures it.
  double gemm_efficiency = 800.0 / 989.0;
  /// Output tile of the GEMM kernels (cuBLAS/CUTLASS Ampere and Hopper default 256 x 128) for
  /// wave quantization: a GEMM runs ceil(tiles / SMs) waves of SMs.
  int tile_m = 256, tile_n = 128;
  /// Achievable fraction of HBM bandwidth for streaming kernels (STREAM-like copy; NVIDIA quotes
  /// ~90% for large device-to-device copies; an estimate until calibrated).
  double memory_efficiency = 0.90;
  /// Fraction of peak a FlashAttention forward+backward reaches, counting backward as 2.5x the
  /// forward FLOPs (FlashAttention-2 paper's convention). Source: PyTorch SDPA (flash) causal,
  /// B4 H16 T2048 D128 fwd+bwd 0.739 ms on an H100 (shared/bench README): 240 GFLOP / 0.739 ms
  /// = 325 TFLOP/s = 0.33 of 989.
  double flash_efficiency = 0.33;
  /// Fraction of peak HBM bandwidth at which unfused attention moves its (b, heads, s, s) score
  /// matrices: the batched GEMMs writing and reading them, the masked softmax and the dropout.
  /// Unset: the streaming figure above (no unfused-attention measurement for that GPU).
  std::optional<double> score_memory_efficiency;
  /// Host-side cost of one kernel launch, seen when kernels are tiny (CUDA launch ~3-5 us).
  Seconds launch_overhead = Seconds(4e-6);
};

/// The published kernel-level parameter set for a GPU (by its scenario name), each number with its
/// source in roofline.cpp; the H100-derived defaults above for GPUs without published data.
/// Nothing here is fitted to an end-to-end training result.
RooflineParams roofline_params_for(const GpuSpec& gpu);

/// A GEMM C(m x n) = A(m x k) B(k x n), `batch` times, 2-byte inputs and outputs.
struct GemmShape {
  double m = 0, n = 0, k = 0;
  double batch = 1;
};

class RooflineCompute {
 public:
  RooflineCompute(const GpuSpec& gpu, Dtype dtype, RooflineParams params = {});

  /// Uses a measured calibration profile where it has data: GEMM times interpolated from its
  /// shapes, its copy bandwidth, attention efficiency and launch overhead; the spec elsewhere.
  void use_profile(CalibrationProfile profile);
  /// GEMM queries answered outside the profile's measured range so far (0 without a profile).
  long extrapolated_queries() const { return extrapolated_; }

  /// max(FLOPs / (peak * efficiency * wave efficiency), bytes / achievable bandwidth) + launch.
  Seconds gemm(const GemmShape& s) const;
  /// The arithmetic alone of a GEMM: FLOPs / (peak * efficiency * wave and tile efficiency) +
  /// launch; with a profile, the measured time (which includes the kernel's own memory traffic).
  Seconds gemm_math(const GemmShape& s) const;
  /// A memory-bound kernel moving `bytes` (read + written).
  Seconds memory_bound(Bytes bytes, int launches = 1) const;
  /// Moving `bytes` of unfused-attention score matrices (RooflineParams::score_memory_efficiency),
  /// launches not included.
  Seconds score_traffic(Bytes bytes) const;
  /// True when GEMM times come from a measured profile.
  bool has_gemm_profile() const { return profile_.has_value(); }
  /// FlashAttention forward (causal when context == tokens and the slice is the whole sequence:
  /// half the score matrix; a later TeraPipe slice attends to its whole prefix).
  Seconds flash_forward(double batch_heads, double tokens, double context, double head_dim, bool causal) const;

  const GpuSpec& gpu() const { return gpu_; }
  FlopsPerSecond peak() const { return peak_; }
  const RooflineParams& params() const { return p_; }

 private:
  GpuSpec gpu_;
  FlopsPerSecond peak_;
  RooflineParams p_;
  std::optional<CalibrationProfile> profile_;
  mutable long extrapolated_ = 0;
  /// FLOPs / (peak * efficiency * wave and tile efficiency), in seconds.
  double math_seconds(const GemmShape& s) const;
};

/// Per-op compute times of one transformer layer on one GPU for one micro-batch (or token slice),
/// communication excluded.
struct LayerOpTimes {
  Seconds layernorms, qkv, attention_core, projection, dropout_residual, fc1, gelu, fc2;
  Seconds moe_router, moe_permute;  // MoE layers only
  Seconds forward() const;
};

struct LayerTimes {
  LayerOpTimes forward_ops, backward_ops;
  Seconds forward() const { return forward_ops.forward(); }
  Seconds backward() const { return backward_ops.forward(); }
  Seconds recompute_full() const { return forward(); }
  Seconds recompute_selective() const { return forward_ops.attention_core; }
};

/// Times of one layer: `tokens` tokens of each of `micro_batch` sequences, attending to
/// `context` positions, after the plan's tensor/sequence parallelism (GEMM shapes as
/// Narayanan et al. 2021 sec. 3.2: QKV (T, 3h/t, h), projection (T, h, h/t), FC1 (T, f/t, h),
/// FC2 (T, h, f/t), T = micro_batch * tokens).
LayerTimes layer_times(const RooflineCompute& rc, const ModelSpec& m, const PlanSpec& plan, int tokens, int context,
                       bool moe_layer, AttentionImpl attention, MoeDispatch dispatch = MoeDispatch::permute);

struct EdgeTimes {
  Seconds embedding_forward, embedding_backward, head_forward, head_backward;
};

/// Embedding lookup (first stage) and final layernorm + vocab-parallel LM head + fused softmax
/// cross-entropy (last stage), per micro-batch of `tokens` tokens.
EdgeTimes edge_times(const RooflineCompute& rc, const ModelSpec& m, const PlanSpec& plan, int tokens);

/// Fused Adam over `params` parameters: reads grad, master, m, v (fp32) and writes master, m, v
/// and the 16-bit copy: 4*4 + 3*4 + 2 = 30 bytes per parameter, plus the read of the grad scale.
Seconds optimizer_time(const RooflineCompute& rc, double params);

}  // namespace foresight::cost_models
