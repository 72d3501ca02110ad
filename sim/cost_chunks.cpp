// Costers of the per-chunk work: transformer layers, the embedding and head, activation offload.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "sim/costers.hpp"

namespace foresight::sim {

namespace {
/// Each rank's token slices: TeraPipe's, or its share of the sequence (all of it without cp).
std::vector<int> token_slices(const Experiment& e) {
  return e.plan.token_slices.empty() ? std::vector<int>{e.plan.local_tokens(e.model)} : e.plan.token_slices;
}
}  // namespace

Seconds ep_comm_per_layer(const CostInputs& in, int tokens) {
  const ModelSpec& m = in.e.model;
  const PlanSpec& p = in.e.plan;
  if (!m.moe) return Seconds(0);
  const PlanGroups g = plan_groups(p, in.e.cluster);
  // Each rank routes its own tokens (with sequence parallelism its shard of the sequence; without,
  // every TP rank holds the same tokens) and sends routed_factor() copies of each (top_k x
  // capacity_factor, dropless top_k x the busiest rank's imbalance): a dispatch and a combine
  // all-to-all over the ep group.
  const bool own = cost_models::moe_routes_own_tokens(*in.x.framework, p);
  const double shard = own && p.sequence_parallel ? double(p.tp) : 1.0;
  const double rf = m.moe->routed_factor();
  const Bytes dispatched = activation_tensor(in.x, p.micro_batch, tokens / shard, m.hidden) * rf;
  auto all_to_all = [&](Bytes bytes) { return all_to_all_collective(in, bytes, g.ep); };
  Seconds t;
  if (p.ep > 1 && p.ep_dispatcher == EpDispatcher::deepep) {
    // DeepEP's normal kernels (DeepSeek-V3 sec. 3.2.2): a token crosses the network once per
    // destination node other than its own, to the GPU on its rail there, which forwards the copies
    // over NVLink to the experts' GPUs; the two legs pipeline, the slower sets the time (DeepEP's
    // H800 figures at EP 64: 51 / 50 GB/s RDMA dispatch / combine against the NIC's ~50 GB/s, its
    // docs/legacy.md). A token's top_k experts, routed evenly over the group's n nodes, occupy
    // n (1 - (1 - 1/n)^top_k) of them on average, at most moe.max_nodes (node-limited routing).
    const CommGroup& ep = g.ep;
    const double n = ep.nodes, k = m.moe->top_k;
    double nodes = n * (1.0 - std::pow(1.0 - 1.0 / n, k));
    if (m.moe->max_nodes > 0) nodes = std::min(nodes, double(m.moe->max_nodes));
    const double remote = ep.nodes > 1 ? nodes * (n - 1.0) / n : 0.0;
    const double rows = double(p.micro_batch) * tokens / shard;
    const double r = ep.ranks_per_node;
    auto exchange = [&](double bytes_per_element) {
      const double row = m.hidden * bytes_per_element;
      const Seconds network =
          remote > 0 ? in.comm.time(Collective::send_recv, Bytes(rows * remote * row), ep) : Seconds(0);
      const Seconds nvlink = r > 1 ? in.comm.time(Collective::send_recv, Bytes(rows * rf * row * (r - 1.0) / r),
                                                  CommGroup{.ranks = 2, .ranks_per_node = 2, .nodes = 1})
                                   : Seconds(0);
      return max(network, nvlink);
    };
    // Dispatched in FP8 under FP8 training where the framework does (one fp32 scale per 128
    // elements; FrameworkTraits::deepep_fp8_dispatch), combined in 16 bits; the backward moves
    // 16-bit gradients both ways. Per direction: the mean of the two.
    const double dispatch = in.x.dtype == Dtype::fp8 && in.x.framework->deepep_fp8_dispatch ? 1.0 + 4.0 / 128.0 : 2.0;
    t += 0.5 * (exchange(dispatch) + 3.0 * exchange(2.0));
  } else if (p.ep > 1) {
    t += 2.0 * all_to_all(dispatched);
    // The copies' router probabilities in their own all-to-all (16-bit, one per copy).
    if (in.x.framework->moe_probs_all_to_all) t += all_to_all(Bytes(2.0 * p.micro_batch * tokens / shard * rf));
  }
  // Experts split over several GPUs with sequence parallelism: the rows the ETP group's experts
  // received are all-gathered over it before the experts and reduce-scattered after them
  // (Megatron-Core dispatch_postprocess / combine_preprocess); the MLP's own sequence-parallel
  // collectives are not run (layer_step counts the attention's alone).
  if (p.etp() > 1 && own) {
    const Bytes rows = dispatched * double(p.etp());
    t += in.comm.time(Collective::all_gather, rows, g.etp) + in.comm.time(Collective::reduce_scatter, rows, g.etp);
  }
  return t;
}

double ep_overlap_paired_share(const PlanSpec& p, int stage, int micro_batches) {
  if (p.schedule == Schedule::dualpipe) {
    // The share of the stage's forwards its schedule runs paired with a backward.
    const ScheduleShape shape{Schedule::dualpipe, p.pp, micro_batches, 2, 1};
    int forwards = 0, paired = 0;
    for (const ScheduledOp& op : stage_schedule(shape, stage))
      if (op.pass == Pass::forward) {
        ++forwards;
        paired += op.paired;
      }
    return forwards > 0 ? double(paired) / forwards : 0.0;
  }
  const double passes = double(micro_batches) * (p.schedule == Schedule::interleaved ? p.virtual_stages : 1);
  if (passes <= 0) return 0.0;
  const double alone = p.pp == 1 ? 1.0 : std::min(passes, double((p.pp - stage - 1) * 2 + (p.virtual_stages - 1) * p.pp + 1));
  return std::max(0.0, passes - alone) / passes;
}

EpExposure ep_overlap_exposure(const CostInputs& in, const LayerCompute& lc, Seconds ep, double paired_share) {
  if (ep <= Seconds(0)) return {};
  // One exchange of each kind: dispatch (with the probabilities) and combine, half of a direction.
  const double x = ep.value() / 2;
  const double attn_f = (lc.forward - lc.mlp_forward).value(), mlp_f = lc.mlp_forward.value();
  // The experts' backward: data gradients (with the activation and the permutes), then the delayed
  // weight gradients, half of the FC1 and FC2 GEMMs' backward.
  const double wgrad = 0.5 * (lc.gemm_backward[2] + lc.gemm_backward[3]).value();
  const double dgrad = std::max(0.0, lc.mlp_backward.value() - wgrad);
  const double attn_b = (lc.backward - lc.mlp_backward + lc.recompute).value();
  // The pair, stream by stream (compute C, communication M), each step after what it needs. While
  // an exchange runs beside a compute step, the step advances at 1 - c of its speed (the SMs the
  // exchange's kernels hold, overlap_contention: c lost per second of overlap); each compute step
  // here starts beside the exchange it overlaps, which runs until `busy_until`. A slowed step costs
  // the pair time only where the compute stream is the longer one: when the pair waits on its
  // exchanges, its GEMMs' slowdown fills the waits.
  const double c = std::clamp(overlap_contention(in, 0.5 * (gemm_share(lc, false) + gemm_share(lc, true))), 0.0, 0.9);
  auto run = [c](double start, double work, double busy_until) {
    const double window = std::max(0.0, busy_until - start), rate = 1.0 - c;
    return work <= window * rate ? start + work / rate : start + window + (work - window * rate);
  };
  const double combine_b = x;                                    // M: under the forward's attention
  const double attn_f_end = run(0.0, attn_f, combine_b);         // C
  const double dispatch_f = std::max(attn_f_end, combine_b) + x;  // M: the forward's permuted rows
  const double dgrad_end = run(std::max(attn_f_end, combine_b), dgrad, dispatch_f);  // C: needs the combined gradient
  const double dispatch_b = std::max(dispatch_f, dgrad_end) + x;  // M: the data gradient's rows
  const double wgrad_end = run(dgrad_end, wgrad, dispatch_b);      // C: beside the dispatches' tail
  const double mlp_f_start = std::max(wgrad_end, dispatch_f);      // C: needs the dispatched rows
  const double mlp_f_end = run(mlp_f_start, mlp_f, dispatch_b);
  const double combine_f = std::max(dispatch_b, mlp_f_end) + x;    // M
  const double attn_b_end = run(std::max(mlp_f_end, dispatch_b), attn_b, combine_f);  // C
  const double compute = attn_f + dgrad + wgrad + mlp_f + attn_b;
  const double paired = 0.5 * (std::max(attn_b_end, combine_f) - compute);
  const double s = std::clamp(paired_share, 0.0, 1.0);
  const Seconds each((1.0 - s) * ep.value() + s * paired);
  return {each, each};
}

LayerStep layer_step(const CostInputs& in, const LayerCompute& lc, int tokens, Seconds tp_blocking, Seconds ep,
                     double redo, bool moe_layer) {
  const PlanSpec& p = in.e.plan;
  LayerStep s;
  s.forward = lc.forward;
  s.backward = lc.backward;
  // An MoE layer under sequence parallelism runs the tensor-parallel collectives around its
  // attention only: the experts' tokens travel in ep_comm_per_layer's collectives. Its shared
  // experts are tensor-parallel linears of their own (Megatron-Core SharedExpertMLP: TE column- and
  // row-parallel layers), whose all-gather and reduce-scatter block the layer as a dense MLP's do,
  // unless plan.moe_shared_expert_overlap puts them on their own stream beside the dispatcher's
  // all-to-alls (shared_experts.py pre_forward_comm / post_forward_comm).
  const bool shared_collectives =
      in.e.model.moe && in.e.model.moe->shared_experts > 0 && !p.moe_shared_expert_overlap;
  const bool attention_only = moe_layer && p.sequence_parallel && p.tp > 1 && !in.e.model.parallel_block &&
                              cost_models::moe_routes_own_tokens(*in.x.framework, p) && !shared_collectives;
  if (attention_only) tp_blocking = 0.5 * tp_blocking;
  // Full recompute re-runs the forward of the layers it recomputes (block: the first
  // plan.recompute_layers of a chunk; micro-batch level: the others for some micro-batches), with
  // its TP, CP and EP communication; selective, the attention core (what compute.layer returned).
  if (p.recompute != Recompute::full) s.recompute = lc.recompute;
  else if (redo > 0) s.recompute = lc.recompute * redo;
  s.forward_tp = s.backward_tp = tp_blocking;
  // The forward's all-gathers, which a per-op selective recompute re-runs: half of the
  // collectives, unless they carry FP8 (then the forward is what differs from tp_blocking).
  Seconds forward_gathers = 0.5 * tp_blocking;
  if (p.sequence_parallel && p.tp > 1 && tp_gather_scale(in, true) != tp_gather_scale(in, false)) {
    const TpGathersScatters fwd = tp_gathers_scatters(in, tokens, true);
    forward_gathers = fwd.gathers;
    if (!p.tp_overlap) s.forward_tp = fwd.total();
  }
  if (p.tp_overlap && p.tp > 1) {
    s.forward_tp = tp_comm_overlapped(in, tokens, lc.gemm_forward, false, attention_only);
    s.backward_tp = tp_comm_overlapped(in, tokens, lc.gemm_backward, true, attention_only);
  }
  if (p.cp > 1) {
    const CpLayerComm cpc = cp_comm_per_layer(in, lc.attention_forward, lc.attention_backward);
    s.forward_cp = cpc.forward;
    s.backward_cp = cpc.backward;
    if (redo > 0) s.backward_cp += cpc.forward * redo;  // the recomputed forward
    // Selective recompute re-runs the core attention, inside which every context-parallel
    // exchange runs (Megatron-Core checkpoints TE's DotProductAttention whole, its ring's or
    // all-gather's transfers included; Megatron-DeepSpeed its DistributedAttention): what of the
    // forward's exchange was exposed is exposed again.
    else if (p.recompute == Recompute::selective) s.backward_cp += cpc.forward;
  }
  if (redo > 0) {
    s.recompute_comm = s.forward_tp * redo;
    s.recompute_ep = ep * redo;
  }
  // Per-op selective checkpointing saves reduce-scatter outputs but not all-gathers (torchtitan's
  // _save_list: SDPA, every other mm, reduce_scatter_tensor): the re-run matmuls need their
  // gathered inputs, so the forward's all-gathers, half its TP collectives, run again.
  // Without sequence parallelism the collectives are all-reduces, none saved: all of them re-run.
  if (p.recompute == Recompute::selective_op && p.tp > 1)
    s.recompute_comm = p.sequence_parallel ? (p.tp_overlap ? 0.5 * s.forward_tp : forward_gathers) : s.forward_tp;
  // A checkpointed submodule (plan.recompute_modules mlp, moe) re-runs its forward's collectives:
  // a dense MLP its tensor-parallel pair, half of the layer's (the all-gather before FC1 and the
  // reduce-scatter after FC2, or the all-reduce); an MoE block its dispatch and combine, and its
  // tensor-parallel pair unless its tokens travel in the expert-parallel collectives alone.
  if (p.recompute != Recompute::full) {
    const RecomputeModules& mods = p.recompute_modules;
    if (mods.mlp && !moe_layer) s.recompute_comm += 0.5 * s.forward_tp;
    if (mods.moe && moe_layer) {
      s.recompute_ep += ep;
      if (!attention_only) s.recompute_comm += 0.5 * s.forward_tp;
    }
  }
  // Batch-first re-layout copies around the sequence-parallel collectives (blocking or async TP):
  // forward, backward (the backward of an all-gather is a reduce-scatter and vice versa) and, like
  // the collectives, in a recomputed forward (per-op selective: the all-gathers' copies).
  const TpGathersScatters relayout = tp_relayout_per_layer(in, tokens, true);
  if (relayout.total() > Seconds(0)) {
    s.forward += relayout.total();
    s.backward += tp_relayout_per_layer(in, tokens, false).total();
    if (p.recompute == Recompute::selective_op) s.recompute += relayout.gathers;
    else if (redo > 0) s.recompute += relayout.total() * redo;
  }
  // PyTorch's SDPA context parallelism (FrameworkTraits::cp_torch_sdpa) merges the steps' blocks
  // in eager fp32 (convert_to_f32) on the compute stream.
  if (p.cp > 1 && in.x.framework->cp_torch_sdpa && in.compute.memory_bound) {
    const TorchCpMerges merges = torch_cp_merges(in, tokens);
    s.forward += merges.forward;
    s.backward += merges.backward;
    if (redo > 0) s.recompute += merges.forward * redo;
  }
  s.forward_ep = s.backward_ep = ep;
  return s;
}

TorchCpMerges torch_cp_merges(const CostInputs& in, int tokens) {
  const PlanSpec& p = in.e.plan;
  const ModelSpec& m = in.e.model;
  if (p.cp <= 1 || !in.compute.memory_bound) return {};
  // Elements of the attention output (b, heads / tp, tokens, head dim) and of K or V as SDPA sees
  // them (repeat_kv: as many heads as the queries); torch/distributed/tensor/experimental/
  // _attention.py, bytes per element of each eager op:
  //  forward, per step after the first (_SDPAMerger): the block output cast to fp32 (2 + 4),
  //   out - sigmoid(lse diff) * (out - block_out) as three fp32 binary ops (3 x 12), and on the
  //   half of the steps that update a half (_partial_update) a torch.cat of the whole (8 / 2);
  //   once, the result cast back (4 + 2).
  //  backward, per step: grad_query += the block's 16-bit gradient (4 + 2 + 4) and its partial
  //   torch.cat (8 / 2); per K and V: the fp32 accumulation (10), its partial cat (8 / 2) and the
  //   torch.cat into the ring buffer (8); the 16-bit K/V torch.cat for the rotater (4 per pair).
  const double q = double(p.micro_batch) * tokens * double(m.heads) / p.tp * m.head_dim();
  const double steps = p.cp;
  const double fwd_bytes = (steps - 1.0) * (6.0 + 36.0 + 4.0) * q + 6.0 * q;
  const double bwd_bytes = steps * ((10.0 + 4.0) * q + 2.0 * (10.0 + 4.0 + 8.0) * q + 4.0 * q);
  const int fwd_launches = int(steps - 1) * 7 + 1, bwd_launches = int(steps) * 10;
  return {in.compute.memory_bound(Bytes(fwd_bytes), fwd_launches),
          in.compute.memory_bound(Bytes(bwd_bytes), bwd_launches)};
}

namespace {
/// The gradient-accumulation passes of a chunk: the share of a step's micro-batches that pay one
/// and the share of the chunk's parameters each pass covers.
struct AccumulationPasses {
  double paid = 1.0;
  double share = 1.0;
};

AccumulationPasses accumulation_passes(const CostInputs& in, int micro_batches) {
  // Weight gradients of every micro-batch (or slice) are added into the gradient buffer, a pass
  // over HBM per parameter; one kernel per parameter tensor (12 per transformer layer: 4 weights,
  // 4 biases, 2 layernorms' two each). Where gradients are freed between steps the first
  // micro-batch creates them instead: (m - 1) / m of the passes remain.
  // Under ZeRO-3 the gradients are reduce-scattered every micro-batch and added into the rank's
  // shard only (FSDP1 _accumulate_sharded_grad, FSDP2's sharded grad, DeepSpeed stage 3's
  // partition copy_/add_), which the first micro-batch creates: 1/k of the parameters, (m - 1) / m
  // of the passes. Pipelines that reduce once per step keep the unsharded gradients
  // (FrameworkTraits::fsdp_pipeline_step_sync) and add into them as without ZeRO-3.
  const PlanSpec& p = in.e.plan;
  const bool sharded = p.zero >= 3 && !(in.x.framework->fsdp_pipeline_step_sync && p.pp > 1);
  AccumulationPasses a;
  if (in.x.bytes.first_accumulation_free || sharded) a.paid = double(micro_batches - 1) / micro_batches;
  if (sharded) a.share = 1.0 / std::max(1, p.shard_ways());
  return a;
}

/// One layer's step added into its chunk's costs.
void add_layer_step(ChunkCosts& cc, const LayerCompute& lc, const LayerStep& ls) {
  cc.forward += ls.forward;
  cc.backward += ls.backward;
  for (const Seconds g : lc.gemm_backward) cc.weight_grad += 0.5 * g;
  cc.recompute += ls.recompute;
  cc.forward_cp_comm += ls.forward_cp;
  cc.backward_cp_comm += ls.backward_cp;
  cc.forward_tp_comm += ls.forward_tp;
  cc.backward_tp_comm += ls.backward_tp;
  cc.recompute_tp_comm += ls.recompute_comm;
  cc.recompute_ep_comm += ls.recompute_ep;
  cc.forward_ep_comm += ls.forward_ep;
  cc.backward_ep_comm += ls.backward_ep;
}

/// What a chunk pays once per micro-batch (on its first slice): calibrated host time per
/// micro-batch and stage, split over the stage's v chunks and between forward and backward; and
/// under Transformer Engine's delayed FP8 scaling, each chunk's amax all-reduce over the stage's
/// ranks (FrameworkTraits::fp8_amax_reduction).
void charge_micro_batch(const CostInputs& in, ChunkCosts& cc, int v, int layers, const CommGroup* amax_group) {
  cc.forward_host += in.x.calibrated.slot_overhead / (2.0 * v);
  cc.backward_host += in.x.calibrated.slot_overhead / (2.0 * v);
  // A handful of fp32 amaxes per GEMM module (input, weight and output forward, 12 bytes; output
  // and input gradients backward, 8), four modules a layer; latency-bound.
  if (amax_group) {
    cc.forward_amax = in.comm.time(Collective::all_reduce, Bytes(4 * 12.0 * layers), *amax_group);
    cc.backward_amax = in.comm.time(Collective::all_reduce, Bytes(4 * 8.0 * layers), *amax_group);
  }
}
}  // namespace

void cost_layer_chunks(const CostInputs& in, WorkloadCosts& c) {
  const ModelSpec& m = in.e.model;
  const PlanSpec& p = in.e.plan;
  const int v = c.shape.virtual_stages;
  const std::vector<int> slices = token_slices(in.e);
  const int n_slices = int(slices.size());
  c.chunk.assign(p.pp, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(n_slices)));

