// ZeRO-3 / FSDP, HSDP and the overlapped parameter gather, against hand computations: the
// exposed part of a prefetched gather sequence, the bytes each GPU sends per step by kind, the
// HSDP replica all-reduce, and the weak-scaling shape (TFLOP/s per GPU falls once the per-GPU
// batch is too small to hide the gathers).
#include <gtest/gtest.h>

#include <cstdio>

#include "core/flops.hpp"
#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "sim/costers.hpp"
#include "tests/sim/costed.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {

ShardedUnit unit(double gather_ms, double compute_ms, double reduce_ms = 0) {
  return {Seconds(gather_ms * 1e-3), Seconds(compute_ms * 1e-3), Seconds(reduce_ms * 1e-3)};
}

// 1 ms forward, 2 ms backward, no recompute per layer; edges 0.1/0.2 ms and 0.5/1 ms.
ComputeCosts round_compute() {
  ComputeCosts c;
  c.layer = [](int, int, bool, int) { return LayerCompute{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)}; };
  c.edges = [](int) { return EdgeCompute{Seconds(1e-4), Seconds(2e-4), Seconds(5e-4), Seconds(1e-3), Seconds(0), Seconds(0), Seconds(0)}; };
  c.optimizer = [](double params) { return Seconds(params * 1e-9); };
  return c;
}

// GPT-3 1.3B (24 layers, h 2048) in bf16 on 16 GPUs of two Selene nodes: dp 16 with ZeRO-3 under
// PyTorch (fp32 parameters, bf16 gathers, fp32 reduce-scatters), 2 micro-batches per step.
Experiment fsdp() {
  Experiment e = load_experiment(resolve_scenario("experiments", "sc21-table1-1.7b"));
  e.model = load_model(resolve_scenario("models", "gpt3-1.3b"));
  e.gpus = 16;
  e.training = TrainingSpec{.global_batch = 32, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  e.plan = PlanSpec{};
  e.plan.dp = 16;
  e.plan.zero = 3;
  e.plan.framework = Framework::pytorch;
  validate_experiment(e);
  return e;
}

// The fixture with the data-parallel costers already run.
struct Costed : fixtures::Costed {
  explicit Costed(Experiment ex, ComputeCosts cc = round_compute()) : fixtures::Costed(std::move(ex), std::move(cc)) {
    cost_layer_chunks(in(), c);
    cost_data_parallel(in(), c);
    cost_sharded_parameters(in(), c);
  }
};

// round_compute() with memory passes at 1 TB/s (1 ps a byte), for the framework's own copies.
ComputeCosts terabyte_compute() {
  ComputeCosts cc = round_compute();
  cc.memory_bound = [](Bytes b, int) { return Seconds(b.value() * 1e-12); };
  return cc;
}

// fsdp()'s units as the copy tests price them: a layer's and the embedding's parameters (with the
// positions and the final norm), their bf16 all-gathers and fp32 reduce-scatters over the shard
// group, and the SM share 24 NCCL blocks take from the compute they hide under.
struct FsdpUnits {
  double layer = 0, embedding = 0, contention = 0;
  Seconds gl, ge;
  const Costed& k;
  PlanGroups g;
  explicit FsdpUnits(const Costed& costed) : k(costed), g(plan_groups(costed.e.plan, costed.e.cluster)) {
    const double h = k.e.model.hidden;
    layer = 12 * h * h + 13 * h;
    embedding = double(k.e.model.vocab) * h + double(k.e.model.seq_len) * h + 2 * h;
    gl = k.comm.time(Collective::all_gather, Bytes(layer * 2), g.shard);
    ge = k.comm.time(Collective::all_gather, Bytes(embedding * 2), g.shard);
    contention = 24.0 / (k.e.cluster.gpu.sms - 24.0);
  }
  Seconds rs(double params) const { return k.comm.time(Collective::reduce_scatter, Bytes(params * 4), g.shard); }
};

}  // namespace

TEST(ExposedUnderPrefetch, ComputeBoundHidesAllButTheFirstGather) {
  // 4 units, gather 1 ms, compute 3 ms: only the first gather waits.
  EXPECT_NEAR(exposed_under_prefetch({unit(1, 3), unit(1, 3), unit(1, 3), unit(1, 3)}).value(), 1e-3, 1e-12);
  EXPECT_EQ(exposed_under_prefetch({}).value(), 0.0);
}

ShardedUnit hosted(double gather_ms, double compute_ms, double host_ms) {
  ShardedUnit u = unit(gather_ms, compute_ms);
  u.host = Seconds(host_ms * 1e-3);
  return u;
}

TEST(ShardedExposure, HostAheadOfTheGpuCostsTheLongerOfTheTwo) {
  // Nothing to gather, 3 units. Host 3 ms, compute 1 ms: the first unit's host work was done
  // before the pass, so unit i starts at 3 i ms and the last ends at 7; 3 ms compute, 4 waited.
  ShardedExposure e = sharded_exposure({hosted(0, 1, 3), hosted(0, 1, 3), hosted(0, 1, 3)});
  EXPECT_NEAR(e.host.value(), 4e-3, 1e-12);
  EXPECT_NEAR(e.comm.value(), 0.0, 1e-12);
  EXPECT_NEAR(exposed_under_prefetch({hosted(0, 1, 3), hosted(0, 1, 3), hosted(0, 1, 3)}).value(), 4e-3, 1e-12);
  // Host 1 ms, compute 3 ms: the host stays ahead, nothing waited.
  e = sharded_exposure({hosted(0, 3, 1), hosted(0, 3, 1), hosted(0, 3, 1)});
  EXPECT_NEAR(e.host.value(), 0.0, 1e-12);
}

TEST(ShardedExposure, TheHostStartsAUnitOnlyOnceTheOneTwoBackHasStarted) {
  // 8 units of 1 ms compute and 3 ms host work; only unit 2 gathers, 20 ms, issued when unit 0 is
  // done (at 1 ms): it arrives at 21. Without host work: units 0-1 run at 0-2, unit 2 at 21-22,
  // the rest back to back to 27: 19 ms exposed. With it: unit 1 starts at 3 (unit 0's host work
  // was done before the pass), unit 2 at 21 (its gather), and unit 3 at 22. The host starts unit
  // 4's work only when unit 2 has started (21), so unit 4 starts at 24, unit 5 at 27, 6 at 30
  // and 7 at 33: the chain ends at 34, 26 ms exposed, 7 of them the host's. (A host that could
  // bank the wait would have had units 4-7's work done by then: 4 ms.)
  std::vector<ShardedUnit> u(8, hosted(0, 1, 3));
  u[2].gather = Seconds(20e-3);
  const ShardedExposure e = sharded_exposure(u);
  EXPECT_NEAR(e.comm.value(), 19e-3, 1e-12);
  EXPECT_NEAR(e.host.value(), 7e-3, 1e-12);
}

TEST(ShardedExposure, SerialHostWorkFollowsEachCompute) {
  // The host works only after the previous unit's compute (the first unit's at the pass's start,
  // the GPU idle after the framework's synchronisation): n x host whichever is longer.
  EXPECT_NEAR(sharded_exposure({hosted(0, 1, 3), hosted(0, 1, 3), hosted(0, 1, 3)}, 0.0, true, true).host.value(), 9e-3,
              1e-12);
  EXPECT_NEAR(sharded_exposure({hosted(0, 3, 1), hosted(0, 3, 1), hosted(0, 3, 1)}, 0.0, true, true).host.value(), 3e-3,
              1e-12);
}

