// Each coster of cost_workload on its own, against hand computations: with a compute source of
// round, known times (and a memory pass of 1 ns per byte), what each coster adds is countable.
#include "sim/costers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <tuple>

#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "tests/sim/costed.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {

// 1 ms forward, 2 ms backward, 1 ms recompute per layer; edges 0.1/0.2 ms (embedding) and
// 0.5/1 ms (head); the optimizer 1 ns per parameter; a memory pass 1 ns per byte, launches free.
ComputeCosts round_compute() {
  ComputeCosts c;
  c.layer = [](int, int, bool, int) { return LayerCompute{Seconds(1e-3), Seconds(2e-3), Seconds(1e-3), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)}; };
  c.edges = [](int) { return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(1e-3), Seconds(0), Seconds(0), Seconds(0)}; };
  c.optimizer = [](double params) { return Seconds(params * 1e-9); };
  c.memory_bound = [](Bytes b, int) { return Seconds(b.value() * 1e-9); };
  return c;
}

// GPT-3 1.3B (24 layers, h 2048, seq 2048) in bf16 on the 8 GPUs of one Selene node: tp 2 x pp 2 x
// dp 2, one micro-batch of 1 per pipeline per step unless a test changes it.
Experiment small() {
  Experiment e = load_experiment(resolve_scenario("experiments", "sc21-table1-1.7b"));
  e.model = load_model(resolve_scenario("models", "gpt3-1.3b"));
  e.gpus = 8;
  e.training = TrainingSpec{.global_batch = 2, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  e.plan = PlanSpec{};  // one micro-batch of 1, 1F1B, no recompute, no ZeRO, Megatron-LM
  e.plan.tp = e.plan.pp = e.plan.dp = 2;
  validate_experiment(e);
  return e;
}

// small() as an MoE model: 4 experts in every other layer on tp 1 x pp 2 x dp 4 with ep 4, one
// micro-batch per pipeline; the caller sets what it tests and validates.
Experiment small_moe() {
  Experiment e = small();
  e.model.moe = MoeSpec{.experts = 4, .top_k = 2, .capacity_factor = 1.25, .every = 2};
  e.plan.tp = 1;
  e.plan.dp = 4;
  e.plan.ep = 4;
  e.training.global_batch = 4;
  return e;
}

// A layer whose GEMMs TP overlap hides collectives behind: 1 ms forward, 2 ms backward; QKV
// 0.01 ms (shorter than its all-gather), projection, FC1 and FC2 1 ms each, both passes.
LayerCompute overlap_layer(int, int, bool, int) {
  LayerCompute lc{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  lc.gemm_forward = {Seconds(1e-5), Seconds(1e-3), Seconds(1e-3), Seconds(1e-3)};
  lc.gemm_backward = lc.gemm_forward;
  return lc;
}

// One collective of `c` s overlapped with a GEMM of `g` s on tp 2 (two chunks): max(c / 2, c - g)
// exposed, and the hidden part pays 24 / (108 - 24) more (Selene's A100: 108 SMs, 24 CTAs).
double one(double c, double g) {
  const double f = 24.0 / 84.0;
  const double exposed = std::max(c / 2, c - g);
  return exposed + f * std::min(c - exposed, g);
}

struct Costed : fixtures::Costed {
  explicit Costed(Experiment ex) : fixtures::Costed(std::move(ex), round_compute()) {}
};

// An experiment whose layers are overlap_layer's, its chunks costed, and the times of its TP
// all-gather and reduce-scatter of one (1 x 2048 x 2048) bf16 activation.
struct OverlapCosted : Costed {
  double ag = 0, rs = 0;
  explicit OverlapCosted(Experiment ex) : Costed(std::move(ex)) {
    compute.layer = overlap_layer;
    cost_layer_chunks(in(), c);
    const CommGroup tp = plan_groups(e.plan, e.cluster).tp;
    const Bytes act(2.0 * 2048 * 2048);
    ag = comm.time(Collective::all_gather, act, tp).value();
    rs = comm.time(Collective::reduce_scatter, act, tp).value();
  }
};

}  // namespace

TEST(CostLayerChunks, TwelveLayersPerStagePlusTheGradientPass) {
  // 12 layers a stage: 12 ms forward, 24 ms backward + the accumulation pass of Megatron's fp32
  // main grads, 10 bytes per parameter at 1 ns per byte.
  Costed k(small());
  cost_layer_chunks(k.in(), k.c);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(k.c.chunk[s][0][0].forward.value(), 12e-3, 1e-12);
    EXPECT_NEAR(k.c.chunk[s][0][0].backward.value(), 24e-3 + k.params(s) * 10e-9, 1e-9) << s;
    EXPECT_NEAR(k.c.chunk[s][0][0].recompute.value(), 12e-3, 1e-12);  // what compute.layer returned
  }
  // Each layer's forward and backward carry two TP all-reduces of the (1, 2048, 2048) activation.
  const CommGroup tp = plan_groups(k.e.plan, k.e.cluster).tp;
  const Seconds per_layer = 2.0 * k.comm.time(Collective::all_reduce, Bytes(2.0 * 2048 * 2048), tp);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_tp_comm.value(), 12 * per_layer.value(), 1e-12);
}

TEST(CostLayerChunks, GradientsFreedBetweenStepsSkipTheFirstAccumulation) {
  // PyTorch (set_to_none): the first micro-batch creates the gradients; of m = 4 micro-batches
  // three add into them, 3 x 4 fp32 bytes (read, read, write) per parameter: on average 3/4 x 12.
  Experiment e = small();
  e.plan.framework = Framework::pytorch;
  e.training.global_batch = 8;  // 4 micro-batches per pipeline
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward.value(), 24e-3 + k.params(0) * 12e-9 * 3 / 4, 1e-9);
  e.training.global_batch = 2;  // one micro-batch: no accumulation at all
  Costed one(e);
  cost_layer_chunks(one.in(), one.c);
  EXPECT_NEAR(one.c.chunk[0][0][0].backward.value(), 24e-3, 1e-12);
}

TEST(CostEdges, EmbeddingFirstHeadLastNoneForTeraPipe) {
  Costed k(small());
  cost_layer_chunks(k.in(), k.c);
  cost_edges(k.in(), k.c);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward.value(), 12e-3 + 1e-4, 1e-12);   // + embedding
  EXPECT_NEAR(k.c.chunk[1][0][0].forward.value(), 12e-3 + 5e-4, 1e-12);   // + head and loss
  Experiment t = small();
  t.plan.framework = Framework::terapipe;
  t.plan.schedule = Schedule::gpipe;
  Costed tk(t);
  cost_layer_chunks(tk.in(), tk.c);
  cost_edges(tk.in(), tk.c);
  EXPECT_NEAR(tk.c.chunk[0][0][0].forward.value(), 12e-3, 1e-12);
  EXPECT_NEAR(tk.c.chunk[1][0][0].forward.value(), 12e-3, 1e-12);
}

TEST(CostEdges, MtpModulesRunWithTheHeadOnTheLastStageOnly) {
  // Two MTP modules on GPT-3 1.3B (tp 2 x pp 2): the last stage runs two more layers (1 ms
  // forward, 2 ms backward each) and two modules' own work (0.3 / 0.6 ms each here) beside its
  // head; each module looks up embeddings (one TP all-reduce forward) and passes through the head
  // again (one all-reduce backward). The first stage is unchanged.
  Experiment e = small();
  e.plan.framework = Framework::generic;
  Experiment with = e;
  with.model.mtp_layers = 2;
  ComputeCosts cc = round_compute();
  cc.edges = [](int) { return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(1e-3), Seconds(3e-4), Seconds(6e-4), Seconds(0)}; };
  fixtures::Costed a(e, cc), b(with, cc);
  for (auto* k : {&a, &b}) {
    cost_layer_chunks(k->in(), k->c);
    cost_edges(k->in(), k->c);
  }
  EXPECT_NEAR(b.c.chunk[0][0][0].forward.value(), a.c.chunk[0][0][0].forward.value(), 1e-15);
  EXPECT_NEAR(b.c.chunk[0][0][0].backward.value(), a.c.chunk[0][0][0].backward.value(), 1e-15);
  EXPECT_NEAR(b.c.chunk[1][0][0].forward.value() - a.c.chunk[1][0][0].forward.value(), 2 * 1e-3 + 2 * 3e-4, 1e-12);
  // Backward: the layers, the modules, and the gradient pass over the stage's extra parameters
  // (generic: fp32 main grads, 10 bytes each at 1 ns per byte, every micro-batch).
  const double extra_params = b.params(1) - a.params(1);
  EXPECT_GT(extra_params, 0.0);
  EXPECT_NEAR(b.c.chunk[1][0][0].backward.value() - a.c.chunk[1][0][0].backward.value(),
              2 * 2e-3 + 2 * 6e-4 + extra_params * b.x.bytes.accumulate * 1e-9, 1e-9);
  const CommGroup tp = plan_groups(e.plan, e.cluster).tp;
  const Bytes act(2.0 * 2048 * 2048);
  const double ar = b.comm.time(Collective::all_reduce, act, tp).value();
  const double ag = b.comm.time(Collective::all_gather, act, tp).value();
  const double ar2 = b.comm.time(Collective::all_reduce, act * 2.0, tp).value();
  // Each extra layer carries two all-reduces each way; each module forward its embedding's
  // all-reduce and its projection's output all-gather, backward the head's input-gradient
  // all-reduce and the projection's 2h-wide one (no sequence parallelism here).
  EXPECT_NEAR(b.c.chunk[1][0][0].forward_tp_comm.value() - a.c.chunk[1][0][0].forward_tp_comm.value(),
              2 * 2 * ar + 2 * (ar + ag), 1e-12);
  EXPECT_NEAR(b.c.chunk[1][0][0].backward_tp_comm.value() - a.c.chunk[1][0][0].backward_tp_comm.value(),
              2 * 2 * ar + 2 * (ar + ar2), 1e-12);
  // The extra parameters by hand: two MoE-free layers of GPT-3 1.3B split over tp 2 (12 h^2 + 13 h
  // with the biases and two LayerNorms, QKV / projection / FFN split, biases of the row-parallel
  // layers and norms kept whole), two 2h x h projections over tp 2 and six LayerNorms, and the
  // shared embedding the last stage now holds (tied: Megatron's copy was there already).
  EXPECT_NEAR(extra_params,
              2 * cost_models::layer_parameters_on_gpu(with.model, with.plan, 0).total() +
                  2 * (2.0 * 2048 * 2048 / 2 + 3 * 2 * 2048.0),
              1.0);
  // Megatron-Core's "...|mL" layout: every decoder layer on stage 0, the last stage holding one
  // MTP module and the loss alone: its layer, the module's own work and the head.
  Experiment ml = e;
  ml.model.mtp_layers = 1;
  ml.plan.stage_layers = {24, 0};
  validate_experiment(ml);
  fixtures::Costed m(ml, cc);
  cost_layer_chunks(m.in(), m.c);
  cost_edges(m.in(), m.c);
  EXPECT_NEAR(m.c.chunk[0][0][0].forward.value(), 24e-3 + 1e-4, 1e-12);
  EXPECT_NEAR(m.c.chunk[1][0][0].forward.value(), 1e-3 + 3e-4 + 5e-4, 1e-12);
}

