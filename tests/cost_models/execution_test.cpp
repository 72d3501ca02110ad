// The execution model resolved once per experiment: which attention kernel, element sizes and
// calibration entries an execution gets, against the frameworks' documented behaviour and hand
// counts; and that compute and memory price the same attention.
#include "cost_models/execution.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/profile.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::cost_models {
namespace {

ClusterSpec cluster(const char* name) { return load_cluster(resolve_scenario("clusters", name)); }

PlanSpec plan_for(Framework f) {
  PlanSpec p;
  p.framework = f;
  return p;
}

const TrainingSpec kBf16{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};

TEST(ExecutionModel, AttentionAsEachFrameworkRunsIt) {
  // Megatron-LM 2021-22 and DeepSpeed v0.5: unfused; PyTorch SDPA: flash; Megatron-Core with
  // Transformer Engine: flash on an A100, cuDNN's fused attention on an H100 (TE disables
  // FlashAttention on sm90, notes/research-megatron-core.md).
  EXPECT_EQ(resolve_execution(cluster("selene"), kBf16, plan_for(Framework::megatron)).attention, AttentionImpl::unfused);
  EXPECT_EQ(resolve_execution(cluster("selene"), kBf16, plan_for(Framework::deepspeed)).attention, AttentionImpl::unfused);
  EXPECT_EQ(resolve_execution(cluster("local-h100"), kBf16, plan_for(Framework::pytorch)).attention, AttentionImpl::flash);
  EXPECT_EQ(resolve_execution(cluster("selene"), kBf16, plan_for(Framework::megatron_core)).attention, AttentionImpl::flash);
  EXPECT_EQ(resolve_execution(cluster("dgx-h100-superpod"), kBf16, plan_for(Framework::megatron_core)).attention,
            AttentionImpl::cudnn);
  // A plan may name its own kernel (Megatron-LM with --use-flash-attn).
  PlanSpec p = plan_for(Framework::megatron);
  p.attention = AttentionImpl::flash;
  EXPECT_EQ(resolve_execution(cluster("selene"), kBf16, p).attention, AttentionImpl::flash);
}

TEST(ExecutionModel, ElementSizesFollowTheDtype) {
  // fp32 training: every element 4 bytes; bf16: activations 2, Megatron's fp32 main grads 4;
  // autocast keeps fp32 parameters, fp32 gradients and a 2-byte copy per step.
  const ExecutionModel fp32 = execution_model(TrainingSpec{.global_batch = 8, .dtype = Dtype::fp32}, plan_for(Framework::megatron));
  EXPECT_EQ(fp32.bytes.activation, 4.0);
  EXPECT_EQ(fp32.bytes.weight, 4.0);
  EXPECT_EQ(fp32.bytes.master, 0.0);
  const ExecutionModel bf16 = execution_model(kBf16, plan_for(Framework::megatron));
  EXPECT_EQ(bf16.bytes.activation, 2.0);
  EXPECT_EQ(bf16.bytes.grad, 4.0);
  const ExecutionModel amp = execution_model(kBf16, plan_for(Framework::pytorch));
  EXPECT_EQ(amp.bytes.weight, 4.0);
  EXPECT_EQ(amp.bytes.weight_copy, 2.0);
  EXPECT_EQ(amp.bytes.grad, 4.0);
  EXPECT_EQ(amp.bytes.master, 0.0);
  EXPECT_EQ(amp.bytes.residual, 4.0);
  // Fused Adam: 30 bytes per parameter with a separate 16-bit model copy, 28 on fp32 parameters
  // (read grad, param, m, v; write param, m, v).
  EXPECT_EQ(bf16.bytes.optimizer_step, 30.0);
  EXPECT_EQ(amp.bytes.optimizer_step, 28.0);
}

TEST(ExecutionModel, Fp8DoesNotInheritTheBf16Gemms) {
  // The shipped H100 profile measured bf16 cuBLASLt GEMMs: a bf16 execution uses them, an fp8
  // one does not (its GEMMs come from the GPU file's ceiling at the fp8 peak).
  const ExecutionModel bf16 = resolve_execution(cluster("local-h100"), kBf16, plan_for(Framework::pytorch));
  EXPECT_GT(bf16.profile.gemm_samples, 300);
  const ExecutionModel fp8 =
      resolve_execution(cluster("local-h100"), TrainingSpec{.global_batch = 8, .dtype = Dtype::fp8}, plan_for(Framework::pytorch));
  EXPECT_EQ(fp8.profile.gemm_samples, 0);
  EXPECT_FALSE(fp8.roofline().has_gemm_profile());
  // The profile's attention entries are this project's own CUDA-core kernel: a FlashAttention run
  // does not inherit their speed (0.7% of peak) but keeps the GPU file's 0.33 (at the sustained
  // clock of a long run: this TrainingSpec does not declare burst clocks).
  EXPECT_FALSE(bf16.profile.attention);
  EXPECT_NEAR(bf16.roofline().params().flash_efficiency, 0.33 * bf16.slowest.sustained / bf16.slowest.factor, 1e-12);
  EXPECT_LT(bf16.slowest.sustained, 1.0);
}

TEST(ExecutionModel, AProfileIsReadOnce) {
  const auto a = bundled_profile("h100-sxm");
  const auto b = bundled_profile("h100-sxm");
  ASSERT_TRUE(a);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_FALSE(bundled_profile("a100-sxm4-80gb"));  // none shipped
}

TEST(ExecutionModel, AFusedKernelWithoutAFigureIsRefused) {
  // V100 has no FlashAttention (Volta is not supported); its GPU file gives no figure, and no
  // profile measured one: a plan asking for it is refused naming the missing field.
  PlanSpec p = plan_for(Framework::pytorch);
  try {
    resolve_execution(cluster("aws-p3-16xlarge"), TrainingSpec{.global_batch = 8, .dtype = Dtype::fp16}, p);
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "gpu.kernels.flash_attention_efficiency") << e.what();
  }
}

