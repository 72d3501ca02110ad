// Measured in-node NCCL collectives (cost_models/in_node_nccl.hpp) and their use by CommModel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "cost_models/calibrated.hpp"
#include "cost_models/comm.hpp"
#include "cost_models/in_node_nccl.hpp"
#include "cost_models/profile.hpp"

using namespace foresight;
using namespace foresight::cost_models;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}

/// The SpecError `load_in_node_nccl` throws for `yaml`, or fails the test.
SpecError load_error(const std::string& yaml) {
  const std::string path = write_temp("foresight_in_node_nccl_test.yaml", yaml);
  try {
    load_in_node_nccl(path);
  } catch (const SpecError& e) {
    return e;
  }
  ADD_FAILURE() << "no SpecError for\n" << yaml;
  return SpecError({}, "", "", "");
}

const char* kHeader =
    "nccl_in_node:\n  gpu: test\n  measured: hand-written\n  source: this test\n";

}  // namespace

TEST(InNodeNccl, InterpolatesInLogBytesAndLogTimeAndClampsToTheMeasuredSizes) {
  InNodeCurve k;
  k.bytes = {1e6, 4e6};
  k.seconds = {10e-6, 20e-6};
  // Halfway in log(bytes) between the points: the geometric mean of their times, sqrt(10 x 20) us.
  EXPECT_NEAR(InNodeNccl::seconds(k, 2e6), std::sqrt(200.0) * 1e-6, 1e-12);
  EXPECT_DOUBLE_EQ(InNodeNccl::seconds(k, 1e6), 10e-6);
  EXPECT_DOUBLE_EQ(InNodeNccl::seconds(k, 4e6), 20e-6);
  EXPECT_DOUBLE_EQ(InNodeNccl::seconds(k, 1e3), 10e-6);  // below the table: its first time
  EXPECT_DOUBLE_EQ(InNodeNccl::seconds(k, 1e9), 20e-6);  // beyond it: its last (CommModel scales)
}

TEST(InNodeNccl, TheNearestGroupSizeIsNearestInLog2) {
  InNodeNccl t;
  for (int n : {2, 4, 8}) t.curves.push_back({Collective::all_gather, n, {1.0}, {1.0}});
  t.curves.push_back({Collective::all_to_all, 8, {1.0}, {1.0}});
  EXPECT_EQ(t.nearest(Collective::all_gather, 3)->ranks, 4);  // |log2 3 - 2| = 0.42 < |log2 3 - 1| = 0.58
  EXPECT_EQ(t.nearest(Collective::all_gather, 5)->ranks, 4);  // 0.32 < 0.68
  EXPECT_EQ(t.nearest(Collective::all_gather, 6)->ranks, 8);  // 0.42 < 0.58
  EXPECT_EQ(t.nearest(Collective::all_gather, 16)->ranks, 8);
  EXPECT_EQ(t.nearest(Collective::all_to_all, 2)->ranks, 8);
  EXPECT_EQ(t.nearest(Collective::all_reduce, 8), nullptr);
  // On a node of 4 GPUs an 8-GPU curve cannot describe a group: the nearest that fits is taken.
  EXPECT_EQ(t.nearest(Collective::all_gather, 6, 4)->ranks, 4);
  EXPECT_EQ(t.nearest(Collective::all_to_all, 2, 4), nullptr);
}

TEST(InNodeNccl, BadTablesAreRefusedNamingFieldValueAndRule) {
  SpecError e = load_error(std::string(kHeader) +
                           "  bytes: [1024, 4096]\n  curves:\n    - {collective: all-gather, ranks: 8, us: [5]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[0].us");
  EXPECT_NE(e.rule().find("one time per size (2)"), std::string::npos) << e.rule();

  e = load_error(std::string(kHeader) + "  bytes: [4096, 1024]\n  curves:\n    - {collective: all-gather, ranks: 8, us: [5, 6]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.bytes[1]");
  EXPECT_NE(e.rule().find("ascend"), std::string::npos);

  e = load_error(std::string(kHeader) + "  bytes: [1024, 4096]\n  curves:\n    - {collective: all-gather, ranks: 1, us: [5, 6]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[0].ranks");

  e = load_error(std::string(kHeader) + "  bytes: [1024, 4096]\n  curves:\n    - {collective: broadcast, ranks: 8, us: [5, 6]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[0].collective");
  EXPECT_EQ(e.rule(), "must be all-reduce, all-gather, reduce-scatter or all-to-all");

  e = load_error(std::string(kHeader) + "  bytes: [1024, 4096]\n  curves:\n    - {collective: all-gather, ranks: 8, us: [5, -6]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[0].us[1]");
  EXPECT_EQ(e.rule(), "must be positive and finite");

  e = load_error(std::string(kHeader) + "  bytes: [1024, 4096]\n  curves:\n    - {collective: all-gather, ranks: 8, us: [6, 5]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[0].us[1]");
  EXPECT_NE(e.rule().find("must not fall"), std::string::npos);

  e = load_error(std::string(kHeader) +
                 "  bytes: [1024, 4096]\n  curves:\n    - {collective: all-gather, ranks: 8, us: [5, 6]}\n"
                 "    - {collective: all-gather, ranks: 8, us: [5, 6]}\n");
  EXPECT_EQ(e.field(), "nccl_in_node.curves[1].ranks");
}

