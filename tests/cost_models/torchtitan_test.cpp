// torchtitan's execution (core/framework.cpp entry torchtitan): torch.compile's fused elementwise
// traffic against the eager kernels' by hand, per-op selective checkpointing (what it re-runs,
// what it stores, its FLOPs), the refusals of the features other frameworks lack, and the
// calibrated clock scale of one GPU. References are the byte and FLOP counts written out here
// from torchtitan's model code (the derivations in core/framework.cpp), not earlier outputs.
#include <gtest/gtest.h>

#include "core/flops.hpp"
#include "core/scenario.hpp"
#include "cost_models/calibrated.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/roofline.hpp"

using namespace foresight;
using namespace foresight::cost_models;

namespace {

// Llama 3.1 8B, seq 8192, micro-batch 2, FSDP2 over 8 Grand Teton H100s, per-op SAC, eager.
Experiment t1(bool compile = false) {
  Experiment e = load_experiment(resolve_scenario("experiments", "torchtitan-202412-t1-llama3.1-8b-8xh100-fsdp"));
  e.plan.compile = compile;
  return e;
}

// Llama 3 8B, seq 8192, micro-batch 1, FSDP2 over 64 A100 80GB, per-op SAC (torchtitan's April
// 2024 table), eager unless compiled.
Experiment a100_8b(bool compile = false) {
  Experiment e = load_experiment(resolve_scenario("experiments", "torchtitan-202404-a100-llama3-8b-64xa100-fsdp-selop"));
  e.plan.compile = compile;
  return e;
}

constexpr double T = 2.0 * 8192, H = 4096, Q = 4096, KV = 1024, F = 14336;

}  // namespace

TEST(Torchtitan, CompileSwapsTheEagerElementwiseBytesForTheFusedOnes) {
  const Experiment eager = t1(false), fused = t1(true);
  const ExecutionModel xe = resolve_execution(eager), xc = resolve_execution(fused);
  const RooflineCompute& rc = xe.roofline();
  const LayerTimes le = layer_times(xe, eager.model, eager.plan, 8192, 8192, false);
  const LayerTimes lc = layer_times(xc, fused.model, fused.plan, 8192, 8192, false);
  auto ms = [&](double bytes, int launches) { return rc.memory_bound(Bytes(bytes), launches).value(); };
  // Norms per (T, h) element: eager 72 bytes in 16 launches forward, 184 in 28 backward (pow's
  // backward is a copy, a scale and a multiply: core/framework.cpp); compiled
  // 12 in 2 and 24 in 4. (FSDP2's copies are priced with its gathers, sim/cost_data_parallel.cpp,
  // not in either table.)
  EXPECT_NEAR(le.forward_ops.layernorms.value() - lc.forward_ops.layernorms.value(),
              ms(72 * T * H, 16) - ms(12 * T * H, 2), 1e-12);
  EXPECT_NEAR(le.backward_ops.layernorms.value() - lc.backward_ops.layernorms.value(),
              ms(184 * T * H, 28) - ms(24 * T * H, 4), 1e-12);
  // SwiGLU per ffn element: eager 10 bytes forward, 18 backward; compiled 6 and 10.
  EXPECT_NEAR(le.forward_ops.gelu.value(), ms(10 * T * F, 1), 1e-12);
  EXPECT_NEAR(lc.forward_ops.gelu.value(), ms(6 * T * F, 1), 1e-12);
  EXPECT_NEAR(le.backward_ops.gelu.value(), ms(18 * T * F, 1), 1e-12);
  EXPECT_NEAR(lc.backward_ops.gelu.value(), ms(10 * T * F, 1), 1e-12);
  // RoPE on q and k (4096 + 1024 per token): 20 bytes per element eager, 4 compiled; repeat_kv
  // (read K and V, write them for 32 heads: 2 x 2 x (4096 + 1024)) and the output transpose (4 per
  // hidden element) in both; the residual adds 12 eager, 6 compiled.
  EXPECT_NEAR(le.forward_ops.dropout_residual.value(),
              ms(12 * T * H, 2) + ms(4 * T * H, 1) + ms(20 * T * (Q + KV), 6) + ms(4 * T * (Q + KV), 2), 1e-12);
  EXPECT_NEAR(lc.forward_ops.dropout_residual.value(),
              ms(6 * T * H, 1) + ms(4 * T * H, 1) + ms(4 * T * (Q + KV), 2) + ms(4 * T * (Q + KV), 2), 1e-12);
  // The GEMMs and the attention kernel do not change.
  EXPECT_EQ(le.forward_ops.fc1.value(), lc.forward_ops.fc1.value());
  EXPECT_EQ(le.forward_ops.attention_core.value(), lc.forward_ops.attention_core.value());
}