TEST(ExecutionModel, ComputeAndMemoryPriceTheSameAttention) {
  // The 1.3B example on one H100 under the generic framework (fused attention): compute prices
  // FlashAttention, and memory stores no s x s scores. By hand, per layer (b 8, s 2048, h 2048,
  // 16 heads, t 1): 34 sbh (Korthikanti's linear terms) + 4 bytes of softmax statistics per head
  // and query = 34 x 33,554,432 + 4 x 16 x 16,384 = 1,141,899,264 bytes; the unfused path would add
  // 5as/h sbh = 80 sbh.
  const Experiment e = load_experiment(resolve_scenario("experiments", "gpt3-1.3b-local-h100"));
  PlanSpec p = e.plan;
  p.framework = Framework::generic;
  const ExecutionModel x = resolve_execution(e.cluster, e.training, p);
  EXPECT_EQ(x.attention, AttentionImpl::flash);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x, e.model, p, 8, 2048).value(), 1141899264.0);
  const LayerTimes t = layer_times(x, e.model, p, 2048, 2048, false);
  // Flash time: 4 b a s^2 d / 2 causal FLOPs at 0.33 x 989.4 TFLOP/s, plus one launch (the
  // profile's 4.70 us), at head dim 128 and sequence 2048 (shape factor 1).
  const double flops = 4.0 * 8 * 16 * (2048.0 * 2048 - 2048.0 * 2047 / 2) * 128;
  EXPECT_NEAR(t.forward_ops.attention_core.value(),
              flops / (0.33 * 989.4e12) + x.roofline().params().launch_overhead.value(), 1e-9);
}

TEST(FusedAttentionShapeFactor, FollowsFlashAttention2sH100Sweep) {
  // Relative to head dim 128 at 2k (265 TFLOP/s): 1k at d 128 is 221/265, 8k is 308/265, 2k at
  // d 64 is 232/265; between the bars, linear in log2(seq) and in the head dim.
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(128, 2048), 1.0);
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(128, 1024), 221.0 / 265.0);
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(128, 8192), 308.0 / 265.0);
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(64, 2048), 232.0 / 265.0);
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(96, 2048), (232.0 + 265.0) / 2 / 265.0);
  EXPECT_NEAR(fused_attention_shape_factor(128, 1448.15), (221.0 + 265.0) / 2 / 265.0, 1e-4);
  EXPECT_DOUBLE_EQ(fused_attention_shape_factor(256, 65536), 328.0 / 265.0);  // clamped
}

