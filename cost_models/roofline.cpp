#include "cost_models/roofline.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace foresight::cost_models {

RooflineParams roofline_params_for(const GpuSpec& gpu) {
  RooflineParams p;
  if (gpu.name.rfind("a100", 0) == 0) {
    // GEMM: best cuBLAS bf16 throughput on an A100 SXM over a shape sweep, 271.2 of 312 TFLOP/s
    // (stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS"
    // table, shape 1024x10240x5120, torch 2.6 / CUDA 12.6); a ceiling that the wave and tile terms
    // derate per shape.
    p.gemm_efficiency = 271.2 / 312.0;
    // Streaming: 1.80 of 2.04 TB/s read on an A100 80GB SXM, confirmed with Nsight Compute
    // (NVIDIA Developer Forums, "Trouble to Reach Peak Bandwidth of A100").
    p.memory_efficiency = 0.88;
    // FlashAttention-2 forward+backward, causal, head dim 128, seq 2k, A100 80GB: 155 TFLOP/s
    // (Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png, backward = 2.5x fwd).
    p.flash_efficiency = 155.0 / 312.0;
    // Unfused attention's score matrices: 1.27 of 2.04 TB/s. Derived from the same figure's
    // PyTorch bars (the benchmark's attention_pytorch: baddbmm, causal mask add, softmax, einsum;
    // fp16, dropout 0, 16k tokens per batch, hidden 2048) at sequence 2k: 43, 76, 17 and 32
    // TFLOP/s for non-causal d 64 / d 128 and causal d 64 / d 128. Each time, less its GEMM math
    // at 271.2 TFLOP/s and its token-sized tensors (q, k, v, output and their gradients: 52 bytes
    // per token x hidden element at the streaming figure), leaves the score traffic (22 bytes per
    // score element forward + backward, 26 with the mask add): it moved at 1287, 1366, 1150 and
    // 1267 GB/s; the mean, 1267 GB/s, is 0.622 of peak. tests/cost_models/roofline_test.cpp
    // replays all 20 bars of the figure (the other sequence lengths are held out).
    p.score_memory_efficiency = 1267.0 / 2039.0;
  }
  // H100/H200 and others: the defaults (our H100 cuBLAS and SDPA measurements).
  return p;
}

RooflineCompute::RooflineCompute(const GpuSpec& gpu, Dtype dtype, RooflineParams params)
    : gpu_(gpu), peak_(gpu.peak(dtype)), p_(params) {
  FORESIGHT_CHECK(peak_ > FlopsPerSecond(0)) << gpu.name << " has no peak for " << to_string(dtype);
  FORESIGHT_CHECK(gpu.sms > 0 && gpu.hbm_bandwidth > BytesPerSecond(0));
}

void RooflineCompute::use_profile(CalibrationProfile profile) {
  if (profile.copy_GBps) p_.memory_efficiency = *profile.copy_GBps * 1e9 / gpu_.hbm_bandwidth.value();
  if (profile.flash_efficiency) p_.flash_efficiency = *profile.flash_efficiency;
  if (profile.launch_overhead_us) p_.launch_overhead = microseconds(*profile.launch_overhead_us);
  if (!profile.gemm.empty()) profile_ = std::move(profile);
}

Seconds RooflineCompute::gemm(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return Seconds(0);
  if (profile_) {
    const GemmEstimate e = profile_gemm(*profile_, s.m, s.n, s.k, s.batch);
    if (e.extrapolated) ++extrapolated_;
    return Seconds(e.time_s);  // measured kernel times include their launch
  }
  const double bytes = 2.0 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n);
  const double memory_s = bytes / (gpu_.hbm_bandwidth.value() * p_.memory_efficiency);
  return Seconds(std::max(math_seconds(s), memory_s)) + p_.launch_overhead;
}

Seconds RooflineCompute::gemm_math(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return Seconds(0);
  if (profile_) return gemm(s);
  return Seconds(math_seconds(s)) + p_.launch_overhead;
}

Seconds RooflineCompute::score_traffic(Bytes bytes) const {
  return bytes / (gpu_.hbm_bandwidth * p_.score_memory_efficiency.value_or(p_.memory_efficiency));
}