  // Every layer of a kind costs the same: compute each (tokens, context, moe, window) once.
  std::map<std::tuple<int, int, bool, int>, LayerCompute> cache;
  auto layer_compute = [&](int tokens, int context, bool moe, int window) {
    const auto key = std::make_tuple(tokens, context, moe, window);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, in.compute.layer(tokens, context, moe, window)).first;
    return it->second;
  };
  const int local = p.local_tokens(m);
  const Seconds tp_full = tp_comm_per_layer(in, local);
  const int micro_batches = p.micro_batches(in.e.training);
  const AccumulationPasses passes = accumulation_passes(in, micro_batches);
  const bool ep_paired = p.ep_overlap || p.schedule == Schedule::dualpipe;
  const bool amax_reduced = in.x.framework->fp8_amax_reduction && in.x.dtype == Dtype::fp8 &&
                            in.x.fp8_scaling == Fp8Scaling::delayed;
  const CommGroup amax_group = amax_reduced ? plan_groups(p, in.e.cluster).stage : CommGroup{};
  for (int s = 0; s < p.pp; ++s) {
    const double paired_share = ep_paired && m.moe ? ep_overlap_paired_share(p, s, micro_batches) : 0.0;
    const int stage_layer_count = int(cost_models::stage_layers(m, p, s).size());
    const double stage_params = cost_models::parameters_on_gpu(*in.x.framework, m, p, s).total();
    for (int ch = 0; ch < v; ++ch) {
      const std::vector<int> layers = cost_models::chunk_layers(m, p, s, ch);
      const int per_chunk = int(layers.size());
      // The stage's parameters (its embedding or head included) shared by the chunks' layers.
      const double chunk_params = stage_params * per_chunk / std::max(1, stage_layer_count);
      const Seconds accumulate =
          in.compute.memory_bound
              ? in.compute.memory_bound(Bytes(chunk_params * passes.share * in.x.bytes.accumulate), 12 * per_chunk) *
                    passes.paid
              : Seconds(0);
      int context = 0;
      for (int k = 0; k < n_slices; ++k) {
        const int tokens = slices[k];
        context += tokens;
        if (p.cp > 1) context = attention_context(in.e);
        ChunkCosts& cc = c.chunk[s][ch][k];
        for (int i = 0; i < per_chunk; ++i) {
          const int l = layers[std::size_t(i)];
          const bool moe = m.is_moe_layer(l);
          const LayerCompute lc = layer_compute(tokens, context, moe, m.window_of(l));
          const Seconds tp = tokens == local ? tp_full : tp_comm_per_layer(in, tokens);
          LayerStep ls = layer_step(in, lc, tokens, tp, moe ? ep_comm_per_layer(in, tokens) : Seconds(0),
                                    layer_recompute_share(m, p, l, i, s, micro_batches), moe);
          // Megatron-Core's combined 1F1B and DualPipe's paired chunks hide a micro-batch's
          // all-to-alls under another's compute.
          if (moe && ep_paired) {
            const EpExposure x = ep_overlap_exposure(in, lc, ls.forward_ep, paired_share);
            ls.forward_ep = x.forward;
            ls.backward_ep = x.backward;
          }
          add_layer_step(cc, lc, ls);
        }
        cc.backward += accumulate;
        cc.weight_grad += accumulate;
        if (k == 0) charge_micro_batch(in, cc, v, per_chunk, amax_reduced ? &amax_group : nullptr);
      }
    }
  }
}