TEST(CostEdges, DeferredHeadWeightGradientsLeaveTheBackwardForTheFlush) {
  // small() on Megatron-Core with 4 micro-batches a step; the head's backward is 1 ms of which its
  // weight-gradient GEMM 0.4 ms. Deferring every micro-batch's (wgrad_deferral_limit 0) takes
  // 0.4 ms out of each last-stage backward and puts 4 x 0.4 ms after the stage's last backward;
  // a limit of 3 defers three of the four: 0.3 ms less on average, 1.2 ms deferred. The first
  // stage is untouched.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.training.global_batch = 8;
  validate_experiment(e);
  ComputeCosts cc = round_compute();
  cc.edges = [](int) {
    return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(1e-3), Seconds(0), Seconds(0), Seconds(4e-4)};
  };
  Experiment all = e, three = e;
  all.plan.defer_embedding_wgrad = three.plan.defer_embedding_wgrad = true;
  three.plan.wgrad_deferral_limit = 3;
  validate_experiment(all);
  validate_experiment(three);
  fixtures::Costed a(e, cc), b(all, cc), d(three, cc);
  for (auto* k : {&a, &b, &d}) {
    cost_layer_chunks(k->in(), k->c);
    cost_edges(k->in(), k->c);
  }
  EXPECT_NEAR(a.c.chunk[1][0][0].backward.value() - b.c.chunk[1][0][0].backward.value(), 4e-4, 1e-15);
  EXPECT_NEAR(a.c.chunk[1][0][0].backward.value() - d.c.chunk[1][0][0].backward.value(), 3e-4, 1e-15);
  EXPECT_NEAR(b.c.chunk[0][0][0].backward.value(), a.c.chunk[0][0][0].backward.value(), 1e-15);
  EXPECT_EQ(a.c.deferred_wgrad_of(1), Seconds(0));
  EXPECT_EQ(b.c.deferred_wgrad_of(0), Seconds(0));
  EXPECT_NEAR(b.c.deferred_wgrad_of(1).value(), 4 * 4e-4, 1e-15);
  EXPECT_NEAR(d.c.deferred_wgrad_of(1).value(), 3 * 4e-4, 1e-15);
}

TEST(CostActivationOffload, HalfOfEachChunkOverPcie) {
  // Half of a stage's 12 layers' activations each way at the host link's 25 GB/s (per layer:
  // the memory model's bytes for this plan).
  Experiment e = small();
  e.plan.offload.activations = 0.5;
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  cost_activation_offload(k.in(), k.c);
  const double per_layer = cost_models::activation_bytes_per_layer(k.x, e.model, e.plan, 1, 2048).value();
  const double expected = 12 * 0.5 * per_layer / e.cluster.host.pcie_bandwidth.value();
  EXPECT_NEAR(k.c.chunk[0][0][0].offload_out.value(), expected, expected * 1e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].offload_in.value(), expected, expected * 1e-12);
}

TEST(WindowedOffloadWait, EachCopyAgainstItsWindowsLayers) {
  // 80 layers, 40 offloaded: windows of 2 layers; the first copy starts one layer into its window.
  // A 3 ms copy beside 1 ms layers: 3 - 1 = 2 ms, then 39 x (3 - 2) = 39 ms.
  EXPECT_NEAR(windowed_offload_wait(80, 40, Seconds(3e-3), Seconds(1e-3)).value(), 41e-3, 1e-12);
  // 10 layers, 4 offloaded: windows 3, 3, 2, 2 (the remainder on the first); a 5 ms copy beside
  // 1 ms layers waits 5 - 2, 5 - 3, 5 - 2, 5 - 2 = 11 ms.
  EXPECT_NEAR(windowed_offload_wait(10, 4, Seconds(5e-3), Seconds(1e-3)).value(), 11e-3, 1e-12);
  // Copies shorter than their windows' compute are hidden; nothing offloaded waits for nothing.
  EXPECT_EQ(windowed_offload_wait(126, 95, Seconds(8e-3), Seconds(13e-3)).value(), 0.0);
  EXPECT_EQ(windowed_offload_wait(80, 0, Seconds(3e-3), Seconds(1e-3)).value(), 0.0);
}

TEST(CostActivationOffload, MegatronCoreWaitsOnWindowedCopiesInstead) {
  // Megatron-Core offloads through Transformer Engine's windowed handler: no chunk-sized side
  // transfers, and the compute stream waits where a layer's copy outlasts its window. One stage
  // of 24 layers (tp 2, dp 4), 12 offloaded: windows of 2 layers, each layer 1 ms forward and 2 ms
  // backward (round_compute) with its TP collectives. Over a 25 GB/s host link each layer's copy
  // takes per_layer / 25 GB/s.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.pp = 1;
  e.plan.dp = 4;
  e.plan.offload.activations = 0.5;
  e.training.global_batch = 4;
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const ChunkCosts before = k.c.chunk[0][0][0];
  cost_activation_offload(k.in(), k.c);
  const ChunkCosts& cc = k.c.chunk[0][0][0];
  EXPECT_EQ(cc.offload_out.value(), 0.0);
  EXPECT_EQ(cc.offload_in.value(), 0.0);
  const Seconds copy(cost_models::activation_bytes_per_layer(k.x, e.model, e.plan, 1, 2048).value() /
                     e.cluster.host.pcie_bandwidth.value());
  const Seconds fwd = (before.forward + before.forward_tp_comm) / 24.0;
  const Seconds bwd = (before.backward + before.backward_tp_comm) / 24.0;
  EXPECT_NEAR(cc.forward_offload_wait.value(), windowed_offload_wait(24, 12, copy, fwd).value(), 1e-15);
  EXPECT_NEAR(cc.backward_offload_wait.value(), windowed_offload_wait(24, 12, copy, bwd).value(), 1e-15);
  EXPECT_GT(cc.forward_offload_wait.value(), 0.0);  // the copies (~4 ms) outlast 2 ms windows
}

TEST(CostPipelineTransfers, BytesAsEachFrameworkSendsThem) {
  // One activation (1, 2048, 2048) in bf16 = 8,388,608 bytes; tp 2 ranks per stage.
  const double act = 2.0 * 2048 * 2048;
  auto bytes = [&](Framework f) {
    Experiment e = small();
    e.plan.framework = f;
    Costed k(e);
    cost_pipeline_transfers(k.in(), k.c);
    return std::make_pair(k.c.p2p_forward_bytes[0].value(), k.c.p2p_backward_bytes[0].value());
  };
  // Megatron-LM 2021: 1/t from each rank both ways = one activation per node.
  EXPECT_EQ(bytes(Framework::megatron), std::make_pair(act, act));
  // Megatron-Core: the whole tensor from each rank: t activations.
  EXPECT_EQ(bytes(Framework::megatron_core), std::make_pair(2 * act, 2 * act));
  // DeepSpeed v0.5.4+: 1/t from each rank both ways (is_pipe_partitioned = is_grad_partitioned).
  EXPECT_EQ(bytes(Framework::deepspeed), std::make_pair(act, act));
  // DeepSpeed v0.5.0-v0.5.3 (plan.partitioned_pipe_grads false): the gradient whole from each of
  // the 2 ranks, with no all-gather on arrival; the activation still 1/t and gathered.
  Experiment e = small();
  e.plan.framework = Framework::deepspeed;
  e.plan.partitioned_pipe_grads = false;
  Costed k(e);
  cost_pipeline_transfers(k.in(), k.c);
  EXPECT_EQ(k.c.p2p_forward_bytes[0].value(), act);
  EXPECT_EQ(k.c.p2p_backward_bytes[0].value(), 2 * act);
  EXPECT_EQ(k.c.p2p_backward_tail[0].value(), 0.0);
  EXPECT_GT(k.c.p2p_forward_tail[0].value(), 0.0);
  // Both stages share small()'s one node: the send inside it is Megatron-Core's whole tensor, with
  // no all-gather on arrival (the older engine has nothing to gather), both across nodes and inside.
  Experiment mc = small();
  mc.plan.framework = Framework::megatron_core;
  Costed whole(mc);
  cost_pipeline_transfers(whole.in(), whole.c);
  EXPECT_EQ(k.c.p2p_backward_intra[0].value(), whole.c.p2p_backward_intra[0].value());
  EXPECT_EQ(k.c.p2p_backward[0].value(), whole.c.p2p_backward[0].value());
  EXPECT_GT(k.c.p2p_forward_intra[0].value(), k.c.p2p_backward_intra[0].value() / 2.0);  // 1/2 of it plus a gather
  e.plan.partitioned_pipe_grads = true;  // stated: the default
  Costed d(e);
  cost_pipeline_transfers(d.in(), d.c);
  EXPECT_EQ(d.c.p2p_backward_bytes[0].value(), act);
  EXPECT_GT(d.c.p2p_backward_tail[0].value(), 0.0);
}

