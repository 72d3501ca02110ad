// From an experiment to a costed workload: every task's duration from the cost models (compute,
// communication, memory/offload), the communicator placements the plan's rank layout creates, and
// the implementation choices of the framework that runs it, all read from the execution model
// (cost_models/execution.hpp) resolved once by the caller. cost_workload composes one coster per
// concern (sim/costers.hpp); predict() simulates and summarises.
#pragma once

#include <array>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/experiment.hpp"
#include "cost_models/comm.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/roofline.hpp"
#include "sim/prediction.hpp"
#include "sim/simgrid_engine.hpp"
#include "sim/workload.hpp"

namespace foresight::sim {

/// Compute time of one transformer layer on one GPU for one micro-batch (or token slice): the
/// plan's tp and sequence parallelism applied, communication excluded.
struct LayerCompute {
  Seconds forward, backward;       // backward: data and weight gradients
  Seconds recompute;               // what the plan's recompute mode re-runs before the backward
  Seconds attention_forward, attention_backward;  // the attention core's share of forward / backward
  /// The GEMMs a tensor-parallel collective feeds or drains, forward and backward: QKV (after the
  /// first all-gather), projection (before the first reduce-scatter), FC1, FC2.
  std::array<Seconds, 4> gemm_forward{}, gemm_backward{};
  /// The FFN's (or the experts') share of forward / backward: FC1, the activation, FC2 and an MoE
  /// layer's permutes (the rest is the attention side, router included).
  Seconds mlp_forward, mlp_backward;
};

/// Compute time of the pieces outside the transformer layers, per micro-batch (or slice).
struct EdgeCompute {
  Seconds embedding_forward, embedding_backward;  // first stage
  Seconds head_forward, head_backward;            // last stage: final norm, logits, loss
  Seconds mtp_forward, mtp_backward;              // last stage: one MTP module beside its layer
  Seconds head_weight_grad;                       // the head's weight-gradient GEMM (in head_backward)
};

/// One kind of transformer layer of an experiment, priced op by op for one micro-batch of the
/// plan's local tokens (what `foresight simulate --ops` prints): the kind (dense or MoE, and its
/// sliding window), how many of the model's layers are of it, and the forward and backward times
/// of each op with what the plan's recompute mode re-runs.
struct LayerKindOps {
  bool moe = false;
  int window = 0;  // sliding window, 0 for full attention
  int layers = 0;
  int tokens = 0, context = 0;  // per sequence: local tokens, attention context
  cost_models::LayerTimes times;
  Seconds recompute;
};
struct OpsBreakdown {
  std::vector<LayerKindOps> kinds;  // in the order of the model's first layer of each kind
  cost_models::EdgeTimes edges;     // per micro-batch of local tokens
};
OpsBreakdown ops_breakdown(const Experiment& e, const cost_models::ExecutionModel& x);

/// The compute side of costing, so that sim/ needs no knowledge of how kernels are timed (tests
/// and calibrate/ substitute their own).
struct ComputeCosts {
  /// (tokens in the slice, attention context length, is it an MoE layer, its sliding window or 0)
  /// -> times.
  std::function<LayerCompute(int tokens, int context, bool moe_layer, int window)> layer;
  std::function<EdgeCompute(int tokens)> edges;
  /// One optimizer step over `params` parameters held (after sharding) by one GPU.
  std::function<Seconds(double params)> optimizer;
  /// A memory-bound pass over `bytes` of HBM in `launches` kernels (gradient accumulation);
  /// free when unset.
  std::function<Seconds(Bytes bytes, int launches)> memory_bound;
};

/// The compute costs of an experiment from its resolved execution model (the roofline on its
/// GPU, driven by the matching part of the GPU's calibration profile).
ComputeCosts compute_costs(const Experiment& e, const cost_models::ExecutionModel& x);

/// Everything costing one experiment needs, referenced: the specs, how the plan is executed, the
/// compute source and the communication model.
struct CostInputs {
  const Experiment& e;
  const cost_models::ExecutionModel& x;
  const ComputeCosts& compute;
  const CommModel& comm;
};

/// Communicator placements of a plan (CommModel vocabulary).
struct PlanGroups {
  CommGroup tp, dp, pp, ep, cp;  // dp: the gradient group, dp x cp ranks
  /// The ranks holding the same experts (plan.expert_dp() of them), whose expert gradients are
  /// reduced together; ep: the ranks one token's experts are spread over.
  CommGroup expert_dp;
  CommGroup etp;  // the experts' tensor-parallel group (plan.etp() consecutive ranks)
  /// ZeRO's sharding group (the innermost plan.shard_ways() ranks of dp) and the groups that
  /// replicate across it (HSDP; one rank when ZeRO shards over all of dp).
  CommGroup shard, replicate;
  /// Every rank of one pipeline stage (tp x cp x dp): contiguous under tp-cp-dp-pp placement, tp
  /// runs of them tp x pp apart under tp-pp-dp (modelled as evenly spread). FP8 amax reductions.
  CommGroup stage;
  /// The first and the last stage's ranks of one tp rank and data-parallel index, which sum the
  /// tied word embedding's gradient (one rank where pp = 1).
  CommGroup embedding;
  bool pp_crosses_nodes = false;
};
PlanGroups plan_groups(const PlanSpec& plan, const ClusterSpec& cluster);

/// A pipeline send of this kind goes out from one rank of the stage as one flow (the receiver
/// broadcasts it to its TP group); otherwise every rank of the TP group sends at once.
bool one_flow_send(PipelineSend mode, const PlanSpec& plan);

/// The attention context the compute model prices for one rank's tokens: the sequence, or with
/// context parallelism the context at which p.local_tokens() tokens see exactly 1/cp of the causal
/// score triangle (load-balanced chunks): (s + s/cp) / 2.
int attention_context(const Experiment& e);

/// Context parallelism's exposed communication in one layer's forward and backward (the
/// backward also exchanges the key/value gradients): ring, cp - 1 send/recv steps of the local
/// keys and values, each overlapped with one block of the attention it feeds (1/cp of the
/// attention core); all-gather, the keys and values gathered before attention and their
/// gradients reduce-scattered after it, not overlapped. Zero at cp = 1.
struct CpLayerComm {
  Seconds forward, backward;
};
CpLayerComm cp_comm_per_layer(const CostInputs& in, Seconds attention_forward, Seconds attention_backward);

/// Bytes of one activation tensor (b, tokens, h) in the execution's activation dtype.
Bytes activation_tensor(const cost_models::ExecutionModel& x, double micro_batch, double tokens, double hidden);

/// Tensor-parallel communication of one transformer layer's forward (the backward costs the same):
/// 2 all-reduces of the (b, tokens, h) activation, or with sequence parallelism 2 all-gathers and
/// 2 reduce-scatters (Korthikanti 2022 sec. 4.2). Zero at tp = 1.
Seconds tp_comm_per_layer(const CostInputs& in, int tokens);

/// One tensor-parallel collective over `group` as the execution runs it: the comm model's latency
/// plus its transfer at the calibrated share of the links' rate (calibration.yaml,
/// tp_comm_efficiency_scale; 1 where none applies).
Seconds tp_collective(const CostInputs& in, Collective c, Bytes message, const CommGroup& group);
/// An all-to-all of `message` bytes per rank over `group`, its transfer at the calibrated share of
/// its links' rate (calibration.yaml, all_to_all_efficiency_scale; 1 where none applies): MoE
/// token dispatch and all-to-all context parallelism.
Seconds all_to_all_collective(const CostInputs& in, Bytes message, const CommGroup& group);

/// Element size of one direction's sequence-parallel all-gathers' payload relative to the
/// activation's: 1 / activation bytes where they carry FP8 (forward, torchtitan's float8 TP plan,
/// cost_models::fp8_sequence_parallel_gathers; both ways, Transformer Engine's,
/// cost_models::te_fp8_sequence_parallel_gathers), else 1.
double tp_gather_scale(const CostInputs& in, bool forward);

/// One direction's sequence-parallel collectives, or what goes with them, split by kind.
struct TpGathersScatters {
  Seconds gathers, scatters;
  Seconds total() const { return gathers + scatters; }
};

/// A layer's sequence-parallel all-gathers (at tp_gather_scale) and reduce-scatters
/// in one direction without overlap; zero without tp or sequence parallelism.
TpGathersScatters tp_gathers_scatters(const CostInputs& in, int tokens, bool forward);

/// The re-layout copies around one layer's sequence-parallel collectives in one direction
/// (FrameworkTraits::tp_batch_first_relayout: with micro_batch > 1, a read and a write of the whole
/// (b, tokens, h) activation after each all-gather and before each reduce-scatter; forward gathers
/// at tp_gather_scale). They run on the compute stream; async TP (plan.tp_overlap) pays
/// about as much (see the definition). Zero without tp, sequence parallelism or the trait, and at
/// micro_batch 1.
TpGathersScatters tp_relayout_per_layer(const CostInputs& in, int tokens, bool forward);

/// The compute time added per second of compute that runs beside a bulk collective: the SMs its
/// thread blocks hold, ctas / (sms - ctas) (CommParams::overlap_ctas); 0 when unknown.
double sm_share_contention(const CostInputs& in);
/// The time added per second of a bulk collective (an FSDP/ZeRO-3 gather or reduce-scatter, an
/// overlapped data-parallel reduction) hidden under compute: the SM share above; on a GPU whose
/// GEMM kernels are persistent (GpuKernelFigures::persistent_gemm_grid) the GEMMs beside the
/// collective run at half speed, 0.5 per hidden second, and the rest of the compute pays the SM
/// share: gemm_share x 0.5 + (1 - gemm_share) x the SM share.
double overlap_contention(const CostInputs& in, double gemm_share);
/// The share of a layer's forward (or backward) compute spent in its dense GEMMs (QKV, projection,
/// FC1, FC2).
double gemm_share(const LayerCompute& lc, bool backward);

/// With plan.tp_overlap: one layer's TP collectives (all-gather before QKV and FC1, reduce-scatter
/// after the projection and FC2) split into tp chunks, each chunk's transfer overlapping the GEMM
/// chunk it feeds (Transformer Engine's userbuffers, torchtitan's async TP; Wang et al. 2023,
/// "Overlap communication with dependent computation via decomposition"): per collective
/// max(c / tp, c - g) is exposed, and the hidden part costs SM contention ctas / (sms - ctas).
/// `gemms` are the four GEMMs in that order. Falls back to the blocking cost without overlap.
/// In the backward the pairs turn around: the QKV and FC1 input gradients feed reduce-scatters,
/// the projection's and FC2's gradients follow all-gathers (`backward`). `attention_only`: the
/// first pair alone (an MoE layer whose experts' collectives are expert-parallel communication).
Seconds tp_comm_overlapped(const CostInputs& in, int tokens, const std::array<Seconds, 4>& gemms, bool backward = false,
                           bool attention_only = false);

/// Durations of every task of one iteration.
WorkloadCosts cost_workload(const CostInputs& in);

/// Time of one TeraPipe token slice of `tokens` tokens ending at position `end`, forward plus
/// backward (and recompute) on the slowest pipeline stage, with its tensor-parallel and pipeline
/// communication: the t_i of TeraPipe's slicing objective (Li et al. 2021 sec. 3.3).
Seconds slice_stage_time(const CostInputs& in, int tokens, int end);

/// The SimGrid platform for an experiment (one host per TP group, NICs per node).
SimgridPlatform simgrid_platform(const Experiment& e, const CommModel& comm);

/// Simulates one iteration with the chosen engine; fills `trace` (Chrome trace JSON) when given.
/// The prediction carries the memory per stage and whether the most loaded GPU fits.
Prediction predict(const CostInputs& in, EngineKind engine, nlohmann::json* trace = nullptr);

/// The usual path: resolve the experiment's execution model, its compute costs and comm model,
/// and predict. For callers that predict one experiment once.
Prediction predict(const Experiment& e, EngineKind engine, nlohmann::json* trace = nullptr);

}  // namespace foresight::sim
