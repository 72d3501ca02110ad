// A pipeline schedule as an explicit list of operations per stage: receives, forwards, sends and
// backwards of micro-batches, in the order the stage executes them. The executor (trainer.cpp)
// walks the list; sends are non-blocking and receives blocking, which is deadlock-free for these
// orders. Interleaved 1F1B (virtual stages) and TeraPipe slices extend PipelineOp with a chunk
// and a token range.
#pragma once

#include <string>
#include <vector>

#include "core/enums.hpp"

namespace foresight::trainer {

enum class PipelineOpKind { recv_activation, forward, send_activation, recv_gradient, backward, send_gradient };

struct PipelineOp {
  PipelineOpKind kind;
  int micro_batch;
  bool operator==(const PipelineOp&) const = default;
};

/// The operations of `stage` (0-based, of `stages`) for `micro_batches` micro-batches.
/// 1F1B: Narayanan et al. 2021 sec. 2.2 (PipeDream-Flush): stages-stage-1 warm-up forwards, then
/// alternating forward/backward, then the remaining backwards. GPipe: all forwards, then all
/// backwards. Other schedules are rejected by the trainer before this is called.
std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stages, int stage, int micro_batches);

/// "F0 F1 B0 ..." (forwards and backwards only): for tests and logs.
std::string compute_order(const std::vector<PipelineOp>& ops);

}  // namespace foresight::trainer
