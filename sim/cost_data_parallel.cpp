// Costers of the data-parallel gradient synchronisation and the optimizer step.
#include <algorithm>
#include <map>

#include "cost_models/host_compute.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "cost_models/roofline.hpp"
#include "sim/costers.hpp"

namespace foresight::sim {

namespace {

/// What every stage's data-parallel sync shares: the plan's groups and ranks, and the SM
/// contention of collectives overlapped with the backward and the forward.
struct DpContext {
  const CostInputs& in;
  WorkloadCosts& c;
  const PlanSpec& p;
  const FrameworkTraits& fw;
  PlanGroups groups;
  // NIC bytes per SimGrid host (one per TP x CP group) are those of the data-parallel rings that
  // leave it: one ring per TP rank (over its dp x cp ranks, the host's cp ranks adjacent in the
  // tp-cp-dp-pp order, so each ring crosses out of a node once, as the comm model's ring path
  // assumes), at most one per GPU of the node.
  double host_ranks;
  int n;         // dp x cp ranks hold the same parameters
  int k;         // ranks each shard group spans
  int replicas;  // HSDP: shard groups holding the same shards
  // A distributed optimizer that reduce-scatters (ZeRO-1/2 as Megatron-Core and the bundled trainer
  // run it; DeepSpeed's stage 1 all-reduces): each rank receives the sums of its shard only.
  bool sharded_reduction;
  // What an overlapped reduction hides under: a backward, priced by the first layer's kind (the
  // GEMMs' share); the same on every stage.
  double dp_contention = 0, forward_contention = 0;
};

/// One stage's sync, as WorkloadCosts keeps it.
struct StageSync {
  Seconds sync, gather, tail, slowdown;
  Bytes sync_bytes, gather_bytes;
  Bytes grads, weights;  // the stage's dense gradients (reduce dtype) and model copy (gathered)
};

/// Reducing `grads` of dense gradients at ZeRO 0-2 as the plan's framework reduces them (n > 1):
/// all-reduced over dp, or by a reduce-scattering optimizer reduce-scattered over the shard group
/// and, with HSDP, each shard then all-reduced across the replicas (ZeRO-3: unit by unit inside
/// the backward, cost_sharded_parameters). Seconds, and the bytes each SimGrid host sends.
struct Reduction {
  Seconds time;
  Bytes bytes;
};
Reduction dense_reduction(const DpContext& d, Bytes grads) {
  const auto& comm = d.in.comm;
  Reduction r;
  if (!d.sharded_reduction) {
    r.time = comm.time(Collective::all_reduce, grads, d.groups.dp);
    r.bytes = grads * (2.0 * (d.n - 1.0) / d.n) * d.host_ranks;
    return r;
  }
  if (d.k > 1) {
    r.time = comm.time(Collective::reduce_scatter, grads, d.groups.shard);
    r.bytes = grads * ((d.k - 1.0) / d.k) * d.host_ranks;
  }
  if (d.replicas > 1) {
    r.time += comm.time(Collective::all_reduce, grads / double(d.k), d.groups.replicate);
    r.bytes += grads / double(d.k) * (2.0 * (d.replicas - 1.0) / d.replicas) * d.host_ranks;
  }
  return r;
}

/// The gradient reduction and the model copy's gather after the step: dense over dp (or the shard
/// group, with HSDP's all-reduce across the replicas), experts over their expert-data-parallel group.
StageSync reduce_and_gather(const DpContext& d, int s) {
  const CostInputs& in = d.in;
  const PlanSpec& p = d.p;
  const int n = d.n, k = d.k;
  const double host_ranks = d.host_ranks;
  const cost_models::StageParameters sp = cost_models::parameters_on_gpu(d.fw, in.e.model, p, s);
  StageSync r;
  r.grads = Bytes(sp.dense * in.x.bytes.reduce);
  const Bytes expert_grads(sp.expert * in.x.bytes.reduce);
  // The model copy ZeRO gathers after the step: the dense parameters over the shard group (the
  // experts' shards over their expert-data-parallel group, below). Under plan.fp8_param_gather
  // the layers' GEMM weights travel in FP8 (Megatron-Core's --fp8-param-gather).
  const double layer_dense = p.fp8_param_gather ? cost_models::stage_layer_parameters(in.e.model, p, s).dense : 0.0;
  r.weights = Bytes((sp.dense - layer_dense) * in.x.bytes.weight +
                    layer_dense * cost_models::layer_gather_bytes(in.x, in.e.model, p, in.x.bytes.weight));
  const Bytes expert_weights(sp.expert * in.x.bytes.weight);
  if (n > 1) {
    if (p.zero < 3) {
      const Reduction dense = dense_reduction(d, r.grads);
      r.sync = dense.time;
      r.sync_bytes = dense.bytes;
    }
    if ((p.zero == 1 || p.zero == 2) && k > 1) {
      // Each rank stepped its shard: the updated weights are all-gathered.
      r.gather = in.comm.time(Collective::all_gather, r.weights, d.groups.shard);
      r.gather_bytes = r.weights * ((k - 1.0) / k) * host_ranks;
    }
  }
  // Expert gradients are replicated over the plan.expert_dp() ranks holding the same experts
  // (dp / ep without folding; tp x cp x dp / (etp x ep) folded).
  // (Under ZeRO-3 the experts' gradients are reduce-scattered unit by unit with the rest.)
  if (expert_grads > Bytes(0) && p.expert_dp() > 1 && p.zero < 3) {
    // Under a reduce-scattering distributed optimizer each expert-data-parallel rank steps a shard
    // of the experts too (Megatron-Core's expert buffers, the trainer's one reduce-scatter at
    // ep = 1) and gathers the updated experts after the step.
    const double edp = p.expert_dp();
    r.sync += in.comm.time(d.sharded_reduction ? Collective::reduce_scatter : Collective::all_reduce, expert_grads,
                           d.groups.expert_dp);
    r.sync_bytes += expert_grads * ((d.sharded_reduction ? 1.0 : 2.0) * (edp - 1.0) / edp) * host_ranks;
    if (p.zero >= 1) {
      r.gather += in.comm.time(Collective::all_gather, expert_weights, d.groups.expert_dp);
      r.gather_bytes += expert_weights * ((edp - 1.0) / edp) * host_ranks;
    }
  }
  return r;
}

/// Model chunk ch's share of stage s's layers (of its v chunks; an equal share where the stage
/// has no layers): the share of the stage's gradient buffer the chunk reduces, as
/// cost_layer_chunks splits it.
double chunk_share(const ModelSpec& m, const PlanSpec& p, int s, int ch, int v) {
  const double stage_layers = double(cost_models::stage_layers(m, p, s).size());
  return stage_layers > 0 ? double(cost_models::chunk_layers(m, p, s, ch).size()) / stage_layers : 1.0 / v;
}

/// The elements of stage s's bucket that an overlapped reduction reduces last and an overlapped
/// gather gathers first, given the framework's bucket size. Where the framework splits only the
/// first stage's first chunk (FrameworkTraits::dp_buckets_first_stage_only), any other stage's
/// is its first chunk whole (that chunk, holding the stage's first layers, finishes its backward
/// last). On the stage holding the word embedding, whose gradient the backward produces last, it
/// is the bucket holding the embedding: at least the embedding and its positions where a bucket
/// closes only once the parameter crossing its size is in, the embedding alone where it is
/// larger than the bucket and the bucket is flushed before it (DeepSpeed), exactly the embedding
/// where a tied copy shared with the last stage is a bucket of its own (the FrameworkTraits
/// fields cite the frameworks' code).
double last_bucket_elements(const DpContext& d, int s, double bucket) {
  const ModelSpec& m = d.in.e.model;
  const PlanSpec& p = d.p;
  if (d.fw.dp_buckets_first_stage_only && s > 0) {
    return cost_models::parameters_on_gpu(d.fw, m, p, s).dense * chunk_share(m, p, s, 0, d.c.shape.virtual_stages);
  }
  if (!d.fw.has_embedding_and_head || !p.holds_first_segment(s)) return bucket;
  const double word = double(m.vocab) * m.hidden / p.tp;
  const double positions = m.position == PositionEmbedding::learned ? double(m.seq_len) * m.hidden : 0.0;
  if (d.fw.dp_shared_embedding_own_bucket && m.tie_embeddings && p.pp > 1 && d.sharded_reduction) return word;
  if (d.fw.dp_bucket_flushes_before_overflow) return std::max(bucket, word);
  return std::max(bucket, word + positions);
}

/// plan.param_gather_overlap: the gather bucket by bucket under the next iteration's first
/// forward (Megatron-Core's --overlap-param-gather: the optimizer step dispatches the first
/// bucket's all-gather, and each bucket's forward pre-hook, on the first micro-batch only, waits
/// for it and dispatches the next). The stage's first forward waits for the first bucket (the
/// framework's bucket, Megatron-Core's bucket_size) and for whatever of its first model chunk's
/// gather, dense and expert buckets alike, that forward cannot cover: the chain starts with this
/// stage's own forward, so a pipeline's fill hides the first bucket only. The hidden part holds
/// SMs beside the forwards (the ctas / (sms - ctas) rule of the overlapped reduction below); with
/// an interleaved schedule the later chunks' gathers hide under the forwards before theirs.
void overlap_param_gather(const DpContext& d, int s, StageSync& r) {
  const PlanSpec& p = d.p;
  if (!(p.param_gather_overlap && r.gather > Seconds(0) && (p.zero == 1 || p.zero == 2))) return;
  const double bucket_params = last_bucket_elements(d, s, d.fw.overlap_bucket_elements(p, d.in.x.bytes.reduce));
  const Bytes bucket = min(Bytes(bucket_params * d.in.x.bytes.weight), r.weights);
  const Seconds first = r.weights > Bytes(0) && d.k > 1
                            ? min(r.gather, d.in.comm.time(Collective::all_gather, bucket, d.groups.shard))
                            : Seconds(0);
  const Seconds first_chunk = r.gather / double(std::max(1, p.virtual_stages));
  Seconds own;
  if (s < int(d.c.chunk.size()) && !d.c.chunk[std::size_t(s)].empty())
    for (const ChunkCosts& sl : d.c.chunk[std::size_t(s)][0])
      own += sl.forward_stream();
  const Seconds exposed = max(first, first_chunk - own);
  r.gather_bytes = r.gather_bytes * (exposed / r.gather);
  r.gather = exposed + d.forward_contention * (r.gather - exposed);
}

/// With the reduction overlapped (plan.dp_overlap): the last bucket, which must wait for the
/// backward to finish (the framework's bucket: PyTorch DDP's bucket_cap_mb, Megatron-Core's
/// bucket_size); each model chunk's share of the buckets; and the SMs the hidden buckets' NCCL
/// kernels hold while the last backward computes (Megatron-LM SC21 sec. 4.2 runs DDP's reduction
/// beside the backward; the same ctas / (sms - ctas) rule as ZeRO-3's prefetch and overlapped
/// TP). The stage's last backward is chunk 0's first slice (TeraPipe runs a micro-batch's
/// backward from its last slice to its first). With model chunks (an interleaved schedule) each
/// chunk's buckets are reduced when its own last micro-batch runs its backward (Megatron-Core
/// enables a chunk's grad sync on its last micro-batch, schedules.py backward_step_helper): chunk
/// v-1 first, chunk 0 last, each a pipeline's worth of backward steps apart. The share of each
/// chunk is its share of the stage's layers, as the gradient buffer is split in cost_layer_chunks.
std::vector<double> overlapped_reduction(const DpContext& d, int s, StageSync& r) {
  const CostInputs& in = d.in;
  const PlanSpec& p = d.p;
  const WorkloadCosts& c = d.c;
  r.tail = r.sync;
  if (c.dp_overlap && r.sync > Seconds(0)) {
    // The last bucket (last_bucket_elements) goes as the whole reduction goes.
    const Bytes bucket =
        min(Bytes(last_bucket_elements(d, s, d.fw.overlap_bucket_elements(p, in.x.bytes.reduce)) * in.x.bytes.reduce),
            r.grads);
    r.tail = min(r.sync, dense_reduction(d, bucket).time);
  }
  const int v = c.shape.virtual_stages;
  std::vector<double> shares;
  if (c.dp_overlap && v > 1)
    for (int ch = 0; ch < v; ++ch) shares.push_back(chunk_share(in.e.model, p, s, ch, v));
  if (c.dp_overlap && r.sync > r.tail && !c.chunk.empty() && !c.chunk[std::size_t(s)].empty() &&
      !c.chunk[std::size_t(s)][0].empty()) {
    const ChunkCosts& last = c.chunk[std::size_t(s)][0].front();
    // The buckets hide under the backward steps from the first chunk's last micro-batch on:
    // (v - 1) pipelines' worth of steps after it and its own, each about the last one's length.
    const double steps = v > 1 ? double(v - 1) * p.pp + 1.0 : 1.0;
    r.slowdown = d.dp_contention * min(r.sync - r.tail, (last.backward + last.recompute) * steps);
  }
  return shares;
}

/// The tied word embedding's two copies (the first stage's and the last stage's, FrameworkTraits::
/// sums_tied_embedding_copies) sum their gradients once a step, an all-reduce between the two
/// stages of each tp rank and data-parallel index, on the gradient stream next to the
/// data-parallel reduction and hidden under nothing (Megatron-LM's _allreduce_embedding_grads
/// after it, DeepSpeed's PipelineEngine._exec_reduce_tied_grads right before it): the embedding
/// shard's vocab x hidden / tp gradients, in the reduce dtype; fp32 under DeepSpeed's
/// BF16_Optimizer (plan.bf16_optimizer), which reduces its fp32 accumulation of the tied weight
/// (_exec_reduce_tied_grads on _hp_grad, microsoft/DeepSpeed 77b649d16). Every GPU of a
/// first-stage node sends at once (CommGroup::concurrent_groups).
void tied_embedding_sync(const DpContext& d, int s, StageSync& r) {
  const CostInputs& in = d.in;
  const PlanSpec& p = d.p;
  if (!(d.fw.sums_tied_embedding_copies && cost_models::last_stage_holds_tied_copy(d.fw, in.e.model, p) &&
        (s == 0 || s == p.pp - 1)))
    return;
  const double bytes_per = p.bf16_optimizer && in.e.training.dtype == Dtype::bf16 ? 4.0 : in.x.bytes.reduce;
  const Bytes tied(double(in.e.model.vocab) * in.e.model.hidden / p.tp * bytes_per);
  const Seconds t = in.comm.time(Collective::all_reduce, tied, d.groups.embedding);
  r.sync += t;
  r.tail += t;
  r.sync_bytes += tied * d.host_ranks;  // two ranks: each sends its copy once
}

}  // namespace

void cost_data_parallel(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const FrameworkTraits& fw = *in.x.framework;
  const int n = p.grad_ranks();
  const int k = p.shard_ways();
  DpContext d{.in = in,
              .c = c,
              .p = p,
              .fw = fw,
              .groups = plan_groups(p, in.e.cluster),
              .host_ranks = double(std::min(p.tp, in.e.cluster.gpus_per_node)),
              .n = n,
              .k = k,
              .replicas = n / k,
              .sharded_reduction = (p.zero == 1 || p.zero == 2) && fw.reduction_at(p.zero) != ZeroReduction::all_reduce};
  c.dp_latency = n > 1 ? in.comm.estimate(Collective::all_reduce, Bytes(8), d.groups.dp).latency : Seconds(0);
  // ZeRO-3 reduces every unit's gradients inside the backward (cost_sharded_parameters).
  c.dp_overlap = p.dp_overlap && n > 1 && p.zero < 3;
  if (c.dp_overlap || p.param_gather_overlap) {
    const ModelSpec& m = in.e.model;
    const LayerCompute lc = in.compute.layer(p.local_tokens(m), attention_context(in.e), m.is_moe_layer(0), m.window_of(0));
    if (c.dp_overlap) d.dp_contention = overlap_contention(in, gemm_share(lc, true));
    d.forward_contention = overlap_contention(in, gemm_share(lc, false));
  }
  for (int s = 0; s < p.pp; ++s) {
    StageSync r = reduce_and_gather(d, s);
    overlap_param_gather(d, s, r);
    c.dp_sync_chunk_share.push_back(overlapped_reduction(d, s, r));
    tied_embedding_sync(d, s, r);
    c.dp_overlap_slowdown.push_back(r.slowdown);
    c.dp_sync_tail.push_back(r.tail);
    c.dp_grad_sync.push_back(r.sync);
    c.dp_grad_sync_bytes.push_back(r.sync_bytes);
    c.dp_param_gather.push_back(r.gather);
    c.dp_param_gather_bytes.push_back(r.gather_bytes);
  }
}

namespace {

/// The chain of exposed_under_prefetch: returns the end of the last compute or reduce-scatter
/// minus the compute, and (meaningful without host work only) the communication hidden under
/// compute. With `with_host` the units' host work gates their compute: `serial`, it runs after
/// the previous unit's compute (the GPU waits for it unless a gather keeps it waiting longer);
/// otherwise the host runs ahead, its work back to back (the first unit's done before the pass,
/// while the GPU finished the work before it), but it starts unit i's work only once unit i - 2
/// has started on the GPU (the frameworks' back-pressure: DeepSpeed's fetch events beyond two,
/// FSDP's all-gather rate limiter).
std::pair<double, double> prefetch_chain(const std::vector<ShardedUnit>& units, bool prefetch, bool with_host,
                                         bool serial) {
  const int n = int(units.size());
  std::vector<double> compute_end(n, 0.0), gather_end(n, 0.0), start(n, 0.0);
  double link = 0, compute = 0, busy = 0, comm = 0, host = 0;
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
    const double own = with_host ? units[i].host.value() : 0.0;
    if (serial) {
      start[i] = std::max(compute + own, gather_end[i]);
    } else {
      // Unit 0's work was done while the GPU finished what came before the pass.
      host = std::max(host, i >= 2 ? start[i - 2] : 0.0) + (i >= 1 ? own : 0.0);
      start[i] = std::max({compute, gather_end[i], host});
    }
    compute = start[i] + units[i].compute.value();
    compute_end[i] = compute;
    busy += units[i].compute.value();
    if (units[i].reduce > Seconds(0)) issue(compute_end[i], units[i].reduce);
    // Without prefetch the next gather is issued when this unit is done, behind its reduce-scatter
    // on the link; a unit with nothing to gather starts right away.
    if (!prefetch && i + 1 < n)
      gather_end[i + 1] = units[i + 1].gather > Seconds(0) ? issue(compute_end[i], units[i + 1].gather) : compute_end[i];
  }
  const double exposed = std::max(compute, link) - busy;
  return {exposed, std::min(std::max(0.0, comm - exposed), busy)};
}

}  // namespace

