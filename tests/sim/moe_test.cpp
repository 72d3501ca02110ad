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
  const LayerCompute lc{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}};
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
