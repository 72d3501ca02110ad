// One iteration's workload as a DAG (Boost.Graph): compute, tensor/expert-parallel communication,
// pipeline transfers, data-parallel gradient synchronisation and the optimizer step, for one
// data-parallel replica's pipeline (replicas are symmetric; their collectives are costed per group).
// Tasks occupy resources (a stage's compute stream, its DP-communication stream, the link between
// two stages) and the engines run each resource's tasks in creation order.
#pragma once

#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "core/units.hpp"
#include "sim/schedule.hpp"

namespace foresight::sim {

/// What a task's time counts as in the breakdown.
enum class Category { forward, backward, recompute, tp_comm, ep_comm, cp_comm, pp_comm, dp_comm, optimizer, offload, host };
inline constexpr int kCategories = 11;
const char* to_string(Category c);

enum class ResourceKind { compute, dp_comm, link_forward, link_backward, offload };

struct Resource {
  ResourceKind kind;
  int stage;  // owning stage; for links, the sending stage of the forward direction
  std::string name;
};

struct Task {
  Category category = Category::forward;
  Pass pass = Pass::forward;
  int stage = 0;
  int chunk = 0;
  int microbatch = -1;
  int slice = 0;
  Seconds duration;
  std::vector<int> resources;  // indices into Workload::resources, all held for the whole task
  // Network transfers (for the SimGrid engine): bytes from src_stage to dst_stage, or a collective.
  Bytes bytes;                // pp_comm: bytes crossing per transfer; dp_comm: bytes each rank sends
  Seconds latency;            // dp_comm: the collective's latency term (added to the flows' time)
  Seconds tail;               // pp_comm: the receiver-side NVLink part (TP all-gather or broadcast)
                              // that follows the network flow when the transfer crosses nodes
  int src_stage = -1, dst_stage = -1;
  std::string name;
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Task>;
using TaskId = Graph::vertex_descriptor;

/// Costs of one micro-batch (one token slice under TeraPipe) through one model chunk on one GPU.
struct ChunkCosts {
  Seconds forward, backward;                    // computation (backward: data and weight gradients)
  /// The part of `backward` that computes weight gradients (half of each GEMM's backward: dW = X^T dY
  /// has dX = dY W^T's FLOPs) and adds them into the gradient buffer: what a zero-bubble schedule's
  /// split backward leaves for its deferred weight pass.
  Seconds weight_grad;
  Seconds forward_tp_comm, backward_tp_comm;    // blocking tensor/sequence-parallel collectives
  Seconds recompute, recompute_tp_comm;         // recompute before backward (0 without)
  Seconds recompute_ep_comm;                    // the recomputed forward's MoE all-to-alls
  Seconds forward_ep_comm, backward_ep_comm;    // MoE all-to-all dispatch and combine
  Seconds forward_cp_comm, backward_cp_comm;    // context parallelism's exposed K/V exchange
  Seconds offload_out, offload_in;              // activation copies to/from host on a side stream
  /// Windowed offload (FrameworkTraits::activation_offload_windows): the compute stream's waits
  /// for the copies it synchronises with at each window boundary, forward and backward.
  Seconds forward_offload_wait, backward_offload_wait;
  /// ZeRO-3: the part of the chunk's parameter all-gathers (and, backward, gradient
  /// reduce-scatters) that prefetch does not hide behind its compute (sim/costers.hpp,
  /// exposed_under_prefetch). Counted as data-parallel communication.
  Seconds forward_dp_comm, backward_dp_comm;
  /// FP8 delayed scaling's amax all-reduce over the stage's TP x CP x DP ranks at the end of the
  /// chunk's forward and of its backward (FrameworkTraits::fp8_amax_reduction); counted as
  /// data-parallel communication.
  Seconds forward_amax, backward_amax;
  /// The compute stream idle while the framework's host work runs (the calibrated per-micro-batch
  /// slot overhead, ZeRO-3's per-unit host time where the GPU cannot hide it: sharded_exposure),
  /// before the chunk's forward and its backward.
  Seconds forward_host, backward_host;