TEST(ShardedExposure, HostWorkHidesUnderAGatherTheGpuWaitsFor) {
  // Gather 5 ms, compute 1, host 2, 3 units: the gathers run back to back (5, 10, 15 ms) and each
  // unit starts when its gather is done, the host (ahead or serial) long done: 16 ms, 3 compute,
  // 13 exposed communication, nothing for the host.
  const std::vector<ShardedUnit> u(3, hosted(5, 1, 2));
  for (bool serial : {false, true}) {
    const ShardedExposure e = sharded_exposure(u, 0.0, true, serial);
    EXPECT_NEAR(e.comm.value(), 13e-3, 1e-12) << serial;
    EXPECT_NEAR(e.host.value(), 0.0, 1e-12) << serial;
  }
}

TEST(ExposedUnderPrefetch, CommunicationBoundExposesTheDifference) {
  // Gather 3 ms, compute 1 ms, n = 5: c + (n - 1)(c - t) = 3 + 4 x 2 = 11 ms (the gathers run back
  // to back, 15 ms, and the last compute follows: 16 ms, of which 5 compute).
  std::vector<ShardedUnit> u(5, unit(3, 1));
  EXPECT_NEAR(exposed_under_prefetch(u).value(), 11e-3, 1e-12);
}

TEST(ExposedUnderPrefetch, BackwardReduceScattersShareTheLink) {
  // 3 units in backward order, gather 1, compute 2, reduce-scatter 1.5 ms. The link runs G0 0-1,
  // G1 1-2, R0 (ready at 3) 3-4.5, G2 (ready at 3) 4.5-5.5, R1 (ready at 5) 5.5-7, R2 (ready at
  // 7.5) 7.5-9. Compute: U0 1-3, U1 3-5, U2 5.5-7.5. End 9, compute 6: 3 ms exposed.
  EXPECT_NEAR(exposed_under_prefetch({unit(1, 2, 1.5), unit(1, 2, 1.5), unit(1, 2, 1.5)}).value(), 3e-3, 1e-12);
}

TEST(ExposedUnderPrefetch, WithoutPrefetchEverythingIsExposed) {
  // The backward case above without prefetch: G0 0-1, U0 1-3, R0 3-4.5, G1 4.5-5.5, U1 5.5-7.5,
  // R1 7.5-9, G2 9-10, U2 10-12, R2 12-13.5: 13.5 ms, of which 6 compute, 7.5 exposed (3 x (1 + 1.5)).
  EXPECT_NEAR(exposed_under_prefetch({unit(1, 2, 1.5), unit(1, 2, 1.5), unit(1, 2, 1.5)}, 0.0, false).value(), 7.5e-3,
              1e-12);
  // Compute-bound forward: all four gathers wait, and nothing runs beside compute to contend.
  EXPECT_NEAR(exposed_under_prefetch({unit(1, 3), unit(1, 3), unit(1, 3), unit(1, 3)}, 0.5, false).value(), 4e-3, 1e-12);
}

TEST(ExposedUnderPrefetch, ContentionChargesTheHiddenCommunication) {
  // Compute-bound 4 x (1 ms gather, 3 ms compute): 3 ms of gathers hide behind compute; at a
  // contention of 24 / (132 - 24) each costs 0.2222 ms more.
  const double f = 24.0 / 108.0;
  EXPECT_NEAR(exposed_under_prefetch({unit(1, 3), unit(1, 3), unit(1, 3), unit(1, 3)}, f).value(), 1e-3 + 3e-3 * f, 1e-12);
}

TEST(CostShardedParameters, BytesPerGpuPerStepByKind) {
  // Per micro-batch a GPU all-gathers every layer twice (forward, backward) and the embedding
  // once, in bf16, and reduce-scatters all of them once in fp32; a ring sends 15/16 of each
  // buffer. Two micro-batches.
  Costed k(fsdp());
  const ModelSpec& m = k.e.model;
  const double h = m.hidden, layer = 12 * h * h + 13 * h;  // Megatron's 12h^2 + 13h (ffn = 4h)
  const double embedding = double(m.vocab) * h + double(m.seq_len) * h + 2 * h;  // + final norm (pp 1)
  const double sent = 15.0 / 16.0 * 2;
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(), (2 * 24 * layer + embedding) * 2 * sent, 1.0);
  EXPECT_NEAR(k.c.zero3_reduce_bytes[0].value(), (24 * layer + embedding) * 4 * sent, 1.0);
  // Nothing is reduced or gathered after the step (no replicas): ZeRO-3 did it all per unit.
  EXPECT_EQ(k.c.dp_grad_sync[0].value(), 0.0);
  EXPECT_EQ(k.c.dp_param_gather[0].value(), 0.0);
  // Keeping the gathered layers from forward to backward halves the layers' gathers.
  Experiment keep = fsdp();
  keep.plan.reshard_after_forward = false;
  Costed kk(keep);
  EXPECT_NEAR(kk.c.zero3_gather_bytes[0].value(), (24 * layer + embedding) * 2 * sent, 1.0);
  // FSDP MixedPrecision reduce_dtype bf16 (Composer's PURE mode): the reduce-scatters move 2 bytes
  // a gradient, the gathers are unchanged.
  Experiment pure = fsdp();
  pure.plan.reduce_dtype = Dtype::bf16;
  validate_experiment(pure);
  Costed kp(pure);
  EXPECT_NEAR(kp.c.zero3_reduce_bytes[0].value(), (24 * layer + embedding) * 2 * sent, 1.0);
  EXPECT_NEAR(kp.c.zero3_gather_bytes[0].value(), (2 * 24 * layer + embedding) * 2 * sent, 1.0);
}

TEST(CostShardedParameters, Fp8ParamGatherCarriesTheLayersWeightsInOneByte) {
  // The same FSDP plan trained in FP8 (tensorwise) with plan.fp8_param_gather: each layer's GEMM
  // weights travel in 1 byte, its two LayerNorms (2 x 2h parameters) in 2; the embedding stays
  // in 2. Per layer 12h^2 + 13h parameters, of which 4h norms: bytes = 2 x 4h + (12h^2 + 9h).
  Experiment e = fsdp();
  e.cluster.gpu.peak_fp8 = FlopsPerSecond(2 * e.cluster.gpu.peak_bf16.value());  // an FP8-capable part
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::tensorwise;
  e.plan.framework = Framework::generic;
  validate_experiment(e);
  Costed plain(e);
  e.plan.fp8_param_gather = true;
  validate_experiment(e);
  Costed fp8(e);
  const ModelSpec& m = e.model;
  const double h = m.hidden, layer = 12 * h * h + 13 * h, layer_bytes = 2 * 4 * h + (12 * h * h + 9 * h);
  const double embedding = double(m.vocab) * h + double(m.seq_len) * h + 2 * h;
  const double sent = 15.0 / 16.0 * 2;
  EXPECT_NEAR(plain.c.zero3_gather_bytes[0].value(), (2 * 24 * layer + embedding) * 2 * sent, 1.0);
  EXPECT_NEAR(fp8.c.zero3_gather_bytes[0].value(), (2 * 24 * layer_bytes + embedding * 2) * sent, 1.0);
  // The reduce-scatters are unchanged (gradients are not FP8).
  EXPECT_DOUBLE_EQ(fp8.c.zero3_reduce_bytes[0].value(), plain.c.zero3_reduce_bytes[0].value());
}

