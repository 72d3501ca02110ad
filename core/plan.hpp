// The training setup (batch, precision, optimizer) and a parallel plan: how one iteration is split
// over GPUs. check_plan() holds every rule that makes a plan runnable; the loader and the planner
// both call it, so a plan file and a generated plan are judged alike.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "core/model.hpp"

namespace foresight {

struct TrainingSpec {
  int global_batch = 0;  // sequences per iteration
  Dtype dtype = Dtype::bf16;
  Optimizer optimizer = Optimizer::adam;
};

struct OffloadSpec {
  bool optimizer = false;    // optimizer state (and fp32 master weights) live in host memory
  double activations = 0.0;  // fraction of stashed activations kept in host memory, 0..1
};

struct PlanSpec {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int micro_batch = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  // Data-parallel gradient reduction in buckets while the last micro-batch's backward runs
  // (PyTorch DDP outside no_sync, Megatron-LM's --overlap-grad-reduce); false: after the backward
  // (Megatron-LM's local DDP of 2021, DeepSpeed's pipeline engine, the bundled trainer).
  bool dp_overlap = false;
  Recompute recompute = Recompute::none;
  int zero = 0;  // 0..3; 1 = distributed optimizer (optimizer state sharded over dp)
  OffloadSpec offload;
  int ep = 1;  // expert-parallel degree, carved out of dp
  std::vector<int> token_slices;  // TeraPipe slice lengths, summing to seq_len
  Framework framework = Framework::megatron;
  /// The attention kernel, when it is not the framework's own (e.g. Megatron-LM with
  /// --use-flash-attn); unset: core/framework.hpp's entry decides.
  std::optional<AttentionImpl> attention;
  Placement placement = Placement::tp_dp_pp;

  int gpus() const { return tp * pp * dp; }
  /// Micro-batches per pipeline per iteration.
  int micro_batches(const TrainingSpec& t) const { return int(t.global_batch / ((long long)dp * micro_batch)); }
  int layers_per_stage(const ModelSpec& m) const { return m.layers / pp; }
};

/// A rule a plan broke: the field (dotted path, e.g. "plan.pp"), its value and the rule, in words.
struct PlanViolation {
  std::string field;
  std::string value;
  std::string rule;
};

/// Every rule a runnable plan obeys (divisibility, ranges, schedule options), checked in order;
/// returns the first one broken. `gpus_used` is how many GPUs the run occupies.
std::optional<PlanViolation> check_plan(const ModelSpec& model, const ClusterSpec& cluster,
                                        const TrainingSpec& training, const PlanSpec& plan,
                                        int gpus_used);

/// Rules the model alone must obey (hidden % heads, kv_heads, MoE settings).
std::optional<PlanViolation> check_model(const ModelSpec& model);

}  // namespace foresight