TEST(Torchtitan, PerOpCheckpointingRerunsTheUnsavedMatmulsAndEveryElementwiseOp) {
  const Experiment e = t1();
  ASSERT_EQ(e.plan.recompute, Recompute::selective_op);
  const ExecutionModel x = resolve_execution(e);
  const RooflineCompute& rc = x.roofline();
  const LayerTimes L = layer_times(x, e.model, e.plan, 8192, 8192, false);
  // Saved: wq and wv (5120 of the fused QKV GEMM's 6144 columns), w1 (half of the fused gate/up
  // GEMM), w2 (T x 4096 x 14336) and SDPA's output; re-run: wk, wo, w3 and every elementwise kernel.
  const double saved = L.forward_ops.qkv.value() * (Q + KV) / (Q + 2 * KV) + 0.5 * L.forward_ops.fc1.value() +
                       rc.gemm({T, H, F, 1}).value() + L.forward_ops.attention_core.value();
  EXPECT_NEAR(L.recompute_selective_op().value(), L.forward().value() - saved, 1e-12);
  EXPECT_GT(L.recompute_selective_op().value(), rc.gemm({T, KV, H, 1}).value() + L.forward_ops.projection.value());
  EXPECT_LT(L.recompute_selective_op().value(), L.recompute_full().value());

  // FLOPs re-run per token and layer: 2 x (h x kv for wk + h x h for wo + h x ffn for w3)
  // = 2 x (4,194,304 + 16,777,216 + 58,720,256) = 159,383,552.
  const double batch = 16, tokens = batch * 8192;
  const double extra = hardware_flops_per_iteration(e.model, batch, Recompute::selective_op).value() -
                       hardware_flops_per_iteration(e.model, batch, Recompute::none).value();
  EXPECT_NEAR(extra, 159383552.0 * tokens * 32, 1.0);

  // Stored per layer and micro-batch (2 x 8192 tokens, bf16): the block input (h), wq's output
  // (4096), wv's (1024), w1's (14336), w2's (4096), SDPA's output (4096), 2 bytes each, and the
  // fp32 log-sum-exp per head and token (32 x 4).
  const double per_token = 2.0 * (H + Q + KV + F + H + Q) + 4.0 * 32;
  EXPECT_NEAR(activation_bytes_per_layer(x, e.model, e.plan, 2, 8192, false).value(), per_token * T, 1.0);
  // With tp 8 and sequence parallelism: the input and the two saved reduce-scatter outputs are
  // 1/8 of the tokens, the column-parallel outputs 1/8 of their width, w2's partial sum whole.
  Experiment tp8 = e;
  tp8.plan.tp = 8;
  tp8.plan.dp = 1;
  tp8.plan.sequence_parallel = true;
  const ExecutionModel x8 = resolve_execution(tp8);
  const double per_token8 = 2.0 * H / 8 + 2.0 * (Q + KV + F + Q) / 8 + 2.0 * H + 2.0 * 2.0 * H / 8 + 4.0 * 32 / 8;
  EXPECT_NEAR(activation_bytes_per_layer(x8, tp8.model, tp8.plan, 2, 8192, false).value(), per_token8 * T, 1.0);
}

TEST(Torchtitan, FeaturesOtherFrameworksLackAreRefused) {
  Experiment e = t1(true);
  EXPECT_FALSE(check_plan(e.model, e.cluster, e.training, e.plan, e.gpus));
  e.plan.framework = Framework::megatron;
  e.plan.recompute = Recompute::full;
  auto v = check_plan(e.model, e.cluster, e.training, e.plan, e.gpus);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->field, "plan.compile");
  e.plan.compile = false;
  e.plan.recompute = Recompute::selective_op;
  v = check_plan(e.model, e.cluster, e.training, e.plan, e.gpus);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->field, "plan.recompute");
  EXPECT_EQ(v->value, "selective-op");
  // torchtitan runs FSDP2 only, and TP with sequence-parallel norms.
  {
    Experiment z = t1();
    z.plan.zero = 1;
    auto w = check_plan(z.model, z.cluster, z.training, z.plan, z.gpus);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->field, "plan.zero");
    z = t1();
    z.plan.tp = 2;
    z.plan.dp = 4;
    w = check_plan(z.model, z.cluster, z.training, z.plan, z.gpus);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->field, "plan.sequence_parallel");
  }
  // Korthikanti's selective recompute is not torchtitan's.
  e.plan.framework = Framework::torchtitan;
  e.plan.recompute = Recompute::selective;
  EXPECT_FALSE(framework_traits(Framework::torchtitan).runs(e.plan));
  // Per-op checkpointing of MoE blocks is not modelled.
  Experiment moe = load_experiment(resolve_scenario("experiments", "torchtitan-202412-t1-llama3.1-8b-8xh100-fsdp"));
  moe.model.moe = MoeSpec{};
  moe.model.moe->experts = 8;
  moe.model.moe->top_k = 2;
  v = check_plan(moe.model, moe.cluster, moe.training, moe.plan, moe.gpus);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->field, "plan.recompute");
}