TEST(CostDataParallel, ReduceDtypeSetsTheAllReducedBytes) {
  // DDP with 2 micro-batches: gradients all-reduced once per step, fp32 (the autocast recipe's
  // fp32 parameters) or, with plan.reduce_dtype bf16, 2 bytes each: the ring sends 2 x 15/16 of
  // the buffer either way.
  Experiment ddp = fsdp();
  ddp.plan.zero = 0;
  validate_experiment(ddp);
  Costed k32(ddp);
  ddp.plan.reduce_dtype = Dtype::bf16;
  validate_experiment(ddp);
  Costed k16(ddp);
  EXPECT_NEAR(k16.c.dp_grad_sync_bytes[0].value() * 2, k32.c.dp_grad_sync_bytes[0].value(), 1.0);
  EXPECT_GT(k16.c.dp_grad_sync_bytes[0].value(), 0.0);
  // fp8 is no reduction dtype.
  ddp.plan.reduce_dtype = Dtype::fp8;
  EXPECT_THROW(validate_experiment(ddp), SpecError);
}

// fsdp()'s forward as the prefetch model sees it, by hand: the embedding (gather `embedding`,
// compute 0.1 ms), 24 layers (gather `layer`, 1 ms each), the head (no gather, 0.5 ms); bf16
// gathers of Megatron's 12h^2 + 13h per layer.
struct FsdpForward {
  Seconds layer, embedding;  // one gather each
  std::vector<ShardedUnit> units;
};
FsdpForward fsdp_forward(const Costed& k) {
  const CommGroup shard = plan_groups(k.e.plan, k.e.cluster).shard;
  const double h = k.e.model.hidden, layer = 12 * h * h + 13 * h;
  const double embedding = double(k.e.model.vocab) * h + double(k.e.model.seq_len) * h + 2 * h;
  FsdpForward f{k.comm.time(Collective::all_gather, Bytes(layer * 2), shard),
                k.comm.time(Collective::all_gather, Bytes(embedding * 2), shard), {}};
  f.units.push_back({f.embedding, Seconds(1e-4), Seconds(0)});
  for (int i = 0; i < 24; ++i) f.units.push_back({f.layer, Seconds(1e-3), Seconds(0)});
  f.units.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  return f;
}

TEST(CostShardedParameters, ExposedPartMatchesThePrefetchModel) {
  // The forward: embedding (gather E, compute 0.1 ms), 24 layers (gather G, 1 ms), head (0.5 ms).
  Costed k(fsdp());
  const FsdpForward fwd = fsdp_forward(k);
  const Seconds g = fwd.layer, ge = fwd.embedding;
  const double f = 24.0 / (k.e.cluster.gpu.sms - 24.0);  // Selene's A100: 108 SMs
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), exposed_under_prefetch(fwd.units, f).value(), 1e-12);
  // Both gathers hide behind 1 ms of compute here except the first (the embedding's, then the
  // first layer's wait on it): the exposed part is at least the embedding's gather.
  EXPECT_GE(k.c.chunk[0][0][0].forward_dp_comm, ge);
  EXPECT_LT(g, Seconds(1e-3));
}

TEST(CostShardedParameters, PersistentGemmsPayHalfOfEveryHiddenGather) {
  // The same forward on a GPU whose GEMM kernels are persistent (one block per SM, as Hopper's):
  // beside a gather's resident blocks a GEMM runs in two block lifetimes, so under a hidden gather
  // the compute advances at half speed and half of each hidden second is added (not the SM share
  // 24 / 84 of the A100 above). Hand check: exposed part without contention, plus 0.5 x the
  // communication hidden under compute (all of it but the exposed part: 1 ms of compute per layer
  // outlasts every layer's gather).
  Experiment e = fsdp();
  e.cluster.gpu.kernels.persistent_gemm_grid = SourcedValue{1, "test"};
  // Layers that are all GEMMs (four of 0.25 ms forward, 0.5 ms backward).
  ComputeCosts cc = round_compute();
  cc.layer = [](int, int, bool, int) {
    const Seconds f(2.5e-4), b(5e-4);
    return LayerCompute{Seconds(1e-3), Seconds(2e-3), Seconds(0), Seconds(0), Seconds(0), {f, f, f, f}, {b, b, b, b}, Seconds(0), Seconds(0)};
  };
  Costed k(e, cc);
  EXPECT_DOUBLE_EQ(overlap_contention(k.in(), 1.0), 0.5);
  EXPECT_DOUBLE_EQ(sm_share_contention(k.in()), 24.0 / (108.0 - 24.0));
  // Half GEMMs: half the window at half speed, half at the SM share.
  EXPECT_DOUBLE_EQ(overlap_contention(k.in(), 0.5), 0.25 + 0.5 * 24.0 / 84.0);
  const FsdpForward fwd = fsdp_forward(k);
  const Seconds g = fwd.layer, ge = fwd.embedding;
  const double exposed = exposed_under_prefetch(fwd.units, 0.0).value();
  const double hidden = ge.value() + 24 * g.value() - exposed;
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), exposed + 0.5 * hidden, 1e-12);
  // A grid value of 0 is the block-by-block schedule: the SM share again, GEMMs or not.
  e.cluster.gpu.kernels.persistent_gemm_grid = SourcedValue{0, "test"};
  EXPECT_DOUBLE_EQ(overlap_contention(Costed(e).in(), 1.0), 24.0 / 84.0);
}

TEST(CostShardedParameters, HsdpAllReducesEachUnitsShardInsideTheBackward) {
  // dp 16 as 2 replicas of 8-way shards (one node each). As FSDP's HYBRID_SHARD runs it, each
  // unit's gradients are reduce-scattered in its node and the unit's 1/8 shard (fp32) all-reduced
  // across the 2 replicas at once, on the same stream, while the backward goes on: nothing is
  // left for after the backward.
  Experiment e = fsdp();
  e.plan.shard_group = 8;
  validate_experiment(e);
  Costed k(e);
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  EXPECT_EQ(g.shard.ranks, 8);
  EXPECT_EQ(g.shard.nodes, 1);
  EXPECT_EQ(g.replicate.ranks, 2);
  EXPECT_EQ(g.replicate.nodes, 2);
  EXPECT_EQ(k.c.dp_grad_sync[0].value(), 0.0);
  // The backward: the head (gather, 1 ms, reduce), 24 layers (gather G, 2 ms, reduce R) in
  // reverse, the embedding (0.2 ms, reduce), each reduce = reduce-scatter + replica all-reduce.
  const double h = e.model.hidden, layer = 12 * h * h + 13 * h;
  const double embedding = double(e.model.vocab) * h + double(e.model.seq_len) * h + 2 * h;
  auto reduce = [&](double params) {
    return k.comm.time(Collective::reduce_scatter, Bytes(params * 4), g.shard) +
           k.comm.time(Collective::all_reduce, Bytes(params * 4 / 8), g.replicate);
  };
  const Seconds gl = k.comm.time(Collective::all_gather, Bytes(layer * 2), g.shard);
  std::vector<ShardedUnit> bwd{{Seconds(0), Seconds(1e-3), Seconds(0)}};
  for (int i = 0; i < 24; ++i) bwd.push_back({gl, Seconds(2e-3), reduce(layer)});
  bwd.push_back({Seconds(0), Seconds(2e-4), reduce(embedding)});
  const double f = 24.0 / (e.cluster.gpu.sms - 24.0);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_dp_comm.value(), exposed_under_prefetch(bwd, f).value(), 1e-12);
  // Bytes per GPU per step: the reduce-scatters (7/8 of each unit) and the replica all-reduce of
  // the shard (2 (2 - 1) / 2 of 1/8), fp32, two micro-batches.
  EXPECT_NEAR(k.c.zero3_reduce_bytes[0].value(), (24 * layer + embedding) * 4 * (7.0 / 8 + 1.0 / 8) * 2, 1.0);
  // Model state shards 8 ways, not 16.
  const auto mem = cost_models::memory_per_gpu(k.x, e.model, e.training, e.plan, 0);
  const auto full = cost_models::memory_per_gpu(Costed(fsdp()).x, e.model, e.training, fsdp().plan, 0);
  EXPECT_NEAR(mem.optimizer.value(), 2 * full.optimizer.value(), 1.0);
  // Megatron-FSDP all-reduces across the replicas in the step's last backward only (no_sync gates
  // its outer reduction alone): over the step's two micro-batches half as many replica bytes.
  Experiment mc = e;
  mc.plan.framework = Framework::megatron_core;
  validate_experiment(mc);
  Costed kc(mc);
  EXPECT_NEAR(kc.c.zero3_reduce_bytes[0].value(), (24 * layer + embedding) * 4 * (7.0 / 8 * 2 + 1.0 / 8), 1.0);
}