TEST(CostDataParallel, OverlappedReductionsLastBucketIsTheFrameworksAndGoesAsItsReduction) {
  // With the reduction overlapped (plan.dp_overlap), what waits for the last backward is the
  // framework's last bucket, reduced as its whole reduction is. Megatron-Core's bucket_size is
  // max(40M, 1M x dp x cp) parameters (distributed_data_parallel.py), whatever the reduce dtype;
  // PyTorch DDP's bucket_cap_mb 25 MiB of gradients; DeepSpeed's overlap_comm its
  // reduce_bucket_size (5e8 elements by default, plan.reduce_bucket when set).
  PlanSpec p;
  p.dp = 8;
  const FrameworkTraits& mcore = framework_traits(Framework::megatron_core);
  EXPECT_DOUBLE_EQ(mcore.overlap_bucket_elements(p, 2.0), 40e6);
  EXPECT_DOUBLE_EQ(mcore.overlap_bucket_elements(p, 4.0), 40e6);
  p.dp = 64;
  p.cp = 2;
  EXPECT_DOUBLE_EQ(mcore.overlap_bucket_elements(p, 4.0), 128e6);
  EXPECT_DOUBLE_EQ(framework_traits(Framework::generic).overlap_bucket_elements(p, 4.0), 25.0 * 1048576 / 4);
  const FrameworkTraits& ds = framework_traits(Framework::deepspeed);
  EXPECT_DOUBLE_EQ(ds.overlap_bucket_elements(p, 2.0), 5e8);
  p.reduce_bucket = 20000000;
  EXPECT_DOUBLE_EQ(ds.overlap_bucket_elements(p, 2.0), 2e7);
  // DeepSpeed's ZeRO-2 at pp 1 (small() on one stage, dp 4, fp16 gradients): its reduction sends
  // every partition's slice to its owner (average_tensor's dist.reduce, v0.5.8-v0.12.3), a
  // reduce-scatter over the shard group, and so does its last bucket, the one holding the word
  // embedding (51200 x 2048 / tp 2 = 52.4M elements of 2 bytes): larger than the 2e7 bucket, which
  // is flushed before it, it goes alone. Its ZeRO-1 all-reduces over dp (buffered_reduce_fallback).
  Experiment e = small();
  e.model.tie_embeddings = false;
  e.plan.framework = Framework::deepspeed;
  e.plan.pp = 1;
  e.plan.dp = 4;
  e.plan.zero = 2;
  e.plan.dp_overlap = true;
  e.plan.reduce_bucket = 20000000;
  e.training.global_batch = 4;
  e.training.dtype = Dtype::fp16;
  validate_experiment(e);
  Costed c(e);
  cost_data_parallel(c.in(), c.c);
  const PlanGroups groups = plan_groups(e.plan, e.cluster);
  ASSERT_GT(c.params(0), 2e7);
  EXPECT_NEAR(c.c.dp_sync_tail[0].value(),
              c.comm.time(Collective::reduce_scatter, Bytes(51200.0 * 2048 / 2 * 2), groups.shard).value(),
              1e-15);
  EXPECT_NEAR(c.c.dp_grad_sync[0].value(),
              c.comm.time(Collective::reduce_scatter, Bytes(c.params(0) * 2), groups.shard).value(), 1e-15);
  e.plan.zero = 1;
  e.plan.dp_overlap = false;
  Costed one(e);
  cost_data_parallel(one.in(), one.c);
  EXPECT_NEAR(one.c.dp_grad_sync[0].value(),
              one.comm.time(Collective::all_reduce, Bytes(one.params(0) * 2), groups.dp).value(), 1e-15);
}

TEST(CostDataParallel, AllReduceOrReduceScatterAsTheFrameworkRunsZero) {
  // dp 2: a ring all-reduce sends 2 (n-1)/n = 1 gradient's worth per rank, a reduce-scatter half
  // of it; Megatron's fp32 main grads are 4 bytes per parameter, DeepSpeed's fp16 grads 2. Bytes
  // per transfer count the node's TP ranks (2). (Untied, so that the stages reduce nothing else;
  // the tied embedding's sum has its own test.)
  Experiment e = small();
  e.model.tie_embeddings = false;
  e.plan.zero = 1;
  Costed mega(e);
  cost_data_parallel(mega.in(), mega.c);
  EXPECT_NEAR(mega.c.dp_grad_sync_bytes[0].value(), mega.params(0) * 4 * 0.5 * 2, 1.0);
  EXPECT_NEAR(mega.c.dp_param_gather_bytes[0].value(), mega.params(0) * 2 * 0.5 * 2, 1.0);
  e.plan.framework = Framework::deepspeed;
  Costed ds(e);
  cost_data_parallel(ds.in(), ds.c);
  EXPECT_NEAR(ds.c.dp_grad_sync_bytes[0].value(), ds.params(0) * 2 * 1.0 * 2, 1.0);  // all-reduce
  const CommGroup dp = plan_groups(e.plan, e.cluster).dp;
  EXPECT_NEAR(ds.c.dp_grad_sync[0].value(),
              ds.comm.time(Collective::all_reduce, Bytes(ds.params(0) * 2), dp).value(), 1e-15);
}

TEST(CostDataParallel, OverlapLeavesTheLastBucket) {
  // With the reduction overlapped, what waits for the backward is the framework's last bucket:
  // torch DDP's 25 MiB for Megatron-LM (SC21 ran --DDP-impl torch) on the last stage; on the
  // first, the bucket holding the word embedding (51200 x 2048 / tp 2) and the positions
  // (2048 x 2048), whose gradients the backward produces last: 56.6M fp32 gradients, more than
  // 25 MiB (a tensor beyond the cap is a bucket of its own). (Untied: no embedding sum.)
  Experiment e = small();
  e.model.tie_embeddings = false;
  e.plan.dp_overlap = true;
  Costed k(e);
  cost_data_parallel(k.in(), k.c);
  const CommGroup dp = plan_groups(e.plan, e.cluster).dp;
  EXPECT_NEAR(k.c.dp_sync_tail[1].value(), k.comm.time(Collective::all_reduce, Bytes(25.0 * 1048576), dp).value(), 1e-15);
  EXPECT_NEAR(k.c.dp_sync_tail[0].value(),
              k.comm.time(Collective::all_reduce, Bytes((51200.0 * 2048 / 2 + 2048.0 * 2048) * 4), dp).value(), 1e-15);
  for (int s = 0; s < 2; ++s) EXPECT_LT(k.c.dp_sync_tail[s], k.c.dp_grad_sync[s]) << s;
}

TEST(CostDataParallel, MegatronCoreBucketsOnlyTheFirstStageAndGivesTheSharedEmbeddingItsOwn) {
  // Megatron-Core, distributed optimizer, reduction overlapped, GPT-3 1.3B (tied) on tp 2 x pp 2 x
  // dp 2, fp32 gradients. Stage 0's last bucket is the shared word embedding alone (51200 x 2048 /
  // 2 = 52.4M; the positions go with the bucket before it); stage 1 is one bucket, its whole
  // gradient reduced after its backward. Both stages also sum the tied embedding's copies after
  // their reduction.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.zero = 1;
  e.plan.dp_overlap = true;
  validate_experiment(e);
  Costed k(e);
  ASSERT_EQ(k.x.bytes.reduce, 4.0);
  cost_data_parallel(k.in(), k.c);
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  const double word = 51200.0 * 2048 / 2;
  const double tied = k.comm.time(Collective::all_reduce, Bytes(word * 4), g.embedding).value();
  EXPECT_NEAR(k.c.dp_sync_tail[0].value(), k.comm.time(Collective::reduce_scatter, Bytes(word * 4), g.shard).value() + tied,
              1e-12);
  EXPECT_NEAR(k.c.dp_sync_tail[1].value(), k.c.dp_grad_sync[1].value(), 1e-15);
  EXPECT_NEAR(k.c.dp_grad_sync[1].value(),
              k.comm.time(Collective::reduce_scatter, Bytes(k.params(1) * 4), g.shard).value() + tied, 1e-12);
}

TEST(CostDataParallel, OverlappedBucketsSlowTheLastBackward) {
  // The buckets reduced beside the last backward hold 24 of Selene's 108 SMs: that backward's
  // computation takes 24 / (108 - 24) longer for as long as they run (at most the backward).
  Experiment e = small();
  e.plan.dp_overlap = true;
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  cost_data_parallel(k.in(), k.c);
  ASSERT_EQ(k.c.dp_overlap_slowdown.size(), std::size_t(e.plan.pp));
  const double contention = 24.0 / (108.0 - 24.0);
  for (int s = 0; s < e.plan.pp; ++s) {
    const ChunkCosts& last = k.c.chunk[std::size_t(s)][0][0];  // one slice
    const double overlapped = (k.c.dp_grad_sync[s] - k.c.dp_sync_tail[s]).value();
    ASSERT_GT(overlapped, 0.0);
    EXPECT_NEAR(k.c.dp_overlap_slowdown[s].value(),
                contention * std::min(overlapped, (last.backward + last.recompute).value()), 1e-15)
        << "stage " << s;
  }
  // Without overlap nothing is charged.
  e.plan.dp_overlap = false;
  Costed plain(e);
  cost_layer_chunks(plain.in(), plain.c);
  cost_data_parallel(plain.in(), plain.c);
  EXPECT_EQ(plain.c.dp_overlap_slowdown_of(0), Seconds(0));
}