TEST(Torchtitan, ClockScaleActsOnTheNamedGpuOnly) {
  CalibrationSet set;
  CalibratedParameter p;
  p.name = "clock";
  p.knob = CalibratedKnob::clock_scale;
  p.unit.assign(1, '1');
  p.lo = 0.5;
  p.hi = 1;
  p.value = 0.8;
  p.scope.gpus.emplace_back("h100-grand-teton");
  set.parameters = {p};
  const Experiment e = t1();
  const CalibratedTerms on = calibrated_terms(set, e.cluster, e.training, e.plan);
  EXPECT_DOUBLE_EQ(on.gemm_efficiency_scale, 0.8);
  EXPECT_DOUBLE_EQ(on.attention_efficiency_scale, 0.8);
  const ClusterSpec sxm = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  const CalibratedTerms off = calibrated_terms(set, sxm, e.training, e.plan);
  EXPECT_DOUBLE_EQ(off.gemm_efficiency_scale, 1.0);
  EXPECT_DOUBLE_EQ(off.attention_efficiency_scale, 1.0);
  // The file round trip keeps the scope.
  const std::string text = calibration_yaml(set);
  EXPECT_NE(text.find("gpus: [h100-grand-teton]"), std::string::npos);
}

TEST(Torchtitan, DynamicFp8ScalingCastsEveryOperandWhereItIsUsed) {
  // Llama 3.1 8B, micro-batch 2 x 8192 tokens, tp 1, under torch.compile with torchao's float8
  // linears. Per layer, elements (in units of tokens T = 16384): inputs of QKV (h), wo (q), w1/w3
  // (h) and w2 (ffn): 4096 + 4096 + 4096 + 14336 = 26624; output gradients of QKV (q + 2 kv),
  // wo (h), w1/w3 (2 ffn) and w2 (h): 6144 + 4096 + 28672 + 4096 = 43008. Weights on this GPU
  // (the layer less its two norms): 4096 x 6144 + 4096 x 4096 + 3 x 4096 x 14336 = 218,103,808.
  // Forward: inputs and weights cast once each, 3 bytes (amax fused by Inductor). Backward: output
  // gradients cast twice (6), inputs and weights again transposed (3 each).
  Experiment e = t1(true);
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  const ExecutionModel x = resolve_execution(e);
  const LayerTimes L = layer_times(x, e.model, e.plan, 8192, 8192, false);
  const double inputs = 26624 * T, grads = 43008 * T, weights = 218103808.0;
  const RooflineCompute& rc = x.roofline();
  EXPECT_NEAR(L.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(3 * inputs + 3 * weights), 8).value(), 1e-12);
  EXPECT_NEAR(L.backward_ops.fp8_casts.value(), rc.memory_bound(Bytes(6 * grads + 3 * inputs + 3 * weights), 16).value(),
              1e-12);
  // Eager PyTorch reads each forward operand and each output gradient once more for its amax.
  e.plan.compile = false;
  const ExecutionModel xe = resolve_execution(e);
  const LayerTimes Le = layer_times(xe, e.model, e.plan, 8192, 8192, false);
  EXPECT_NEAR(Le.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(5 * inputs + 5 * weights), 8).value(), 1e-12);
  EXPECT_NEAR(Le.backward_ops.fp8_casts.value(), rc.memory_bound(Bytes(8 * grads + 3 * inputs + 3 * weights), 16).value(),
              1e-12);
  // FSDP's float8 all-gather (plan.fp8_param_gather): the gathered weights are already FP8, so the
  // forward casts none of them and the backward only transposes each (read 1, write 1).
  e.plan.compile = true;
  e.plan.fp8_param_gather = true;
  const ExecutionModel xg = resolve_execution(e);
  const LayerTimes Lg = layer_times(xg, e.model, e.plan, 8192, 8192, false);
  EXPECT_NEAR(Lg.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(3 * inputs), 8).value(), 1e-12);
  EXPECT_NEAR(Lg.backward_ops.fp8_casts.value(), rc.memory_bound(Bytes(6 * grads + 3 * inputs + 2 * weights), 16).value(),
              1e-12);
  e.plan.fp8_param_gather = false;
  // Transformer Engine's delayed scaling: 3 bytes per input, 4 per gradient and 2 per input back.
  e.training.fp8_scaling = Fp8Scaling::delayed;
  const ExecutionModel xd = resolve_execution(e);
  const LayerTimes Ld = layer_times(xd, e.model, e.plan, 8192, 8192, false);
  EXPECT_NEAR(Ld.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(3 * inputs), 4).value(), 1e-12);
  EXPECT_NEAR(Ld.backward_ops.fp8_casts.value(), rc.memory_bound(Bytes(4 * grads + 2 * inputs), 8).value(), 1e-12);
  // A scaling recipe without fp8 is refused.
  e.training.dtype = Dtype::bf16;
  e.training.fp8_scaling = Fp8Scaling::rowwise;
  const auto v = check_plan(e.model, e.cluster, e.training, e.plan, e.gpus);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->field, "training.fp8_scaling");
}

