// Costers of the data-parallel gradient synchronisation and the optimizer step.
#include <algorithm>
#include <map>

#include "cost_models/host_compute.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costers.hpp"

namespace foresight::sim {

void cost_data_parallel(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const FrameworkTraits& fw = *in.x.framework;
  const PlanGroups groups = plan_groups(p, in.e.cluster);
  const CommGroup& dp = groups.dp;
  // NIC bytes per SimGrid host (one per TP x CP group) are those of the data-parallel rings that
  // leave it: one ring per TP rank (over its dp x cp ranks, the host's cp ranks adjacent in the
  // tp-cp-dp-pp order, so each ring crosses out of a node once, as the comm model's ring path
  // assumes), at most one per GPU of the node.
  const double host_ranks = std::min(p.tp, in.e.cluster.gpus_per_node);
  const int n = p.grad_ranks();  // dp x cp ranks hold the same parameters
  const int k = p.shard_ways();  // ranks each shard group spans
  const int replicas = n / k;    // HSDP: shard groups holding the same shards
  c.dp_latency = n > 1 ? in.comm.estimate(Collective::all_reduce, Bytes(8), dp).latency : Seconds(0);
  // ZeRO-3 reduces every unit's gradients inside the backward (cost_sharded_parameters).
  c.dp_overlap = p.dp_overlap && n > 1 && p.zero < 3;
  // A distributed optimizer that reduce-scatters (ZeRO-1/2 as Megatron-Core and the bundled trainer
  // run it; DeepSpeed's stage 1 all-reduces): each rank receives the sums of its shard only.
  const bool sharded_reduction = (p.zero == 1 || p.zero == 2) && fw.zero_reduction != ZeroReduction::all_reduce;
  // What an overlapped reduction hides under: a backward, priced by the first layer's kind (the
  // GEMMs' share); the same on every stage.
  double dp_contention = 0, forward_contention = 0;
  if (c.dp_overlap || p.param_gather_overlap) {
    const ModelSpec& m = in.e.model;
    const LayerCompute lc = in.compute.layer(p.local_tokens(m), attention_context(in.e), m.is_moe_layer(0), m.window_of(0));
    if (c.dp_overlap) dp_contention = overlap_contention(in, gemm_share(lc, true));
    forward_contention = overlap_contention(in, gemm_share(lc, false));
  }
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(fw, in.e.model, p, s);
    const Bytes grads(sp.dense * in.x.bytes.reduce);
    const Bytes expert_grads(sp.expert * in.x.bytes.reduce);
    // The model copy ZeRO gathers after the step: the dense parameters over the shard group (the
    // experts' shards over their expert-data-parallel group, below). Under plan.fp8_param_gather
    // the layers' GEMM weights travel in FP8 (Megatron-Core's --fp8-param-gather).
    const double layer_dense = p.fp8_param_gather ? cost_models::stage_layer_parameters(in.e.model, p, s).dense : 0.0;
    const Bytes weights((sp.dense - layer_dense) * in.x.bytes.weight +
                        layer_dense * cost_models::layer_gather_bytes(in.x, in.e.model, p, in.x.bytes.weight));
    const Bytes expert_weights(sp.expert * in.x.bytes.weight);
    Seconds sync, gather;
    Bytes sync_bytes, gather_bytes;
    if (n > 1) {
      if (p.zero == 0 || (p.zero <= 2 && fw.zero_reduction == ZeroReduction::all_reduce)) {
        sync = in.comm.time(Collective::all_reduce, grads, dp);
        sync_bytes = grads * (2.0 * (n - 1.0) / n) * host_ranks;
      } else if (p.zero <= 2 && k > 1) {
        sync = in.comm.time(Collective::reduce_scatter, grads, groups.shard);
        sync_bytes = grads * ((k - 1.0) / k) * host_ranks;
      }
      // HSDP: each shard, reduced inside its group, is all-reduced across the replicas (ZeRO-3:
      // unit by unit inside the backward, cost_sharded_parameters).
      if (sharded_reduction && replicas > 1) {
        sync += in.comm.time(Collective::all_reduce, grads / double(k), groups.replicate);
        sync_bytes += grads / double(k) * (2.0 * (replicas - 1.0) / replicas) * host_ranks;
      }
      if ((p.zero == 1 || p.zero == 2) && k > 1) {
        // Each rank stepped its shard: the updated weights are all-gathered.
        gather = in.comm.time(Collective::all_gather, weights, groups.shard);
        gather_bytes = weights * ((k - 1.0) / k) * host_ranks;
      }
    }
    // Expert gradients are replicated over the plan.expert_dp() ranks holding the same experts
    // (dp / ep without folding; tp x cp x dp / (etp x ep) folded).
    // (Under ZeRO-3 the experts' gradients are reduce-scattered unit by unit with the rest.)
    if (expert_grads > Bytes(0) && p.expert_dp() > 1 && p.zero < 3) {
      // Under a reduce-scattering distributed optimizer each expert-data-parallel rank steps a shard
      // of the experts too (Megatron-Core's expert buffers, the trainer's one reduce-scatter at
      // ep = 1) and gathers the updated experts after the step.
      sync += in.comm.time(sharded_reduction ? Collective::reduce_scatter : Collective::all_reduce, expert_grads,
                           groups.expert_dp);
      if (p.zero >= 1) {
        const double edp = p.expert_dp();
        gather += in.comm.time(Collective::all_gather, expert_weights, groups.expert_dp);
        gather_bytes += expert_weights * ((edp - 1.0) / edp) * host_ranks;
      }
    }
    if (p.param_gather_overlap && gather > Seconds(0) && (p.zero == 1 || p.zero == 2)) {
      // Bucket by bucket under the next iteration's first forward (Megatron-Core's
      // --overlap-param-gather: the optimizer step dispatches the first bucket's all-gather, and
      // each bucket's forward pre-hook, on the first micro-batch only, waits for it and dispatches
      // the next). The stage's first forward waits for the first bucket (the framework's bucket,
      // Megatron-Core's bucket_size) and for whatever of its first model chunk's gather, dense and
      // expert buckets alike, that forward cannot cover: the chain starts with this stage's own
      // forward, so a pipeline's fill hides the first bucket only. The hidden part holds SMs
      // beside the forwards (the ctas / (sms - ctas) rule of the overlapped reduction below); with
      // an interleaved schedule the later chunks' gathers hide under the forwards before theirs.
      const double bucket_params = fw.dp_overlap_bucket_bytes / in.x.bytes.reduce;
      const Bytes bucket = min(Bytes(bucket_params * in.x.bytes.weight), weights);
      const Seconds first =
          weights > Bytes(0) && k > 1 ? min(gather, in.comm.time(Collective::all_gather, bucket, groups.shard)) : Seconds(0);
      const Seconds first_chunk = gather / double(std::max(1, p.virtual_stages));
      Seconds own;
      if (s < int(c.chunk.size()) && !c.chunk[std::size_t(s)].empty())
        for (const ChunkCosts& sl : c.chunk[std::size_t(s)][0])
          own += sl.forward + sl.forward_tp_comm + sl.forward_ep_comm + sl.forward_cp_comm;
      const Seconds exposed = max(first, first_chunk - own);
      gather_bytes = gather_bytes * (exposed / gather);
      gather = exposed + forward_contention * (gather - exposed);
    }
    // With the reduction overlapped, the last bucket is what must wait for the backward to finish
    // (the framework's bucket: PyTorch DDP's bucket_cap_mb, Megatron-Core's bucket_size).
    Seconds tail = sync;
    if (c.dp_overlap && sync > Seconds(0)) {
      const Bytes bucket = min(Bytes(fw.dp_overlap_bucket_bytes), grads);
      tail = min(sync, in.comm.time(p.zero >= 1 ? Collective::reduce_scatter : Collective::all_reduce, bucket,
                                    p.zero >= 1 ? groups.shard : dp));
    }
    // The overlapped buckets' NCCL kernels hold SMs while the last backward computes (Megatron-LM
    // SC21 sec. 4.2 runs DDP's reduction beside the backward; the same ctas / (sms - ctas) rule as
    // ZeRO-3's prefetch and overlapped TP). The stage's last backward is chunk 0's first slice
    // (TeraPipe runs a micro-batch's backward from its last slice to its first).
    // With model chunks (an interleaved schedule) each chunk's buckets are reduced when its own
    // last micro-batch runs its backward (Megatron-Core enables a chunk's grad sync on its last
    // micro-batch, schedules.py backward_step_helper): chunk v-1 first, chunk 0 last, each a
    // pipeline's worth of backward steps apart. The share of each chunk is its share of the
    // stage's layers, as the gradient buffer is split in cost_layer_chunks.
    const int v = c.shape.virtual_stages;
    std::vector<double> shares;
    if (c.dp_overlap && v > 1) {
      const double stage_layers = double(cost_models::stage_layers(in.e.model, p, s).size());
      for (int ch = 0; ch < v; ++ch)
        shares.push_back(stage_layers > 0 ? double(cost_models::chunk_layers(in.e.model, p, s, ch).size()) / stage_layers
                                          : 1.0 / v);
    }
    c.dp_sync_chunk_share.push_back(shares);
    Seconds slowdown;
    if (c.dp_overlap && sync > tail && !c.chunk.empty() && !c.chunk[std::size_t(s)].empty() &&
        !c.chunk[std::size_t(s)][0].empty()) {
      const ChunkCosts& last = c.chunk[std::size_t(s)][0].front();
      // The buckets hide under the backward steps from the first chunk's last micro-batch on:
      // (v - 1) pipelines' worth of steps after it and its own, each about the last one's length.
      const double steps = v > 1 ? double(v - 1) * p.pp + 1.0 : 1.0;
      slowdown = dp_contention * min(sync - tail, (last.backward + last.recompute) * steps);
    }
    // The tied word embedding's two copies (the first stage's and the last stage's, FrameworkTraits::
    // sums_tied_embedding_copies) sum their gradients once a step, an all-reduce between the two
    // stages of each tp rank and data-parallel index, on the gradient stream next to the
    // data-parallel reduction and hidden under nothing (Megatron-LM's _allreduce_embedding_grads
    // after it, DeepSpeed's PipelineEngine._exec_reduce_tied_grads right before it): the embedding
    // shard's vocab x hidden / tp gradients, in the reduce dtype; fp32 under DeepSpeed's
    // BF16_Optimizer (plan.bf16_optimizer), which reduces its fp32 accumulation of the tied weight
    // (_exec_reduce_tied_grads on _hp_grad, microsoft/DeepSpeed 77b649d16). Every GPU of a
    // first-stage node sends at once (CommGroup::concurrent_groups).
    if (fw.sums_tied_embedding_copies && cost_models::last_stage_holds_tied_copy(fw, in.e.model, p) &&
        (s == 0 || s == p.pp - 1)) {
      const double bytes_per =
          p.bf16_optimizer && in.e.training.dtype == Dtype::bf16 ? 4.0 : in.x.bytes.reduce;
      const Bytes tied(double(in.e.model.vocab) * in.e.model.hidden / p.tp * bytes_per);
      const Seconds t = in.comm.time(Collective::all_reduce, tied, groups.embedding);
      sync += t;
      tail += t;
      sync_bytes += tied * host_ranks;  // two ranks: each sends its copy once
    }
    c.dp_overlap_slowdown.push_back(slowdown);
    c.dp_sync_tail.push_back(tail);
    c.dp_grad_sync.push_back(sync);
    c.dp_grad_sync_bytes.push_back(sync_bytes);
    c.dp_param_gather.push_back(gather);
    c.dp_param_gather_bytes.push_back(gather_bytes);
  }
}

