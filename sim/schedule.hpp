// Pipeline schedules: the order in which each pipeline stage runs its forward and backward passes.
// GPipe (Huang et al. 2019): all forwards, then all backwards. 1F1B (PipeDream-Flush, Narayanan et
// al. 2021 sec. 2.2.1): p-s-1 warm-up forwards, then one forward one backward, then cool-down.
// Interleaved 1F1B (Narayanan et al. 2021 sec. 2.2.2, Megatron-LM's schedule): each stage holds v
// model chunks, micro-batches advance in groups of p. TeraPipe (Li et al. 2021): GPipe over
// (micro-batch, token slice) units, slices in order forward and in reverse backward.
#pragma once

#include <vector>

#include "core/enums.hpp"

namespace foresight::sim {

enum class Pass { forward, backward };

/// One unit of work on one stage: a pass of one micro-batch (and token slice) through one chunk.
struct ScheduledOp {
  Pass pass = Pass::forward;
  int microbatch = 0;
  int chunk = 0;  // virtual stage index on this rank, 0..v-1; model segment = chunk * p + stage
  int slice = 0;  // TeraPipe token slice, 0..slices-1 (0 otherwise)
};

struct ScheduleShape {
  Schedule schedule = Schedule::one_f_one_b;
  int stages = 1;          // p
  int microbatches = 1;    // m, per pipeline per iteration
  int virtual_stages = 1;  // v (interleaved only)
  int slices = 1;          // TeraPipe token slices per micro-batch
};

/// The ordered ops of `stage` under the shape's schedule. Every (pass, microbatch, chunk, slice)
/// appears exactly once.
std::vector<ScheduledOp> stage_schedule(const ScheduleShape& shape, int stage);

}  // namespace foresight::sim
