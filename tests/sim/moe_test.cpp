// Mixture-of-Experts layouts against hand computations: Megatron-Core's MoE parallel folding
// (plan.expert_tp: the experts' own tensor-parallel degree, ep spread over tp x cp x dp; Liu et
// al. 2025, arXiv:2504.14960), what one GPU's experts compute, hold and exchange.
#include <gtest/gtest.h>

#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costers.hpp"
#include "tests/sim/costed.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {

// Qwen3-30B-A3B (48 MoE layers, h 2048, 128 experts of 768, top 8, seq 4096) in bf16 on four DGX
// H100 nodes: tp 2 x pp 2 x dp 8, sequence parallel, Megatron-Core; ep 16 folded over tp x dp
// (expert_tp 1), so ep spans two nodes and every GPU holds 8 experts.
Experiment folded() {
  Experiment e = load_experiment(resolve_scenario("experiments", "nemo2407-llama2-7b-8xh100-fp8"));
  e.model = load_model(resolve_scenario("models", "qwen3-30b-a3b"));
  e.gpus = 32;
  e.training = TrainingSpec{.global_batch = 16, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  e.plan = PlanSpec{};
  e.plan.tp = 2;
  e.plan.pp = 2;
  e.plan.dp = 8;
  e.plan.ep = 16;
  e.plan.expert_tp = 1;
  e.plan.sequence_parallel = true;
  e.plan.zero = 1;
  e.plan.framework = Framework::megatron_core;
  validate_experiment(e);
  return e;
}

std::optional<PlanViolation> check(const Experiment& e) {
  return check_plan(e.model, e.cluster, e.training, e.plan, e.plan.gpus());
}

}  // namespace

TEST(MoeFolding, EpSpansTensorAndDataParallelRanksWhereTheFrameworkFolds) {
  Experiment e = folded();
  EXPECT_FALSE(check(e).has_value());
  // 2 x 8 = 16 ranks per stage regrouped as expert_tp 1 x ep 16 x expert-dp 1.
  EXPECT_EQ(e.plan.etp(), 1);
  EXPECT_EQ(e.plan.expert_dp(), 1);
  // Unset, expert_tp is tp: ep must then divide dp (8), as before folding.
  Experiment unset = e;
  unset.plan.expert_tp = 0;
  ASSERT_TRUE(check(unset).has_value());
  EXPECT_EQ(check(unset)->field, "plan.ep");
  unset.plan.ep = 4;
  EXPECT_FALSE(check(unset).has_value());
  EXPECT_EQ(unset.plan.expert_dp(), 2);  // 16 / (2 x 4)
  // A framework without folding refuses expert_tp != tp and names itself.
  Experiment ds = e;
  ds.plan.framework = Framework::deepspeed;
  ds.plan.sequence_parallel = false;  // (Megatron-DeepSpeed has none: refused first otherwise)
  ASSERT_TRUE(check(ds).has_value());
  EXPECT_EQ(check(ds)->field, "plan.expert_tp");
  EXPECT_NE(check(ds)->rule.find("deepspeed"), std::string::npos);
  // Folding needs each TP rank to route its own sequence shard.
  Experiment no_sp = e;
  no_sp.plan.sequence_parallel = false;
  ASSERT_TRUE(check(no_sp).has_value());
  EXPECT_EQ(check(no_sp)->field, "plan.expert_tp");
  // ep x expert_tp must divide tp x cp x dp = 16.
  Experiment too_wide = e;
  too_wide.plan.ep = 32;
  ASSERT_TRUE(check(too_wide).has_value());
  EXPECT_EQ(check(too_wide)->field, "plan.ep");
}

TEST(MoeFolding, ExpertsShardOverEpAndTheirOwnTensorParallelism) {
  // One MoE layer's experts: 128 x 3 x 2048 x 768 parameters (SwiGLU) over ep 16 x expert_tp 1;
  // attention and the router stay on tp 2 (the router whole on every rank).
  const Experiment e = folded();
  const double experts = 128.0 * 3 * 2048 * 768;
  const cost_models::StageParameters l = cost_models::layer_parameters_on_gpu(e.model, e.plan, 0);
  EXPECT_DOUBLE_EQ(l.expert, experts / 16);
  Experiment etp2 = e;
  etp2.plan.expert_tp = 2;
  etp2.plan.ep = 8;  // 2 x 8 = 16
  EXPECT_DOUBLE_EQ(cost_models::layer_parameters_on_gpu(etp2.model, etp2.plan, 0).expert, experts / 16);
}

