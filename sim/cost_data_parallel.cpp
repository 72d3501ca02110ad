// Costers of the data-parallel gradient synchronisation and the optimizer step.
#include <algorithm>

#include "cost_models/memory.hpp"
#include "cost_models/offload.hpp"
#include "sim/costers.hpp"

namespace foresight::sim {

void cost_data_parallel(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  const FrameworkTraits& fw = *in.x.framework;
  const CommGroup dp = plan_groups(p, in.e.cluster).dp;
  const double host_ranks = std::min(p.tp, in.e.cluster.gpus_per_node);
  const int n = p.dp;
  c.dp_latency = n > 1 ? in.comm.estimate(Collective::all_reduce, Bytes(8), dp).latency : Seconds(0);
  c.dp_overlap = p.dp_overlap && n > 1;
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(fw, in.e.model, p, s);
    const Bytes grads(sp.dense * in.x.bytes.grad);
    const Bytes expert_grads(sp.expert * in.x.bytes.grad);
    const Bytes weights(sp.total() * in.x.bytes.weight);  // the model copy ZeRO gathers after the step
    Seconds sync, gather;
    Bytes sync_bytes, gather_bytes;
    if (n > 1) {
      const bool all_reduce = p.zero == 0 || fw.zero_reduction == ZeroReduction::all_reduce;
      sync = in.comm.time(all_reduce ? Collective::all_reduce : Collective::reduce_scatter, grads, dp);
      sync_bytes = grads * ((all_reduce ? 2.0 : 1.0) * (n - 1.0) / n) * host_ranks;
      if (p.zero >= 1) {
        // Each rank stepped its shard: the updated weights are all-gathered.
        gather = in.comm.time(Collective::all_gather, weights, dp);
        gather_bytes = weights * ((n - 1.0) / n) * host_ranks;
      }
    }
    // Expert gradients are replicated over dp / ep ranks.
    const int dp_over_ep = p.dp / p.ep;
    if (expert_grads > Bytes(0) && dp_over_ep > 1) {
      CommGroup eg = dp;
      eg.ranks = dp_over_ep;
      eg.nodes = std::max(1, eg.nodes * dp_over_ep / std::max(1, p.dp));
      eg.ranks_per_node = std::max(1, dp_over_ep / eg.nodes);
      eg.nodes = dp_over_ep / eg.ranks_per_node;
      sync += in.comm.time(Collective::all_reduce, expert_grads, eg);
    }
    // With the reduction overlapped, the last bucket is what must wait for the backward to finish
    // (the framework's bucket: PyTorch DDP's bucket_cap_mb, Megatron-Core's bucket_size).
    Seconds tail = sync;
    if (c.dp_overlap && sync > Seconds(0)) {
      const Bytes bucket = min(Bytes(fw.dp_overlap_bucket_bytes), grads);
      tail = min(sync, in.comm.time(p.zero >= 1 ? Collective::reduce_scatter : Collective::all_reduce, bucket, dp));
    }
    c.dp_sync_tail.push_back(tail);
    c.dp_grad_sync.push_back(sync);
    c.dp_grad_sync_bytes.push_back(sync_bytes);
    c.dp_param_gather.push_back(gather);
    c.dp_param_gather_bytes.push_back(gather_bytes);
  }
}

void cost_optimizer(const CostInputs& in, WorkloadCosts& c) {
  const PlanSpec& p = in.e.plan;
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters sp = cost_models::parameters_on_gpu(*in.x.framework, in.e.model, p, s);
    Seconds opt;
    if (p.offload.optimizer) {
      // Optimizer state on the host: gradients go down and weights come back over PCIe.
      const cost_models::OffloadCost oc = cost_models::offload_cost(in.x, in.e.model, in.e.training, p, in.e.cluster, s);
      const BytesPerSecond pcie = in.e.cluster.host.pcie_bandwidth;
      opt = oc.optimizer_to_host / pcie + oc.optimizer_to_device / pcie;
    } else {
      const double shard = p.zero >= 1 ? double(p.dp) : 1.0;
      opt = in.compute.optimizer(sp.dense / shard + sp.expert / std::max(1.0, shard / p.ep));
    }
    c.optimizer.push_back(opt);
  }
}

}  // namespace foresight::sim