void cost_edges(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const FrameworkTraits& fw = *in.x.framework;
  const int v = c.shape.virtual_stages;
  const std::vector<int> slices = token_slices(in.e);
  const CommGroup tp = plan_groups(p, in.e.cluster).tp;
  const bool regathers = fw.regathers_output_for_backward && p.pp > 1 && p.tp > 1 && !p.sequence_parallel;
  for (int s = 0; s < p.pp; ++s)
    for (int ch = 0; ch < v; ++ch)
      for (int k = 0; k < int(slices.size()); ++k) {
        ChunkCosts& cc = c.chunk[s][ch][k];
        const Bytes act = activation_tensor(in.x, p.micro_batch, slices[k], in.e.model.hidden);
        const bool first_segment = p.chunk_segment(s, ch) == 0;
        const bool last_segment = p.chunk_segment(s, ch) == p.segments() - 1;
        if (regathers && !last_segment) cc.backward_tp_comm += tp_collective(in, Collective::all_gather, act, tp);
        if (!fw.has_embedding_and_head || !(first_segment || last_segment)) continue;
        const EdgeCompute ec = in.compute.edges(slices[k]);
        if (first_segment) {
          cc.forward += ec.embedding_forward;
          cc.backward += ec.embedding_backward;
          // Vocab-parallel embedding: an all-reduce of its output (Megatron VocabParallelEmbedding).
          if (p.tp > 1) cc.forward_tp_comm += tp_collective(in, Collective::all_reduce, act, tp);
        }
        if (last_segment) {
          cc.forward += ec.head_forward;
          cc.backward += ec.head_backward;
          if (p.defer_embedding_wgrad) {
            // Megatron-Core's deferral (core_r0.8.0 tensor_parallel/layers.py, schedules.py
            // finish_embedding_wgrad_compute): the first wgrad_deferral_limit micro-batches (0: all)
            // skip the head's weight-gradient GEMM in their backward; the last rank runs them after
            // its cooldown, before the gradients are finalized. Per micro-batch the chunk's backward
            // loses the deferred share. Under sequence parallelism the drain gathers each kept input
            // again over TP, the next one's gather beside the current GEMM: the first is exposed.
            const int m = p.micro_batches(in.e.training);
            const int deferred = cost_models::deferred_head_wgrad_micro_batches(p, m);
            cc.backward -= ec.head_weight_grad * (double(deferred) / m);
            if (int(c.deferred_wgrad.size()) < p.pp) c.deferred_wgrad.resize(std::size_t(p.pp));
            Seconds drain = ec.head_weight_grad * double(deferred);
            if (p.sequence_parallel && p.tp > 1 && k == 0) drain += tp_collective(in, Collective::all_gather, act, tp);
            c.deferred_wgrad[std::size_t(s)] += drain;
          }
          // Column-parallel LM head: its input gradient is all-reduced in the backward.
          if (p.tp > 1) cc.backward_tp_comm += tp_collective(in, Collective::all_reduce, act, tp);
          // The MTP modules beside their layers (cost_layer_chunks prices those): under TP each
          // looks up embeddings (an all-reduce forward), gathers its column-parallel projection's
          // output (Megatron-Core's _concat_embeddings: eh_proj with gather_output off, then an
          // all-gather), and backward reduces the projection's 2h-wide input gradient (reduce-
          // scattered under sequence parallelism, all-reduced without) and the head's input
          // gradient (all-reduced, as the main head's).
          const double mtp = in.e.model.mtp_layers;
          if (mtp > 0) {
            cc.forward += mtp * ec.mtp_forward;
            cc.backward += mtp * ec.mtp_backward;
            if (p.tp > 1) {
              cc.forward_tp_comm += mtp * (tp_collective(in, Collective::all_reduce, act, tp) +
                                           tp_collective(in, Collective::all_gather, act, tp));
              const Collective input_grad = p.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce;
              cc.backward_tp_comm += mtp * (tp_collective(in, Collective::all_reduce, act, tp) +
                                            tp_collective(in, input_grad, act * 2.0, tp));
            }
          }
        }
      }
}

