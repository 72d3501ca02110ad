// The costers cost_workload composes, one per concern, each filling its part of WorkloadCosts
// from the execution model (what the framework does) and the cost models (how long it takes).
// Public so that each can be tested against a hand computation on its own.
#pragma once

#include "sim/costing.hpp"

namespace foresight::sim {

/// Transformer-layer compute of every (stage, chunk, slice): forward, backward, recompute, their
/// tensor/sequence-parallel and expert-parallel collectives, and the weight-gradient
/// accumulation pass after each backward (ElementSizes::accumulate bytes per parameter, one
/// launch per parameter tensor; free for the first micro-batch where gradients are freed between
/// steps). Sizes c.chunk.
void cost_layer_chunks(const CostInputs& in, WorkloadCosts& c);

/// One transformer layer of one micro-batch (or slice) as a chunk runs it, its communication
/// included: the forward with its TP collectives (overlapped with the GEMMs under plan.tp_overlap),
/// CP exchange and EP all-to-alls; what recompute re-runs (full: the whole forward with its
/// collectives where the layer is recomputed, scaled by `redo`, the share of micro-batches that
/// recompute it (core/plan.hpp layer_recompute_share; the engines charge every micro-batch of a
/// stage the mean); selective: the attention core); the backward with its collectives.
/// `tp_blocking`: the layer's TP communication without overlap (tp_comm_per_layer); `ep`: one
/// direction's dispatch + combine all-to-alls (0 for dense layers).
struct LayerStep {
  Seconds forward, forward_tp, forward_cp, forward_ep;
  Seconds recompute, recompute_comm;  // recompute_comm: the recomputed forward's TP collectives
  Seconds recompute_ep;               // and its MoE all-to-alls
  Seconds backward, backward_tp, backward_cp, backward_ep;  // backward_cp holds a recomputed forward's CP exchange
  Seconds forward_total() const { return forward + forward_tp + forward_cp + forward_ep; }
  Seconds backward_total() const {
    return recompute + recompute_comm + recompute_ep + backward + backward_tp + backward_cp + backward_ep;
  }
};
/// PyTorch's SDPA context parallelism's eager fp32 merging of the ring steps' blocks for one
/// layer (forward: the outputs and log-sum-exps; backward: the query, key and value gradients).
struct TorchCpMerges {
  Seconds forward, backward;
};
TorchCpMerges torch_cp_merges(const CostInputs& in, int tokens);

/// `moe_layer`: under sequence parallelism an MoE layer's TP collectives are its attention's only.
LayerStep layer_step(const CostInputs& in, const LayerCompute& lc, int tokens, Seconds tp_blocking, Seconds ep,
                     double redo, bool moe_layer = false);

/// An MoE layer's expert-parallel communication in one direction: the dispatch and combine
/// all-to-alls of routed_factor() copies of each token the rank routes over the ep group (with the
/// framework's all-to-all of their router probabilities), and with experts split over several GPUs
/// under sequence parallelism the all-gather and reduce-scatter of their rows over plan.etp().
Seconds ep_comm_per_layer(const CostInputs& in, int tokens);

/// With plan.ep_overlap: one MoE layer's exposed all-to-all time per direction when Megatron-Core
/// runs the forward of one micro-batch beside the backward of another, layer by layer
/// (combined_1f1b.py, TransformerLayerSchedulePlan.run): the compute stream runs the forward's
/// attention, the backward's expert data and (delayed) weight gradients, the forward's experts,
/// then the backward's attention, while the communication stream runs the backward's combine
/// under the forward's attention, the forward's dispatch and the backward's dispatch under the
/// backward's experts, and the forward's combine under the backward's attention, each exchange
/// waiting for the compute it needs. What the pair takes beyond its compute is exposed, and the
/// hidden exchanges cost their SM share (overlap_contention). `paired_share`: the share of a
/// stage's passes that run in such pairs (the rest, warm-up forwards and cool-down backwards, run
/// alone with their exchanges exposed). `ep`: one direction's exchange (ep_comm_per_layer).
struct EpExposure {
  Seconds forward, backward;
};
EpExposure ep_overlap_exposure(const CostInputs& in, const LayerCompute& lc, Seconds ep, double paired_share);
/// The share of a stage's forward (and backward) passes that Megatron-Core's combined 1F1B pairs:
/// without a pipeline every micro-batch's but the first forward and the last backward; with the
/// interleaved schedule those after its warm-up of (pp - stage - 1) x 2 + (v - 1) x pp + 1 forwards
/// (schedules.get_pp_rank_microbatches, with the extra warm-up micro-batch the overlap adds).
/// DualPipe: the share of the stage's forwards its schedule marks paired (sim/schedule.cpp).
double ep_overlap_paired_share(const PlanSpec& plan, int stage, int micro_batches);

/// The embedding on the first model chunk and the LM head + loss on the last, with their
/// tensor-parallel collectives (vocab-parallel embedding all-reduce, the head's input-gradient
/// all-reduce); and the all-gather a framework re-runs before a backward when it kept only a TP
/// partition of the stage's output (FrameworkTraits::regathers_output_for_backward).
void cost_edges(const CostInputs& in, WorkloadCosts& c);

/// Activation offload: each chunk's offloaded share out after its forward and back before its
/// backward over the GPU's host link (Ren et al. 2021, ZeRO-Offload, sec. 4); where the framework
/// offloads in windows (FrameworkTraits::activation_offload_windows), the compute stream's waits
/// for each layer's copy instead (windowed_offload_wait, forward and backward alike).
void cost_activation_offload(const CostInputs& in, WorkloadCosts& c);

/// Transformer Engine's windowed offload of the first `offloaded` of `layers` equal layers: one
/// layer's copy (`transfer`) at a time, each beside the layers of one window (layers / offloaded
/// of them, the remainder spread over the first windows; the first copy starts one layer into
/// its window) and waited for at its end. The sum of what each copy outlasts its window's compute.
Seconds windowed_offload_wait(int layers, int offloaded, Seconds transfer, Seconds layer_time);

/// Pipeline transfers per slice, as the framework sends them (FrameworkTraits::send_forward /
/// backward_send), across nodes and inside one, with the receiver-side NVLink tail and the bytes
/// each transfer puts on a node's NICs; and which node each stage sits on.
void cost_pipeline_transfers(const CostInputs& in, WorkloadCosts& c);

/// Data-parallel gradient synchronisation per stage after the last backward (all-reduce, or
/// ZeRO-1/2's reduce-scatter or all-reduce as the framework runs it over the shard group, then
/// the parameter all-gather; under ZeRO-3 the per-unit traffic is cost_sharded_parameters'), with
/// HSDP the all-reduce of each shard across the replicas, the expert gradients' all-reduce over
/// dp/ep, with plan.dp_overlap the last bucket that waits for the backward, and with
/// plan.param_gather_overlap only the first bucket of the gather exposed.
void cost_data_parallel(const CostInputs& in, WorkloadCosts& c);

/// One ZeRO-3 unit (an FSDP-wrapped module: one transformer layer, or the embedding) as a chunk
/// runs it: the all-gather of its parameters before its compute, the compute, and the
/// reduce-scatter of its gradients after it (backward only).
struct ShardedUnit {
  Seconds gather, compute, reduce;
  /// The host's work for the unit in this pass (its hooks: the calibrated unit_overhead, once per
  /// forward and once per backward or recompute): the unit's kernels start only once the host has
  /// done it. Where the host runs ahead of the GPU this costs time only where it is longer than
  /// what the GPU does meanwhile; where it works after each unit's compute (serial), whenever the
  /// GPU is not waiting for the unit's gather longer (sharded_exposure).
  Seconds host = Seconds(0);
  /// The part of `compute` that copies the gathered parameters out of the gather buffer (FSDP2's
  /// copy-out, FrameworkTraits::fsdp2_unit_copies): a pass that does not gather does not do it.
  Seconds gather_copy = Seconds(0);
};

/// What a chunk's compute stream waits for under ZeRO-3 (exposed_under_prefetch): the exposed
/// gathers and reduce-scatters with the SMs the hidden ones hold, and apart from them the time the
/// GPU waits on the host's per-unit work (ShardedUnit::host).
struct ShardedExposure {
  Seconds comm, host;
};

/// The time a chunk's compute stream waits on ZeRO-3 communication when each unit's gather is
/// prefetched one unit ahead (FSDP's backward prefetch and forward prefetch / FSDP2's implicit
/// prefetch, DeepSpeed's prefetch bucket; at most two units gathered at once, FSDP's
/// limit_all_gathers): gathers and reduce-scatters share one network path in issue order
/// (gather i + 1, then reduce i), unit i computes once its gather and unit i - 1 are done, and
/// gather i may start only when unit i - 2 has freed its buffer. Returns the end of the last
/// compute or the last reduce-scatter, whichever is later, minus the compute: for n equal units,
/// c + (n - 1) max(0, c - t) in the forward (gather c, compute t), the first gather when t >= c.
/// `contention`: the compute time added per second of compute that runs beside a collective (the
/// SMs the collective's thread blocks hold, ctas / (sms - ctas)); the hidden communication
/// (what is not exposed, at most the compute) costs that much more. `prefetch` false
/// (FrameworkTraits::prefetches_zero3): gather i + 1 is issued when unit i is done, after its
/// reduce-scatter: everything is exposed, the sum of the gathers and reduce-scatters.
/// `host` in the units (ShardedUnit::host): unit i computes only once the host has done its work
/// for it. The host runs ahead of the GPU, the units' work back to back (the first unit's done
/// while the GPU finished what came before the pass) but at most two units ahead of it; a unit
/// then costs the longest of its compute, its gather and its host work. `serial`
/// (FrameworkTraits::zero3_backward_host_serial): the host does a unit's work after the previous
/// unit's compute has ended, the first unit's too, and the GPU waits for it unless the unit's
/// gather arrives later still. exposed_under_prefetch returns the communication
/// and the host parts summed; sharded_exposure apart, the host's part being what its work adds to
/// the chain without it.
Seconds exposed_under_prefetch(const std::vector<ShardedUnit>& units, double contention = 0.0, bool prefetch = true);
ShardedExposure sharded_exposure(const std::vector<ShardedUnit>& units, double contention = 0.0, bool prefetch = true,
                                 bool serial = false);


/// ZeRO-3 over plan.shard_ways() ranks: every (stage, chunk, slice)'s exposed gathers in its
/// forward and gathers plus reduce-scatters in its backward (forward_dp_comm / backward_dp_comm),
/// per micro-batch (FSDP and DeepSpeed ZeRO-3 reduce each micro-batch's gradients), and the bytes
/// each GPU sends per iteration by kind. The backward gathers again unless
/// plan.reshard_after_forward is false. Units: each transformer layer, and on the first stage the
/// embedding (gathered in the forward, kept to the backward as FSDP keeps its root module).
void cost_sharded_parameters(const CostInputs& in, WorkloadCosts& c);

/// The optimizer step per stage over the parameters each GPU updates (its ZeRO shard), or with
/// optimizer offload the PCIe round trip of gradients and weights.
void cost_optimizer(const CostInputs& in, WorkloadCosts& c);

}  // namespace foresight::sim
