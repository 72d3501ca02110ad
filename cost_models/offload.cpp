#include "cost_models/offload.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "cost_models/memory.hpp"

namespace foresight::cost_models {

namespace {
Seconds transfer_time(Bytes bytes, BytesPerSecond bandwidth) {
  if (bytes.value() <= 0) return Seconds(0);
  FORESIGHT_CHECK(bandwidth.value() > 0) << "host PCIe bandwidth is " << bandwidth.value()
                                         << " B/s but " << bytes.value() << " B must move";
  return bytes / bandwidth;
}
}  // namespace

int gpus_sharing_host(const ClusterSpec& cluster, const PlanSpec& plan) {
  return std::max(1, std::min(cluster.gpus_per_node, plan.gpus()));
}

BytesPerSecond host_link_bandwidth(const ClusterSpec& cluster, const PlanSpec& plan) {
  const BytesPerSecond own = cluster.host.pcie_bandwidth;
  if (!(cluster.host.pcie_node_bandwidth.value() > 0)) return own;
  return min(own, cluster.host.pcie_node_bandwidth / double(gpus_sharing_host(cluster, plan)));
}

OffloadCost offload_cost(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                         const PlanSpec& plan, const ClusterSpec& cluster, int stage) {
  OffloadCost cost;
  if (plan.offload.optimizer) {
    const StageParameters params = parameters_on_gpu(*x.framework, model, plan, stage);
    const double expert_dp = plan.expert_dp();
    const double owned = plan.zero >= 1 ? params.dense / plan.shard_ways() + params.expert / expert_dp
                                        : params.total();
    // Unsharded bytes per parameter: what one parameter's update moves and keeps.
    const StateBytesPerParam per_param = state_bytes_per_param(x.bytes, 0, 1.0);
    const OffloadedGradientBytes grads =
        x.framework->offloaded_gradient_bytes(plan, stage, plan.micro_batches(training), per_param.grads);
    cost.optimizer_to_host = Bytes(owned * grads.to_host);
    // The model copy (not autocast's) and any gradients brought back between micro-batches.
    cost.optimizer_to_device = Bytes(owned * (x.bytes.weight + grads.to_device));
    cost.host_memory_per_gpu += Bytes(owned * (per_param.optimizer + grads.host_kept));
    const BytesPerSecond host_bw = cluster.host.memory_bandwidth;
    FORESIGHT_CHECK(host_bw.value() > 0 && cluster.gpus_per_node > 0)
        << "an offloaded optimizer needs the host's memory bandwidth (check_plan refuses plans without it)";
    const BytesPerSecond share = host_bw / double(gpus_sharing_host(cluster, plan));
    cost.host_optimizer_time = Bytes(owned * x.framework->host_optimizer_bytes_per_param) / share;
  }
  const double fraction = std::clamp(plan.offload.activations, 0.0, 1.0);
  if (fraction > 0) {
    const int v = plan.model_chunks();
    const double units = double(plan.micro_batches(training)) * v;
    const Bytes moved = layer_activation_bytes_per_unit(x, model, plan, stage) * (fraction * units);
    cost.activations_to_host = moved;
    cost.activations_to_device = moved;
    cost.host_memory_per_gpu += stashed_layer_activation_bytes(x, model, training, plan, stage) * fraction;
  }
  const BytesPerSecond link = host_link_bandwidth(cluster, plan);
  cost.to_host_time = transfer_time(cost.to_host(), link);
  cost.to_device_time = transfer_time(cost.to_device(), link);
  cost.host_memory_per_node = cost.host_memory_per_gpu * double(gpus_sharing_host(cluster, plan));
  return cost;
}

Bytes offload_host_memory_per_node(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                                   const PlanSpec& plan, const ClusterSpec& cluster) {
  Bytes need;
  if (x.host || !(plan.offload.optimizer || plan.offload.activations > 0)) return need;
  for (int s = 0; s < plan.pp; ++s)
    need = max(need, offload_cost(x, model, training, plan, cluster, s).host_memory_per_node);
  return need;
}

Bytes host_memory_shortfall(const OffloadCost& cost, const HostSpec& host) {
  return max(cost.host_memory_per_node - host.memory, Bytes(0));
}

bool host_memory_fits(const OffloadCost& cost, const HostSpec& host) {
  return cost.host_memory_per_node <= host.memory;
}

}  // namespace foresight::cost_models
