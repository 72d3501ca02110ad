// What a training run reports: one record per step (printed as the per-step log line and written
// to the JSON summary from one field table), and the run's summary with the plan's prediction
// beside the measurement. TFLOP/s and MFU use model FLOPs (Narayanan et al. 2021 eq. 3 without
// recompute, core/flops.hpp), per rank; MFU needs a peak (--peak-tflops) and is absent without.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan_json.hpp"

namespace foresight::trainer {

struct StepRecord {
  int step = 0;               // 1-based
  double loss = 0;            // mean token cross-entropy over the global batch, nats
  double lr = 0;
  double grad_norm = 0;       // before clipping
  double step_s = 0;          // slowest rank, wall clock
  double tokens_per_s = 0;    // global batch tokens / step_s
  double tflops_per_rank = 0; // model FLOPs / step_s / ranks, in 1e12 FLOP/s
  std::optional<double> mfu;  // tflops_per_rank / peak
  double memory_MiB = 0;      // peak backend allocation of the most loaded rank, MiB (2^20 bytes)
  double offload_MiB = 0;     // activations moved to the host and back (both directions), all ranks, MiB
};

struct RunSummary {
  std::string status = "ok";  // "ok", "stopped" (--stop-after) or "non-finite loss at step N"
  int first_step = 1;         // 1 unless resumed
  int last_step = 0;
  int ranks = 1;
  std::string backend;
  std::string comm;           // what carried the messages (Communicator::library(): mpi, nccl-standin, ...)
  std::string compute_dtype;  // what the backend computed in (cpu: fp32 whatever the plan says)
  std::string data;
  int dp_buckets = 0;
  std::string dp_reduction = "all-reduce";  // of the data-parallel gradients: or "reduce-scatter" (ZeRO-1)
  std::vector<StepRecord> steps;
};

/// "step 3/20 | loss 5.5123 | lr 1.00e-03 | ..." with units.
std::string format_step(const StepRecord& r, int total_steps);

/// The JSON summary: run facts, per-step records, and measured vs the plan's prediction
/// (measured iteration time = median step time, skipping the first step when there are more).
nlohmann::ordered_json summary_json(const RunSummary& s, const ExecutablePlan& plan, const std::string& plan_file);

}  // namespace foresight::trainer