TEST(Torchtitan, Float8TensorParallelCastsTheGatheredInputsOnTheirShard) {
  // torchtitan's float8 TP plan (tensorwise, sequence parallelism): PrepareFloat8ModuleInput casts
  // the attention's and the FFN's input on the local 1/tp of the tokens and all-gathers it in FP8;
  // wq/wk/wv and w1/w3 take the gathered FP8 tensor, and their backward transposes it (read 1,
  // write 1) instead of casting the bf16 input again. tp 2, micro-batch 2 x 8192 (T = 16384):
  // inputs per layer T (h + q/2 + h + f/2) = 17408 T, of which 2 h T = 8192 T gathered; output
  // gradients T ((q + 2 kv)/2 + h + f + h) = 25600 T; weights half the layer's 218,103,808.
  // Forward 3 (9216 + 8192/2) T + 3 W; backward 6 x 25600 T + 3 x 9216 T + 2 x 8192 T + 3 W.
  Experiment e = t1(true);
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  e.plan.tp = 2;
  e.plan.dp = 4;
  e.plan.sequence_parallel = true;
  validate_experiment(e);
  const ExecutionModel x = resolve_execution(e);
  const RooflineCompute& rc = x.roofline();
  const LayerTimes L = layer_times(x, e.model, e.plan, 8192, 8192, false);
  const double W = 218103808.0 / 2;
  EXPECT_NEAR(L.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(3 * (9216 + 4096) * T + 3 * W), 8).value(), 1e-12);
  EXPECT_NEAR(L.backward_ops.fp8_casts.value(),
              rc.memory_bound(Bytes(6 * 25600 * T + 3 * 9216 * T + 2 * 8192 * T + 3 * W), 16).value(), 1e-12);
  // Rowwise recipes gather in bf16 (torchtitan's float8 TP plan is tensorwise only): every input
  // is cast where it is used.
  e.training.fp8_scaling = Fp8Scaling::rowwise;
  const ExecutionModel xr = resolve_execution(e);
  const Fp8CastTimes full = torchao_fp8_casts(xr.roofline(), Fp8Scaling::rowwise, true, false,
                                              {.inputs = 17408 * T, .grads = 25600 * T, .weights = W});
  const LayerTimes Lr = layer_times(xr, e.model, e.plan, 8192, 8192, false);
  EXPECT_NEAR(Lr.forward_ops.fp8_casts.value(), full.forward.value(), 1e-12);
  EXPECT_NEAR(Lr.backward_ops.fp8_casts.value(), full.backward.value(), 1e-12);
}

