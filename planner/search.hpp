// Plan search: enumerate parallel plans for a model on a cluster (tensor, pipeline and data
// parallel degrees, micro-batch, schedule with virtual stages, sequence parallelism, recompute
// (for plans that fit only with full recompute also its cheapest fitting block and micro-batch-level
// variants), ZeRO, offload when nothing fits without it, expert parallelism for MoE), prune by the memory
// model, rank every survivor with the analytic engine, re-simulate the best with SimGrid.
// TeraPipe plans (with request.terapipe) get their token slices from TeraPipe's dynamic program
// over the same costs the simulator uses. Left out: capacity-factor choice, ZeRO-2/3 with
// pipelines (DeepSpeed does not support them).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/experiment.hpp"
#include "cost_models/comm.hpp"
#include "cost_models/execution.hpp"
#include "sim/prediction.hpp"

namespace foresight::planner {

struct SearchRequest {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  int gpus = 0;                              // GPUs to use
  Framework framework = Framework::megatron; // whose implementation will run the plan
  bool compile = false;                      // every plan under torch.compile (frameworks that compile)
  bool compile_loss = false;                 // and the loss with it (plan.compile_loss)
  /// Megatron-Core's fused loss on every plan (plan.cross_entropy_fusion), where the framework runs it.
  CrossEntropyFusion cross_entropy_fusion = CrossEntropyFusion::none;
  /// Megatron-Core's deferred LM-head weight gradients on every pipelined plan
  /// (plan.defer_embedding_wgrad, wgrad_deferral_limit), where the framework defers them.
  bool defer_embedding_wgrad = false;
  int wgrad_deferral_limit = 0;
  /// Which release of the framework is priced where it has two (DeepSpeed): its ZeRO-3 with or
  /// without a complete prefetch trace on every ZeRO-3 candidate (plan.zero3_prefetch), its
  /// pipeline engine before or after v0.5.4 on every pipelined one (plan.partitioned_pipe_grads).
  /// Unset: the framework's default.
  std::optional<bool> zero3_prefetch;
  std::optional<bool> partitioned_pipe_grads;
  int top_k = 10;                            // ranked plans kept (and re-simulated with SimGrid)
  bool simgrid_top = true;
  int threads = 0;                           // 0: default_threads()
  std::vector<int> micro_batches = {1, 2, 4, 8, 16, 32};
  /// Model chunks per stage for the interleaved schedule; empty: every divisor (2 and up) of the
  /// layers per stage.
  std::vector<int> virtual_stages = {};
  bool terapipe = false;        // also search TeraPipe token slicing (slices from its DP)
  int slice_granularity = 64;   // TeraPipe slices are multiples of this many tokens
  /// Fraction of device memory a plan's modelled peak must leave free: what the memory model's
  /// CUDA context, NCCL and 5% fragmentation allowances can miss (fragmentation in LLM training
  /// averages 15% and reaches 33%, GMLake, ASPLOS 2024; one NCCL communicator took 544-688 MB on
  /// 4 A100s, NVIDIA/nccl#964); 10% is vLLM's default reserve (gpu_memory_utilization = 0.90),
  /// the only shipped default of the kind found (notes/research-headroom-sockets.md).
  double memory_headroom = 0.10;
  /// The memory a plan may use per GPU: device memory less the headroom.
  Bytes memory_limit() const { return cluster.gpu.hbm * (1.0 - memory_headroom); }
};

struct Candidate {
  PlanSpec plan;
  sim::Prediction analytic;
  std::optional<sim::Prediction> simgrid;
  Bytes peak_memory;  // most loaded GPU
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fastest first (analytic), at most top_k
  long enumerated = 0;            // plans generated (all passed check_plan)
  long pruned_memory = 0;         // did not fit in device memory
  long evaluated = 0;             // simulated with the analytic engine
  std::vector<double> fitting_iterations_s;  // every fitting plan's analytic iteration time, sorted
  std::vector<double> fitting_memory_GB;     // the same plans' most loaded GPU, same order
  /// The fitting plans no other plan beats on both iteration time and memory per GPU (the
  /// throughput-memory Pareto front), least memory first.
  std::vector<Candidate> pareto;
  /// The fastest plan with TeraPipe slicing and the fastest without (analytic), when searched.
  std::optional<Candidate> best_terapipe, best_without_terapipe;
  /// When nothing fits: the plan that came closest, and by how much it overflows the limit
  /// (device memory less the headroom).
  std::optional<PlanSpec> closest;
  Bytes closest_shortfall;
  Bytes closest_need;
};

/// What one share of a search's plans gave (all of them, or those of one MPI rank): the plans that
/// fit, with their analytic predictions, and the closest miss. Shares merge into one SearchResult
/// (rank_candidates) identical to a single process's, whatever the split.
struct EvaluatedShare {
  std::vector<Candidate> fitting;
  long pruned_memory = 0;
  std::optional<PlanSpec> closest;  // the plan that came closest to fitting
  long closest_index = -1;          // its index among the enumerated plans (ties: the lowest)
  Bytes closest_need;
};

/// Indices of the points (iteration time, memory) not dominated by another point: none is at
/// least as good in both and better in one. Ordered by memory, ascending; ties keep the first.
std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& time_memory);

