// Context parallelism against hand computations: ring steps and bytes, the exposed part when a
// step's transfer outlasts the attention block it feeds, the all-gather variant, compute and
// memory per rank, and the gradient group dp x cp.
#include <gtest/gtest.h>

#include "core/scenario.hpp"
#include "core/plan_json.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costers.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {

// Llama-style 8B-sized dense model (32 layers, h 4096, 32 heads, 8 kv heads) at 32k tokens on
// DGX H100 nodes, Megatron-Core, tp 2 x cp 4 (one node per TP x CP group), dp 2.
Experiment cp_plan(int cp) {
  Experiment e = load_experiment(resolve_scenario("experiments", "sc21-table1-1.7b"));
  e.model = ModelSpec{.name = "m8b", .layers = 32, .hidden = 4096, .heads = 32, .seq_len = 32768, .vocab = 128256,
                      .ffn_hidden = 14336, .kv_heads = 8, .moe = std::nullopt};
  e.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  e.training = TrainingSpec{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  e.plan = PlanSpec{};
  e.plan.tp = 2;
  e.plan.cp = cp;
  e.plan.dp = 2;
  e.plan.framework = Framework::megatron_core;
  e.gpus = e.plan.gpus();
  validate_experiment(e);
  return e;
}

struct Inputs {
  Experiment e;
  cost_models::ExecutionModel x;
  ComputeCosts compute;
  CommModel comm;
  explicit Inputs(Experiment ex) : e(std::move(ex)), x(cost_models::execution_model(e.training, e.plan)), comm(e.cluster) {}
  CostInputs in() const { return {e, x, compute, comm}; }
};

// A plan laid out as torchtitan runs it: FSDP2 (zero 3), sequence-parallel norms.
PlanSpec as_torchtitan(PlanSpec p) {
  p.framework = Framework::torchtitan;
  p.zero = 3;
  p.sequence_parallel = true;
  return p;
}

Experiment torchtitan_cp_plan(int cp, CpComm comm = CpComm::ring) {
  Experiment e = cp_plan(cp);
  e.plan = as_torchtitan(e.plan);
  e.plan.cp_comm = comm;
  validate_experiment(e);
  return e;
}

// The experiment as plan.json carries it, for its launch flags.
ExecutablePlan executable(const Experiment& e) {
  ExecutablePlan plan;
  plan.model = e.model;
  plan.training = e.training;
  plan.plan = e.plan;
  plan.gpus = e.gpus;
  return plan;
}

// One ring step's sender and receiver: the cp group's ranks 2 apart inside one node, the two
// TP ranks' pairs at once.
CommGroup intra_node_pair(const PlanGroups& g) {
  CommGroup pair = g.cp;
  pair.ranks = 2;
  pair.ranks_per_node = 2;
  pair.nodes = 1;
  pair.concurrent_groups = 2;
  return pair;
}

}  // namespace

TEST(ContextParallel, RanksGroupsAndTokens) {
  const Experiment e = cp_plan(4);
  EXPECT_EQ(e.plan.gpus(), 16);
  EXPECT_EQ(e.plan.local_tokens(e.model), 8192);
  // Load-balanced causal chunks: 8192 tokens at context c see 8192 c - 8192 x 8191 / 2 score
  // positions, a quarter of the whole triangle 32768 x 32769 / 2, at c = (32768 + 8192) / 2.
  EXPECT_EQ(attention_context(e), 20480);
  const double local = 8192.0 * 20480 - 8192.0 * 8191 / 2, whole = 32768.0 * 32769 / 2;
  EXPECT_NEAR(local / whole, 0.25, 1e-12);
  // tp-cp-dp-pp: the cp group is 4 ranks 2 apart inside one node; the gradient group is dp x cp =
  // 8 ranks, 2 apart, across the two nodes.
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  EXPECT_EQ(g.cp.ranks, 4);
  EXPECT_EQ(g.cp.nodes, 1);
  EXPECT_EQ(g.dp.ranks, 8);
  EXPECT_EQ(g.dp.nodes, 2);
  EXPECT_EQ(e.plan.shard_ways(), 8);
}

