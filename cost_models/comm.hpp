// Communication cost model: the time of one NCCL collective (all-reduce, all-gather, reduce-scatter,
// all-to-all, broadcast) or point-to-point send/recv on a communicator placed on a cluster, as NCCL
// performs it: ring, double binary tree, NVLink SHARP (NVLS) and a hierarchical variant; LL, LL128
// and Simple protocols chosen by size the way NCCL's tuner chooses them; bandwidth from the link
// class (NVSwitch, NVLink mesh, PCIe, NIC) that the group's placement makes the bottleneck.
// Left out: contention between *different* collectives (SimGrid's job), IB SHARP / CollNet, PAT,
// NCCL's per-channel caps and medium-size tree correction table, and PCIe limits on GPUDirect RDMA.
// Derivations and sources: cost_models/README-comm.md.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "core/enums.hpp"
#include "core/hardware.hpp"
#include "core/units.hpp"

namespace foresight {

namespace cost_models {
struct InNodeNccl;
struct HostProfile;
struct CalibratedTerms;
}

/// The collectives NCCL offers (send_recv: one point-to-point transfer per rank pair).
enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv };

/// How a collective is run. `automatic` lets the model pick as NCCL's tuner does; `hierarchical`
/// (reduce-scatter in the node, all-reduce across nodes, all-gather in the node) is never picked
/// automatically because NCCL does not run it; `point_to_point` is what all-to-all and send/recv use.
enum class CommAlgorithm { automatic, ring, tree, nvls, hierarchical, point_to_point };

/// NCCL's wire protocols: Simple (bulk, highest bandwidth), LL (8-byte lines with a 4-byte flag,
/// lowest latency), LL128 (128-byte lines with an 8-byte flag, NVLink only).
enum class NcclProtocol { simple, ll, ll128 };

/// The link class that limits a collective's bandwidth.
enum class CommLink { none, nvlink, pcie, nic, network_core };

template <>
struct EnumNames<Collective> {
  static constexpr auto kList = std::to_array<std::pair<Collective, const char*>>(
      {{Collective::all_reduce, "all-reduce"}, {Collective::all_gather, "all-gather"},
       {Collective::reduce_scatter, "reduce-scatter"}, {Collective::all_to_all, "all-to-all"},
       {Collective::broadcast, "broadcast"}, {Collective::send_recv, "send-recv"}});
};
template <>
struct EnumNames<CommAlgorithm> {
  static constexpr auto kList = std::to_array<std::pair<CommAlgorithm, const char*>>(
      {{CommAlgorithm::automatic, "automatic"}, {CommAlgorithm::ring, "ring"},
       {CommAlgorithm::tree, "tree"}, {CommAlgorithm::nvls, "nvls"},
       {CommAlgorithm::hierarchical, "hierarchical"}, {CommAlgorithm::point_to_point, "p2p"}});
};
template <>
struct EnumNames<NcclProtocol> {
  static constexpr auto kList = std::to_array<std::pair<NcclProtocol, const char*>>(
      {{NcclProtocol::simple, "simple"}, {NcclProtocol::ll, "ll"}, {NcclProtocol::ll128, "ll128"}});
};
template <>
struct EnumNames<CommLink> {
  static constexpr auto kList = std::to_array<std::pair<CommLink, const char*>>(
      {{CommLink::none, "none"}, {CommLink::nvlink, "nvlink"}, {CommLink::pcie, "pcie"},
       {CommLink::nic, "nic"}, {CommLink::network_core, "network-core"}});
};

/// Where a communicator's ranks sit. Examples: a TP group of 8 in one node {8, 8, 1}; a DP group of
/// 8 replicas, one rank per node {8, 1, 8}; a pipeline send between two nodes {2, 1, 2}.
struct CommGroup {
  int ranks = 1;           // ranks in the communicator
  int ranks_per_node = 1;  // of those, on each node it uses (same on every node)
  int nodes = 1;           // nodes it spans; ranks == ranks_per_node * nodes
  /// Ranks on different nodes sit on the same local GPU index, so inter-node traffic stays on one
  /// rail (leaf switch) of a rail-optimised fabric; false sends it through the core (oversubscribed).
  bool rail_aligned = true;
  /// Identical groups running the same collective at the same moment and sharing each node's NICs
  /// (e.g. the 8 data-parallel groups of a TP=8 plan). 1 = this group alone.
  int concurrent_groups = 1;
  /// Node indices between consecutive nodes of the group (a DP group whose ranks are 2 nodes apart:
  /// 2). With the cluster's tiers, it says which switch groups (pods) the group spans.
  int node_stride = 1;
  /// Nodes of the cyclic sequence whose hops run at the same moment as this group's (a ring's own
  /// nodes; for a pipeline send, every stage boundary of the pipeline sends at once). 0: `nodes`.
  int ring_nodes = 0;
};

