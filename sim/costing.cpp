#include "sim/costing.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "core/flops.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "sim/costers.hpp"
#include "sim/fast_engine.hpp"
#include "sim/host_memory.hpp"
#include "sim/limits.hpp"
#include "sim/trace.hpp"

namespace foresight::sim {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Rank strides of the plan's layout (innermost first).
struct Strides {
  long long tp = 1, cp = 1, dp = 1, pp = 1;
};
Strides strides(const PlanSpec& p) {
  Strides s;
  s.tp = 1;
  s.cp = p.tp;
  if (p.placement == Placement::tp_dp_pp) {  // tp-cp-dp-pp
    s.dp = (long long)p.tp * p.cp;
    s.pp = (long long)p.tp * p.cp * p.dp;
  } else {  // cp = 1 (check_plan)
    s.pp = p.tp;
    s.dp = (long long)p.tp * p.pp;
  }
  return s;
}

/// A communicator of `ranks` ranks spaced `stride` apart in a layout with `gpn` GPUs per node.
CommGroup group_of(int ranks, long long stride, int gpn) {
  CommGroup g;
  g.ranks = ranks;
  if (ranks <= 1) return g;
  if (stride >= gpn) {
    // One rank per node; the node's other GPUs belong to sibling groups (same collective, same
    // moment) that share its NICs.
    g.ranks_per_node = 1;
    g.nodes = ranks;
    g.concurrent_groups = int(std::min<long long>(gpn, stride));
    // Consecutive members sit stride / gpn nodes apart (which switch groups they span).
    g.node_stride = int(std::max<long long>(1, stride / gpn));
  } else {
    const int per_node = int(std::min<long long>(ranks, std::max<long long>(1, gpn / stride)));
    g.ranks_per_node = per_node;
    g.nodes = ceil_div(ranks, per_node);
    if (g.ranks_per_node * g.nodes != ranks) {
      // Uneven split (18 ranks 18 apart on 72-GPU nodes: 4, 4, 4, 4, 2): model it as the largest
      // even split with no more ranks per node than the real one (3 per node on 6 nodes), which
      // is conservative on NIC sharing and, unlike one rank per node, does not span more nodes
      // than the cluster has whenever the real placement fits.
      int d = per_node;
      while (ranks % d != 0) --d;
      g.ranks_per_node = d;
      g.nodes = ranks / d;
    }
    g.concurrent_groups = int(std::max<long long>(1, stride));
  }
  return g;
}

}  // namespace

PlanGroups plan_groups(const PlanSpec& p, const ClusterSpec& c) {
  const int gpn = c.gpus_per_node;
  const Strides st = strides(p);
  PlanGroups g;
  g.tp = group_of(p.tp, st.tp, gpn);
  g.tp.concurrent_groups = 1;
  // Gradients are reduced over dp x cp: with tp-cp-dp-pp those ranks are tp apart.
  g.dp = p.cp > 1 ? group_of(p.grad_ranks(), st.cp, gpn) : group_of(p.dp, st.dp, gpn);
  // Experts: the stage's tp-cp-dp ranks regrouped as expert_tp x ep x expert-dp, innermost first
  // (Megatron-Core's folding; with expert_tp = tp and cp = 1 that is ep carved out of dp): ep ranks
  // expert_tp apart, expert replicas expert_tp x ep apart. Under tp-pp-dp placement (no folding,
  // check_plan) the data-parallel ranks are tp x pp apart.
  const long long ep_stride = p.placement == Placement::tp_dp_pp ? p.etp() : st.dp;
  g.ep = group_of(p.ep, ep_stride, gpn);
  g.expert_dp = group_of(p.expert_dp(), ep_stride * p.ep, gpn);
  g.etp = p.etp() == p.tp ? g.tp : group_of(p.etp(), 1, gpn);
  g.etp.concurrent_groups = 1;
  g.cp = group_of(p.cp, st.cp, gpn);
  const long long grad_stride = p.cp > 1 ? st.cp : st.dp;
  const int shard = p.shard_ways();
  g.shard = group_of(shard, grad_stride, gpn);
  g.replicate = group_of(p.grad_ranks() / shard, grad_stride * shard, gpn);
  // A pipeline transfer: two ranks `pp stride` apart; each rank of the TP group sends at once.
  g.pp = group_of(p.pp > 1 ? 2 : 1, st.pp, gpn);
  if (p.pp > 1) g.pp.concurrent_groups = int(std::min<long long>(gpn, std::max<long long>(1, st.pp)));
  // Every stage boundary sends at once: the pipeline's nodes are the cycle whose hops share the
  // fabric's upper tiers (CommModel::tier_penalty).
  if (p.pp > 1) g.pp.ring_nodes = group_of(p.pp, st.pp, gpn).nodes;
  g.pp_crosses_nodes = p.pp > 1 && g.pp.nodes > 1;
  g.embedding = group_of(p.pp > 1 ? 2 : 1, st.pp * (p.pp - 1), gpn);
  g.stage = group_of(p.tp * p.grad_ranks(), p.placement == Placement::tp_dp_pp ? 1 : st.dp / p.tp, gpn);
  g.stage.concurrent_groups = 1;
  return g;
}