TEST(CudnnMlaAttentionFactor, FollowsCudnnsH200BenchmarkOfBothShapes) {
  // cuDNN 9.19.1 on an H200 (NVIDIA/cudnn-frontend @3929da2, results/h200_919_only_cudnn):
  // forward + backward ms of MLA (128 heads, qk 192, v 128) and of Llama 3.1 (64 heads of 128),
  // per head; priced alike an MLA head would take 160 / 128 of a d128 head's time.
  auto factor = [](double mla_fwd, double mla_bwd, double d128_fwd, double d128_bwd) {
    return 1.25 * (d128_fwd + d128_bwd) / 64 / ((mla_fwd + mla_bwd) / 128);
  };
  EXPECT_NEAR(cudnn_mla_attention_factor(9.0, 2048), factor(0.330, 1.271, 0.142, 0.464), 5e-4);
  EXPECT_NEAR(cudnn_mla_attention_factor(9.0, 4096), factor(1.148, 4.424, 0.465, 1.450), 5e-4);
  EXPECT_NEAR(cudnn_mla_attention_factor(9.0, 8192), factor(4.278, 16.162, 1.708, 5.083), 5e-4);
  // Between the points linear in log2(context), clamped outside; no measurement off Hopper.
  EXPECT_NEAR(cudnn_mla_attention_factor(9.0, 2048 * std::sqrt(2.0)), (0.946 + 0.859) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(cudnn_mla_attention_factor(9.0, 512), 0.946);
  EXPECT_DOUBLE_EQ(cudnn_mla_attention_factor(9.0, 65536), 0.831);
  EXPECT_DOUBLE_EQ(cudnn_mla_attention_factor(8.0, 4096), 1.0);
  EXPECT_DOUBLE_EQ(cudnn_mla_attention_factor(10.0, 4096), 1.0);
}

TEST(CudnnMlaAttentionFactor, SlowsCudnnsMlaAttentionOnlyOnHopper) {
  // DeepSeek-V3's layer on H100s under Megatron-Core (cuDNN attention): its attention core, forward
  // and backward, takes 1 / 0.859 of the pricing at width 160 at its 4k context (launch aside).
  const Experiment e = load_experiment(resolve_scenario("experiments", "mbridge2509-deepseek-v3-1024xh100-fp8"));
  const ExecutionModel x = resolve_execution(e);
  ASSERT_EQ(x.attention, AttentionImpl::cudnn);
  const RooflineCompute& rc = x.roofline();
  const double launch = rc.params().launch_overhead.value();
  const int tokens = e.model.seq_len;
  const LayerTimes t = layer_times(x, e.model, e.plan, tokens, tokens, true);
  const double heads = double(e.model.heads) / e.plan.tp;
  const double plain = rc.flash_forward(e.plan.micro_batch * heads, tokens, tokens, 160.0, true, 0).value() - launch;
  EXPECT_NEAR(t.forward_ops.attention_core.value(), plain / 0.859 + launch, 1e-12);
  EXPECT_NEAR(t.backward_ops.attention_core.value(), 2.5 * plain / 0.859 + launch, 1e-12);
  // A model without MLA keeps the d128 pricing.
  Experiment llama = load_experiment(resolve_scenario("experiments", "mbridge2604-llama3-70b-64xh100-fp8"));
  const ExecutionModel lx = resolve_execution(llama);
  const int lt = llama.model.seq_len;
  const LayerTimes l = layer_times(lx, llama.model, llama.plan, lt, lt, false);
  EXPECT_NEAR(l.forward_ops.attention_core.value(),
              lx.roofline().flash_forward(double(llama.model.heads) / llama.plan.tp, lt, lt, 128.0, true, 0).value(), 1e-12);
}

TEST(ExecutionModel, LambMovesTwentyMoreBytesPerParameterThanAdam) {
  // apex's LAMB: Adam's pass (read grad 4, fp32 weight 4, m 4, v 4; write weight 4, m 4, v 4, the
  // 16-bit copy 2 = 30) plus writing the update (4), the two norm passes over weights and update
  // (4 + 4) and the second stage's reads of both (4 + 4): 50 bytes, same state as Adam.
  const TrainingSpec lamb{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::lamb};
  const ExecutionModel x = execution_model(lamb, plan_for(Framework::megatron));
  EXPECT_EQ(x.bytes.optimizer_step, 50.0);
  EXPECT_EQ(x.bytes.moments, 8.0);
  EXPECT_EQ(x.bytes.optimizer_launches, 4);
  const ExecutionModel adam = execution_model(kBf16, plan_for(Framework::megatron));
  EXPECT_EQ(adam.bytes.optimizer_launches, 1);
}

}  // namespace
}  // namespace foresight::cost_models

