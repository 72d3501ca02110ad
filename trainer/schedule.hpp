// A pipeline schedule as an explicit list of operations per stage: receives, forwards, sends and
// backwards of micro-batches (and, interleaved, of model chunks), in the order the stage executes
// them. The executor (trainer.cpp) walks the list, issuing each run of consecutive sends and
// receives as one batch (pipeline_steps), which is deadlock-free for these orders even when a send
// cannot complete before its receive is posted (NCCL's semantics): schedule_test simulates every
// stage's list under those rendezvous semantics, matching messages between a pair in issue order.
// TeraPipe token slices run as extra pipeline units (micro-batch, slice): see pipeline_units().
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace foresight::trainer {

enum class PipelineOpKind { recv_activation, forward, send_activation, recv_gradient, backward, send_gradient };

struct PipelineOp {
  PipelineOpKind kind;
  int micro_batch;  // the pipeline unit: a micro-batch, or a (micro-batch, slice) with TeraPipe
  int chunk = 0;    // model chunk of this stage (interleaved schedule), else 0
  bool operator==(const PipelineOp&) const = default;
};

/// The operations of `stage` (0-based, of `stages`) for `units` pipeline units, each stage
/// holding `chunks` model chunks (virtual stage of chunk c = c * stages + stage).
/// 1F1B: Narayanan et al. 2021 sec. 2.2 (PipeDream-Flush): stages-stage-1 warm-up forwards, then
/// alternating forward/backward, then the remaining backwards. GPipe: all forwards, then all
/// backwards. Interleaved (sec. 2.2, Megatron-LM's forward_backward_pipelining_with_interleaving):
/// chunks of `stages` micro-batches go through the chunks in turn, 2*(stages-stage-1) +
/// (chunks-1)*stages warm-up forwards, then 1F1B, then the remaining backwards. TeraPipe (Li et al.
/// 2021): every unit's forward in order, then the backwards in reverse slice order within each
/// micro-batch (a slice's key/value gradients come from the later slices), `slices` units per
/// micro-batch. Plans the trainer does not run are rejected before this is called.
std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stages, int stage, int units, int chunks = 1,
                                     int slices = 1);

/// Who a send or receive talks to and the tag that tells its message apart: the neighbouring
/// pipeline stage (wrapping from the last stage to the first between chunks) and a tag unique per
/// (unit, virtual-stage boundary, direction).
struct PipelineMessage {
  int peer_stage = 0;
  int tag = 0;
};
PipelineMessage pipeline_message(const PipelineOp& op, int stages, int stage, int chunks);

/// One step of the executor: a computation (count 1), or a batch of `count` consecutive sends and
/// receives of the op list that are posted together and complete together: one NCCL group
/// (ncclGroupStart/End), MPI Isend/Irecv + Waitall. Ops [first, first + count) of the list.
struct PipelineStep {
  std::size_t first = 0, count = 0;
  bool communication = false;
};
/// The op list as the trainer issues it: every maximal run of sends and receives between two
/// computations becomes one batch. In 1F1B's steady state this pairs the send of a forward's
/// output with the receive of a backward's input gradient (and the reverse), as Megatron-LM's
/// send_forward_recv_backward / send_backward_recv_forward do (p2p_communication.py): a stage
/// and its successor then never both sit in a lone send waiting for the other's receive.
std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineOp>& ops);

/// True for the four send / receive kinds.
bool is_message(PipelineOpKind kind);

/// "F0 F1 B0 ..." (forwards and backwards only; "F0.1" = unit 0 on chunk 1): for tests and logs.
std::string compute_order(const std::vector<PipelineOp>& ops);

}  // namespace foresight::trainer