double RooflineCompute::math_seconds(const GemmShape& s) const {
  const double flops = 2.0 * s.m * s.n * s.k * s.batch;
  // The library picks its kernel per problem shape: a dimension smaller than the default tile gets
  // a tile no larger than it needs (CUTLASS's tensor-op tiles go down to 64 rows or columns), so a
  // 128-token TeraPipe slice does not pay for a 256-row tile half made of padding. Larger
  // dimensions keep the default tile, and with it the wave quantization cuBLAS shows.
  auto tile_for = [](double dim, double fallback) {
    if (dim >= fallback) return fallback;
    return dim <= 64 ? std::min(64.0, fallback) : (dim <= 128 ? std::min(128.0, fallback) : fallback);
  };
  const double tm = tile_for(s.m, p_.tile_m), tn = tile_for(s.n, p_.tile_n);
  const double tiles = std::ceil(s.m / tm) * std::ceil(s.n / tn) * s.batch;
  const double waves = std::ceil(tiles / gpu_.sms);
  const double wave_efficiency = tiles / (waves * gpu_.sms);
  // Tile quantization: partial tiles at the m and n edges compute padding.
  const double tile_efficiency = (s.m * s.n) / (std::ceil(s.m / tm) * tm * std::ceil(s.n / tn) * tn);
  return flops / (peak_.value() * p_.gemm_efficiency * wave_efficiency * tile_efficiency);
}

Seconds RooflineCompute::memory_bound(Bytes bytes, int launches) const {
  return bytes / (gpu_.hbm_bandwidth * p_.memory_efficiency) + p_.launch_overhead * double(launches);
}

Seconds RooflineCompute::flash_forward(double bh, double tokens, double context, double d, bool causal) const {
  // QK^T and AV over the visible part of the (tokens x context) score matrix.
  double visible = tokens * context;
  if (causal) visible -= tokens * (tokens - 1) / 2.0;  // a slice sees its prefix plus its own causal triangle
  const double flops = 4.0 * bh * visible * d;
  return Seconds(flops / (peak_.value() * p_.flash_efficiency)) + p_.launch_overhead;
}

Seconds LayerOpTimes::forward() const {
  return layernorms + qkv + attention_core + projection + dropout_residual + fc1 + gelu + fc2 + moe_router + moe_permute;
}