TEST(ContextParallel, RingExposesOnlyTheStepsTheAttentionBlockCannotHide) {
  // One ring step sends the local keys and values: 2 (K, V) x 2 bytes x 8192 tokens x (8 kv
  // heads / tp 2 = 4) x 128 = 16 MiB per rank; the backward sends their gradients too (32 MiB).
  // cp - 1 = 3 steps, each beside 1/4 of the attention core.
  Inputs k(cp_plan(4));
  const PlanGroups g = plan_groups(k.e.plan, k.e.cluster);
  const CommGroup pair = intra_node_pair(g);
  const Seconds step = k.comm.time(Collective::send_recv, Bytes(16.0 * 1048576), pair);
  const Seconds step_b = k.comm.time(Collective::send_recv, Bytes(32.0 * 1048576), pair);
  // Attention long enough to hide every step: nothing exposed.
  CpLayerComm hidden = cp_comm_per_layer(k.in(), 4.0 * step_b * 2, 4.0 * step_b * 2);
  EXPECT_EQ(hidden.forward.value(), 0.0);
  EXPECT_EQ(hidden.backward.value(), 0.0);
  // Attention blocks of half a step: 3 x (step - step / 2) exposed in the forward.
  CpLayerComm short_blocks = cp_comm_per_layer(k.in(), 4.0 * (step / 2.0), 4.0 * (step_b / 2.0));
  EXPECT_NEAR(short_blocks.forward.value(), 3 * step.value() / 2, 1e-15);
  EXPECT_NEAR(short_blocks.backward.value(), 3 * step_b.value() / 2, 1e-15);
  // cp = 1: nothing.
  Inputs one(cp_plan(1));
  EXPECT_EQ(cp_comm_per_layer(one.in(), Seconds(1), Seconds(1)).forward.value(), 0.0);
}

TEST(ContextParallel, AllGatherVariantGathersTheWholeSequencesKeysAndValues) {
  // Transformer Engine's AttnFuncWithCPAndKVAllGather: the forward all-gathers K and V; the
  // backward, which saved only the rank's own K and V, gathers them again, then reduce-scatters
  // the whole sequence's dK and dV.
  Experiment e = cp_plan(4);
  e.plan.cp_comm = CpComm::all_gather;
  Inputs k(e);
  const CommGroup cp = plan_groups(e.plan, e.cluster).cp;
  const Bytes kv_all(2.0 * 2 * 32768 * 4 * 128);  // K and V of the whole sequence, bf16, 4 kv heads
  const CpLayerComm c = cp_comm_per_layer(k.in(), Seconds(1), Seconds(1));
  EXPECT_NEAR(c.forward.value(), k.comm.time(Collective::all_gather, kv_all, cp).value(), 1e-15);
  EXPECT_NEAR(c.backward.value(),
              (k.comm.time(Collective::all_gather, kv_all, cp) + k.comm.time(Collective::reduce_scatter, kv_all, cp)).value(),
              1e-15);
}

TEST(ContextParallel, ActivationsPerRankShrinkWithCp) {
  // Each rank stores its 8192 of 32768 tokens: a quarter of the cp = 1 layer activations (fused
  // attention: no s x s scores), and the ring's four 16 MiB key/value blocks as buffers.
  const Experiment four = cp_plan(4), one = cp_plan(1);
  const auto x4 = cost_models::execution_model(four.training, four.plan);
  const auto x1 = cost_models::execution_model(one.training, one.plan);
  const Bytes a4 = cost_models::activation_bytes_per_layer(x4, four.model, four.plan, 1, four.plan.local_tokens(four.model));
  const Bytes a1 = cost_models::activation_bytes_per_layer(x1, one.model, one.plan, 1, 32768);
  EXPECT_NEAR(a4.value(), a1.value() / 4, a1.value() * 1e-12);
  const auto m4 = cost_models::memory_per_gpu(x4, four.model, four.training, four.plan, 0);
  const auto m1 = cost_models::memory_per_gpu(x1, one.model, one.training, one.plan, 0);
  EXPECT_LT(m4.activations.value(), m1.activations.value() / 3.9);
  // Model state shards over dp x cp = 8 with ZeRO-1 (not dp = 2).
  Experiment z = four;
  z.plan.zero = 1;
  const auto xz = cost_models::execution_model(z.training, z.plan);
  const auto mz = cost_models::memory_per_gpu(xz, z.model, z.training, z.plan, 0);
  const auto mzero = cost_models::memory_per_gpu(x4, four.model, four.training, four.plan, 0);
  EXPECT_NEAR(mz.optimizer.value(), mzero.optimizer.value() / 8, 1.0);
}

TEST(ContextParallel, Rules) {
  Experiment e = cp_plan(4);
  auto broken = [&](const PlanSpec& p) { return check_plan(e.model, e.cluster, e.training, p, p.gpus()); };
  PlanSpec p = e.plan;
  p.framework = Framework::megatron;  // Megatron-LM 2021 has no context parallelism
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp");
  p = e.plan;
  p.cp = 3;  // 2 x 3 does not divide 32768
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp");
  p = e.plan;
  p.placement = Placement::tp_pp_dp;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.placement");
  p = e.plan;
  auto v = check_plan(e.model, e.cluster, e.training, p, 8);  // 2 x 4 x 1 x 2 = 16 GPUs, not 8
  ASSERT_TRUE(v);
  EXPECT_EQ(v->value, "tp*cp*pp*dp = 2*4*1*2 = 16");
}