TEST(MoeFolding, AllToAllCarriesEachRanksOwnShardAndTheRouterProbabilities) {
  // Per layer and direction (Megatron-Core's alltoall dispatcher): each TP rank routes its
  // sequence shard, 4096 / 2 tokens, 8 copies each, h = 2048 in 16 bits, dispatched and combined
  // over ep 16 = two nodes of 8 consecutive ranks; the copies' probabilities (2 bytes each) in a
  // third all-to-all. No expert-TP collectives at expert_tp 1.
  const Experiment e = folded();
  fixtures::Costed k(e, ComputeCosts{});
  const CommGroup ep{.ranks = 16, .ranks_per_node = 8, .nodes = 2};
  const double copies = 4096.0 / 2 * 8;
  const double expected = 2 * k.comm.time(Collective::all_to_all, Bytes(copies * 2048 * 2), ep).value() +
                          k.comm.time(Collective::all_to_all, Bytes(copies * 2), ep).value();
  EXPECT_NEAR(ep_comm_per_layer(k.in(), 4096).value(), expected, 1e-12 * expected);
  // The same copies with the experts split over the TP pair (expert_tp 2, ep 8 on one node): the
  // all-to-alls move the same shard, then each expert pair all-gathers the rows it received
  // (2 x 2048 x 8 copies) and reduce-scatters them after the experts.
  Experiment etp2 = e;
  etp2.plan.expert_tp = 2;
  etp2.plan.ep = 8;
  fixtures::Costed k2(etp2, ComputeCosts{});
  const CommGroup ep8{.ranks = 8, .ranks_per_node = 4, .nodes = 2, .concurrent_groups = 2};
  const CommGroup pair{.ranks = 2, .ranks_per_node = 2, .nodes = 1};
  const Bytes rows(2 * copies * 2048 * 2);
  const double expected2 = 2 * k2.comm.time(Collective::all_to_all, Bytes(copies * 2048 * 2), ep8).value() +
                           k2.comm.time(Collective::all_to_all, Bytes(copies * 2), ep8).value() +
                           k2.comm.time(Collective::all_gather, rows, pair).value() +
                           k2.comm.time(Collective::reduce_scatter, rows, pair).value();
  EXPECT_NEAR(ep_comm_per_layer(k2.in(), 4096).value(), expected2, 1e-12 * expected2);
}