ShardedExposure sharded_exposure(const std::vector<ShardedUnit>& units, double contention, bool prefetch, bool serial) {
  if (units.empty()) return {};
  // The communication's share as without host work (its contention on what it hides under), the
  // host's as what the host work adds to the chain.
  const auto [exposed, hidden] = prefetch_chain(units, prefetch, false, serial);
  // Without host work (no unit_overhead calibrated for the run, the common case) the second chain
  // would be the first again.
  const bool hosted = std::any_of(units.begin(), units.end(), [](const ShardedUnit& u) { return u.host > Seconds(0); });
  const double with_host = hosted ? prefetch_chain(units, prefetch, true, serial).first : exposed;
  return {Seconds(exposed + contention * hidden), Seconds(std::max(0.0, with_host - exposed))};
}

Seconds exposed_under_prefetch(const std::vector<ShardedUnit>& units, double contention, bool prefetch) {
  const ShardedExposure e = sharded_exposure(units, contention, prefetch);
  return e.comm + e.host;
}

namespace {

using cost_models::StageParameters;

/// One model chunk's ZeRO-3 units on a stage, forward and backward, with the parameters its
/// gathers and reductions carry per micro-batch.
struct ChunkUnits {
  std::vector<ShardedUnit> fwd, bwd;
  Seconds fwd_copies, bwd_copies;
  bool first_segment = false, last_segment = false, head_kept = false;
  // Dense (and edge) parameters and experts apart: they shard over different groups.
  double chunk_params = 0, regathered = 0, chunk_experts = 0, regathered_experts = 0;
};

/// ZeRO-3's pricing over plan.shard_ways() ranks, shared by every stage and chunk
/// (cost_sharded_parameters).
class ShardedCoster {
 public:
  ShardedCoster(const CostInputs& in, WorkloadCosts& c);
  /// Prices stage s: every chunk's exposed gathers and reductions, the bytes they carry, and under
  /// a once-per-step reduction the stage's data-parallel sync.
  void stage(int s);

