// Pipeline schedules: the order in which each pipeline stage runs its forward and backward passes.
// GPipe (Huang et al. 2019): all forwards, then all backwards. 1F1B (PipeDream-Flush, Narayanan et
// al. 2021 sec. 2.2.1): p-s-1 warm-up forwards, then one forward one backward, then cool-down.
// Interleaved 1F1B (Narayanan et al. 2021 sec. 2.2.2, Megatron-LM's schedule): each stage holds v
// model chunks, micro-batches advance in groups of p. TeraPipe (Li et al. 2021): GPipe over
// (micro-batch, token slice) units, slices in order forward and in reverse backward.
// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B whose backward passes on stage
// s > 0 may compute only the input gradients (B) and leave the weight gradients (W) for later, so
// that the gradient reaches the previous stage sooner and the deferred Ws fill the cool-down's
// bubbles: bubble (p - 1)(F + B - 2W) against 1F1B's (p - 1)(F + B).
// DualPipe (DeepSeek-AI 2024, DeepSeek-V3 report sec. 3.2.1): half the micro-batches enter at
// stage 0 and half at stage p - 1, each stage holding the segment of both directions (model chunk
// 0: segment s, chunk 1: segment p - 1 - s); in the steady state a forward of one direction runs
// together with a backward of the other, each one's communication hidden under the other's
// computation, and zero-bubble Ws fill the ramps: bubble (p/2 - 1)(F&B + B - 3W).
#pragma once

#include <vector>

#include "core/enums.hpp"

namespace foresight::sim {

/// forward; backward (input and, unless split, weight gradients); weight: a split backward's
/// deferred weight gradients (zero-bubble schedules).
enum class Pass { forward, backward, weight };
inline constexpr int kPasses = 3;

/// One unit of work on one stage: a pass of one micro-batch (and token slice) through one chunk.
struct ScheduledOp {
  Pass pass = Pass::forward;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank, 0..v-1 (ScheduleShape::segment gives its segment)
  int slice = 0;  // TeraPipe token slice, 0..slices-1 (0 otherwise)
  /// Backward only: the input gradients alone; the weight gradients follow later as a Pass::weight
  /// op of the same micro-batch, chunk and slice.
  bool split = false;
  /// Forward only (DualPipe): run together with the backward that follows it, each one's
  /// communication overlapped with the other's computation.
  bool paired = false;
};

struct ScheduleShape {
  Schedule schedule = Schedule::one_f_one_b;
  int stages = 1;          // p
  int microbatches = 1;    // m, per pipeline per iteration
  int virtual_stages = 1;  // model chunks per stage: v interleaved, 2 DualPipe, else 1
  int slices = 1;          // TeraPipe token slices per micro-batch

  /// Segments one micro-batch passes through, in model order: p x v, or p under DualPipe.
  int segments() const { return pipeline_segments(schedule, stages, virtual_stages); }
  /// The segment model chunk `chunk` of `stage` runs (core/enums.hpp pipeline_segment).
  int segment(int stage, int chunk) const { return pipeline_segment(schedule, stages, stage, chunk); }
  /// Where segment `g` of micro-batch `mb` runs. DualPipe: micro-batches [0, m/2) enter at stage 0
  /// (chunk 0), [m/2, m) at stage p - 1 (chunk 1).
  struct Place {
    int stage, chunk;
  };
  Place place(int mb, int g) const {
    if (schedule == Schedule::dualpipe)
      return 2 * mb < microbatches ? Place{g, 0} : Place{stages - 1 - g, 1};
    return {g % stages, g / stages};
  }
};

/// The ordered ops of `stage` under the shape's schedule. Every (pass, microbatch, chunk, slice)
/// appears exactly once.
std::vector<ScheduledOp> stage_schedule(const ScheduleShape& shape, int stage);

}  // namespace foresight::sim