TEST(InNodeNccl, TheBundledH100TableIsThePublishedMeasurement) {
  // scenarios/collectives/h100-sxm.yaml: nccl-tests on 8 H100 SXM (ai-dynamo/aiconfigurator's
  // tables of NCCL 2.23, 2.27.3, 2.29.2, the median): a 2-GPU all-gather with 16 MiB of output
  // 56.13 us, an 8-GPU all-reduce of 64 MiB 324 us.
  const InNodeNccl t = load_in_node_nccl(scenarios_dir() + "/collectives/h100-sxm.yaml");
  EXPECT_EQ(t.gpu, "h100-sxm");
  EXPECT_NEAR(InNodeNccl::seconds(*t.nearest(Collective::all_gather, 2), 16777216.0), 56.13e-6, 1e-9);
  EXPECT_NEAR(InNodeNccl::seconds(*t.nearest(Collective::all_reduce, 8), 67108864.0), 324.0e-6, 1e-9);
  // An independent run agrees: NVIDIA's dgxc-benchmarking (v26.06.01, nccl/README.md sample output,
  // all_reduce_perf on one DGX H100, float, out-of-place) times an 8-GPU all-reduce of 16 MiB at
  // 123.8 us, 64 MiB 324.7 us, 512 MiB 2151.0 us.
  for (const auto& [bytes, us] : {std::pair{16777216.0, 123.8}, {67108864.0, 324.7}, {536870912.0, 2151.0}})
    EXPECT_NEAR(InNodeNccl::seconds(*t.nearest(Collective::all_reduce, 8), bytes) / (us * 1e-6), 1.0, 0.03) << bytes;
}

TEST(InNodeNccl, PredictionsPriceInNodeCollectivesAtTheMeasuredTimes) {
  const ClusterSpec c = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  const CommModel measured(c, CalibratedTerms{}), formula(c);
  const std::shared_ptr<const InNodeNccl> t = bundled_in_node_nccl(c.gpu.name);
  ASSERT_NE(t, nullptr);
  const CommGroup pair{.ranks = 2, .ranks_per_node = 2, .nodes = 1};
  const CommGroup node{.ranks = 8, .ranks_per_node = 8, .nodes = 1};
  // At a measured point the prediction is the measurement, whatever the formula says.
  const InNodeCurve& ar8 = *t->nearest(Collective::all_reduce, 8);
  for (std::size_t i = 0; i < ar8.bytes.size(); i += 5)
    EXPECT_NEAR(measured.time(Collective::all_reduce, Bytes(ar8.bytes[i]), node).value() / ar8.seconds[i], 1.0, 1e-9);
  const InNodeCurve& ag2 = *t->nearest(Collective::all_gather, 2);
  EXPECT_NEAR(measured.time(Collective::all_gather, Bytes(ag2.bytes[15]), pair).value() / ag2.seconds[15], 1.0, 1e-9);
  // The formula alone (CommModel without an execution's terms) is not what was measured: the test
  // above would pass by accident otherwise.
  EXPECT_GT(std::abs(formula.time(Collective::all_reduce, Bytes(67108864.0), node).value() / 324.0e-6 - 1.0), 0.05);
  // A group of 6 (no curve) keeps the formula's dependence on its size, scaled by the 8-GPU ratio.
  const CommGroup six{.ranks = 6, .ranks_per_node = 6, .nodes = 1};
  const double ratio8 = measured.time(Collective::all_gather, Bytes(67108864.0), node).value() /
                        formula.time(Collective::all_gather, Bytes(67108864.0), node).value();
  EXPECT_NEAR(measured.time(Collective::all_gather, Bytes(67108864.0), six).value() /
                  formula.time(Collective::all_gather, Bytes(67108864.0), six).value(),
              ratio8, 1e-9);
  // Which collectives the tables price.
  const CommGroup two_nodes{.ranks = 16, .ranks_per_node = 8, .nodes = 2};
  EXPECT_TRUE(measured.measured_in_node(Collective::all_to_all, node));
  EXPECT_TRUE(measured.measured_in_node(Collective::all_gather, six));
  EXPECT_FALSE(measured.measured_in_node(Collective::all_gather, two_nodes));
  EXPECT_FALSE(measured.measured_in_node(Collective::all_gather, node, CommAlgorithm::ring));
  EXPECT_FALSE(measured.measured_in_node(Collective::send_recv, pair));
  EXPECT_FALSE(formula.measured_in_node(Collective::all_to_all, node));
  // A GPU without a table (V100, DGX-2) is priced by the formula.
  const ClusterSpec v = load_cluster(resolve_scenario("clusters", "dgx2-v100"));
  EXPECT_DOUBLE_EQ(CommModel(v, CalibratedTerms{}).time(Collective::all_gather, Bytes(67108864.0), node).value(),
                   CommModel(v).time(Collective::all_gather, Bytes(67108864.0), node).value());
}

