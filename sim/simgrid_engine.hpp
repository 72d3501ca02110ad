// The SimGrid engine: replays the workload graph on a simulated platform so that flows contend.
// One host per tensor-parallel group (its NVSwitch collectives are costed by the comm model and
// replayed as delays); every transfer that crosses nodes is a real flow through the node's NICs
// (and the fat tree's core when it is oversubscribed, or the uplinks of each switch tier a flow
// crosses: leaf groups and pods are nested zones). All data-parallel replicas are instantiated,
// so pipeline and data-parallel traffic share NICs. Data-parallel collectives are coarse: one flow
// per rank to its ring neighbour plus the collective's latency term (DESIGN.md fidelity rules).
// Network model CM02 with TCP-gamma 0 and no cross-traffic, as GPU fabrics need.
// SimGrid's engine is a process-wide singleton, so each run happens in a forked child process.
#pragma once

#include <vector>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "sim/analytic_engine.hpp"

namespace foresight::sim {

struct SimgridPlatform {
  int dp = 1;  // data-parallel replicas to instantiate
  int tp = 1;
  int gpus_per_node = 8;
  Placement placement = Placement::tp_dp_pp;
  BytesPerSecond node_injection;  // what one node's NICs carry per direction, achievable
  /// What one TP group's own NICs carry (one NIC per GPU on DGX: a tp 4 group reaches 4 of the
  /// node's 8; at least one NIC when GPUs share them). Unset (0): the whole node's.
  BytesPerSecond group_injection;
  /// Bytes a flow puts on the NIC links per byte it carries: what the link rate, the fastest of
  /// the traffic classes' achievable rates, has to lose for a slower class to run at its own rate
  /// (NCCL's socket transport reaches less of the line the more GPUs drive it, CommModel::
  /// nic_efficiency): the data-parallel rings' and the pipeline sends' factors. 1 on RDMA.
  double dp_wire_factor = 1.0, pp_wire_factor = 1.0;
  Seconds network_latency;        // one-way, node to node
  double oversubscription = 1.0;  // fat-tree core: 1 = full bisection
  /// Switch tiers above the nodes (cluster.inter_node.tiers), innermost first; empty: one layer.
  /// Each group of tier t is a zone whose uplink carries its nodes' injection / (o_0 x ... x o_t).
  std::vector<NetworkTier> tiers{};
};

/// True when this build has SimGrid.
bool simgrid_available();

/// Replays `w` (one replica's graph) for all replicas; timings are those of replica 0.
/// Throws SpecError when SimGrid is not in this build.
SimResult run_simgrid(const Workload& w, const SimgridPlatform& platform);

}  // namespace foresight::sim