TEST(CostDataParallel, OverlappedParameterGatherHidesUnderTheFirstForwardOnly) {
  // Megatron-Core ZeRO-1 with --overlap-param-gather: 40M parameters per bucket (bf16 weights),
  // each bucket's all-gather dispatched from the forward pre-hook of the bucket before it on the
  // next iteration's first micro-batch. GPT-3 1.3B over 16 GPUs of two nodes: the whole gather
  // moves 2.6 GB.
  Experiment e = fsdp();
  e.plan.zero = 1;
  e.plan.framework = Framework::megatron_core;
  const CommGroup shard = plan_groups(e.plan, e.cluster).shard;
  auto hand = [&](const Costed& k, double forward_s) {
    const double all = k.comm.time(Collective::all_gather, Bytes(k.params(0) * 2), shard).value();
    // The first bucket is the one holding the word embedding and the positions (the buckets
    // follow the parameters in reverse; a bucket closes once it has reached 40M with the parameter
    // that crosses it): 51200 x 2048 + 2048 x 2048 = 109M parameters.
    const double first = k.comm.time(Collective::all_gather, Bytes((51200.0 + 2048.0) * 2048 * 2), shard).value();
    const double window = 24 * forward_s;  // the first micro-batch's forward: 24 layers, pp 1
    const double exposed = std::max(first, all - window);
    const LayerCompute lc = k.compute.layer(0, 0, false, 0);
    const double f = overlap_contention(k.in(), gemm_share(lc, false));
    return std::pair{exposed + f * (all - exposed), all};
  };
  Costed plain(e);
  e.plan.param_gather_overlap = true;
  // 0.2 ms per layer forward: the 4.8 ms forward cannot cover the gather, the rest waits.
  ComputeCosts quick = round_compute();
  quick.layer = [](int, int, bool, int) {
    return LayerCompute{Seconds(0.2e-3), Seconds(0.4e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  };
  Costed brief(e, quick);
  const auto [brief_hand, all] = hand(brief, 0.2e-3);
  ASSERT_GT(all, 2 * 4.8e-3) << "the gather must outlast the short forward for this case";
  EXPECT_NEAR(brief.c.dp_param_gather[0].value(), brief_hand, 1e-12);
  EXPECT_NEAR(plain.c.dp_param_gather[0].value(), all, 1e-12);
  // 5 ms per layer: the 120 ms forward covers all but the first bucket.
  ComputeCosts slow = round_compute();
  slow.layer = [](int, int, bool, int) {
    return LayerCompute{Seconds(5e-3), Seconds(10e-3), Seconds(0), Seconds(0), Seconds(0), {}, {}, Seconds(0), Seconds(0)};
  };
  Costed covered(e, slow);
  EXPECT_NEAR(covered.c.dp_param_gather[0].value(), hand(covered, 5e-3).first, 1e-12);
  EXPECT_LT(covered.c.dp_param_gather[0].value(), 0.5 * all);
  EXPECT_LT(covered.c.dp_param_gather[0], brief.c.dp_param_gather[0]);
  // Two stages (pp 2, dp 8 in one node each): Megatron-Core buckets only the first stage
  // (bucket_size None on later pipeline ranks), so stage 1 gathers its parameters as one bucket
  // that its first forward waits for whole: nothing of it hides.
  e.plan.pp = 2;
  e.plan.dp = 8;
  validate_experiment(e);
  Costed piped(e, quick);
  const CommGroup shard8 = plan_groups(e.plan, e.cluster).shard;
  const double all1 = piped.comm.time(Collective::all_gather, Bytes(piped.params(1) * 2), shard8).value();
  EXPECT_NEAR(piped.c.dp_param_gather[1].value(), all1, 1e-12);
}

TEST(ZeroThree, WeakScalingFallsOnceGathersNoLongerHide) {
  // GPT-3 13B at 512 tokens under FSDP on DGX H100 nodes at a fixed global batch of 128
  // sequences, one micro-batch per step: on 16 GPUs each unit computes 8 sequences, on 128 GPUs
  // one. A layer's
  // gather (bf16, 315M parameters) is fixed while its compute shrinks with the batch, so TFLOP/s
  // per GPU holds while compute per unit exceeds the gather and falls after.
  Experiment base = load_experiment(resolve_scenario("experiments", "sc21-table1-18b"));
  base.model = load_model(resolve_scenario("models", "gpt3-13b"));
  base.model.seq_len = 512;
  base.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  base.training = TrainingSpec{.global_batch = 128, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  base.plan = PlanSpec{};
  base.plan.zero = 3;
  base.plan.framework = Framework::pytorch;
  base.plan.recompute = Recompute::full;
  std::vector<double> tflops, exposed, compute_per_unit, gather_per_unit;
  for (int gpus : {16, 32, 64, 128}) {
    Experiment e = base;
    e.gpus = e.plan.dp = gpus;
    e.plan.micro_batch = 128 / gpus;
    validate_experiment(e);
    const Prediction p = predict(e, EngineKind::analytic);
    tflops.push_back(p.tflops_per_gpu);
    exposed.push_back(in_s(p.breakdown.dp_comm_exposed) / in_s(p.iteration));
    // Hand side: one layer's forward compute at this batch and its gather.
    const auto x = cost_models::resolve_execution(e);
    const ComputeCosts cc = compute_costs(e, x);
    const CommModel comm(e.cluster);
    compute_per_unit.push_back(in_s(cc.layer(e.model.seq_len, e.model.seq_len, false, 0).forward));
    const double layer = cost_models::layer_parameters_on_gpu(e.model, e.plan, 0).total();
    gather_per_unit.push_back(in_s(comm.time(Collective::all_gather, Bytes(layer * 2), plan_groups(e.plan, e.cluster).shard)));
  }
  // Where compute per unit is at least twice the gather, what is exposed is the first gathers of
  // each pass and the SM contention of the hidden ones (24 / 108 of the overlapped compute): well
  // under a sixth of the step. Once the gather exceeds the forward compute, the forward alone
  // exposes (n - 1)(c - t) per micro-batch, the share of exposed communication passes 40%, and
  // the fall steepens: the last doubling loses more than the first.
  ASSERT_GT(compute_per_unit[0], 2 * gather_per_unit[0]);
  EXPECT_LT(exposed[0], 1.0 / 6);
  ASSERT_LT(compute_per_unit[3], gather_per_unit[3]) << "the 128-GPU point must be communication-bound";
  EXPECT_GT(exposed[3], 0.4);
  for (std::size_t i = 1; i < tflops.size(); ++i) EXPECT_LT(tflops[i], tflops[i - 1]) << i;
  EXPECT_LT(tflops[3] / tflops[2], tflops[1] / tflops[0]);
  const double fwd_floor = 40 * (gather_per_unit[3] - compute_per_unit[3]) * 0.999;
  EXPECT_GT(in_s(predict([&] {
              Experiment e = base;
              e.gpus = e.plan.dp = 128;
              e.plan.micro_batch = 1;
              return e;
            }(), EngineKind::analytic).breakdown.dp_comm_exposed),
            fwd_floor);
}

TEST(CostShardedParameters, TheLastStagesHeadIsAUnitToo) {
  // pp 2 x dp 8: the last stage holds 12 layers and the LM head's tied copy (vocab x h, Megatron's
  // and PyTorch's pipeline convention here) with the final norm; ZeRO-3 gathers and reduces it
  // like a layer: per micro-batch 2 x (12 layers + head) gathered, (12 layers + head) reduced.
  Experiment e = fsdp();
  e.plan.pp = 2;
  e.plan.dp = 8;
  validate_experiment(e);
  Costed k(e);
  const ModelSpec& m = k.e.model;
  const double h = m.hidden, layer = 12 * h * h + 13 * h;
  const double head = double(m.vocab) * h + 2 * h;
  const double sent = 7.0 / 8.0 * e.plan.micro_batches(e.training);
  EXPECT_NEAR(k.c.zero3_gather_bytes[1].value(), 2 * (12 * layer + head) * 2 * sent, 1.0);
  EXPECT_NEAR(k.c.zero3_reduce_bytes[1].value(), (12 * layer + head) * 4 * sent, 1.0);
}

TEST(CostShardedParameters, Fsdp2CopiesEachGatheredUnitOutAndEachUnitsGradientsIn) {
  // torchtitan runs FSDP2 (fully_shard): on the compute stream each gathered unit is copied out of
  // the flat buffer (split_with_sizes_copy: read and write bf16, 4 bytes a parameter) and each
  // unit's bf16 gradients copied into the fp32 reduce-scatter buffer (chunk_cat: read 2, write 4).
  // At 1 TB/s a byte costs 1 ps. The forward: embedding (gather, 0.1 ms + copy-out), 24 layers
  // (gather, 1 ms + copy-out), the head (0.5 ms, tied: nothing of its own). The backward, resharded
  // after the forward: head, 24 layers (gather, 2 ms + copy-out + copy-in, reduce), embedding
  // (0.2 ms + copy-in, reduce). The copies lengthen the units (the gathers hide behind them) and
  // are charged on top of what stays exposed.
  Experiment e = fsdp();
  e.plan.framework = Framework::torchtitan;
  validate_experiment(e);
  const ComputeCosts cc = terabyte_compute();
  Costed k(e, cc);
  const FsdpUnits u(k);
  std::vector<ShardedUnit> fwd{{u.ge, Seconds(1e-4 + u.embedding * 4e-12), Seconds(0)}};
  for (int i = 0; i < 24; ++i) fwd.push_back({u.gl, Seconds(1e-3 + u.layer * 4e-12), Seconds(0)});
  fwd.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  const Seconds fwd_copies((u.embedding + 24 * u.layer) * 4e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), (exposed_under_prefetch(fwd, u.contention) + fwd_copies).value(), 1e-12);
  std::vector<ShardedUnit> bwd{{Seconds(0), Seconds(1e-3), Seconds(0)}};
  for (int i = 0; i < 24; ++i) bwd.push_back({u.gl, Seconds(2e-3 + u.layer * (4 + 6) * 1e-12), u.rs(u.layer)});
  bwd.push_back({Seconds(0), Seconds(2e-4 + u.embedding * 6e-12), u.rs(u.embedding)});
  const Seconds bwd_copies((24 * u.layer * 10 + u.embedding * 6) * 1e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_dp_comm.value(), (exposed_under_prefetch(bwd, u.contention) + bwd_copies).value(), 1e-12);
  // The copies are FSDP2's: PyTorch's FSDP (FlatParameter views, here the pytorch entry) makes
  // none, whatever the compute source can price.
  Experiment flat = fsdp();
  Costed kf(flat, cc);
  std::vector<ShardedUnit> plain{{u.ge, Seconds(1e-4), Seconds(0)}};
  for (int i = 0; i < 24; ++i) plain.push_back({u.gl, Seconds(1e-3), Seconds(0)});
  plain.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  EXPECT_NEAR(kf.c.chunk[0][0][0].forward_dp_comm.value(), exposed_under_prefetch(plain, u.contention).value(), 1e-12);
}

TEST(CostShardedParameters, MegatronFsdpKeepsTheEdgesGatheredAndCopiesUnfusedGradients) {
  // Megatron-Core's ZeRO-3 is Megatron-FSDP: transformer layers are its units (gathered for the
  // forward and again for the backward, views of the bucket: nothing copied out), the embedding
  // (tied: it is also the head) and the final norm are gathered once per step and kept, and every
  // unit's gradients are reduce-scattered every micro-batch. Without gradient-accumulation fusion
  // each unit's bf16 gradients are copied into its fp32 bucket on the compute stream (read 2,
  // write 4). At 1 TB/s a byte costs 1 ps; 2 micro-batches per step.
  Experiment e = fsdp();
  e.plan.framework = Framework::megatron_core;
  e.plan.gradient_accumulation_fusion = false;
  validate_experiment(e);
  const ComputeCosts cc = terabyte_compute();
  Costed k(e, cc);
  const FsdpUnits u(k);
  // Forward: the embedding's gather in the first of the two micro-batches (half of it here), 24
  // layers, the head (tied: nothing to gather).
  std::vector<ShardedUnit> fwd{{u.ge * 0.5, Seconds(1e-4), Seconds(0)}};
  for (int i = 0; i < 24; ++i) fwd.push_back({u.gl, Seconds(1e-3), Seconds(0)});
  fwd.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), exposed_under_prefetch(fwd, u.contention).value(), 1e-12);
  // Backward: the head (kept gathered), 24 layers re-gathered with their gradients copied in and
  // reduce-scattered, the embedding (kept) copied in and reduce-scattered.
  std::vector<ShardedUnit> bwd{{Seconds(0), Seconds(1e-3), Seconds(0)}};
  for (int i = 0; i < 24; ++i) bwd.push_back({u.gl, Seconds(2e-3 + u.layer * 6e-12), u.rs(u.layer)});
  bwd.push_back({Seconds(0), Seconds(2e-4 + u.embedding * 6e-12), u.rs(u.embedding)});
  const Seconds copies((24 * u.layer + u.embedding) * 6e-12);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_dp_comm.value(), (exposed_under_prefetch(bwd, u.contention) + copies).value(), 1e-12);
  // Bytes per GPU per step: each layer gathered twice per micro-batch, the embedding once per
  // step, in bf16; everything reduce-scattered every micro-batch in fp32; a ring sends 15/16.
  const double sent = 15.0 / 16.0;
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(), (2 * 2 * 24 * u.layer + u.embedding) * 2 * sent, 1.0);
  EXPECT_NEAR(k.c.zero3_reduce_bytes[0].value(), 2 * (24 * u.layer + u.embedding) * 4 * sent, 1.0);
  // With the fusion (Megatron-LM's default) the weight-gradient GEMMs write into the buckets:
  // no copies.
  Experiment fused = e;
  fused.plan.gradient_accumulation_fusion.reset();
  Costed kf(fused, cc);
  std::vector<ShardedUnit> plain{{Seconds(0), Seconds(1e-3), Seconds(0)}};
  for (int i = 0; i < 24; ++i) plain.push_back({u.gl, Seconds(2e-3), u.rs(u.layer)});
  plain.push_back({Seconds(0), Seconds(2e-4), u.rs(u.embedding)});
  EXPECT_NEAR(kf.c.chunk[0][0][0].backward_dp_comm.value(), exposed_under_prefetch(plain, u.contention).value(), 1e-12);
}

