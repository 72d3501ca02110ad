#include "sim/costing.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "core/flops.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "sim/fast_engine.hpp"
#include "sim/limits.hpp"
#include "sim/trace.hpp"

namespace foresight::sim {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Bytes of one 16-bit activation tensor (b, tokens, h).
Bytes activation_tensor(double micro_batch, double tokens, double hidden) { return Bytes(2.0 * micro_batch * tokens * hidden); }

/// Rank strides of the plan's layout (innermost first).
struct Strides {
  long long tp = 1, dp = 1, pp = 1;
};
Strides strides(const PlanSpec& p) {
  Strides s;
  s.tp = 1;
  if (p.placement == Placement::tp_dp_pp) {
    s.dp = p.tp;
    s.pp = (long long)p.tp * p.dp;
  } else {
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
  } else {
    const int per_node = int(std::min<long long>(ranks, std::max<long long>(1, gpn / stride)));
    g.ranks_per_node = per_node;
    g.nodes = ceil_div(ranks, per_node);
    if (g.ranks_per_node * g.nodes != ranks) {  // uneven split: treat as one rank per node (conservative)
      g.ranks_per_node = 1;
      g.nodes = ranks;
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
  g.dp = group_of(p.dp, st.dp, gpn);
  g.ep = group_of(p.ep, st.dp, gpn);
  // A pipeline transfer: two ranks `pp stride` apart; each rank of the TP group sends at once.
  g.pp = group_of(p.pp > 1 ? 2 : 1, st.pp, gpn);
  if (p.pp > 1) g.pp.concurrent_groups = int(std::min<long long>(gpn, std::max<long long>(1, st.pp)));
  g.pp_crosses_nodes = p.pp > 1 && g.pp.nodes > 1;
  return g;
}

Seconds tp_comm_per_layer(const Experiment& e, const CommModel& comm, int tokens) {
  const PlanSpec& p = e.plan;
  if (p.tp == 1) return Seconds(0);
  const CommGroup tp = plan_groups(p, e.cluster).tp;
  const Bytes act = activation_tensor(p.micro_batch, tokens, e.model.hidden);
  if (p.sequence_parallel)
    return 2.0 * (comm.time(Collective::all_gather, act, tp) + comm.time(Collective::reduce_scatter, act, tp));
  return 2.0 * comm.time(Collective::all_reduce, act, tp);
}

WorkloadCosts cost_workload(const Experiment& e, const ComputeCosts& compute, const CommModel& comm) {
  const ModelSpec& m = e.model;
  const PlanSpec& p = e.plan;
  const int v = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  std::vector<int> slices = p.token_slices;
  if (slices.empty()) slices = {m.seq_len};
  const int n_slices = int(slices.size());
  const PlanGroups groups = plan_groups(p, e.cluster);
  const double b = p.micro_batch, h = m.hidden;

  WorkloadCosts c;
  c.shape = ScheduleShape{p.schedule, p.pp, p.micro_batches(e.training), v, n_slices};
  c.chunk.assign(p.pp, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(n_slices)));

  auto tp_layer_comm = [&](int tokens) { return tp_comm_per_layer(e, comm, tokens); };
  // MoE: dispatch and combine all-to-alls of capacity_factor * top_k tokens per GPU.
  auto ep_layer_comm = [&](int tokens) {
    if (!m.moe || p.ep == 1) return Seconds(0);
    const Bytes routed = activation_tensor(b, tokens, h) * (m.moe->capacity_factor * m.moe->top_k);
    return 2.0 * comm.time(Collective::all_to_all, routed, groups.ep);
  };

  // Every layer of a kind costs the same: compute each (tokens, context, moe) once.
  std::map<std::tuple<int, int, bool>, LayerCompute> layer_cache;
  auto layer_compute = [&](int tokens, int context, bool moe) {
    const auto key = std::make_tuple(tokens, context, moe);
    auto it = layer_cache.find(key);
    if (it == layer_cache.end()) it = layer_cache.emplace(key, compute.layer(tokens, context, moe)).first;
    return it->second;
  };
  const Seconds tp_full = tp_layer_comm(m.seq_len);
  // Weight gradients of every micro-batch (or slice) are added into the gradient buffer, a pass
  // over HBM per parameter (cost_models::grad_accumulation_bytes_per_param); one kernel per
  // parameter tensor (12 per transformer layer: 4 weights, 4 biases, 2 layernorms' two each).
  const double accumulate_bytes = cost_models::grad_accumulation_bytes_per_param(e.training.dtype, p.framework);
  // DeepSpeed's pipeline engine keeps only its TP partition of a stage's output after sending it
  // and all-gathers it back before that micro-batch's backward (deepspeed/runtime/pipe/engine.py,
  // _exec_recv_grads, part_output.full(), v0.5.x).
  const bool deepspeed_restores_output = p.framework == Framework::deepspeed && p.pp > 1 && p.tp > 1 && !p.sequence_parallel;
  for (int s = 0; s < p.pp; ++s) {
    const std::vector<int> layers = cost_models::stage_layers(m, p, s);
    const int per_chunk = int(layers.size()) / v;
    const double chunk_params = cost_models::parameters_on_gpu(m, p, s).total() / v;
    const Seconds accumulate =
        compute.memory_bound ? compute.memory_bound(Bytes(chunk_params * accumulate_bytes), 12 * per_chunk) : Seconds(0);
    for (int ch = 0; ch < v; ++ch) {
      int context = 0;
      for (int k = 0; k < n_slices; ++k) {
        const int tokens = slices[k];
        context += tokens;
        ChunkCosts cc;
        for (int i = 0; i < per_chunk; ++i) {
          const int layer = layers[ch * per_chunk + i];
          const bool moe = cost_models::is_moe_layer(m, layer);
          const LayerCompute lc = layer_compute(tokens, context, moe);
          cc.forward += lc.forward;
          cc.backward += lc.backward;
          cc.recompute += lc.recompute;
          const Seconds tp = tokens == m.seq_len ? tp_full : tp_layer_comm(tokens);
          cc.forward_tp_comm += tp;
          cc.backward_tp_comm += tp;
          if (p.recompute == Recompute::full) cc.recompute_tp_comm += tp;
          if (moe) {
            const Seconds ep = ep_layer_comm(tokens);
            cc.forward_ep_comm += ep;
            cc.backward_ep_comm += ep;
            if (p.recompute == Recompute::full) cc.recompute_tp_comm += ep;
          }
        }
        cc.backward += accumulate;
        const EdgeCompute ec = compute.edges(tokens);
        // TeraPipe's evaluated model is transformer layers only: no embedding, LM head or
        // cross-entropy (zhuohan123/terapipe transformer_models.py; the loss is the output's mean).
        const bool has_edges = p.framework != Framework::terapipe;
        const bool first_segment = has_edges && s == 0 && ch == 0;
        const bool last_segment = s == p.pp - 1 && ch == v - 1;
        if (deepspeed_restores_output && !last_segment)
          cc.backward_tp_comm += comm.time(Collective::all_gather, activation_tensor(b, tokens, h), groups.tp);
        if (first_segment) {
          cc.forward += ec.embedding_forward;
          cc.backward += ec.embedding_backward;
          // Vocab-parallel embedding: an all-reduce of its output (Megatron VocabParallelEmbedding).
          if (p.tp > 1) cc.forward_tp_comm += comm.time(Collective::all_reduce, activation_tensor(b, tokens, h), groups.tp);
        }
        if (last_segment && has_edges) {
          cc.forward += ec.head_forward;
          cc.backward += ec.head_backward;
          // Column-parallel LM head: its input gradient is all-reduced in the backward.
          if (p.tp > 1) cc.backward_tp_comm += comm.time(Collective::all_reduce, activation_tensor(b, tokens, h), groups.tp);
        }
        c.chunk[s][ch][k] = cc;
      }
    }
  }

  // Activation offload: each chunk's offloaded share goes out after its forward and comes back
  // before its backward, over the GPU's PCIe link (Ren et al. 2021, ZeRO-Offload, sec. 4).
  if (p.offload.activations > 0) {
    for (int s = 0; s < p.pp; ++s)
      for (int ch = 0; ch < v; ++ch)
        for (int k = 0; k < n_slices; ++k) {
          const int layers_in_chunk = int(cost_models::stage_layers(m, p, s).size()) / v;
          const Bytes per_layer = cost_models::activation_bytes_per_layer(m, p, p.micro_batch, slices[k]);
          const Bytes moved = per_layer * (layers_in_chunk * p.offload.activations);
          c.chunk[s][ch][k].offload_out = moved / e.cluster.host.pcie_bandwidth;
          c.chunk[s][ch][k].offload_in = moved / e.cluster.host.pcie_bandwidth;
        }
  }

  // Pipeline transfers, as each framework sends them (both blocking: Megatron-LM v2.x waits on
  // batch_isend_irecv with a device synchronize, megatron/p2p_communication.py; DeepSpeed's
  // p2p.send/recv assert async_op == False, deepspeed/runtime/pipe/p2p.py @ v0.5.x).
  //  - Megatron-LM: scatter/gather, each TP rank sends 1/t of the activation and the receiver
  //    all-gathers it over NVLink, both directions (Narayanan et al. 2021 sec. 4.1); with sequence
  //    parallelism the tensor is already split.
  //  - DeepSpeed pipeline engine of the MT-NLG era (v0.5.0-0.5.3): activations partitioned over
  //    TP and all-gathered by the receiver (engine.py: is_pipe_partitioned = is_model_parallel,
  //    PartitionedTensor.full()), gradients sent whole from every TP rank (engine.py:
  //    is_grad_partitioned = False until PR #1407, 2021-09-29).
  //  - TeraPipe: one whole tensor per stage boundary, from the last TP rank of a stage to the
  //    first of the next over a 2-rank NCCL group, which broadcasts it to its TP group over NVLink
  //    (zhuohan123/terapipe mpu/initialize.py, test_transformer_terapipe.py), both directions.
  //  - generic: the whole tensor from every TP rank, both directions.
  const bool split_forward = p.tp > 1 && (p.sequence_parallel || p.framework == Framework::megatron ||
                                          p.framework == Framework::deepspeed);
  const bool split_backward = p.tp > 1 && (p.sequence_parallel || p.framework == Framework::megatron);
  const double host_ranks = std::min(p.tp, e.cluster.gpus_per_node);
  // Which node each stage's first TP group sits on (replica 0; the same rank order as the SimGrid
  // platform). When tp x dp (tp-dp-pp) or tp (tp-pp-dp) is below the GPUs per node, several
  // consecutive stages share a node: only the transfers between nodes cross the NICs, the others
  // run over NVLink. Both costs are kept; the engines pick one per pair of stages.
  const long long pp_stride = strides(p).pp;
  const int gpn = e.cluster.gpus_per_node;
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
  for (int k = 0; k < n_slices; ++k) {
    const Bytes act = activation_tensor(b, slices[k], h);
    // time = the send plus `tail`, the receiver's NVLink collective after the bytes arrived.
    auto transfer = [&](bool split, const CommGroup& pp_group, Seconds& time, Seconds& tail, Bytes& node_bytes) {
      if (p.framework == Framework::terapipe) {
        node_bytes = act;
        if (p.pp == 1) return;
        CommGroup one_flow = pp_group;
        one_flow.concurrent_groups = 1;
        if (p.tp > 1) tail = comm.time(Collective::broadcast, act, groups.tp);
        time = comm.time(Collective::send_recv, act, one_flow) + tail;
        return;
      }
      const Bytes per_rank = split ? act / double(p.tp) : act;
      node_bytes = per_rank * host_ranks;
      if (p.pp == 1) return;
      if (split && !p.sequence_parallel) tail = comm.time(Collective::all_gather, act, groups.tp);
      time = comm.time(Collective::send_recv, per_rank, pp_group) + tail;
    };
    Seconds fwd, bwd, fwd_local, bwd_local, fwd_tail, bwd_tail, unused_tail;
    Bytes fwd_bytes, bwd_bytes, unused;
    transfer(split_forward, pp_cross, fwd, fwd_tail, fwd_bytes);
    transfer(split_backward, pp_cross, bwd, bwd_tail, bwd_bytes);
    transfer(split_forward, pp_local, fwd_local, unused_tail, unused);
    transfer(split_backward, pp_local, bwd_local, unused_tail, unused);
    c.p2p_forward.push_back(fwd);
    c.p2p_backward.push_back(bwd);
    c.p2p_forward_tail.push_back(fwd_tail);
    c.p2p_backward_tail.push_back(bwd_tail);
    c.p2p_forward_intra.push_back(fwd_local);
    c.p2p_backward_intra.push_back(bwd_local);
    c.p2p_forward_bytes.push_back(fwd_bytes);
    c.p2p_backward_bytes.push_back(bwd_bytes);
  }
  c.p2p_blocks_sender = true;

  // Data-parallel gradient synchronisation and the optimizer step per stage.
  c.dp_latency = Seconds(0);
  c.dp_overlap = p.dp_overlap && p.dp > 1;
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(m, p, s);
    const auto unsharded = cost_models::state_bytes_per_param(e.training.dtype, e.training.optimizer, p.framework, 0, 1);
    const Bytes grads = Bytes(sp.dense * unsharded.grads);
    const Bytes expert_grads = Bytes(sp.expert * unsharded.grads);
    const Bytes weights16 = Bytes(sp.total() * unsharded.weights);
    Seconds sync, gather;
    Bytes sync_bytes, gather_bytes;
    const int n = p.dp;
    if (n > 1) {
      if (p.zero >= 1 && p.framework == Framework::deepspeed) {
        // DeepSpeed ZeRO-1 under the pipeline engine: contiguous_gradients and overlap_comm are
        // forced off, so ReduceGrads all-reduces the 16-bit gradients in buckets (not a
        // reduce-scatter), then each rank steps its shard and the 16-bit parameters are
        // all-gathered (deepspeed/runtime/zero/stage2.py buffered_reduce_fallback and
        // all-gather after step, @ v0.5.x).
        sync = comm.time(Collective::all_reduce, grads, groups.dp);
        gather = comm.time(Collective::all_gather, weights16, groups.dp);
        sync_bytes = grads * (2.0 * (n - 1.0) / n) * host_ranks;
        gather_bytes = weights16 * ((n - 1.0) / n) * host_ranks;
      } else if (p.zero >= 1) {
        // Distributed optimizer / ZeRO: reduce-scatter the gradients, all-gather the updated weights.
        sync = comm.time(Collective::reduce_scatter, grads, groups.dp);
        gather = comm.time(Collective::all_gather, weights16, groups.dp);
        sync_bytes = grads * ((n - 1.0) / n) * host_ranks;
        gather_bytes = weights16 * ((n - 1.0) / n) * host_ranks;
      } else {
        sync = comm.time(Collective::all_reduce, grads, groups.dp);
        sync_bytes = grads * (2.0 * (n - 1.0) / n) * host_ranks;
      }
      c.dp_latency = comm.estimate(Collective::all_reduce, Bytes(8), groups.dp).latency;
    }
    const int dp_over_ep = p.dp / p.ep;
    if (expert_grads > Bytes(0) && dp_over_ep > 1) {
      PlanSpec ep_plan = p;
      CommGroup eg = plan_groups(ep_plan, e.cluster).dp;
      eg.ranks = dp_over_ep;
      eg.nodes = std::max(1, eg.nodes * dp_over_ep / std::max(1, p.dp));
      eg.ranks_per_node = std::max(1, dp_over_ep / eg.nodes);
      eg.nodes = dp_over_ep / eg.ranks_per_node;
      sync += comm.time(Collective::all_reduce, expert_grads, eg);
    }
    // With the reduction overlapped, the last bucket is what must wait for the backward to finish:
    // PyTorch DDP's buckets hold 25 MB (bucket_cap_mb, torch.nn.parallel.DistributedDataParallel).
    Seconds tail = sync;
    if (p.dp_overlap && n > 1 && sync > Seconds(0)) {
      const Bytes bucket = min(Bytes(25.0 * 1024 * 1024), grads);
      const Collective how = p.zero >= 1 ? Collective::reduce_scatter : Collective::all_reduce;
      tail = min(sync, comm.time(how, bucket, groups.dp));
    }
    c.dp_sync_tail.push_back(tail);
    c.dp_grad_sync.push_back(sync);
    c.dp_grad_sync_bytes.push_back(sync_bytes);
    c.dp_param_gather.push_back(gather);
    c.dp_param_gather_bytes.push_back(gather_bytes);
    const double shard = p.zero >= 1 ? double(p.dp) : 1.0;
    Seconds opt = compute.optimizer(sp.dense / shard + sp.expert / std::max(1.0, shard / p.ep));
    if (p.offload.optimizer) {
      // Optimizer state on the host: gradients go down and weights come back over PCIe.
      const cost_models::OffloadCost oc = cost_models::offload_cost(m, e.training, p, e.cluster, s);
      opt = oc.optimizer_to_host / e.cluster.host.pcie_bandwidth + oc.optimizer_to_device / e.cluster.host.pcie_bandwidth;
    }
    c.optimizer.push_back(opt);
  }
  return c;
}

Seconds slice_stage_time(const Experiment& e, const ComputeCosts& compute, const CommModel& comm, int tokens, int end) {
  Experiment x = e;
  x.plan.schedule = Schedule::terapipe;
  x.plan.virtual_stages = 1;
  x.plan.token_slices = end > tokens ? std::vector<int>{end - tokens, tokens} : std::vector<int>{tokens};
  const WorkloadCosts c = cost_workload(x, compute, comm);
  const int k = int(x.plan.token_slices.size()) - 1;
  Seconds worst;
  for (const auto& stage : c.chunk) {
    const ChunkCosts& cc = stage[0][k];
    const Seconds t = cc.forward + cc.forward_tp_comm + cc.forward_ep_comm + cc.recompute + cc.recompute_tp_comm +
                      cc.backward + cc.backward_tp_comm + cc.backward_ep_comm;
    worst = max(worst, t);
  }
  // The slowest hop bounds a slice's pipeline step: a transfer between nodes when any exists.
  Seconds hop;
  for (int s = 0; s + 1 < int(c.stage_node.size()); ++s)
    hop = max(hop, c.p2p_time(true, k, s, s + 1) + c.p2p_time(false, k, s + 1, s));
  return worst + hop;
}

SimgridPlatform simgrid_platform(const Experiment& e, const CommModel& comm) {
  SimgridPlatform pf;
  pf.dp = e.plan.dp;
  pf.tp = e.plan.tp;
  pf.gpus_per_node = e.cluster.gpus_per_node;
  pf.placement = e.plan.placement;
  // The same achievable NIC rate as the comm model (nic_bandwidth_per_node): TCP sockets on
  // Ethernet clusters, RDMA elsewhere.
  const double nic_eff = e.cluster.inter.topology == NetworkTopology::ethernet ? comm.params().socket_efficiency
                                                                              : comm.params().nic_efficiency;
  pf.node_injection = e.cluster.inter.nic_bandwidth * (e.cluster.inter.nics_per_node * nic_eff);
  // A TP group's share of the NICs (nic_bandwidth_per_node's rule: at least one whole NIC).
  const double group_gpus = std::min(e.plan.tp, e.cluster.gpus_per_node);
  const double group_nics = std::max(1.0, group_gpus * e.cluster.inter.nics_per_node / e.cluster.gpus_per_node);
  pf.group_injection = e.cluster.inter.nic_bandwidth * (std::min<double>(group_nics, e.cluster.inter.nics_per_node) * nic_eff);
  if (!(pf.node_injection > BytesPerSecond(0))) pf.node_injection = BytesPerSecond(1e18);
  pf.network_latency = e.cluster.inter.latency;
  pf.oversubscription = e.cluster.inter.oversubscription;
  return pf;
}

Prediction predict(const Experiment& e, EngineKind engine, const ComputeCosts& compute, const CommModel& comm,
                   nlohmann::json* trace) {
  check_simulation_size(e, SimulationSize::fast);  // the costs already hold pp * v * slices chunks
  const WorkloadCosts costs = cost_workload(e, compute, comm);
  SimResult r;
  if (engine == EngineKind::analytic && !trace && fast_engine_applies(costs)) {
    r = run_fast(costs);  // the same schedule as the graph engine, without building the graph
  } else {
    check_simulation_size(e, trace ? SimulationSize::traced_graph : SimulationSize::graph);
    if (engine == EngineKind::simgrid) check_simulation_size(e, SimulationSize::simgrid);
    const Workload w = build_workload(costs);
    r = engine == EngineKind::analytic ? run_analytic(w) : run_simgrid(w, simgrid_platform(e, comm));
    if (trace) *trace = chrome_trace(w, r);
  }

  Prediction out;
  out.experiment = e.name;
  out.engine = engine;
  out.iteration = r.iteration;
  out.tp = e.plan.tp;
  out.pp = e.plan.pp;
  out.dp = e.plan.dp;
  const double gpus = e.gpus;
  const double it = in_s(r.iteration);
  const double peak = e.cluster.gpu.peak(e.training.dtype).value();
  const Flops model = model_flops_per_iteration(e.model, e.training.global_batch);
  const Flops hw = hardware_flops_per_iteration(e.model, e.training.global_batch, e.plan.recompute);
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
  b.recompute = busy(Category::recompute);
  b.tp_comm = busy(Category::tp_comm);
  b.ep_comm = busy(Category::ep_comm);
  b.pp_comm_exposed = busy(Category::pp_comm) + sb.pp_wait;
  b.dp_comm_exposed = busy(Category::dp_comm);
  b.optimizer = busy(Category::optimizer);
  b.offload_stall = busy(Category::offload) + sb.offload_wait;
  b.bubble = sb.idle - sb.pp_wait - sb.offload_wait;

  out.memory_per_stage = cost_models::memory_per_stage(e.model, e.training, e.plan, e.cluster);
  out.most_loaded_stage = cost_models::most_loaded_stage(out.memory_per_stage);
  out.device_memory = e.cluster.gpu.hbm;
  return out;
}

}  // namespace foresight::sim
