// The trainer's compute on a CPU device, op by op (cost_models/host_profile.hpp): what
// layer_times, edge_times and the optimizer step return when the execution runs on a host.
#pragma once

#include "core/model.hpp"
#include "core/plan.hpp"
#include "cost_models/host_profile.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::cost_models {

/// One layer for one micro-batch (or TeraPipe slice of `tokens` tokens attending to `context`
/// positions), as trainer/layer.cpp runs it: LayerOpTimes::attention_core forward is exactly
/// what selective recompute re-runs.
LayerTimes host_layer_times(const HostOps& ops, const ModelSpec& m, const PlanSpec& p, int tokens, int context,
                            bool moe_layer);
/// Embedding (first stage) and final norm + head + loss (last stage), trainer/gpt.cpp.
EdgeTimes host_edge_times(const HostOps& ops, const ModelSpec& m, const PlanSpec& p, int tokens);
/// One optimizer step of a rank holding `params` parameters in `tensors` tensors, of which it
/// updates `state_params` (all of them, or its ZeRO-1 shard).
Seconds host_optimizer_time(const HostOps& ops, double params, double state_params, int tensors);

}  // namespace foresight::cost_models