TEST(MoeFolding, AnMoeLayersTensorParallelCollectivesAreItsAttentions) {
  // Sequence parallel tp 2: a dense layer all-gathers and reduce-scatters twice per pass, an MoE
  // layer once (around attention; its experts' tokens move in the expert-parallel exchange).
  const Experiment e = folded();
  fixtures::Costed k(e, ComputeCosts{});
  const LayerCompute lc{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  const Seconds tp = tp_comm_per_layer(k.in(), 4096);
  ASSERT_GT(tp.value(), 0.0);
  EXPECT_EQ(layer_step(k.in(), lc, 4096, tp, Seconds(0), 0.0, false).forward_tp, tp);
  EXPECT_NEAR(layer_step(k.in(), lc, 4096, tp, Seconds(0), 0.0, true).forward_tp.value(), 0.5 * tp.value(), 1e-15);
}

TEST(MoeFolding, EachGpusExpertsComputeItsGroupsCopiesAtFullWidth) {
  // expert_tp 1: a GPU's 8 experts multiply the 2048 x 8 copies it receives (dropless, balanced),
  // 2048 rows each, at the full expert width: FC1 (gate and up, 2 x 768) as 8 GEMMs of 2048 x 1536
  // x 2048; with expert_tp 2 (ep 8) a GPU gets its pair's copies (2 x 2048 x 8) over 16 experts,
  // each half as wide.
  const Experiment e = folded();
  const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
  const cost_models::LayerTimes t = cost_models::layer_times(x, e.model, e.plan, 4096, 4096, true, 0);
  // (Megatron-Core's grouped linear launches one GEMM per expert, each timed with its launch by
  // the H100's measured profile: nothing on top.)
  ASSERT_TRUE(x.roofline().gemm_times_measured());
  EXPECT_NEAR(t.forward_ops.fc1.value(), x.roofline().gemm({2048, 1536, 2048, 8}).value(), 1e-15);
  Experiment etp2 = e;
  etp2.plan.expert_tp = 2;
  etp2.plan.ep = 8;
  const cost_models::ExecutionModel x2 = cost_models::resolve_execution(etp2);
  const cost_models::LayerTimes t2 = cost_models::layer_times(x2, etp2.model, etp2.plan, 4096, 4096, true, 0);
  EXPECT_NEAR(t2.forward_ops.fc1.value(), x2.roofline().gemm({2048, 768, 2048, 16}).value(), 1e-15);
}

TEST(MoeFolding, ExpertGradientsAreReducedOverTheRanksHoldingTheSameExperts) {
  // ep 4 folded over tp 2 x dp 8 (expert_tp 1): 16 / 4 = 4 copies of each expert, 4 ranks apart
  // (two per node over two nodes); ZeRO-1 reduce-scatters the experts' gradients over them.
  Experiment e = folded();
  e.plan.ep = 4;
  fixtures::Costed k(e, ComputeCosts{});
  const CommGroup g = plan_groups(e.plan, e.cluster).expert_dp;
  EXPECT_EQ(g.ranks, 4);
  EXPECT_EQ(g.ranks_per_node, 2);
  EXPECT_EQ(g.nodes, 2);
  cost_data_parallel(k.in(), k.c);
  const cost_models::StageParameters sp = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0);
  const CommGroup dp = plan_groups(e.plan, e.cluster).dp;
  const double r = k.x.bytes.reduce;
  const double expected = k.comm.time(Collective::reduce_scatter, Bytes(sp.dense * r), dp).value() +
                          k.comm.time(Collective::reduce_scatter, Bytes(sp.expert * r), g).value();
  EXPECT_NEAR(k.c.dp_grad_sync[0].value(), expected, 1e-12 * expected);
}

TEST(MoeFolding, AllToAllRunsAtTheCalibratedShareOfItsLinks) {
  // nccl_all_to_all_h100_efficiency (calibration.yaml) divides the transfer, not the latency.
  const Experiment e = folded();
  fixtures::Costed k(e, ComputeCosts{});
  k.x.calibrated.all_to_all_efficiency_scale = 1.0;
  const double full = ep_comm_per_layer(k.in(), 4096).value();
  k.x.calibrated.all_to_all_efficiency_scale = 0.5;
  const CommGroup ep{.ranks = 16, .ranks_per_node = 8, .nodes = 2};
  const double copies = 4096.0 / 2 * 8;
  const CommEstimate tokens = k.comm.estimate(Collective::all_to_all, Bytes(copies * 2048 * 2), ep);
  const CommEstimate probs = k.comm.estimate(Collective::all_to_all, Bytes(copies * 2), ep);
  const double transfer = 2 * tokens.transfer.value() + probs.transfer.value();
  EXPECT_NEAR(ep_comm_per_layer(k.in(), 4096).value(), full + transfer, 1e-12 * full);
}