// On an A100, whose GPU file measures PyTorch's eager RMSNorm chain (eager_norm_efficiency 0.70
// of 2039 GB/s, from Liger-Kernel's published LlamaRMSNorm timings), the eager norms move their 72 /
// 184 bytes an element at that rate, launches as before, in the layers and in the final norm;
// compiled, Inductor's fused norm kernels stream at the copy rate (memory_efficiency 0.88); on the
// H100, which has no such figure, the eager norms stream at the copy rate too (2400 GB/s x 0.88
// from the Grand Teton part's GPU file, which has no calibration profile). fms-fsdp's eager entry
// inherits torchtitan's norms.
TEST(Torchtitan, EagerNormsRunAtTheGpusMeasuredNormRate) {
  const Experiment eager = a100_8b(false), fused = a100_8b(true);
  const ExecutionModel xe = resolve_execution(eager), xc = resolve_execution(fused);
  const double tokens = 8192, launch = 2.555e-6, eager_rate = 2039e9 * 0.70, stream_rate = 2039e9 * 0.88;
  const LayerTimes le = layer_times(xe, eager.model, eager.plan, 8192, 8192, false);
  const LayerTimes lc = layer_times(xc, fused.model, fused.plan, 8192, 8192, false);
  EXPECT_NEAR(le.forward_ops.layernorms.value(), 72 * tokens * H / eager_rate + 16 * launch, 1e-9);
  EXPECT_NEAR(le.backward_ops.layernorms.value(), 184 * tokens * H / eager_rate + 28 * launch, 1e-9);
  EXPECT_NEAR(lc.forward_ops.layernorms.value(), 12 * tokens * H / stream_rate + 2 * launch, 1e-9);
  // The final norm (one of the two): the head's forward differs between eager and compiled by the
  // norm alone (the LM head GEMM and the loss are the same in both tables).
  const EdgeTimes ee = edge_times(xe, eager.model, eager.plan, 8192), ec = edge_times(xc, fused.model, fused.plan, 8192);
  EXPECT_NEAR(ee.head_forward.value() - ec.head_forward.value(),
              (36 * tokens * H / eager_rate + 8 * launch) - (6 * tokens * H / stream_rate + 1 * launch), 1e-9);
  // fms-fsdp on the A100 (batch 2 x 4096): the same norms at the same rate.
  const Experiment fms = load_experiment(resolve_scenario("experiments", "fms-fsdp-llama2-7b-128xa100-hsdp"));
  const ExecutionModel xf = resolve_execution(fms);
  const LayerTimes lf = layer_times(xf, fms.model, fms.plan, 4096, 4096, false);
  EXPECT_NEAR(lf.forward_ops.layernorms.value(), 72 * 2 * 4096 * H / eager_rate + 16 * launch, 1e-9);
  // The H100 (t1 above): the eager norms at the streaming rate.
  const Experiment h100 = t1(false);
  const ExecutionModel xh = resolve_execution(h100);
  const LayerTimes lh = layer_times(xh, h100.model, h100.plan, 8192, 8192, false);
  EXPECT_NEAR(lh.forward_ops.layernorms.value(), 72 * T * H / (2400e9 * 0.88) + 16 * 2.433e-6, 1e-9);
}