TEST(CostDataParallel, ZeroOneReduceScattersTheExpertsToo) {
  // An MoE model (4 experts in every other layer) on tp 2 x pp 2 x dp 2, ep 1: the experts'
  // gradients are reduced over the same two data-parallel ranks. A framework whose distributed
  // optimizer reduce-scatters (the bundled trainer) moves them as a reduce-scatter, one that
  // all-reduces before stepping its shard (DeepSpeed's stage 1) as an all-reduce.
  Experiment e = small();
  e.model.moe = MoeSpec{.experts = 4, .top_k = 2, .capacity_factor = 1.25, .every = 2};
  e.model.tie_embeddings = false;  // no embedding sum beside the data-parallel one
  e.plan.zero = 1;
  const CommGroup dp = plan_groups(e.plan, e.cluster).dp;
  for (const Framework f : {Framework::foresight_train, Framework::deepspeed}) {
    e.plan.framework = f;
    Costed k(e);
    cost_data_parallel(k.in(), k.c);
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0);
    ASSERT_GT(sp.expert, 0.0);
    const double g = k.x.bytes.grad;
    const bool rs = f == Framework::foresight_train;
    const Collective c = rs ? Collective::reduce_scatter : Collective::all_reduce;
    const double expected = k.comm.time(c, Bytes(sp.dense * g), dp).value() + k.comm.time(c, Bytes(sp.expert * g), dp).value();
    EXPECT_NEAR(k.c.dp_grad_sync[0].value(), expected, 1e-12 * expected) << to_string(f);
  }
}

TEST(CostDataParallel, TiedEmbeddingCopiesAreSummedBetweenTheFirstAndLastStage) {
  // GPT-3 1.3B (vocabulary 51,200, hidden 2048, tied) on tp 2 x pp 3 x dp 4 over three DGX A100
  // nodes (tp-dp-pp: each stage's 8 ranks on one node): the first and the last stage each add one
  // all-reduce of their half of the word embedding's gradient, 51,200 x 2048 / 2 = 52.4M values,
  // between two ranks on different nodes; the middle stage nothing. Megatron-LM sums its fp32
  // main grads (4 bytes), DeepSpeed's fp16 path its fp16 grads (2), its bf16 ZeRO optimizer (v0.5,
  // MT-NLG's) its bf16 grads (2) and BF16_Optimizer (plan.bf16_optimizer) its fp32 accumulation (4,
  // though its data-parallel reduction is bf16). Each of the two ranks sends its copy once; the
  // node's TP ranks (2) count in the NIC bytes.
  Experiment e = small();
  e.gpus = 24;
  e.plan.pp = 3;
  e.plan.dp = 4;
  e.training.global_batch = 4;
  validate_experiment(e);
  const double values = 51200.0 * 2048 / 2;
  auto with_and_without = [&](Framework f, Dtype d, bool bf16_optimizer = false) {
    Experiment t = e;
    t.plan.framework = f;
    t.training.dtype = d;
    t.plan.bf16_optimizer = bf16_optimizer;
    Experiment u = t;
    u.model.tie_embeddings = false;  // the same parameters on every stage (the head's own matrix)
    Costed tied(t), untied(u);
    cost_data_parallel(tied.in(), tied.c);
    cost_data_parallel(untied.in(), untied.c);
    return std::make_pair(std::move(tied), std::move(untied));
  };
  const CommGroup g = plan_groups(e.plan, e.cluster).embedding;
  EXPECT_EQ(g.ranks, 2);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.concurrent_groups, 8);  // every GPU of a first-stage node at once
  for (const auto& [f, d, bf16_opt, bytes] :
       {std::tuple{Framework::megatron, Dtype::bf16, false, 4.0}, std::tuple{Framework::deepspeed, Dtype::fp16, false, 2.0},
        std::tuple{Framework::deepspeed, Dtype::bf16, false, 2.0}, std::tuple{Framework::deepspeed, Dtype::bf16, true, 4.0}}) {
    auto [tied, untied] = with_and_without(f, d, bf16_opt);
    const double t = tied.comm.time(Collective::all_reduce, Bytes(values * bytes), g).value();
    for (int s : {0, 2}) {
      EXPECT_NEAR((tied.c.dp_grad_sync[s] - untied.c.dp_grad_sync[s]).value(), t, 1e-12) << to_string(f) << " stage " << s;
      EXPECT_NEAR((tied.c.dp_sync_tail[s] - untied.c.dp_sync_tail[s]).value(), t, 1e-12);
      EXPECT_NEAR((tied.c.dp_grad_sync_bytes[s] - untied.c.dp_grad_sync_bytes[s]).value(), values * bytes * 2, 1.0);
    }
    EXPECT_EQ(tied.c.dp_grad_sync[1], untied.c.dp_grad_sync[1]);
  }
  // A framework that keeps no such copy pair (PyTorch's FSDP entry) sums nothing.
  auto [tied, untied] = with_and_without(Framework::pytorch, Dtype::bf16);
  EXPECT_EQ(tied.c.dp_grad_sync[0], untied.c.dp_grad_sync[0]);
}

TEST(CostOptimizer, EachGpuStepsItsShard) {
  // 1 ns per parameter: without ZeRO a GPU steps every parameter it holds, with ZeRO-1 over dp 2
  // half of them.
  Experiment e = small();
  Costed plain(e);
  cost_optimizer(plain.in(), plain.c);
  EXPECT_NEAR(plain.c.optimizer[1].value(), plain.params(1) * 1e-9, 1e-12);
  e.plan.zero = 1;
  Costed zero(e);
  cost_optimizer(zero.in(), zero.c);
  EXPECT_NEAR(zero.c.optimizer[1].value(), zero.params(1) / 2 * 1e-9, 1e-12);
}

TEST(CostLayerChunks, EdgeChunksMayHoldNoLayers) {
  // Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split:
  // the first stage holds the embedding alone, the last the loss alone. Their chunks cost nothing
  // for layers (1 ms forward, 2 ms backward each here); the middle stages carry all 24 layers.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.tp = 1;
  e.plan.pp = 4;
  e.plan.dp = 2;
  e.plan.stage_layers = {0, 12, 12, 0};
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const double fwd[] = {0.0, 12e-3, 12e-3, 0.0};
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(k.c.chunk[s][0][0].forward.value(), fwd[s], 1e-12) << s;
    EXPECT_GE(k.c.chunk[s][0][0].backward.value(), 2 * fwd[s]) << s;  // plus the stage's accumulation pass
  }
  EXPECT_GT(k.params(0), 0.0);  // the embedding's
}

TEST(CostPipelineTransfers, MegatronCoreInterleavedSendsDoNotBlockTheSender) {
  // overlap_p2p_comm: Megatron-Core's interleaved schedule by default; not its 1F1B, not Megatron-LM's.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.schedule = Schedule::interleaved;
  e.plan.virtual_stages = 2;
  auto blocks = [](const Experiment& ex) {
    Costed k(ex);
    cost_pipeline_transfers(k.in(), k.c);
    return k.c.p2p_blocks_sender;
  };
  EXPECT_FALSE(blocks(e));
  Experiment off = e;
  off.plan.p2p_overlap = false;
  EXPECT_TRUE(blocks(off));
  Experiment plain = e;
  plain.plan.schedule = Schedule::one_f_one_b;
  plain.plan.virtual_stages = 1;
  EXPECT_TRUE(blocks(plain));
  Experiment megatron = e;
  megatron.plan.framework = Framework::megatron;
  EXPECT_TRUE(blocks(megatron));
}

TEST(CostOptimizer, Mxfp8ParametersAreQuantizedAgainEachStep) {
  // Megatron-Core's MXFP8 parameters (fp8_param_gather with the MXFP8 recipe): after the bf16
  // all-gather every rank quantizes all its layers' weights again, both usages and the scales:
  // 4 + 2/32 bytes per parameter at 1 ns per byte, beyond the shard's step (1 ns per parameter,
  // ZeRO-1 over dp 2). Current scaling gathers FP8 and has no such pass. (The 1.3B model's 12
  // layers a stage, h 2048: 12 x (12 h^2 + 13 h) parameters, over tp 2.)
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.zero = 1;
  e.plan.fp8_param_gather = true;
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::mxfp8;
  Costed mx(e);
  cost_optimizer(mx.in(), mx.c);
  const double h = 2048, layer = (12 * h * h + 13 * h) / 2;  // 4h^2 + 2 h x 4h weights, their biases and two norms
  double layers = 0;
  for (int l : cost_models::stage_layers(e.model, e.plan, 1)) layers += cost_models::layer_parameters_on_gpu(e.model, e.plan, l).total();
  EXPECT_NEAR(layers, 12 * layer, 12 * 2 * h);  // the norms are replicated over tp, not split
  EXPECT_NEAR(mx.c.optimizer[1].value(), mx.params(1) / 2 * 1e-9 + (4.0 + 2.0 / 32) * layers * 1e-9, 1e-12);
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  Costed cs(e);
  cost_optimizer(cs.in(), cs.c);
  EXPECT_NEAR(cs.c.optimizer[1].value(), cs.params(1) / 2 * 1e-9, 1e-12);
}