TEST(ContextParallel, PredictionCarriesTheExchangeAndFits) {
  const Prediction p = predict(cp_plan(4), EngineKind::analytic);
  EXPECT_TRUE(check_prediction(p).empty()) << check_prediction(p).front();
  EXPECT_GE(p.breakdown.cp_comm.value(), 0.0);
  // The same model at cp = 1 on half the GPUs' worth of sequence per rank does 4x the layer work
  // per rank: the cp = 4 iteration is well under the cp = 1 one (same dp, 4x the GPUs).
  const Prediction q = predict(cp_plan(1), EngineKind::analytic);
  EXPECT_LT(p.iteration.value(), q.iteration.value() / 2.5);
}

TEST(ContextParallel, SimgridDataParallelBytesCountEachRingOncePerHost) {
  // tp 2 x cp 4 fills one DGX H100 node (one SimGrid host); dp 2 puts the two hosts on two nodes.
  // The gradient group of each TP rank is dp x cp = 8 ranks whose 4 cp ranks sit side by side in
  // the node: its ring leaves the node once. Two such rings (one per TP rank) leave each host, so
  // a host's NICs carry 2 x 2 (8 - 1) / 8 of a GPU's gradients, the analytic ring's bytes per link
  // over the 4 NICs its 4 ranks own, scaled to the node's 8. Counting every cp rank as a ring
  // crossing (tp x cp = 8 rings) sent 4x that.
  const Experiment e = cp_plan(4);
  Inputs k(e);
  WorkloadCosts c;
  c.shape = ScheduleShape{e.plan.schedule, e.plan.pp, e.plan.micro_batches(e.training), 1, 1};
  cost_data_parallel(k.in(), c);
  const double grads = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0).total() * k.x.bytes.grad;
  EXPECT_NEAR(c.dp_grad_sync_bytes[0].value(), grads * 2.0 * 7.0 / 8.0 * 2.0, grads * 1e-12);
}

TEST(ContextParallel, ZeroThreeUnitsHideGathersBehindTheRingExchangeToo) {
  // ZeRO-3 over dp x cp = 8 ranks with cp 4: between two gathers the compute stream runs a layer's
  // forward and the part of its K/V ring exchange the attention cannot hide, so each unit's
  // compute is forward + TP + exposed CP. With a 0.2 ms forward (attention 0.1 ms) the layer's
  // gather (0.77 ms here) outlasts forward + TP (0.73 ms; the tp 2 all-reduces at the 2-GPU ring's
  // measured share of NVLink) but not forward + TP + the exposed ring steps (0.85 ms): leaving the
  // exchange out would expose 32 x 0.04 ms that the exchange hides.
  Experiment e = cp_plan(4);
  e.plan.zero = 3;
  validate_experiment(e);
  Inputs k(e);
  k.compute.layer = [](int, int, bool, int) {
    return LayerCompute{Seconds(2e-4), Seconds(4e-4), Seconds(0), Seconds(1e-4), Seconds(2e-4), {}, {}, Seconds(0), Seconds(0)};
  };
  k.compute.edges = [](int) { return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(1e-3), Seconds(0), Seconds(0), Seconds(0)}; };
  WorkloadCosts c;
  c.shape = ScheduleShape{e.plan.schedule, e.plan.pp, e.plan.micro_batches(e.training), 1, 1};
  cost_layer_chunks(k.in(), c);
  cost_sharded_parameters(k.in(), c);
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  const CpLayerComm cpc = cp_comm_per_layer(k.in(), Seconds(1e-4), Seconds(2e-4));
  ASSERT_GT(cpc.forward, Seconds(0));
  const Seconds tp = tp_comm_per_layer(k.in(), e.plan.local_tokens(e.model));
  const double layer = cost_models::layer_parameters_on_gpu(e.model, e.plan, 0).total();
  const double edge = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0).total() - 32 * layer;
  auto gather = [&](double params) { return k.comm.time(Collective::all_gather, Bytes(params * k.x.bytes.gather), g.shard); };
  // (Megatron-FSDP gathers the embedding once per step and keeps it: a quarter of its gather in
  // each of the 4 micro-batches' forwards.)
  std::vector<ShardedUnit> fwd{{gather(edge) * 0.25, Seconds(1e-4), Seconds(0)}};
  ASSERT_GT(gather(layer), Seconds(2e-4) + tp);
  ASSERT_LT(gather(layer), Seconds(2e-4) + tp + cpc.forward);
  for (int i = 0; i < 32; ++i) fwd.push_back({gather(layer), Seconds(2e-4) + tp + cpc.forward, Seconds(0)});
  fwd.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  // The layer here has no GEMMs, so even on the H100's persistent GEMMs the gathers cost the SM
  // share of the compute they hide under: 24 of 132 SMs.
  EXPECT_NEAR(c.chunk[0][0][0].forward_dp_comm.value(), exposed_under_prefetch(fwd, 24.0 / (132.0 - 24.0)).value(),
              1e-12);
}