Bytes activation_tensor(const cost_models::ExecutionModel& x, double micro_batch, double tokens, double hidden) {
  return Bytes(x.bytes.activation * micro_batch * tokens * hidden);
}

namespace {
/// One ring step's sender and receiver among `ring`'s members, `at_once` such pairs sending
/// together (the ring's siblings: every tp rank's, and under a2a+p2p every all-to-all rank's).
CommGroup ring_pair(const CommGroup& ring, int at_once, int gpn) {
  CommGroup pair = ring;
  pair.ranks = 2;
  pair.ranks_per_node = ring.nodes > 1 ? 1 : 2;
  pair.nodes = ring.nodes > 1 ? 2 : 1;
  pair.concurrent_groups = std::max(1, std::min(at_once, gpn / pair.ranks_per_node));
  return pair;
}

/// A K/V ring of `n` ranks: n - 1 steps of `kv` bytes (backward with dK, dV too), each beside an
/// n-th of the attention; what a step's transfer outlasts its block is exposed.
CpLayerComm ring_exposed(const CostInputs& in, const CommGroup& pair, Bytes kv, int n, Seconds attention_forward,
                         Seconds attention_backward) {
  const Seconds step_fwd = in.comm.time(Collective::send_recv, kv, pair);
  const Seconds step_bwd = in.comm.time(Collective::send_recv, kv * 2.0, pair);  // + dK, dV
  const double steps = n - 1;
  return {steps * max(Seconds(0), step_fwd - attention_forward / double(n)),
          steps * max(Seconds(0), step_bwd - attention_backward / double(n))};
}
}  // namespace

int attention_context(const Experiment& e) {
  const int s = e.model.seq_len;
  // The ring's and the all-gather's ranks attend from their two chunks over the keys up to them,
  // (s + s / n) / 2 on average over a ring of n (cp, or the a2a+p2p ring's cp / cp_a2a); all-to-all
  // ranks over the whole sequence.
  const int ring = e.plan.cp_ring();
  return e.plan.cp > 1 && ring > 1 ? (s + s / ring) / 2 : s;
}