Seconds exposed_under_prefetch(const std::vector<ShardedUnit>& units, double contention, bool prefetch) {
  const int n = int(units.size());
  if (n == 0) return Seconds(0);
  std::vector<double> compute_end(n, 0.0), gather_end(n, 0.0);
  double link = 0, compute = 0, busy = 0, comm = 0;
  for (const auto& u : units) comm += u.gather.value() + u.reduce.value();
  auto issue = [&](double ready, Seconds d) {
    if (d <= Seconds(0)) return std::max(link, ready);
    link = std::max(link, ready) + d.value();
    return link;
  };
  gather_end[0] = issue(0.0, units[0].gather);
  for (int i = 0; i < n; ++i) {
    // The next unit's gather is issued before this unit computes; its buffer is the one unit i - 1
    // frees when done.
    if (prefetch && i + 1 < n) gather_end[i + 1] = issue(i >= 1 ? compute_end[i - 1] : 0.0, units[i + 1].gather);
    compute = std::max(compute, gather_end[i]) + units[i].compute.value();
    compute_end[i] = compute;
    busy += units[i].compute.value();
    if (units[i].reduce > Seconds(0)) issue(compute_end[i], units[i].reduce);
    // Without prefetch the next gather is issued when this unit is done, behind its reduce-scatter
    // on the link; a unit with nothing to gather starts right away.
    if (!prefetch && i + 1 < n)
      gather_end[i + 1] = units[i + 1].gather > Seconds(0) ? issue(compute_end[i], units[i + 1].gather) : compute_end[i];
  }
  const double exposed = std::max(compute, link) - busy;
  const double hidden = std::min(std::max(0.0, comm - exposed), busy);
  return Seconds(exposed + contention * hidden);
}