// PyTorch's eager elementwise kernels vectorize their loads only when every operand is
// contiguous; a broadcast or strided operand sends them down the non-vectorized path, at the
// GPU file's eager_strided_efficiency (A100 0.43 of 2039 GB/s, from transformers' rotary
// embedding in Liger-Kernel's published timings; H100 SXM 0.54 of 3350 GB/s, from the Llama 4
// complex RoPE). By hand, per (tokens, hidden) element or per element of q and k:
//  torchtitan eager (Llama 3 8B on A100s, 8192 tokens, q 4096 + k 1024): RoPE 20 bytes of which
//  the complex multiply's 8 strided (its casts, 12, at the stream rate, with the 6 launches);
//  repeat_kv's 2 x 2 per element of q and k, all strided (2 launches); the output transpose copy
//  (4, 1 launch) strided; the residual adds (12, 2 launches) streaming.
//  torch.compile: every byte at the stream rate (Inductor's kernels).
//  fms-fsdp eager (Llama 2 7B, 2 x 4096 tokens, q + k 8192, no GQA): RoPE 36 bytes of which the
//  broadcast product and the pair sum, 24, strided; on the H100 SXM at its own figure.
TEST(Torchtitan, EagerStridedPassesRunAtTheGpusMeasuredStridedRate) {
  const Experiment eager = a100_8b(false), fused = a100_8b(true);
  const ExecutionModel xe = resolve_execution(eager), xc = resolve_execution(fused);
  const double tokens = 8192, launch = 2.555e-6, strided = 2039e9 * 0.43, stream = 2039e9 * 0.88;
  auto s = [&](double bytes, int launches) { return bytes / stream + launches * launch; };
  auto g = [&](double bytes, int launches) { return bytes / strided + launches * launch; };
  const LayerTimes le = layer_times(xe, eager.model, eager.plan, 8192, 8192, false);
  const LayerTimes lc = layer_times(xc, fused.model, fused.plan, 8192, 8192, false);
  const double qk = tokens * (Q + KV);
  EXPECT_NEAR(le.forward_ops.dropout_residual.value(),
              s(12 * tokens * H, 2) + g(4 * tokens * H, 1) + s(12 * qk, 6) + g(8 * qk, 0) + g(2 * 2 * qk, 2), 1e-9);
  EXPECT_NEAR(le.backward_ops.dropout_residual.value(),
              s(12 * tokens * H, 2) + g(4 * tokens * H, 1) + s(12 * qk, 6) + g(8 * qk, 0) + g(2 * 2 * qk, 2), 1e-9);
  EXPECT_NEAR(lc.forward_ops.dropout_residual.value(),
              s(6 * tokens * H, 1) + s(4 * tokens * H, 1) + s(4 * qk, 2) + s(2 * 2 * qk, 2), 1e-9);
  // fms-fsdp on the A100 and on the H100 SXM: the RoPE's 24 strided bytes of 36, the layout copy.
  const Experiment fa = load_experiment(resolve_scenario("experiments", "fms-fsdp-llama2-7b-128xa100-hsdp"));
  const ExecutionModel xa = resolve_execution(fa);
  const LayerTimes la = layer_times(xa, fa.model, fa.plan, 4096, 4096, false);
  const double t7 = 2 * 4096, qk7 = t7 * (4096 + 4096);
  EXPECT_NEAR(la.forward_ops.dropout_residual.value(),
              s(12 * t7 * H, 2) + g(4 * t7 * H, 1) + s(12 * qk7, 8) + g(24 * qk7, 0), 1e-9);
  const Experiment fh = load_experiment(resolve_scenario("experiments", "fms-fsdp-llama2-7b-96xh100-hsdp"));
  const ExecutionModel xh = resolve_execution(fh);
  const LayerTimes lh = layer_times(xh, fh.model, fh.plan, 4096, 4096, false);
  // The H100 SXM's calibration profile replaces the streaming rate and the launch cost with its
  // own copy and launch measurements (inputs here); the strided rate is the GPU file's.
  const RooflineParams& hp = xh.roofline().params();
  const double hl = hp.launch_overhead.value(), hs = 3350e9 * hp.memory_efficiency, hg = 3350e9 * 0.54;
  EXPECT_NEAR(lh.backward_ops.dropout_residual.value(),
              (12 * t7 * H / hs + 2 * hl) + (4 * t7 * H / hg + hl) + (12 * qk7 / hs + 8 * hl) + 24 * qk7 / hg, 1e-9);
}

// PyTorch's loss_parallel (torchtitan with TP, the loss eager at 9dec370): the decomposed log-softmax
// and its backward move 38 bytes per fp32 local logit each way in 6 launches, where the unsharded
// eager path moves 22 in 2 forward and 26 in 3 backward (ElementwiseTraffic). Table 4's 2D row
// (Llama 3.1 70B, TP 8, micro-batch 16 x 8192 tokens, vocabulary 128,256) on the Grand Teton H100
// (2400 GB/s x 0.88 streaming, 2.433 us a launch, as above): the head differs by the loss alone.
TEST(Torchtitan, LossParallelDecomposesTheCrossEntropyIntoSeparatePasses) {
  const Experiment e = load_experiment(resolve_scenario("experiments", "torchtitan-202412-t4-llama3.1-70b-256xh100-2d"));
  ExecutionModel x = resolve_execution(e);
  const EdgeTimes sharded = edge_times(x, e.model, e.plan, 8192);
  FrameworkTraits unsharded = *x.framework;
  unsharded.dtensor_loss_parallel = false;
  x.framework = &unsharded;
  const EdgeTimes plain = edge_times(x, e.model, e.plan, 8192);
  const double N = 16.0 * 8192 * 128256 / 8, rate = 2400e9 * 0.88, launch = 2.433e-6;
  EXPECT_NEAR(sharded.head_forward.value() - plain.head_forward.value(),
              (38 * N / rate + 6 * launch) - (22 * N / rate + 2 * launch), 1e-9);
  EXPECT_NEAR(sharded.head_backward.value() - plain.head_backward.value(),
              (38 * N / rate + 6 * launch) - (26 * N / rate + 3 * launch), 1e-9);
}