CpLayerComm cp_comm_per_layer(const CostInputs& in, Seconds attention_forward, Seconds attention_backward) {
  const PlanSpec& p = in.e.plan;
  if (p.cp <= 1) return {};
  const ModelSpec& m = in.e.model;
  const PlanGroups g = plan_groups(p, in.e.cluster);
  // Keys and values of this rank's tokens (cost_models::cp_kv_width).
  const Bytes kv_local = Bytes(2.0 * in.x.bytes.activation * p.micro_batch * p.local_tokens(m) *
                               cost_models::cp_kv_width(*in.x.framework, m, p));
  const Seconds block_fwd = attention_forward / double(p.cp), block_bwd = attention_backward / double(p.cp);
  // One ring step: every cp rank sends its block to the next; all tp ranks of a pair at once.
  const int gpn = in.e.cluster.gpus_per_node;
  const CommGroup pair = ring_pair(g.cp, p.tp, gpn);
  if (in.x.framework->cp_torch_sdpa) {
    // PyTorch's rotaters (FrameworkTraits::cp_torch_sdpa). Load-balanced causal blocks: every
    // step computes the same work, a cp-th of the attention. The other ranks' K/V arrive under
    // the first block (all-gather) or one ring step under each block.
    auto kv_in = [&](Seconds block) {
      if (p.cp_comm == CpComm::all_gather)
        return max(Seconds(0), in.comm.time(Collective::all_gather, kv_local * double(p.cp), g.cp) - block);
      return double(p.cp - 1) * max(Seconds(0), in.comm.time(Collective::send_recv, kv_local, pair) - block);
    };
    // dK, dV in fp32: cp sends, the first cp - 1 under the next block, the last waited for.
    const Seconds dkv = in.comm.time(Collective::send_recv, kv_local * (4.0 / in.x.bytes.activation), pair);
    return {kv_in(block_fwd), kv_in(block_bwd) + double(p.cp - 1) * max(Seconds(0), dkv - block_bwd) + dkv};
  }
  if (p.cp_comm == CpComm::all_to_all || p.cp_comm == CpComm::all_to_all_ring) {
    // Before attention this rank's Q, K and V go out head group by head group (a cp-th of the
    // heads to each rank) and the whole sequence of its own head group comes back; after it the
    // output returns the same way; the backward runs the mirror image: dO in, dQ, dK, dV out
    // (Transformer Engine's AttnFuncWithCPAndQKVOA2A, flash_attn_a2a_communicate; DeepSpeed-
    // Ulysses' DistributedAttention). Every exchange is waited for: attention needs all of Q, K
    // and V, and the next op all of its output. The bytes per rank are the local tensors'; the
    // transfer runs at NCCL's all-to-all share of the links (calibrated where measured, as for
    // MoE token dispatch).
    // a2a+p2p (TE's cp_group pair): the all-to-alls inside groups of cp_a2a consecutive cp ranks
    // (all of cp under plain all-to-all: g.cp).
    const Bytes q_local = Bytes(in.x.bytes.activation * p.micro_batch * p.local_tokens(m) * m.q_width() / p.tp);
    const CommGroup heads = group_of(p.cp_heads(), strides(p).cp, gpn);
    const Seconds qkv = all_to_all_collective(in, q_local + kv_local, heads);
    const Seconds out = all_to_all_collective(in, q_local, heads);
    CpLayerComm c{qkv + out, out + qkv};
    if (p.cp_comm == CpComm::all_to_all_ring) {
      // Then a p2p ring over the cp / cp_a2a groups, ranks cp_a2a apart (TE: send_dst =
      // cp_global_ranks[(rank + 1) % P * A + rank_a2a]), as the plain ring below with the
      // gathered heads' K/V: a rank's block is its group's sequence chunk at a cp_a2a-th of the
      // heads, the same bytes as its own K/V; every all-to-all rank's pair sends at once.
      const int ring = p.cp_ring();
      const CommGroup outer = group_of(ring, strides(p).cp * p.cp_heads(), gpn);
      const CpLayerComm r =
          ring_exposed(in, ring_pair(outer, p.tp * p.cp_heads(), gpn), kv_local, ring, attention_forward, attention_backward);
      c.forward += r.forward;
      c.backward += r.backward;
    }
    return c;
  }
  if (p.cp_comm == CpComm::all_gather) {
    // Transformer Engine's AttnFuncWithCPAndKVAllGather (the Llama 3 paper's sec. 3.3.2 scheme):
    // exposed, the forward's all-gather of K and V; the backward, which saved only the rank's own
    // K and V, gathers them again, then reduce-scatters the whole sequence's dK and dV.
    const Seconds gather = in.comm.time(Collective::all_gather, kv_local * double(p.cp), g.cp);
    return {gather, gather + in.comm.time(Collective::reduce_scatter, kv_local * double(p.cp), g.cp)};
  }
  return ring_exposed(in, pair, kv_local, p.cp, attention_forward, attention_backward);
}

Seconds all_to_all_collective(const CostInputs& in, Bytes message, const CommGroup& group) {
  const CommEstimate est = in.comm.estimate(Collective::all_to_all, message, group);
  return est.latency + est.transfer / in.x.calibrated.all_to_all_efficiency_scale;
}

Seconds tp_collective(const CostInputs& in, Collective c, Bytes message, const CommGroup& group) {
  const CommEstimate est = in.comm.estimate(c, message, group);
  return est.latency + est.transfer / in.x.calibrated.tp_comm_efficiency_scale;
}