TEST(CostShardedParameters, PipelineStagesReduceOnceAfterTheirLastBackward) {
  // torch.distributed.pipelining under FSDP2 (torchtitan): every micro-batch's backward runs with
  // requires_gradient_sync and reshard_after_backward off and the last one runs post_backward on
  // every unit (PipelineStage.backward_maybe_with_nosync). With reshard_after_forward off (what
  // torchtitan sets with PP) a unit is gathered once per step, by the first micro-batch's forward,
  // and each stage reduce-scatters its whole gradient once, after its last backward, exposed.
  Experiment e = fsdp();
  e.plan.framework = Framework::torchtitan;
  e.plan.pp = 2;
  e.plan.dp = 8;
  e.plan.reshard_after_forward = false;
  validate_experiment(e);
  const int m = e.plan.micro_batches(e.training);
  ASSERT_EQ(m, 4);
  ComputeCosts cc = round_compute();
  cc.memory_bound = [](Bytes b, int) { return Seconds(b.value() * 1e-12); };  // 1 TB/s
  Costed k(e, cc);
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  const double h = e.model.hidden, layer = 12 * h * h + 13 * h;
  const double stage1 = cost_models::parameters_on_gpu(framework_traits(e.plan.framework), e.model, e.plan, 1).total();
  const double head = stage1 - 12 * layer;
  EXPECT_GT(head, double(e.model.vocab) * h);  // the LM head's matrix and the final norm
  const double sent = 7.0 / 8.0;
  // Bytes per GPU per step: each parameter gathered (bf16) and reduced (fp32) once.
  EXPECT_NEAR(k.c.zero3_gather_bytes[1].value(), stage1 * 2 * sent, 1.0);
  EXPECT_NEAR(k.c.zero3_reduce_bytes[1].value(), stage1 * 4 * sent, 1.0);
  // The stage's reduction: its reduce-scatters back to back plus the copies into their fp32
  // buffers (read 2, write 4 bytes a parameter), after the last backward.
  const Seconds rs = k.comm.time(Collective::reduce_scatter, Bytes(stage1 * 4), g.shard);
  EXPECT_NEAR(k.c.dp_grad_sync[1].value(), (rs + Seconds(stage1 * 6e-12)).value(), 1e-12);
  EXPECT_NEAR(k.c.dp_sync_tail[1].value(), k.c.dp_grad_sync[1].value(), 1e-15);
  // Backward units neither gather nor reduce: nothing exposed, no copies.
  EXPECT_EQ(k.c.chunk[1][0][0].backward_dp_comm.value(), 0.0);
  // The forward's gathers (12 layers, then the head), paid by the first micro-batch only: a
  // quarter of their exposure (and copy-out) on each of the 4.
  const Seconds gl = k.comm.time(Collective::all_gather, Bytes(layer * 2), g.shard);
  const Seconds gh = k.comm.time(Collective::all_gather, Bytes(head * 2), g.shard);
  const double f = 24.0 / (e.cluster.gpu.sms - 24.0);
  std::vector<ShardedUnit> fwd;
  for (int i = 0; i < 12; ++i) fwd.push_back({gl, Seconds(1e-3 + layer * 4e-12), Seconds(0)});
  fwd.push_back({gh, Seconds(5e-4 + head * 4e-12), Seconds(0)});
  const Seconds copies(stage1 * 4e-12);
  EXPECT_NEAR(k.c.chunk[1][0][0].forward_dp_comm.value(), ((exposed_under_prefetch(fwd, f) + copies) / 4.0).value(),
              1e-12);
  // PyTorch's FSDP without torch.distributed.pipelining (the pytorch entry): every micro-batch
  // gathers in its forward and reduces in its backward, nothing after the step.
  Experiment per_mb = e;
  per_mb.plan.framework = Framework::pytorch;
  validate_experiment(per_mb);
  Costed kp(per_mb, cc);
  EXPECT_EQ(kp.c.dp_grad_sync[1].value(), 0.0);
  EXPECT_NEAR(kp.c.zero3_reduce_bytes[1].value(), stage1 * 4 * sent * m, 1.0);
  EXPECT_GT(kp.c.chunk[1][0][0].backward_dp_comm.value(), 0.0);
}

