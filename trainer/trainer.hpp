// Runs the training a plan.json describes, on this rank's share of the layout: builds the
// communicator groups, this rank's model stage and parameters, walks the pipeline schedule for
// each step, reduces gradients over data-parallel replicas (bucketed, overlapped with the last
// backward) and the tied embedding over the first and last stage, clips, steps AdamW (on its
// shard with ZeRO-1, then all-gathers the parameters), and checkpoints. Returns the run summary; never prints (main reports through `on_step`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/enums.hpp"
#include "core/plan_json.hpp"
#include "trainer/communicator.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/precision.hpp"
#include "trainer/summary.hpp"

namespace foresight::trainer {

/// What carries collectives and pipeline messages. mpi: MPI (device tensors copied through the
/// host). nccl: NCCL bootstrapped over MPI (nccl_communicator.hpp); on a host backend, the NCCL
/// communicator over its MPI-backed stand-in (how CI runs the NCCL code).
enum class CommLibrary { mpi, nccl };

}  // namespace foresight::trainer

template <>
struct foresight::EnumNames<foresight::trainer::CommLibrary> {
  static constexpr auto kList = std::to_array<std::pair<foresight::trainer::CommLibrary, const char*>>(
      {{foresight::trainer::CommLibrary::mpi, "mpi"}, {foresight::trainer::CommLibrary::nccl, "nccl"}});
};

namespace foresight::trainer {

struct TrainerOptions {
  std::string backend = "cpu";
  Precision precision = Precision::fp32;  // the mixed-precision recipe (precision.hpp)
  CommLibrary comm = CommLibrary::mpi;   // the CLI defaults to nccl for the cuda backends when built with NCCL
  std::uint64_t seed = 1234;             // initial weights and data order
  OptimizerConfig optimizer;             // total_steps is set from the plan's steps
  std::optional<int> steps;              // overrides plan.steps
  int stop_after = 0;                    // stop (and checkpoint) after this step; 0 = run to the end
  bool resume = false;                   // continue from checkpoint_dir/latest
  int checkpoint_every = 0;              // also checkpoint every N steps; 0 = only at the end
  std::optional<std::string> checkpoint_dir;  // overrides plan.checkpoint_dir
  std::optional<std::string> data;            // overrides plan.data
  std::int64_t dp_bucket_bytes = 25 << 20;    // target size of a gradient all-reduce bucket
  std::optional<double> peak_tflops;          // per rank, for MFU
  bool one_message_at_a_time = false;  // testing aid: each pipeline message its own batch (deadlocks 1F1B on NCCL)
};

/// Thrown on the ranks whose peer hit a user error in a collective check: the peer reports it.
class PeerFailure : public std::runtime_error {
 public:
  explicit PeerFailure(int rank) : std::runtime_error("rank " + std::to_string(rank) + " failed"), rank_(rank) {}
  int failed_rank() const { return rank_; }

 private:
  int rank_;
};

/// Runs `fn` on every rank of `world`; when it throws SpecError on any rank, the lowest such rank
/// rethrows its error and every other rank throws PeerFailure, so the error is reported once
/// and no rank is left waiting in a collective. Collective.
void agree(Communicator& world, const std::function<void()>& fn);

/// Checks that this build can run `plan` on `world_size` ranks (SpecError naming the field).
void check_runnable(const ExecutablePlan& plan, const std::string& plan_file, int world_size);

/// Trains; `on_step` is called on every rank after each step (main prints on rank 0).
RunSummary train(const ExecutablePlan& plan, const std::string& plan_file, const TrainerOptions& options,
                 Communicator& world, const std::function<void(const StepRecord&)>& on_step);

/// When a plan made for GPUs (its launch.sh runs --backend cuda) is started on a CPU backend
/// ("cpu", "cpu-staged") and even 100 GFLOP/s per rank, a generous fp32 rate for the host
/// backend's loops, would need more than a minute per step: a sentence saying so, with the
/// cluster and prediction the plan was made with and what to run instead (gpu_train_flags).
/// Empty otherwise.
std::string sized_for_gpus_note(const ExecutablePlan& plan, const std::string& backend, int ranks);

}  // namespace foresight::trainer