LayerTimes layer_times(const RooflineCompute& rc, const ModelSpec& m, const PlanSpec& p, int tokens, int context,
                       bool moe_layer, AttentionImpl attention, MoeDispatch dispatch) {
  const double t = p.tp, b = p.micro_batch, h = m.hidden, T = b * tokens, d = m.head_dim();
  const double a_local = double(m.heads) / t;
  const double kv_dim = double(m.kv_heads) * d;
  const double f = m.ffn_hidden;
  // Elementwise work on the (T, h) stream is split over t with sequence parallelism.
  const double sp = p.sequence_parallel ? t : 1.0;
  LayerTimes L;
  LayerOpTimes& F = L.forward_ops;
  LayerOpTimes& B = L.backward_ops;

  // Two layernorms: read and write (T, h) in 16 bits each.
  F.layernorms = rc.memory_bound(Bytes(2 * 4.0 * T * h / sp), 2);
  B.layernorms = rc.memory_bound(Bytes(2 * 8.0 * T * h / sp), 2);  // reads input and grad, writes grad
  // Dense GEMMs; backward = data gradient + weight gradient, each of the forward's FLOPs.
  auto fwd_bwd = [&](double mm, double nn, double kk, Seconds& fw, Seconds& bw) {
    fw = rc.gemm({mm, nn, kk, 1});
    bw = rc.gemm({mm, kk, nn, 1}) + rc.gemm({kk, nn, mm, 1});
  };
  fwd_bwd(T, (h + 2 * kv_dim) / t, h, F.qkv, B.qkv);
  fwd_bwd(T, h, h / t, F.projection, B.projection);
  // Dropout + residual after attention and after the MLP: read x and residual, write out + mask.
  F.dropout_residual = rc.memory_bound(Bytes(2 * 7.0 * T * h / sp), 2);
  B.dropout_residual = rc.memory_bound(Bytes(2 * 7.0 * T * h / sp), 2);

  // FFN, or for MoE layers the experts on this GPU processing their share of routed tokens.
  double ffn_tokens = T;
  if (moe_layer && m.moe) {
    ffn_tokens = T * m.moe->top_k * m.moe->capacity_factor;  // balanced: each GPU's experts get this many
    F.moe_router = rc.gemm({T, double(m.moe->experts), h, 1}) + rc.memory_bound(Bytes(4.0 * T * m.moe->experts * 3), 2);
    B.moe_router = 2.0 * F.moe_router;
    if (dispatch == MoeDispatch::einsum) {
      // One-hot einsums: dispatch (E*C x h x T) and combine (T x h x E*C) forward; backward the
      // input gradient of each and the gate gradient of combine: three GEMMs.
      const Seconds one = rc.gemm({ffn_tokens, h, T, 1});
      F.moe_permute = 2.0 * one;
      B.moe_permute = 3.0 * one;
    } else {
      // Permute before and unpermute after the experts: read and write the routed (tokens, h).
      F.moe_permute = rc.memory_bound(Bytes(2 * 4.0 * ffn_tokens * h), 2);
      B.moe_permute = F.moe_permute;
    }
  }
  fwd_bwd(ffn_tokens, f / t, h, F.fc1, B.fc1);
  F.gelu = rc.memory_bound(Bytes(4.0 * ffn_tokens * f / t));
  B.gelu = rc.memory_bound(Bytes(6.0 * ffn_tokens * f / t));
  fwd_bwd(ffn_tokens, h, f / t, F.fc2, B.fc2);

  // Attention core.
  const bool causal = true;
  if (attention == AttentionImpl::flash) {
    F.attention_core = rc.flash_forward(b * a_local, tokens, context, d, causal);
    B.attention_core = 2.5 * (F.attention_core - rc.params().launch_overhead) + rc.params().launch_overhead;
  } else {
    // Megatron-LM 2021-22: baddbmm QK^T, fused scale-mask-softmax, dropout, bmm AV, all over the
    // full (b, a/t, tokens, context) scores (2 bytes each; dropout mask 1 byte). Time = the GEMMs'
    // math + every byte of score traffic at the score bandwidth, the form in which
    // score_memory_efficiency was derived (a GEMM with k = head dim cannot hide the write of its
    // s x s output behind a mainloop of a few k-steps, nor the softmax behind anything).
    const double scores = b * a_local * tokens * context;
    const Seconds qk = rc.gemm_math({double(tokens), double(context), d, b * a_local});
    const Seconds av = rc.gemm_math({double(tokens), d, double(context), b * a_local});
    // Bytes per score element the GEMMs move (none extra when a profile measured them):
    // forward QK^T writes it and AV reads it; backward dP = dO V^T writes it, dV = P^T dO,
    // dQ = dS K and dK = dS^T Q each read it.
    const double gemm_fwd = rc.has_gemm_profile() ? 0.0 : 4.0, gemm_bwd = rc.has_gemm_profile() ? 0.0 : 8.0;
    const Seconds launch = rc.params().launch_overhead;
    // Forward: softmax reads and writes (4), dropout reads, writes and writes its mask (5).
    F.attention_core = qk + av + rc.score_traffic(Bytes((gemm_fwd + 4.0 + 5.0) * scores)) + 2.0 * launch;
    // Backward: dP = dO V^T has QK^T's shape and dQ = dS K has AV's; dV = P^T dO and dK = dS^T Q
    // are (context x d) over the tokens; softmax backward (reads y and dy, writes dx: 6) and
    // dropout backward (reads dy and mask, writes dx: 5).
    const Seconds dv = rc.gemm_math({double(context), d, double(tokens), b * a_local});
    B.attention_core = qk + av + 2.0 * dv + rc.score_traffic(Bytes((gemm_bwd + 6.0 + 5.0) * scores)) + 2.0 * launch;
  }
  return L;
}

EdgeTimes edge_times(const RooflineCompute& rc, const ModelSpec& m, const PlanSpec& p, int tokens) {
  const double t = p.tp, T = double(p.micro_batch) * tokens, h = m.hidden, V = m.vocab;
  EdgeTimes e;
  // Embedding: gather rows and add positions; backward scatter-adds into the word-embedding grad.
  e.embedding_forward = rc.memory_bound(Bytes(3 * 2.0 * T * h), 2);
  e.embedding_backward = rc.memory_bound(Bytes(3 * 2.0 * T * h), 2);
  // Final layernorm, LM head over the local vocabulary shard, fused cross-entropy on fp32 logits.
  const Seconds ln = rc.memory_bound(Bytes(4.0 * T * h));
  const Seconds head = rc.gemm({T, V / t, h, 1});
  const Seconds xent = rc.memory_bound(Bytes(3 * 4.0 * T * V / t), 2);
  e.head_forward = ln + head + xent;
  e.head_backward = 2.0 * ln + rc.gemm({T, h, V / t, 1}) + rc.gemm({h, V / t, T, 1}) + xent;
  return e;
}

Seconds optimizer_time(const RooflineCompute& rc, double params) {
  return rc.memory_bound(Bytes(30.0 * params), 1);
}

}  // namespace foresight::cost_models