 private:
  /// What of a unit is sharded, so gathered, reduce-scattered and copied: the dense part where
  /// dp x cp has two or more ranks, the experts where their group has.
  StageParameters sharded_parts(const StageParameters& ps) const {
    return StageParameters{.dense = k_ > 1 ? ps.dense : 0.0, .expert = ke_ > 1 ? ps.expert : 0.0};
  }
  double sharded(const StageParameters& ps) const { return sharded_parts(ps).total(); }
  Seconds gather(const StageParameters& ps, bool layer) const;
  Seconds reduce(const StageParameters& ps, bool layer) const;
  /// FSDP2's copies on the compute stream (FrameworkTraits::fsdp2_unit_copies): out of each
  /// gathered buffer into the unit's parameters, and each unit's gradients into the reduce-scatter
  /// buffer in reduce_dtype. They lengthen the unit's compute (under which the next gather hides)
  /// and are charged with the exposed communication, as FSDP's own time.
  Seconds copy_out(double params, bool layer) const {
    return unit_copies_ && params > 0 ? in_.compute.memory_bound(Bytes(params * 2.0 * (layer ? lgb_ : gb_)), 1)
                                      : Seconds(0);
  }
  /// The unsharded gradients are in the compute dtype, which is what the gathers carry (FSDP2's
  /// param_dtype): read gb, write rb. Megatron-FSDP copies them into its bucket only where the
  /// weight-gradient GEMMs do not write there (FrameworkTraits::zero3_grad_copy_unless_fused).
  Seconds copy_in(double params) const {
    return grad_copies_ && params > 0 ? in_.compute.memory_bound(Bytes(params * (gb_ + rb_)), 1) : Seconds(0);
  }
  /// Layers of one kind cost the same.
  const LayerCompute& layer(bool moe, int window);
  /// One unit: its gather, its compute with the copies added, its reduction. (`layer`: a
  /// transformer layer's unit, which a module-by-module framework gathers in pieces.)
  /// `passes`: how many times the host runs the unit's hooks in it (a recomputed layer's backward
  /// runs its forward hooks again: 1 + the recomputed share).
  void unit(std::vector<ShardedUnit>& units, Seconds& copies, const StageParameters& params, bool gathers,
            Seconds compute, bool reduces, bool layer = true, double passes = 1.0) const;
  /// The embedding or the head in the forward (a unit kept for the step gathers in the first
  /// micro-batch only: its share of the gather here, as the step's forwards share it).
  void edge_unit(ChunkUnits& u, double params, Seconds compute) const;
  ChunkUnits chunk_units(int s, int ch, double edge_params, double head_params);
  /// Charges the chunk's exposed communication and bytes; returns what it reduces (dense with the
  /// edges, experts) for a once-per-step reduction.
  StageParameters charge(int s, int ch, const ChunkUnits& u, double edge_params, double head_params);
  /// After the stage's last backward, under a once-per-step reduction: the copies into the
  /// reduce-scatter buffers, then one reduce-scatter per unit back to back on the reduce stream,
  /// nothing left to hide under; the optimizer waits for them (the data-parallel sync of
  /// cost_data_parallel).
  void step_sync(int s, const StageParameters& reduced);

