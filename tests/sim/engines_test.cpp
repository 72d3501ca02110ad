// The two engines on one graph: without contention (one replica, everything inside one node, or
// transfers that never overlap) they must agree within 1%.
#include <gtest/gtest.h>

#include "sim/analytic_engine.hpp"
#include "sim/simgrid_engine.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {
WorkloadCosts costs(Schedule sched, int p, int m, int v) {
  WorkloadCosts c;
  c.shape = ScheduleShape{sched, p, m, v, 1};
  ChunkCosts cc;
  cc.forward = Seconds(1e-3 / v);
  cc.forward_tp_comm = Seconds(0.1e-3 / v);
  cc.backward = Seconds(2e-3 / v);
  cc.backward_tp_comm = Seconds(0.1e-3 / v);
  c.chunk.assign(p, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(1, cc)));
  c.p2p_forward = {Seconds(50e-6)};
  c.p2p_backward = {Seconds(50e-6)};
  c.p2p_forward_bytes = {Bytes(1e6)};
  c.p2p_backward_bytes = {Bytes(1e6)};
  c.dp_grad_sync.assign(p, Seconds(0.5e-3));
  c.optimizer.assign(p, Seconds(0.3e-3));
  return c;
}
}  // namespace

TEST(Engines, AgreeWithoutContentionInsideOneNode) {
  if (!simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  for (auto [sched, v] : {std::pair{Schedule::one_f_one_b, 1}, {Schedule::interleaved, 2}, {Schedule::gpipe, 1}}) {
    const Workload w = build_workload(costs(sched, 4, 8, v));
    const SimResult a = run_analytic(w);
    SimgridPlatform pf{.dp = 1, .tp = 2, .gpus_per_node = 8, .placement = Placement::tp_dp_pp,
                       .node_injection = BytesPerSecond(200e9), .group_injection = BytesPerSecond(0), .network_latency = Seconds(5e-6), .oversubscription = 1.0};
    const SimResult s = run_simgrid(w, pf);
    EXPECT_NEAR(s.iteration / a.iteration, 1.0, 0.01) << to_string(sched) << ": simgrid " << s.iteration.value()
                                                     << " s vs analytic " << a.iteration.value() << " s";
  }
}

TEST(Engines, CrossNodeTransfersBecomeFlows) {
  if (!simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  // tp = 8 fills a node, so every stage is its own node and each transfer is a 1 MB flow over
  // 200 GB/s with 5 us latency: 5 us + 1e6 / 200e9 = 10 us instead of the 50 us costed analytically.
  auto c = costs(Schedule::one_f_one_b, 2, 1, 1);
  const Workload w = build_workload(c);
  SimgridPlatform pf{.dp = 1, .tp = 8, .gpus_per_node = 8, .placement = Placement::tp_dp_pp,
                     .node_injection = BytesPerSecond(200e9), .group_injection = BytesPerSecond(0), .network_latency = Seconds(5e-6), .oversubscription = 1.0};
  const SimResult s = run_simgrid(w, pf);
  const SimResult a = run_analytic(w);
  EXPECT_NEAR(a.iteration.value() - s.iteration.value(), 2 * (50e-6 - 10e-6), 2e-6);
}

TEST(Engines, DataParallelFlowsContendOnTheNics) {
  if (!simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  // One stage, 4 replicas on 4 nodes; each replica sends 1 GB to its ring neighbour at once: each
  // NIC carries one flow out and one in, 1e9 / 200e9 = 5 ms, plus the latency term.
  WorkloadCosts c = costs(Schedule::one_f_one_b, 1, 1, 1);
  c.dp_grad_sync = {Seconds(1.0)};  // analytic figure, unused by the flows
  c.dp_grad_sync_bytes = {Bytes(1e9)};
  c.dp_latency = Seconds(20e-6);
  const Workload w = build_workload(c);
  SimgridPlatform pf{.dp = 4, .tp = 8, .gpus_per_node = 8, .placement = Placement::tp_dp_pp,
                     .node_injection = BytesPerSecond(200e9), .group_injection = BytesPerSecond(0), .network_latency = Seconds(0), .oversubscription = 1.0};
  const SimResult s = run_simgrid(w, pf);
  const double compute = 1e-3 + 0.1e-3 + 2e-3 + 0.1e-3 + 0.3e-3;
  EXPECT_NEAR(s.iteration.value(), compute + 20e-6 + 5e-3, 1e-5);
}

TEST(Engines, TieredFabricChargesTheCrossingFlowsAsTheCommModelDoes) {
  if (!simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  // 4 replicas on 4 nodes, pods of 2 nodes joined 1:7. The coarse ring sends 1 GB 0->1, 1->2, 2->3,
  // 3->0; 1->2 and 3->0 cross. Each pod's uplink carries 2 x 200 / 7 = 57.14 GB/s per direction and
  // one crossing flow each way: 1e9 / 57.14e9 = 17.5 ms. The comm model's hand figure is the same:
  // half the hops cross, NIC / (0.5 x 7) = 57.14 GB/s (CommTiers tests).
  WorkloadCosts c = costs(Schedule::one_f_one_b, 1, 1, 1);
  c.dp_grad_sync = {Seconds(1.0)};
  c.dp_grad_sync_bytes = {Bytes(1e9)};
  c.dp_latency = Seconds(20e-6);
  const Workload w = build_workload(c);
  SimgridPlatform pf{.dp = 4, .tp = 8, .gpus_per_node = 8, .placement = Placement::tp_dp_pp,
                     .node_injection = BytesPerSecond(200e9), .group_injection = BytesPerSecond(0),
                     .network_latency = Seconds(0), .oversubscription = 1.0,
                     .tiers = {{.nodes = 2, .oversubscription = 7.0}}};
  const SimResult s = run_simgrid(w, pf);
  const double compute = 1e-3 + 0.1e-3 + 2e-3 + 0.1e-3 + 0.3e-3;
  EXPECT_NEAR(s.iteration.value(), compute + 20e-6 + 1e9 / (2 * 200e9 / 7.0), 1e-5);
  // Pods of 4 nodes hold the whole ring: no flow crosses, 1e9 / 200e9 = 5 ms as without tiers.
  pf.tiers = {{.nodes = 4, .oversubscription = 7.0}};
  EXPECT_NEAR(run_simgrid(w, pf).iteration.value(), compute + 20e-6 + 5e-3, 1e-5);
}
