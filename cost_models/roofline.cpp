#include "cost_models/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "cost_models/host_compute.hpp"
#include "cost_models/memory.hpp"

namespace foresight::cost_models {

RooflineParams roofline_params_for(const GpuSpec& gpu, AttentionImpl attention, bool* has_attention_figure) {
  const GpuKernelFigures& k = gpu.kernels;
  RooflineParams p;
  p.gemm_efficiency = k.gemm_efficiency.value;
  p.memory_efficiency = k.memory_efficiency.value;
  p.launch_overhead = microseconds(k.launch_overhead_us.value);
  if (k.gemm_k_overhead) p.gemm_k_overhead = k.gemm_k_overhead->value;
  if (k.gemm_tile_candidates) p.tile_candidates = int(k.gemm_tile_candidates->value);
  if (k.fp8_split_accumulation_slowdown) p.fp8_split_accumulation_slowdown = k.fp8_split_accumulation_slowdown->value;
  if (k.unfused_score_efficiency) p.score_memory_efficiency = k.unfused_score_efficiency->value;
  if (k.eager_norm_efficiency) p.eager_norm_memory_efficiency = k.eager_norm_efficiency->value;
  if (k.eager_strided_efficiency) p.eager_strided_memory_efficiency = k.eager_strided_efficiency->value;
  const std::optional<SourcedValue>& fused =
      attention == AttentionImpl::cudnn                                                    ? k.cudnn_attention_efficiency
      : attention == AttentionImpl::flash2 && k.flash2_attention_efficiency             ? k.flash2_attention_efficiency
      : attention == AttentionImpl::flash_triton && k.flash_triton_attention_efficiency ? k.flash_triton_attention_efficiency
      : attention == AttentionImpl::flash1 && k.flash1_attention_efficiency             ? k.flash1_attention_efficiency
                                                                                          : k.flash_attention_efficiency;
  p.triton_attention_shape = attention == AttentionImpl::flash_triton;
  p.flash1_attention_shape = attention == AttentionImpl::flash1;
  if (attention != AttentionImpl::unfused && fused) p.flash_efficiency = fused->value;
  if (has_attention_figure) *has_attention_figure = attention == AttentionImpl::unfused || fused.has_value();
  return p;
}

namespace {
/// The 16-bit tensor-core peak a GPU file gives (bf16, or fp16 on parts without bf16).
double sixteen_bit_peak(const GpuSpec& gpu) {
  return std::max(gpu.peak(Dtype::bf16).value(), gpu.peak(Dtype::fp16).value());
}
}  // namespace

RooflineCompute::RooflineCompute(const GpuSpec& gpu, Dtype dtype, RooflineParams params)
    : gpu_(gpu),
      dtype_(dtype),
      peak_(gpu.peak(dtype)),
      attention_peak_(gpu.peak(dtype == Dtype::fp8 ? Dtype::bf16 : dtype)),
      // Element sizes of a GEMM's inputs and output: fp32/tf32 4; fp8 inputs 1 with a bf16 output.
      in_bytes_(dtype == Dtype::fp32 || dtype == Dtype::tf32 ? 4.0 : dtype == Dtype::fp8 ? 1.0 : 2.0),
      out_bytes_(dtype == Dtype::fp32 || dtype == Dtype::tf32 ? 4.0 : 2.0),
      // A tile's prologue and epilogue: fixed time, given as elements of K at the bf16 rate; a
      // faster mainloop (FP8 at twice the peak) covers proportionally more K in that time.
      k_overhead_([&] {
        const double bf16 = sixteen_bit_peak(gpu);
        return params.gemm_k_overhead > 0 && bf16 > 0 ? params.gemm_k_overhead * peak_.value() / bf16 : 0.0;
      }()),
      p_(params) {
  FORESIGHT_CHECK(peak_ > FlopsPerSecond(0)) << gpu.name << " has no peak for " << to_string(dtype);
  FORESIGHT_CHECK(gpu.sms > 0 && gpu.hbm_bandwidth > BytesPerSecond(0));
}

void RooflineCompute::use_profile(CalibrationProfile profile) {
  if (profile.copy_GBps) p_.memory_efficiency = *profile.copy_GBps * 1e9 / gpu_.hbm_bandwidth.value();
  if (profile.attention_efficiency) p_.flash_efficiency = *profile.attention_efficiency;
  if (profile.launch_overhead_us) p_.launch_overhead = microseconds(*profile.launch_overhead_us);
  if (!profile.gemm.empty()) {
    gemm_index_ = index_gemm(profile);
    profile_ = std::move(profile);
  }
}

void RooflineCompute::anchor_to_bf16_profile(const CalibrationProfile& bf16) {
  if (dtype_ != Dtype::fp8 || profile_ || bf16.gemm.empty()) return;
  bf16_anchor_ = index_gemm(bf16);
  bf16_peak_ = sixteen_bit_peak(gpu_);
}

void RooflineCompute::apply_calibrated_scales(double gemm, double attention) {
  FORESIGHT_CHECK(gemm > 0 && attention > 0) << gemm << " " << attention;
  gemm_scale_ = gemm;
  p_.flash_efficiency *= attention;
}

Seconds RooflineCompute::gemm(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return Seconds(0);
  if (profile_) {
    const GemmEstimate e = profile_gemm(*gemm_index_, s.m, s.n, s.k, s.batch);
    if (e.extrapolated) ++extrapolated_;
    return Seconds(e.time_s / gemm_scale_);  // measured kernel times include their launch
  }
  return roofline_gemm(s, 1.0);
}

Seconds RooflineCompute::gemm_grad(const GemmShape& s) const {
  // Split accumulation slows the mainloop's arithmetic, not the GEMM's memory traffic or launch; a
  // measured profile already timed whatever accumulation its kernels ran.
  if (dtype_ != Dtype::fp8 || profile_ || s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return gemm(s);
  return roofline_gemm(s, p_.fp8_split_accumulation_slowdown);
}

Seconds RooflineCompute::roofline_gemm(const GemmShape& s, double math_scale) const {
  const double bytes = s.batch * (in_bytes_ * (s.m * s.k + s.k * s.n) + out_bytes_ * s.m * s.n);
  const double memory_s = bytes / (gpu_.hbm_bandwidth.value() * p_.memory_efficiency);
  if (bf16_anchor_) {
    // Same tiles and waves in both precisions: the FP8 mainloop is faster by the peak ratio, less
    // what its K term (k_overhead_, the bf16 one at the FP8 rate) takes back.
    const double t16 = profile_gemm(*bf16_anchor_, s.m, s.n, s.k, s.batch).time_s;
    const double speedup = (peak_.value() / bf16_peak_) * (1.0 + p_.gemm_k_overhead / s.k) / (1.0 + k_overhead_ / s.k);
    return Seconds(std::max(t16 / speedup / gemm_scale_ * math_scale, memory_s));
  }
  return Seconds(std::max(math_seconds(s) * math_scale, memory_s)) + p_.launch_overhead;
}

Seconds RooflineCompute::gemm_math(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return Seconds(0);
  if (profile_) return gemm(s);
  return Seconds(math_seconds(s)) + p_.launch_overhead;
}

Seconds RooflineCompute::score_traffic(Bytes bytes) const {
  return bytes / (gpu_.hbm_bandwidth * p_.score_memory_efficiency.value_or(p_.memory_efficiency));
}

Seconds RooflineCompute::traffic_at(Bytes bytes, double efficiency, int launches) const {
  return bytes / (gpu_.hbm_bandwidth * efficiency) + p_.launch_overhead * double(launches);
}

Seconds RooflineCompute::eager_norm_bound(Bytes bytes, int launches) const {
  return traffic_at(bytes, p_.eager_norm_memory_efficiency.value_or(p_.memory_efficiency), launches);
}

Seconds RooflineCompute::eager_strided_bound(Bytes bytes, int launches) const {
  return traffic_at(bytes, p_.eager_strided_memory_efficiency.value_or(p_.memory_efficiency), launches);
}

double RooflineCompute::math_seconds(const GemmShape& s) const {
  const double flops = 2.0 * s.m * s.n * s.k * s.batch;
  // The library picks its kernel per problem shape (cuBLAS's heuristics choose among tile
  // configurations; NVIDIA's Matrix Multiplication Background guide, "Tile Quantization" and "Wave
  // Quantization"). Where a GPU file says so (gemm_tile_candidates 3), the fastest of three output
  // tiles: the default (256 x 128), its transpose and the square of its short side (128 x 128),
  // each with its own wave and tile quantization. Priced with the default tile alone, the shapes of
  // this project's H100 sweep whose default tiling fills under 70% of the last wave ran at half the
  // predicted time (median), and those at 70-85% in 1/1.26 of it; with the three, the shapes under
  // 85% full are within 10% at the median (+3.6%; tests/cost_models/roofline_test.cpp). A dimension smaller than a tile
  // gets a tile no larger than it needs (CUTLASS's tensor-op tiles go down to 64 rows or columns),
  // so a 128-token TeraPipe slice does not pay for a 256-row tile half made of padding.
  auto tile_for = [](double dim, double fallback) {
    if (dim >= fallback) return fallback;
    return dim <= 64 ? std::min(64.0, fallback) : (dim <= 128 ? std::min(128.0, fallback) : fallback);
  };
  const double a = p_.tile_m, b = p_.tile_n, c = std::min(a, b);
  double best = 0;  // the largest wave x tile efficiency of the candidates
  const std::pair<double, double> candidates[3] = {{a, b}, {b, a}, {c, c}};
  FORESIGHT_CHECK(p_.tile_candidates == 1 || p_.tile_candidates == 3) << p_.tile_candidates;
  for (int i = 0; i < p_.tile_candidates; ++i) {
    const auto& [cm, cn] = candidates[i];
    const double tm = tile_for(s.m, cm), tn = tile_for(s.n, cn);
    const double tiles = std::ceil(s.m / tm) * std::ceil(s.n / tn) * s.batch;
    const double waves = std::ceil(tiles / gpu_.sms);
    const double wave_efficiency = tiles / (waves * gpu_.sms);
    // Tile quantization: partial tiles at the m and n edges compute padding.
    const double tile_efficiency = (s.m * s.n) / (std::ceil(s.m / tm) * tm * std::ceil(s.n / tn) * tn);
    best = std::max(best, wave_efficiency * tile_efficiency);
  }
  return flops * (1.0 + k_overhead_ / s.k) / (peak_.value() * p_.gemm_efficiency * gemm_scale_ * best);
}

Seconds RooflineCompute::memory_bound(Bytes bytes, int launches) const {
  return traffic_at(bytes, p_.memory_efficiency, launches);
}

namespace {
/// A fused attention kernel's TFLOP/s over a benchmark's grid (sequence 512, 1k, 2k, 4k, 8k, 16k;
/// head dim 64 and 128), relative to (128, 2k): interpolated in log2(seq) and linearly in the head
/// dim, clamped outside the measured range (head dims above 128 as 128).
double attention_grid_factor(const double (&d64)[6], const double (&d128)[6], double head_dim, double context) {
  const double x = std::clamp(std::log2(std::max(context, 1.0) / 512.0), 0.0, 5.0);
  const int i = std::min(4, int(x));
  const double f = x - i;
  const double at128 = d128[i] + f * (d128[i + 1] - d128[i]);
  const double at64 = d64[i] + f * (d64[i + 1] - d64[i]);
  const double w = std::clamp((head_dim - 64.0) / 64.0, 0.0, 1.0);
  return (at64 + w * (at128 - at64)) / d128[2];
}
}  // namespace

double fused_attention_shape_factor(double head_dim, double context) {
  // FlashAttention-2 forward + backward, causal, on an H100 80GB SXM5 (Dao-AILab/flash-attention
  // assets/flash2_h100_fwd_bwd_benchmark.png; 16k tokens per batch, hidden 2048), TFLOP/s by
  // sequence length 512, 1k, 2k, 4k, 8k, 16k: head dim 128: 163, 221, 265, 294, 308, 328; head
  // dim 64: 141, 192, 232, 257, 273, 284.
  static constexpr double kD128[] = {163, 221, 265, 294, 308, 328};
  static constexpr double kD64[] = {141, 192, 232, 257, 273, 284};
  return attention_grid_factor(kD64, kD128, head_dim, context);
}

double cudnn_mla_attention_factor(double compute_capability, double context) {
  // NVIDIA/cudnn-frontend @3929da2 benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn
  // (cuDNN 9.19.1 on an H200, batch 1, causal, bf16, forward and backward in one run, median of
  // 10): DeepSeek-V3's MLA shape (128 heads, qk 192, v 128; dsv3_20260227_034744.csv) against
  // Llama 3.1's (64 query / 8 key-value heads of 128; llama3.1_20260227_034703.csv) at sequence
  // 2k, 4k, 8k. Forward + backward ms per head: MLA 1.601 / 128, 5.572 / 128, 20.440 / 128; d128
  // 0.606 / 64, 1.915 / 64, 6.791 / 64. With the same efficiency an MLA head would take 160 / 128
  // of a d128 head's time; it takes 1.057, 1.164, 1.204 times that: factors 0.946, 0.859, 0.831.
  // Forward alone MLA runs as fast as d128 (599 vs 591 TFLOP/s at 4k): the loss is the backward's
  // (404 vs 474; its three qk-wide products of five, and the MLA rows' deterministic backward,
  // which cuDNN's GB200 runs of the same shape show costing under 2%).
  if (compute_capability < 9.0 || compute_capability >= 10.0) return 1.0;
  static constexpr double kFactor[] = {0.946, 0.859, 0.831};  // 2k, 4k, 8k
  const double x = std::clamp(std::log2(std::max(context, 1.0) / 2048.0), 0.0, 2.0);
  const int i = std::min(1, int(x));
  return kFactor[i] + (x - i) * (kFactor[i + 1] - kFactor[i]);
}

double triton_attention_shape_factor(double head_dim, double context) {
  // FlashAttention's Triton kernel forward + backward, causal, on an A100 80GB SXM4 (the "FlashAttention
  // Triton" bars of Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png, the same
  // sweep as the FlashAttention-2 figures), TFLOP/s by sequence length 512 .. 16k: head dim 128:
  // 50, 61, 68, 74, 78, 80; head dim 64: 59, 75, 79, 76, 79, 80.
  static constexpr double kD128[] = {50, 61, 68, 74, 78, 80};
  static constexpr double kD64[] = {59, 75, 79, 76, 79, 80};
  return attention_grid_factor(kD64, kD128, head_dim, context);
}

double flash1_attention_shape_factor(double head_dim, double context) {
  // The original FlashAttention CUDA kernel (flash-attn 1.x) forward + backward, causal, on an A100
  // 80GB SXM4 (the "FlashAttention" bars of Dao-AILab/flash-attention assets/
  // flash2_a100_fwd_bwd_benchmark.png @ 4f285b35, the sweep the FlashAttention-2 and Triton figures
  // come from; notes/research-flash1-a100.md), TFLOP/s by sequence length 512 .. 16k: head dim 128:
  // 55, 62, 69, 76, 80, 83; head dim 64: 58, 70, 77, 87, 92, 97.
  static constexpr double kD128[] = {55, 62, 69, 76, 80, 83};
  static constexpr double kD64[] = {58, 70, 77, 87, 92, 97};
  return attention_grid_factor(kD64, kD128, head_dim, context);
}

Seconds RooflineCompute::flash_forward(double bh, double tokens, double context, double d, bool causal,
                                       int window) const {
  // QK^T and AV over the visible part of the (tokens x context) score matrix.
  double visible = tokens * context;
  if (causal) visible -= tokens * (tokens - 1) / 2.0;  // a slice sees its prefix plus its own causal triangle
  double band = context;
  if (causal && window > 0 && window < context) {
    // The slice's queries sit at positions context - tokens + 1 .. context (1-based); query j sees
    // min(j, w) keys. seen(n) = sum over j <= n of min(j, w).
    const double w = window;
    auto seen = [w](double n) { return n <= w ? n * (n + 1) / 2.0 : w * (w + 1) / 2.0 + (n - w) * w; };
    visible = seen(context) - seen(context - tokens);
    band = w;
  }
  // The original FlashAttention kernel has instances for head dims 32, 64 and 128 only and runs any
  // other head dim (a multiple of 8 up to 128) on the next larger one (flash-attn 0.2,
  // csrc/flash_attn/fmha_api.cpp run_fmha_fwd / run_fmha_bwd_hdim*): a head of 96 costs one of 128.
  if (p_.flash1_attention_shape && d <= 128) d = d <= 32 ? 32.0 : d <= 64 ? 64.0 : 128.0;
  const double flops = 4.0 * bh * visible * d;
  const double shape = !p_.fused_attention_shape    ? 1.0
                       : p_.triton_attention_shape ? triton_attention_shape_factor(d, band)
                       : p_.flash1_attention_shape ? flash1_attention_shape_factor(d, band)
                                                   : fused_attention_shape_factor(d, band);
  const double efficiency = p_.flash_efficiency * shape;
  return Seconds(flops / (attention_peak_.value() * efficiency)) + p_.launch_overhead;
}

Seconds LayerOpTimes::forward() const {
  return layernorms + qkv + attention_core + projection + dropout_residual + fc1 + gelu + fc2 + moe_router + moe_permute +
         fp8_casts;
}

Fp8CastTimes torchao_fp8_casts(const RooflineCompute& rc, Fp8Scaling scaling, bool compile, bool fp8_param_gather,
                               const Fp8Operands& ops) {
  const double inputs = ops.inputs, grads = ops.grads, weights = ops.weights;
  // torchao's dynamic scaling (torchao/float8, Float8Linear with tensorwise or rowwise scales;
  // the scale comes from the tensor's own amax): every operand is cast where it is used.
  // Forward: each input cast (read 2, write 1) after its amax, which Inductor fuses into the
  // kernel producing the input under torch.compile and eager PyTorch reads separately (2);
  // each weight cast per micro-batch the same way.
  // Backward: each output gradient cast twice, as is and transposed for the weight gradient
  // (2 x 3, + 2 for its amax in eager mode); each saved input cast again transposed (3); each
  // weight transposed for the data gradient (3). With FSDP's float8 all-gather and precomputed
  // scales (plan.fp8_param_gather) each shard is cast once before the gather, a 1/dp share
  // left out, so the forward gets its weights in FP8 and casts none; the backward still
  // transposes each (read 1, write 1).
  // Inputs that arrive through a sequence-parallel all-gather in FP8 (torchao's
  // Float8ColwiseParallel / PrepareFloat8ModuleInput under torchtitan's float8 TP plan) were cast on
  // their 1/tp shard before it, and the backward reuses the gathered FP8 tensor, transposed for the
  // weight gradient (read 1, write 1), instead of casting the bf16 input again
  // (torchao float8_linear.py: an operand already in float8 is used as it is).
  const double amax = compile ? 0.0 : 2.0;
  const double weight_fwd = fp8_param_gather ? 0.0 : 3.0 + amax, weight_bwd = fp8_param_gather ? 2.0 : 3.0;
  const double gathered = std::min(ops.gathered_inputs, inputs), local = inputs - gathered;
  Fp8CastTimes t;
  t.forward = rc.memory_bound(Bytes((3.0 + amax) * (local + gathered / std::max(1.0, ops.tp)) + weight_fwd * weights), 8);
  t.backward = rc.memory_bound(Bytes((6.0 + amax) * grads + 3.0 * local + 2.0 * gathered + weight_bwd * weights), 16);
  if (scaling == Fp8Scaling::rowwise) {
    // Rowwise scaling costs more than these casts. (1) Its gradient GEMMs run without fast
    // accumulation, where torch's rowwise CUTLASS kernel is slow, so torchao runs cuBLAS's
    // tensorwise kernel and multiplies the output by the outer product of the two scale vectors
    // afterwards (torchao float8_ops.py addmm_float8_unwrapped; pytorch/ao#1325 and #2184):
    // Inductor fuses the data gradient's multiply into its consumer, the weight gradient's runs
    // alone (read 2, write 2 per weight element). (2) Per element of each GEMM input,
    // kRowwiseInputBytes of further HBM traffic: what torchao's own rowwise benchmark shows beyond
    // everything itemized here (tests/cost_models/torchao_rowwise_test.cpp: its LayerNorm ->
    // Linear -> Sigmoid fwd + bwd speedups over bf16 by M, K, N on an H100, PyTorch 2.8 nightly,
    // fitted over the 108 shapes with M >= 8192; without the term the model is 18% too optimistic
    // there, most where K is large and N small, where the inputs outweigh the GEMM). Counted per
    // distinct input, not per Linear: counted per Linear (torchtitan's separate wq, wk, wv and
    // w1, w3) it would push the 70B rowwise rows' GEMM scale to its bound and still leave them
    // 5-10% slow (notes/status.md, session 29).
    constexpr double kRowwiseInputBytes = 32.0;
    t.backward += rc.memory_bound(Bytes(4.0 * weights + kRowwiseInputBytes * inputs), 8);
  }
  return t;
}

namespace {
/// Bytes per Linear weight element of the traffic table's weight casts (autocast over fp32
/// parameters: the fp32 weight cast to 16 bits each forward, its 16-bit gradient cast back). Under
/// ZeRO-3 a framework that casts weights at all shards with FSDP1 here (FSDP2 prices its copies
/// with its gathers, FrameworkTraits::fsdp2_unit_copies; Megatron and DeepSpeed hold 16-bit
/// weights and their tables carry no casts). FSDP1's layers see the gathered 16-bit parameters
/// (param_dtype), so nothing is cast forward (only the local fp32 shard before its all-gather, 1/k
/// of this). Backward, the layers' 16-bit gradients reach the flat gradient through the split
/// views' backward, a cat (read and write the 16-bit gradient), and the flat gradient is cast to
/// the reduce dtype before its reduce-scatter when that is wider (FSDP1 _post_backward_hook with
/// reduce_dtype fp32, Composer's mixed_precision DEFAULT; not under PURE).
/// The framework's norms moving `bytes_per_element` (times the recipe's traffic scale) of
/// `elements` in `launches` kernels: an eager RMSNorm chain at its own rate
/// (RooflineCompute::eager_norm_bound), any other at the streaming rate.
Seconds norm_traffic(const RooflineCompute& rc, const ElementwiseTraffic& tr, double scale, double bytes_per_element,
                     double elements, int launches) {
  if (!(bytes_per_element > 0)) return Seconds(0);
  const Bytes bytes(scale * bytes_per_element * elements);
  return tr.norms_eager_chain ? rc.eager_norm_bound(bytes, launches) : rc.memory_bound(bytes, launches);
}

double weight_cast_bytes(const ExecutionModel& x, const PlanSpec& p, bool backward) {
  const ElementwiseTraffic& tr = *x.elementwise;
  if (p.zero < 3) return backward ? tr.weight_cast_backward : tr.weight_cast_forward;
  if (!backward || !(tr.weight_cast_backward > 0) || x.framework->fsdp2_unit_copies) return 0.0;
  const double gb = x.bytes.gather, rb = x.bytes.reduce;
  return 2.0 * gb + (rb > gb ? gb + rb : 0.0);
}
}  // namespace

LayerTimes layer_times(const ExecutionModel& x, const ModelSpec& m, const PlanSpec& p, int tokens, int context,
                       bool moe_layer, int window) {
  if (x.host) return host_layer_times(*x.host, m, p, tokens, context, moe_layer);
  const RooflineCompute& rc = x.roofline();
  const ElementwiseTraffic& tr = *x.elementwise;
  const double scale = x.bytes.traffic_scale;
  const double t = p.tp, b = p.micro_batch, h = m.hidden, T = b * tokens, d = m.head_dim();
  const double a_local = double(m.heads) / t;
  const double kv_dim = double(m.kv_heads) * d;
  const double f = m.ffn_hidden;
  // Elementwise work on the (T, h) stream is split over t with sequence parallelism.
  const double sp = p.sequence_parallel ? t : 1.0;
  auto stream = [&](double bytes_per_element, double elements, int launches) {
    return bytes_per_element > 0 ? rc.memory_bound(Bytes(scale * bytes_per_element * elements), launches) : Seconds(0);
  };
  // Elementwise bytes of which `strided_per_element` eager PyTorch moves on its non-vectorized path
  // (an operand broadcast or strided: RooflineCompute::eager_strided_bound), the rest streaming;
  // the launches are counted once.
  auto eager_stream = [&](double bytes_per_element, double strided_per_element, double elements, int launches) {
    if (!(bytes_per_element > 0)) return Seconds(0);
    const double strided = std::clamp(strided_per_element, 0.0, bytes_per_element);
    if (!(strided > 0)) return stream(bytes_per_element, elements, launches);
    const double plain = bytes_per_element - strided;
    return (plain > 0 ? rc.memory_bound(Bytes(scale * plain * elements), launches) : Seconds(0)) +
           rc.eager_strided_bound(Bytes(scale * strided * elements), plain > 0 ? 0 : launches);
  };
  LayerTimes L;
  LayerOpTimes& F = L.forward_ops;
  LayerOpTimes& B = L.backward_ops;

  // The layer's norms (with the framework's casts around them): the framework's traffic is for
  // two; a parallel block with one shared norm moves half.
  const double norms = m.norms_per_layer() / 2.0;
  F.layernorms = norm_traffic(rc, tr, scale, norms * tr.norms_forward, T * h / sp,
                              std::max(1, int(norms * tr.norms_launches_forward)));
  B.layernorms = norm_traffic(rc, tr, scale, norms * tr.norms_backward, T * h / sp,
                              std::max(1, int(norms * tr.norms_launches_backward)));
  // Dense GEMMs; backward = data gradient + weight gradient, each of the forward's FLOPs.
  // Async TP (plan.tp_overlap) decomposes each GEMM a TP collective feeds or drains into tp GEMMs
  // of M / tp rows, one per shard that arrives or leaves (torch's fused_all_gather_matmul and
  // fused_matmul_reduce_scatter; Transformer Engine's userbuffers the same); the forward and the
  // data-gradient GEMMs are split, the weight gradient runs whole on the gathered input.
  const double chunks = p.tp_overlap && t > 1 ? t : 1.0;
  // Blockwise FP8 runs every GEMM with split accumulation, the forward's too (Transformer
  // Engine's Float8BlockScaling fixes use_split_accumulator=True for fprop, dgrad and wgrad:
  // recipe/__init__.py; DeepSeek-V3 sec. 3.3.2 promotes partial sums to FP32 every 128 elements).
  const bool split_forward = x.dtype == Dtype::fp8 && x.fp8_scaling == Fp8Scaling::blockwise;
  auto forward_gemm = [&](const GemmShape& g) { return split_forward ? rc.gemm_grad(g) : rc.gemm(g); };
  auto fwd_bwd = [&](double mm, double nn, double kk, Seconds& fw, Seconds& bw) {
    fw = chunks * forward_gemm({mm / chunks, nn, kk, 1});
    bw = chunks * rc.gemm_grad({mm / chunks, kk, nn, 1}) + rc.gemm_grad({kk, nn, mm, 1});
  };
  const double q = m.q_width(), v_w = m.v_width();
  if (m.mla) {
    // MLA (Megatron-Core's MLASelfAttention): the latent down-projections whole on every TP rank
    // but on its own tokens (under sequence parallelism the rank's 1/tp of them, whose latents are
    // gathered after: multi_latent_attention.py, "q_compressed: [s / TP, b, q_lora_rank]"), the
    // per-head up-projections split over tp.
    const MlaSpec& a = *m.mla;
    Seconds f1, b1, f2, b2, f3, b3;
    fwd_bwd(T / sp, double(a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim), h, f1, b1);
    fwd_bwd(T, q / t, a.q_lora_rank > 0 ? double(a.q_lora_rank) : h, f2, b2);
    fwd_bwd(T, double(m.heads) * (a.qk_nope_head_dim + a.v_head_dim) / t, double(a.kv_lora_rank), f3, b3);
    F.qkv = f1 + f2 + f3;
    B.qkv = b1 + b2 + b3;
    L.mla_up_projections = f2 + f3;
  } else {
    fwd_bwd(T, (q + 2 * kv_dim) / t, h, F.qkv, B.qkv);
  }
  fwd_bwd(T, h, v_w / t, F.projection, B.projection);
  // Dropout + residual adds at both sites, and re-layout copies around attention.
  F.dropout_residual = stream(tr.residual_forward, T * h / sp, tr.residual_launches_forward) +
                       eager_stream(tr.layout_forward, tr.layout_strided_forward, T * h / t, tr.layout_launches_forward);
  B.dropout_residual = stream(tr.residual_backward, T * h / sp, tr.residual_launches_backward) +
                       eager_stream(tr.layout_backward, tr.layout_strided_backward, T * h / t, tr.layout_launches_backward);
  // TeraPipe's cache gradient beyond the slice's own tokens (ElementwiseTraffic::
  // kv_cache_slice_gradient): zero-fill over the rest of the sequence, the copy and the add over
  // the cached prefix, for K and V.
  // Per sequence of the micro-batch (its b sequences each have the buffers).
  if (tr.kv_cache_slice_gradient && m.seq_len > tokens) {
    const double prefix = std::max(0, context - tokens), rest = double(m.seq_len - tokens);
    const double bytes = 2.0 * (2.0 * rest + 4.0 * prefix + 6.0 * prefix);  // K and V
    B.dropout_residual += stream(bytes, b * h / t, prefix > 0 ? 2 : 0);  // the two adds
  }
  // RoPE as kernels of their own on this GPU's q and k, and grouped K/V repeated for every query
  // head (read kv, write q-wide, for K and V; the backward sums them back).
  if (m.position == PositionEmbedding::rope && !m.mla) {
    F.dropout_residual += eager_stream(tr.rope_forward, tr.rope_strided_forward, T * (q + kv_dim) / t, tr.rope_launches);
    B.dropout_residual += eager_stream(tr.rope_backward, tr.rope_strided_backward, T * (q + kv_dim) / t, tr.rope_launches);
  }
  if (m.kv_heads > 0 && m.kv_heads < m.heads && !m.mla) {
    const double kv_strided = tr.kv_repeat_strided ? tr.kv_repeat : 0.0;
    F.dropout_residual += eager_stream(tr.kv_repeat, kv_strided, 2.0 * T * (q + kv_dim) / t, 2);
    B.dropout_residual += eager_stream(tr.kv_repeat, kv_strided, 2.0 * T * (q + kv_dim) / t, 2);
  }
  // All-to-all context parallelism copies every tensor it exchanges (Q, K, V and the output
  // forward, dO and dQ, dK, dV backward), each copy reading and writing it once
  // (FrameworkTraits::cp_all_to_all_copies): Transformer Engine's flash_attn_a2a_communicate in
  // Megatron-Core's sbhd layout twice, movedim(...).contiguous() to group the heads by destination
  // and index_select to put the 2 cp sequence chunks back in order.
  // (plan.cp_heads(): the ranks of its all-to-all, 1 without one.)
  const int a2a_group = p.cp > 1 ? p.cp_heads() : 1;
  if (a2a_group > 1) {
    const double exchanged = T * (2.0 * q / t + 2.0 * std::max(kv_dim / t, d));
    const double bytes = 4.0 * x.framework->cp_all_to_all_copies;  // (read + write) x 2 bytes per copy
    L.cp_exchange_copies = stream(bytes, exchanged, 8);
    F.dropout_residual += L.cp_exchange_copies;
    B.dropout_residual += stream(bytes, exchanged, 8);
  }

  // FFN, or for MoE layers the experts on this GPU processing their share of routed tokens.
  double ffn_tokens = T;
  double ffn_width = f;      // one FFN's width: the dense one, or one expert's
  double ffn_split = t;      // GPUs one FFN's width is split over: tp, or the experts' plan.etp()
  double groups = 1;         // experts on this GPU, each a GEMM of its own tokens (grouped GEMM)
  double shared_width = 0;   // shared experts' total width, on every token
  if (moe_layer && m.moe) {
    // Each rank routes its tokens (its sequence shard under sequence parallelism) and each GPU's
    // experts see top_k x capacity_factor copies per routed token (dropless: top_k x the busiest
    // rank's imbalance), from the etp ranks of its expert-tensor-parallel group, split over its
    // experts / ep experts, each expert_ffn / etp wide (MoE parallel folding; with etp = tp the
    // whole micro-batch's copies, as before folding).
    const bool own = moe_routes_own_tokens(*x.framework, p);
    const double routed_tokens = own ? T / (p.sequence_parallel ? t : 1.0) : T;
    ffn_split = p.etp();
    ffn_tokens = (own ? routed_tokens * ffn_split : T) * m.moe->routed_factor();
    ffn_width = m.expert_ffn();
    groups = std::max(1.0, double(m.moe->experts) / p.ep);
    shared_width = double(m.moe->shared_experts) * m.expert_ffn();
    // (The router's GEMM never runs in FP8: Megatron-Core's TopKRouter is a 16-bit or fp32 GEMM.)
    F.moe_router = x.roofline16().gemm({routed_tokens, double(m.moe->experts), h, 1}) +
                   rc.memory_bound(Bytes(4.0 * routed_tokens * m.moe->experts * 3), 2);
    B.moe_router = 2.0 * F.moe_router;
    if (x.moe_dispatch == MoeDispatch::einsum) {
      // One-hot einsums: dispatch (E*C x h x T) and combine (T x h x E*C) forward; backward the
      // input gradient of each and the gate gradient of combine: three GEMMs.
      const Seconds one = rc.gemm({ffn_tokens, h, T, 1});
      F.moe_permute = 2.0 * one;
      B.moe_permute = 3.0 * one;
      // The gate's (S, E, C) tensors around them (DeepSpeed v0.5.8 sharded_moe.py top1gating and
      // MOELayer.forward), per element: combine_weights built in fp32 by einsum("se,sc->sec")
      // (write 4), dispatch_mask = combine_weights.bool() (read 4, write 1), and each cast to the
      // input's 16-bit dtype for its einsum (read 1, write 2; read 4, write 2): 18 bytes in 4
      // kernels; backward the casts' gradients back to fp32 and the einsum's to the gates (10).
      const double sec = T * ffn_tokens;
      F.moe_permute += rc.memory_bound(Bytes(18.0 * sec), 4);
      B.moe_permute += rc.memory_bound(Bytes(10.0 * sec), 2);
    } else if (x.moe_dispatch == MoeDispatch::alltoall) {
      // Megatron-Core's dispatcher: the rank permutes the copies it routes before the all-to-all
      // and unpermutes them after (read and write each row), and where it holds more than one
      // expert sorts the rows it received by local expert and sorts them back (sort_chunks_by_idxs);
      // backward the same passes in reverse. Transformer Engine's fused permute (plan.
      // moe_permute_fusion; TE v2.x pytorch/triton/permutation.py) loads each of the rank's token
      // rows once and stores it to each of its copies, and the fused unpermute reads the copies and
      // writes each token row once (with its routing probabilities): the rank's tokens plus its
      // copies each way, not twice the copies; the sort by local expert is a permutation either way.
      const double sent = routed_tokens * m.moe->routed_factor();
      const double received = groups > 1 ? ffn_tokens : 0.0;  // after the expert-TP all-gather
      const double permuted_rows = p.moe_permute_fusion ? routed_tokens + sent : 2.0 * sent;
      F.moe_permute =
          rc.memory_bound(Bytes(2.0 * x.bytes.activation * (permuted_rows + 2.0 * received) * h), groups > 1 ? 4 : 2);
      B.moe_permute = F.moe_permute;
    } else {
      // Permute before and unpermute after the experts: read and write the routed (tokens, h).
      F.moe_permute = rc.memory_bound(Bytes(2 * 2.0 * x.bytes.activation * ffn_tokens * h), 2);
      B.moe_permute = F.moe_permute;
    }
  }
  // A gated activation's first GEMM makes gate and up (2f); its kernel reads both and writes f
  // (1.5x GeLU's read + write per output element), and its backward reads gate, up and the
  // gradient and writes two gradients (5/3 of GeLU's read x, dy, write dx).
  const bool gated = m.gated();
  const double up = gated ? 2.0 : 1.0;
  // Grouped: `groups` GEMMs of ffn_tokens / groups rows each (a small-M shape for fine-grained
  // experts, which the GEMM model prices as such).
  auto fwd_bwd_grouped = [&](double mm, double nn, double kk, Seconds& fw, Seconds& bw) {
    if (groups == 1 && !(moe_layer && m.moe)) return fwd_bwd(mm, nn, kk, fw, bw);
    fw = forward_gemm({mm / groups, nn, kk, groups});
    bw = rc.gemm_grad({mm / groups, kk, nn, groups}) + rc.gemm_grad({kk, nn, mm / groups, groups});
  };
  fwd_bwd_grouped(ffn_tokens, up * ffn_width / ffn_split, h, F.fc1, B.fc1);
  const double activated = ffn_tokens * ffn_width / ffn_split + T * shared_width / t;
  F.gelu = stream(tr.activation_forward * (gated ? 1.5 : 1.0), activated, 1);
  B.gelu = stream(tr.activation_backward * (gated ? 5.0 / 3.0 : 1.0), activated, 1);
  fwd_bwd_grouped(ffn_tokens, h, ffn_width / ffn_split, F.fc2, B.fc2);
  if (moe_layer && m.moe && x.moe_dispatch == MoeDispatch::alltoall && groups > 1) {
    // Transformer Engine's grouped linear on sm90 is one cuBLAS GEMM per local expert, round robin
    // over four streams (TE v2.7-2.14 nvte_multi_stream_cublas_gemm; the CUTLASS grouped kernel is
    // opt-in, bf16 only): a launch per expert and GEMM, forward FC1 and FC2, backward each one's
    // data and weight gradients, where the roofline above prices one batched launch. (Measured
    // GEMM times already carry a launch per expert: profile_gemm times each GEMM of the batch.)
    const Seconds extra = rc.gemm_times_measured() ? Seconds(0) : rc.params().launch_overhead * (groups - 1.0);
    F.fc1 += extra;
    F.fc2 += extra;
    B.fc1 += 2.0 * extra;
    B.fc2 += 2.0 * extra;
  }
  if (shared_width > 0) {
    Seconds f1, b1, f2, b2;
    fwd_bwd(T, up * shared_width / t, h, f1, b1);
    fwd_bwd(T, h, shared_width / t, f2, b2);
    F.fc1 += f1;
    B.fc1 += b1;
    F.fc2 += f2;
    B.fc2 += b2;
    L.shared_experts_gemms = f1 + f2;
    // The activation kernel runs over routed and shared rows alike; the shared rows' share of it.
    L.shared_experts_activation = F.gelu * (T * shared_width / t / activated);
  }
  // Megatron-Core's grouped experts with biases add FC2's bias outside the GEMM, weighted by each
  // copy's routing probability, expert by expert (FrameworkTraits::moe_fc2_bias_per_expert), booked
  // with the MoE block's data movement (not as GEMM time). Per element of FC2's (copies, h) output,
  // with 16-bit probabilities (the router's dtype through the all-to-all dispatcher): forward b * p
  // (write 2), t + b * p (read 4, write 2) and the cat of the experts' pieces (read 2, write 2): 12
  // bytes over 2 launches an expert and one; backward the split's gradient cat (read 2, write 2),
  // dy * p and dy * b (read 2, write 2 each) and their sums to the bias and probability gradients
  // (read 2 each): 16 bytes, over those 4 launches an expert, the distributed optimizer's add of
  // each bias gradient into its main gradient, and the cat. DeepEP hands the experts fp32
  // probabilities (token_dispatcher.py, the flex dispatcher's permute): b * p and the sum run in fp32
  // and are cast back to 16 bits: forward 28 bytes over 2 launches an expert and two, backward 40 over
  // 7 and four. (Megatron-Core's other bias gradients come out of TE's GEMMs: no pass below.)
  if (m.bias && moe_layer && m.moe && x.framework->moe_fc2_bias_per_expert) {
    const double rows = ffn_tokens * h;
    const bool fp32_probs = p.ep_dispatcher == EpDispatcher::deepep;
    F.moe_permute += stream(fp32_probs ? 28 : 12, rows, int(2 * groups + (fp32_probs ? 2 : 1)));
    B.moe_permute += stream(fp32_probs ? 40 : 16, rows, int((fp32_probs ? 7 : 5) * groups + (fp32_probs ? 4 : 1)));
  }
  // Bias gradients (reductions over the tokens of each Linear's output) and autocast's weight
  // casts (per parameter of the layer's Linear weights and biases: the norms stay fp32).
  if (m.bias)
    B.gelu += stream(tr.bias_grad, T * (q + 2 * kv_dim) / t + T * h + ffn_tokens * up * ffn_width / ffn_split + ffn_tokens * h, 4);
  // The layer's parameters less its norms' (which stay fp32 under autocast and are not GEMM operands).
  const double cast_params = linear_layer_parameters(m) / t;
  F.layernorms += stream(weight_cast_bytes(x, p, false), cast_params, 4);
  B.layernorms += stream(weight_cast_bytes(x, p, true), cast_params, 4);

  // FP8 linears (Transformer Engine's recipe; Micikevicius et al. 2022, arXiv:2209.05433): each
  // GEMM input is quantized by a cast kernel that also records its amax (delayed scaling), reading
  // 16 bits and writing 8 (3 bytes per element); in the backward each output gradient is cast and
  // transposed for the weight-gradient GEMM (read 2, write 1 + 1) and each saved FP8 input is
  // transposed (read 1, write 1). Weight casts happen once per step (cached across micro-batches)
  // and are left out. Elements: the inputs of QKV, projection, FC1 and FC2 and their output
  // gradients, on this GPU. In an MoE layer the routed experts' FC1 quantizes the permuted rows
  // it multiplies (ffn_tokens of them), and the shared experts' FC1 the T tokens again.
  if (x.dtype == Dtype::fp8) {
    const double fc1_inputs = ffn_tokens * h + (shared_width > 0 ? T * h : 0.0);
    const double inputs = T * h + T * v_w / t + fc1_inputs + ffn_tokens * ffn_width / ffn_split + T * shared_width / t;
    const double grads = T * (q + 2 * kv_dim) / t + T * h + (ffn_tokens * ffn_width / ffn_split + T * shared_width / t) * up +
                         (ffn_tokens + (shared_width > 0 ? T : 0.0)) * h;
    // Transformer Engine's LayerNormLinear (Megatron-Core's QKV and a dense layer's FC1) quantizes
    // its own norm output, on the sequence shard under sequence parallelism, before gathering it in
    // FP8 (te_fp8_sequence_parallel_gathers): under delayed scaling the norm kernel writes FP8 with
    // the known scale, no cast pass (TE module/layernorm_linear.py, the fused layernorm_fwd_fp8);
    // under current scaling the norm records the amax and the shard is cast (3 bytes per element).
    const double norm_fed = x.framework->fp8_transformer_engine ? T * h + (moe_layer && m.moe ? 0.0 : T * h) : 0.0;
    const double norm_shard = p.sequence_parallel && p.tp > 1 ? 1.0 / t : 1.0;
    // Under sequence parallelism TE quantizes a row-parallel layer's output gradient (the
    // projection's and a dense FC2's, T h each) on the rank's T / tp shard before gathering it in
    // FP8, then transposes the gathered tensor for the weight gradient (read 1, write 1): the cast
    // (and current scaling's amax) on 1 / tp of it, where a gradient computed whole is cast and
    // transposed in one pass (TE 1.8 module/base.py grad_output_preprocess; TE 2.14 base.py and
    // linear.py).
    const double row_parallel_grads =
        x.framework->fp8_transformer_engine && norm_shard < 1.0 ? T * h + (moe_layer && m.moe ? 0.0 : T * h) : 0.0;
    if (x.fp8_scaling == Fp8Scaling::delayed) {
      F.fp8_casts = rc.memory_bound(Bytes(3.0 * (inputs - norm_fed)), 4);
      B.fp8_casts = rc.memory_bound(
          Bytes(4.0 * (grads - row_parallel_grads) + (3.0 / t + 2.0) * row_parallel_grads + 2.0 * inputs), 8);
    } else if (x.fp8_scaling == Fp8Scaling::mxfp8) {
      // Transformer Engine's MXFP8 recipe (MXFP8Quantizer, TE v2.7-2.9): one kernel per GEMM input
      // computes each 32-element block's amax as it goes (no separate amax pass) and writes both
      // usages at once, row-wise for this GEMM and column-wise for the weight gradient's (read 2,
      // write 1 + 1, plus one E8M0 scale byte per 32 elements of each), so the backward
      // transposes nothing. The norms are not fused with it: csrc/extensions/normalization.cpp
      // takes the UNFUSED path for MXFP8 output unless NVTE_NORM_FWD_USE_CUDNN is set, which
      // Megatron-Bridge's perf scripts unset for these recipes (perf_plugins.py del_cudnn_ln,
      // v0.2.0); the norm's 16-bit output is the norm's traffic, its quantization is counted
      // here, on the sequence shard under sequence parallelism (distributed.py _all_gather_mxfp8
      // quantizes the local shard before gathering both usages, 2 bytes per element: the
      // gather stays 16-bit-sized, sim/costing.cpp). Each output gradient is quantized the same
      // way. Before every block-scaled GEMM TE swizzles both operands' scales into the tensor
      // cores' layout (csrc/extensions/gemm.cpp swizzle_scaling_factors; read and write one byte
      // per 32 elements): forward the input and the weight, backward the output gradient twice,
      // the saved input and the weight. Weights are quantized once per step (plan.fp8_param_gather
      // there: sim/cost_data_parallel.cpp cost_optimizer).
      constexpr double kQuantize = kMxfp8QuantizeBytes, kSwizzle = 2.0 / 32.0;
      const double expert_launches = moe_layer && m.moe ? 6.0 * groups : 0.0;
      F.fp8_casts = rc.memory_bound(Bytes(kQuantize * (inputs - norm_fed * (1.0 - norm_shard)) +
                                          kSwizzle * (inputs + cast_params)),
                                    int(12 + expert_launches));
      B.fp8_casts = rc.memory_bound(Bytes(kQuantize * grads + kSwizzle * (2.0 * grads + inputs + cast_params)),
                                    int(20 + expert_launches));
    } else if (x.fp8_scaling == Fp8Scaling::blockwise) {
      // Transformer Engine's Float8BlockScaling on Hopper (Float8BlockQuantizer:
      // quantize_transpose_vector_blockwise.cu for 1 x 128 tiles, the square kernel for weights):
      // one kernel per GEMM input computes each tile's amax as it goes and writes both usages at
      // once, the row-wise data and the column-wise (transposed) data each with one fp32 scale per
      // 128 elements (read 2, write 1 + 1, scales 2 x 4 / 128), so the backward transposes
      // nothing; each output gradient the same way. cuBLASLt reads the scales as they are (no
      // swizzle, which only the MXFP8 emulation on Blackwell needs). The norms' output is
      // quantized on its sequence shard, as under MXFP8. Weights are quantized once per step.
      constexpr double kQuantize = 4.0 + 8.0 / 128.0;
      const double expert_launches = moe_layer && m.moe ? 6.0 * groups : 0.0;
      if (x.framework->fp8_transformer_engine) {
        // On Blackwell the GEMMs are MXFP8's (effective_fp8_scaling): before each, TE converts both
        // operands' fp32 block scales to swizzled E8M0 (about a byte per 32 elements read and
        // written, as MXFP8's swizzle).
        const bool emulated = rc.gpu().compute_capability >= 10.0;
        const double swizzle = emulated ? 2.0 / 32.0 : 0.0;
        const int swizzles = emulated ? 1 : 0;
        F.fp8_casts = rc.memory_bound(Bytes(kQuantize * (inputs - norm_fed * (1.0 - norm_shard)) +
                                            swizzle * (inputs + cast_params)),
                                      int(8 + 8 * swizzles + expert_launches));
        B.fp8_casts = rc.memory_bound(Bytes(kQuantize * grads + swizzle * (2.0 * grads + inputs + cast_params)),
                                      int(12 + 16 * swizzles + expert_launches));
      } else {
        // DeepSeek-V3's own kernels as its report describes them (sec. 3.3.2-3.3.3, 3.5.2): each
        // input quantized in 1 x 128 tiles as it is read for the forward (read 2, write 1, a
        // scale per 128); inputs cached in FP8 and, for the weight gradient, read back,
        // dequantized, transposed and quantized again in 128 x 1 tiles (read 1, write 1); each
        // output gradient quantized for both of its GEMMs (read 2, write 1 + 1).
        constexpr double kForward = 3.0 + 4.0 / 128.0, kRequantize = 2.0 + 4.0 / 128.0;
        F.fp8_casts = rc.memory_bound(Bytes(kForward * inputs), int(4 + expert_launches / 2));
        B.fp8_casts = rc.memory_bound(Bytes(kQuantize * grads + kRequantize * inputs), int(8 + expert_launches));
      }
    } else if (x.framework->fp8_transformer_engine) {
      // Transformer Engine's current scaling (Float8CurrentScalingQuantizer, TE v2.7: an amax
      // kernel reading the tensor, a scale kernel, then the cast): TE's fused norms write their
      // output's amax as they go (then only the cast: 3 bytes), every other input is read once
      // more for its amax (2): the projection's input, an MoE layer's dispatched expert rows and
      // FC2's input (Megatron-Core's own bias-activation kernels are not TE's). Each output gradient: amax (2), cast and transpose (4); each saved
      // input transposed (2). Weights are cast once per step (cached across micro-batches). An
      // MoE layer's experts quantize each expert's rows on their own (split_quantize: three
      // launches per expert and input, forward FC1 and FC2, backward their output gradients).
      const double unfused = T * v_w / t + (moe_layer && m.moe ? ffn_tokens * h : 0.0) +
                             ffn_tokens * ffn_width / ffn_split + T * shared_width / t;
      const double expert_launches = moe_layer && m.moe ? 6.0 * groups : 0.0;
      F.fp8_casts = rc.memory_bound(Bytes(3.0 * (inputs - norm_fed * (1.0 - norm_shard)) + 2.0 * unfused),
                                    int(10 + expert_launches));
      B.fp8_casts = rc.memory_bound(
          Bytes(6.0 * (grads - row_parallel_grads) + (5.0 / t + 2.0) * row_parallel_grads + 2.0 * inputs),
          int(16 + expert_launches));
    } else {
      // torchao's dynamic scaling (torchao_fp8_casts).
      // Under torchtitan's float8 TP plan QKV's input and a dense layer's FC1 input arrive gathered
      // in FP8 (fp8_sequence_parallel_gathers).
      const double gathered =
          fp8_sequence_parallel_gathers(x, p) ? T * h + (moe_layer && m.moe ? 0.0 : T * h) : 0.0;
      const Fp8CastTimes c = torchao_fp8_casts(rc, x.fp8_scaling, p.compile, p.fp8_param_gather,
                                               {.inputs = inputs, .grads = grads, .weights = cast_params,
                                                .gathered_inputs = gathered, .tp = t});
      F.fp8_casts = c.forward;
      B.fp8_casts = c.backward;
    }
  }

  // Per-op selective checkpointing (torchtitan _get_custom_policy, 2024): aten.mm outputs are
  // saved on odd calls within a block (the counter increments before the test, so the 1st, 3rd,
  // ... are saved) and SDPA's output always. A Llama block calls wq, wk, wv, wo, w1, w3, w2 in
  // that order (w1 before w3 in silu(w1(x)) * w3(x)): wq, wv, w1 and w2 are saved. A block
  // without gating calls q, k, v, o, fc1, fc2: q, v and fc1 are saved. (MoE and MLA blocks are
  // refused with this mode by check_plan.)
  // The fused QKV and gate/up GEMMs are split by FLOP share (torchtitan calls them as separate
  // matmuls; the fused GEMM's time is the better estimate of their sum).
  {
    const Seconds wq_wv = F.qkv * ((q + kv_dim) / (q + 2 * kv_dim));
    const Seconds w1 = gated ? F.fc1 * 0.5 : F.fc1;
    L.op_checkpoint_saved = wq_wv + w1 + (gated ? F.fc2 : Seconds(0));
  }

  // Attention core.
  const bool causal = true;
  if (x.attention != AttentionImpl::unfused) {
    // MLA: QK^T over nope + rope dims, AV over v dims: the mean head width gives both FLOPs.
    const double d_attn = m.mla ? (q + v_w) / (2.0 * m.heads) : d;
    // All-to-all context parallelism attends with heads / n of the rank's heads over n x its tokens
    // (n: its all-to-all group, plan.cp_heads(); the whole sequence where there is no ring), against
    // the context its caller passes.
    const double heads = a_local / a2a_group, queries = double(tokens) * a2a_group;
    F.attention_core = rc.flash_forward(b * heads, queries, context, d_attn, causal, window);
    B.attention_core = 2.5 * (F.attention_core - rc.params().launch_overhead) + rc.params().launch_overhead;
    if (m.mla && x.attention == AttentionImpl::cudnn) {
      // cuDNN's MLA kernels lose speed to the wider query/key head (cudnn_mla_attention_factor);
      // the measurement is of forward and backward together, so both take it.
      const double mla = cudnn_mla_attention_factor(rc.gpu().compute_capability, window > 0 ? std::min<double>(window, context) : context);
      const Seconds launch = rc.params().launch_overhead;
      F.attention_core = (F.attention_core - launch) / mla + launch;
      B.attention_core = (B.attention_core - launch) / mla + launch;
    }
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
    // Between the GEMMs, the framework's own kernels over the scores (ElementwiseTraffic
    // score_forward / score_backward: Megatron-LM's fused softmax and dropout, 9 and 11).
    // Megatron's PyTorch fallback for the softmax (plan.fused_softmax false; fused_softmax.py
    // forward_torch_softmax, softmax in fp32 as query-key layer scaling forces) replaces the
    // kernel's 4 bytes per score (read and write 16 bits) by five passes: the cast to fp32 (read
    // 2, write 4), the scale (4 + 4), masked_fill_ (4 + 4; the broadcast mask stays in cache), the
    // fp32 softmax (4 + 4) and the cast back (4 + 2): 36. Backward the kernel's 6 (read y and dy,
    // write dx) become the cast's gradient to fp32 (2 + 4), the fp32 softmax backward (read y and
    // dy, write dx: 12), masked_fill's and the scale's gradients (4 + 4 each) and the cast to 16
    // bits (4 + 2): 40.
    const double fallback_fwd = x.softmax_fallback ? 36.0 - 4.0 : 0.0, fallback_bwd = x.softmax_fallback ? 40.0 - 6.0 : 0.0;
    F.attention_core =
        qk + av + rc.score_traffic(Bytes((gemm_fwd + tr.score_forward + fallback_fwd) * scores)) + 2.0 * launch;
    // Backward: dP = dO V^T has QK^T's shape and dQ = dS K has AV's; dV = P^T dO and dK = dS^T Q
    // are (context x d) over the tokens.
    const Seconds dv = rc.gemm_math({double(context), d, double(tokens), b * a_local});
    B.attention_core =
        qk + av + 2.0 * dv + rc.score_traffic(Bytes((gemm_bwd + tr.score_backward + fallback_bwd) * scores)) + 2.0 * launch;
  }
  L.op_checkpoint_saved += F.attention_core;
  return L;
}

EdgeTimes edge_times(const ExecutionModel& x, const ModelSpec& m, const PlanSpec& p, int tokens) {
  if (x.host) return host_edge_times(*x.host, m, p, tokens);
  const RooflineCompute& rc = x.roofline();
  const ElementwiseTraffic& tr = *x.elementwise;
  const double scale = x.bytes.traffic_scale;
  const double t = p.tp, T = double(p.micro_batch) * tokens, h = m.hidden, V = m.vocab;
  auto stream = [&](double bytes_per_element, double elements, int launches) {
    return bytes_per_element > 0 ? rc.memory_bound(Bytes(scale * bytes_per_element * elements), launches) : Seconds(0);
  };
  EdgeTimes e;
  // Embedding: gather rows and add positions; backward scatter-adds into the embedding grads.
  e.embedding_forward = stream(tr.embedding_forward, T * h, tr.embedding_launches);
  e.embedding_backward = stream(tr.embedding_backward, T * h, tr.embedding_launches);
  // PyTorch's embedding backward (embedding_dense_backward) zero-fills a gradient the size of the
  // rank's table, its vocabulary shard (and learned positions), every micro-batch before scattering
  // the tokens' rows into it (write, in the parameter's dtype). Where the framework fuses gradient
  // accumulation into its GEMMs' epilogues, the embedding, no GEMM, is added into the fp32 main
  // gradient by the data-parallel hook (Megatron-Core distributed_data_parallel.py
  // main_grad.add_(grad): read both, write the main gradient).
  const double table = V / t * h + (m.position == PositionEmbedding::learned ? double(m.seq_len) * h : 0.0);
  e.embedding_backward += rc.memory_bound(Bytes(x.bytes.weight * table), 1);
  if (x.framework->precision.fp32_main_grads && x.framework->fuses_gradient_accumulation(p))
    e.embedding_backward += rc.memory_bound(Bytes((2.0 * x.bytes.grad + x.bytes.weight) * table), 1);
  // Final norm (one of the layer's two; under sequence parallelism on the rank's T / tp rows, before
  // the head's all-gather, as the layers' norms), the LM head over the local vocabulary shard (with
  // the tied weight's autocast cast), the loss over the logits.
  const double norm_rows = p.sequence_parallel ? T / t : T;
  const Seconds norm_fwd =
      norm_traffic(rc, tr, scale, tr.norms_forward / 2, norm_rows * h, std::max(1, tr.norms_launches_forward / 2));
  const Seconds norm_bwd =
      norm_traffic(rc, tr, scale, tr.norms_backward / 2, norm_rows * h, std::max(1, tr.norms_launches_backward / 2));
  const Seconds cast_fwd = stream(weight_cast_bytes(x, p, false), V * h / t, 1);
  const Seconds cast_bwd = stream(weight_cast_bytes(x, p, true), V * h / t, 1);
  // The LM head stays in 16 bits under an FP8 recipe (roofline16: the same model otherwise).
  const Seconds head = x.roofline16().gemm({T, V / t, h, 1});
  // A compiled loss (plan.compile_loss) reads the 16-bit logits once forward (the log-sum-exp per
  // row is all it writes) and once backward, writing their gradient: 2 and 4 bytes per element in
  // one kernel each way (stream() doubles them for fp32 training, as it does the traffic tables).
  // Megatron-Core's fused cross-entropy (plan.cross_entropy_fusion), per 16-bit logit:
  //  native (core_r0.8.0 fusions/fused_cross_entropy.py, each step a torch.compile'd function):
  //   forward, the .float() copy written while its row max is taken (read 2, write 4), the max
  //   subtracted and exp'd in place with the row sum in the same pass (4 + 4), the division into
  //   the saved softmax (4 + 4): 22 in 3 launches; backward, the target's -1 scattered in (a
  //   launch over the rows) and the softmax scaled in place by the loss gradient and cast to 16
  //   bits in one pass (4 + 4 + 2): 10 in 2 launches.
  //  te (Transformer Engine v2.1+ triton/cross_entropy.py): forward, online_softmax_kernel reads
  //   the logits once for the row max and sum, cross_entropy_kernel reads them again and writes
  //   the gradient over them in place (2 + 2 + 2): 6 in 2 launches; backward, element_mul_kernel
  //   scales that gradient in place (2 + 2): 4 in 1 launch.
  Seconds loss_fwd = stream(tr.loss_forward, T * V / t, tr.loss_launches_forward);
  Seconds loss_bwd = stream(tr.loss_backward, T * V / t, tr.loss_launches_backward);
  //  PyTorch's loss_parallel (FrameworkTraits::dtensor_loss_parallel, tp > 1; torch/distributed/
  //   tensor/parallel/loss.py _log_softmax and _nll_loss_and_log_softmax_backward, which follow
  //   torch._decomp's decompositions), on the .float() copy of the logits: forward the copy (read 2,
  //   write 4), the row max (4), x - max (4 + 4), exp (4 + 4), the row sum (4) and x - max - log of
  //   the sum, the saved output (4 + 4): 38 in 6 launches, where the fused log_softmax kernel of the
  //   unsharded path reads three times and writes once; backward zeros_like (4), exp of the saved
  //   output (4 + 4), its sum with the one-hot (4 + 4 + 4), the product with the loss gradient
  //   (4 + 4) and .float()'s cast back to 16 bits (4 + 2): 38 in 6 launches (with the one-hot's
  //   index_put). The row max, sum and target logit's all-reduces over TP (4 bytes a row) are
  //   latency-bound and left out, as Megatron's vocab-parallel cross-entropy's are.
  if (p.compile_loss) {
    loss_fwd = stream(2.0, T * V / t, 1);
    loss_bwd = stream(4.0, T * V / t, 1);
  } else if (x.framework->dtensor_loss_parallel && t > 1 && p.cross_entropy_fusion == CrossEntropyFusion::none) {
    loss_fwd = stream(38.0, T * V / t, 6);
    loss_bwd = stream(38.0, T * V / t, 6);
  } else if (p.cross_entropy_fusion == CrossEntropyFusion::native) {
    loss_fwd = stream(22.0, T * V / t, 3);
    loss_bwd = stream(10.0, T * V / t, 2);
  } else if (p.cross_entropy_fusion == CrossEntropyFusion::te) {
    loss_fwd = stream(6.0, T * V / t, 2);
    loss_bwd = stream(4.0, T * V / t, 1);
  }
  e.head_forward = norm_fwd + cast_fwd + head + loss_fwd;
  e.head_weight_grad = x.roofline16().gemm({h, V / t, T, 1});
  e.head_backward = norm_bwd + cast_bwd + x.roofline16().gemm({T, h, V / t, 1}) + e.head_weight_grad + loss_bwd;
  if (m.mtp_layers > 0) {
    // An MTP module (Megatron-Core MultiTokenPredictionLayer): the shifted tokens' embedding,
    // enorm and hnorm, torch.cat of the two into 2h (16-bit: read and write 2 bytes per element
    // of the 2h-wide result; backward the split), eh_proj (column-parallel 2h -> h, a Linear of
    // the recipe's precision), then its final norm, the shared head and its loss (head_*, which
    // hold one norm each).
    const Seconds concat = stream(4.0, 2.0 * T * h, 1);
    e.mtp_forward = e.embedding_forward + 2.0 * norm_fwd + concat + rc.gemm({T, h / t, 2.0 * h, 1}) + e.head_forward;
    e.mtp_backward = e.embedding_backward + 2.0 * norm_bwd + concat + rc.gemm({T, 2.0 * h, h / t, 1}) +
                     rc.gemm({2.0 * h, h / t, T, 1}) + e.head_backward;
  }
  return e;
}

Seconds optimizer_time(const ExecutionModel& x, double params) {
  return x.roofline().memory_bound(Bytes(x.bytes.optimizer_step * params), x.bytes.optimizer_launches);
}

}  // namespace foresight::cost_models