  const CostInputs& in_;
  WorkloadCosts& c_;
  const PlanSpec& p_;
  const ModelSpec& m_;
  const FrameworkTraits& fw_;
  bool prefetch_;
  PlanGroups groups_;
  int v_, micro_batches_, k_;
  double sent_;  // of each gathered or reduced buffer, per GPU (ring)
  // Experts shard over the ranks holding the same experts (plan.expert_dp(): Megatron-FSDP's
  // expert data-parallel group, core_v0.16+ megatron_fsdp.py expt_dp_group), not over dp x cp:
  // their gathers and reduce-scatters run in that group, none where it is one rank.
  int ke_;
  double sent_e_;
  double gb_, rb_;
  // A transformer layer's gathers carry its GEMM weights in FP8 under plan.fp8_param_gather; the
  // embedding and the head stay in the gather dtype.
  double lgb_;
  // A unit's gather: one all-gather, or one per module where the framework fetches module by
  // module (FrameworkTraits::zero3_unit), the unit's parameters split as its modules' weights.
  std::vector<double> modules_;
  // The layer's share of parameters a complete-trace gather copies out (the modules whose bias
  // joins the weight's fetch: zero3_lone_gathers_in_place), and its vector parameters on this GPU
  // (norms and biases: the small flushes of zero3_large_gradients_alone). Set once, in the
  // constructor, from the per-module biases in modules_' order.
  double lone_copied_share_ = 1.0, layer_vectors_ = 0;
  // HSDP: the reduce-scattered shard of each unit is then all-reduced across the replicas, on the
  // same stream before the next unit's reduction (PyTorch FSDP HYBRID_SHARD's post-backward
  // reduce: reduce_scatter in the shard group, all_reduce in the replicate group; FSDP2's
  // foreach_reduce the same).
  int replicas_;
  // Where the framework all-reduces across the replicas in the step's last backward only
  // (FrameworkTraits::hsdp_outer_reduce_per_step), each backward carries 1/m of it.
  double outer_share_;
  // Reductions: one reduce-scatter per unit, or per bucket of elements where the framework reduces
  // in buckets (DeepSpeed's reduce_bucket_size, plan.reduce_bucket): a unit's gradients are that
  // many buckets' share (buckets span units); with the framework's passes over each gradient on
  // the reduction stream before it.
  double bucket_;
  bool unit_copies_, grad_copies_;
  // TeraPipe slices are refused with ZeRO-3 (one slice here).
  int tokens_;
  Seconds tp_;
  std::map<std::pair<bool, int>, LayerCompute> cache_;
  EdgeCompute edges_;
  // What the gathers and reduce-scatters hide under, by the first layer's kind (the GEMMs' share).
  double contention_fwd_ = 0, contention_bwd_ = 0;
  // Pipelines that reduce once per step (FrameworkTraits::fsdp_pipeline_step_sync): parameters,
  // once gathered, stay so until the step's end (reshard_after_backward off), so only the first
  // micro-batch's forward gathers (its exposure spread over the m forwards here); with
  // reshard_after_forward each backward still re-gathers. No backward reduces: every stage
  // reduce-scatters its whole gradient after its last backward (step_sync).
  bool step_sync_;
  double forward_share_;
  bool reduces_per_microbatch_;
  // The embedding and the head gathered once per step and kept (FrameworkTraits::
  // zero3_edges_gathered_per_step): their forward gathers spread over the step's forwards, no
  // re-gather for the backward; their gradients still reduced every micro-batch.
  bool edges_kept_;
  double edge_share_;
};

ShardedCoster::ShardedCoster(const CostInputs& in, WorkloadCosts& c)
    : in_(in),
      c_(c),
      p_(in.e.plan),
      m_(in.e.model),
      fw_(*in.x.framework),
      prefetch_(fw_.prefetches_zero3(p_)),
      groups_(plan_groups(p_, in.e.cluster)),
      v_(c.shape.virtual_stages),
      micro_batches_(p_.micro_batches(in.e.training)),
      k_(p_.shard_ways()),
      sent_((k_ - 1.0) / k_),
      ke_(p_.expert_dp()),
      sent_e_(ke_ > 1 ? (ke_ - 1.0) / ke_ : 0.0),
      gb_(in.x.bytes.gather),
      rb_(in.x.bytes.reduce),
      lgb_(cost_models::layer_gather_bytes(in.x, m_, p_, gb_)),
      modules_(cost_models::zero3_module_shares(fw_, m_)),
      replicas_(p_.grad_ranks() / k_),
      outer_share_(fw_.hsdp_outer_reduce_per_step ? 1.0 / micro_batches_ : 1.0),
      bucket_(fw_.zero3_reduce_bucket_elements > 0 ? fw_.reduce_bucket_elements(p_) : 0.0),
      unit_copies_(fw_.fsdp2_unit_copies && bool(in.compute.memory_bound)),
      grad_copies_((unit_copies_ || (fw_.zero3_grad_copy_unless_fused && !fw_.fuses_gradient_accumulation(p_))) &&
                   bool(in.compute.memory_bound)),
      tokens_(p_.local_tokens(m_)),
      tp_(tp_comm_per_layer(in, tokens_)),
      edges_(fw_.has_embedding_and_head ? in.compute.edges(tokens_) : EdgeCompute{}),
      step_sync_(fw_.fsdp_pipeline_step_sync && p_.pp > 1),
      forward_share_(step_sync_ ? 1.0 / micro_batches_ : 1.0),
      reduces_per_microbatch_(!step_sync_),
      edges_kept_(fw_.zero3_edges_gathered_per_step),
      edge_share_(edges_kept_ ? 1.0 / micro_batches_ : forward_share_) {
  // QKV's, the projection's, FC1's and FC2's biases (0 without biases).
  const double h = m_.hidden, up = m_.gated() ? 2.0 : 1.0, bias_on = m_.bias ? 1.0 : 0.0;
  const double bias[4] = {bias_on * (m_.q_width() + 2.0 * m_.kv_width()) / p_.tp, bias_on * h,
                          bias_on * up * m_.ffn_hidden / p_.tp, bias_on * h};
  layer_vectors_ = 2.0 * m_.norms_per_layer() * h + bias[0] + bias[1] + bias[2] + bias[3];
  if (modules_.size() == 4) {
    lone_copied_share_ = 0;
    for (std::size_t i = 0; i < 4; ++i)
      if (bias[i] > fw_.zero3_persistence_elements) lone_copied_share_ += modules_[i];
  }
  const LayerCompute first = layer(m_.is_moe_layer(0), m_.window_of(0));
  contention_fwd_ = overlap_contention(in, gemm_share(first, false));
  contention_bwd_ = overlap_contention(in, gemm_share(first, true));
}

Seconds ShardedCoster::gather(const StageParameters& ps, bool layer) const {
  // With the gathered parameters copied out on the gather stream where the framework does.
  const double bytes = layer ? lgb_ : gb_;
  const auto [dense, expert] = sharded_parts(ps);
  if (!(dense + expert > 0)) return Seconds(0);
  Seconds t;
  if (dense > 0)
    for (double share : layer ? modules_ : std::vector<double>{1.0})
      t += in_.comm.time(Collective::all_gather, Bytes(dense * share * bytes), groups_.shard);
  if (expert > 0) t += in_.comm.time(Collective::all_gather, Bytes(expert * bytes), groups_.expert_dp);
  if (fw_.zero3_gather_copies && in_.compute.memory_bound) {
    double copied = dense + expert;
    // A module's fetch of its weight alone gathers in place; a bias above the persistence
    // threshold joins its weight's fetch, and that batch is copied out.
    if (layer && prefetch_ && fw_.zero3_lone_gathers_in_place) copied = expert + dense * lone_copied_share_;
    if (copied > 0) t += in_.compute.memory_bound(Bytes(2.0 * copied * bytes), 1);
  }
  return t;
}

Seconds ShardedCoster::reduce(const StageParameters& ps, bool layer) const {
  const auto [params, expert] = sharded_parts(ps);
  if (!(params + expert > 0)) return Seconds(0);
  Seconds t;
  // Elements reduced in buckets (with the framework's passes over each) and reduced alone.
  double bucketed = params, alone = 0;
  if (params > 0) {
    if (bucket_ > 0 && fw_.zero3_large_gradients_alone) {
      // Each module's weight gradient at least a bucket's size goes alone, whole, and flushes the
      // small gradients (biases, norms) that came before it (FrameworkTraits::
      // zero3_large_gradients_alone).
      const std::vector<double> shares = layer ? modules_ : std::vector<double>{1.0};
      int large = 0;
      for (double share : shares)
        if (const double n = params * share; n >= bucket_) {
          t += in_.comm.time(Collective::reduce_scatter, Bytes(n * rb_), groups_.shard);
          alone += n;
          ++large;
        }
      bucketed = params - alone;
      if (layer && large > 0)
        t += double(large) * in_.comm.time(Collective::reduce_scatter, Bytes(layer_vectors_ / large * rb_), groups_.shard);
    }
    if (bucketed > 0)
      t += bucket_ > 0 ? (bucketed / bucket_) * in_.comm.time(Collective::reduce_scatter, Bytes(bucket_ * rb_), groups_.shard)
                       : in_.comm.time(Collective::reduce_scatter, Bytes(bucketed * rb_), groups_.shard);
    if (replicas_ > 1)
      t += outer_share_ * in_.comm.time(Collective::all_reduce, Bytes(params * rb_ / k_), groups_.replicate);
  }
  if (expert > 0) t += in_.comm.time(Collective::reduce_scatter, Bytes(expert * rb_), groups_.expert_dp);
  if (in_.compute.memory_bound) {
    if (fw_.zero3_reduce_copy_passes > 0)
      t += in_.compute.memory_bound(Bytes(2.0 * fw_.zero3_reduce_copy_passes * (bucketed + expert) * rb_),
                                    fw_.zero3_reduce_copy_passes);
    if (alone > 0) t += in_.compute.memory_bound(Bytes(2.0 * alone * rb_), 1);  // the div_
    if (fw_.fsdp1_reduce_passes && params > 0) {
      // FSDP1's cast to the reduce dtype (where it differs) and predivide, before the reduce-scatter.
      const bool cast = rb_ != gb_;
      t += in_.compute.memory_bound(Bytes(params * (2.0 * rb_ + (cast ? gb_ + rb_ : 0.0))), cast ? 2 : 1);
    }
  }
  return t;
}

const LayerCompute& ShardedCoster::layer(bool moe, int window) {
  const auto key = std::make_pair(moe, window);
  auto it = cache_.find(key);
  if (it == cache_.end()) it = cache_.emplace(key, in_.compute.layer(tokens_, attention_context(in_.e), moe, window)).first;
  return it->second;
}

void ShardedCoster::unit(std::vector<ShardedUnit>& units, Seconds& copies, const StageParameters& params, bool gathers,
                         Seconds compute, bool reduces, bool layer, double passes) const {
  const Seconds out = gathers ? copy_out(sharded(params), layer) : Seconds(0);
  const Seconds copy = out + (reduces ? copy_in(sharded(params)) : Seconds(0));
  copies += copy;
  units.push_back({gathers ? gather(params, layer) : Seconds(0), compute + copy, reduces ? reduce(params, layer) : Seconds(0),
                   in_.x.calibrated.unit_overhead * passes, out});
}

void ShardedCoster::edge_unit(ChunkUnits& u, double params, Seconds compute) const {
  const double share = edges_kept_ ? edge_share_ : 1.0;
  const Seconds copy = copy_out(k_ > 1 ? params : 0.0, false) * share;
  u.fwd_copies += copy;
  u.fwd.push_back({params > 0 ? gather({params, 0.0}, false) * share : Seconds(0), compute + copy, Seconds(0),
                   in_.x.calibrated.unit_overhead, copy});
}

ChunkUnits ShardedCoster::chunk_units(int s, int ch, double edge_params, double head_params) {
  const PlanSpec& p = p_;
  const ModelSpec& m = m_;
  ChunkUnits u;
  u.first_segment = p.chunk_segment(s, ch) == 0 && fw_.has_embedding_and_head;
  u.last_segment = p.chunk_segment(s, ch) == p.segments() - 1 && fw_.has_embedding_and_head;
  if (u.first_segment) edge_unit(u, edge_params, edges_.embedding_forward);
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
  const double reuse = ch == v_ - 1 && prefetch_ ? fw_.zero3_reuse_elements : 0.0;
  // The head's backward comes right after its forward. (On a one-stage pipeline the head is
  // the tied embedding, which edge_params holds.)
  const double tail = !u.last_segment ? 0.0 : head_params > 0 ? head_params : p.pp == 1 ? edge_params : 0.0;
  u.head_kept = u.last_segment && (edges_kept_ || !p.reshard_after_forward || reuse > 0);
  std::vector<double> chunk_layer_params, backward_passes;
  for (int i = 0; i < int(chunk.size()); ++i) {
    const int l = chunk[std::size_t(i)];
    chunk_layer_params.push_back(cost_models::layer_parameters_on_gpu(m, p, l).total());
    backward_passes.push_back(1.0 + layer_recompute_share(m, p, l, i, s, micro_batches_));
  }
  const std::vector<bool> kept = p.reshard_after_forward
                                     ? cost_models::zero3_kept_layers(chunk_layer_params, backward_passes, tail, reuse)
                                     : std::vector<bool>(chunk.size(), true);
  for (int i = 0; i < int(chunk.size()); ++i) {
    const int l = chunk[std::size_t(i)];
    const StageParameters params = cost_models::layer_parameters_on_gpu(m, p, l);
    u.chunk_params += params.dense;
    u.chunk_experts += params.expert;
    if (!kept[std::size_t(i)]) {
      u.regathered += params.dense;
      u.regathered_experts += params.expert;
    }
    // What the compute stream does between two units' gathers: the layer with its TP (as
    // overlapped), CP and EP communication, as cost_layer_chunks charges it.
    const bool moe = m.is_moe_layer(l);
    const double redo = layer_recompute_share(m, p, l, i, s, micro_batches_);
    const LayerStep ls = layer_step(in_, layer(moe, m.window_of(l)), tokens_, tp_,
                                    moe ? ep_comm_per_layer(in_, tokens_) : Seconds(0), redo, moe);
    unit(u.fwd, u.fwd_copies, params, true, ls.forward_total(), false);
    // Without prefetch nothing stays gathered (FrameworkTraits::prefetches_zero3): a recomputed
    // layer is gathered for its recompute, released after it and gathered again for its
    // backward (in the backward order: the recompute's unit first; `redo` of the micro-batches).
    if (!prefetch_ && !kept[std::size_t(i)] && redo > 0) {
      const Seconds redo_compute = ls.recompute + ls.recompute_comm + ls.recompute_ep;
      unit(u.bwd, u.bwd_copies, params, true, ls.backward_total() - redo_compute, reduces_per_microbatch_);
      u.bwd.push_back({gather(params, true) * redo, redo_compute, Seconds(0), in_.x.calibrated.unit_overhead * redo});
      u.regathered += params.dense * redo;
      u.regathered_experts += params.expert * redo;
    } else {
      unit(u.bwd, u.bwd_copies, params, !kept[std::size_t(i)], ls.backward_total(), reduces_per_microbatch_, true,
           1.0 + redo);
    }
  }
  if (u.last_segment) {
    if (!u.head_kept) u.regathered += head_params;
    edge_unit(u, head_params, edges_.head_forward);
    unit(u.bwd, u.bwd_copies, {head_params, 0.0}, !u.head_kept, edges_.head_backward, reduces_per_microbatch_, false);
  }
  std::reverse(u.bwd.begin(), u.bwd.end());
  if (u.first_segment)
    unit(u.bwd, u.bwd_copies, {edge_params, 0.0}, false, edges_.embedding_backward, reduces_per_microbatch_, false);
  return u;
}

StageParameters ShardedCoster::charge(int s, int ch, const ChunkUnits& u, double edge_params, double head_params) {
  const ShardedExposure fwd = sharded_exposure(u.fwd, contention_fwd_, prefetch_),
                        bwd = sharded_exposure(u.bwd, contention_bwd_, prefetch_, fw_.zero3_backward_host_serial);
  // Under a once-per-step gather (step_sync_) only the first of the m forwards gathers: the others'
  // host work meets the compute alone (without the gathers' copy-out), with no gather wait to hide
  // under, even where the gathering forward's waits hid all of it.
  Seconds forward_host = fwd.host;
  if (forward_share_ < 1.0 && in_.x.calibrated.unit_overhead > Seconds(0)) {
    std::vector<ShardedUnit> ungathered = u.fwd;
    for (ShardedUnit& unit : ungathered) {
      unit.gather = Seconds(0);
      unit.compute -= unit.gather_copy;
      unit.gather_copy = Seconds(0);
    }
    forward_host = fwd.host * forward_share_ + sharded_exposure(ungathered, contention_fwd_, prefetch_).host * (1.0 - forward_share_);
  }
  for (auto& chunk_slices : c_.chunk[s][ch]) {
    chunk_slices.forward_dp_comm = (fwd.comm + u.fwd_copies) * forward_share_;
    chunk_slices.backward_dp_comm = bwd.comm + u.bwd_copies;
    // The GPU waiting on the host's hooks (calibrated unit_overhead).
    chunk_slices.forward_host += forward_host;
    chunk_slices.backward_host += bwd.host;
  }
  const double head = u.last_segment ? head_params : 0.0;
  const double edge = u.first_segment ? edge_params : 0.0;
  // Per micro-batch: the forward's gathers (once per step under step_sync), the backward's
  // re-gathers (reshard_after_forward) and the reductions (per micro-batch or once).
  const double gathered_layers =
      u.chunk_params * forward_share_ + u.regathered - (u.last_segment && !u.head_kept ? head : 0.0);
  const double gathered = (edge + head) * edge_share_ + u.chunk_params * forward_share_ + u.regathered;
  const double reduced = edge + u.chunk_params + head;
  const double reductions = step_sync_ ? 1.0 : double(micro_batches_);
  c_.zero3_gather_bytes[s] += Bytes(((gathered_layers * lgb_ + (gathered - gathered_layers) * gb_) * sent_ +
                                     (u.chunk_experts * forward_share_ + u.regathered_experts) * lgb_ * sent_e_) *
                                    micro_batches_);
  c_.zero3_reduce_bytes[s] += Bytes((reduced * rb_ * sent_ + u.chunk_experts * rb_ * sent_e_) * reductions);
  if (replicas_ > 1)  // each GPU's shard through a ring all-reduce over the replicas
    c_.zero3_reduce_bytes[s] +=
        Bytes(reduced * rb_ / k_ * 2.0 * (replicas_ - 1.0) / replicas_ * reductions * outer_share_);
  return {.dense = reduced, .expert = u.chunk_experts};
}

void ShardedCoster::step_sync(int s, const StageParameters& reduced) {
  const Seconds sync = reduce(reduced, false) + copy_in(sharded(reduced));
  const double host_ranks = std::min(p_.tp, in_.e.cluster.gpus_per_node);
  Bytes nic = Bytes((reduced.dense * rb_ * sent_ + reduced.expert * rb_ * sent_e_) * host_ranks);
  if (replicas_ > 1) nic += Bytes(reduced.dense * rb_ / k_ * 2.0 * (replicas_ - 1.0) / replicas_ * host_ranks);
  c_.dp_grad_sync[std::size_t(s)] += sync;
  c_.dp_sync_tail[std::size_t(s)] += sync;
  c_.dp_grad_sync_bytes[std::size_t(s)] += nic;
}

void ShardedCoster::stage(int s) {
  const std::vector<int> layers = cost_models::stage_layers(m_, p_, s);
  double layer_params = 0;
  for (int l : layers) layer_params += cost_models::layer_parameters_on_gpu(m_, p_, l).total();
  // The embedding on the first stage (with the positions and, on a one-stage pipeline, the final
  // norm); on a later last stage, the LM head (an untied matrix or Megatron's tied copy) and the
  // final norm: what the stage holds beyond its layers.
  const double beyond_layers = cost_models::parameters_on_gpu(fw_, m_, p_, s).total() - layer_params;
  const double edge_params = s == 0 ? beyond_layers : 0.0;
  const double head_params = s > 0 && s == p_.pp - 1 ? beyond_layers : 0.0;
  StageParameters stage_reduced;  // parameters whose gradients the stage reduces once (step_sync)
  for (int ch = 0; ch < v_; ++ch) {
    const ChunkUnits u = chunk_units(s, ch, edge_params, head_params);
    const StageParameters reduced = charge(s, ch, u, edge_params, head_params);
    if (step_sync_) {
      stage_reduced.dense += reduced.dense;
      stage_reduced.expert += reduced.expert;
    }
  }
  if (step_sync_ && stage_reduced.total() > 0) step_sync(s, stage_reduced);
}

}  // namespace

void cost_sharded_parameters(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  c.zero3_gather_bytes.assign(p.pp, Bytes(0));
  c.zero3_reduce_bytes.assign(p.pp, Bytes(0));
  // Nothing sharded (no dense shard group and no expert-data-parallel group of two or more):
  // nothing to gather or reduce, but the units' host work (the calibrated unit_overhead) is
  // still priced in their chain.
  if (p.zero < 3 || (p.shard_ways() < 2 && p.expert_dp() < 2 && !(in.x.calibrated.unit_overhead > Seconds(0)))) return;
  ShardedCoster coster(in, c);
  for (int s = 0; s < p.pp; ++s) coster.stage(s);
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
      const BytesPerSecond pcie = cost_models::host_link_bandwidth(in.e.cluster, p);
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