TEST(CostLayerChunks, TensorParallelOverlapExposesWhatTheGemmsCannotHide) {
  // Megatron-Core with sequence parallelism and --tp-comm-overlap on tp 2: per layer and pass,
  // all-gather before QKV and FC1, reduce-scatter after the projection and FC2, each split in
  // tp = 2 chunks: max(c / 2, c - g) exposed, and the hidden part pays 24 / (108 - 24) more
  // (Selene's A100: 108 SMs). GEMMs here: QKV 0.01 ms (shorter than its all-gather), the others
  // 1 ms (longer).
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.sequence_parallel = true;
  e.plan.tp_overlap = true;
  validate_experiment(e);
  const OverlapCosted k(e);
  const double ag = k.ag, rs = k.rs;
  ASSERT_GT(ag, 1e-5);  // the QKV all-gather outlasts its GEMM
  ASSERT_LT(rs, 1e-3);
  const double per_layer = one(ag, 1e-5) + one(rs, 1e-3) + one(ag, 1e-3) + one(rs, 1e-3);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_tp_comm.value(), 12 * per_layer, 1e-12);
  // Without the overlap: 2 all-gathers + 2 reduce-scatters per layer, all exposed.
  e.plan.tp_overlap = false;
  Costed blocking(e);
  cost_layer_chunks(blocking.in(), blocking.c);
  EXPECT_NEAR(blocking.c.chunk[0][0][0].forward_tp_comm.value(), 12 * 2 * (ag + rs), 1e-12);
  EXPECT_LT(k.c.chunk[0][0][0].forward_tp_comm, blocking.c.chunk[0][0][0].forward_tp_comm);
}

TEST(CostLayerChunks, ParallelBlockSyncsOncePerDirection) {
  // A parallel block (GPT-NeoX's gpt_j_residual) sums the attention and MLP partial outputs before
  // one all-reduce: one per layer and direction instead of two.
  Experiment e = small();
  e.model.parallel_block = true;
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const CommGroup tp = plan_groups(e.plan, e.cluster).tp;
  const double ar = k.comm.time(Collective::all_reduce, Bytes(2.0 * 2048 * 2048), tp).value();
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_tp_comm.value(), 12 * ar, 1e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_tp_comm.value(), 12 * ar, 1e-12);
  // With TP overlap: one all-gather hidden behind QKV + FC1, one reduce-scatter behind
  // projection + FC2 (GEMMs 0.01, 1, 1, 1 ms).
  e.plan.framework = Framework::megatron_core;
  e.plan.sequence_parallel = true;
  e.plan.tp_overlap = true;
  validate_experiment(e);
  Costed o(e);
  o.compute.layer = overlap_layer;
  cost_layer_chunks(o.in(), o.c);
  const Bytes act(2.0 * 2048 * 2048);
  const double ag = o.comm.time(Collective::all_gather, act, tp).value();
  const double rs = o.comm.time(Collective::reduce_scatter, act, tp).value();
  EXPECT_NEAR(o.c.chunk[0][0][0].forward_tp_comm.value(), 12 * (one(ag, 1.01e-3) + one(rs, 2e-3)), 1e-12);
}

TEST(CostOptimizer, ShardedLambAllReducesEachTensorsNorms) {
  // LAMB under ZeRO-1 over dp 2: the shard's step (1 ns per parameter here) plus one all-reduce
  // of two fp32 partial norms for each of the stage's 12 layers x 12 tensors (1,152 bytes).
  Experiment e = small();
  e.training.optimizer = Optimizer::lamb;
  e.plan.zero = 1;
  Costed k(e);
  cost_optimizer(k.in(), k.c);
  const CommGroup shard = plan_groups(e.plan, e.cluster).shard;
  const double norms = k.comm.time(Collective::all_reduce, Bytes(2.0 * 4 * 12 * 12), shard).value();
  EXPECT_NEAR(k.c.optimizer[1].value(), k.params(1) / 2 * 1e-9 + norms, 1e-12);
  EXPECT_GT(norms, 0.0);
}

TEST(CostLayerChunks, CalibratedHostTimesByHand) {
  // A 10 ms slot overhead per micro-batch and stage: 5 ms in each chunk's forward and backward
  // (one chunk here); a 0.5 s step overhead on every stage's optimizer step.
  Experiment e = small();
  Costed k(e);
  k.x.calibrated.slot_overhead = Seconds(0.01);
  k.x.calibrated.step_overhead = Seconds(0.5);
  cost_layer_chunks(k.in(), k.c);
  cost_optimizer(k.in(), k.c);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward.value(), 12e-3, 1e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_host.value(), 5e-3, 1e-12);  // a host wait, apart from the compute
  EXPECT_NEAR(k.c.optimizer[1].value(), k.params(1) * 1e-9 + 0.5, 1e-12);
}

namespace {

// GPT-3 1.3B under ZeRO-3 over dp 4 on one Selene node (pp 1, one micro-batch), with a host time
// per unit and pass, its chunks and sharded parameters costed; beside `plain`, the same without it.
// No SMs are left to contend (sms = overlap CTAs) and no copies are priced (no memory-bound
// model), so the chain's waits are the gathers' and the host's alone.
struct HostCosted {
  Costed z, plain;
  HostCosted(Framework fw, double host_s) : z(experiment(fw)), plain(experiment(fw)) {
    z.x.calibrated.unit_overhead = Seconds(host_s);
    for (Costed* k : {&z, &plain}) {
      k->compute.memory_bound = nullptr;
      // The head's backward (first in the backward) takes 3 ms, longer than the first layer's
      // gather prefetched beside it.
      k->compute.edges = [](int) {
        return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(3e-3), Seconds(0), Seconds(0), Seconds(0)};
      };
      cost_layer_chunks(k->in(), k->c);
      cost_sharded_parameters(k->in(), k->c);
    }
  }
  static Experiment experiment(Framework fw) {
    Experiment e = small();
    e.plan.zero = 3;
    e.plan.framework = fw;
    if (fw == Framework::deepspeed) e.plan.zero3_prefetch = true;  // the complete-trace coordinator (2023)
    e.plan.tp = e.plan.pp = 1;
    e.plan.dp = 4;
    e.gpus = 4;
    e.training.global_batch = 4;
    e.cluster.gpu.sms = 24;
    validate_experiment(e);
    return e;
  }
  const ChunkCosts& with() const { return z.c.chunk[0][0][0]; }
  const ChunkCosts& without() const { return plain.c.chunk[0][0][0]; }
};

}  // namespace

TEST(CostShardedParameters, HostTimePerUnitCostsWhatTheGpuCannotHideItUnder) {
  // 26 units a pass: the embedding (0.1 ms forward, 0.2 backward), 24 layers (1 / 2 ms), the tied
  // head (0.5 / 3 ms, nothing to gather). Host 1.5 ms a unit and pass.
  const HostCosted k(Framework::pytorch, 1.5e-3);
  // Forward, host-bound: unit i starts when the host is done with units 1..i (unit 0's work was
  // done before the pass), at 1.5 i ms (each gather and the previous unit are done by then); the
  // head, last, starts at 37.5 ms and ends at 38. Of that 24.6 ms compute: 13.4 ms waited, the
  // gathers' exposure included.
  EXPECT_NEAR((k.with().forward_host + k.with().forward_dp_comm).value(), 13.4e-3, 1e-9);
  EXPECT_EQ(k.with().forward.value(), k.without().forward.value());  // the host's share apart from the compute
  // The communication's own share is priced as without host work.
  EXPECT_NEAR(k.with().forward_dp_comm.value(), k.without().forward_dp_comm.value(), 1e-12);
  // Backward (head, layers, embedding; the host runs ahead): the 3 ms head and the 2 ms layers keep
  // ahead of a 1.5 ms host: nothing waited.
  EXPECT_NEAR(k.with().backward_host.value(), 0.0, 1e-12);
  EXPECT_NEAR(k.with().backward_dp_comm.value(), k.without().backward_dp_comm.value(), 1e-12);
}

TEST(CostShardedParameters, DeepSpeedBackwardWaitsForTheHostAfterEveryUnit) {
  // DeepSpeed's gradient hooks block the autograd thread (FrameworkTraits::
  // zero3_backward_host_serial): each of the 26 backward units starts 1.5 ms after the previous
  // one ends, its prefetched gather long done: 26 x 1.5 = 39 ms more, less what of the
  // reduce-scatters' backlog the GPU had waited for at the end without host work (the host's
  // gaps drain it now), at most all the communication it had waited for. (Ahead of the GPU, as
  // FSDP's host runs, it would have cost nothing.) The forward runs ahead as above: 13.4 ms waited
  // in all.
  ASSERT_TRUE(cost_models::execution_model(TrainingSpec{}, HostCosted::experiment(Framework::deepspeed).plan)
                  .framework->zero3_backward_host_serial);
  const HostCosted k(Framework::deepspeed, 1.5e-3);
  const double added = k.with().backward_host.value();
  EXPECT_LE(added, 39e-3 + 1e-12);
  EXPECT_GE(added, 39e-3 - k.without().backward_dp_comm.value());
  EXPECT_LT(k.without().backward_dp_comm.value(), 5e-3);
  EXPECT_NEAR((k.with().forward_host + k.with().forward_dp_comm).value(), 13.4e-3, 1e-9);
}

TEST(CostShardedParameters, UnitHostTimeWithNothingShardedGoesThroughTheSameChain) {
  // ZeRO-3 with one rank per shard group: nothing to gather or reduce, the host work per unit
  // priced as with gathers. Forward, 26 units (embedding 0.1 ms, 24 layers of 1 ms, head 0.5 ms)
  // behind a 1.5 ms host, the first unit's work done before the pass: unit i starts at 1.5 i ms,
  // the head at 37.5, ending at 38: 13.4 ms beyond the 24.6 ms compute. Backward (head 1 ms,
  // layers 2 ms, embedding 0.2 ms): the first layer waits for the host until 1.5 ms, 0.5 ms after
  // the head; the layers then keep ahead of it.
  Experiment e = small();
  e.plan.zero = 3;
  e.plan.framework = Framework::pytorch;
  e.plan.tp = e.plan.pp = e.plan.dp = 1;
  e.gpus = 1;
  e.training.global_batch = 1;
  validate_experiment(e);
  Costed z(e);
  z.x.calibrated.unit_overhead = Seconds(1.5e-3);
  Costed plain(e);
  for (Costed* k : {&z, &plain}) {
    cost_layer_chunks(k->in(), k->c);
    cost_sharded_parameters(k->in(), k->c);
  }
  const ChunkCosts &with = z.c.chunk[0][0][0], &without = plain.c.chunk[0][0][0];
  EXPECT_NEAR(with.forward_host.value(), 13.4e-3, 1e-9);
  EXPECT_NEAR(with.backward_host.value(), 0.5e-3, 1e-9);
  EXPECT_EQ(with.forward.value(), without.forward.value());
  EXPECT_EQ(with.forward_dp_comm.value(), 0.0);
  EXPECT_EQ(with.backward_dp_comm.value(), 0.0);
}

