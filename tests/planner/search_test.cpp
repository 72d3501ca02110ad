// Plan search: every enumerated plan is runnable, pruning keeps only plans the memory model fits,
// the ranking is sorted and independent of the thread count, impossible requests say by how much.
#include <gtest/gtest.h>
#include <sched.h>

#include <map>
#include <set>
#include <thread>

#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "core/spec_json.hpp"
#include "planner/search.hpp"
#include "sim/costing.hpp"

#include <cstdio>

using namespace foresight;
using namespace foresight::planner;

namespace {
SearchRequest small_request() {
  SearchRequest r;
  r.model = load_model(resolve_scenario("models", "gpt3-1.3b"));
  r.cluster = load_cluster(resolve_scenario("clusters", "selene"));
  r.training = TrainingSpec{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  r.gpus = 16;
  r.top_k = 1000;
  r.simgrid_top = false;
  return r;
}

// small_request on 16 GiB GPUs under Megatron-Core: memory tight enough that some plans fit only
// with recompute of some kind.
SearchRequest tight_megatron_core_request() {
  SearchRequest r = small_request();
  r.framework = Framework::megatron_core;
  r.cluster.gpu.hbm = gibibytes(16);
  return r;
}

// small_request under DeepSpeed on 16 GiB GPUs: some plans fit only with their optimizer state on
// the host (its ZeRO optimizers offload; Megatron-LM 2021-22's cannot).
SearchRequest tight_deepspeed_request() {
  SearchRequest r = small_request();
  r.framework = Framework::deepspeed;
  r.cluster.gpu.hbm = gibibytes(16);
  return r;
}

// How many ranked plans keep their optimizer on the host.
int optimizer_offloads(const SearchResult& res) {
  int n = 0;
  for (const auto& c : res.ranked) n += c.plan.offload.optimizer ? 1 : 0;
  return n;
}

// Whether the memory model puts the plan's most loaded stage within the request's limit (the
// reference the search's pruning is checked against).
bool fits_by_memory_model(const SearchRequest& r, const cost_models::ExecutionModel& x, const PlanSpec& p) {
  const auto mem = cost_models::memory_per_stage(x, r.model, r.training, p);
  return mem[cost_models::most_loaded_stage(mem)].total() <= r.memory_limit();
}
}  // namespace

TEST(Search, EveryEnumeratedPlanIsRunnable) {
  const SearchRequest r = small_request();
  const auto plans = enumerate_plans(r);
  EXPECT_GT(plans.size(), 50u);
  for (const auto& p : plans) EXPECT_FALSE(check_plan(r.model, r.cluster, r.training, p, r.gpus).has_value());
}

TEST(Search, KeepsOnlyPlansThatFitAndRanksThem) {
  SearchRequest r = small_request();
  r.cluster.gpu.hbm = gibibytes(16);  // tight memory so that pruning bites
  const SearchResult res = search_plans(r);
  EXPECT_GT(res.pruned_memory, 0);
  ASSERT_FALSE(res.ranked.empty());
  for (std::size_t i = 0; i < res.ranked.size(); ++i) {
    const auto& c = res.ranked[i];
    const auto mem = cost_models::memory_per_stage(cost_models::execution_model(r.training, c.plan), r.model, r.training, c.plan);
    EXPECT_LE(mem[cost_models::most_loaded_stage(mem)].total(), r.cluster.gpu.hbm) << i;
    if (i) {
      EXPECT_LE(res.ranked[i - 1].analytic.iteration, c.analytic.iteration);
    }
    EXPECT_TRUE(sim::check_prediction(c.analytic).empty());
  }
}

TEST(Search, SameResultWhateverTheThreadCount) {
  SearchRequest a = small_request();
  a.threads = 1;
  SearchRequest b = a;
  b.threads = 3;
  const SearchResult x = search_plans(a), y = search_plans(b);
  ASSERT_EQ(x.ranked.size(), y.ranked.size());
  for (std::size_t i = 0; i < x.ranked.size(); ++i) {
    EXPECT_EQ(x.ranked[i].analytic.iteration.value(), y.ranked[i].analytic.iteration.value());
    EXPECT_EQ(x.ranked[i].plan.tp, y.ranked[i].plan.tp);
    EXPECT_EQ(x.ranked[i].plan.pp, y.ranked[i].plan.pp);
    EXPECT_EQ(x.ranked[i].plan.micro_batch, y.ranked[i].plan.micro_batch);
  }
}

TEST(Search, PredictsEachPlanAsSimulatingItAloneDoes) {
  // The search shares one execution model among its candidates; each must still be priced as
  // `foresight simulate` prices that plan alone (sim::predict resolves its own execution), the
  // pace of the slowest of its 16 GPUs included (cost_models/device_spread.hpp).
  const SearchRequest r = small_request();
  const SearchResult res = search_plans(r);
  ASSERT_GE(res.ranked.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const Candidate& c = res.ranked[i];
    EXPECT_EQ(c.analytic.slowest.devices, 16) << i;
    EXPECT_GT(c.analytic.slowest.factor, 1.0) << i;
    const sim::Prediction alone = sim::predict(experiment_for(r, c.plan), sim::EngineKind::analytic);
    EXPECT_DOUBLE_EQ(c.analytic.iteration.value(), alone.iteration.value()) << i;
  }
}

TEST(Search, AppliesZeroScopedCalibrationToShardedCandidatesOnly) {
  // Calibrated parameters scoped by min_zero (scenarios/calibration.yaml: fsdp_h100_attention_scale,
  // llm-foundry's FSDP on compute capability 9, zero >= 3) apply to an llm-foundry search's ZeRO-3
  // candidates and not to its unsharded ones, each priced as `foresight simulate` prices that plan
  // alone.
  SearchRequest r;
  r.model = load_model(resolve_scenario("models", "mpt-760m-s2048"));
  r.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  r.training = TrainingSpec{.global_batch = 384, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  r.gpus = 8;
  r.framework = Framework::llm_foundry;
  r.top_k = 1000;
  r.simgrid_top = false;
  const SearchExecutions executions(r);
  PlanSpec sharded, replicated;
  sharded.framework = replicated.framework = r.framework;
  sharded.zero = 3;
  // The scope must tell the two apart, else this test could not fail.
  ASSERT_NE(executions.of(sharded).calibrated.attention_efficiency_scale,
            executions.of(replicated).calibrated.attention_efficiency_scale);
  const SearchResult res = search_plans(r);
  int zero3 = 0, others = 0;
  for (const Candidate& c : res.ranked) {
    const sim::Prediction alone = sim::predict(experiment_for(r, c.plan), sim::EngineKind::analytic);
    EXPECT_DOUBLE_EQ(c.analytic.iteration.value(), alone.iteration.value()) << "zero " << c.plan.zero;
    (c.plan.zero == 3 ? zero3 : others) += 1;
  }
  EXPECT_GT(zero3, 0);
  EXPECT_GT(others, 0);
  // The scale describes llm-foundry's Triton kernel: plain PyTorch FSDP (SDPA) does not get it.
  SearchRequest plain = r;
  plain.framework = Framework::pytorch;
  PlanSpec plain_sharded = sharded;
  plain_sharded.framework = Framework::pytorch;
  EXPECT_EQ(SearchExecutions(plain).of(plain_sharded).calibrated.attention_efficiency_scale,
            executions.of(replicated).calibrated.attention_efficiency_scale);
  // A plan whose calibrated parameters differ from its ZeRO stage's execution (here: another
  // framework's plan asked of this search) is an internal error, not a silent misprice.
  EXPECT_THROW(executions.of(plain_sharded), InternalError);
}

TEST(Search, OffloadsTheOptimizerOnlyWhereTheHostsMemoryBandwidthIsKnown) {
  // 16 GiB GPUs: some plans fit only with their optimizer state on the host. Selene states its
  // hosts' memory bandwidth, so those plans are ranked (with the host's step in their time); a
  // cluster that does not state it gets no such plan, since its step could not be priced.
  SearchRequest r = tight_deepspeed_request();
  EXPECT_GT(optimizer_offloads(search_plans(r)), 0);
  r.cluster.host.memory_bandwidth = BytesPerSecond(0);
  const SearchResult without = search_plans(r);
  EXPECT_FALSE(without.ranked.empty());
  EXPECT_EQ(optimizer_offloads(without), 0);
}

TEST(Search, WhatItOffloadsFitsTheHostsMemory) {
  // As above (DeepSpeed, 16 GiB GPUs): some plans fit only with their optimizer on the host. Every
  // plan of GPT-3 1.3B (1,317,654,528 parameters) on 16 GPUs updates about a sixteenth of them,
  // 82 million, and keeps at least 16 B of each on the host (fp32 master, m, v, fp32 gradient):
  // at least 1.3 GB a GPU, 10.5 GB for a Selene node's 8. With 8 GB of host memory a node no plan
  // may put its optimizer there; every plan that offloads anything stays within the host's memory
  // (cost_models::offload_cost, checked by hand in tests/cost_models/offload_test.cpp).
  SearchRequest r = tight_deepspeed_request();
  auto expect_within_host = [&](const SearchResult& res) {
    for (const auto& c : res.ranked) {
      const PlanSpec& p = c.plan;
      if (!p.offload.optimizer && !(p.offload.activations > 0)) continue;
      const cost_models::ExecutionModel x = execution_for(r, p.zero);
      for (int s = 0; s < p.pp; ++s)
        EXPECT_LE(cost_models::offload_cost(x, r.model, r.training, p, r.cluster, s).host_memory_per_node.value(),
                  r.cluster.host.memory.value())
            << "tp " << p.tp << " pp " << p.pp << " dp " << p.dp << " zero " << p.zero;
    }
  };
  const SearchResult roomy = search_plans(r);
  expect_within_host(roomy);
  EXPECT_GT(optimizer_offloads(roomy), 0);
  r.cluster.host.memory = Bytes(8e9);
  const SearchResult tight = search_plans(r);
  EXPECT_FALSE(tight.ranked.empty());
  expect_within_host(tight);
  EXPECT_EQ(optimizer_offloads(tight), 0);
}

TEST(Search, OffloadsOnlyWhatTheFrameworkCanMove) {
  // 12 GiB GPUs for GPT-3 1.3B on 16 of them: tight enough that plans reach for the host. Every
  // ranked plan must be one check_plan accepts for its framework; Megatron-LM 2021-22 moves
  // nothing to the host, DeepSpeed offloads the optimizer only as a ZeRO mode and activations only
  // as cpu_checkpointing of recomputed layers, Megatron-Core its optimizer only at ZeRO-1 and
  // activations only without a pipeline or recompute and never every layer.
  for (const Framework f : {Framework::megatron, Framework::deepspeed, Framework::megatron_core}) {
    SearchRequest r = small_request();
    r.framework = f;
    // (Megatron-Core's ZeRO-3 shards the model state away: only a smaller part sends its
    // activations to the host.)
    r.cluster.gpu.hbm = gibibytes(f == Framework::megatron_core ? 4 : 12);
    const SearchResult res = search_plans(r);
    int offloaded = 0, windowed = 0;
    for (const auto& c : res.ranked) {
      const PlanSpec& p = c.plan;
      const auto v = check_plan(r.model, r.cluster, r.training, p, r.gpus);
      EXPECT_FALSE(v.has_value()) << to_string(f) << ": " << v->field << ": " << v->rule;
      offloaded += p.offload.optimizer || p.offload.activations > 0;
      if (f == Framework::megatron) {
        EXPECT_FALSE(p.offload.optimizer || p.offload.activations > 0);
      }
      if (f == Framework::deepspeed && p.offload.optimizer) {
        EXPECT_GE(p.zero, 1);
      }
      if (f == Framework::deepspeed && p.offload.activations > 0) {
        EXPECT_EQ(p.recompute, Recompute::full);
      }
      if (f == Framework::megatron_core && p.offload.optimizer) {
        EXPECT_EQ(p.zero, 1);
      }
      if (f == Framework::megatron_core && p.offload.activations > 0) {
        EXPECT_EQ(p.pp, 1);
        EXPECT_EQ(p.recompute, Recompute::none);
        EXPECT_LT(p.offload.activations, 1.0);
        // Transformer Engine offloads a chosen number of layers, each one more copy to hide: the
        // search takes the fewest that fit, so one layer fewer does not.
        const int n = int(std::lround(p.offload.activations * r.model.layers));
        ASSERT_NEAR(p.offload.activations * r.model.layers, n, 1e-9);
        if (n > 1) {
          PlanSpec fewer = p;
          fewer.offload.activations = double(n - 1) / r.model.layers;
          const auto mem = cost_models::memory_per_stage(cost_models::execution_model(r.training, fewer), r.model,
                                                         r.training, fewer);
          EXPECT_GT(mem[cost_models::most_loaded_stage(mem)].total(), r.memory_limit()) << n << " layers";
        }
        ++windowed;
      }
    }
    if (f == Framework::deepspeed) {
      EXPECT_GT(offloaded, 0) << "the tight request needs the host for some plans";
    }
    if (f == Framework::megatron_core) {
      EXPECT_GT(windowed, 0) << "the tight request offloads some Megatron-Core plans' activations";
    }
  }
}

TEST(Search, ContextParallelMoePlansWhereTheExpertsFold) {
  // Qwen3-30B-A3B at 8192 tokens on 16 H100s: Megatron-Core folds its experts over tp x cp x dp
  // (MoE parallel folding, Liu et al. 2025), so the search offers context parallelism for the MoE
  // model, experts folded over the cp ranks too (ep beyond what divides dp); torchtitan has
  // context parallelism but no folding, so it offers none for this model (check_plan refuses it).
  SearchRequest r = small_request();
  r.model = load_model(resolve_scenario("models", "qwen3-30b-a3b"));
  r.model.seq_len = 8192;
  r.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  r.training.global_batch = 32;
  r.framework = Framework::megatron_core;
  const std::vector<PlanSpec> plans = enumerate_plans(r);
  int cp_moe = 0, folded_over_cp = 0;
  for (const PlanSpec& p : plans) {
    if (p.cp == 1) continue;
    ++cp_moe;
    if (p.ep > 1 && p.dp % p.ep != 0) ++folded_over_cp;
    EXPECT_EQ((p.tp * p.cp * p.dp) % (p.etp() * p.ep), 0) << "tp " << p.tp << " cp " << p.cp << " ep " << p.ep;
    const auto v = check_plan(r.model, r.cluster, r.training, p, r.gpus);
    EXPECT_FALSE(v.has_value()) << v->field << ": " << v->rule;
  }
  EXPECT_GT(cp_moe, 0);
  EXPECT_GT(folded_over_cp, 0);
  r.framework = Framework::torchtitan;
  for (const PlanSpec& p : enumerate_plans(r)) EXPECT_EQ(p.cp, 1);
}

TEST(Search, ImpossibleRequestReportsTheShortfall) {
  SearchRequest r = small_request();
  r.model = load_model(resolve_scenario("models", "sc21-1t"));
  r.gpus = 8;
  r.training.global_batch = 8;
  const SearchResult res = search_plans(r);
  EXPECT_TRUE(res.ranked.empty());
  ASSERT_TRUE(res.closest.has_value());
  // 1T parameters' weights alone are 2 TB in 16 bits: over 8 GPUs far beyond 80 GiB each.
  EXPECT_GT(in_GiB(res.closest_shortfall), 100.0);
}

TEST(Search, TeraPipeSpeedupOnGpt3175bMatchesThePaper) {
  // Li et al. 2021 (TeraPipe), abstract: 5.0x over the best plan without token slicing for
  // GPT-3 175B on 48 p3.16xlarge (384 V100). Target: within 15%.
  const Experiment e = load_experiment(resolve_scenario("experiments", "terapipe-gpt3-175b-p3-terapipe"));
  SearchRequest r;
  r.model = e.model;
  r.cluster = e.cluster;
  r.training = e.training;
  r.gpus = e.gpus;
  r.framework = e.plan.framework;
  r.terapipe = true;
  r.simgrid_top = false;
  const SearchResult res = search_plans(r);
  ASSERT_TRUE(res.best_terapipe && res.best_without_terapipe);
  const double speedup = res.best_without_terapipe->analytic.iteration / res.best_terapipe->analytic.iteration;
  std::printf("TeraPipe speedup predicted %.2fx, published 5.0x\n", speedup);
  // The target: within 15%. Since session 4 (pipeline hops costed per pair of stages,
  // GEMM tiles no larger than a slice) the planner finds 5.37x with tp 8 x pp 48, TeraPipe's own
  // setting (8); it was 4.05x while every 128-token slice paid for a 256-row tile.
  EXPECT_NEAR(speedup / 5.0, 1.0, 0.15);
  EXPECT_GT(speedup, 3.0);
  int sum = 0;
  for (int l : res.best_terapipe->plan.token_slices) sum += l;
  EXPECT_EQ(sum, e.model.seq_len);
}

TEST(Pareto, HandWorkedFront) {
  // (time, memory): c dominates d (faster, less memory); e ties a on memory but is slower; b and a
  // trade time against memory; f is the fastest but uses the most memory.
  const std::vector<std::pair<double, double>> pts = {
      {10, 20},  // a: on the front
      {20, 10},  // b: least memory, on the front
      {8, 30},   // c: on the front
      {9, 31},   // d: dominated by c
      {11, 20},  // e: dominated by a
      {5, 50},   // f: on the front
  };
  EXPECT_EQ(pareto_front(pts), (std::vector<std::size_t>{1, 0, 2, 5}));
  EXPECT_TRUE(pareto_front({}).empty());
}

TEST(Pareto, SearchFrontIsUndominatedAndCoversEveryPlan) {
  const SearchResult res = search_plans(small_request());
  ASSERT_FALSE(res.pareto.empty());
  ASSERT_EQ(res.fitting_iterations_s.size(), res.fitting_memory_GB.size());
  // The fastest plan overall is on the front, and every fitting plan is matched or beaten on
  // both axes by some front plan.
  EXPECT_DOUBLE_EQ(res.pareto.back().analytic.iteration.value(), res.fitting_iterations_s.front());
  for (std::size_t i = 0; i < res.fitting_iterations_s.size(); ++i) {
    bool covered = false;
    for (const auto& c : res.pareto)
      covered |= c.analytic.iteration.value() <= res.fitting_iterations_s[i] &&
                 in_GB(c.peak_memory) <= res.fitting_memory_GB[i] + 1e-9;
    EXPECT_TRUE(covered) << i;
  }
  for (std::size_t i = 1; i < res.pareto.size(); ++i) {
    EXPECT_LT(res.pareto[i - 1].peak_memory, res.pareto[i].peak_memory);
    EXPECT_GT(res.pareto[i - 1].analytic.iteration, res.pareto[i].analytic.iteration);
  }
}

TEST(Search, OffersOnlyWhatTheFrameworkRuns) {
  SearchRequest r = small_request();
  r.framework = Framework::deepspeed;
  for (const auto& p : enumerate_plans(r)) {
    EXPECT_EQ(p.schedule, Schedule::one_f_one_b);  // DeepSpeed's TrainSchedule only
    EXPECT_FALSE(p.sequence_parallel);
    EXPECT_NE(p.recompute, Recompute::selective);
  }
  r.framework = Framework::terapipe;
  r.terapipe = true;
  bool saw_terapipe = false;
  for (const auto& p : enumerate_plans(r)) {
    EXPECT_TRUE(p.pp == 1 || p.schedule == Schedule::gpipe || p.schedule == Schedule::terapipe);
    EXPECT_EQ(p.zero, 0);
    saw_terapipe |= p.schedule == Schedule::terapipe;
  }
  EXPECT_TRUE(saw_terapipe);
  r.framework = Framework::megatron;
  for (const auto& p : enumerate_plans(r)) EXPECT_NE(p.schedule, Schedule::terapipe);
}

TEST(DefaultThreads, FollowTheAffinityMaskAndShareAnUnboundNode) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
  if (unsigned(CPU_COUNT(&saved)) == hw) {
    // Unbound: the node's cores, divided among the ranks that share it (at least one each).
    EXPECT_EQ(foresight::planner::default_threads(), hw);
    EXPECT_EQ(foresight::planner::default_threads(2), std::max(1u, hw / 2));
    EXPECT_EQ(foresight::planner::default_threads(int(hw) * 4), 1u);
  }
  // Bound to one CPU (as taskset -c 0 or mpirun's --bind-to core would): one worker.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(foresight::planner::default_threads(), 1u);
  EXPECT_EQ(foresight::planner::default_threads(2), 1u);
  ASSERT_EQ(::sched_setaffinity(0, sizeof saved, &saved), 0);
}

TEST(Search, PartialRecomputeVariantsAreTheCheapestThatFit) {
  // Tight memory: some plans fit only with full recompute. For each, the search adds the block
  // variant with the fewest recomputed layers that fits (one fewer does not) and the micro-batch
  // variant with the most partial micro-batches that fits (one more does not, short of a whole
  // window); neither is offered where the plan fits without recompute.
  SearchRequest r = tight_megatron_core_request();
  const cost_models::ExecutionModel x = execution_for(r);
  auto fits = [&](const PlanSpec& p) { return fits_by_memory_model(r, x, p); };
  const SearchResult res = search_plans(r);
  int block = 0, microbatch = 0;
  for (const auto& c : res.ranked) {
    const PlanSpec& p = c.plan;
    if (p.recompute_layers == 0) continue;
    EXPECT_TRUE(fits(p));
    PlanSpec none = p;
    none.recompute = Recompute::none;
    none.recompute_layers = none.partial_recompute_microbatches = 0;
    EXPECT_FALSE(fits(none));
    PlanSpec more = p;
    if (p.partial_recompute_microbatches == 0) {
      ++block;
      more.recompute_layers = p.recompute_layers - 1;  // 0 would be every layer
      if (more.recompute_layers > 0) {
        EXPECT_FALSE(fits(more)) << p.recompute_layers;
      }
    } else {
      ++microbatch;
      EXPECT_EQ(p.recompute_layers, 1);
      more.partial_recompute_microbatches = p.partial_recompute_microbatches + 1;
      const int window = std::min(p.pp - 1, p.micro_batches(r.training)) + 1;
      if (more.partial_recompute_microbatches < window) {
        EXPECT_FALSE(fits(more)) << p.partial_recompute_microbatches;
      }
    }
  }
  EXPECT_GT(block, 0);
  EXPECT_GT(microbatch, 0);
}

TEST(Search, RecomputesModulesBeforeOffloading) {
  // Tight memory (as above): a plan that does not fit as enumerated but fits once its norms are
  // recomputed (Megatron-Core's --recompute-modules layernorm; GPT-3 1.3B has neither MLA nor MoE)
  // is kept with them, not moved to the host; a plan that fits without them never carries them.
  // Where the norms are not enough, the MLPs are checkpointed too (mlp), never one without the
  // other, and only where the norms alone do not fit.
  SearchRequest r = tight_megatron_core_request();
  const cost_models::ExecutionModel x = execution_for(r);
  auto fits = [&](const PlanSpec& p) { return fits_by_memory_model(r, x, p); };
  const SearchResult res = search_plans(r);
  int with_modules = 0, with_mlp = 0;
  for (const auto& c : res.ranked) {
    const PlanSpec& p = c.plan;
    if (!p.recompute_modules.any()) continue;
    ++with_modules;
    EXPECT_TRUE(p.recompute_modules.layernorm);
    EXPECT_FALSE(p.recompute_modules.mla_up_proj || p.recompute_modules.moe_act || p.recompute_modules.moe ||
                 p.recompute_modules.shared_experts);
    EXPECT_NE(p.recompute, Recompute::full);
    EXPECT_FALSE(p.offload.optimizer || p.offload.activations > 0);
    EXPECT_TRUE(fits(p));
    PlanSpec plain = p;
    plain.recompute_modules = {};
    EXPECT_FALSE(fits(plain));
    if (p.recompute_modules.mlp) {
      ++with_mlp;
      PlanSpec norms = p;
      norms.recompute_modules.mlp = false;
      EXPECT_FALSE(fits(norms));
    }
  }
  EXPECT_GT(with_modules, 0);
  EXPECT_GT(with_mlp, 0);
  // Frameworks without per-module recompute (Megatron-LM 2021) never get them.
  r.framework = Framework::megatron;
  for (const auto& c : search_plans(r).ranked) EXPECT_FALSE(c.plan.recompute_modules.any());
}

TEST(Search, OffersDeepEpWhereItHasAKernelConfiguration) {
  // Mixtral 8x7B on 16 H100s under Megatron-Core: every expert-parallel layout (ep 2, 4, 8, all in
  // DeepEP's configuration tables) comes with NCCL's all-to-all and with DeepEP; Megatron-LM
  // (2021) has no DeepEP.
  SearchRequest r;
  r.model = load_model(resolve_scenario("models", "mixtral-8x7b"));
  r.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  r.training = TrainingSpec{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  r.gpus = 16;
  r.framework = Framework::megatron_core;
  const auto plans = enumerate_plans(r);
  std::set<std::string> nccl, deepep;
  int expert_parallel = 0;
  for (const auto& p : plans) {
    PlanSpec key = p;
    key.ep_dispatcher = EpDispatcher::nccl;
    const std::string k = to_json(key).dump();
    if (p.ep_dispatcher == EpDispatcher::deepep) {
      EXPECT_GT(p.ep, 1);
      EXPECT_TRUE(deepep_runs_ep(p.ep)) << p.ep;
      deepep.insert(k);
    } else {
      nccl.insert(k);
      expert_parallel += p.ep > 1;
    }
  }
  EXPECT_GT(expert_parallel, 0);
  EXPECT_EQ(deepep.size(), std::size_t(expert_parallel));
  for (const auto& k : deepep) EXPECT_TRUE(nccl.count(k)) << k;
  EXPECT_FALSE(deepep_runs_ep(12));
  r.framework = Framework::megatron;
  for (const auto& p : enumerate_plans(r)) EXPECT_EQ(p.ep_dispatcher, EpDispatcher::nccl);
}

TEST(Search, DeepSpeedSplitsUnevenPipelinesByItsPartitionMethod) {
  // BLOOM-176B's 70 layers: pipelines of 4, 8, 16, 32 stages do not divide them. Megatron-Core
  // gets Llama-3-style first/last counts where they exist (4: 17 + 2 x 18 + 17, 8: 8 + 6 x 9 + 8;
  // not 16 or 32, whose end stages would give up 5 and 13 layers each); DeepSpeed (no per-stage
  // counts) gets Megatron-DeepSpeed's partition_method type:transformer where it leaves every stage
  // a layer (4: 18, 18, 18, 16; 8: 7 x 9 + 7; on 16 and 32 DeepSpeed v0.5 leaves stages empty;
  // the other depths that do not divide 70 do not divide the 128 GPUs).
  SearchRequest r = small_request();
  r.model = load_model(resolve_scenario("models", "bloom-176b"));
  r.gpus = 128;
  r.training.global_batch = 256;
  std::set<int> deepspeed_uneven, core_uneven;
  r.framework = Framework::deepspeed;
  for (const auto& p : enumerate_plans(r)) {
    EXPECT_EQ(p.first_stage_layers + p.last_stage_layers, 0);
    EXPECT_TRUE(p.stage_layers.empty());
    if (70 % p.pp != 0) {
      EXPECT_EQ(p.partition_method, "type:transformer");
      deepspeed_uneven.insert(p.pp);
    } else {
      EXPECT_EQ(p.partition_method, "");
    }
  }
  EXPECT_EQ(deepspeed_uneven, (std::set<int>{4, 8}));
  r.framework = Framework::megatron_core;
  for (const auto& p : enumerate_plans(r)) {
    EXPECT_EQ(p.partition_method, "");
    if (70 % p.pp != 0) core_uneven.insert(p.pp);
  }
  EXPECT_EQ(core_uneven, (std::set<int>{4, 8}));
  // BLOOM's own layout, tp 4 x pp 12 x dp 8 on 384 GPUs with batch 2048: DeepSpeed plans may use
  // any depth that divides the GPUs, and pp 12 splits as BLOOM's did (6 a stage, 4 on the last).
  r.framework = Framework::deepspeed;
  r.gpus = 384;
  r.training.global_batch = 2048;
  bool bloom_layout = false;
  for (const auto& p : enumerate_plans(r))
    if (p.tp == 4 && p.pp == 12 && p.dp == 8) {
      bloom_layout = true;
      EXPECT_EQ(stage_layer_counts(r.model, p), (std::vector<int>{6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 4}));
    }
  EXPECT_TRUE(bloom_layout);
}

TEST(Search, CandidatesOverlapDataParallelWorkWhereTheFrameworkDoes) {
  // Megatron-Core's recipes reduce gradients during the backward and gather parameters during the
  // next forward (--overlap-grad-reduce --overlap-param-gather): its candidates do both wherever
  // there is more than one gradient replica and the optimizer state is sharded (zero 1); DeepSpeed's
  // pipeline engine reduces after the backward (no overlap with pp > 1) and gathers after the step.
  SearchRequest r = small_request();
  r.framework = Framework::megatron_core;
  int overlapped = 0;
  for (const PlanSpec& p : enumerate_plans(r)) {
    const bool replicas = p.dp * p.cp > 1;
    EXPECT_EQ(p.dp_overlap, replicas && p.zero < 3) << "zero " << p.zero << " dp " << p.dp;
    EXPECT_EQ(p.param_gather_overlap, replicas && p.zero == 1) << "zero " << p.zero << " dp " << p.dp;
    overlapped += p.dp_overlap;
  }
  EXPECT_GT(overlapped, 0);
  r.framework = Framework::deepspeed;
  int piped = 0;
  for (const PlanSpec& p : enumerate_plans(r)) {
    EXPECT_FALSE(p.param_gather_overlap);
    if (p.pp > 1) {
      EXPECT_FALSE(p.dp_overlap) << "pp " << p.pp;
    }
    piped += p.pp > 1;
  }
  EXPECT_GT(piped, 0);
}

TEST(Search, InterleavedScheduleTriesEveryEvenSplitOfAStage) {
  // GPT-3 1.3B has 24 layers: at pp 2 a stage of 12 splits into 2, 3, 4, 6 or 12 model chunks, and
  // at pp 4 a stage of 6 into 2, 3 or 6; nothing else.
  SearchRequest r = small_request();
  ASSERT_EQ(r.model.layers, 24);
  r.framework = Framework::megatron_core;
  std::map<int, std::set<int>> chunks;
  for (const PlanSpec& p : enumerate_plans(r))
    if (p.schedule == Schedule::interleaved) chunks[p.pp].insert(p.virtual_stages);
  EXPECT_EQ(chunks[2], (std::set<int>{2, 3, 4, 6, 12}));
  EXPECT_EQ(chunks[4], (std::set<int>{2, 3, 6}));
}

TEST(Search, TheRequestedDeepSpeedReleaseReachesItsCandidates) {
  // SearchRequest::zero3_prefetch (the experiment's DeepSpeed ZeRO-3 release) is set on every ZeRO-3
  // candidate and on no other; unset, no candidate names a release.
  SearchRequest r = small_request();
  r.framework = Framework::deepspeed;
  r.training.dtype = Dtype::fp16;
  int zero3 = 0;
  for (const PlanSpec& p : enumerate_plans(r)) EXPECT_FALSE(p.zero3_prefetch.has_value());
  r.zero3_prefetch = true;
  for (const PlanSpec& p : enumerate_plans(r)) {
    if (p.zero == 3) {
      ++zero3;
      ASSERT_TRUE(p.zero3_prefetch.has_value());
      EXPECT_TRUE(*p.zero3_prefetch);
    } else {
      EXPECT_FALSE(p.zero3_prefetch.has_value());
    }
  }
  EXPECT_GT(zero3, 0);
}
