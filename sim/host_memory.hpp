// Peak memory of the bundled trainer's ranks on a CPU device (issue 24): what its backend's
// allocation counter (Backend::peak_bytes, the summary's memory) reaches, tensor by tensor as
// trainer/layer.cpp, trainer/gpt.cpp and trainer/trainer.cpp allocate and free them, over the
// stage's schedule (sim/schedule.hpp). Everything is fp32. Left out: the allocation padding of the
// flat parameter buffer (at most dp - 1 elements), MPI's own buffers (outside the counter).
#pragma once

#include <vector>

#include "core/experiment.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/memory.hpp"

namespace foresight::sim {

/// Per stage: weights, gradients and AdamW moments of the flat buffers (moments sharded under
/// ZeRO-1), and as `activations` the highest sum, over the stage's schedule, of the stashed units
/// (layer activations, the head's logits), the outputs waiting for the next pipeline exchange (the
/// trainer completes each batch of sends and receives before it computes again; interleaved steady
/// state: a forward and a backward between two exchanges), and the working set of the op running.
std::vector<cost_models::MemoryBreakdown> host_memory_per_stage(const Experiment& e,
                                                                const cost_models::ExecutionModel& x);

}  // namespace foresight::sim