TEST(CostShardedParameters, StepSyncPipelinesPayTheHostAloneInTheForwardsThatDoNotGather) {
  // torchtitan's FSDP under a pipeline gathers once per step (fsdp_pipeline_step_sync): of the
  // m = 4 forwards of stage 0 (embedding 0.1 ms, 12 layers of 1 ms, host 1.5 ms a unit) only the
  // first gathers. The other three meet the host alone: unit i starts at 1.5 i ms, the last ends
  // at 19, 12.1 ms computed, 6.9 ms waited. The gathering forward's host share is what its chain
  // adds beyond the gathers' own exposure (the same plan with one micro-batch, m = 1).
  auto costed = [](int global_batch, double fabric_Bps = 0) {
    Experiment e = HostCosted::experiment(Framework::torchtitan);
    e.plan.pp = 2;
    e.plan.dp = 2;
    e.training.global_batch = global_batch;
    if (fabric_Bps > 0) e.cluster.intra.bandwidth = BytesPerSecond(fabric_Bps);
    validate_experiment(e);
    auto k = std::make_unique<Costed>(e);
    k->x.calibrated.unit_overhead = Seconds(1.5e-3);
    k->compute.memory_bound = nullptr;
    k->compute.edges = [](int) {
      return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(3e-3), Seconds(0), Seconds(0), Seconds(0)};
    };
    cost_layer_chunks(k->in(), k->c);
    cost_data_parallel(k->in(), k->c);  // sizes the per-stage sync the step's reduce-scatters join
    cost_sharded_parameters(k->in(), k->c);
    return k;
  };
  ASSERT_TRUE(cost_models::execution_model(TrainingSpec{}, HostCosted::experiment(Framework::torchtitan).plan)
                  .framework->fsdp_pipeline_step_sync);
  const auto one = costed(2), four = costed(8);
  const double first = one->c.chunk[0][0][0].forward_host.value();
  EXPECT_NEAR(four->c.chunk[0][0][0].forward_host.value(), 0.25 * first + 0.75 * 6.9e-3, 1e-9);
  // The gathers hide some of the host's work in the first forward (else the case proves nothing).
  EXPECT_LT(first, 6.9e-3 - 1e-4);
  // On a 2 GB/s fabric each layer's gather (51M bf16 parameters, half of them received) takes
  // longer than the host's 1.5 ms: the gathering forward waits for the gathers alone, and the
  // other three forwards still wait 6.9 ms each for the host.
  const auto slow1 = costed(2, 2e9), slow4 = costed(8, 2e9);
  ASSERT_EQ(slow1->c.chunk[0][0][0].forward_host.value(), 0.0);
  EXPECT_NEAR(slow4->c.chunk[0][0][0].forward_host.value(), 0.75 * 6.9e-3, 1e-9);
}

TEST(CostShardedParameters, DeepSpeedRecomputedLayersPayTheHostTwiceInTheBackward) {
  // Full recompute: each layer's backward unit runs its forward hooks again (2 passes of host
  // work); DeepSpeed's serial backward then waits 2 x 1.5 ms after each of the 24 layers, 1.5 ms
  // after the head and the embedding: 75 ms, less at most what the GPU had waited for on
  // communication without host work.
  Experiment e = HostCosted::experiment(Framework::deepspeed);
  e.plan.recompute = Recompute::full;
  validate_experiment(e);
  Costed z(e), plain(e);
  z.x.calibrated.unit_overhead = Seconds(1.5e-3);
  for (Costed* k : {&z, &plain}) {
    k->compute.memory_bound = nullptr;
    cost_layer_chunks(k->in(), k->c);
    cost_sharded_parameters(k->in(), k->c);
  }
  const double added = z.c.chunk[0][0][0].backward_host.value();
  EXPECT_LE(added, 75e-3 + 1e-12);
  EXPECT_GE(added, 75e-3 - plain.c.chunk[0][0][0].backward_dp_comm.value());
  EXPECT_LT(plain.c.chunk[0][0][0].backward_dp_comm.value(), 5e-3);
}

TEST(CostLayerChunks, BlockRecomputeRerunsOnlyTheFirstLayersOfEachStage) {
  // Full recompute of the first 5 of each stage's 12 layers: 5 ms of recompute (1 ms a layer) and
  // 5 recomputed forwards' TP all-reduces; the forward and backward are unchanged.
  Experiment e = small();
  e.plan.recompute = Recompute::full;
  e.plan.recompute_layers = 5;
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const CommGroup tp = plan_groups(k.e.plan, k.e.cluster).tp;
  const Seconds per_layer = 2.0 * k.comm.time(Collective::all_reduce, Bytes(2.0 * 2048 * 2048), tp);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(k.c.chunk[s][0][0].recompute.value(), 5e-3, 1e-12) << s;
    EXPECT_NEAR(k.c.chunk[s][0][0].forward.value(), 12e-3, 1e-12) << s;
    EXPECT_NEAR(k.c.chunk[s][0][0].recompute_tp_comm.value(), 5 * per_layer.value(), 1e-12) << s;
  }
}

TEST(CostLayerChunks, MicrobatchLevelRecomputeChargesTheMeanPerMicrobatch) {
  // 8 micro-batches per pipeline, pp 2, block of 5 layers, K = 1: stage 0's window is 2, so
  // micro-batches 1, 3, 5, 7 recompute all 12 layers and the others the first 5: on average
  // 5 + 7 x 0.5 = 8.5 ms of recompute per micro-batch; stage 1 (window 1) only the block, 5 ms.
  Experiment e = small();
  e.training.global_batch = 16;
  e.plan.framework = Framework::megatron_core;
  e.plan.recompute = Recompute::full;
  e.plan.recompute_layers = 5;
  e.plan.partial_recompute_microbatches = 1;
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  EXPECT_NEAR(k.c.chunk[0][0][0].recompute.value(), 8.5e-3, 1e-12);
  EXPECT_NEAR(k.c.chunk[1][0][0].recompute.value(), 5e-3, 1e-12);
}

TEST(SimgridPlatform, EachTrafficClassKeepsItsOwnSocketRate) {
  // TeraPipe's 1B layout on p3.16xlarge (25 GbE, NCCL sockets): eight stages per node, each in
  // its own data-parallel ring across eight nodes, so eight GPUs drive the NIC in the gradient
  // all-reduce (0.58 of line rate, NCCL 2.4.7 on 32 GbE, NVIDIA/nccl#209) while a pipeline hop is
  // one GPU's flow (0.95). The NIC links carry 0.95 of 25 Gb/s; a DP ring flow puts 0.95 / 0.58
  // bytes on them per byte, a pipeline flow one.
  const Experiment e = load_experiment(resolve_scenario("experiments", "terapipe-gpt3-1b-p3-gpipe"));
  const CommModel comm(e.cluster);
  const SimgridPlatform pf = simgrid_platform(e, comm);
  EXPECT_NEAR(pf.node_injection.value(), 25e9 / 8 * 0.95, 1e-6 * 25e9 / 8);
  EXPECT_NEAR(pf.dp_wire_factor, 0.95 / 0.58, 1e-12);
  EXPECT_DOUBLE_EQ(pf.pp_wire_factor, 1.0);
  // On InfiniBand (Selene) both classes run at the RDMA rate: no factor.
  const Experiment ib = load_experiment(resolve_scenario("experiments", "sc21-table1-145b"));
  const SimgridPlatform pi = simgrid_platform(ib, CommModel(ib.cluster));
  EXPECT_DOUBLE_EQ(pi.dp_wire_factor, 1.0);
  EXPECT_DOUBLE_EQ(pi.pp_wire_factor, 1.0);
}

TEST(CostLayerChunks, BatchFirstSequenceParallelCopiesTheActivationAroundEachCollective) {
  // PyTorch's DTensor TP shards (b, s, h) activations on dim 1 while NCCL gathers on dim 0: with
  // b = 2, each of a layer's 2 all-gathers and 2 reduce-scatters per direction adds a copy reading
  // and writing the (2, 2048, 2048) bf16 activation, 2 x 16 MiB at 1 ns per byte.
  Experiment ex = small();
  ex.plan.framework = Framework::pytorch;
  ex.plan.sequence_parallel = true;
  ex.plan.micro_batch = 2;
  ex.training.global_batch = 4;
  validate_experiment(ex);
  Costed k(ex);
  cost_layer_chunks(k.in(), k.c);
  const double copy = 2.0 * (2.0 * 2 * 2048 * 2048) * 1e-9;
  EXPECT_NEAR(k.c.chunk[0][0][0].forward.value(), 12 * (1e-3 + 4 * copy), 1e-9);
  EXPECT_NEAR(tp_relayout_per_layer(k.in(), 2048, true).total().value(), 4 * copy, 1e-12);
  EXPECT_NEAR(tp_relayout_per_layer(k.in(), 2048, false).gathers.value(), 2 * copy, 1e-12);

  // Megatron-LM's (s, b, h) layout gathers along dim 0: no copy.
  Experiment mg = ex;
  mg.plan.framework = Framework::megatron;
  validate_experiment(mg);
  Costed m(mg);
  cost_layer_chunks(m.in(), m.c);
  EXPECT_NEAR(m.c.chunk[0][0][0].forward.value(), 12e-3, 1e-12);

  // b = 1: the gathered chunks are already in place (a view, no copy).
  Experiment one_seq = ex;
  one_seq.plan.micro_batch = 1;
  one_seq.training.global_batch = 2;
  validate_experiment(one_seq);
  Costed o(one_seq);
  EXPECT_EQ(tp_relayout_per_layer(o.in(), 2048, true).total().value(), 0.0);
}

