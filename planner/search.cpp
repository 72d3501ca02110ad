#include "planner/search.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <mutex>
#include <thread>

#include "core/framework.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "planner/terapipe_slicing.hpp"
#include "sim/costing.hpp"
#include "sim/limits.hpp"

namespace foresight::planner {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool fits(const cost_models::ExecutionModel& x, const SearchRequest& r, const PlanSpec& p, Bytes* need) {
  const auto mem = cost_models::memory_per_stage(x, r.model, r.training, p);
  const Bytes worst = mem[cost_models::most_loaded_stage(mem)].total();
  if (need) *need = worst;
  if (worst > r.memory_limit()) return false;
  // What it offloads must fit in the nodes' host memory too, where the cluster states it (as
  // sim::Prediction::fits).
  if (!(r.cluster.host.memory > Bytes(0))) return true;
  return cost_models::offload_host_memory_per_node(x, r.model, r.training, p, r.cluster) <= r.cluster.host.memory;
}

/// The plan with every module recompute the framework and the model allow turned on (the norms;
/// MLA's up-projections and an MoE layer's activation where the model has them); false where the
/// framework has none, the plan recomputes whole layers already or has some set.
bool with_recompute_modules(const FrameworkTraits& fw, const ModelSpec& m, PlanSpec& p) {
  if (!fw.recompute_modules || p.recompute == Recompute::full || p.recompute_modules.any()) return false;
  p.recompute_modules.layernorm = true;
  p.recompute_modules.mla_up_proj = m.mla.has_value();
  p.recompute_modules.moe_act = m.moe.has_value();
  return true;
}

/// Beyond the cheap modules: also checkpoint the FFN submodules (plan.recompute_modules mlp for
/// the dense layers, moe for the MoE layers unless their all-to-alls overlap the compute, which
/// Megatron-Core refuses), each keeping only its input. False where that adds nothing.
bool with_checkpointed_ffn(const ModelSpec& m, PlanSpec& p) {
  const bool dense = m.moe_layers() < m.layers;
  const bool moe = m.moe.has_value() && !p.ep_overlap;
  if ((!dense || p.recompute_modules.mlp) && (!moe || p.recompute_modules.moe)) return false;
  p.recompute_modules.mlp = dense;
  p.recompute_modules.moe = moe;
  return true;
}

/// Block recompute (plan.recompute_layers): for a full-recompute plan that fits without offload,
/// the fewest recomputed layers per stage (chunk) that still fit, found by bisection (memory falls
/// and recompute time grows with the count, so this is the fastest block variant that fits). False
/// when the framework has no block method, the stages hold one layer, none below all fits, or the
/// plan fits without recompute at all.
bool fewest_recomputed_layers_that_fit(const cost_models::ExecutionModel& x, const SearchRequest& r, PlanSpec& p) {
  if (p.recompute != Recompute::full || p.recompute_layers > 0 || !x.framework->partial_recompute) return false;
  if (p.offload.optimizer || p.offload.activations > 0) return false;
  // Where the plan fits without any recompute, that plan (enumerated too) is faster than every
  // block variant: only plans that need recompute to fit get one.
  PlanSpec none = p;
  none.recompute = Recompute::none;
  if (fits(x, r, none, nullptr)) return false;
  // The largest model chunk's layers (chunk_layer_counts: one entry per segment).
  const std::vector<int> counts = chunk_layer_counts(r.model, p);
  int lo = 1, hi = *std::max_element(counts.begin(), counts.end()) - 1;
  if (hi < 1) return false;
  p.recompute_layers = hi;
  if (!fits(x, r, p, nullptr)) return false;
  while (lo < hi) {
    p.recompute_layers = (lo + hi) / 2;
    if (fits(x, r, p, nullptr)) hi = p.recompute_layers;
    else lo = p.recompute_layers + 1;
  }
  p.recompute_layers = hi;
  return true;
}

/// Micro-batch-level recompute (plan.partial_recompute_microbatches): for a full-recompute 1F1B
/// plan that fits but whose no-recompute twin does not, a block of one layer for the partial
/// micro-batches and the most partial micro-batches per window that still fit (bisection on
/// memory, which grows with the count); counts of a whole window or more are the block variant's.
/// False when the framework does not vary recompute by micro-batch or not even one fits.
bool most_partial_microbatches_that_fit(const cost_models::ExecutionModel& x, const SearchRequest& r, PlanSpec& p) {
  if (p.recompute != Recompute::full || p.recompute_layers > 0 || p.partial_recompute_microbatches > 0) return false;
  if (!x.framework->microbatch_recompute || p.pp < 2 || p.schedule != Schedule::one_f_one_b) return false;
  if (p.offload.optimizer || p.offload.activations > 0) return false;
  PlanSpec none = p;
  none.recompute = Recompute::none;
  if (fits(x, r, none, nullptr)) return false;
  const int window = std::min(p.pp - 1, p.micro_batches(r.training)) + 1;  // stage 0's, the widest
  int lo = 1, hi = window - 1;
  if (hi < 1) return false;
  p.recompute_layers = 1;
  p.partial_recompute_microbatches = lo;
  if (!fits(x, r, p, nullptr)) return false;
  while (lo < hi) {
    p.partial_recompute_microbatches = (lo + hi + 1) / 2;
    if (fits(x, r, p, nullptr)) lo = p.partial_recompute_microbatches;
    else hi = p.partial_recompute_microbatches - 1;
  }
  p.partial_recompute_microbatches = lo;
  return true;
}

/// Keeps in `into` the closer of its closest miss and `from`'s (ties: the lower plan index).
void merge_closest(EvaluatedShare& into, const EvaluatedShare& from) {
  if (!from.closest) return;
  const bool better = !into.closest || from.closest_need < into.closest_need ||
                      (from.closest_need == into.closest_need && from.closest_index < into.closest_index);
  if (!better) return;
  into.closest = from.closest;
  into.closest_need = from.closest_need;
  into.closest_index = from.closest_index;
}

}  // namespace

