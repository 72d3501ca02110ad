// Communication cost model (see comm.hpp; derivations in README-comm.md).
// NCCL constants quoted below are from NVIDIA/nccl 2.30.7 (commit 5067397c), src/graph/tuning.cc
// (ncclTunerConstantsDefaults, ncclTopoTuneModel, getNetOverhead) and src/graph/topo.h.
#include "cost_models/comm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "cost_models/calibrated.hpp"
#include "cost_models/host_profile.hpp"
#include "cost_models/in_node_nccl.hpp"

namespace foresight {

namespace {

constexpr int kRing = 0, kTree = 1, kNvls = 2;  // NcclLatencyTable rows

int proto_index(NcclProtocol p) {
  switch (p) {
    case NcclProtocol::ll: return 0;
    case NcclProtocol::ll128: return 1;
    case NcclProtocol::simple: return 2;
  }
  return 2;
}

Seconds us(double x) { return microseconds(x); }

/// floor(log2(n)) for n >= 1, as NCCL's log2i.
int log2_floor(int n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

/// Ring steps per rank (NCCL: nsteps): all-reduce 2(n-1), all-gather/reduce-scatter n-1,
/// broadcast n-1 hops of a pipelined chain.
int ring_steps(Collective c, int n) {
  return c == Collective::all_reduce ? 2 * (n - 1) : n - 1;
}

/// Bytes each rank puts on its outgoing ring link, per byte of `message` (what busbw normalises by).
double ring_traffic_per_byte(Collective c, int n) {
  switch (c) {
    case Collective::all_reduce: return 2.0 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter: return double(n - 1) / n;
    default: return 1.0;  // broadcast: the whole buffer passes every link once
  }
}

constexpr std::array<NcclProtocol, 3> kProtocols = {NcclProtocol::ll, NcclProtocol::ll128,
                                                    NcclProtocol::simple};

}  // namespace

CommParams CommParams::nccl_defaults() {
  CommParams p;
  // NCCL's topology model (topo.h): SM80_NVLINK_BW 20.0 GB/s per NVLink3 link of 25 GB/s per
  // direction (SM70 20.0 of 25, SM90 20.6 of 25, SM100 40.1 of 50): 0.80 of the link spec.
  p.nvlink_efficiency = 20.0 / 25.0;
  // topo.h PCI_BW 12.0 GB/s for "PCI Gen3 x16"; Gen3 x16 = 8 GT/s * 16 lanes * 128/130 / 8 = 15.75 GB/s.
  p.pcie_efficiency = 12.0 / 15.75;
  // topo.h NET_BW 12.0 GB/s for a 100 Gbit/s NIC (12.5 GB/s): 0.96.
  p.nic_efficiency = 12.0 / 12.5;
  // NCCL over TCP sockets, ring all-reduce bus bandwidth over wire speed as measured on 32 Gb/s
  // Ethernet with NCCL 2.4.7 (the release that split transfers over several sockets and proxy
  // threads; NVIDIA/nccl#209, table in notes/research-headroom-sockets.md B3): one GPU per node
  // 30.4-31.4 Gbit/s (2 and 4 nodes: 0.95-0.98, the lower kept), eight GPUs per node 14.5-14.9
  // (2 nodes) and 22.2-22.9 Gbit/s (4 nodes): 0.46 and 0.70, their mean 0.58. Eight GPUs' proxy
  // threads stage every byte through host memory and share the NIC's TCP streams. Used only for
  // ethernet clusters. (Was 0.80 for every case, from an NVIDIA slide's 10 GB/s on 100GbE whose
  // GPUs per node are not stated.) The one-GPU end is a tuned GCP figure; a cluster's own stack may
  // reach less, which the calibrated socket_one_gpu_efficiency_scale carries (scenarios/
  // calibration.yaml, pinned on TeraPipe's p3.16xlarge runs; CommModel(cluster, calibrated)).
  p.socket_efficiency_one = 0.95;
  p.socket_efficiency_eight = 0.58;
  // tuning.cc nvlsEfficiency[Hopper] = 0.85 (Blackwell 0.74), applied on top of the NVLink rate.
  p.nvls_efficiency = 0.85;
  // NVLink SHARP arrived with NVSwitch gen3 / NVLink4 (H100: 18 links x 25 GB/s = 450 per direction);
  // A100's NVSwitch gen2 (300 GB/s) has none (NVIDIA Hopper architecture whitepaper).
  p.nvls_min_nvlink_bandwidth = gigabytes_per_s(450.0);
  // DGX-1 / p3 hybrid cube mesh: 6 NVLinks per GPU; two GPUs share at most 2 links (1/3 of 6), a
  // quad's members reach each other over 4 of the 6 (2/3); 8 GPUs use all 6 (NVIDIA DGX-1 whitepaper).
  p.mesh_pair_fraction = 2.0 / 6.0;
  p.mesh_quad_fraction = 4.0 / 6.0;
  // ncclTopoTuneModel refinements: ring LL busBw*.5 capped by llMaxBw; ring LL128 busBw*0.92;
  // tree all-reduce busBw*.92; tree LL /3.8; tree LL128 7/9 on one node, 120/128 across nodes.
  p.ll_bandwidth_fraction = 0.5;
  p.ll128_bandwidth_fraction = 0.92;
  p.tree_bandwidth_fraction = 0.92;
  p.tree_ll_divisor = 3.8;
  p.tree_ll128_one_node_fraction = 7.0 / 9.0;
  p.tree_ll128_multi_node_fraction = 120.0 / 128.0;
  // llMaxBws: one node by GPU (Ampere 87.7; Hopper 141.0), 2 and >2 nodes by CPU (Intel 39.0, 20.4).
  p.ll_max_bus_bandwidth = {gigabytes_per_s(87.7), gigabytes_per_s(39.0), gigabytes_per_s(20.4)};
  // ncclTunerConstantsDefaults, rows ring, tree, nvls; columns LL, LL128, Simple (microseconds).
  p.base_latency_us = {{{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}, {0.0, 0.0, 0.0}}};
  p.nvlink_hop_latency_us = {{{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}, {0.0, 0.0, 25.0}}};
  p.pcie_hop_latency_us = {{{1.0, 2.5, 5.7}, {1.0, 1.9, 4.0}, {0.0, 0.0, 0.0}}};
  p.net_hop_latency_us = {{{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}, {0.0, 0.0, 18.0}}};
  // getNetOverhead: 1 us per network operation on Intel x86 (2 us on AMD), x3 for Simple.
  p.net_overhead = microseconds(1.0);
  p.simple_net_overhead_multiplier = 3.0;
  p.all_to_all_per_peer_latency = microseconds(1.0);  // one posted send/recv pair per peer
  p.nvls_enabled = true;
  return p;
}

CommParams CommParams::nccl_defaults(double compute_capability) {
  CommParams p = nccl_defaults();
  // tuning.cc (2.30.7) indexes its per-architecture tables by compCapIndex: Volta, Ampere, Hopper,
  // Blackwell. nvlsEfficiency = {0, 0, 0.85, 0.74}; llMaxBws[...][0] (one node) = 39.0 Volta,
  // 87.7 Ampere, 141.0 Hopper, 2*141.0 Blackwell. The 2- and >2-node LL caps stay the CPU rows
  // (Intel 39.0 / 20.4) that nccl_defaults() uses: NCCL picks those by CPU vendor, not by GPU.
  //
  // Rings of 2 and 4 GPUs inside an NVSwitch node reach less bus bandwidth than a ring of all 8:
  // nccl-tests (all_gather_perf / reduce_scatter_perf / all_reduce_perf, fp16, out-of-place, 512
  // MiB) in ai-dynamo/aiconfigurator @ 095f58a, systems/data/<gpu>/comm/nccl/<version>/
  // nccl_perf.parquet (collector/network/collect_nccl.py), each ring collective's 2- and 4-GPU
  // busbw over its 8-GPU busbw, averaged over the collectives that run a ring at 8 GPUs (Hopper
  // and Blackwell all-reduce 8 GPUs by NVLink SHARP, so there all-gather and reduce-scatter only)
  // and over the tables of the generation:
  //   A100-SXM4-80GB (NCCL 2.27.3): all-reduce 0.868 / 0.975, all-gather 0.730 / 0.933,
  //     reduce-scatter 0.782 / 0.954 -> 0.793 / 0.954;
  //   H100 SXM (2.23, 2.27.3, 2.29.2) and H200 SXM (2.26.2, 2.29.2): all-gather 0.756-0.771 /
  //     0.940-0.948, reduce-scatter 0.726-0.744 / 0.920-0.924 -> 0.750 / 0.933;
  //   B200 (2.28.9, 2.29.2) and B300 (2.27, 2.29.2): all-gather 0.696-0.718 / 0.914-0.922,
  //     reduce-scatter 0.664-0.679 / 0.900-0.908 -> 0.692 / 0.911.
  // Volta's NVSwitch (DGX-2) was not measured: 1.
  if (compute_capability >= 10.0) {
    p.nvls_efficiency = 0.74;
    p.ll_max_bus_bandwidth[0] = gigabytes_per_s(2 * 141.0);
    p.nvswitch_pair_fraction = 0.692;
    p.nvswitch_quad_fraction = 0.911;
  } else if (compute_capability >= 9.0) {
    p.nvls_efficiency = 0.85;
    p.ll_max_bus_bandwidth[0] = gigabytes_per_s(141.0);
    p.nvswitch_pair_fraction = 0.750;
    p.nvswitch_quad_fraction = 0.933;
  } else if (compute_capability >= 8.0) {
    p.nvswitch_pair_fraction = 0.793;
    p.nvswitch_quad_fraction = 0.954;
  } else if (compute_capability > 0) {
    p.ll_max_bus_bandwidth[0] = gigabytes_per_s(39.0);
  }
  return p;
}

struct CommModel::Path {
  BytesPerSecond bandwidth;  // per rank along the busiest link class (what busbw measures)
  CommLink bottleneck = CommLink::none;
};

CommModel::CommModel(const ClusterSpec& cluster)
    : CommModel(cluster, CommParams::nccl_defaults(cluster.gpu.compute_capability)) {}

CommModel::CommModel(const ClusterSpec& cluster, const cost_models::CalibratedTerms& calibrated)
    : CommModel(cluster, [&] {
        CommParams p = CommParams::nccl_defaults(cluster.gpu.compute_capability);
        // The one-GPU end only: the eight-GPU share is a measurement of GPUs contending for the
        // NIC (nccl#209), which is what it stays; between them the interpolation moves with it.
        // Never below the eight-GPU end (one connection alone does no worse than eight sharing
        // the NIC) nor beyond the line rate.
        p.socket_efficiency_one = std::clamp(p.socket_efficiency_one * calibrated.socket_one_gpu_efficiency_scale,
                                             p.socket_efficiency_eight, 1.0);
        return p;
      }()) {
  if (cluster_.intra.kind == IntraFabric::nvswitch && !host_) in_node_ = cost_models::bundled_in_node_nccl(cluster_.gpu.name);
}

CommModel::CommModel(const ClusterSpec& cluster, CommParams params)
    : cluster_(cluster), params_(std::move(params)) {
  if (!cluster_.gpu.host_profile.empty()) host_ = cost_models::cached_host_profile(cluster_.gpu.host_profile);
}

CommEstimate CommModel::measured(Collective c, Bytes message, const CommGroup& g) const {
  // The fit of the nearest measured group size; another size scales the per-byte term by the
  // ring's bus-bandwidth factor and the fixed term by the ring's steps (n - 1), as MPI's ring
  // algorithms for large messages move and step. Broadcast was not measured: a chain of sends.
  const Collective asked = c == Collective::broadcast ? Collective::send_recv : c;
  const cost_models::MeasuredCollectives* best_group = nullptr;
  for (const auto& m : host_->mpi)
    if (m.fits[std::size_t(asked)] &&
        (!best_group || std::abs(m.ranks - g.ranks) < std::abs(best_group->ranks - g.ranks)))
      best_group = &m;
  if (!best_group)
    throw SpecError(SourceLocation{host_->source, 0, 0}, "mpi", "",
                    std::string("has no measured ") + to_string(asked) +
                        " (run `foresight calibrate --backend cpu` where mpirun is available)");
  const cost_models::LinearFit& f = *best_group->fits[std::size_t(asked)];
  const double n = g.ranks, n0 = best_group->ranks;
  const double steps = asked == Collective::send_recv ? 1.0 : (n - 1.0) / (n0 - 1.0);
  const double per_byte = asked == Collective::send_recv
                              ? 1.0
                              : bus_bandwidth_factor(asked, g.ranks) / bus_bandwidth_factor(asked, best_group->ranks);
  const double hops = c == Collective::broadcast ? std::ceil(std::log2(n)) : 1.0;
  CommEstimate e;
  e.latency = Seconds(hops * f.fixed_s * steps);
  e.transfer = Seconds(hops * f.per_unit_s * per_byte * message.value());
  e.time = e.latency + e.transfer;
  // The measured group size itself, or a send (one pair whatever the group, as the line above
  // prices it too): its samples as measured (MeasuredCollectives::time), the fixed term still the
  // latency and the rest the transfer.
  if ((asked == Collective::send_recv || g.ranks == best_group->ranks) &&
      !best_group->samples[std::size_t(asked)].empty()) {
    const double t = hops * *best_group->time(int(asked), message.value());
    e.latency = Seconds(std::min(t, e.latency.value()));
    e.transfer = Seconds(t - e.latency.value());
    e.time = Seconds(t);
  }
  e.algorithm = c == Collective::send_recv || c == Collective::all_to_all ? CommAlgorithm::point_to_point
                                                                           : CommAlgorithm::ring;
  e.protocol = NcclProtocol::simple;
  e.bottleneck = CommLink::none;
  if (e.time.value() > 0) {
    e.algorithm_bandwidth = BytesPerSecond(message.value() / e.time.value());
    e.bus_bandwidth = BytesPerSecond(e.algorithm_bandwidth.value() * bus_bandwidth_factor(c, g.ranks));
  }
  return e;
}

double CommModel::bus_bandwidth_factor(Collective c, int ranks) {
  FORESIGHT_CHECK(ranks >= 1) << "ranks=" << ranks;
  const double n = ranks;
  switch (c) {
    case Collective::all_reduce: return 2.0 * (n - 1.0) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (n - 1.0) / n;
    case Collective::broadcast:
    case Collective::send_recv: return 1.0;
  }
  return 1.0;
}

void CommModel::check_group(const CommGroup& g) const {
  FORESIGHT_CHECK(g.ranks >= 1 && g.ranks_per_node >= 1 && g.nodes >= 1 && g.concurrent_groups >= 1)
      << "group {" << g.ranks << ", " << g.ranks_per_node << ", " << g.nodes << "}";
  FORESIGHT_CHECK(g.ranks == g.ranks_per_node * g.nodes)
      << "ranks " << g.ranks << " != " << g.ranks_per_node << " per node x " << g.nodes << " nodes";
  FORESIGHT_CHECK(g.nodes <= cluster_.nodes)
      << "group spans " << g.nodes << " nodes; cluster " << cluster_.name << " has " << cluster_.nodes;
  FORESIGHT_CHECK(g.ranks_per_node * g.concurrent_groups <= cluster_.gpus_per_node)
      << g.concurrent_groups << " groups x " << g.ranks_per_node << " ranks per node exceed "
      << cluster_.gpus_per_node << " GPUs per node";
  if (g.nodes > 1) {
    FORESIGHT_CHECK(cluster_.inter.nics_per_node > 0 && cluster_.inter.nic_bandwidth.value() > 0)
        << "group spans " << g.nodes << " nodes but cluster " << cluster_.name << " has no NICs";
  }
}

BytesPerSecond CommModel::intra_bandwidth(int ranks_in_node) const {
  const BytesPerSecond link = cluster_.intra.bandwidth;
  switch (cluster_.intra.kind) {
    case IntraFabric::nvswitch: {
      // The measured 2- and 4-GPU fractions (nccl_defaults), interpolated in log2 of the size:
      // x = 1 for a pair, 2 for a quad, 3 (and beyond) for the whole 8-GPU rate.
      const double x = std::log2(std::max(2, ranks_in_node));
      const double pair = params_.nvswitch_pair_fraction, quad = params_.nvswitch_quad_fraction;
      const double share = x <= 2.0 ? std::lerp(pair, quad, x - 1.0) : std::lerp(quad, 1.0, std::min(1.0, x - 2.0));
      return link * (params_.nvlink_efficiency * share);
    }
    case IntraFabric::nvlink_mesh: {
      const double share = ranks_in_node >= 8   ? 1.0
                           : ranks_in_node >= 3 ? params_.mesh_quad_fraction
                                                : params_.mesh_pair_fraction;
      return link * (params_.nvlink_efficiency * share);
    }
    case IntraFabric::pcie: return link * params_.pcie_efficiency;
  }
  return link;
}

double CommModel::socket_efficiency(double gpus) const {
  const double x = std::clamp(std::log2(std::max(1.0, gpus)) / 3.0, 0.0, 1.0);
  return params_.socket_efficiency_one + (params_.socket_efficiency_eight - params_.socket_efficiency_one) * x;
}

double CommModel::nic_efficiency(const CommGroup& g) const {
  return cluster_.inter.topology == NetworkTopology::ethernet
             ? socket_efficiency(double(g.ranks_per_node) * g.concurrent_groups)
             : params_.nic_efficiency;
}

BytesPerSecond CommModel::nic_bandwidth_per_node(const CommGroup& g) const {
  const auto& net = cluster_.inter;
  // NICs attached to the group's GPUs when they are spread evenly over the node's GPUs (one per GPU
  // on DGX). Below one, several GPUs share a NIC: a lone group gets it whole, concurrent groups split it.
  const double local = double(net.nics_per_node) * g.ranks_per_node / cluster_.gpus_per_node;
  const double usable =
      local >= 1.0 ? local : std::min(1.0, double(net.nics_per_node) / g.concurrent_groups);
  return net.nic_bandwidth * (nic_efficiency(g) * usable);
}

/// How much slower than its NICs a group's inter-node hops run because some cross an
/// oversubscribed tier (cluster.inter_node.tiers; 1 = not at all). For tier t with groups of G
/// nodes: the group's nodes 0, s, 2s, ... (s = node_stride) form a cycle of ring_nodes hops that run
/// at once; a fraction f of them joins two different tier-t groups. Every node of a pod is placed
/// like this one (sibling groups tile the cluster and run the same collective), so a fraction f of
/// the pod's nodes push a hop's worth of traffic through uplinks that carry 1/O_t of the pod's
/// injection (O_t: product of the oversubscriptions of tiers 0..t). Fair sharing gives each
/// crossing hop NIC / max(1, f * O_t); a ring moves in lockstep, so its slowest hop sets the pace.
/// Groups are taken to start at a node index that is a multiple of their span (rank 0's group).
double CommModel::tier_penalty(const CommGroup& g) const {
  const auto& tiers = cluster_.inter.tiers;
  if (tiers.empty() || g.nodes <= 1) return 1.0;
  const long long n = std::max(g.ring_nodes, g.nodes), s = std::max(1, g.node_stride);
  double penalty = 1.0, cumulative = 1.0;
  for (const NetworkTier& t : tiers) {
    cumulative *= t.oversubscription;
    long long crossing = 0;
    for (long long i = 0; i < n; ++i)
      if ((i * s) / t.nodes != (((i + 1) % n) * s) / t.nodes) ++crossing;
    penalty = std::max(penalty, double(crossing) / double(n) * cumulative);
  }
  return penalty;
}

CommModel::Path CommModel::ring_path(const CommGroup& g) const {
  const CommLink intra_link =
      cluster_.intra.kind == IntraFabric::pcie ? CommLink::pcie : CommLink::nvlink;
  if (g.nodes == 1) return {intra_bandwidth(g.ranks_per_node), intra_link};
  // Across nodes every ring leaves each node once, through a NIC: a node's C channels share its
  // usable NICs, so per ring link the NIC side offers the node's whole NIC bandwidth.
  Path p{nic_bandwidth_per_node(g), CommLink::nic};
  if (!g.rail_aligned && cluster_.inter.oversubscription > 1.0) {
    p = {p.bandwidth / cluster_.inter.oversubscription, CommLink::network_core};
  }
  if (const double tier = tier_penalty(g); tier > 1.0) p = {p.bandwidth / tier, CommLink::network_core};
  if (g.ranks_per_node > 1) {
    // Inside the node a ring makes r-1 NVLink hops and one NIC hop (GPUDirect RDMA reads the exit
    // GPU's memory over PCIe), so each GPU's NVLink carries (r-1)/r of the ring traffic.
    const int r = g.ranks_per_node;
    const BytesPerSecond nvl = intra_bandwidth(r) * (double(r) / (r - 1));
    if (nvl < p.bandwidth) p = {nvl, intra_link};
  }
  return p;
}

void CommModel::finish(CommEstimate& e, Collective c, Bytes message, int ranks) const {
  e.time = e.latency + e.transfer;
  e.algorithm_bandwidth = e.time.value() > 0 ? message / e.time : BytesPerSecond(0.0);
  e.bus_bandwidth = e.algorithm_bandwidth * bus_bandwidth_factor(c, ranks);
}

/// Ring (NCCL_ALGO_RING) for all-reduce, all-gather, reduce-scatter and broadcast.
/// Time = NCCL tuner latency + traffic per rank / protocol bus bandwidth (ncclTopoTuneModel).
CommEstimate CommModel::ring(Collective c, Bytes message, const CommGroup& g, NcclProtocol p) const {
  const int n = g.ranks, nodes = g.nodes, pi = proto_index(p);
  const Path path = ring_path(g);
  // Protocol bus bandwidth: Simple moves data only; LL sends a 4-byte flag with every 4 bytes;
  // LL128 8 bytes of flag per 128-byte line (120/128, NCCL uses 0.92).
  BytesPerSecond bw = path.bandwidth;
  if (p == NcclProtocol::ll) {
    bw = min(bw * params_.ll_bandwidth_fraction, params_.ll_max_bus_bandwidth[std::min(nodes, 3) - 1]);
  } else if (p == NcclProtocol::ll128) {
    bw = bw * params_.ll128_bandwidth_fraction;
  }
  // Latency: base + one hop latency per ring step; steps that cross nodes pay the network hop.
  const bool pcie = cluster_.intra.kind == IntraFabric::pcie;
  const NcclLatencyTable& intra_tab = pcie ? params_.pcie_hop_latency_us : params_.nvlink_hop_latency_us;
  const int steps = ring_steps(c, n);
  double lat_us = params_.base_latency_us[kRing][pi];
  if (nodes == 1) {
    lat_us += steps * intra_tab[kRing][pi];
  } else {
    // Each intra step still waits on the proxy's network overhead; with one rank per node NCCL
    // charges the tree's network hop latency (latencies fully exposed).
    const double overhead_us = in_us(params_.net_overhead) *
                               (p == NcclProtocol::simple ? params_.simple_net_overhead_multiplier : 1.0);
    const double intra_us = std::max(intra_tab[kRing][pi], overhead_us);
    const double inter_us = g.ranks_per_node == 1 ? params_.net_hop_latency_us[kTree][pi]
                                                  : params_.net_hop_latency_us[kRing][pi];
    const int inter_steps = c == Collective::all_reduce ? 2 * (nodes - 1) : nodes - 1;
    lat_us += (steps - inter_steps) * intra_us + inter_steps * inter_us;
  }
  CommEstimate e;
  e.algorithm = CommAlgorithm::ring;
  e.protocol = p;
  e.bottleneck = path.bottleneck;
  e.latency = us(lat_us);
  e.transfer = message * ring_traffic_per_byte(c, n) / bw;
  finish(e, c, message, n);
  return e;
}

/// Double binary tree (NCCL_ALGO_TREE), all-reduce only: chains inside nodes, two complementary
/// binary trees across nodes, each carrying half the data up (reduce) and down (broadcast); every
/// rank sends and receives ~2x the message, so algbw = busBw / 2 (NCCL's ratio .5).
CommEstimate CommModel::tree(Bytes message, const CommGroup& g, NcclProtocol p) const {
  const int pi = proto_index(p), nodes = g.nodes;
  const Path path = ring_path(g);
  BytesPerSecond bw = path.bandwidth * params_.tree_bandwidth_fraction;
  if (p == NcclProtocol::ll) {
    bw = min(bw / params_.tree_ll_divisor, params_.ll_max_bus_bandwidth[std::min(nodes, 3) - 1]);
  } else if (p == NcclProtocol::ll128) {
    bw = bw * (nodes == 1 ? params_.tree_ll128_one_node_fraction
                          : params_.tree_ll128_multi_node_fraction);
  }
  const bool pcie = cluster_.intra.kind == IntraFabric::pcie;
  const NcclLatencyTable& intra_tab = pcie ? params_.pcie_hop_latency_us : params_.nvlink_hop_latency_us;
  // Up and down: (r-1) intra hops along the chain and log2(nodes) network hops, twice.
  const double lat_us =
      params_.base_latency_us[kTree][pi] +
      2.0 * ((g.ranks_per_node - 1) * intra_tab[kTree][pi] +
             log2_floor(nodes) * params_.net_hop_latency_us[kTree][pi]);
  CommEstimate e;
  e.algorithm = CommAlgorithm::tree;
  e.protocol = p;
  e.bottleneck = path.bottleneck;
  e.latency = us(lat_us);
  e.transfer = message * 2.0 / bw;
  finish(e, Collective::all_reduce, message, g.ranks);
  return e;
}

/// NVLink SHARP all-reduce in one node: each GPU owns 1/n of the buffer; the switch reads that slice
/// from all n GPUs and reduces it (multimem.ld_reduce), the GPU multicasts the result back
/// (multimem.st). Per GPU: S + S/n leave and enter its NVLinks, so algbw = B_nvls / (1 + 1/n).
CommEstimate CommModel::nvls(Bytes message, const CommGroup& g) const {
  const int n = g.ranks;
  const BytesPerSecond bw =
      cluster_.intra.bandwidth * (params_.nvlink_efficiency * params_.nvls_efficiency);
  CommEstimate e;
  e.algorithm = CommAlgorithm::nvls;
  e.protocol = NcclProtocol::simple;
  e.bottleneck = CommLink::nvlink;
  // NCCL: NVLS latency = the NVLink hop latency alone (no base).
  e.latency = us(params_.base_latency_us[kNvls][2] + params_.nvlink_hop_latency_us[kNvls][2]);
  e.transfer = message * (1.0 + 1.0 / n) / bw;
  finish(e, Collective::all_reduce, message, n);
  return e;
}

/// Hierarchical all-reduce: reduce-scatter inside each node, all-reduce of the 1/r shard across
/// nodes by r concurrent one-rank-per-node groups (one per rail), all-gather inside the node.
CommEstimate CommModel::hierarchical(Bytes message, const CommGroup& g) const {
  const int r = g.ranks_per_node;
  const CommGroup in_node{.ranks = r, .ranks_per_node = r, .nodes = 1, .rail_aligned = true,
                          .concurrent_groups = g.concurrent_groups, .node_stride = 1, .ring_nodes = 0};
  const CommGroup across{.ranks = g.nodes, .ranks_per_node = 1, .nodes = g.nodes,
                         .rail_aligned = g.rail_aligned, .concurrent_groups = r * g.concurrent_groups,
                         .node_stride = g.node_stride, .ring_nodes = g.ring_nodes};
  const CommEstimate rs = best(Collective::reduce_scatter, message, in_node, CommAlgorithm::ring);
  const CommEstimate ar = best(Collective::all_reduce, message / r, across, CommAlgorithm::automatic);
  const CommEstimate ag = best(Collective::all_gather, message, in_node, CommAlgorithm::ring);
  CommEstimate e;
  e.algorithm = CommAlgorithm::hierarchical;
  e.protocol = ar.protocol;
  e.latency = rs.latency + ar.latency + ag.latency;
  e.transfer = rs.transfer + ar.transfer + ag.transfer;
  e.bottleneck = ar.transfer > rs.transfer + ag.transfer ? ar.bottleneck : rs.bottleneck;
  finish(e, Collective::all_reduce, message, g.ranks);
  return e;
}

/// send/recv and all-to-all: NCCL point-to-point (Simple). send_recv: each rank of the group sends
/// `message` to one peer (intra: over NVLink/PCIe; inter: over its share of the node's NICs).
/// all_to_all: each rank sends message/n to every rank; (r-1)/n of it stays in the node, (n-r)/n
/// crosses the NICs; NVLink and NIC traffic overlap, the slower one sets the time.
CommEstimate CommModel::point_to_point(Collective c, Bytes message, const CommGroup& g) const {
  const int n = g.ranks, r = g.ranks_per_node;
  const CommLink intra_link =
      cluster_.intra.kind == IntraFabric::pcie ? CommLink::pcie : CommLink::nvlink;
  BytesPerSecond nic_per_rank;
  CommLink nic_link = CommLink::nic;
  if (g.nodes > 1) {
    nic_per_rank = nic_bandwidth_per_node(g) / r;
    if (!g.rail_aligned && cluster_.inter.oversubscription > 1.0) {
      nic_per_rank = nic_per_rank / cluster_.inter.oversubscription;
      nic_link = CommLink::network_core;
    }
    if (const double tier = tier_penalty(g); tier > 1.0) {
      nic_per_rank = nic_per_rank / tier;
      nic_link = CommLink::network_core;
    }
  }
  CommEstimate e;
  e.algorithm = CommAlgorithm::point_to_point;
  e.protocol = NcclProtocol::simple;
  if (c == Collective::send_recv) {
    if (g.nodes == 1) {
      e.latency = cluster_.intra.latency;
      e.transfer = message / intra_bandwidth(2);  // one GPU pair
      e.bottleneck = intra_link;
    } else {
      e.latency = cluster_.inter.latency;
      e.transfer = message / nic_per_rank;
      e.bottleneck = nic_link;
    }
  } else {
    const Bytes intra_bytes = message * (double(r - 1) / n);
    const Bytes inter_bytes = message * (double(n - r) / n);
    const Seconds t_intra = r > 1 ? intra_bytes / intra_bandwidth(r) : Seconds(0.0);
    const Seconds t_inter = g.nodes > 1 ? inter_bytes / nic_per_rank : Seconds(0.0);
    e.transfer = max(t_intra, t_inter);
    e.bottleneck = t_inter > t_intra ? nic_link : intra_link;
    e.latency = (g.nodes > 1 ? cluster_.inter.latency : cluster_.intra.latency) +
                params_.all_to_all_per_peer_latency * double(n - 1);
  }
  finish(e, c, message, n);
  return e;
}

bool CommModel::supports(Collective c, const CommGroup& g, CommAlgorithm a) const {
  switch (a) {
    case CommAlgorithm::automatic: return true;
    case CommAlgorithm::point_to_point:
      return c == Collective::all_to_all || c == Collective::send_recv;
    case CommAlgorithm::ring:
      return c == Collective::all_reduce || c == Collective::all_gather ||
             c == Collective::reduce_scatter || c == Collective::broadcast;
    case CommAlgorithm::tree: return c == Collective::all_reduce;
    case CommAlgorithm::nvls:
      return c == Collective::all_reduce && g.nodes == 1 && params_.nvls_enabled &&
             cluster_.intra.kind == IntraFabric::nvswitch &&
             cluster_.intra.bandwidth >= params_.nvls_min_nvlink_bandwidth;
    case CommAlgorithm::hierarchical:
      return c == Collective::all_reduce && g.nodes > 1 && g.ranks_per_node > 1;
  }
  return false;
}

/// The fastest protocol for one algorithm, or (automatic) the fastest of the algorithms NCCL would
/// consider: ring, tree and NVLS for all-reduce, ring for the other collectives, p2p for all-to-all
/// and send/recv. Ties go to the earlier candidate (ring before tree, LL before LL128 before Simple).
CommEstimate CommModel::best(Collective c, Bytes message, const CommGroup& g, CommAlgorithm a) const {
  FORESIGHT_CHECK(supports(c, g, a))
      << "algorithm " << to_string(a) << " cannot run " << to_string(c) << " on {" << g.ranks << ", "
      << g.ranks_per_node << ", " << g.nodes << "} of cluster " << cluster_.name;
  if (c == Collective::all_to_all || c == Collective::send_recv) return point_to_point(c, message, g);
  if (a == CommAlgorithm::nvls) return nvls(message, g);
  if (a == CommAlgorithm::hierarchical) return hierarchical(message, g);

  // LL128 is enabled by default only over NVLink (tuning.cc: typeIntra <= PATH_NVB).
  const bool ll128_ok = cluster_.intra.kind != IntraFabric::pcie;
  CommEstimate out;
  out.time = Seconds(std::numeric_limits<double>::infinity());
  auto consider = [&](const CommEstimate& e) {
    if (e.time < out.time) out = e;
  };
  for (CommAlgorithm algo : {CommAlgorithm::ring, CommAlgorithm::tree, CommAlgorithm::nvls}) {
    if (a != CommAlgorithm::automatic && a != algo) continue;
    if (!supports(c, g, algo)) continue;
    if (algo == CommAlgorithm::nvls) {
      consider(nvls(message, g));
      continue;
    }
    for (NcclProtocol p : kProtocols) {
      if (p == NcclProtocol::ll128 && !ll128_ok) continue;
      consider(algo == CommAlgorithm::ring ? ring(c, message, g, p) : tree(message, g, p));
    }
  }
  return out;
}

CommEstimate CommModel::estimate(Collective c, Bytes message, const CommGroup& g,
                                 CommAlgorithm a) const {
  check_group(g);
  FORESIGHT_CHECK(message.value() >= 0) << "negative message " << message.value() << " B";
  if (g.ranks == 1) {
    CommEstimate e;  // nothing leaves the GPU
    e.algorithm = a == CommAlgorithm::automatic ? CommAlgorithm::ring : a;
    return e;
  }
  if (host_ && g.nodes == 1) return measured(c, message, g);
  CommEstimate e = best(c, message, g, a);
  if (measured_in_node(c, g, a)) {
    // Measured: one group alone in the node, the collectives nccl-tests times. A group of another
    // size (3, 5-7 GPUs) or a message beyond the measured sizes keeps the formula's own dependence
    // on them, scaled by the ratio where the measurement is nearest.
    if (const double r = in_node_ratio(c, message, g.ranks); r > 0) rescale(e, r, c, message, g.ranks);
  } else if (const int n = std::min(g.ranks, cluster_.gpus_per_node);
             in_node_ && a == CommAlgorithm::automatic && g.nodes > 1 && n >= 2 && e.time.value() > 0) {
    // Across nodes: never below the same collective measured inside one node over n GPUs.
    if (const double r = in_node_ratio(c, message, n); r > 0) {
      const CommGroup one{.ranks = n, .ranks_per_node = n, .nodes = 1};
      const Seconds in = best(c, message, one, CommAlgorithm::automatic).time * r;
      if (in > e.time) rescale(e, in.value() / e.time.value(), c, message, g.ranks);
    }
  }
  return e;
}

std::string CommModel::in_node_pricing() const {
  if (host_) return "the host's MPI as measured (" + cluster_.gpu.host_profile + ")";
  if (cluster_.gpus_per_node < 2) return "none (one GPU per node)";
  if (!in_node_) return "NCCL's tuner formula";
  return "as measured (" + in_node_->measured + "; " + in_node_->file +
         "), NCCL's tuner formula across nodes (never below the in-node measurement)";
}

bool CommModel::measured_in_node(Collective c, const CommGroup& g, CommAlgorithm a) const {
  if (!in_node_ || g.nodes != 1 || g.ranks < 2 || a != CommAlgorithm::automatic) return false;
  return in_node_->nearest(c, g.ranks, cluster_.gpus_per_node) != nullptr;
}

double CommModel::in_node_ratio(Collective c, Bytes message, int ranks) const {
  const cost_models::InNodeCurve* curve = in_node_ ? in_node_->nearest(c, ranks, cluster_.gpus_per_node) : nullptr;
  if (!curve) return 0;
  const double at = std::clamp(message.value(), curve->bytes.front(), curve->bytes.back());
  const CommGroup ref{.ranks = curve->ranks, .ranks_per_node = curve->ranks, .nodes = 1};
  const double formula = best(c, Bytes(at), ref, CommAlgorithm::automatic).time.value();
  return formula > 0 ? cost_models::InNodeNccl::seconds(*curve, at) / formula : 0;
}

void CommModel::rescale(CommEstimate& e, double k, Collective c, Bytes message, int ranks) const {
  e.latency = e.latency * k;
  e.transfer = e.transfer * k;
  finish(e, c, message, ranks);
}

Seconds CommModel::time(Collective c, Bytes message, const CommGroup& g, CommAlgorithm a) const {
  return estimate(c, message, g, a).time;
}

}  // namespace foresight