TEST(ContextParallel, EnginesAgreeOnTheDataParallelSyncWithoutContention) {
  // One TP x CP group per node, one stage, dp 2: the only flows are the gradient rings' crossings,
  // one per host pair, each alone on its NICs, so SimGrid must reproduce the analytic engine. A
  // host owns the NICs of its tp x cp = 8 GPUs (it had been given tp = 2 GPUs' worth, 4x slower).
  if (!simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  const Experiment e = cp_plan(4);
  const Prediction a = predict(e, EngineKind::analytic);
  const Prediction s = predict(e, EngineKind::simgrid);
  ASSERT_GT(a.breakdown.dp_comm_exposed, Seconds(0));
  EXPECT_NEAR(s.iteration / a.iteration, 1.0, 0.01) << "simgrid " << s.iteration.value() << " s, analytic "
                                                     << a.iteration.value() << " s";
}

TEST(PerOpCheckpointing, RerunsTheForwardAllGathersButNotTheSavedReduceScatters) {
  // torchtitan's op policy saves reduce_scatter outputs but not all-gathers: with tp 2 and
  // sequence parallelism a layer's forward has two all-gathers and two reduce-scatters of equal
  // size, so the recomputed forward re-runs half its TP communication; full recompute re-runs all.
  Experiment e = torchtitan_cp_plan(1);
  e.plan.recompute = Recompute::selective_op;
  validate_experiment(e);
  Inputs in(e);
  LayerCompute lc;
  lc.forward = Seconds(0.010);
  lc.backward = Seconds(0.020);
  lc.recompute = Seconds(0.004);
  const Seconds tp(0.002);
  const LayerStep op = layer_step(in.in(), lc, 32768, tp, Seconds(0), 0.0);
  EXPECT_DOUBLE_EQ(op.recompute_comm.value(), 0.001);
  EXPECT_DOUBLE_EQ(op.recompute.value(), 0.004);
  e.plan.recompute = Recompute::full;
  e.plan.framework = Framework::megatron_core;
  Inputs full(e);
  const LayerStep f = layer_step(full.in(), lc, 32768, tp, Seconds(0), 1.0);
  EXPECT_DOUBLE_EQ(f.recompute_comm.value(), 0.002);
}

TEST(ContextParallel, PyTorchSdpaContextParallelMovesRepeatedHeadsAndFp32Gradients) {
  // torchtitan: context_parallel wraps SDPA, which receives K and V after repeat_kv, so each rank
  // holds 32 / tp 2 = 16 heads of them, not 4: 2 x 2 bytes x 8192 tokens x 16 x 128 = 64 MiB
  // local, 256 MiB gathered over the 4 cp ranks. Forward: the all-gather (the default ALL_GATHER
  // rotater) under the first block; backward: the same gather under its first block, then dK, dV
  // accumulated in fp32 (128 MiB) sent one ring step at a time, each under the next block, the
  // last waited for after the loop.
  const Experiment e = torchtitan_cp_plan(4, CpComm::all_gather);
  Inputs k(e);
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  const CommGroup pair = intra_node_pair(g);
  const Seconds gather = k.comm.time(Collective::all_gather, Bytes(256.0 * 1048576), g.cp);
  const Seconds dkv = k.comm.time(Collective::send_recv, Bytes(128.0 * 1048576), pair);
  // Blocks (a quarter of the attention each) too short to hide anything: all exposed.
  const CpLayerComm open = cp_comm_per_layer(k.in(), Seconds(0), Seconds(0));
  EXPECT_NEAR(open.forward.value(), gather.value(), 1e-15);
  EXPECT_NEAR(open.backward.value(), (gather + 4.0 * dkv).value(), 1e-15);
  // Blocks long enough to hide the gather and every step but the last.
  const Seconds long_block = 2.0 * max(gather, dkv);
  const CpLayerComm hidden = cp_comm_per_layer(k.in(), 4.0 * long_block, 4.0 * long_block);
  EXPECT_EQ(hidden.forward.value(), 0.0);
  EXPECT_NEAR(hidden.backward.value(), dkv.value(), 1e-15);
  // Megatron-Core's (Transformer Engine) all-gather moves the 4 kv heads: a quarter of the bytes.
  Experiment te = cp_plan(4);
  te.plan.cp_comm = CpComm::all_gather;
  Inputs kt(te);
  EXPECT_NEAR(cp_comm_per_layer(kt.in(), Seconds(1), Seconds(1)).forward.value(),
              k.comm.time(Collective::all_gather, Bytes(64.0 * 1048576), g.cp).value(), 1e-15);
}

TEST(ContextParallel, PyTorchSdpaContextParallelMergesInEagerFp32) {
  // The eager fp32 merging around the ring's blocks (torch/distributed/tensor/experimental/
  // _attention.py), for the attention output of 8192 tokens x 16 heads x 128 = 16 Mi elements:
  // forward, each of the cp - 1 = 3 later blocks 46 bytes an element (cast 6, three fp32
  // binary ops 36, half the steps' torch.cat of the whole 4) and the final cast 6; backward, each
  // of the 4 steps 62 bytes an element (grad_query 10 + cat 4; K and V each 10 + 4 + 8; K/V cat
  // 4). At 1 TB/s and no launch cost: 1 ps a byte.
  Inputs k(torchtitan_cp_plan(4));
  k.compute.memory_bound = [](Bytes b, int) { return Seconds(b.value() * 1e-12); };
  const double q = 8192.0 * 16 * 128;
  const TorchCpMerges m = torch_cp_merges(k.in(), 8192);
  EXPECT_NEAR(m.forward.value(), (3 * 46 + 6) * q * 1e-12, 1e-15);
  EXPECT_NEAR(m.backward.value(), 4 * 62 * q * 1e-12, 1e-15);
  // Megatron-Core's CP is Transformer Engine's fused kernels: no such passes in layer_step.
  Inputs kt(cp_plan(4));
  kt.compute.memory_bound = k.compute.memory_bound;
  const LayerCompute lc{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  EXPECT_EQ(layer_step(kt.in(), lc, 8192, Seconds(0), Seconds(0), 0).forward.value(), 1e-3);
  EXPECT_NEAR(layer_step(k.in(), lc, 8192, Seconds(0), Seconds(0), 0).forward.value(), 1e-3 + m.forward.value(), 1e-15);
}

TEST(ContextParallel, PyTorchSdpaContextParallelHoldsRepeatedKeysAndFp32Gradients) {
  // Buffers beyond the framework's own, by hand: Megatron-Core's all-gather (Transformer Engine's)
  // holds the whole sequence's K and V at the 4 kv heads of a rank (2 x 2 bytes x 32768 x 4 x 128
  // = 64 MiB), in the backward gathered again beside the whole sequence's dK and dV (64 MiB more);
  // torchtitan's (PyTorch's SDPA context parallelism) holds them at 16 heads (256 MiB) and the
  // backward's fp32 dK, dV of the rank's own 8192 tokens, accumulator and ring copy
  // (2 x 2 x 4 bytes x 8192 x 16 x 128 = 256 MiB).
  Experiment te = cp_plan(4);
  te.plan.cp_comm = CpComm::all_gather;
  const Experiment tt = torchtitan_cp_plan(4, CpComm::all_gather);
  auto cp_buffer = [](const Experiment& e) {
    Experiment no_cp = e;
    no_cp.plan.cp = 1;
    no_cp.plan.dp = e.plan.dp * e.plan.cp;
    const auto x = cost_models::execution_model(e.training, e.plan);
    return cost_models::buffer_bytes(x, e.model, e.plan, 0) - cost_models::buffer_bytes(x, no_cp.model, no_cp.plan, 0);
  };
  const double mib = 1048576.0;
  EXPECT_NEAR(cp_buffer(te).value(), 2 * 64 * mib, 1.0);
  EXPECT_NEAR(cp_buffer(tt).value(), (256 + 256) * mib, 1.0);
  // Eager PyTorch (framework pytorch) runs the same context_parallel around its SDPA: the same.
  Experiment eager = tt;
  eager.plan.framework = Framework::pytorch;
  validate_experiment(eager);
  EXPECT_NEAR(cp_buffer(eager).value(), (256 + 256) * mib, 1.0);
}

// All-to-all context parallelism (DeepSpeed-Ulysses; Transformer Engine's cp_comm_type "a2a"):
// tp 2 x cp 4 on the 8B-sized model at 32k tokens, each rank holding 8192 tokens of 16 query and
// 4 key/value heads before the exchange and 32768 tokens of 4 and 1 after it.
TEST(ContextParallel, AllToAllTradesTheSequenceSplitForAHeadSplit) {
  Experiment ring = cp_plan(4), e = cp_plan(4);
  e.plan.cp_comm = CpComm::all_to_all;
  validate_experiment(e);
  Inputs k(e);
  // Every rank attends over the whole sequence.
  EXPECT_EQ(attention_context(e), 32768);
  // Bytes per rank by hand, bf16: Q 2 x 8192 x 16 x 128 = 32 MiB, K and V 2 x 2 x 8192 x 4 x 128
  // = 16 MiB, the output as Q. Forward: Q, K, V out and back, then the output; backward: dO,
  // then dQ, dK, dV. Each waited for, at the all-to-all's calibrated share of the links.
  const double mib = 1048576.0;
  const CommGroup cp = plan_groups(e.plan, e.cluster).cp;
  auto a2a = [&](double bytes) {
    const CommEstimate est = k.comm.estimate(Collective::all_to_all, Bytes(bytes), cp);
    return est.latency.value() + est.transfer.value() / k.x.calibrated.all_to_all_efficiency_scale;
  };
  const double expect = a2a(48 * mib) + a2a(32 * mib);
  const CpLayerComm c = cp_comm_per_layer(k.in(), Seconds(1), Seconds(1));  // attention cannot hide them
  EXPECT_NEAR(c.forward.value(), expect, 1e-15);
  EXPECT_NEAR(c.backward.value(), expect, 1e-15);
  EXPECT_GT(c.forward.value(), 0.0);

  // The calibrated all-to-all share acts on the transfer: half the share, twice the transfer.
  Inputs half(e);
  half.x.calibrated.all_to_all_efficiency_scale = 0.5;
  const CommEstimate q_in = k.comm.estimate(Collective::all_to_all, Bytes(48 * mib), cp);
  const CommEstimate o_out = k.comm.estimate(Collective::all_to_all, Bytes(32 * mib), cp);
  EXPECT_NEAR(cp_comm_per_layer(half.in(), Seconds(1), Seconds(1)).forward.value(),
              (q_in.latency + o_out.latency + (q_in.transfer + o_out.transfer) * 2.0).value(), 1e-15);
  EXPECT_GT(q_in.transfer.value(), o_out.transfer.value());  // Q, K, V outweigh the output

  // Attention: 4 heads over 32768 causal queries (the ring's 16 heads of 8192 queries at its
  // average context see the same score positions: a quarter of the triangle either way).
  const cost_models::ExecutionModel xr = cost_models::resolve_execution(e);
  const cost_models::RooflineCompute& rc = xr.roofline();
  const auto t = cost_models::layer_times(xr, e.model, e.plan, 8192, 32768, false, 0);
  EXPECT_NEAR(t.forward_ops.attention_core.value(), rc.flash_forward(4, 32768, 32768, 128, true, 0).value(), 1e-15);
  // Two copies of every exchanged tensor (read and write, 2 bytes each) forward and backward:
  // 8192 tokens x (2 x 2048 + 2 x 512) elements of this rank's Q, K, V and output.
  const auto tr = cost_models::layer_times(xr, ring.model, ring.plan, 8192, attention_context(ring), false, 0);
  const double copies = 8.0 * 8192 * (2 * 2048 + 2 * 512);
  EXPECT_NEAR((t.forward_ops.dropout_residual - tr.forward_ops.dropout_residual).value(),
              rc.memory_bound(Bytes(copies), 8).value(), 1e-15);
  EXPECT_NEAR(t.cp_exchange_copies.value(), rc.memory_bound(Bytes(copies), 8).value(), 1e-15);
  EXPECT_NEAR((t.backward_ops.dropout_residual - tr.backward_ops.dropout_residual).value(),
              rc.memory_bound(Bytes(copies), 8).value(), 1e-15);

  // In flight: one layer's Q, K and V twice (going out, coming back): 2 x 48 MiB.
  Experiment no_cp = e;
  no_cp.plan.cp = 1;
  no_cp.plan.dp = e.plan.dp * e.plan.cp;
  EXPECT_NEAR((cost_models::buffer_bytes(k.x, e.model, e.plan, 0) - cost_models::buffer_bytes(k.x, no_cp.model, no_cp.plan, 0)).value(),
              96 * mib, 1.0);

  // The launch line asks Megatron-Core for it.
  const ExecutablePlan plan = executable(e);
  EXPECT_NE(megatron_arguments(plan).find("--context-parallel-size 4 --cp-comm-type a2a"), std::string::npos);
  const Prediction p = predict(e, EngineKind::analytic);
  EXPECT_TRUE(check_prediction(p).empty()) << check_prediction(p).front();
  EXPECT_GT(p.breakdown.cp_comm.value(), 0.0);
}

TEST(ContextParallel, AllToAllRules) {
  Experiment e = cp_plan(4);
  e.plan.cp_comm = CpComm::all_to_all;
  auto broken = [&](const PlanSpec& p) { return check_plan(e.model, e.cluster, e.training, p, p.gpus()); };
  EXPECT_FALSE(broken(e.plan));
  // tp 8 leaves each rank 4 query heads and 1 key/value head: cp 4 cannot split the latter.
  PlanSpec p = e.plan;
  p.tp = 8;
  p.dp = 1;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp");
  EXPECT_NE(broken(p)->rule.find("1 key/value heads"), std::string::npos) << broken(p)->rule;
  // PyTorch's context parallelism has ring and all-gather rotaters only.
  p = as_torchtitan(e.plan);
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_comm");
  EXPECT_NE(broken(p)->rule.find("megatron-core, deepspeed or generic do"), std::string::npos) << broken(p)->rule;
  // Sliding windows: refused on the ring, run whole by the all-to-all.
  e.model.attention_window = AttentionWindowSpec{.size = 4096, .pattern = {}};
  EXPECT_FALSE(broken(e.plan));
  p = e.plan;
  p.cp_comm = CpComm::ring;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp");
}

// DeepSpeed-Ulysses (Megatron-DeepSpeed --ds-sequence-parallel-size): the all-to-all exchange
// only, tp 1, one copy of each exchanged tensor (_SeqAllToAll) where Transformer Engine makes two.
TEST(ContextParallel, DeepSpeedUlyssesIsTheAllToAllExchangeAtTp1) {
  Experiment e = cp_plan(4);
  e.plan.tp = 1;
  e.plan.dp = 4;
  e.plan.attention = AttentionImpl::flash2;
  e.plan.cp_comm = CpComm::all_to_all;
  Experiment ds = e;
  ds.plan.framework = Framework::deepspeed;
  auto broken = [&](const PlanSpec& p) { return check_plan(ds.model, ds.cluster, ds.training, p, p.gpus()); };
  ASSERT_FALSE(broken(ds.plan)) << broken(ds.plan)->field << ": " << broken(ds.plan)->rule;
  PlanSpec p = ds.plan;
  p.cp_comm = CpComm::ring;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_comm");
  p = ds.plan;
  p.tp = 2;
  p.dp = 2;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.tp");
  // The copies: 8192 tokens x (2 x 4096 + 2 x 1024) elements, read and written once (DeepSpeed)
  // or twice (Megatron-Core), 2 bytes each; the exchange itself is the same.
  validate_experiment(ds);
  validate_experiment(e);
  const cost_models::ExecutionModel xd = cost_models::resolve_execution(ds), xm = cost_models::resolve_execution(e);
  const cost_models::RooflineCompute& rc = xd.roofline();
  Experiment ring = e;
  ring.plan.cp_comm = CpComm::ring;
  const auto base = cost_models::layer_times(xm, ring.model, ring.plan, 8192, attention_context(ring), false, 0);
  const auto tm = cost_models::layer_times(xm, e.model, e.plan, 8192, 32768, false, 0);
  const double elements = 8192.0 * (2 * 4096 + 2 * 1024);
  EXPECT_NEAR((tm.forward_ops.dropout_residual - base.forward_ops.dropout_residual).value(),
              xm.roofline().memory_bound(Bytes(8.0 * elements), 8).value(), 1e-15);
  Experiment ds_ring = ds;  // the same layer under DeepSpeed's traffic table, without the exchange's copies
  ds_ring.plan.cp_comm = CpComm::ring;
  const auto dbase = cost_models::layer_times(xd, ds_ring.model, ds_ring.plan, 8192, 32768, false, 0);
  const auto td = cost_models::layer_times(xd, ds.model, ds.plan, 8192, 32768, false, 0);
  EXPECT_NEAR((td.forward_ops.dropout_residual - dbase.forward_ops.dropout_residual).value(),
              rc.memory_bound(Bytes(4.0 * elements), 8).value(), 1e-15);
  // Its launch flag.
  const ExecutablePlan plan = executable(ds);
  const std::string args = megatron_arguments(plan);
  EXPECT_NE(args.find("--ds-sequence-parallel-size 4"), std::string::npos) << args;
  EXPECT_EQ(args.find("--context-parallel-size"), std::string::npos) << args;
}

// Selective recompute re-runs the core attention, and with it the exchange inside it (Megatron-Core
// checkpoints TE's DotProductAttention whole) and an all-to-all's copies: what of the forward's
// exchange was exposed is exposed again (a ring's, hidden under its blocks, costs nothing more;
// an all-gather's is all exposed).
TEST(ContextParallel, SelectiveRecomputeRerunsTheAllToAllExchange) {
  Experiment e = cp_plan(4);
  e.plan.cp_comm = CpComm::all_to_all;
  e.plan.recompute = Recompute::selective;
  e.plan.sequence_parallel = true;
  validate_experiment(e);
  const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
  const ComputeCosts cc = compute_costs(e, x);
  const CommModel comm(e.cluster);
  const CostInputs in{e, x, cc, comm};
  const LayerCompute lc = cc.layer(8192, 32768, false, 0);
  const CpLayerComm cpc = cp_comm_per_layer(in, lc.attention_forward, lc.attention_backward);
  const LayerStep step = layer_step(in, lc, 8192, tp_comm_per_layer(in, 8192), Seconds(0), 0.0);
  EXPECT_NEAR(step.backward_cp.value(), (cpc.backward + cpc.forward).value(), 1e-15);
  EXPECT_GT(cpc.forward.value(), 0.0);
  const auto t = cost_models::layer_times(x, e.model, e.plan, 8192, 32768, false, 0);
  EXPECT_GT(t.cp_exchange_copies.value(), 0.0);
  EXPECT_NEAR(lc.recompute.value(), (t.forward_ops.attention_core + t.cp_exchange_copies).value(), 1e-15);
  // A variant's layer: its exchange as costed alone, and the backward's exchange its step charges.
  auto variant = [&](const Experiment& v) {
    const cost_models::ExecutionModel xv = cost_models::resolve_execution(v);
    const ComputeCosts cv = compute_costs(v, xv);
    const CostInputs iv{v, xv, cv, comm};
    const LayerCompute lv = cv.layer(8192, 32768, false, 0);
    return std::make_pair(cp_comm_per_layer(iv, lv.attention_forward, lv.attention_backward),
                          layer_step(iv, lv, 8192, tp_comm_per_layer(iv, 8192), Seconds(0), 0.0).backward_cp);
  };
  // Without recompute only the backward's own exchange.
  Experiment none = e;
  none.plan.recompute = Recompute::none;
  const auto [cn, bn] = variant(none);
  EXPECT_NEAR(bn.value(), cn.backward.value(), 1e-15);
  // The all-gather variant: its gather runs again in the recompute, beside the backward's own.
  Experiment ag = e;
  ag.plan.cp_comm = CpComm::all_gather;
  const auto [ca, ba] = variant(ag);
  ASSERT_GT(ca.forward.value(), 0.0);
  EXPECT_NEAR(ba.value(), (ca.backward + ca.forward).value(), 1e-15);
}

// Megatron-Core's hierarchical a2a+p2p (--hierarchical-context-parallel-sizes 2 2): cp 4 as
// all-to-alls inside pairs of consecutive cp ranks (2 GPUs apart at tp 2) and a ring over the 2
// pairs (4 GPUs apart). Per rank: 8192 tokens of 16 query and 4 key/value heads before the
// exchange, 16384 tokens of 8 and 2 after it; the ring's step moves a block of that: 2 x 2 bytes x
// 16384 x 2 x 128 = 16 MiB, the rank's own K/V bytes.
TEST(ContextParallel, HierarchicalAllToAllThenRing) {
  Experiment e = cp_plan(4);
  e.plan.cp_comm = CpComm::all_to_all_ring;
  e.plan.cp_a2a = 2;
  validate_experiment(e);
  EXPECT_EQ(e.plan.cp_heads(), 2);
  EXPECT_EQ(e.plan.cp_ring(), 2);
  // The ring over 2 groups: context (32768 + 16384) / 2.
  EXPECT_EQ(attention_context(e), 24576);
  Inputs k(e);
  const double mib = 1048576.0;
  CommGroup pair_a2a;  // 2 ranks 2 apart in one node, both TP ranks' pairs at once
  pair_a2a.ranks = 2;
  pair_a2a.ranks_per_node = 2;
  pair_a2a.nodes = 1;
  pair_a2a.concurrent_groups = 2;
  auto a2a = [&](double bytes) {
    const CommEstimate est = k.comm.estimate(Collective::all_to_all, Bytes(bytes), pair_a2a);
    return est.latency.value() + est.transfer.value() / k.x.calibrated.all_to_all_efficiency_scale;
  };
  CommGroup ring_pair = pair_a2a;  // ring neighbours 4 apart, still in one 8-GPU node; 4 pairs at once
  ring_pair.concurrent_groups = 4;
  const Seconds step = k.comm.time(Collective::send_recv, Bytes(16 * mib), ring_pair);
  const Seconds step_b = k.comm.time(Collective::send_recv, Bytes(32 * mib), ring_pair);
  // Attention blocks too short to hide anything: the ring's one step exposed whole.
  const CpLayerComm c = cp_comm_per_layer(k.in(), Seconds(0), Seconds(0));
  EXPECT_NEAR(c.forward.value(), a2a(48 * mib) + a2a(32 * mib) + step.value(), 1e-15);
  EXPECT_NEAR(c.backward.value(), a2a(48 * mib) + a2a(32 * mib) + step_b.value(), 1e-15);
  // Blocks long enough: the all-to-alls only.
  const CpLayerComm hidden = cp_comm_per_layer(k.in(), Seconds(1), Seconds(1));
  EXPECT_NEAR(hidden.forward.value(), a2a(48 * mib) + a2a(32 * mib), 1e-15);
  // Attention: 8 heads of 16384 queries against the ring's context.
  const cost_models::ExecutionModel xr = cost_models::resolve_execution(e);
  const auto t = cost_models::layer_times(xr, e.model, e.plan, 8192, 24576, false, 0);
  EXPECT_NEAR(t.forward_ops.attention_core.value(), xr.roofline().flash_forward(8, 16384, 24576, 128, true, 0).value(),
              1e-15);
  // Launch flags and rules.
  const ExecutablePlan plan = executable(e);
  EXPECT_NE(megatron_arguments(plan).find("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2"),
            std::string::npos)
      << megatron_arguments(plan);
  auto broken = [&](const PlanSpec& p) { return check_plan(e.model, e.cluster, e.training, p, p.gpus()); };
  PlanSpec p = e.plan;
  p.cp_a2a = 4;  // the whole of cp: that is plain all-to-all
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_a2a");
  p.cp_a2a = 3;
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_a2a");
  p = e.plan;
  p.cp_comm = CpComm::ring;  // cp_a2a without a2a+p2p
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_a2a");
  p = as_torchtitan(e.plan);
  ASSERT_TRUE(broken(p));
  EXPECT_EQ(broken(p)->field, "plan.cp_comm");
}