Experiment experiment_for(const SearchRequest& r, const PlanSpec& plan) {
  Experiment e;
  e.name = r.model.name + "-on-" + r.cluster.name;
  e.file = "<planner>";
  e.model = r.model;
  e.cluster = r.cluster;
  e.training = r.training;
  e.plan = plan;
  e.gpus = r.gpus;
  return e;
}

std::vector<PlanSpec> enumerate_plans(const SearchRequest& r) {
  std::vector<PlanSpec> out;
  const ModelSpec& m = r.model;
  const FrameworkTraits& fw = framework_traits(r.framework);
  // Context parallelism where the framework runs it, while each rank keeps at least 2048 tokens
  // of a sequence (below that its K/V exchange outweighs the attention it splits).
  // The exchange: the ring where the framework runs it (overlapped with attention blocks), and
  // the all-to-alls where it runs them (whole-sequence attention over a head group; check_plan
  // drops the layouts whose heads do not split over cp).
  std::vector<std::pair<int, CpComm>> cps{{1, CpComm::ring}};
  if (fw.context_parallel)
    for (int cp = 2; cp <= 32 && m.seq_len / cp >= 2048; cp *= 2)
      if (m.seq_len % (2 * cp) == 0)
        for (CpComm c : {CpComm::ring, CpComm::all_to_all})
          if (fw.cp_comms[int(c)]) cps.push_back({cp, c});
  for (int tp = 1; tp <= std::min(r.gpus, r.cluster.gpus_per_node); tp *= 2) {
    if (r.gpus % tp != 0) continue;
    for (const auto& cp_and_comm : cps) {
    const int cp = cp_and_comm.first;
    const CpComm cp_comm = cp_and_comm.second;
    // An MoE model with context parallelism needs its experts folded over tp x cp x dp
    // (Megatron-Core; check_plan refuses it elsewhere).
    if (cp > 1 && m.moe && !fw.expert_folding) continue;
    if ((r.gpus / tp) % cp != 0) continue;
    // Pipeline depths: divisors of the layer count (even splits), and the powers of two that do
    // not divide it, split as Llama 3 split 126 layers over 16 stages: every stage ceil(L / pp)
    // layers but the first and the last, which give up the surplus (Megatron-LM's
    // --decoder-first/last-pipeline-num-layers); or, where the framework splits by DeepSpeed's
    // partition_method, every depth up to L / 2 that divides the GPUs, split as Megatron-DeepSpeed
    // splits (type:transformer; BLOOM-176B ran 70 layers on 12 stages).
    struct Split {
      int pp = 1;
      std::pair<int, int> first_last{0, 0};
      bool deepspeed = false;
    };
    std::vector<Split> pps;
    for (int pp : divisors(m.layers)) pps.push_back({pp, {0, 0}, false});
    if (fw.partition_method)
      for (int pp = 2; pp <= m.layers / 2; ++pp)
        if (m.layers % pp != 0 && r.gpus % pp == 0) pps.push_back({pp, {0, 0}, true});
    for (int pp = 4; pp <= m.layers / 2 && !fw.partition_method; pp *= 2) {
      if (m.layers % pp == 0) continue;
      const int per = (m.layers + pp - 1) / pp, surplus = per * pp - m.layers;
      const int first = per - surplus / 2, last = per - (surplus - surplus / 2);
      if (first >= 1 && last >= 1) pps.push_back({pp, {first, last}, false});
    }
    for (const auto& [pp, split, deepspeed_split] : pps) {
      if ((r.gpus / tp / cp) % pp != 0) continue;
      const int dp = r.gpus / tp / cp / pp;
      // Expert layouts (ep, expert_tp): ep out of dp with the experts split over tp, and where the
      // framework folds (Megatron-Core) also unsplit experts with ep over tp x cp x dp.
      std::vector<std::pair<int, int>> eps{{1, 0}};
      if (m.moe) {
        eps.clear();
        for (int ep : divisors(m.moe->experts)) {
          if (dp % ep == 0) eps.push_back({ep, 0});
          // Folded: experts unsplit (expert_tp 1) over tp x cp x dp; with tp 1 that differs from
          // the first layout only where cp > 1 lets ep exceed what divides dp.
          if (fw.expert_folding && (tp > 1 || (cp > 1 && dp % ep != 0)) && (tp * cp * dp) % ep == 0)
            eps.push_back({ep, 1});
        }
      }
      // ZeRO: none, the distributed optimizer, and ZeRO-3 (FSDP) sharded over all of dp x cp or,
      // when that spans nodes, over one node's ranks and replicated across nodes (HSDP).
      const int grad_ranks = dp * cp;
      const int node_shard = std::max(1, r.cluster.gpus_per_node / tp);
      std::vector<std::pair<int, int>> zeros{{0, 0}, {1, 0}, {3, 0}};
      if (!m.moe && grad_ranks > node_shard && grad_ranks % node_shard == 0 && node_shard > 1)
        zeros.push_back({3, node_shard});
      for (int mb : r.micro_batches) {
        if (r.training.global_batch % (dp * mb) != 0) continue;
        std::vector<std::pair<Schedule, int>> schedules{{Schedule::one_f_one_b, 1}};
        if (pp > 1) {
          schedules.push_back({Schedule::gpipe, 1});
          if (r.terapipe && cp == 1) schedules.push_back({Schedule::terapipe, 1});
          // Model chunks per stage: the request's list, or every split of an even stage into
          // equal chunks (NVIDIA's recipes run 5, 7 and 12 as readily as 2, 4 and 8).
          std::vector<int> chunks = r.virtual_stages;
          if (chunks.empty() && split.first == 0 && !deepspeed_split && m.layers % pp == 0)
            for (int v : divisors(m.layers / pp))
              if (v >= 2) chunks.push_back(v);
          for (int v : chunks) schedules.push_back({Schedule::interleaved, v});
          // Zero-bubble and DualPipe where the framework runs them (check_plan drops the shapes
          // DualPipe refuses: odd pp, fewer than 2 pp micro-batches).
          if (fw.schedules[int(Schedule::zb_h1)]) schedules.push_back({Schedule::zb_h1, 1});
          if (fw.schedules[int(Schedule::dualpipe)] && pp % 2 == 0) schedules.push_back({Schedule::dualpipe, 1});
        }
        for (auto [sched, v] : schedules)
          // Sequence parallelism off, on, and on with its collectives overlapped with the GEMMs
          // (where the framework can).
          for (int sp = 0; sp <= (tp > 1 ? (fw.tp_overlap ? 2 : 1) : 0); ++sp)
            // selective-op only where the framework has it (torchtitan): fw.runs() drops it elsewhere.
            for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full, Recompute::selective_op})
              for (auto [zero, shard] : zeros)
                for (auto [ep, expert_tp] : eps)
                  for (int ep_overlap = 0; ep_overlap <= (fw.ep_overlap && ep > 1 ? 1 : 0); ++ep_overlap)
                  // NCCL's all-to-all, and DeepEP where the framework dispatches through it
                  // (check_plan drops the groups DeepEP has no kernel configuration for).
                  for (int deepep = 0; deepep <= (fw.deepep && ep > 1 ? 1 : 0); ++deepep) {
                    if (grad_ranks == 1 && zero > 0) continue;
                    // ZeRO-3 beside expert parallelism where the framework shards experts over
                    // their expert-data-parallel group (FrameworkTraits::sharded_expert_parallel).
                    if (zero == 3 && ((ep > 1 && !fw.sharded_expert_parallel) || expert_tp > 0 || sched == Schedule::terapipe))
                      continue;
                    PlanSpec p;
                    p.tp = tp;
                    p.cp = cp;
                    p.cp_comm = cp_comm;
                    p.pp = pp;
                    p.dp = dp;
                    p.micro_batch = mb;
                    p.schedule = sched;
                    p.virtual_stages = v;
                    p.sequence_parallel = sp >= 1;
                    p.tp_overlap = sp == 2;
                    p.recompute = rc;
                    p.zero = zero;
                    p.shard_group = shard;
                    p.first_stage_layers = split.first;
                    p.last_stage_layers = split.second;
                    if (deepspeed_split) p.partition_method = "type:transformer";
                    if ((split.first > 0 || deepspeed_split) && sched == Schedule::interleaved) continue;  // needs an even split
                    p.ep = ep;
                    p.expert_tp = expert_tp;
                    p.ep_overlap = ep_overlap == 1;
                    p.ep_dispatcher = deepep == 1 ? EpDispatcher::deepep : EpDispatcher::nccl;
                    // Gradient reduction during the backward and the next step's parameter gather
                    // during the forward wherever the framework does them (what its recipes turn
                    // on: Megatron-Core's --overlap-grad-reduce --overlap-param-gather, PyTorch
                    // DDP's buckets); ZeRO-3 overlaps per unit regardless.
                    p.dp_overlap = grad_ranks > 1 && zero < 3 && fw.overlaps_dp_reduction(pp, zero);
                    p.param_gather_overlap = fw.param_gather_overlap && (zero == 1 || zero == 2) && grad_ranks > 1;
                    p.framework = r.framework;
                    p.compile = r.compile;
                    p.compile_loss = r.compile_loss;
                    p.cross_entropy_fusion = r.cross_entropy_fusion;
                    if (pp > 1 && r.defer_embedding_wgrad && fw.defers_embedding_wgrad) {
                      p.defer_embedding_wgrad = true;
                      p.wgrad_deferral_limit = r.wgrad_deferral_limit;
                    }
                    if (zero == 3 && fw.zero3_prefetch_choice) p.zero3_prefetch = r.zero3_prefetch;
                    if (pp > 1 && fw.pipe_grads_partitioning) p.partitioned_pipe_grads = r.partitioned_pipe_grads;
                    // FP8 training gathers its sharded GEMM weights in FP8 where the framework and
                    // the rules allow (fewer bytes, no per-micro-batch weight casts, smaller
                    // gathered buffers).
                    p.fp8_param_gather = fw.fp8_param_gather && !fp8_param_gather_violation(fw, r.training, p);
                    if (!fw.runs(p)) continue;
                    if (check_plan(m, r.cluster, r.training, p, r.gpus)) continue;
                    // Too many micro-batches to simulate (an absurd batch on few pipelines).
                    if (sim::simulation_size_violation(experiment_for(r, p), sim::SimulationSize::fast)) continue;
                    out.push_back(p);
                  }
      }
    }
    }
  }
  return out;
}