TEST(CostLayerChunks, TorchtitanTensorwiseFp8GathersTheForwardInFloat8) {
  // torchtitan's float8 tensorwise TP all-gathers the column-parallel linears' inputs already cast
  // to float8: a layer's forward moves 2 all-gathers of half the (12, 8192, 4096) bf16 activation
  // and 2 full reduce-scatters; the backward's gradients stay bf16. A rowwise recipe gathers bf16.
  const Experiment ex =
      load_experiment(resolve_scenario("experiments", "torchtitan-202506-asynctp-llama3.1-8b-64xh100-fsdp8-tp8-float8tensorwise-vanillatp"));
  ASSERT_EQ(ex.training.fp8_scaling, Fp8Scaling::tensorwise);
  Costed k(ex);
  cost_layer_chunks(k.in(), k.c);
  const CommGroup tp = plan_groups(ex.plan, ex.cluster).tp;
  const Bytes act(2.0 * 12 * 8192 * 4096);
  const double ag = k.comm.time(Collective::all_gather, act, tp).value();
  const double ag8 = k.comm.time(Collective::all_gather, act * 0.5, tp).value();
  const double rs = k.comm.time(Collective::reduce_scatter, act, tp).value();
  ASSERT_LT(ag8, 0.6 * ag);
  const ChunkCosts& cc = k.c.chunk[0][0][0];
  EXPECT_NEAR(cc.forward_tp_comm.value(), 32 * (2 * ag8 + 2 * rs), 1e-9);
  EXPECT_NEAR(cc.backward_tp_comm.value(), 32 * (2 * ag + 2 * rs), 1e-9);
  // Per-op selective recompute re-runs the forward's (float8) all-gathers.
  EXPECT_NEAR(cc.recompute_tp_comm.value(), 32 * 2 * ag8, 1e-9);

  Experiment rowwise = ex;
  rowwise.training.fp8_scaling = Fp8Scaling::rowwise;
  Costed r(rowwise);
  cost_layer_chunks(r.in(), r.c);
  EXPECT_NEAR(r.c.chunk[0][0][0].forward_tp_comm.value(), 32 * (2 * ag + 2 * rs), 1e-9);
}

TEST(CostLayerChunks, TransformerEngineGathersBothWaysInFp8) {
  // Megatron-Core under Transformer Engine's FP8 (NeMo's GPT-3 175B row: tp 4 with sequence
  // parallelism, no TP overlap, delayed scaling): LayerNormLinear gathers its FP8 norm output
  // forward and the row-parallel linears gather their FP8 output gradient backward, one byte per
  // element of the (2048, 12288) activation, while the reduce-scatters stay bf16. The same plan in
  // bf16 gathers two bytes per element both ways.
  const Experiment ex = load_experiment(resolve_scenario("experiments", "nemo2407-gpt3-175b-128xh100-fp8"));
  ASSERT_EQ(ex.training.dtype, Dtype::fp8);
  ASSERT_TRUE(ex.plan.sequence_parallel);
  ASSERT_FALSE(ex.plan.tp_overlap);
  Costed k(ex);
  cost_layer_chunks(k.in(), k.c);
  const double layers = double(cost_models::chunk_layers(ex.model, ex.plan, 0, 0).size());
  const CommGroup tp = plan_groups(ex.plan, ex.cluster).tp;
  const Bytes act(2.0 * ex.plan.micro_batch * 2048 * 12288);
  const double ag = k.comm.time(Collective::all_gather, act, tp).value();
  const double ag8 = k.comm.time(Collective::all_gather, act * 0.5, tp).value();
  const double rs = k.comm.time(Collective::reduce_scatter, act, tp).value();
  ASSERT_LT(ag8, 0.6 * ag);
  const ChunkCosts& cc = k.c.chunk[0][0][0];
  EXPECT_NEAR(cc.forward_tp_comm.value(), layers * (2 * ag8 + 2 * rs), 1e-9);
  EXPECT_NEAR(cc.backward_tp_comm.value(), layers * (2 * ag8 + 2 * rs), 1e-9);

  Experiment bf16 = ex;
  bf16.training.dtype = Dtype::bf16;
  Costed b(bf16);
  cost_layer_chunks(b.in(), b.c);
  EXPECT_NEAR(b.c.chunk[0][0][0].forward_tp_comm.value(), layers * (2 * ag + 2 * rs), 1e-9);
  EXPECT_NEAR(b.c.chunk[0][0][0].backward_tp_comm.value(), layers * (2 * ag + 2 * rs), 1e-9);
}

TEST(CostLayerChunks, DelayedScalingReducesAmaxesOverTheStagesRanks) {
  // The same row: Transformer Engine's delayed scaling ends each model chunk's FP8 region with an
  // all-reduce of its amaxes over the stage's tp x dp ranks (Megatron-Core's amax reduction group),
  // forward (12 bytes per GEMM module, four a layer) and backward (8), once per micro-batch and
  // chunk, not per token slice or layer. Here tp 4 x dp 4 = 16 ranks, two nodes of 8.
  const Experiment ex = load_experiment(resolve_scenario("experiments", "nemo2407-gpt3-175b-128xh100-fp8"));
  ASSERT_EQ(ex.training.fp8_scaling, Fp8Scaling::delayed);
  ASSERT_EQ(ex.plan.tp * ex.plan.dp * ex.plan.cp, 16);
  Costed k(ex);
  cost_layer_chunks(k.in(), k.c);
  const double layers = double(cost_models::chunk_layers(ex.model, ex.plan, 0, 0).size());
  const CommGroup stage{.ranks = 16, .ranks_per_node = 8, .nodes = 2};
  EXPECT_EQ(plan_groups(ex.plan, ex.cluster).stage.ranks, 16);
  EXPECT_EQ(plan_groups(ex.plan, ex.cluster).stage.nodes, 2);
  const ChunkCosts& cc = k.c.chunk[0][0][0];
  EXPECT_NEAR(cc.forward_amax.value(), k.comm.time(Collective::all_reduce, Bytes(48.0 * layers), stage).value(), 1e-15);
  EXPECT_NEAR(cc.backward_amax.value(), k.comm.time(Collective::all_reduce, Bytes(32.0 * layers), stage).value(), 1e-15);
  EXPECT_GT(cc.forward_amax, Seconds(5e-6));  // latency-bound: tens of microseconds
  // Current scaling (and bf16) reduce no amaxes across data-parallel ranks.
  for (const bool bf16 : {false, true}) {
    Experiment other = ex;
    if (bf16) other.training.dtype = Dtype::bf16;
    else other.training.fp8_scaling = Fp8Scaling::tensorwise;
    Costed o(other);
    cost_layer_chunks(o.in(), o.c);
    EXPECT_EQ(o.c.chunk[0][0][0].forward_amax, Seconds(0));
    EXPECT_EQ(o.c.chunk[0][0][0].backward_amax, Seconds(0));
  }
}

TEST(CostLayerChunks, UnevenInterleavedChunksHoldTheirOwnLayers) {
  // 24 layers on pp 2 x v 2 with chunks [5, 7, 6, 6] in stage order (generic; stage k on rank
  // k mod 2 as chunk k / 2): rank 0 holds layers 0-4 (chunk 0) and 12-17 (chunk 1), rank 1 holds
  // 5-11 and 18-23. Each chunk's forward is its own layer count in ms; each chunk's backward adds
  // the accumulation pass over its share of the rank's parameters (the embedding or head shared by
  // the rank's chunks in proportion to their layers).
  Experiment e = small();
  e.plan.framework = Framework::generic;
  e.plan.schedule = Schedule::interleaved;
  e.plan.virtual_stages = 2;
  e.plan.stage_layers = {5, 7, 6, 6};
  e.training.global_batch = 4;  // 2 micro-batches per pipeline: a multiple of pp
  validate_experiment(e);
  auto range = [](int a, int b) {
    std::vector<int> v;
    for (int i = a; i <= b; ++i) v.push_back(i);
    return v;
  };
  EXPECT_EQ(cost_models::chunk_layers(e.model, e.plan, 0, 0), range(0, 4));
  EXPECT_EQ(cost_models::chunk_layers(e.model, e.plan, 1, 0), range(5, 11));
  EXPECT_EQ(cost_models::chunk_layers(e.model, e.plan, 0, 1), range(12, 17));
  EXPECT_EQ(cost_models::chunk_layers(e.model, e.plan, 1, 1), range(18, 23));
  std::vector<int> rank0 = range(0, 4);
  for (int l : range(12, 17)) rank0.push_back(l);
  EXPECT_EQ(cost_models::stage_layers(e.model, e.plan, 0), rank0);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const double counts[2][2] = {{5, 6}, {7, 6}};  // [rank][chunk]
  const double rank_layers[2] = {11, 13};
  for (int s = 0; s < 2; ++s)
    for (int ch = 0; ch < 2; ++ch) {
      const ChunkCosts& cc = k.c.chunk[s][ch][0];
      EXPECT_NEAR(cc.forward.value(), counts[s][ch] * 1e-3, 1e-12) << s << ch;
      // generic: fp32 main grads are not kept (PyTorch-style AccumulateGrad, 3 x 2 bytes), the first
      // of the 2 micro-batches creates them: half the passes.
      const double pass = k.params(s) * counts[s][ch] / rank_layers[s] * k.x.bytes.accumulate * 1e-9 *
                          (k.x.bytes.first_accumulation_free ? 0.5 : 1.0);
      EXPECT_NEAR(cc.backward.value(), counts[s][ch] * 2e-3 + pass, 1e-9) << s << ch;
    }
}