Seconds tp_comm_per_layer(const CostInputs& in, int tokens) {
  const PlanSpec& p = in.e.plan;
  if (p.tp == 1) return Seconds(0);
  // The backward's collectives: the forward's only differ where they carry FP8.
  if (p.sequence_parallel) return tp_gathers_scatters(in, tokens, false).total();
  const CommGroup tp = plan_groups(p, in.e.cluster).tp;
  const Bytes act = activation_tensor(in.x, p.micro_batch, tokens, in.e.model.hidden);
  // Per direction a sequential block syncs twice (after attention, after the MLP); a parallel
  // block sums both branches' partial outputs before one all-reduce (and, backward, both
  // branches' input gradients): GPT-NeoX's gpt_j_residual "reduce once".
  const double syncs = in.e.model.parallel_block ? 1.0 : 2.0;
  return syncs * tp_collective(in, Collective::all_reduce, act, tp);
}

double tp_gather_scale(const CostInputs& in, bool forward) {
  const bool fp8 = (forward && cost_models::fp8_sequence_parallel_gathers(in.x, in.e.plan)) ||
                   cost_models::te_fp8_sequence_parallel_gathers(in.x, in.e.plan);
  return fp8 ? 1.0 / in.x.bytes.activation : 1.0;  // one byte each
}

TpGathersScatters tp_gathers_scatters(const CostInputs& in, int tokens, bool forward) {
  const PlanSpec& p = in.e.plan;
  if (p.tp == 1 || !p.sequence_parallel) return {};
  const CommGroup tp = plan_groups(p, in.e.cluster).tp;
  const Bytes act = activation_tensor(in.x, p.micro_batch, tokens, in.e.model.hidden);
  // Per direction a sequential block syncs twice (after attention, after the MLP); a parallel
  // block once (GPT-NeoX's gpt_j_residual "reduce once").
  const double syncs = in.e.model.parallel_block ? 1.0 : 2.0;
  return {syncs * tp_collective(in, Collective::all_gather, act * tp_gather_scale(in, forward), tp),
          syncs * tp_collective(in, Collective::reduce_scatter, act, tp)};
}

TpGathersScatters tp_relayout_per_layer(const CostInputs& in, int tokens, bool forward) {
  const PlanSpec& p = in.e.plan;
  if (p.tp == 1 || !p.sequence_parallel || p.micro_batch <= 1 || !in.compute.memory_bound ||
      !in.x.framework->tp_batch_first_relayout)
    return {};
  const Bytes act = activation_tensor(in.x, p.micro_batch, tokens, in.e.model.hidden);
  const double gathered = tp_gather_scale(in, forward);
  // torch.cat(torch.chunk(...)) after the all-gather and before the reduce-scatter: one kernel
  // reading and writing the whole activation each; a sequential block has two of each. Async TP's
  // micro-pipelined ops (torch.distributed._symmetric_memory) move about as much: the fused
  // all-gather-matmul hands back the gathered input in sequence-major order, which the weight
  // gradient reads as a (b*s, h) matrix (a copy), and the fused matmul-reduce-scatter sums the tp
  // partial outputs it received in a separate reduction kernel (reading the whole activation) after
  // copying its input into scatter-major order. Counted the same.
  const double syncs = in.e.model.parallel_block ? 1.0 : 2.0;
  return {syncs * in.compute.memory_bound(act * (2.0 * gathered), 1), syncs * in.compute.memory_bound(act * 2.0, 1)};
}

double sm_share_contention(const CostInputs& in) {
  const double ctas = in.comm.params().overlap_ctas, sms = in.e.cluster.gpu.sms;
  return sms > ctas && ctas > 0 ? ctas / (sms - ctas) : 0.0;
}

double overlap_contention(const CostInputs& in, double gemm_share) {
  // Persistent GEMM kernels (GpuKernelFigures::persistent_gemm_grid) launch one block per SM; with
  // a collective's blocks resident, the blocks that find no free SM start only when a whole block
  // has finished its share of the tiles, so the GEMM takes two block lifetimes instead of one
  // (NVIDIA developer forum thread 337991: a 132-block cuBLAS GEMM on an H100 beside a 24-block
  // NCCL all-gather "nearly doubles", MFU 80% -> 47%). While a collective hides under such GEMMs
  // they advance at half speed: of a window of h seconds of hidden communication, h / 2 of the
  // compute is left over, added time 0.5 per hidden second, whatever the collective's block count.
  // The other kernels beside it (attention, elementwise: a block per tile of work) lose the SM
  // share; the window is split between the two by the GEMMs' share of the compute.
  const double share = sm_share_contention(in);
  const auto& persistent = in.e.cluster.gpu.kernels.persistent_gemm_grid;
  if (!persistent || persistent->value != 1 || !(share > 0)) return share;
  const double g = std::clamp(gemm_share, 0.0, 1.0);
  return g * 0.5 + (1.0 - g) * share;
}