cost_models::ExecutionModel execution_for(const SearchRequest& r, int zero) {
  PlanSpec p;
  p.zero = zero;
  p.framework = r.framework;
  p.compile = r.compile;  // the elementwise traffic every candidate shares
  p.compile_loss = r.compile_loss;
  p.cross_entropy_fusion = r.cross_entropy_fusion;
  // Every candidate spreads over all r.gpus GPUs (dp stands for the whole layout here): the pace of
  // the slowest of them (cost_models/device_spread.hpp) applies to each, as it does when one plan
  // is simulated on its own.
  p.dp = r.gpus;
  return cost_models::resolve_execution(r.cluster, r.training, p);
}

SearchExecutions::SearchExecutions(const SearchRequest& r) : request_(&r) {
  for (int zero = 0; zero <= 3; ++zero) {
    by_zero_.push_back(execution_for(r, zero));
    comm_by_zero_.emplace_back(r.cluster, by_zero_.back().calibrated);
  }
}

const CommModel& SearchExecutions::comm_of(const PlanSpec& p) const {
  // Keyed as of() is (the callers price the plan with of(p) too, which checks the scope).
  FORESIGHT_CHECK(p.zero >= 0 && p.zero < int(comm_by_zero_.size())) << "zero " << p.zero;
  return comm_by_zero_[std::size_t(p.zero)];
}