/// One collective's predicted cost, with what decided it.
struct CommEstimate {
  Seconds time;                        // latency + transfer
  Seconds latency;                     // size-independent part (NCCL tuner's latency term)
  Seconds transfer;                    // size-dependent part
  CommAlgorithm algorithm = CommAlgorithm::ring;  // the one used (never automatic)
  NcclProtocol protocol = NcclProtocol::simple;
  BytesPerSecond algorithm_bandwidth;  // message / time (nccl-tests "algbw")
  BytesPerSecond bus_bandwidth;        // algbw * bus_bandwidth_factor (nccl-tests "busbw")
  CommLink bottleneck = CommLink::none;
};

/// NCCL's latency table: microseconds per [algorithm][protocol], algorithm index ring, tree, nvls;
/// protocol index ll, ll128, simple (NCCL's order).
using NcclLatencyTable = std::array<std::array<double, 3>, 3>;

/// Efficiencies and latencies of NCCL on real links. Each default cites its source in
/// nccl_defaults() (comm.cpp) and README-comm.md; none is fitted to the bus bandwidths we validate.
struct CommParams {
  // Achievable fraction of a link's per-direction spec for NCCL's bulk (Simple) traffic.
  double nvlink_efficiency = 0.0;   // NVLink/NVSwitch and NVLink mesh
  double pcie_efficiency = 0.0;     // GPU-to-GPU over PCIe
  double nic_efficiency = 0.0;      // RDMA NIC (InfiniBand / RoCE), fat-tree clusters
  // NCCL over TCP sockets (ethernet clusters), by how many of a node's GPUs drive the NIC at once:
  // one alone, and eight (the host-staged proxy threads and their socket streams then compete).
  double socket_efficiency_one = 0.0;
  double socket_efficiency_eight = 0.0;
  double nvls_efficiency = 0.0;     // NVLink SHARP on top of nvlink_efficiency
  // NVLink SHARP needs NVSwitch gen3 (NVLink4, 450 GB/s per direction) or later.
  BytesPerSecond nvls_min_nvlink_bandwidth;
  // Share of the per-GPU NVLink-mesh bandwidth (cluster file: all 6 links of a V100 hybrid cube
  // mesh) that a group of 2 or of 3..7 GPUs can use.
  double mesh_pair_fraction = 0.0;
  double mesh_quad_fraction = 0.0;
  // Bus bandwidth a ring of 2 (of 4) GPUs of one NVSwitch node reaches, as a fraction of what a
  // ring of all 8 reaches (nccl-tests; 1 where the generation was not measured). Groups of 3 and
  // 5..7 interpolate in log2 of their size; 8 and more get the whole NVSwitch rate.
  double nvswitch_pair_fraction = 1.0;
  double nvswitch_quad_fraction = 1.0;
  // Protocol and algorithm bandwidth factors (NCCL tuner, ncclTopoTuneModel).
  double ll_bandwidth_fraction = 0.0;     // ring LL
  double ll128_bandwidth_fraction = 0.0;  // ring/tree LL128
  double tree_bandwidth_fraction = 0.0;   // tree, any protocol
  double tree_ll_divisor = 0.0;           // tree LL: busbw / this
  double tree_ll128_one_node_fraction = 0.0;
  double tree_ll128_multi_node_fraction = 0.0;
  // LL cannot beat these bus bandwidths (one node; two nodes; more).
  std::array<BytesPerSecond, 3> ll_max_bus_bandwidth{};
  // Latencies (microseconds): base per algorithm/protocol and per hop by hardware class.
  NcclLatencyTable base_latency_us{};
  NcclLatencyTable nvlink_hop_latency_us{};
  NcclLatencyTable pcie_hop_latency_us{};
  NcclLatencyTable net_hop_latency_us{};
  Seconds net_overhead;           // per network operation posted by the proxy
  double simple_net_overhead_multiplier = 0.0;
  // all-to-all is grouped send/recv: one posted operation per peer.
  Seconds all_to_all_per_peer_latency;
  bool nvls_enabled = true;  // false: as NCCL_NVLS_ENABLE=0
  /// Thread blocks a bulk NCCL collective keeps resident while it overlaps compute: each holds an
  /// SM the compute kernels cannot use (24 for an all-gather beside a cuBLAS GEMM on an H100
  /// under FSDP-style prefetch, Nsight Systems trace in NVIDIA developer forum thread 337991,
  /// "Compute-Communication Overlap Causes Severe GEMM Performance Degradation", 2025).
  int overlap_ctas = 24;

  /// NCCL 2.30.7's tuner constants and link efficiencies from NCCL's topology model, with the
  /// GPU-generation-specific ones (NVLS efficiency, single-node LL bandwidth cap) of Ampere.
  static CommParams nccl_defaults();
  /// The same with NCCL's per-generation constants picked by CUDA compute capability
  /// (NCCL's compCapIndex: Volta < 8, Ampere 8.x, Hopper 9.x, Blackwell >= 10).
  static CommParams nccl_defaults(double compute_capability);
};

