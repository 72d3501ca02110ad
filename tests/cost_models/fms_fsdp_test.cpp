// fms-fsdp's execution (core/framework.cpp entry fms-fsdp): the ibm-fms LLaMA's RoPE and loss
// priced as its code runs them, gradients reduced in bf16 unless the plan says otherwise, and the
// parallelism its trainer has. References are byte counts written out here from the ibm-fms code
// (fms/modules/positions.py adjusted_qk; fms-fsdp train_utils.py's nn.CrossEntropyLoss on bf16
// logits), set against torchtitan's entry on the same layer, not earlier outputs.
#include <gtest/gtest.h>

#include <string>

#include "core/plan.hpp"
#include "core/scenario.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/roofline.hpp"

using namespace foresight;
using namespace foresight::cost_models;

namespace {

// Llama 2 34B (8192 hidden, 64 query heads and 8 KV heads of 128), micro-batch 2 x 4096 tokens,
// FSDP over 128 A100 80GB, every block recomputed, eager.
Experiment row34(Framework fw = Framework::fms_fsdp) {
  Experiment e = load_experiment(resolve_scenario("experiments", "fms-fsdp-llama2-34b-128xa100-fsdp-fullac"));
  e.plan.framework = fw;
  return e;
}

constexpr double T = 2.0 * 4096, H = 8192, Q = 8192, KV = 1024, V = 32000;

}  // namespace

TEST(FmsFsdp, RotationMatrixRopeMovesThirtySixBytesAnElementEachWay) {
  // adjusted_qk per element of q and k: q.float() (2 + 4), the broadcast mul into (.., D/2, 2, 2)
  // fp32 (4 + 8), sum over the pair (8 + 4), type_as (4 + 2) = 36 in 4 launches per tensor; its
  // backward the same. torchtitan's complex multiply: 20 in 6 launches for both. The casts (12 in
  // either) stream at 0.88 of the A100's 2039 GB/s; the passes with a broadcast operand (fms's
  // product and pair sum, 24; torchtitan's multiply, 8) run at the A100's eager strided rate, 0.43
  // of it. Everything else in the stream entry (residual adds, the GQA expansion, the output
  // transpose) is the same.
  const Experiment fms = row34(), tt = row34(Framework::torchtitan);
  const ExecutionModel xf = resolve_execution(fms), xt = resolve_execution(tt);
  const LayerTimes lf = layer_times(xf, fms.model, fms.plan, 4096, 4096, false);
  const LayerTimes lt = layer_times(xt, tt.model, tt.plan, 4096, 4096, false);
  const double launch = 2.555e-6, stream = 2039e9 * 0.88, strided = 2039e9 * 0.43;
  const double qk = T * (Q + KV);
  const double more = (12 * qk / stream + 8 * launch + 24 * qk / strided) - (12 * qk / stream + 6 * launch + 8 * qk / strided);
  EXPECT_NEAR(lf.forward_ops.dropout_residual.value() - lt.forward_ops.dropout_residual.value(), more, 1e-9);
  EXPECT_NEAR(lf.backward_ops.dropout_residual.value() - lt.backward_ops.dropout_residual.value(), more, 1e-9);
  // About 1.38 ms more each way per layer (16 strided bytes x 8192 tokens x 9216 at 877 GB/s).
  EXPECT_NEAR(more, 1.38e-3, 0.02e-3);
}

TEST(FmsFsdp, CrossEntropyOnBf16LogitsAndTheLogitsKeptThroughTheBackward) {
  // nn.CrossEntropyLoss on the bf16 (tokens, vocab) logits: log_softmax reads each 64 KB row three
  // times and writes it once (8 in 2 launches), backward nll_loss's dense gradient (2) and the
  // log-softmax backward's sum pass over the gradient (2) and output pass (2 + 2 + 2): 10 in 3;
  // torchtitan's .float() path moves 22 in 2 and 26 in 3.
  const Experiment fms = row34(), tt = row34(Framework::torchtitan);
  const ExecutionModel xf = resolve_execution(fms), xt = resolve_execution(tt);
  const EdgeTimes ef = edge_times(xf, fms.model, fms.plan, 4096), et = edge_times(xt, tt.model, tt.plan, 4096);
  auto ms = [&](double bytes, int launches) { return xf.roofline().memory_bound(Bytes(bytes), launches).value(); };
  const double N = T * V;
  EXPECT_NEAR(et.head_forward.value() - ef.head_forward.value(), ms(22 * N, 2) - ms(8 * N, 2), 1e-12);
  EXPECT_NEAR(et.head_backward.value() - ef.head_backward.value(), ms(26 * N, 3) - ms(10 * N, 3), 1e-12);
  // At the loss's peak: the loop's bf16 logits, nll_loss's bf16 gradient, the saved log-softmax and
  // the input gradient (8 bytes a logit) against torchtitan's fp32 three (12).
  const double f = output_layer_activation_bytes(xf, fms.model, fms.plan, 2, 4096).value();
  const double t = output_layer_activation_bytes(xt, tt.model, tt.plan, 2, 4096).value();
  EXPECT_NEAR(t - f, 4.0 * N, 1.0);
}