TEST(CostLayerChunks, ZeroThreeAccumulatesIntoTheRanksShardOnly) {
  // Under ZeRO-3 each micro-batch's gradients are reduce-scattered and added into the rank's 1/k
  // shard (FSDP1 _accumulate_sharded_grad, DeepSpeed stage 3's partition add), which the first
  // micro-batch creates; without ZeRO-3 (Megatron-LM, fp32 main grads) every micro-batch adds
  // into the whole buffer. gpt3-1.3b on tp 1 x pp 1 x dp 8, 4 micro-batches, generic framework.
  Experiment e = small();
  e.plan = PlanSpec{};
  e.plan.framework = Framework::generic;
  e.plan.dp = 8;
  e.training.global_batch = 32;  // 4 micro-batches of 1 per rank
  e.plan.zero = 3;
  validate_experiment(e);
  Costed k(e);
  ASSERT_EQ(e.plan.shard_ways(), 8);
  cost_layer_chunks(k.in(), k.c);
  const double layers = 24, per_layer_compute = layers * 2e-3;
  const double pass = k.params(0) / 8.0 * k.x.bytes.accumulate * 1e-9 * 3.0 / 4.0;
  EXPECT_NEAR(k.c.chunk[0][0][0].backward.value(), per_layer_compute + pass, 1e-9);
  // The same plan without sharding pays the whole buffer every micro-batch (or m - 1 of m where
  // the framework frees gradients between steps).
  e.plan.zero = 0;
  validate_experiment(e);
  Costed u(e);
  cost_layer_chunks(u.in(), u.c);
  const double whole = u.params(0) * u.x.bytes.accumulate * 1e-9 * (u.x.bytes.first_accumulation_free ? 0.75 : 1.0);
  EXPECT_NEAR(u.c.chunk[0][0][0].backward.value(), per_layer_compute + whole, 1e-9);
  EXPECT_GT(whole, 6.0 * pass);
}

TEST(TpCollective, CalibratedEfficiencyScalesTheTransferOnly) {
  // GPT-3 1.3B at tp 2 (h 2048, one sequence of 2048 tokens, bf16): two all-reduces of the 8 MiB
  // (b, s, h) activation per layer and direction. At a calibrated share of 0.5 of the links' rate
  // each transfers in twice the time; the latency stays.
  Experiment e = small();
  Costed k(e);
  const CommGroup tp = plan_groups(e.plan, e.cluster).tp;
  const Bytes act(2.0 * 2048 * 2048);
  const CommEstimate est = k.comm.estimate(Collective::all_reduce, act, tp);
  ASSERT_GT(est.transfer.value(), 0.0);
  EXPECT_NEAR(tp_comm_per_layer(k.in(), 2048).value(), 2 * (est.latency + est.transfer).value(), 1e-12);
  k.x.calibrated.tp_comm_efficiency_scale = 0.5;
  EXPECT_NEAR(tp_comm_per_layer(k.in(), 2048).value(), 2 * (est.latency + 2.0 * est.transfer).value(), 1e-12);
}

TEST(CostLayerChunks, ARecomputedForwardsAllToAllsAreExpertParallelTime) {
  // MoE (4 experts in every other layer) on tp 1 x pp 2 x dp 4 with ep 4 and full recompute: each
  // recomputed MoE layer re-runs its forward's dispatch and combine. That time is expert-parallel
  // communication, the same as the forward's, and with tp 1 there is no tensor-parallel time at
  // all (it used to be booked as TP time, which `simulate --check` flagged).
  Experiment e = small_moe();
  e.plan.recompute = Recompute::full;
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  for (int s = 0; s < 2; ++s) {
    const ChunkCosts& cc = k.c.chunk[s][0][0];
    EXPECT_GT(cc.forward_ep_comm.value(), 0.0) << s;
    EXPECT_NEAR(cc.recompute_ep_comm.value(), cc.forward_ep_comm.value(), 1e-15) << s;
    EXPECT_EQ(cc.recompute_tp_comm.value(), 0.0) << s;
    EXPECT_EQ(cc.forward_tp_comm.value(), 0.0) << s;
  }
}

TEST(CostLayerChunks, CheckpointedSubmodulesRerunTheirOwnCollectives) {
  // Megatron-Core's --recompute-modules mlp on tp 2 without sequence parallelism: each of a
  // stage's 12 layers re-runs its MLP's all-reduce (one of the forward's two) before its backward.
  Experiment e = small();
  e.plan.framework = Framework::megatron_core;
  e.plan.recompute_modules.mlp = true;
  validate_experiment(e);
  Costed k(e);
  cost_layer_chunks(k.in(), k.c);
  const CommGroup tp = plan_groups(k.e.plan, k.e.cluster).tp;
  const double all_reduce = k.comm.time(Collective::all_reduce, Bytes(2.0 * 2048 * 2048), tp).value();
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(k.c.chunk[s][0][0].forward_tp_comm.value(), 24 * all_reduce, 1e-12) << s;
    EXPECT_NEAR(k.c.chunk[s][0][0].recompute_tp_comm.value(), 12 * all_reduce, 1e-12) << s;
  }
  // --recompute-modules moe on an MoE model (tp 1, ep 4): each MoE layer re-runs its dispatch and
  // combine, the forward's expert-parallel time again; a dense MLP's layers nothing.
  Experiment moe = small_moe();
  moe.plan.framework = Framework::megatron_core;
  moe.plan.recompute_modules.moe = true;
  validate_experiment(moe);
  Costed m(moe);
  cost_layer_chunks(m.in(), m.c);
  for (int s = 0; s < 2; ++s) {
    const ChunkCosts& cc = m.c.chunk[s][0][0];
    EXPECT_GT(cc.forward_ep_comm.value(), 0.0) << s;
    EXPECT_NEAR(cc.recompute_ep_comm.value(), cc.forward_ep_comm.value(), 1e-15) << s;
    EXPECT_EQ(cc.recompute_tp_comm.value(), 0.0) << s;
  }
}

TEST(CostLayerChunks, SharedExpertsBlockOnTheirCollectivesUnlessOverlapped) {
  // tp 2 with sequence parallelism, an MoE layer every other layer (6 of a stage's 12), one shared
  // expert. A dense layer all-gathers and reduce-scatters twice a pass (attention, MLP); an MoE
  // layer's routed tokens travel in the all-to-alls, so without shared experts it pays the
  // attention's pair only. Megatron-Core's shared expert is a column- and row-parallel MLP of its
  // own: with moe_shared_expert_overlap off (the default) its pair blocks the layer as a dense
  // MLP's does (12 layers' worth); on, it runs beside the dispatcher (6 + 6 halves).
  Experiment e = small_moe();
  e.model.moe->shared_experts = 1;
  e.plan.framework = Framework::megatron_core;
  e.plan.tp = 2;
  e.plan.dp = 2;
  e.plan.ep = 2;
  e.plan.sequence_parallel = true;
  validate_experiment(e);
  Costed off(e);
  cost_layer_chunks(off.in(), off.c);
  const double dense = tp_gathers_scatters(off.in(), 2048, true).total().value();
  ASSERT_GT(dense, 0.0);
  e.plan.moe_shared_expert_overlap = true;
  validate_experiment(e);
  Costed on(e);
  cost_layer_chunks(on.in(), on.c);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(off.c.chunk[s][0][0].forward_tp_comm.value(), 12 * dense, 1e-12) << s;
    EXPECT_NEAR(off.c.chunk[s][0][0].backward_tp_comm.value(), 12 * dense, 1e-12) << s;
    EXPECT_NEAR(on.c.chunk[s][0][0].forward_tp_comm.value(), 6 * dense + 6 * dense / 2, 1e-12) << s;
  }
}

TEST(CostLayerChunks, RowwiseFp8AsyncTpHidesOnlyItsReduceScatters) {
  // torchao's rowwise FP8 under torch's async TP: the matmul-reduce-scatters are fused, the
  // all-gather-matmuls are not (pytorch/pytorch#149990). Forward, the all-gathers before QKV and
  // FC1 are exposed whole and the reduce-scatters after the projection and FC2 hidden as any async
  // TP hides them (max(c / 2, c - g) exposed on tp 2, the hidden part paying the SM share);
  // backward the other way round. Rowwise gathers travel in bf16 like the bf16 run's.
  Experiment e = small();
  e.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  e.plan.framework = Framework::torchtitan;
  e.plan.zero = 3;
  e.plan.sequence_parallel = true;
  e.plan.tp_overlap = true;
  e.plan.compile = true;
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::rowwise;
  validate_experiment(e);
  const OverlapCosted k(e);
  const double ag = k.ag, rs = k.rs;
  const double ctas = k.comm.params().overlap_ctas, f = ctas / (e.cluster.gpu.sms - ctas);
  auto hidden = [&](double c, double g) {
    const double exposed = std::max(c / 2, c - g);
    return exposed + f * std::min(c - exposed, g);
  };
  // Forward: QKV (0.01 ms) and FC1 (1 ms) after their all-gathers, projection and FC2 (1 ms) before
  // their reduce-scatters; backward: QKV and FC1's data gradients reduce-scatter, the projection's
  // and FC2's all-gather.
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_tp_comm.value(), 12 * (ag + hidden(rs, 1e-3) + ag + hidden(rs, 1e-3)), 1e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_tp_comm.value(), 12 * (hidden(rs, 1e-5) + ag + hidden(rs, 1e-3) + ag), 1e-12);
  // Tensorwise scaling fuses both kinds: its gathers hide too (and carry FP8 forward).
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  const OverlapCosted tw(e);
  EXPECT_NEAR(tw.c.chunk[0][0][0].backward_tp_comm.value(),
              12 * (hidden(rs, 1e-5) + hidden(ag, 1e-3) + hidden(rs, 1e-3) + hidden(ag, 1e-3)), 1e-12);
}