double gemm_share(const LayerCompute& lc, bool backward) {
  const auto& gemms = backward ? lc.gemm_backward : lc.gemm_forward;
  Seconds sum;
  for (const Seconds& g : gemms) sum += g;
  const Seconds total = backward ? lc.backward : lc.forward;
  return total > Seconds(0) ? std::clamp(sum / total, 0.0, 1.0) : 0.0;
}

Seconds tp_comm_overlapped(const CostInputs& in, int tokens, const std::array<Seconds, 4>& gemms, bool backward,
                           bool attention_only) {
  const PlanSpec& p = in.e.plan;
  if (p.tp == 1) return Seconds(0);
  if (!p.tp_overlap) return (attention_only ? 0.5 : 1.0) * tp_comm_per_layer(in, tokens);
  const CommGroup tp = plan_groups(p, in.e.cluster).tp;
  const Bytes act = activation_tensor(in.x, p.micro_batch, tokens, in.e.model.hidden);
  // The all-gathers may carry FP8 (tp_gather_scale: torchtitan's forward only, TE's both ways).
  const Seconds ag = tp_collective(in, Collective::all_gather, act * tp_gather_scale(in, !backward), tp),
                rs = tp_collective(in, Collective::reduce_scatter, act, tp);
  // Async TP moves one chunk per GEMM chunk (torch's micro-pipelined TP through symmetric memory,
  // Transformer Engine's userbuffers), not a resident bulk collective beside whole GEMMs: the SM
  // share applies, not the persistent-kernel tail of overlap_contention.
  const double contention = sm_share_contention(in);
  auto hide = [&](Seconds comm, Seconds gemm) {
    const Seconds e = max(comm / double(p.tp), comm - gemm);
    return e + contention * min(comm - e, gemm);
  };
  // Under torchao's rowwise FP8 scaling torch's micro-pipeline TP fuses the matmul-reduce-scatters
  // but not the all-gather-matmuls: those run as a blocking all-gather, then the matmul
  // (pytorch/pytorch#149990, 2025-03, still open; torchtitan#866: rowwise async TP gains little).
  const TrainingSpec& t = in.e.training;
  const bool gathers_fused =
      !(t.dtype == Dtype::fp8 && t.fp8_scaling == Fp8Scaling::rowwise && !in.x.framework->fp8_transformer_engine);
  auto hide_gather = [&](Seconds comm, Seconds gemm) { return gathers_fused ? hide(comm, gemm) : comm; };
  if (in.e.model.parallel_block) {
    // One all-gather feeding QKV and FC1 (both read the same input), one reduce-scatter draining
    // the projection and FC2 outputs summed; backward the other way round.
    return backward ? hide(rs, gemms[0] + gemms[2]) + hide_gather(ag, gemms[1] + gemms[3])
                    : hide_gather(ag, gemms[0] + gemms[2]) + hide(rs, gemms[1] + gemms[3]);
  }
  // Forward: all-gathers feed QKV and FC1, reduce-scatters drain the projection and FC2; backward
  // the other way round.
  Seconds exposed;
  for (int i = 0; i < (attention_only ? 2 : 4); ++i) {
    const bool gather = (i % 2 == 0) != backward;
    exposed += gather ? hide_gather(ag, gemms[i]) : hide(rs, gemms[i]);
  }
  return exposed;
}

namespace {
// The chunks' compute and their tensor-, context- and expert-parallel communication, the edges
// (embedding, head) and the pipeline's transfers: everything but the data-parallel, sharded and
// optimizer costs, which read the chunks and never change their compute or model-parallel terms
// (the sharded costs add the host's per-unit work, ChunkCosts::forward_host / backward_host).
WorkloadCosts cost_chunks_and_transfers(const CostInputs& in) {
  const PlanSpec& p = in.e.plan;
  WorkloadCosts c;
  const int v = p.model_chunks();
  const int n_slices = p.token_slices.empty() ? 1 : int(p.token_slices.size());
  c.shape = ScheduleShape{p.schedule, p.pp, p.micro_batches(in.e.training), v, n_slices};
  cost_layer_chunks(in, c);
  // Before the embedding and head join the chunks: windowed offload reads the layers' own times.
  cost_activation_offload(in, c);
  cost_edges(in, c);
  cost_pipeline_transfers(in, c);
  return c;
}
}  // namespace