namespace {
// GPT-3 350M (24 layers, h 1024, with biases) in fp16 on two Selene nodes under DeepSpeed's
// ZeRO-3 (dp 16), one micro-batch; every layer and edge computes in no time (only communication
// and its copies are left to count), a memory pass 1 ns per byte.
Experiment deepspeed_zero3() {
  Experiment e = fsdp();
  e.model = load_model(resolve_scenario("models", "gpt3-350m"));
  e.training = TrainingSpec{.global_batch = 16, .dtype = Dtype::fp16, .optimizer = Optimizer::adam};
  e.plan.framework = Framework::deepspeed;
  e.plan.recompute = Recompute::full;
  validate_experiment(e);
  return e;
}
ComputeCosts instant_compute() {
  ComputeCosts c;
  c.layer = [](int, int, bool, int) { return LayerCompute{}; };
  c.edges = [](int) { return EdgeCompute{}; };
  c.optimizer = [](double) { return Seconds(0); };
  c.memory_bound = [](Bytes b, int) { return Seconds(b.value() * 1e-9); };
  return c;
}
}  // namespace

TEST(DeepSpeedZero3, GathersModuleByModuleOnDemandInBucketsAndCopies) {
  // A GPT layer's modules by weight: QKV 3h^2, projection h^2, FC1 4h^2, FC2 4h^2.
  const Experiment e = deepspeed_zero3();
  const std::vector<double> shares = cost_models::zero3_module_shares(framework_traits(Framework::deepspeed), e.model);
  ASSERT_EQ(shares.size(), 4u);
  EXPECT_DOUBLE_EQ(shares[0], 3.0 / 12);
  EXPECT_DOUBLE_EQ(shares[1], 1.0 / 12);
  EXPECT_DOUBLE_EQ(shares[2], 4.0 / 12);
  EXPECT_DOUBLE_EQ(shares[3], 4.0 / 12);
  EXPECT_EQ(cost_models::zero3_module_shares(framework_traits(Framework::torchtitan), e.model).size(), 1u);
  // With nothing to hide under, the forward exposes every gather: the embedding in one piece,
  // each layer in its four modules (fp16), each followed by its copy out of the gather buffer
  // (read + write, 4 bytes per parameter at 1 ns per byte), and the head (tied: GPT's final norm).
  Costed k(e, instant_compute());
  const CommGroup shard = plan_groups(e.plan, e.cluster).shard;
  auto ag = [&](double params) { return k.comm.time(Collective::all_gather, Bytes(2.0 * params), shard).value(); };
  const double layer = cost_models::layer_parameters_on_gpu(e.model, e.plan, 0).total();
  const double all = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0).total();
  const double edges = all - 24 * layer;
  double layer_gather = 4e-9 * layer;
  for (double s : shares) layer_gather += ag(layer * s);
  // (The embedding and the head share what is beyond the layers: on one stage the first stage
  // holds it, gathered as one module before the first layer.)
  const double fwd = ag(edges) + 4e-9 * edges + 24 * layer_gather;
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), fwd, 1e-9 * fwd);
  // Nothing stays gathered (no prefetch trace, FrameworkTraits::zero3_prefetch): under full
  // recompute the backward gathers every layer twice, for its recompute and for its backward (the
  // embedding's backward needs no gather); it reduce-scatters in buckets of 5e8 elements, each
  // layer its share of one bucket, with three read + write passes over every fp16 gradient (12
  // bytes per parameter).
  const double bucket = k.comm.time(Collective::reduce_scatter, Bytes(2.0 * 5e8), shard).value();
  const double bwd = 2 * 24 * layer_gather + all * (bucket / 5e8 + 12e-9);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_dp_comm.value(), bwd, 1e-9 * bwd);
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(), (all + 2 * 24 * layer) * 2.0 * 15.0 / 16, 1e-6 * all);
  // With compute to hide under (1 ms per layer forward, more than any module's gather here), the
  // gathers still wait: on demand, the forward exposes every one (no copies: this compute has no
  // memory-bound cost), where a prefetching framework would expose about the first.
  Costed k3(e, round_compute());
  double on_demand = ag(edges);
  for (double s : shares) on_demand += 24 * ag(layer * s);
  EXPECT_NEAR(k3.c.chunk[0][0][0].forward_dp_comm.value(), on_demand, 1e-9 * on_demand);
  EXPECT_GT(on_demand, 24 * ag(layer * shares[0]));
  // plan.reduce_bucket sets the bucket. At 1e6 elements every weight is bigger than a bucket
  // (QKV 3h^2 = 3.1M, the projection h^2 = 1.05M, FC1 and FC2 4h^2): DeepSpeed reduce-scatters
  // each alone and whole, with one read + write pass (the div_: 4 bytes per parameter), and each
  // flushes the vectors that came before it (stage3.py reduce_independent_p_g_buckets_and_
  // remove_grads): the layer's two LayerNorms' weight and bias and its four biases, 4h + 3h + h +
  // 4h + h = 13h, a quarter a flush. The embedding's one gradient (vocab x h) goes alone too.
  Experiment small = e;
  small.plan.reduce_bucket = 1000000;
  Costed k2(small, instant_compute());
  auto rs = [&](double params) { return k2.comm.time(Collective::reduce_scatter, Bytes(2.0 * params), shard).value(); };
  double layer_reduce = 4e-9 * layer + 4 * rs(13.0 * 1024 / 4);
  for (double s : shares) layer_reduce += rs(layer * s);
  const double bwd2 = 2 * 24 * layer_gather + 24 * layer_reduce + rs(edges) + 4e-9 * edges;
  EXPECT_NEAR(k2.c.chunk[0][0][0].backward_dp_comm.value(), bwd2, 1e-9 * bwd2);
  EXPECT_GT(bwd2 - 2 * 24 * layer_gather, 0.0);
}