Seconds windowed_offload_wait(int layers, int offloaded, Seconds transfer, Seconds layer_time) {
  if (offloaded <= 0 || layers <= 0) return Seconds(0);
  offloaded = std::min(offloaded, layers);
  // Transformer Engine's windows (cpu_offload.py AsyncDoubleBufferGroupOffloadHandler): layers //
  // offloaded layers per window, the remainder one more in each of the first windows. Group i's
  // copy runs beside the layers of the window after the one that started it and is waited for at
  // that window's end; group 0's starts at layer 0's end, one layer into its window.
  const int base = layers / offloaded, extra = layers % offloaded;
  Seconds wait;
  for (int i = 0; i < offloaded; ++i) {
    const int window = base + (i < extra ? 1 : 0) - (i == 0 ? 1 : 0);
    wait += max(Seconds(0), transfer - layer_time * double(window));
  }
  return wait;
}

void cost_activation_offload(const CostInputs& in, WorkloadCosts& c) {
  const ModelSpec& m = in.e.model;
  const PlanSpec& p = in.e.plan;
  if (!(p.offload.activations > 0)) return;
  const int v = c.shape.virtual_stages;
  const std::vector<int> slices = token_slices(in.e);
  const BytesPerSecond pcie = cost_models::host_link_bandwidth(in.e.cluster, p);
  for (int s = 0; s < p.pp; ++s) {
    const int layers_in_chunk = int(cost_models::stage_layers(m, p, s).size()) / v;
    if (in.x.framework->activation_offload_windows) {
      // The first round(f x layers) layers of each chunk go out one window at a time (runs before
      // cost_edges: the chunk's times are its layers' alone, taken as equal).
      const double n = std::max(1, layers_in_chunk);
      const Seconds copy = cost_models::layer_activation_bytes_per_unit(in.x, m, p, s) / n / pcie;
      const int offloaded = int(std::lround(p.offload.activations * layers_in_chunk));
      for (int ch = 0; ch < v; ++ch)
        for (ChunkCosts& cc : c.chunk[s][ch]) {
          const Seconds fwd = cc.forward_stream() / n, bwd = cc.backward_stream() / n;
          cc.forward_offload_wait = windowed_offload_wait(layers_in_chunk, offloaded, copy, fwd);
          cc.backward_offload_wait = windowed_offload_wait(layers_in_chunk, offloaded, copy, bwd);
        }
      continue;
    }
    for (int ch = 0; ch < v; ++ch)
      for (int k = 0; k < int(slices.size()); ++k) {
        // One slice: the chunk's own layers (MoE layers and, under block recompute, the layers that
        // keep everything store more than a dense recomputed one); TeraPipe slices: per slice.
        const Bytes stored = slices.size() == 1
                                 ? cost_models::layer_activation_bytes_per_unit(in.x, m, p, s)
                                 : cost_models::activation_bytes_per_layer(in.x, m, p, p.micro_batch, slices[k]) *
                                       double(layers_in_chunk);
        const Bytes moved = stored * p.offload.activations;
        c.chunk[s][ch][k].offload_out = moved / pcie;
        c.chunk[s][ch][k].offload_in = moved / pcie;
      }
  }
}

}  // namespace foresight::sim