/// Every runnable plan of the request's space (each passes check_plan and FrameworkTraits::runs: the search
/// only offers what the chosen framework can execute).
std::vector<PlanSpec> enumerate_plans(const SearchRequest& r);

/// Where a search is, for a progress display: evaluating every plan with the analytic engine,
/// then re-simulating the best with SimGrid.
enum class SearchStage { evaluate, simgrid };
using SearchProgress = std::function<void(SearchStage stage, long done, long total)>;

/// Worker threads when SearchRequest::threads is 0: the CPUs this process may run on (its
/// affinity mask, so `taskset` and mpirun's core binding are honoured), shared among the
/// `processes_per_node` processes of one search on this node that are not bound apart.
unsigned default_threads(int processes_per_node = 1);

/// The search; `progress` is called from worker threads now and then. Equivalent to
/// evaluate_plans over all plans, rank_candidates, then resimulate_top.
SearchResult search_plans(const SearchRequest& r, const SearchProgress& progress = {});

/// Evaluates the plans whose index i has i % shares == share (with r.threads threads): fit (with
/// offload where nothing else fits), then the analytic engine.
EvaluatedShare evaluate_plans(const SearchRequest& r, const std::vector<PlanSpec>& plans, int share = 0,
                              int shares = 1, const SearchProgress& progress = {});

/// The shares' fitting plans in one deterministic order (iteration time, then the plan's fields),
/// the top K, the Pareto front, the TeraPipe bests, the closest miss: a search's result before
/// SimGrid.
SearchResult rank_candidates(const SearchRequest& r, long enumerated, std::vector<EvaluatedShare> shares);

/// Re-simulates ranked plans with SimGrid: those whose rank index i has i % shares == share.
void resimulate_top(const SearchRequest& r, SearchResult& res, int share = 0, int shares = 1,
                    const SearchProgress& progress = {});

/// The execution model the plans of a search with ZeRO stage `zero` share (the request's
/// framework, GPU and dtype; the calibrated parameters whose scope matches such a plan).
cost_models::ExecutionModel execution_for(const SearchRequest& r, int zero = 0);

/// The execution models a search's candidates share, one per class of plans that calibrated
/// scopes tell apart (cost_models/calibrated.hpp): the request fixes framework, GPU, dtype and
/// the GPU count, so what remains is the ZeRO stage (a parameter scoped by min_zero, e.g. FSDP's
/// per-unit host time, applies to the sharded candidates only). Each candidate is then priced
/// with the very model `foresight simulate` resolves for it alone.
class SearchExecutions {
 public:
  explicit SearchExecutions(const SearchRequest& r);
  const cost_models::ExecutionModel& of(const PlanSpec& p) const;
  /// The communication model with that execution's calibrated parameters applied.
  const CommModel& comm_of(const PlanSpec& p) const;

 private:
  const SearchRequest* request_;
  std::vector<cost_models::ExecutionModel> by_zero_;  // index: ZeRO stage 0..3
  std::vector<CommModel> comm_by_zero_;
};

/// TeraPipe's optimal slices for a plan (schedule terapipe), from planner/terapipe_slicing.hpp.
std::vector<int> terapipe_slices(const SearchRequest& r, const cost_models::ExecutionModel& x, const PlanSpec& plan);
/// The experiment with its TeraPipe token slices filled by that dynamic program when the file
/// leaves them empty (`token_slices: []`), as validate and simulate run it; otherwise unchanged.
Experiment with_token_slices(Experiment e, const cost_models::ExecutionModel& x);

/// Where `plan` ranks among the search's fitting plans by analytic iteration time (1 = best),
/// and its prediction; no rank when it does not fit.
struct PlanStanding {
  std::optional<long> rank;
  long of = 0;
  bool fits = false;
  sim::Prediction prediction;
};
PlanStanding rank_of(const SearchRequest& r, const SearchResult& result, const PlanSpec& plan);

/// An experiment for one plan of the request (the simulator's input).
Experiment experiment_for(const SearchRequest& r, const PlanSpec& plan);

}  // namespace foresight::planner