void cost_sharded_parameters(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const ModelSpec& m = in.e.model;
  c.zero3_gather_bytes.assign(p.pp, Bytes(0));
  c.zero3_reduce_bytes.assign(p.pp, Bytes(0));
  const int k = p.shard_ways();
  // Nothing sharded: no dense shard group and no expert-data-parallel group of two or more.
  if (p.zero < 3 || (k < 2 && p.expert_dp() < 2)) return;
  const FrameworkTraits& fw = *in.x.framework;
  const bool prefetch = fw.prefetches_zero3(p);
  const PlanGroups groups = plan_groups(p, in.e.cluster);
  const CommGroup shard = groups.shard;
  const int v = c.shape.virtual_stages;
  const int micro_batches = p.micro_batches(in.e.training);
  const double sent = (k - 1.0) / k;  // of each gathered or reduced buffer, per GPU (ring)
  // Experts shard over the ranks holding the same experts (plan.expert_dp(): Megatron-FSDP's
  // expert data-parallel group, core_v0.16+ megatron_fsdp.py expt_dp_group), not over dp x cp:
  // their gathers and reduce-scatters run in that group, none where it is one rank.
  const int ke = p.expert_dp();
  const double sent_e = ke > 1 ? (ke - 1.0) / ke : 0.0;
  using cost_models::StageParameters;
  // What of a unit is sharded, so gathered, reduce-scattered and copied: the dense part where
  // dp x cp has two or more ranks, the experts where their group has.
  auto sharded_parts = [&](const StageParameters& ps) {
    return StageParameters{.dense = k > 1 ? ps.dense : 0.0, .expert = ke > 1 ? ps.expert : 0.0};
  };
  auto sharded = [&](const StageParameters& ps) { return sharded_parts(ps).total(); };
  const double gb = in.x.bytes.gather, rb = in.x.bytes.reduce;
  // A transformer layer's gathers carry its GEMM weights in FP8 under plan.fp8_param_gather; the
  // embedding and the head stay in the gather dtype.
  const double lgb = cost_models::layer_gather_bytes(in.x, m, p, gb);
  // A unit's gather: one all-gather, or one per module where the framework fetches module by
  // module (FrameworkTraits::zero3_unit), the unit's parameters split as its modules' weights;
  // with the gathered parameters copied out on the gather stream where the framework does.
  const std::vector<double> modules = cost_models::zero3_module_shares(fw, m);
  auto gather = [&](const StageParameters& ps, bool layer) {
    const double bytes = layer ? lgb : gb;
    const auto [dense, expert] = sharded_parts(ps);
    if (!(dense + expert > 0)) return Seconds(0);
    Seconds t;
    if (dense > 0)
      for (double share : layer ? modules : std::vector<double>{1.0})
        t += in.comm.time(Collective::all_gather, Bytes(dense * share * bytes), shard);
    if (expert > 0) t += in.comm.time(Collective::all_gather, Bytes(expert * bytes), groups.expert_dp);
    if (fw.zero3_gather_copies && in.compute.memory_bound)
      t += in.compute.memory_bound(Bytes(2.0 * (dense + expert) * bytes), 1);
    return t;
  };
  // HSDP: the reduce-scattered shard of each unit is then all-reduced across the replicas, on the
  // same stream before the next unit's reduction (PyTorch FSDP HYBRID_SHARD's post-backward
  // reduce: reduce_scatter in the shard group, all_reduce in the replicate group; FSDP2's
  // foreach_reduce the same).
  const int replicas = p.grad_ranks() / k;
  const CommGroup& replicate = groups.replicate;
  // Where the framework all-reduces across the replicas in the step's last backward only
  // (FrameworkTraits::hsdp_outer_reduce_per_step), each backward carries 1/m of it.
  const double outer_share = fw.hsdp_outer_reduce_per_step ? 1.0 / micro_batches : 1.0;
  // Reductions: one reduce-scatter per unit, or per bucket of elements where the framework reduces
  // in buckets (DeepSpeed's reduce_bucket_size, plan.reduce_bucket): a unit's gradients are that
  // many buckets' share (buckets span units); with the framework's passes over each gradient on
  // the reduction stream before it.
  const double bucket = fw.zero3_reduce_bucket_elements > 0
                            ? (p.reduce_bucket > 0 ? double(p.reduce_bucket) : fw.zero3_reduce_bucket_elements)
                            : 0.0;
  auto reduce = [&](const StageParameters& ps) {
    const auto [params, expert] = sharded_parts(ps);
    if (!(params + expert > 0)) return Seconds(0);
    Seconds t;
    if (params > 0) {
      t += bucket > 0 ? (params / bucket) * in.comm.time(Collective::reduce_scatter, Bytes(bucket * rb), shard)
                      : in.comm.time(Collective::reduce_scatter, Bytes(params * rb), shard);
      if (replicas > 1) t += outer_share * in.comm.time(Collective::all_reduce, Bytes(params * rb / k), replicate);
    }
    if (expert > 0) t += in.comm.time(Collective::reduce_scatter, Bytes(expert * rb), groups.expert_dp);
    if (fw.zero3_reduce_copy_passes > 0 && in.compute.memory_bound)
      t += in.compute.memory_bound(Bytes(2.0 * fw.zero3_reduce_copy_passes * (params + expert) * rb),
                                   fw.zero3_reduce_copy_passes);
    return t;
  };
  // FSDP2's copies on the compute stream (FrameworkTraits::fsdp2_unit_copies): out of each
  // gathered buffer into the unit's parameters, and each unit's gradients into the reduce-scatter
  // buffer in reduce_dtype. They lengthen the unit's compute (under which the next gather hides)
  // and are charged with the exposed communication, as FSDP's own time.
  const bool unit_copies = fw.fsdp2_unit_copies && bool(in.compute.memory_bound);
  auto copy_out = [&](double params, bool layer) {
    return unit_copies && params > 0 ? in.compute.memory_bound(Bytes(params * 2.0 * (layer ? lgb : gb)), 1)
                                     : Seconds(0);
  };
  // The unsharded gradients are in the compute dtype, which is what the gathers carry (FSDP2's
  // param_dtype): read gb, write rb. Megatron-FSDP copies them into its bucket only where the
  // weight-gradient GEMMs do not write there (FrameworkTraits::zero3_grad_copy_unless_fused).
  const bool grad_copies = (unit_copies || (fw.zero3_grad_copy_unless_fused && !fw.fuses_gradient_accumulation(p))) &&
                           bool(in.compute.memory_bound);
  auto copy_in = [&](double params) {
    return grad_copies && params > 0 ? in.compute.memory_bound(Bytes(params * (gb + rb)), 1) : Seconds(0);
  };
  // Layers of one kind cost the same; TeraPipe slices are refused with ZeRO-3 (one slice here).
  const int tokens = p.local_tokens(m);
  const Seconds tp = tp_comm_per_layer(in, tokens);
  std::map<std::pair<bool, int>, LayerCompute> cache;
  auto layer = [&](bool moe, int window) {
    const auto key = std::make_pair(moe, window);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, in.compute.layer(tokens, attention_context(in.e), moe, window)).first;
    return it->second;
  };
  const EdgeCompute edges = fw.has_embedding_and_head ? in.compute.edges(tokens) : EdgeCompute{};
  // What the gathers and reduce-scatters hide under, by the first layer's kind (the GEMMs' share).
  const LayerCompute first = layer(m.is_moe_layer(0), m.window_of(0));
  const double contention_fwd = overlap_contention(in, gemm_share(first, false));
  const double contention_bwd = overlap_contention(in, gemm_share(first, true));
  // Pipelines that reduce once per step (FrameworkTraits::fsdp_pipeline_step_sync): parameters,
  // once gathered, stay so until the step's end (reshard_after_backward off), so only the first
  // micro-batch's forward gathers (its exposure spread over the m forwards here); with
  // reshard_after_forward each backward still re-gathers. No backward reduces: every stage
  // reduce-scatters its whole gradient after its last backward (the per-stage sync below).
  const bool step_sync = fw.fsdp_pipeline_step_sync && p.pp > 1;
  const double forward_share = step_sync ? 1.0 / micro_batches : 1.0;
  const bool reduces_per_microbatch = !step_sync;
  // The embedding and the head gathered once per step and kept (FrameworkTraits::
  // zero3_edges_gathered_per_step): their forward gathers spread over the step's forwards, no
  // re-gather for the backward; their gradients still reduced every micro-batch.
  const bool edges_kept = fw.zero3_edges_gathered_per_step;
  const double edge_share = edges_kept ? 1.0 / micro_batches : forward_share;
  for (int s = 0; s < p.pp; ++s) {
    const std::vector<int> layers = cost_models::stage_layers(m, p, s);
    double layer_params = 0;
    for (int l : layers) layer_params += cost_models::layer_parameters_on_gpu(m, p, l).total();
    // The embedding (with the positions and, on a one-stage pipeline, the final norm): what the
    // stage holds beyond its layers, on the first stage.
    // The embedding on the first stage; on a later last stage, the LM head (an untied matrix or
    // Megatron's tied copy) and the final norm: what the stage holds beyond its layers.
    const double beyond_layers = cost_models::parameters_on_gpu(fw, m, p, s).total() - layer_params;
    const double edge_params = s == 0 ? beyond_layers : 0.0;
    const double head_params = s > 0 && s == p.pp - 1 ? beyond_layers : 0.0;
    StageParameters stage_reduced;  // parameters whose gradients the stage reduces once (step_sync)
    for (int ch = 0; ch < v; ++ch) {
      const bool first_segment = p.chunk_segment(s, ch) == 0 && fw.has_embedding_and_head;
      const bool last_segment = p.chunk_segment(s, ch) == p.segments() - 1 && fw.has_embedding_and_head;
      std::vector<ShardedUnit> fwd, bwd;
      Seconds fwd_copies, bwd_copies;
      // One unit: its gather, its compute with the copies added, its reduction.
      // (`layer`: a transformer layer's unit, which a module-by-module framework gathers in pieces.)
      auto unit = [&](std::vector<ShardedUnit>& units, Seconds& copies, const StageParameters& params, bool gathers,
                      Seconds compute, bool reduces, bool layer = true) {
        const Seconds copy =
            (gathers ? copy_out(sharded(params), layer) : Seconds(0)) + (reduces ? copy_in(sharded(params)) : Seconds(0));
        copies += copy;
        units.push_back({gathers ? gather(params, layer) : Seconds(0), compute + copy, reduces ? reduce(params) : Seconds(0)});
      };
      // (A unit kept for the step gathers in the first micro-batch only: its share of the gather
      // here, as the step's forwards share it.)
      auto edge_unit = [&](double params, Seconds compute) {
        const double share = edges_kept ? edge_share : 1.0;
        const Seconds copy = copy_out(k > 1 ? params : 0.0, false) * share;
        fwd_copies += copy;
        fwd.push_back({params > 0 ? gather({params, 0.0}, false) * share : Seconds(0), compute + copy, Seconds(0)});
      };
      if (first_segment) edge_unit(edge_params, edges.embedding_forward);
      // Dense (and edge) parameters and experts apart: they shard over different groups.
      double chunk_params = 0, regathered = 0, chunk_experts = 0, regathered_experts = 0;
      const std::vector<int> chunk = cost_models::chunk_layers(m, p, s, ch);
      // Where the framework keeps parameters used again soon (FrameworkTraits::zero3_reuse_elements:
      // DeepSpeed's stage3_max_reuse_distance), the units the backward starts with are not gathered
      // again, on the stage's last chunk. DeepSpeed decides at each module's release
      // (partitioned_param_coordinator.py __params_to_release): it walks the recorded trace from
      // there and keeps the module's parameters if they come round again before the walk has passed
      // that many elements: the rest of the forward (the later layers and the head), then the
      // backward's units before this one, the head's and each later layer's (a recomputed layer's
      // twice: its recompute and its backward; cost_models::zero3_kept_layers). Without resharding
      // after the forward everything stays.
      const double reuse = ch == v - 1 && prefetch ? fw.zero3_reuse_elements : 0.0;
      // The head's backward comes right after its forward. (On a one-stage pipeline the head is
      // the tied embedding, which edge_params holds.)
      const double tail = !last_segment ? 0.0 : head_params > 0 ? head_params : p.pp == 1 ? edge_params : 0.0;
      const bool head_kept = last_segment && (edges_kept || !p.reshard_after_forward || reuse > 0);
      std::vector<double> chunk_layer_params, backward_passes;
      for (int i = 0; i < int(chunk.size()); ++i) {
        const int l = chunk[std::size_t(i)];
        chunk_layer_params.push_back(cost_models::layer_parameters_on_gpu(m, p, l).total());
        backward_passes.push_back(1.0 + layer_recompute_share(m, p, l, i, s, micro_batches));
      }
      const std::vector<bool> kept = p.reshard_after_forward
                                         ? cost_models::zero3_kept_layers(chunk_layer_params, backward_passes, tail, reuse)
                                         : std::vector<bool>(chunk.size(), true);
      for (int i = 0; i < int(chunk.size()); ++i) {
        const int l = chunk[std::size_t(i)];
        const StageParameters params = cost_models::layer_parameters_on_gpu(m, p, l);
        chunk_params += params.dense;
        chunk_experts += params.expert;
        if (!kept[std::size_t(i)]) {
          regathered += params.dense;
          regathered_experts += params.expert;
        }
        // What the compute stream does between two units' gathers: the layer with its TP (as
        // overlapped), CP and EP communication, as cost_layer_chunks charges it.
        const bool moe = m.is_moe_layer(l);
        const double redo = layer_recompute_share(m, p, l, i, s, micro_batches);
        const LayerStep ls = layer_step(in, layer(moe, m.window_of(l)), tokens, tp, moe ? ep_comm_per_layer(in, tokens) : Seconds(0),
                                        redo, moe);
        unit(fwd, fwd_copies, params, true, ls.forward_total(), false);
        // Without prefetch nothing stays gathered (FrameworkTraits::prefetches_zero3): a recomputed
        // layer is gathered for its recompute, released after it and gathered again for its
        // backward (in the backward order: the recompute's unit first; `redo` of the micro-batches).
        if (!prefetch && !kept[std::size_t(i)] && redo > 0) {
          const Seconds redo_compute = ls.recompute + ls.recompute_comm + ls.recompute_ep;
          unit(bwd, bwd_copies, params, true, ls.backward_total() - redo_compute, reduces_per_microbatch);
          bwd.push_back({gather(params, true) * redo, redo_compute, Seconds(0)});
          regathered += params.dense * redo;
          regathered_experts += params.expert * redo;
        } else {
          unit(bwd, bwd_copies, params, !kept[std::size_t(i)], ls.backward_total(), reduces_per_microbatch);
        }
      }
      if (last_segment) {
        if (!head_kept) regathered += head_params;
        edge_unit(head_params, edges.head_forward);
        unit(bwd, bwd_copies, {head_params, 0.0}, !head_kept, edges.head_backward, reduces_per_microbatch, false);
      }
      std::reverse(bwd.begin(), bwd.end());
      if (first_segment)
        unit(bwd, bwd_copies, {edge_params, 0.0}, false, edges.embedding_backward, reduces_per_microbatch, false);
      for (auto& chunk_slices : c.chunk[s][ch]) {
        chunk_slices.forward_dp_comm =
            (exposed_under_prefetch(fwd, contention_fwd, prefetch) + fwd_copies) * forward_share;
        chunk_slices.backward_dp_comm = exposed_under_prefetch(bwd, contention_bwd, prefetch) + bwd_copies;
      }
      const double head = last_segment ? head_params : 0.0;
      const double edge = first_segment ? edge_params : 0.0;
      // Per micro-batch: the forward's gathers (once per step under step_sync), the backward's
      // re-gathers (reshard_after_forward) and the reductions (per micro-batch or once).
      const double gathered_layers = chunk_params * forward_share + regathered - (last_segment && !head_kept ? head : 0.0);
      const double gathered = (edge + head) * edge_share + chunk_params * forward_share + regathered;
      const double reduced = edge + chunk_params + head;
      const double reductions = step_sync ? 1.0 : double(micro_batches);
      c.zero3_gather_bytes[s] += Bytes(((gathered_layers * lgb + (gathered - gathered_layers) * gb) * sent +
                                        (chunk_experts * forward_share + regathered_experts) * lgb * sent_e) *
                                       micro_batches);
      c.zero3_reduce_bytes[s] += Bytes((reduced * rb * sent + chunk_experts * rb * sent_e) * reductions);
      if (replicas > 1)  // each GPU's shard through a ring all-reduce over the replicas
        c.zero3_reduce_bytes[s] +=
            Bytes(reduced * rb / k * 2.0 * (replicas - 1.0) / replicas * reductions * outer_share);
      if (step_sync) {
        stage_reduced.dense += reduced;
        stage_reduced.expert += chunk_experts;
      }
    }
    if (step_sync && stage_reduced.total() > 0) {
      // After the stage's last backward: the copies into the reduce-scatter buffers, then one
      // reduce-scatter per unit back to back on the reduce stream, nothing left to hide under;
      // the optimizer waits for them (the data-parallel sync of cost_data_parallel).
      const Seconds sync = reduce(stage_reduced) + copy_in(sharded(stage_reduced));
      const double host_ranks = std::min(p.tp, in.e.cluster.gpus_per_node);
      Bytes nic = Bytes((stage_reduced.dense * rb * sent + stage_reduced.expert * rb * sent_e) * host_ranks);
      if (replicas > 1) nic += Bytes(stage_reduced.dense * rb / k * 2.0 * (replicas - 1.0) / replicas * host_ranks);
      c.dp_grad_sync[std::size_t(s)] += sync;
      c.dp_sync_tail[std::size_t(s)] += sync;
      c.dp_grad_sync_bytes[std::size_t(s)] += nic;
    }
  }
}