TEST(DeepSpeedZero3, WithACompleteTraceKeepsWhatIsUsedAgainWithinTheReuseDistance) {
  // plan.zero3_prefetch true: at each module's release DeepSpeed walks its recorded trace forward
  // and keeps the parameters if they come round again within stage3_max_reuse_distance (1e9
  // elements): the rest of the forward, then the backward up to this unit, a recomputed layer
  // counted twice there (its recompute, its backward). GPT-3 1.3B on one stage, full recompute:
  // a layer holds 12 h^2 + 13 h = 50,358,272 parameters (h 2048), the tied embedding with the
  // positions and the final norm 51200 h + 2048 h + 2 h = 109,056,000, walked once forward (the
  // head) and once backward. Layer i (of 24) is reused after 2 x 109.06M + 3 x (23 - i) x 50.36M
  // elements: under 1e9 for 23 - i <= 5, so the last six layers stay gathered and the first 18
  // are gathered again in the backward, once each.
  Experiment e = deepspeed_zero3();
  e.model = load_model(resolve_scenario("models", "gpt3-1.3b"));
  e.plan.zero3_prefetch = true;
  validate_experiment(e);
  Costed k(e, instant_compute());
  const CommGroup shard = plan_groups(e.plan, e.cluster).shard;
  const double layer = cost_models::layer_parameters_on_gpu(e.model, e.plan, 0).total();
  const double all = cost_models::parameters_on_gpu(*k.x.framework, e.model, e.plan, 0).total();
  ASSERT_DOUBLE_EQ(layer, 50358272.0);
  ASSERT_DOUBLE_EQ(all - 24 * layer, 109056000.0);
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(), (all + 18 * layer) * 2.0 * 15.0 / 16, 1e-6 * all);
  // Without recompute a later layer is walked once in the backward: 2 x 109.06M + 2 x (23 - i) x
  // 50.36M < 1e9 for 23 - i <= 7, eight layers kept.
  Experiment n = e;
  n.plan.recompute = Recompute::none;
  Costed kn(n, instant_compute());
  EXPECT_NEAR(kn.c.zero3_gather_bytes[0].value(), (all + 16 * layer) * 2.0 * 15.0 / 16, 1e-6 * all);
  // With nothing gathered in its backward but the 18 layers, the backward's link time is their
  // gathers (each in its four modules) and the bucketed reduce-scatters with their three read +
  // write passes (12 bytes a parameter). With a complete trace the layer's biases and norms (all
  // under the 1e5-element persistence threshold at h 2048: 3h, h, 4h, h) are never released, so
  // each module's fetch gathers its weight alone, in place: no copy out of a gather buffer
  // (all_gather_coalesced of one parameter).
  const std::vector<double> shares = cost_models::zero3_module_shares(framework_traits(Framework::deepspeed), e.model);
  double layer_gather = 0;
  for (double sh : shares) layer_gather += k.comm.time(Collective::all_gather, Bytes(2.0 * layer * sh), shard).value();
  const double bucket = k.comm.time(Collective::reduce_scatter, Bytes(2.0 * 5e8), shard).value();
  const double bwd = 18 * layer_gather + all * (bucket / 5e8 + 12e-9);
  EXPECT_NEAR(k.c.chunk[0][0][0].backward_dp_comm.value(), bwd, 1e-9 * bwd);
  // The same plan unset is the release without a complete trace (the deepspeed default): every
  // layer gathered for its recompute and again for its backward.
  Experiment d = e;
  d.plan.zero3_prefetch.reset();
  Costed kd(d, instant_compute());
  EXPECT_NEAR(kd.c.zero3_gather_bytes[0].value(), (all + 2 * 24 * layer) * 2.0 * 15.0 / 16, 1e-6 * all);
}