WorkloadCosts cost_workload(const CostInputs& in) {
  WorkloadCosts c = cost_chunks_and_transfers(in);
  cost_data_parallel(in, c);
  cost_sharded_parameters(in, c);
  cost_optimizer(in, c);
  return c;
}

Seconds slice_stage_time(const CostInputs& in, int tokens, int end) {
  Experiment x = in.e;
  x.plan.schedule = Schedule::terapipe;
  x.plan.virtual_stages = 1;
  x.plan.token_slices = end > tokens ? std::vector<int>{end - tokens, tokens} : std::vector<int>{tokens};
  // A slice's time reads only the chunks' compute and model-parallel terms and the pipeline's hops.
  const WorkloadCosts c = cost_chunks_and_transfers({x, in.x, in.compute, in.comm});
  const int k = int(x.plan.token_slices.size()) - 1;
  Seconds worst;
  for (const auto& stage : c.chunk) {
    const ChunkCosts& cc = stage[0][k];
    worst = max(worst, cc.forward_stream() + cc.recompute_stream() + cc.backward_stream());
  }
  // The slowest hop bounds a slice's pipeline step: a transfer between nodes when any exists.
  Seconds hop;
  for (int s = 0; s + 1 < int(c.stage_node.size()); ++s)
    hop = max(hop, c.p2p_time(true, k, s, s + 1) + c.p2p_time(false, k, s + 1, s));
  return worst + hop;
}

bool one_flow_send(PipelineSend mode, const PlanSpec& plan) {
  return mode == PipelineSend::one_rank_broadcast && !plan.sequence_parallel;
}

SimgridPlatform simgrid_platform(const Experiment& e, const CommModel& comm) {
  SimgridPlatform pf;
  pf.dp = e.plan.dp;
  pf.tp = e.plan.tp * e.plan.cp;  // one host per TP x CP group
  pf.gpus_per_node = e.cluster.gpus_per_node;
  pf.placement = e.plan.placement;
  // The same achievable NIC rates as the comm model (nic_bandwidth_per_node): RDMA, or on Ethernet
  // clusters TCP sockets at the rate of as many GPUs per node as drive the NIC at once: the
  // data-parallel rings (their ranks per node times the concurrent rings, as the comm model counts
  // them) and the pipeline's sends (cost_pipeline's pp_cross) each at their own. The links carry
  // the faster class's rate; a flow of the slower class puts proportionally more bytes on them, so
  // alone it takes its own time and beside the other it shares the link.
  const PlanGroups g = plan_groups(e.plan, e.cluster);
  CommGroup pp_cross = g.pp;
  pp_cross.ranks_per_node = 1;
  if (one_flow_send(framework_traits(e.plan.framework).send_forward, e.plan)) pp_cross.concurrent_groups = 1;
  // (A pipeline whose hops all stay inside nodes never puts a flow on the NIC links, so counting
  // its class here changes nothing but the links' nominal rate, which the DP factor offsets.)
  const bool dp_crosses = g.dp.nodes > 1, pp_crosses = e.plan.pp > 1;
  const double dp_eff = comm.nic_efficiency(g.dp), pp_eff = comm.nic_efficiency(pp_cross);
  const double nic_eff = dp_crosses && pp_crosses ? std::max(dp_eff, pp_eff) : dp_crosses ? dp_eff : pp_eff;
  pf.dp_wire_factor = nic_eff / dp_eff;
  pf.pp_wire_factor = nic_eff / pp_eff;
  pf.node_injection = e.cluster.inter.nic_bandwidth * (e.cluster.inter.nics_per_node * nic_eff);
  // A host's share of the NICs (nic_bandwidth_per_node's rule: at least one whole NIC). A host is a
  // TP x CP group, so with cp > 1 it owns the NICs of tp x cp GPUs (its cp ranks' gradient rings
  // all leave through them).
  const double group_gpus = std::min(e.plan.tp * e.plan.cp, e.cluster.gpus_per_node);
  const double group_nics = std::max(1.0, group_gpus * e.cluster.inter.nics_per_node / e.cluster.gpus_per_node);
  pf.group_injection = e.cluster.inter.nic_bandwidth * (std::min<double>(group_nics, e.cluster.inter.nics_per_node) * nic_eff);
  if (!(pf.node_injection > BytesPerSecond(0))) pf.node_injection = BytesPerSecond(1e18);
  pf.network_latency = e.cluster.inter.latency;
  pf.oversubscription = e.cluster.inter.oversubscription;
  pf.tiers = e.cluster.inter.tiers;
  return pf;
}