void cost_optimizer(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(*in.x.framework, in.e.model, p, s);
    Seconds opt;
    if (p.offload.optimizer) {
      // Optimizer state on the host: gradients go down, the host's CPUs step them, and weights
      // come back over PCIe.
      const cost_models::OffloadCost oc = cost_models::offload_cost(in.x, in.e.model, in.e.training, p, in.e.cluster, s);
      const BytesPerSecond pcie = in.e.cluster.host.pcie_bandwidth;
      opt = oc.optimizer_to_host / pcie + oc.host_optimizer_time + oc.optimizer_to_device / pcie;
    } else if (in.x.host) {
      // The trainer on a CPU device: per tensor norms and AdamW, the shard's step under ZeRO-1.
      const double local = sp.dense + sp.expert, shard = p.zero >= 1 ? double(p.shard_ways()) : 1.0;
      const int tensors = 12 * int(cost_models::stage_layers(in.e.model, p, s).size()) + (s == 0 ? 2 : 0) +
                          (s == p.pp - 1 ? (p.pp > 1 ? 3 : 2) : 0);
      opt = cost_models::host_optimizer_time(*in.x.host, local, local / shard, tensors);
    } else {
      const double shard = p.zero >= 1 ? double(p.shard_ways()) : 1.0;
      opt = in.compute.optimizer(sp.dense / shard + sp.expert / (p.zero >= 1 ? double(p.expert_dp()) : 1.0));
      if (in.e.training.optimizer == Optimizer::lamb && p.zero >= 1 && p.shard_ways() > 1) {
        // Sharded LAMB needs each tensor's whole norms (weights and update): the shards' partial
        // sums of squares are all-reduced over the shard group (apex DistributedFusedLAMB), two
        // fp32 values per tensor, 12 tensors per layer (4 weights, 4 biases, 2 norms' two).
        const double tensors = 12.0 * double(cost_models::stage_layers(in.e.model, p, s).size());
        opt += in.comm.time(Collective::all_reduce, Bytes(2.0 * 4.0 * tensors), plan_groups(p, in.e.cluster).shard);
      }
    }
    // ZeRO-3 persistent vectors gathered again one by one after the step (DeepSpeed _post_step).
    if (p.zero >= 3 && p.shard_ways() > 1) {
      const std::vector<double> vectors = cost_models::zero3_persistent_vectors(*in.x.framework, in.e.model, p);
      const double layers = double(cost_models::stage_layers(in.e.model, p, s).size());
      const CommGroup shard = plan_groups(p, in.e.cluster).shard;
      for (double n : vectors) opt += layers * in.comm.time(Collective::all_gather, Bytes(n * in.x.bytes.gather), shard);
    }
    // MXFP8 parameters (Transformer Engine's MXFP8 recipe with plan.fp8_param_gather): after the
    // 16-bit all-gather through the gradient buffer, every rank quantizes all its layers' weights
    // again, both usages (Megatron-Core param_and_grad_buffer.py finish_param_sync,
    // param.data.copy_(param_slice) into the MXFP8 tensor; read 2, write 1 + 1 and the scales),
    // once per step. It runs in the first forward's parameter syncs; counted here, with the step.
    if (in.e.training.dtype == Dtype::fp8 && in.x.fp8_scaling == Fp8Scaling::mxfp8 && p.fp8_param_gather &&
        in.compute.memory_bound)
      opt += in.compute.memory_bound(
          Bytes(cost_models::kMxfp8QuantizeBytes * cost_models::stage_layer_parameters(in.e.model, p, s).total()), 1);
    // Calibrated per-iteration host time (cost_models/calibrated.hpp), on every stage.
    c.optimizer.push_back(opt + in.x.calibrated.step_overhead);
  }
}

}  // namespace foresight::sim