TEST(Fsdp1, CastsAndPredividesEachGradientBeforeItsReduceScatter) {
  // FSDP1's post-backward hook, on the stream its reduce-scatter follows: the unsharded gradient
  // cast to the reduce dtype where it differs (read the gathered dtype, write the reduce dtype)
  // and divided in place by the predivide factor (read and write the reduce dtype); 16 ranks have
  // a factor of 4 (_get_gradient_predivide_factor). llm-foundry's Composer FSDP gathers bf16 and
  // reduces fp32 (mixed_precision DEFAULT): 2 + 4 + 4 + 4 = 14 bytes per parameter, every
  // parameter once per micro-batch's backward, all exposed here (no compute, 1 ns a byte).
  Experiment e = fsdp();
  e.plan.framework = Framework::llm_foundry;
  validate_experiment(e);
  auto backward = [&](bool passes) {
    fixtures::Costed k(e, instant_compute());
    FrameworkTraits fw = *k.x.framework;
    EXPECT_TRUE(fw.fsdp1_reduce_passes);
    fw.fsdp1_reduce_passes = passes;
    k.x.framework = &fw;
    cost_layer_chunks(k.in(), k.c);
    cost_data_parallel(k.in(), k.c);
    cost_sharded_parameters(k.in(), k.c);
    return std::make_pair(k.c.chunk[0][0][0].backward_dp_comm.value(), k.params(0));
  };
  const auto [with, all] = backward(true);
  const double without = backward(false).first;
  const cost_models::ExecutionModel x = cost_models::execution_model(e.training, e.plan);
  ASSERT_EQ(x.bytes.gather, 2.0);
  ASSERT_EQ(x.bytes.reduce, 4.0);
  EXPECT_NEAR(with - without, 14e-9 * all, 1e-6 * with);
  EXPECT_FALSE(framework_traits(Framework::torchtitan).fsdp1_reduce_passes);
}

TEST(DeepSpeedZero3, PersistentVectorsAreGatheredOneByOneAfterTheStep) {
  // Per layer: two LayerNorms' weight and bias (h each) and the four linear biases (3h, h, 4h,
  // h), all under the 1e5-element persistence threshold at h = 1024: 8 vectors, each an all-gather
  // of its fp16 values after every step, on top of the optimizer's own time (0 here).
  const Experiment e = deepspeed_zero3();
  const std::vector<double> v = cost_models::zero3_persistent_vectors(framework_traits(Framework::deepspeed), e.model, e.plan);
  const std::vector<double> expected = {1024, 1024, 1024, 1024, 3072, 1024, 4096, 1024};
  EXPECT_EQ(v, expected);
  Costed k(e, instant_compute());
  cost_optimizer(k.in(), k.c);
  const CommGroup shard = plan_groups(e.plan, e.cluster).shard;
  double t = 0;
  for (double n : expected) t += 24 * k.comm.time(Collective::all_gather, Bytes(2.0 * n), shard).value();
  EXPECT_NEAR(k.c.optimizer[0].value(), t, 1e-12 * t);
  EXPECT_TRUE(cost_models::zero3_persistent_vectors(framework_traits(Framework::torchtitan), e.model, e.plan).empty());
}

namespace {
// fsdp()'s model with every FFN an MoE of `experts` top-2 experts, ep `ep`, as Megatron-FSDP runs it.
Experiment megatron_fsdp_moe(int experts, int ep) {
  Experiment e = fsdp();
  e.model.moe = MoeSpec{.experts = experts, .top_k = 2};
  e.plan.framework = Framework::megatron_core;
  e.plan.ep = ep;
  validate_experiment(e);
  return e;
}
}  // namespace

// Megatron-FSDP with expert parallelism (core_v0.16+): the experts shard over the ranks holding
// the same experts (expert_dp = 16 / ep 8 = 2, two ranks a node apart), the rest over all 16.
TEST(CostShardedParameters, ExpertsShardOverTheirExpertDataParallelGroup) {
  const Experiment e = megatron_fsdp_moe(8, 8);
  ASSERT_EQ(e.plan.expert_dp(), 2);
  Costed k(e, round_compute());
  const ModelSpec& m = k.e.model;
  // One expert per GPU per layer: its two h x 4h matrices and their biases (4h + h), whole on
  // every GPU; the rest of the layer (attention, norms, router) is the dense part.
  const double h = m.hidden;
  const cost_models::StageParameters lp = cost_models::layer_parameters_on_gpu(m, k.e.plan, 0);
  EXPECT_NEAR(lp.expert, 8 * h * h + 5 * h, 1.0);
  const double embedding = double(m.vocab) * h + double(m.seq_len) * h + 2 * h;
  // Per micro-batch (two of them): every layer gathered forward and backward, bf16; the dense
  // part sends 15/16 of each buffer in its 16-rank ring, the experts 1/2 in their 2-rank one.
  // Megatron-FSDP gathers the embedding once per step (zero3_edges_gathered_per_step).
  const double dense_sent = 15.0 / 16.0, expert_sent = 1.0 / 2.0;
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(),
              (2 * 24 * (lp.dense * dense_sent + lp.expert * expert_sent) * 2 + embedding * dense_sent) * 2, 1.0);
  // fp32 reduce-scatters, once per micro-batch per unit.
  EXPECT_NEAR(k.c.zero3_reduce_bytes[0].value(),
              (24 * (lp.dense * dense_sent + lp.expert * expert_sent) + embedding * dense_sent) * 4 * 2, 1.0);
  // A layer's gather is the dense all-gather over the shard group, then the experts' over theirs.
  const PlanGroups g = plan_groups(k.e.plan, k.e.cluster);
  EXPECT_EQ(g.expert_dp.ranks, 2);
  EXPECT_EQ(g.expert_dp.nodes, 2);
  const Seconds gl = k.comm.time(Collective::all_gather, Bytes(lp.dense * 2), g.shard) +
                     k.comm.time(Collective::all_gather, Bytes(lp.expert * 2), g.expert_dp);
  const Seconds ge = k.comm.time(Collective::all_gather, Bytes(embedding * 2), g.shard);
  // The forward as the prefetch model sees it, the layers' compute what the coster charged them
  // (1 ms of compute and their expert all-to-alls).
  const Seconds layer_compute = Seconds(1e-3) + k.c.chunk[0][0][0].forward_ep_comm / 24.0;
  // The embedding's gather: half of it in each of the two forwards.
  std::vector<ShardedUnit> units{{ge * 0.5, Seconds(1e-4), Seconds(0)}};
  for (int i = 0; i < 24; ++i) units.push_back({gl, layer_compute, Seconds(0)});
  units.push_back({Seconds(0), Seconds(5e-4), Seconds(0)});
  const double f = 24.0 / (k.e.cluster.gpu.sms - 24.0);
  EXPECT_NEAR(k.c.chunk[0][0][0].forward_dp_comm.value(), exposed_under_prefetch(units, f).value(), 1e-9);
}

// Where the experts' group is one rank (ep 16 over the 16 GPUs) they stay whole on every GPU:
// nothing of them is gathered or reduce-scattered, only the dense part over dp 16.
TEST(CostShardedParameters, ExpertsOfAOneRankGroupStayWhole) {
  const Experiment e = megatron_fsdp_moe(16, 16);
  ASSERT_EQ(e.plan.expert_dp(), 1);
  Costed k(e, round_compute());
  const ModelSpec& m = k.e.model;
  const double h = m.hidden;
  const cost_models::StageParameters lp = cost_models::layer_parameters_on_gpu(m, k.e.plan, 0);
  ASSERT_GT(lp.expert, 0.0);
  const double embedding = double(m.vocab) * h + double(m.seq_len) * h + 2 * h;
  EXPECT_NEAR(k.c.zero3_gather_bytes[0].value(), (2 * 24 * lp.dense * 2 + embedding) * 15.0 / 16.0 * 2, 1.0);
  EXPECT_NEAR(k.c.zero3_reduce_bytes[0].value(), (24 * lp.dense + embedding) * 15.0 / 16.0 * 4 * 2, 1.0);
}
