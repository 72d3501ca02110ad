// The costers cost_workload composes, one per concern, each filling its part of WorkloadCosts
// from the execution model (what the framework does) and the cost models (how long it takes).
// Public so that each can be tested against a hand computation on its own.
#pragma once

#include "sim/costing.hpp"

namespace foresight::sim {

/// Transformer-layer compute of every (stage, chunk, slice): forward, backward, recompute, their
/// tensor/sequence-parallel and expert-parallel collectives, and the weight-gradient
/// accumulation pass after each backward (ElementSizes::accumulate bytes per parameter, one
/// launch per parameter tensor; free for the first micro-batch where gradients are freed between
/// steps). Sizes c.chunk.
void cost_layer_chunks(const CostInputs& in, WorkloadCosts& c);

/// The embedding on the first model chunk and the LM head + loss on the last, with their
/// tensor-parallel collectives (vocab-parallel embedding all-reduce, the head's input-gradient
/// all-reduce); and the all-gather a framework re-runs before a backward when it kept only a TP
/// partition of the stage's output (FrameworkTraits::regathers_output_for_backward).
void cost_edges(const CostInputs& in, WorkloadCosts& c);

/// Activation offload: each chunk's offloaded share out after its forward and back before its
/// backward over the GPU's PCIe link (Ren et al. 2021, ZeRO-Offload, sec. 4).
void cost_activation_offload(const CostInputs& in, WorkloadCosts& c);

/// Pipeline transfers per slice, as the framework sends them (FrameworkTraits::send_forward /
/// send_backward), across nodes and inside one, with the receiver-side NVLink tail and the bytes
/// each transfer puts on a node's NICs; and which node each stage sits on.
void cost_pipeline_transfers(const CostInputs& in, WorkloadCosts& c);

/// Data-parallel gradient synchronisation per stage (all-reduce, or ZeRO's reduce-scatter or
/// all-reduce as the framework runs it, then the parameter all-gather), the expert gradients'
/// all-reduce over dp/ep, and with plan.dp_overlap the last bucket that waits for the backward.
void cost_data_parallel(const CostInputs& in, WorkloadCosts& c);

/// The optimizer step per stage over the parameters each GPU updates (its ZeRO shard), or with
/// optimizer offload the PCIe round trip of gradients and weights.
void cost_optimizer(const CostInputs& in, WorkloadCosts& c);

}  // namespace foresight::sim