/// The cost model. Pure: the same inputs give the same answer; no state besides the cluster.
class CommModel {
 public:
  /// The fraction of a NIC's line rate the group's traffic reaches: RDMA's, or on Ethernet the
  /// socket rate of its GPUs per node driving the NIC (ranks per node x concurrent groups).
  double nic_efficiency(const CommGroup& g) const;
  /// With NCCL's constants for the cluster's GPU generation (CommParams::nccl_defaults(cc)).
  explicit CommModel(const ClusterSpec& cluster);
  CommModel(const ClusterSpec& cluster, CommParams params);
  /// NCCL's constants with the calibrated parameters of an execution applied (those that act on
  /// communication in general rather than one kind of collective: socket transport efficiency),
  /// and the GPU's measured in-node collectives where the scenario library has them
  /// (cost_models/in_node_nccl.hpp): what every prediction uses.
  CommModel(const ClusterSpec& cluster, const cost_models::CalibratedTerms& calibrated);

  /// Time of one collective. `message` follows NCCL's count*sizeof(dtype) convention: all_reduce and
  /// broadcast the buffer, all_gather the OUTPUT, reduce_scatter the INPUT, all_to_all the total bytes
  /// each rank sends (including its own slice), send_recv the bytes one rank sends to its peer.
  /// A group of one rank costs zero. Throws InternalError when the group does not fit the cluster or
  /// the algorithm cannot run this collective on this group (see supports()).
  Seconds time(Collective c, Bytes message, const CommGroup& group,
               CommAlgorithm algorithm = CommAlgorithm::automatic) const;

  /// As time(), with the algorithm and protocol chosen, both bandwidths and the bottleneck link.
  CommEstimate estimate(Collective c, Bytes message, const CommGroup& group,
                        CommAlgorithm algorithm = CommAlgorithm::automatic) const;

  /// Whether `algorithm` can run collective `c` on `group` on this cluster.
  bool supports(Collective c, const CommGroup& group, CommAlgorithm algorithm) const;

  /// nccl-tests' bus-bandwidth factor (PERFORMANCE.md): busbw = algbw * factor. all_reduce
  /// 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, send_recv 1.
  static double bus_bandwidth_factor(Collective c, int ranks);

  const ClusterSpec& cluster() const { return cluster_; }
  const CommParams& params() const { return params_; }
  /// Whether `c` over `g` is priced from measurements of this GPU's board (one node, the automatic
  /// algorithm, a measured curve of that collective on at most a node's GPUs; in_node_ratio): the
  /// condition estimate() prices by. The calibrated shares of sim/costing.cpp (MoE's all-to-all,
  /// Megatron-LM 2020-21's blocking TP all-reduces) then scale the measured rate.
  bool measured_in_node(Collective c, const CommGroup& g, CommAlgorithm a = CommAlgorithm::automatic) const;
  /// How collectives inside one node are priced: the measured table's provenance, or NCCL's
  /// tuner formula when this GPU has none (or the model was built without an execution's terms).
  std::string in_node_pricing() const;

 private:
  struct Path;  // the per-rank bandwidth a group's traffic sees, and where it is limited
  void check_group(const CommGroup& g) const;
  Path ring_path(const CommGroup& g) const;
  BytesPerSecond nic_bandwidth_per_node(const CommGroup& g) const;
  /// The fraction of line rate NCCL's socket transport reaches when `gpus` GPUs of a node send
  /// through its NIC at once (interpolated in log2 between one and eight, held beyond).
  double socket_efficiency(double gpus) const;
  BytesPerSecond intra_bandwidth(int ranks_in_node) const;
  double tier_penalty(const CommGroup& g) const;
  CommEstimate ring(Collective c, Bytes message, const CommGroup& g, NcclProtocol p) const;
  CommEstimate tree(Bytes message, const CommGroup& g, NcclProtocol p) const;
  CommEstimate nvls(Bytes message, const CommGroup& g) const;
  CommEstimate hierarchical(Bytes message, const CommGroup& g) const;
  CommEstimate point_to_point(Collective c, Bytes message, const CommGroup& g) const;
  CommEstimate best(Collective c, Bytes message, const CommGroup& g, CommAlgorithm a) const;
  void finish(CommEstimate& e, Collective c, Bytes message, int ranks) const;
  CommEstimate measured(Collective c, Bytes message, const CommGroup& g) const;
  /// Measured over the formula's time of `c` inside one node, for a group of `ranks` at `message`
  /// bytes: the nearest measured group that fits in a node, at the nearest measured size; 0 where
  /// nothing was measured. In a node the formula's estimate is scaled by it; across nodes a
  /// collective is never cheaper than the same one so priced over min(ranks, GPUs per node) GPUs
  /// (NICs do not beat the NVSwitch where the formula's ramp is off).
  double in_node_ratio(Collective c, Bytes message, int ranks) const;
  /// `e`'s latency and transfer times `k`, its bandwidths recomputed.
  void rescale(CommEstimate& e, double k, Collective c, Bytes message, int ranks) const;

  ClusterSpec cluster_;
  CommParams params_;
  /// A CPU device (GpuSpec::host_profile): collectives inside the host are the trainer's MPI
  /// communicator as measured there, not NCCL.
  std::shared_ptr<const cost_models::HostProfile> host_;
  /// NCCL inside one node as nccl-tests measured it on this GPU's board; null: the formula alone.
  std::shared_ptr<const cost_models::InNodeNccl> in_node_;
};

}  // namespace foresight