Prediction predict(const CostInputs& in, EngineKind engine, nlohmann::json* trace) {
  const Experiment& e = in.e;
  check_simulation_size(e, SimulationSize::fast);  // the costs already hold pp * v * slices chunks
  const WorkloadCosts costs = cost_workload(in);
  SimResult r;
  if (engine == EngineKind::analytic && !trace && fast_engine_applies(costs)) {
    r = run_fast(costs);  // the same schedule as the graph engine, without building the graph
  } else {
    check_simulation_size(e, trace ? SimulationSize::traced_graph : SimulationSize::graph);
    if (engine == EngineKind::simgrid) check_simulation_size(e, SimulationSize::simgrid);
    const Workload w = build_workload(costs);
    r = engine == EngineKind::analytic ? run_analytic(w) : run_simgrid(w, simgrid_platform(e, in.comm));
    if (trace) *trace = chrome_trace(w, r);
  }

  Prediction out;
  out.experiment = e.name;
  out.engine = engine;
  out.iteration = r.iteration;
  out.tp = e.plan.tp;
  out.pp = e.plan.pp;
  out.dp = e.plan.dp;
  out.cp = e.plan.cp;
  const double gpus = e.gpus;
  const double it = in_s(r.iteration);
  const double peak = e.cluster.gpu.peak(e.training.dtype).value();
  const Flops model = model_flops_per_iteration(e.model, e.training.global_batch);
  const Flops hw = hardware_flops_per_iteration(e.model, e.training.global_batch, e.plan);
  out.tokens_per_s = double(e.training.global_batch) * e.model.seq_len / it;
  out.tflops_per_gpu = model.value() / (it * gpus) / 1e12;
  out.hw_tflops_per_gpu = hw.value() / (it * gpus) / 1e12;
  out.mfu = model.value() / (it * gpus * peak);
  out.hfu = hw.value() / (it * gpus * peak);

  out.critical_stage = r.critical_stage;
  const StageBreakdown& sb = r.stages[r.critical_stage];
  auto busy = [&](Category c) { return sb.busy[int(c)]; };
  TimeBreakdown& b = out.breakdown;
  b.compute = busy(Category::forward) + busy(Category::backward);
  b.host = busy(Category::host);
  b.recompute = busy(Category::recompute);
  b.tp_comm = busy(Category::tp_comm);
  b.ep_comm = busy(Category::ep_comm);
  b.cp_comm = busy(Category::cp_comm);
  b.pp_comm_exposed = busy(Category::pp_comm) + sb.pp_wait;
  b.dp_comm_exposed = busy(Category::dp_comm);
  b.optimizer = busy(Category::optimizer);
  b.offload_stall = busy(Category::offload) + sb.offload_wait;
  b.bubble = sb.idle - sb.pp_wait - sb.offload_wait;
  // The idle time and the waits are sums of the same event times: what remains when all idle time
  // was waiting is rounding, not a negative bubble.
  if (b.bubble < 1e-9 * r.iteration && b.bubble > -1e-9 * r.iteration) b.bubble = Seconds(0);

  out.memory_per_stage = in.x.host ? host_memory_per_stage(e, in.x)
                                   : cost_models::memory_per_stage(in.x, e.model, e.training, e.plan);
  out.most_loaded_stage = cost_models::most_loaded_stage(out.memory_per_stage);
  out.device_memory = e.cluster.gpu.hbm;
  out.host_memory_needed = cost_models::offload_host_memory_per_node(in.x, e.model, e.training, e.plan, e.cluster);
  if (out.host_memory_needed > Bytes(0)) out.host_memory = e.cluster.host.memory;
  out.framework = in.x.framework->describe();
  out.attention = to_string(in.x.attention);
  out.profile = in.x.profile.describe();
  out.collectives = in.comm.in_node_pricing();
  out.calibrated_parameters = in.x.calibrated.applied;
  out.slowest = in.x.slowest;
  out.band = in.x.calibrated.band;
  return out;
}

Prediction predict(const Experiment& e, EngineKind engine, nlohmann::json* trace) {
  const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
  const ComputeCosts compute = compute_costs(e, x);
  const CommModel comm(e.cluster, x.calibrated);
  return predict({e, x, compute, comm}, engine, trace);
}

}  // namespace foresight::sim