TEST(EpOverlap, PairedPassesExposeWhatTheirComputeCannotHide) {
  // A layer of 1 ms attention + 2 ms experts forward; backward 2 ms attention, 2 ms expert data
  // gradients and 2 ms delayed weight gradients (half of FC1's and FC2's 2 ms each). One
  // direction's exchange of 2 ms (dispatch 1 + combine 1): the pair runs combine_b under the
  // forward's attention, dispatch_f and dispatch_b under the expert backward, combine_f under the
  // backward's attention; each 1 ms exchange slows the compute step beside it by c (overlap_
  // contention, per second of overlap) and the compute stream is the longer one: the pair takes
  // 9 + 4c ms for 9 ms of compute, 4c exposed, half of it a direction.
  Experiment e = folded();
  e.plan.ep_overlap = true;
  e.plan.pp = 1;
  e.plan.dp = 16;
  e.training.global_batch = 64;
  ASSERT_FALSE(check(e).has_value());
  fixtures::Costed k(e, ComputeCosts{});
  LayerCompute lc{Seconds(3e-3), Seconds(6e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(2e-3), Seconds(4e-3)};
  lc.gemm_backward = {Seconds(0), Seconds(0), Seconds(2e-3), Seconds(2e-3)};
  const double c = overlap_contention(k.in(), 0.5 * (gemm_share(lc, false) + gemm_share(lc, true)));
  ASSERT_GT(c, 0.0);
  EpExposure x = ep_overlap_exposure(k.in(), lc, Seconds(2e-3), 1.0);
  EXPECT_NEAR(x.forward.value(), 0.5 * c * 4e-3, 1e-15);
  EXPECT_EQ(x.forward, x.backward);
  // A 50 ms direction (25 + 25): combine_b runs 0-25, dispatch_f 25-50, dispatch_b 50-75,
  // combine_f 75-100; every compute step runs beside one of them, slowed to 1 - c of its speed but
  // done before the exchange it waits for (the forward's attention by 1 / (1 - c) < 25, the
  // expert backward's 4 ms by 25 + 4 / (1 - c) < 50, the forward's experts from 50, the backward's
  // attention from 75): the pair takes the exchanges' 100 ms for 9 ms of compute, 91 ms exposed and
  // nothing more, the slowdown inside the compute stream's waits.
  x = ep_overlap_exposure(k.in(), lc, Seconds(50e-3), 1.0);
  EXPECT_NEAR(x.forward.value(), 0.5 * 91e-3, 1e-15);
  // Unpaired passes expose the whole exchange.
  x = ep_overlap_exposure(k.in(), lc, Seconds(50e-3), 0.25);
  EXPECT_NEAR(x.forward.value(), 0.75 * 50e-3 + 0.25 * 0.5 * 91e-3, 1e-15);
}

TEST(EpOverlap, WarmUpAndCoolDownPassesRunAlone) {
  // PP 1: every forward but the first micro-batch's pairs with a backward. Interleaved pp 8,
  // v 4, 128 micro-batches: stage 0 runs (8 - 1) x 2 + 3 x 8 + 1 = 39 of its 512 forwards in the
  // warm-up, the last stage 25.
  PlanSpec p;
  EXPECT_DOUBLE_EQ(ep_overlap_paired_share(p, 0, 8), 7.0 / 8);
  p.pp = 8;
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 4;
  EXPECT_DOUBLE_EQ(ep_overlap_paired_share(p, 0, 128), (512.0 - 39) / 512);
  EXPECT_DOUBLE_EQ(ep_overlap_paired_share(p, 7, 128), (512.0 - 25) / 512);
}

TEST(EpOverlap, RefusedWhereMegatronCoreRefusesIt) {
  Experiment e = folded();
  e.plan.ep_overlap = true;
  e.plan.schedule = Schedule::one_f_one_b;  // pp 2 without interleaving
  ASSERT_TRUE(check(e).has_value());
  EXPECT_EQ(check(e)->field, "plan.ep_overlap");
  e.plan.schedule = Schedule::interleaved;
  e.plan.virtual_stages = 2;
  EXPECT_FALSE(check(e).has_value());
  e.plan.recompute = Recompute::full;
  ASSERT_TRUE(check(e).has_value());
  EXPECT_EQ(check(e)->field, "plan.ep_overlap");
  e.plan.recompute = Recompute::none;
  e.plan.framework = Framework::generic;
  ASSERT_TRUE(check(e).has_value());
  EXPECT_EQ(check(e)->field, "plan.ep_overlap");
}

TEST(MegatronCoreDispatcher, PermutesSendsAndSortsReceivedRowsAndLaunchesAGemmPerExpert) {
  // The folded Qwen3-30B layer: each rank permutes its 2048 x 8 copies and unpermutes them, and
  // sorts the 2048 x 8 rows it receives for its 8 experts and back: 4 passes reading and writing
  // rows of 2048 bf16 values. TE's grouped linear launches one GEMM per expert: on the roofline
  // (one launch a batched GEMM) 7 launches more for FC1 and FC2 forward, 14 each backward; from the
  // H100's measured profile each of the 8 GEMMs is timed with its own launch already, nothing more.
  const Experiment e = folded();
  const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
  ASSERT_TRUE(x.roofline().gemm_times_measured());
  const cost_models::LayerTimes t = cost_models::layer_times(x, e.model, e.plan, 4096, 4096, true, 0);
  const double rows = 2048.0 * 8;
  const Seconds permute = x.roofline().memory_bound(Bytes(2 * 2.0 * 2 * (rows + rows) * 2048), 4);
  EXPECT_NEAR(t.forward_ops.moe_permute.value(), permute.value(), 1e-15);
  EXPECT_NEAR(t.forward_ops.fc1.value(), x.roofline().gemm({2048, 1536, 2048, 8}).value(), 1e-15);
  const Seconds bwd = x.roofline().gemm_grad({2048, 2048, 1536, 8}) + x.roofline().gemm_grad({2048, 1536, 2048, 8});
  EXPECT_NEAR(t.backward_ops.fc1.value(), bwd.value(), 1e-15);
  Experiment b = e;
  b.cluster = load_cluster(resolve_scenario("clusters", "dgx-b200-superpod"));
  const cost_models::ExecutionModel xb = cost_models::resolve_execution(b);
  ASSERT_FALSE(xb.roofline().gemm_times_measured());
  const cost_models::LayerTimes tb = cost_models::layer_times(xb, b.model, b.plan, 4096, 4096, true, 0);
  const Seconds launch = xb.roofline().params().launch_overhead;
  EXPECT_NEAR(tb.forward_ops.fc1.value(), (xb.roofline().gemm({2048, 1536, 2048, 8}) + 7.0 * launch).value(), 1e-15);
  const Seconds bwd_b = xb.roofline().gemm_grad({2048, 2048, 1536, 8}) + xb.roofline().gemm_grad({2048, 1536, 2048, 8});
  EXPECT_NEAR(tb.backward_ops.fc1.value(), (bwd_b + 14.0 * launch).value(), 1e-15);
}

TEST(Fp8CurrentScaling, TransformerEngineReadsEachUnfusedInputAndEveryGradientOnceMore) {
  // Llama 3.1 8B, one dense layer of 8192 tokens on one H100, Megatron-Core: against delayed
  // scaling, current scaling reads the projection's input (T x 4096) and FC2's (T x 14336, the
  // output of Megatron-Core's own SwiGLU kernel) and every output gradient (QKV 6144, projection
  // 4096, gate and up 2 x 14336, down 4096 per token) once more for their amax, 2 bytes per
  // element, in 6 and 8 more launches; and it casts QKV's and FC1's inputs (T x 4096 each, 3 bytes)
  // after TE's norm has recorded their amax, where under delayed scaling the norm writes FP8.
  Experiment e = load_experiment(resolve_scenario("experiments", "nemo2407-llama3-8b-8xh100-fp8"));
  e.plan.cp = 1;
  e.plan.dp = 8;
  validate_experiment(e);
  const cost_models::ExecutionModel delayed = cost_models::resolve_execution(e);
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  const cost_models::ExecutionModel current = cost_models::resolve_execution(e);
  const auto td = cost_models::layer_times(delayed, e.model, e.plan, 8192, 8192, false, 0);
  const auto tc = cost_models::layer_times(current, e.model, e.plan, 8192, 8192, false, 0);
  const double T = 8192;
  const Seconds launch = current.roofline().params().launch_overhead;
  const double bw = current.roofline().memory_bound(Bytes(1e9), 0).value() / 1e9;  // s per byte
  EXPECT_NEAR((tc.forward_ops.fp8_casts - td.forward_ops.fp8_casts).value(),
              (2 * T * (4096 + 14336) + 3 * 2 * T * 4096) * bw + 6 * launch.value(), 1e-12);
  const double grads = T * (6144 + 4096 + 2 * 14336 + 4096);
  EXPECT_NEAR((tc.backward_ops.fp8_casts - td.backward_ops.fp8_casts).value(), 2 * grads * bw + 8 * launch.value(), 1e-12);
}

TEST(MoeFolding, MegatronCoreRulesAndExpertTensorParallelismWithoutTensorParallelism) {
  // Megatron-Core refuses expert parallelism with tensor parallelism but no sequence parallelism,
  // and its FP8 recipes are Transformer Engine's (no torchao rowwise scaling).
  Experiment e = folded();
  e.plan.expert_tp = 0;
  e.plan.ep = 4;
  e.plan.sequence_parallel = false;
  ASSERT_TRUE(check(e).has_value());
  EXPECT_EQ(check(e)->field, "plan.sequence_parallel");
  Experiment fp8 = folded();
  fp8.training.dtype = Dtype::fp8;
  fp8.training.fp8_scaling = Fp8Scaling::rowwise;
  ASSERT_TRUE(check(fp8).has_value());
  EXPECT_EQ(check(fp8)->field, "training.fp8_scaling");
  // tp 1, expert_tp 2, ep 8 over dp 16: each rank routes its own 4096 x 8 copies, and an expert
  // pair computes both ranks' copies for its 16 experts at half width: 2 x 4096 x 8 / 16 = 4096
  // rows per expert through FC1's 768 of 1536 columns (one GEMM launch per expert), and all-gathers
  // and reduce-scatters those rows over the pair.
  Experiment one = folded();
  one.plan.tp = 1;
  one.plan.dp = 16;
  one.plan.ep = 8;
  one.plan.expert_tp = 2;
  one.plan.sequence_parallel = false;
  ASSERT_FALSE(check(one).has_value());
  const cost_models::ExecutionModel x = cost_models::resolve_execution(one);
  const cost_models::LayerTimes t = cost_models::layer_times(x, one.model, one.plan, 4096, 4096, true, 0);
  ASSERT_TRUE(x.roofline().gemm_times_measured());  // each of the 16 GEMMs timed with its launch
  EXPECT_NEAR(t.forward_ops.fc1.value(), x.roofline().gemm({4096, 768, 2048, 16}).value(), 1e-15);
  fixtures::Costed k(one, ComputeCosts{});
  const CommGroup ep8{.ranks = 8, .ranks_per_node = 4, .nodes = 2, .concurrent_groups = 2};
  const CommGroup pair{.ranks = 2, .ranks_per_node = 2, .nodes = 1};
  const double copies = 4096.0 * 8;
  const Bytes rows(2 * copies * 2048 * 2);
  const double expected = 2 * k.comm.time(Collective::all_to_all, Bytes(copies * 2048 * 2), ep8).value() +
                          k.comm.time(Collective::all_to_all, Bytes(copies * 2), ep8).value() +
                          k.comm.time(Collective::all_gather, rows, pair).value() +
                          k.comm.time(Collective::reduce_scatter, rows, pair).value();
  EXPECT_NEAR(ep_comm_per_layer(k.in(), 4096).value(), expected, 1e-12 * expected);
}

TEST(MoeFolding, FrameworksWithoutFoldingRouteTheWholeMicroBatchOnEveryTensorParallelRank) {
  // The bundled trainer with tp 2 and sequence parallelism: every TP rank routes all 4096 tokens
  // (it all-gathers the hidden states first), its experts split over tp like the dense FFN; the
  // all-to-alls carry the whole micro-batch's copies and the TP collectives stay the dense layer's.
  Experiment e = folded();
  e.plan.framework = Framework::foresight_train;
  // The trainer builds GPT-2/3 blocks only: Qwen3's routing (8 of 128 experts over hidden 2048)
  // in a GPT block, capacity-bound experts as wide as the dense FFN.
  e.model.activation = Activation::gelu;
  e.model.norm = Norm::layernorm;
  e.model.position = PositionEmbedding::learned;
  e.model.bias = e.model.tie_embeddings = true;
  e.model.kv_heads = e.model.heads;
  e.model.attention_head_dim = 0;
  e.model.moe->dropless = false;
  e.model.moe->expert_ffn_hidden = 0;
  e.plan.expert_tp = 0;
  e.plan.ep = 4;
  e.plan.zero = 0;
  e.training.dtype = Dtype::fp32;
  ASSERT_FALSE(check(e).has_value());
  fixtures::Costed k(e, ComputeCosts{});
  EXPECT_FALSE(cost_models::moe_routes_own_tokens(*k.x.framework, e.plan));
  const CommGroup ep4 = plan_groups(e.plan, e.cluster).ep;
  const double copies = 4096.0 * 8;
  const double expected = 2 * k.comm.time(Collective::all_to_all, Bytes(copies * 2048 * 4), ep4).value();
  EXPECT_NEAR(ep_comm_per_layer(k.in(), 4096).value(), expected, 1e-12 * expected);
  const LayerCompute lc{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  const Seconds tp = tp_comm_per_layer(k.in(), 4096);
  EXPECT_EQ(layer_step(k.in(), lc, 4096, tp, Seconds(0), 0.0, true).forward_tp, tp);
}

TEST(DeepEp, ATokenCrossesTheNetworkOncePerRemoteNodeThenNvlink) {
  // DeepEP's normal kernels (DeepSeek-V3 sec. 3.2.2): the folded Qwen3 layout (ep 16 over two
  // nodes of 8, each TP rank routing its 2048-token shard, 8 experts per token, h 2048, bf16). A
  // token's 8 experts, spread evenly over 2 nodes, occupy 2 (1 - 2^-8) = 1.9921875 nodes on
  // average (the expected occupied bins of 8 balls in 2), half of them remote: 0.99609375 network
  // copies per token, where NCCL's all-to-all sends 8 x 8/16 = 4. On the receiving node the 8
  // copies fan out over NVLink, 7/8 of them to another GPU. Per layer and direction, bf16: a
  // dispatch and a combine each way, each the slower of the two legs.
  Experiment e = folded();
  e.plan.ep_dispatcher = EpDispatcher::deepep;
  ASSERT_FALSE(check(e).has_value()) << check(e)->rule;
  fixtures::Costed k(e, ComputeCosts{});
  const CommGroup ep{.ranks = 16, .ranks_per_node = 8, .nodes = 2};
  const CommGroup pair{.ranks = 2, .ranks_per_node = 2, .nodes = 1};
  const double rows = 4096.0 / 2, row = 2048 * 2;
  auto leg = [&](double remote) {
    return std::max(k.comm.time(Collective::send_recv, Bytes(rows * remote * row), ep).value(),
                    k.comm.time(Collective::send_recv, Bytes(rows * 8 * row * 7.0 / 8.0), pair).value());
  };
  EXPECT_NEAR(ep_comm_per_layer(k.in(), 4096).value(), 2 * leg(0.99609375), 1e-12);
  // Node-limited routing to one node (model.moe.max_nodes 1): half the tokens stay home.
  e.model.moe->max_nodes = 1;
  fixtures::Costed k1(e, ComputeCosts{});
  EXPECT_NEAR(ep_comm_per_layer(k1.in(), 4096).value(), 2 * leg(0.5), 1e-12);
  // And fewer bytes than NCCL's all-to-all of the same copies.
  e.plan.ep_dispatcher = EpDispatcher::nccl;
  fixtures::Costed kn(e, ComputeCosts{});
  EXPECT_GT(ep_comm_per_layer(kn.in(), 4096).value(), ep_comm_per_layer(k1.in(), 4096).value());
  // Under FP8 training Megatron-Core's flex dispatcher still hands DeepEP the bf16 hidden states
  // (fused_a2a.py through core_v0.17): the same legs. DeepSeek-V3's own system (the generic
  // entry) dispatches FP8 with a scale per 128 (1 + 4/128 bytes an element): per direction the mean
  // of its FP8 dispatch and three 16-bit moves (the combine and the backward's two).
  e.plan.ep_dispatcher = EpDispatcher::deepep;
  e.model.moe->max_nodes = 0;
  e.training.dtype = Dtype::fp8;
  fixtures::Costed k8(e, ComputeCosts{});
  EXPECT_NEAR(ep_comm_per_layer(k8.in(), 4096).value(), 2 * leg(0.99609375), 1e-12);
  e.plan.framework = Framework::generic;
  fixtures::Costed kg(e, ComputeCosts{});
  const double row8 = 2048 * (1.0 + 4.0 / 128);
  const double leg8 = std::max(k.comm.time(Collective::send_recv, Bytes(rows * 0.99609375 * row8), ep).value(),
                               k.comm.time(Collective::send_recv, Bytes(rows * 8 * row8 * 7.0 / 8.0), pair).value());
  EXPECT_NEAR(ep_comm_per_layer(kg.in(), 4096).value(), 0.5 * (leg8 + 3 * leg(0.99609375)), 1e-12);
}

TEST(RecomputeModules, MlaUpProjectionsRerunTheirOwnGemms) {
  // DeepSeek-V3 at tp 2 with sequence parallelism and recompute_modules mla_up_proj (DGX Cloud's
  // 25.04 recipe): the backward re-runs the up-projections from the saved latents, the query's
  // 1536 -> 128 x 192 and the keys' and values' 512 -> 128 x (128 + 128), each split over tp, on
  // all 4096 tokens of the sequence; not the down-projections, which run on the rank's 2048.
  Experiment e = load_experiment(resolve_scenario("experiments", "dgxc2505-deepseek-v3-512xh100-bf16"));
  ASSERT_TRUE(e.plan.recompute == Recompute::none && e.plan.recompute_modules.mla_up_proj);
  const auto x = cost_models::resolve_execution(e);
  const cost_models::RooflineCompute& rc = x.roofline();
  const double up = rc.gemm({4096, 128 * 192 / 2, 1536, 1}).value() + rc.gemm({4096, 128 * 256 / 2, 512, 1}).value();
  EXPECT_NEAR(compute_costs(e, x).layer(4096, 4096, true, 0).recompute.value(), up, 1e-15);
}

TEST(RecomputeModules, CheckpointedSubmodulesRerunTheirWholeForward) {
  // Megatron-Core's checkpointed submodules re-run their forward before their backward
  // (moe/moe_layer.py, transformer_layer.py): an MoE block its router, permutes, experts and
  // activation; with moe_act beside it the routed experts' activation once more (the nested
  // output-discarding checkpoint discards the recompute's output too). Qwen3-30B-A3B as folded().
  Experiment e = folded();
  const auto x = cost_models::resolve_execution(e);
  const int tokens = e.model.seq_len;
  const cost_models::LayerTimes t = cost_models::layer_times(x, e.model, e.plan, tokens, tokens, true);
  const cost_models::LayerOpTimes& f = t.forward_ops;
  ASSERT_GT(f.moe_permute.value(), 0.0);
  EXPECT_EQ(compute_costs(e, x).layer(tokens, tokens, true, 0).recompute.value(), 0.0);
  e.plan.recompute_modules.moe = true;
  const Seconds block = f.moe_router + f.moe_permute + f.fc1 + f.gelu + f.fc2;
  EXPECT_NEAR(compute_costs(e, x).layer(tokens, tokens, true, 0).recompute.value(), block.value(), 1e-15);
  e.plan.recompute_modules.moe_act = true;
  EXPECT_NEAR(compute_costs(e, x).layer(tokens, tokens, true, 0).recompute.value(), (block + f.gelu).value(), 1e-15);
  // A dense layer of the same plan (MLP checkpointed): its fused FFN norm (half the layer's two),
  // FC1, activation and FC2; bf16, so no FP8 casts.
  e.plan.recompute_modules = {.mlp = true};
  const cost_models::LayerTimes d = cost_models::layer_times(x, e.model, e.plan, tokens, tokens, false);
  const cost_models::LayerOpTimes& g = d.forward_ops;
  EXPECT_NEAR(compute_costs(e, x).layer(tokens, tokens, false, 0).recompute.value(),
              (0.5 * g.layernorms + g.fc1 + g.gelu + g.fc2).value(), 1e-15);
}