TEST(InNodeNccl, CostNeverFallsWithSizeNorBelowTheNodeAcrossNodes) {
  // B300's measured in-node all-gather of 16 MiB is 1.8x the formula's; across two nodes of four
  // the formula alone came out faster than one NVSwitch node, which no NIC is. Every measured
  // curve rises with size, and a group across nodes costs at least the same collective inside one.
  for (const char* name : {"dgx-h100-superpod", "dgx-b300-superpod", "dgx-b200-superpod"}) {
    const ClusterSpec c = load_cluster(resolve_scenario("clusters", name));
    const CommModel m(c, CalibratedTerms{});
    const CommGroup node{.ranks = 8, .ranks_per_node = 8, .nodes = 1};
    const CommGroup two_by_four{.ranks = 8, .ranks_per_node = 4, .nodes = 2};
    const CommGroup eight_by_one{.ranks = 8, .ranks_per_node = 1, .nodes = 8};
    for (Collective k : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all}) {
      double last = 0;
      for (double b = 512; b <= 1073741824.0; b *= 2) {
        const double in = m.time(k, Bytes(b), node).value();
        EXPECT_GE(in, last * (1 - 1e-9)) << name << " " << to_string(k) << " " << b;
        last = in;
        EXPECT_GE(m.time(k, Bytes(b), two_by_four).value(), in * (1 - 1e-12)) << name << " " << to_string(k) << " " << b;
        EXPECT_GE(m.time(k, Bytes(b), eight_by_one).value(), in * (1 - 1e-12)) << name << " " << to_string(k) << " " << b;
      }
    }
  }
}

TEST(InNodeNccl, ForesightCalibrateCollectivesBecomeCurves) {
  // What calibrate/nccl_sweep.cpp writes: one entry per collective, group size and message.
  const ProfileData p = parse_profile(R"({
    "device": {"name": "test GPU", "peak_tflops": 100},
    "measurements": [
      {"kernel": "nccl_all_reduce", "impl": "nccl", "bytes": 4194304, "ranks": 2, "nodes": 1, "time_s": 4e-5},
      {"kernel": "nccl_all_reduce", "impl": "nccl", "bytes": 1048576, "ranks": 2, "nodes": 1, "time_s": 2e-5},
      {"kernel": "nccl_all_reduce", "impl": "nccl", "bytes": 2097152, "ranks": 2, "nodes": 1, "time_s": 1.5e-5},
      {"kernel": "nccl_all_to_all", "impl": "nccl", "bytes": 1048576, "ranks": 2, "nodes": 1, "time_s": 3e-5},
      {"kernel": "nccl_broadcast", "impl": "nccl", "bytes": 1048576, "ranks": 2, "nodes": 1, "time_s": 1e-5}
    ]})",
                                     "profile.json");
  ASSERT_EQ(p.nccl.size(), 4u);  // broadcast is not priced from measurements
  const InNodeNccl t = in_node_nccl_of(p);
  const InNodeCurve* ar = t.nearest(Collective::all_reduce, 2);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->bytes, (std::vector<double>{1048576, 2097152, 4194304}));  // sorted by size
  // 2 MiB timed faster than 1 MiB (noise) is lifted to 1 MiB's time.
  EXPECT_EQ(ar->seconds, (std::vector<double>{2e-5, 2e-5, 4e-5}));
  ASSERT_NE(t.nearest(Collective::all_to_all, 2), nullptr);
  EXPECT_EQ(t.nearest(Collective::all_gather, 2), nullptr);
  for (const char* ranks : {"1", "2.5", "1e12"})
    EXPECT_THROW(parse_profile(std::string(R"({"device": {"peak_tflops": 1}, "measurements": [
      {"kernel": "nccl_all_gather", "bytes": 1024, "ranks": )") + ranks + R"(, "time_s": 1e-5}]})",
                               "bad.json"),
                 SpecError)
        << ranks;
}
