// Coster of the pipeline transfers between stages.
#include <algorithm>

#include "sim/costers.hpp"

namespace foresight::sim {

void cost_pipeline_transfers(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const FrameworkTraits& fw = *in.x.framework;
  const PlanGroups groups = plan_groups(p, in.e.cluster);
  const std::vector<int> slices = p.token_slices.empty() ? std::vector<int>{p.local_tokens(in.e.model)} : p.token_slices;
  // With sequence parallelism every framework sends each rank's own sequence shard; without it,
  // as the framework does (FrameworkTraits::send_forward / backward_send). Both blocking: Megatron-LM
  // v2.x waits on batch_isend_irecv with a device synchronize (megatron/p2p_communication.py);
  // DeepSpeed's p2p.send/recv assert async_op == False (deepspeed/runtime/pipe/p2p.py @ v0.5.x).
  const bool tp_split = p.tp > 1;
  const double host_ranks = std::min(p.tp * p.cp, in.e.cluster.gpus_per_node);  // each cp rank sends its chunk
  // Which node each stage's first TP group sits on (replica 0; the same rank order as the SimGrid
  // platform). When tp x dp (tp-dp-pp) or tp (tp-pp-dp) is below the GPUs per node, several
  // consecutive stages share a node: only the transfers between nodes cross the NICs, the others
  // run over NVLink. Both costs are kept; the engines pick one per pair of stages.
  const long long pp_stride = p.placement == Placement::tp_dp_pp ? (long long)p.tp * p.cp * p.dp : p.tp;
  const int gpn = in.e.cluster.gpus_per_node;
  for (int s = 0; s < p.pp; ++s) c.stage_node.push_back(int((long long)s * pp_stride / gpn));
  CommGroup pp_cross = groups.pp, pp_local = groups.pp;
  if (p.pp > 1) {
    pp_cross.ranks = pp_local.ranks = 2;
    pp_cross.ranks_per_node = 1;
    pp_cross.nodes = 2;
    pp_local.ranks_per_node = 2;
    pp_local.nodes = 1;
    // Pairs of ranks sending inside one node at once: at most half the node's GPUs.
    pp_local.concurrent_groups = int(std::clamp<long long>(pp_stride, 1, std::max(1, gpn / 2)));
  }
  const PipelineSend send_backward = fw.backward_send(p);
  for (int slice : slices) {
    const Bytes act = activation_tensor(in.x, p.micro_batch, slice, in.e.model.hidden);
    // time = the send plus `tail`, the receiver's NVLink collective after the bytes arrived.
    auto transfer = [&](PipelineSend mode, const CommGroup& pp_group, Seconds& time, Seconds& tail, Bytes& node_bytes) {
      tail = Seconds(0);  // only a mode that gathers or broadcasts on arrival has one
      if (one_flow_send(mode, p)) {
        // One whole tensor from one rank of the stage, broadcast to its TP group on arrival.
        node_bytes = act;
        if (p.pp == 1) return;
        CommGroup one_flow = pp_group;
        one_flow.concurrent_groups = 1;
        if (p.tp > 1) tail = tp_collective(in, Collective::broadcast, act, groups.tp);
        time = in.comm.time(Collective::send_recv, act, one_flow) + tail;
        return;
      }
      const bool split = tp_split && (p.sequence_parallel || mode == PipelineSend::split_then_gather);
      const Bytes per_rank = split ? act / double(p.tp) : act;
      node_bytes = per_rank * host_ranks;
      if (p.pp == 1) return;
      if (split && !p.sequence_parallel) tail = tp_collective(in, Collective::all_gather, act, groups.tp);
      time = in.comm.time(Collective::send_recv, per_rank, pp_group) + tail;
    };
    Seconds fwd, bwd, fwd_local, bwd_local, fwd_tail, bwd_tail, unused_tail;
    Bytes fwd_bytes, bwd_bytes, unused;
    transfer(fw.send_forward, pp_cross, fwd, fwd_tail, fwd_bytes);
    transfer(send_backward, pp_cross, bwd, bwd_tail, bwd_bytes);
    transfer(fw.send_forward, pp_local, fwd_local, unused_tail, unused);
    transfer(send_backward, pp_local, bwd_local, unused_tail, unused);
    c.p2p_forward.push_back(fwd);
    c.p2p_backward.push_back(bwd);
    c.p2p_forward_tail.push_back(fwd_tail);
    c.p2p_backward_tail.push_back(bwd_tail);
    c.p2p_forward_intra.push_back(fwd_local);
    c.p2p_backward_intra.push_back(bwd_local);
    c.p2p_forward_bytes.push_back(fwd_bytes);
    c.p2p_backward_bytes.push_back(bwd_bytes);
  }
  // Blocking unless the framework overlaps them (Megatron-Core's interleaved overlap_p2p_comm:
  // isend/irecv posted, waited for before the chunk that consumes them, schedules.py).
  c.p2p_blocks_sender = !fw.overlaps_pipeline_sends(p);
}

}  // namespace foresight::sim