const cost_models::ExecutionModel& SearchExecutions::of(const PlanSpec& p) const {
  FORESIGHT_CHECK(p.zero >= 0 && p.zero < int(by_zero_.size())) << "zero " << p.zero;
  const cost_models::ExecutionModel& x = by_zero_[std::size_t(p.zero)];
  // The executions are keyed by ZeRO stage, the one plan field a calibrated scope reads today
  // (min_zero). A scope reading another would misprice candidates silently: the calibrated
  // parameters this very plan matches must be the ones its execution applies (a cheap scope match).
  const std::vector<std::string> applied =
      cost_models::calibrated_terms(cost_models::bundled_calibration(), request_->cluster, request_->training, p)
          .applied;
  FORESIGHT_CHECK(applied == x.calibrated.applied)
      << "calibrated parameters of a plan differ from its ZeRO stage's execution: key SearchExecutions by the "
         "plan fields the new scope reads";
  return x;
}

SearchResult search_plans(const SearchRequest& r, const SearchProgress& progress) {
  const std::vector<PlanSpec> plans = enumerate_plans(r);
  std::vector<EvaluatedShare> all;
  all.push_back(evaluate_plans(r, plans, 0, 1, progress));
  SearchResult res = rank_candidates(r, long(plans.size()), std::move(all));
  resimulate_top(r, res, 0, 1, progress);
  return res;
}