  /// The compute stream's own work in the chunk's forward: the host's gaps, the layers and their
  /// blocking model-parallel communication (TP, EP, CP), without what data parallelism, offload
  /// or FP8 scaling add around it. What ZeRO-3's first gather, the offload windows and a TeraPipe
  /// slice's step hide under or are built from.
  Seconds forward_stream() const { return forward_host + forward + forward_tp_comm + forward_ep_comm + forward_cp_comm; }
  /// The recomputed forward before the backward (its model-parallel communication with it).
  Seconds recompute_stream() const { return recompute + recompute_tp_comm + recompute_ep_comm; }
  /// The same for the backward, the recomputed forward's own compute and TP/EP collectives not
  /// included (recompute_stream; its CP exchange is in backward_cp_comm).
  Seconds backward_stream() const {
    return backward_host + backward + backward_tp_comm + backward_ep_comm + backward_cp_comm;
  }
};

/// Everything the graph builder needs, already costed by the cost models.
struct WorkloadCosts {
  ScheduleShape shape;
  /// chunk[stage][chunk][slice]
  std::vector<std::vector<std::vector<ChunkCosts>>> chunk;
  std::vector<Seconds> p2p_forward;   // per slice: activation transfer to the next stage
  std::vector<Seconds> p2p_backward;  // per slice: gradient transfer to the previous stage
  /// Per slice: the same transfers between two stages whose TP groups share a node (NVLink
  /// instead of the NICs). Used only where stage_node says both stages sit on one node.
  std::vector<Seconds> p2p_forward_intra, p2p_backward_intra;
  /// Per slice: the part of p2p_forward / p2p_backward spent after the bytes arrived, inside the
  /// receiving node (the TP all-gather of a scatter/gather transfer, TeraPipe's TP broadcast).
  std::vector<Seconds> p2p_forward_tail, p2p_backward_tail;
  /// Node of each stage's first TP group (replica 0), when known. With tp x dp below the GPUs per
  /// node several stages share a node, and only the transfers between nodes cross the NICs.
  std::vector<int> stage_node;
  /// The transfer of `slice` from stage src to stage dst (forward or backward).
  Seconds p2p_time(bool forward, int slice, int src, int dst) const {
    const bool intra = src >= 0 && dst >= 0 && src < int(stage_node.size()) && dst < int(stage_node.size()) &&
                       stage_node[src] == stage_node[dst];
    const std::vector<Seconds>& cross = forward ? p2p_forward : p2p_backward;
    const std::vector<Seconds>& local = forward ? p2p_forward_intra : p2p_backward_intra;
    const std::vector<Seconds>& v = intra && slice < int(local.size()) ? local : cross;
    return slice >= 0 && slice < int(v.size()) ? v[slice] : Seconds(0);
  }
  std::vector<Bytes> p2p_forward_bytes;   // per slice: bytes leaving a node per transfer (for SimGrid)
  std::vector<Bytes> p2p_backward_bytes;
  bool p2p_blocks_sender = true;      // the sender's compute stream waits for the transfer
  std::vector<Seconds> dp_grad_sync;      // per stage: gradient all-reduce / reduce-scatter
  // The sync runs in buckets while the stage's last backward runs (PyTorch DDP, Megatron-LM's
  // --overlap-grad-reduce): it may start with that backward, and its last bucket, dp_sync_tail,
  // only after it. Otherwise the whole sync follows the backward.
  bool dp_overlap = false;
  std::vector<Seconds> dp_sync_tail;      // per stage, with dp_overlap: the last bucket's reduction
  /// With dp_overlap: the part of stage s's sync that must follow its last backward (the tail,
  /// at most the whole sync; the whole sync where no tail was costed). Both engines use this.
  Seconds dp_overlap_tail(int s) const {
    const Seconds sync = s < int(dp_grad_sync.size()) ? dp_grad_sync[s] : Seconds(0);
    return s < int(dp_sync_tail.size()) ? min(sync, dp_sync_tail[s]) : sync;
  }
  /// Per stage, with dp_overlap: the compute time the overlapped buckets add to the backward while
  /// their NCCL kernels hold SMs (overlap_contention x the overlapped time, at most the backward
  /// steps they can hide under: the last one, or with model chunks the (v - 1) pp + 1 from the
  /// first chunk's last micro-batch on), as ZeRO-3's prefetch and overlapped TP pay it; added at
  /// the end of the last backward. The bucket tail starts after the stretched backward. Both
  /// engines use this.
  std::vector<Seconds> dp_overlap_slowdown;
  Seconds dp_overlap_slowdown_of(int s) const {
    return dp_overlap && s < int(dp_overlap_slowdown.size()) ? dp_overlap_slowdown[s] : Seconds(0);
  }
  /// Per stage, with dp_overlap and model chunks: the share of the stage's sync each chunk's
  /// buckets carry; chunk c's may start with its own last backward (the chunks' syncs queue on
  /// the stage's DP stream). Empty: the whole sync waits for the stage's last backward.
  std::vector<std::vector<double>> dp_sync_chunk_share;
  const std::vector<double>& dp_chunk_shares_of(int s) const {
    static const std::vector<double> none;
    return dp_overlap && s < int(dp_sync_chunk_share.size()) ? dp_sync_chunk_share[s] : none;
  }
  /// Per stage: weight-gradient GEMMs deferred to the pipeline flush (plan.defer_embedding_wgrad:
  /// the last stage's LM head), run on the compute stream after the stage's last backward and
  /// before its gradients are synchronised. Both engines use this.
  std::vector<Seconds> deferred_wgrad;
  Seconds deferred_wgrad_of(int s) const { return s < int(deferred_wgrad.size()) ? deferred_wgrad[s] : Seconds(0); }
  std::vector<Bytes> dp_grad_sync_bytes;  // per stage: bytes each DP rank sends in it (coarse ring)
  std::vector<Bytes> dp_param_gather_bytes;
  Seconds dp_latency;                     // latency term of one DP collective
  std::vector<Seconds> dp_param_gather;   // per stage: parameter all-gather after the step (ZeRO-1/2)
  /// ZeRO-3, per stage: bytes each GPU sends per iteration in its parameter all-gathers and in its
  /// gradient reduce-scatters (ring: (n - 1) / n of each gathered or reduced unit).
  std::vector<Bytes> zero3_gather_bytes, zero3_reduce_bytes;
  std::vector<Seconds> optimizer;         // per stage: the optimizer step
};

struct Workload {
  Graph graph;
  std::vector<Resource> resources;
  ScheduleShape shape;
  int compute_resource(int stage) const { return stage; }  // resources [0, p) are compute streams
  /// Whether the task runs on its stage's compute stream (its first resource).
  bool on_compute_stream(const Task& t) const { return !t.resources.empty() && t.resources.front() == compute_resource(t.stage); }
};

/// Builds the DAG: per-stage schedule order, cross-stage dependencies through transfer tasks,
/// data-parallel synchronisation and the optimizer step.
Workload build_workload(const WorkloadCosts& costs);

}  // namespace foresight::sim
