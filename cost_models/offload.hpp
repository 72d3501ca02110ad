// Offload to host memory: what a plan moves from GPU memory to the host, the PCIe traffic that
// costs per iteration and the raw transfer time at the host link's bandwidth, and the host memory
// it needs. Optimizer offload follows ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840, sec. 4):
// the optimizer state and step live on the CPU; gradients go down and updated 16-bit weights come
// back once per iteration. Activation offload moves a fraction of every stashed micro-batch out
// after its forward and back before its backward. Left out: whether the transfers overlap compute
// (the simulator decides), CPU Adam time, NVMe tiers, pinned-memory registration limits.
#pragma once

#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "cost_models/execution.hpp"

namespace foresight::cost_models {

/// PCIe traffic of one GPU per iteration, the time it takes, and the host memory it needs.
struct OffloadCost {
  Bytes optimizer_to_host;      // gradients of the parameters this GPU updates on the host
  Bytes optimizer_to_device;    // the updated model-dtype weights coming back (and gradients
                                // brought back between micro-batches)
  Bytes activations_to_host;    // offloaded fraction of every micro-batch's stashed activations
  Bytes activations_to_device;  // the same bytes prefetched back for the backward pass
  Seconds to_host_time;         // to_host() / host_link_bandwidth
  Seconds to_device_time;       // to_device() / host_link_bandwidth
  /// The optimizer step on the host CPUs over this GPU's P parameters: P x the framework's host
  /// optimizer bytes per parameter over this GPU's share of the node's host memory bandwidth
  /// (every GPU of the plan on the node steps at once, after its backward, so the node's CPUs
  /// stream all their states together; a plan on fewer GPUs than a node has leaves the CPUs to
  /// the GPUs it uses). Bound by memory, not arithmetic: a fused Adam does about 15 flops per 28
  /// bytes.
  Seconds host_optimizer_time;
  Bytes host_memory_per_gpu;    // optimizer state + gradient staging + offloaded activations
  Bytes host_memory_per_node;   // host_memory_per_gpu x gpus_sharing_host

  Bytes to_host() const { return optimizer_to_host + activations_to_host; }
  Bytes to_device() const { return optimizer_to_device + activations_to_device; }
  /// PCIe is full duplex: the two directions overlap, so the link is busy for the longer one.
  Seconds time() const { return max(to_host_time, to_device_time); }
};

/// GPUs of the plan on one node, which share its host (CPUs, memory, PCIe root complexes): the
/// node's GPUs, or all of the plan's where it runs on fewer.
int gpus_sharing_host(const ClusterSpec& cluster, const PlanSpec& plan);

/// One GPU's host link rate while the plan's other GPUs on its node move data at once: the GPU's
/// own link (host.pcie_bandwidth) or its share of the node's (host.pcie_node_bandwidth, where the
/// cluster states it), whichever is lower. On a DGX-2, 12 GB/s for one GPU alone but 3 GB/s each
/// when all 16 read host memory (Rajbhandari et al. 2021, ZeRO-Infinity, arXiv:2104.07857,
/// Fig. 2b).
BytesPerSecond host_link_bandwidth(const ClusterSpec& cluster, const PlanSpec& plan);

/// Offload cost of one GPU of pipeline stage `stage` (0-based) per iteration.
/// Optimizer (plan.offload.optimizer): the GPU owns P parameters' updates, its ZeRO shard
/// (params/dp, experts/(dp/ep)) when zero >= 1, else all it holds (ZeRO-Offload needs each
/// replica to step its own copy then). It sends P gradients as its framework moves them
/// (FrameworkTraits::offloaded_gradient_bytes: once in the gradient dtype, or DeepSpeed's fp32
/// copies and, with several micro-batches a step, its 16-bit round trips) and receives P weights
/// in the model dtype; the host keeps P x the optimizer bytes/param (fp32 master, m, v,
/// Megatron's fp32 main-grad copy) plus the gradients it holds for them, and its CPUs step them
/// (host_optimizer_time; the cluster must state host.memory_GBps).
/// Activations (plan.offload.activations = f): per iteration every unit (micro-batch, or
/// micro-batch x model chunk when interleaved) sends f x its stage activations out and back;
/// the host holds f x the peak stash.
OffloadCost offload_cost(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                         const PlanSpec& plan, const ClusterSpec& cluster, int stage);

/// The host memory a node needs for what the plan offloads: the most demanding stage's
/// host_memory_per_node (as if every GPU of the node held that stage). Zero when nothing is
/// offloaded, and for the bundled trainer's CPU backend (x.host), whose device is the host.
Bytes offload_host_memory_per_node(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                                   const PlanSpec& plan, const ClusterSpec& cluster);

/// By how much the offload's host memory per node exceeds the node's memory; zero when it fits.
Bytes host_memory_shortfall(const OffloadCost& cost, const HostSpec& host);

/// Whether the offload's host memory per node fits in the node's memory.
bool host_memory_fits(const OffloadCost& cost, const HostSpec& host);

}  // namespace foresight::cost_models