unsigned default_threads(int processes_per_node) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  unsigned allowed = hw;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) allowed = std::max(1, CPU_COUNT(&set));
  // Ranks bound to their own cores already see only those; unbound ranks see the whole node and
  // would oversubscribe it, so the node's cores are divided among them.
  if (processes_per_node > 1 && allowed == hw) allowed = std::max(1u, hw / unsigned(processes_per_node));
  return allowed;
}

EvaluatedShare evaluate_plans(const SearchRequest& r, const std::vector<PlanSpec>& plans, int share, int shares,
                              const SearchProgress& progress) {
  // Every plan of the search runs on the same framework, GPU and dtype: one execution model per
  // ZeRO stage (SearchExecutions).
  const SearchExecutions executions(r);
  // Plans are enumerated in a regular order, and their costs follow it (schedules, TeraPipe
  // slicings and recompute modes alternate), so every `shares`-th plan can be a much heavier share
  // than the others. A fixed pseudo-random permutation (the same on every rank) spreads the heavy
  // ones evenly; the ranking afterwards does not depend on who evaluated what.
  std::vector<long> order(plans.size());
  std::iota(order.begin(), order.end(), 0L);
  if (shares > 1) {
    std::uint64_t state = 0x9E3779B97F4A7C15ull;  // splitmix64, seeded the same everywhere
    auto next_random = [&state] {
      std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    for (std::size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[next_random() % k]);
  }
  std::vector<long> mine;
  for (std::size_t k = std::size_t(share); k < order.size(); k += std::size_t(shares)) mine.push_back(order[k]);
  const unsigned threads = r.threads > 0 ? unsigned(r.threads) : default_threads();

  std::mutex mu;
  EvaluatedShare out;
  std::atomic<long> next{0}, done{0}, pruned{0};
  auto worker = [&] {
    EvaluatedShare local;
    for (long j; (j = next++) < long(mine.size());) {
      const long i = mine[j];
      PlanSpec p = plans[i];
      const cost_models::ExecutionModel& x = executions.of(p);
      if (p.schedule == Schedule::terapipe && p.token_slices.empty()) p.token_slices = terapipe_slices(r, x, p);
      Bytes need;
      bool ok = fits(x, r, p, &need);
      if (!ok) {
        // Recompute the cheap modules the framework can (plan.recompute_modules: the norms, MLA's
        // up-projections, an MoE layer's activation) before moving anything to the host: a few
        // percent of the layer's time for their stored outputs.
        // Then the FFN submodules too (a dense MLP's or an MoE block's forward again, collectives
        // included): dearer, but still on the device.
        PlanSpec q = p;
        if (with_recompute_modules(framework_traits(r.framework), r.model, q)) {
          if (fits(x, r, q, nullptr)) {
            p = q;
            ok = true;
          } else if (with_checkpointed_ffn(r.model, q) && fits(x, r, q, nullptr)) {
            p = q;
            ok = true;
          }
        }
      }
      if (!ok) {
        // Offload what does not fit on the device, as far as the framework can (FrameworkTraits
        // optimizer_offload*, activation_offload*): the optimizer state first, then activations
        // with it, then activations alone. An optimizer steps on the host only where the cluster
        // states the host's memory bandwidth (check_plan); elsewhere only activations move.
        const FrameworkTraits& fw = framework_traits(r.framework);
        const bool host_step = r.cluster.host.memory_bandwidth.value() > 0;
        const double most_activations = fw.max_activation_offload(r.model.layers);
        std::optional<PlanSpec> nearest;  // of the variants that run but miss, the one that needs least
        auto variant = [&](bool optimizer, double activations) {
          PlanSpec q = p;
          q.offload.optimizer = optimizer;
          q.offload.activations = activations;
          return q;
        };
        // One variant: whether the framework runs it and it fits (then it is the plan).
        auto offloaded = [&](bool optimizer, double activations) {
          PlanSpec q = variant(optimizer, activations);
          if (!fw.runs(q)) return false;
          Bytes need2;
          if (fits(x, r, q, &need2)) {
            p = std::move(q);
            return true;
          }
          // (A variant that fits the device but not the hosts is no nearer a device that fits.)
          if (need2 < need && need2 > r.memory_limit()) {
            need = need2;
            nearest = std::move(q);
          }
          return false;
        };
        // Where the framework offloads a chosen number of layers in windows (Transformer Engine's
        // cpu_offloading_num_layers: FrameworkTraits::activation_offload_windows), the fewest that
        // fit: every layer more is one more copy to hide (memory falls with each, so the least
        // fitting count is found by bisection). Elsewhere as much as the framework moves.
        auto activations_for = [&](bool optimizer) {
          const int layers = r.model.layers;
          const int most = int(std::lround(most_activations * layers));
          if (!fw.activation_offload_windows || most < 2) return most_activations;
          auto fit = [&](int n) {
            const PlanSpec q = variant(optimizer, double(n) / layers);
            return fw.runs(q) && fits(x, r, q, nullptr);
          };
          if (!fit(most)) return most_activations;
          int lo = 1, hi = most;  // fit(hi) holds
          while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            if (fit(mid)) hi = mid;
            else lo = mid + 1;
          }
          return double(hi) / layers;
        };
        ok = (host_step && offloaded(true, 0.0)) || offloaded(host_step, activations_for(host_step)) ||
             (host_step && offloaded(false, activations_for(false)));
        if (!ok && (!local.closest || need < local.closest_need)) {
          local.closest = nearest ? *nearest : p;
          local.closest_need = need;
          local.closest_index = i;
        }
      }
      if (ok) {
        auto add_fitting = [&](const PlanSpec& q) {
          const Experiment eq = experiment_for(r, q);
          Candidate cq;
          cq.plan = q;
          cq.analytic =
              sim::predict({eq, x, sim::compute_costs(eq, x), executions.comm_of(q)}, sim::EngineKind::analytic);
          cq.peak_memory = cq.analytic.memory_per_stage[cq.analytic.most_loaded_stage].total();
          local.fitting.push_back(std::move(cq));
        };
        add_fitting(p);
        // Partial recompute variants of a plan that needs recompute to fit: block (fewest layers
        // per stage) and micro-batch level (most partial micro-batches).
        if (PlanSpec q = p; fewest_recomputed_layers_that_fit(x, r, q)) add_fitting(q);
        if (PlanSpec q = p; most_partial_microbatches_that_fit(x, r, q)) add_fitting(q);
      } else {
        ++pruned;
      }
      const long d = ++done;
      if (progress && (d % 64 == 0 || d == long(mine.size()))) progress(SearchStage::evaluate, d, long(mine.size()));
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto& c : local.fitting) out.fitting.push_back(std::move(c));
    merge_closest(out, local);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  out.pruned_memory = pruned;
  return out;
}

SearchResult rank_candidates(const SearchRequest& r, long enumerated, std::vector<EvaluatedShare> shares) {
  SearchResult res;
  res.enumerated = enumerated;
  std::vector<Candidate> fitting;
  EvaluatedShare closest;
  for (auto& sh : shares) {
    res.pruned_memory += sh.pruned_memory;
    for (auto& c : sh.fitting) fitting.push_back(std::move(c));
    merge_closest(closest, sh);
  }
  res.evaluated = long(fitting.size());
  // Deterministic order whatever the threads and shares: by iteration time, then the plan's fields.
  auto key = [](const Candidate& c) {
    const PlanSpec& p = c.plan;
    return std::make_tuple(c.analytic.iteration.value(), p.tp, p.cp, int(p.cp_comm), p.pp, p.first_stage_layers, p.micro_batch, int(p.schedule),
                           p.virtual_stages, int(p.sequence_parallel), int(p.tp_overlap), int(p.recompute), p.recompute_layers,
                           p.partial_recompute_microbatches, p.zero,
                           p.shard_group, p.ep, p.expert_tp, int(p.ep_overlap), int(p.ep_dispatcher),
                           int(p.recompute_modules.layernorm), int(p.recompute_modules.mla_up_proj),
                           int(p.recompute_modules.moe_act), int(p.recompute_modules.mlp), int(p.recompute_modules.moe),
                           int(p.recompute_modules.shared_experts), int(p.offload.optimizer), p.offload.activations);
  };
  std::sort(fitting.begin(), fitting.end(), [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
  std::vector<std::pair<double, double>> points;
  for (const auto& c : fitting) {
    res.fitting_iterations_s.push_back(c.analytic.iteration.value());
    res.fitting_memory_GB.push_back(in_GB(c.peak_memory));
    points.emplace_back(c.analytic.iteration.value(), c.peak_memory.value());
    auto& slot = c.plan.schedule == Schedule::terapipe ? res.best_terapipe : res.best_without_terapipe;
    if (!slot) slot = c;
  }
  for (std::size_t i : pareto_front(points)) res.pareto.push_back(fitting[i]);
  if (int(fitting.size()) > r.top_k) fitting.resize(r.top_k);
  res.ranked = std::move(fitting);
  if (res.ranked.empty() && closest.closest) {
    res.closest = closest.closest;
    res.closest_need = closest.closest_need;
    res.closest_shortfall = closest.closest_need - r.memory_limit();
  }
  return res;
}

void resimulate_top(const SearchRequest& r, SearchResult& res, int share, int shares, const SearchProgress& progress) {
  if (!r.simgrid_top || !sim::simgrid_available()) return;
  const SearchExecutions executions(r);
  long done = 0;
  const long mine = (long(res.ranked.size()) - share + shares - 1) / shares;
  for (std::size_t i = std::size_t(share); i < res.ranked.size(); i += std::size_t(shares)) {
    Candidate& c = res.ranked[i];
    const Experiment e = experiment_for(r, c.plan);
    const cost_models::ExecutionModel& x = executions.of(c.plan);
    if (!sim::simulation_size_violation(e, sim::SimulationSize::simgrid))  // else left analytic-only
      c.simgrid = sim::predict({e, x, sim::compute_costs(e, x), executions.comm_of(c.plan)}, sim::EngineKind::simgrid);
    if (progress) progress(SearchStage::simgrid, ++done, mine);
  }
}

std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& tm) {
  std::vector<std::size_t> order(tm.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  // By memory, then time: a point is on the front when it is strictly faster than every point
  // before it (those use no more memory).
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tm[a].second != tm[b].second ? tm[a].second < tm[b].second : tm[a].first < tm[b].first;
  });
  std::vector<std::size_t> front;
  double best_time = std::numeric_limits<double>::infinity();
  for (std::size_t i : order)
    if (tm[i].first < best_time) {
      best_time = tm[i].first;
      front.push_back(i);
    }
  return front;
}

std::vector<int> terapipe_slices(const SearchRequest& r, const cost_models::ExecutionModel& x, const PlanSpec& plan) {
  const Experiment e = experiment_for(r, plan);
  const sim::ComputeCosts compute = sim::compute_costs(e, x);
  const CommModel comm(e.cluster, x.calibrated);
  int g = std::max(1, std::min(r.slice_granularity, r.model.seq_len));
  while (r.model.seq_len % g != 0) --g;
  const SliceTime time = [&](int tokens, int end) { return sim::slice_stage_time({e, x, compute, comm}, tokens, end); };
  return optimal_token_slices(r.model.seq_len, plan.pp, time, g, plan.micro_batches(r.training)).slices;
}

Experiment with_token_slices(Experiment e, const cost_models::ExecutionModel& x) {
  if (e.plan.schedule == Schedule::terapipe && e.plan.token_slices.empty()) {
    SearchRequest r;
    r.model = e.model;
    r.cluster = e.cluster;
    r.training = e.training;
    r.gpus = e.gpus;
    e.plan.token_slices = terapipe_slices(r, x, e.plan);
  }
  return e;
}

PlanStanding rank_of(const SearchRequest& r, const SearchResult& result, const PlanSpec& given) {
  PlanStanding s;
  PlanSpec plan = given;
  const cost_models::ExecutionModel x = cost_models::resolve_execution(r.cluster, r.training, plan);
  if (plan.schedule == Schedule::terapipe && plan.token_slices.empty()) plan.token_slices = terapipe_slices(r, x, plan);
  const Experiment e = experiment_for(r, plan);
  s.prediction = sim::predict({e, x, sim::compute_costs(e, x), CommModel(e.cluster, x.calibrated)}, sim::EngineKind::analytic);
  s.fits = fits(x, r, plan, nullptr);
  s.of = long(result.fitting_iterations_s.size());
  if (!s.fits) return s;
  const auto& v = result.fitting_iterations_s;
  s.rank = long(std::lower_bound(v.begin(), v.end(), s.prediction.iteration.value() * (1 - 1e-12)) - v.begin()) + 1;
  return s;
}

}  // namespace foresight::planner