TEST(FmsFsdp, GradientsAreReducedInBf16UnlessThePlanSaysOtherwise) {
  // bfSixteen: reduce_dtype bf16 (2 bytes an element) over fp32 shards; torchtitan reduces in
  // fp32 (4); plan.reduce_dtype still overrides.
  Experiment fms = row34();
  EXPECT_EQ(resolve_execution(fms).bytes.reduce, 2.0);
  EXPECT_EQ(resolve_execution(fms).bytes.weight, 4.0);
  EXPECT_EQ(resolve_execution(row34(Framework::torchtitan)).bytes.reduce, 4.0);
  fms.plan.reduce_dtype = Dtype::fp32;
  EXPECT_EQ(resolve_execution(fms).bytes.reduce, 4.0);
  // fp32 training reduces fp32 whatever the recipe says.
  Experiment fp32 = row34();
  fp32.training.dtype = Dtype::fp32;
  EXPECT_EQ(resolve_execution(fp32).bytes.reduce, 4.0);
}

TEST(FmsFsdp, RunsFsdpOrHsdpWithBlockCheckpointingAndNothingElse) {
  // Its trainer wraps the model in FSDP1 only: FULL_SHARD or HYBRID_SHARD, no tensor, pipeline or
  // context parallelism; its "selective" checkpointing recomputes a share of whole blocks
  // (recompute_layers), not Korthikanti's attention core.
  const Experiment e = row34();
  auto check = [&](const PlanSpec& p) { return check_plan(e.model, e.cluster, e.training, p, 128); };
  EXPECT_FALSE(check(e.plan).has_value()) << check(e.plan)->rule;
  PlanSpec share = e.plan;
  share.recompute_layers = 24;
  EXPECT_FALSE(check(share).has_value()) << check(share)->rule;
  PlanSpec hybrid = e.plan;
  hybrid.shard_group = 8;
  EXPECT_FALSE(check(hybrid).has_value()) << check(hybrid)->rule;
  // Each of the parallelisms it lacks, at degree 2 with the data-parallel degree halved.
  for (const char* field : {"plan.tp", "plan.pp", "plan.cp"}) {
    PlanSpec p = e.plan;
    p.dp = 64;
    (std::string(field) == "plan.tp" ? p.tp : std::string(field) == "plan.pp" ? p.pp : p.cp) = 2;
    ASSERT_TRUE(check(p).has_value()) << field;
    EXPECT_EQ(check(p)->field, field);
  }
  for (Recompute r : {Recompute::selective, Recompute::selective_op}) {
    PlanSpec selective = e.plan;
    selective.recompute = r;
    ASSERT_TRUE(check(selective).has_value()) << to_string(r);
    EXPECT_EQ(check(selective)->field, "plan.recompute");
  }
  // No SHARD_GRAD_OP (its strategies are fsdp, hsdp and ddp) and no float8.
  PlanSpec kept = e.plan;
  kept.reshard_after_forward = false;
  ASSERT_TRUE(check(kept).has_value());
  EXPECT_EQ(check(kept)->field, "plan.reshard_after_forward");
  // (On the H100 row: the A100 has no FP8 peak at all.)
  const Experiment h = load_experiment(resolve_scenario("experiments", "fms-fsdp-llama2-34b-96xh100-fsdp-fullac"));
  TrainingSpec fp8 = h.training;
  fp8.dtype = Dtype::fp8;
  fp8.fp8_scaling = Fp8Scaling::tensorwise;
  const auto v = check_plan(h.model, h.cluster, fp8, h.plan, 96);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "training.dtype");
  EXPECT_NE(v->rule.find("no FP8 training"), std::string::npos) << v->rule;
  PlanSpec zero1 = e.plan;
  zero1.zero = 1;
  ASSERT_TRUE(check(zero1).has_value());
  EXPECT_EQ(check(zero1)->field, "plan.zero");
}

TEST(FmsFsdp, OneStepPerMicroBatchAndHybridShardsOverANode) {
  // train_utils.py steps the optimizer after every batch (no accumulation), and FSDP1's
  // HYBRID_SHARD built from sharding_strategy alone shards over the node's 8 ranks.
  const Experiment e = row34();
  auto check = [&](const PlanSpec& p) { return check_plan(e.model, e.cluster, e.training, p, 128); };
  PlanSpec accumulate = e.plan;
  accumulate.micro_batch = 1;  // 256 / (1 x 128): two micro-batches a step
  ASSERT_TRUE(check(accumulate).has_value());
  EXPECT_EQ(check(accumulate)->field, "plan.micro_batch");
  EXPECT_NE(check(accumulate)->rule.find("no gradient accumulation"), std::string::npos) << check(accumulate)->rule;
  PlanSpec quarter = e.plan;
  quarter.shard_group = 4;
  ASSERT_TRUE(check(quarter).has_value());
  EXPECT_EQ(check(quarter)->field, "plan.shard_group");
  EXPECT_NE(check(quarter)->rule.find("node's 8 GPUs"), std::string::npos) << check(quarter)->rule;
  // torchtitan accumulates and shards over any group that divides the replicas.
  PlanSpec tt = accumulate;
  tt.framework = Framework::torchtitan;
  EXPECT_FALSE(check(tt).has_value()) << check(tt)->rule;
  tt = quarter;
  tt.framework = Framework::torchtitan;
  EXPECT_FALSE(check(tt).has_value()) << check(tt)->rule;
}