namespace foresight::cost_models {

TEST(ExecutionModel, GradientAccumulationFusionDropsTheAccumulationPass) {
  // Megatron-LM's gradient accumulation fusion (NVIDIA/Megatron-LM 83b1e42, 2022-02-13): the
  // weight-gradient GEMM adds into the fp32 main_grad itself, so the per-micro-batch
  // main_grad.add_(grad) pass (read 4 + read 2 + write 4 bytes a parameter) is gone. Megatron-Core
  // (2024) runs it by default; the 2021 Megatron-LM entry (SC21) did not have it; a plan says
  // otherwise either way.
  const TrainingSpec bf16{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  PlanSpec p;
  p.framework = Framework::megatron;
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 10.0);
  p.gradient_accumulation_fusion = true;
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 0.0);
  p.framework = Framework::megatron_core;
  p.gradient_accumulation_fusion.reset();
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 0.0);
  p.gradient_accumulation_fusion = false;  // --no-gradient-accumulation-fusion
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 10.0);
  // Without fp32 main gradients there is nothing for the GEMM to add into: eager PyTorch keeps its
  // AccumulateGrad pass, and asking for the fusion there is refused by name.
  p.framework = Framework::pytorch;
  p.gradient_accumulation_fusion.reset();
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 12.0);
  p.gradient_accumulation_fusion = true;
  EXPECT_EQ(cost_models::execution_model(bf16, p).bytes.accumulate, 12.0);
  ModelSpec m{.name = "m", .layers = 4, .hidden = 1024, .heads = 16, .seq_len = 1024, .vocab = 32000,
              .ffn_hidden = 4096, .kv_heads = 16, .moe = std::nullopt};
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 8;
  c.gpu.peak_bf16 = FlopsPerSecond(312e12);
  p.dp = 8;
  const auto v = check_plan(m, c, bf16, p, 8);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.gradient_accumulation_fusion");
}

// Eager PyTorch under autocast (../shared/bench's GPT block on the H100 SXM): the attention
// output's transpose(1, 2).reshape copy and its backward read a transposed view, 4 bytes per
// hidden element each way at the GPU file's eager_strided_efficiency (0.54 of 3350 GB/s); the
// residual adds (20 forward, 36 backward) and the rest of the layout entry (the cat of dq, dk, dv:
// 12 of the backward's 16) stream. torch.compile keeps the layout copies (extern kernels around
// SDPA) but Inductor's kernels stream them and fold the residual adds into the norms. The
// stream rate and the launch cost are the H100 profile's measurements (inputs here).
TEST(ExecutionModel, EagerPyTorchsTransposeCopiesRunAtTheStridedRate) {
  Experiment eager = load_experiment(resolve_scenario("experiments", "gpt3-1.3b-local-h100"));
  eager.plan.compile = false;
  Experiment fused = eager;
  fused.plan.compile = true;
  const ExecutionModel xe = resolve_execution(eager), xc = resolve_execution(fused);
  const RooflineParams& rp = xe.roofline().params();
  const double stream = 3350e9 * rp.memory_efficiency, strided = 3350e9 * 0.54, launch = rp.launch_overhead.value();
  const int seq = eager.model.seq_len;
  const double n = double(eager.plan.micro_batch) * seq * eager.model.hidden;  // tp 1, no sequence parallelism
  const LayerTimes le = layer_times(xe, eager.model, eager.plan, seq, seq, false);
  const LayerTimes lc = layer_times(xc, fused.model, fused.plan, seq, seq, false);
  EXPECT_NEAR(le.forward_ops.dropout_residual.value(),
              (20 * n / stream + 2 * launch) + (4 * n / strided + launch), 1e-9);
  EXPECT_NEAR(le.backward_ops.dropout_residual.value(),
              (36 * n / stream + 4 * launch) + (12 * n / stream + 2 * launch) + 4 * n / strided, 1e-9);
  EXPECT_NEAR(lc.forward_ops.dropout_residual.value(), 4 * n / stream + launch, 1e-9);
  EXPECT_NEAR(lc.backward_ops.dropout_residual.value(), 16 * n / stream + 2 * launch, 1e-9);
}

}  // namespace foresight::cost_models
