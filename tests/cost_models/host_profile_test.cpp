// The CPU device (cost_models/host_profile.hpp, host_compute.hpp): profile parsing and its errors,
// GEMM interpolation, the per-op count of one trainer layer against a hand count of the backend
// calls trainer/layer.cpp makes, measured MPI collectives in the communication model, and the
// oversubscription slowdown.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.hpp"
#include "cost_models/comm.hpp"
#include "cost_models/host_compute.hpp"
#include "cost_models/host_profile.hpp"

namespace foresight::cost_models {
namespace {

/// A profile where every GEMM costs `mac_s` per multiply-add and every other op `fixed_s` per call
/// plus `unit_s` per unit; MPI all-reduce 10 us + 1 ns/byte and send-recv 2 us + 0.5 ns/byte on
/// 2 ranks; slowdown 1 on 1-2 ranks, 2.2 on 4.
nlohmann::json synthetic(double mac_s, double fixed_s, double unit_s) {
  nlohmann::json j;
  j["format"] = "foresight-cpu-profile/1";
  j["host"] = {{"hostname", "testhost"}, {"cpu_model", "test cpu"}, {"cores", 2}, {"backend", "cpu"},
               {"kernels", "foresight-train cpu backend @ test"}};
  j["created_unix"] = 1;
  for (const char* v : {"matmul_nn", "matmul_nt", "matmul_tn"}) {
    nlohmann::json samples = nlohmann::json::array();
    for (double m : {4.0, 64.0})
      for (double n : {8.0, 256.0})
        for (double k : {8.0, 256.0}) samples.push_back({{"m", m}, {"n", n}, {"k", k}, {"time_s", mac_s * m * n * k}});
    j["ops"][v]["samples"] = samples;
  }
  for (const std::string& op : host_profile_ops())
    j["ops"][op] = {{"unit", "element"}, {"fixed_s", fixed_s}, {"per_unit_s", unit_s}, {"samples", nlohmann::json::array()}};
  j["memory"] = {{"copy_GBps", 10.0}};
  j["mpi"] = {{{"ranks", 2},
               {"collectives",
                {{"all_reduce", {{"fixed_s", 10e-6}, {"per_byte_s", 1e-9}}},
                 {"send_recv", {{"fixed_s", 2e-6}, {"per_byte_s", 0.5e-9}}}}}}};
  j["oversubscription"] = {{{"ranks", 1}, {"slowdown", 1.0}}, {{"ranks", 2}, {"slowdown", 1.0}}, {{"ranks", 4}, {"slowdown", 2.2}}};
  return j;
}

std::shared_ptr<const HostProfile> profile_of(const nlohmann::json& j) {
  return std::make_shared<const HostProfile>(parse_host_profile(j.dump(), "test.json"));
}

/// A one-node cluster of 4 ranks priced by the profile `j`, written to a file of this process named
/// by `tag` (profiles are cached by path, so each profile a test prices needs a name of its own).
ClusterSpec host_cluster(const nlohmann::json& j, const std::string& tag) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("foresight-host-profile-" + tag + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << j.dump();
  ClusterSpec c;
  c.name = "host";
  c.nodes = 1;
  c.gpus_per_node = 4;
  c.gpu.name = "cpu";
  c.gpu.host_profile = path.string();
  return c;
}

// A 1-rank layer of hidden 8, 2 heads (head dim 4), FFN 32, one sequence of 4 tokens.
ModelSpec small_model() {
  return ModelSpec{.name = "t", .layers = 2, .hidden = 8, .heads = 2, .seq_len = 4, .vocab = 16, .ffn_hidden = 32,
                   .kv_heads = 2, .moe = std::nullopt};
}

TEST(HostProfile, LayerUnitsMatchAHandCountOfTheBackendCalls) {
  // 1 ns per unit and per multiply-add, no fixed cost: the time in ns is the work.
  const HostOps ops(profile_of(synthetic(1e-9, 0, 1e-9)), 1);
  PlanSpec p;
  const LayerTimes t = host_layer_times(ops, small_model(), p, 4, 4, false);
  // Forward (n = N = 4 tokens, h = 8, 3h = 24, f = 32; causal pairs 4*5/2 = 10 per head):
  //  norms 2 x (32 + 2 x 4 + 32) = 144; QKV 96 + 4*24*8 + 96 = 960; core 32 + 32 + 2*10*4 = 144;
  //  projection 32 + 4*8*8 = 288; bias+residual 2 x (32 + 32) = 128; FC1 128 + 4*32*8 + 128 = 1280;
  //  GeLU 128 + 128 = 256; FC2 32 + 4*8*32 = 1056.  Sum 4256.
  EXPECT_NEAR(t.forward().value(), 4256e-9, 1e-15);
  EXPECT_NEAR(t.recompute_selective().value(), 144e-9, 1e-15);
  // Backward: FC2 32 + 1024 + 1024 = 2080 (its input gradient is matmul_dgelu: no dgelu tensor);
  //  GeLU 128 + 128 + 128 = 384 (dfc1's zeros, the GeLU' pass, FC1's bias gradient); FC1 1024 + 32
  //  + 1024 = 2080; norms 2 x (32 + 32) = 128; residual adds 64; projection 32 + 256 + 32 + 256 =
  //  576; core 96 + 80 = 176; QKV 96 + 768 + 32 + 768 = 1664.  Sum 7152.
  EXPECT_NEAR(t.backward().value(), 7152e-9, 1e-15);
}

TEST(HostProfile, LayerCallsMatchAHandCountOfTheBackendCalls) {
  // 1 s per call of every non-GEMM op and nothing per unit: the time counts the calls.
  const HostOps ops(profile_of(synthetic(1e-30, 1.0, 0)), 1);
  PlanSpec p;
  const LayerTimes t = host_layer_times(ops, small_model(), p, 4, 4, false);
  // Forward: norms 2 x (zeros, 2 zeros, layernorm) 8; QKV zeros + bias 2; core 2 zeros + attention
  // 3; projection zeros 1; 2 x (bias, add) 4; FC1 zeros + bias 2; GeLU zeros + gelu 2; FC2 zeros 1.
  EXPECT_NEAR(t.forward().value(), 23.0, 1e-6);
  // Backward: FC2 bias_backward 1; GeLU zeros + gelu + bias 3; FC1 zeros 1; norms 2 x 2 = 4;
  // adds 2; projection bias + zeros 2; core zeros + attention 2; QKV bias + zeros 2.
  EXPECT_NEAR(t.backward().value(), 17.0, 1e-6);
}

TEST(HostProfile, GemmOfAMeasuredShapeIsItsTimeAndOthersInterpolateTheRate) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  // Make the tn variant twice as slow at m = 64 than at m = 4.
  for (auto& s : j["ops"]["matmul_tn"]["samples"])
    if (s["m"] == 64.0) s["time_s"] = 2e-9 * s["m"].get<double>() * s["n"].get<double>() * s["k"].get<double>();
  const HostOps ops(profile_of(j), 1);
  EXPECT_NEAR(ops.matmul(MatmulVariant::nn, 64, 256, 8).value(), 1e-9 * 64 * 256 * 8, 1e-15);
  EXPECT_NEAR(ops.matmul(MatmulVariant::tn, 64, 256, 8).value(), 2e-9 * 64 * 256 * 8, 1e-15);
  // Between the two m values, the rate lies between 1 and 2 ns per multiply-add.
  const double rate = ops.matmul(MatmulVariant::tn, 16, 256, 8).value() / (16.0 * 256 * 8);
  EXPECT_GT(rate, 1e-9);
  EXPECT_LT(rate, 2e-9);
}

TEST(HostProfile, SlowdownInterpolatesAndTimeSharesBeyondTheMeasuredCounts) {
  const auto p = profile_of(synthetic(1e-9, 0, 1e-9));
  EXPECT_DOUBLE_EQ(p->slowdown_for(1), 1.0);
  EXPECT_DOUBLE_EQ(p->slowdown_for(3), 1.6);       // halfway between 1.0 (2 ranks) and 2.2 (4)
  EXPECT_DOUBLE_EQ(p->slowdown_for(8), 2.2 * 2);   // twice the ranks of the last measured count
  const HostOps four(p, 4);
  EXPECT_NEAR(four.op("add", 1000).value(), 2.2 * 1000e-9, 1e-15);
}

TEST(HostProfile, StepContextScalesEveryOpAndStacksOnTheSlowdown) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  j["step_context"] = {{"plan", "context-calibration"}, {"factor", 1.25}};
  const auto p = profile_of(j);
  EXPECT_DOUBLE_EQ(p->step_context, 1.25);
  // One rank: 1.25 x the measured times; four ranks: 1.25 x 2.2 (the slowdown of four).
  const HostOps one(p, 1), four(p, 4);
  EXPECT_NEAR(one.matmul(MatmulVariant::nn, 64, 256, 8).value(), 1.25e-9 * 64 * 256 * 8, 1e-15);
  EXPECT_NEAR(one.op("add", 1000).value(), 1.25 * 1000e-9, 1e-15);
  EXPECT_NEAR(four.op("add", 1000).value(), 1.25 * 2.2 * 1000e-9, 1e-15);
  // Without it, 1; out of range or not a number, refused naming the field.
  EXPECT_DOUBLE_EQ(profile_of(synthetic(1e-9, 0, 1e-9))->step_context, 1.0);
  for (const nlohmann::json& bad : {nlohmann::json(3.0), nlohmann::json(0.2), nlohmann::json("fast")}) {
    j["step_context"]["factor"] = bad;
    try {
      parse_host_profile(j.dump(), "p.json");
      FAIL() << "accepted step_context.factor " << bad.dump();
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), "step_context.factor");
    }
  }
}

// A calibration whose step context read outside the plausible range twice records the reading and
// uses 1 (apps/cli/local_loop.cpp): such a profile says it fell back, and validate --local makes a
// new one rather than reuse it. A reading that was used (measured = factor) did not fall back.
TEST(HostProfile, AStepContextReadingNotUsedMarksTheProfileAsFallenBack) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  j["step_context"] = {{"plan", "context-calibration"}, {"measured_factor", 1.447}, {"factor", 1.0}};
  const auto fell = profile_of(j);
  EXPECT_DOUBLE_EQ(fell->step_context, 1.0);
  ASSERT_TRUE(fell->step_context_measured.has_value());
  EXPECT_DOUBLE_EQ(*fell->step_context_measured, 1.447);
  EXPECT_TRUE(fell->step_context_fell_back());
  j["step_context"] = {{"plan", "context-calibration"}, {"measured_factor", 1.036}, {"factor", 1.036}};
  EXPECT_FALSE(profile_of(j)->step_context_fell_back());
  EXPECT_FALSE(profile_of(synthetic(1e-9, 0, 1e-9))->step_context_fell_back());  // none recorded
}

TEST(HostProfile, MissingOpsAndBadValuesNameTheField) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  j["ops"].erase("gelu_backward");
  try {
    parse_host_profile(j.dump(), "p.json");
    FAIL() << "accepted a profile without gelu_backward";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "ops.gelu_backward");
  }
  j = synthetic(1e-9, 0, 1e-9);
  j["ops"]["matmul_nt"]["samples"][0]["time_s"] = -1;
  try {
    parse_host_profile(j.dump(), "p.json");
    FAIL() << "accepted a negative GEMM time";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "ops.matmul_nt.samples[0].time_s");
  }
  j = synthetic(1e-9, 0, 1e-9);
  j["format"] = "something-else";
  EXPECT_THROW(parse_host_profile(j.dump(), "p.json"), SpecError);
  EXPECT_THROW(parse_host_profile("{not json", "p.json"), SpecError);
}

TEST(HostProfile, OpsProbeIsReadByThreadCountAndABadValueNamesItsEntry) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  EXPECT_TRUE(profile_of(j)->ops_probe_s.empty());  // an older profile: none recorded
  j["ops_probe"] = {{{"threads", 1}, {"probe_s", 0.002}}, {{"threads", 2}, {"probe_s", 0.0021}}};
  const auto p = profile_of(j);
  ASSERT_EQ(p->ops_probe_s.size(), 2u);
  EXPECT_EQ(p->ops_probe_s[1].first, 2);
  EXPECT_DOUBLE_EQ(p->ops_probe_s[1].second, 0.0021);
  j["ops_probe"][1]["probe_s"] = 0;
  try {
    parse_host_profile(j.dump(), "p.json");
    FAIL() << "accepted a probe time of 0";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "ops_probe[1].probe_s");
  }
  j["ops_probe"] = 3;
  EXPECT_THROW(parse_host_profile(j.dump(), "p.json"), SpecError);
}

TEST(HostProfile, CollectivesInTheHostUseTheMeasuredFits) {
  ClusterSpec c = host_cluster(synthetic(1e-9, 0, 1e-9), "comm");
  c.intra.bandwidth = BytesPerSecond(1e12);  // what NCCL's model would use: far faster than measured
  const CommModel comm(c);
  auto group = [](int n) {
    CommGroup g;
    g.ranks = g.ranks_per_node = n;
    return g;
  };
  const CommGroup two = group(2);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(1e6), two).value(), 10e-6 + 1e-3, 1e-12);
  EXPECT_NEAR(comm.time(Collective::send_recv, Bytes(1e6), two).value(), 2e-6 + 0.5e-3, 1e-12);
  // Four ranks: the ring's bus factor 2(n-1)/n grows from 1 to 1.5, its steps from 1 to 3.
  const CommGroup four = group(4);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(1e6), four).value(), 3 * 10e-6 + 1.5e-3, 1e-12);
  // Nothing measured for all-gather: refused with the file named, not priced as NCCL.
  EXPECT_THROW(comm.time(Collective::all_gather, Bytes(1e6), two), SpecError);
}

// With samples, the measured group size reads them, by hand: all-reduce on 2 ranks measured at
// 1 KiB 2 us, 16 KiB 10 us, 64 KiB 16 us (the fit, 10 us + 1 ns/byte, says otherwise). At 16 KiB its
// sample, 10 us; at 40 KiB (24 KiB of the 48 between 16 and 64) halfway, 13 us; under 1 KiB, 2 us;
// at 1 MiB, the largest sample plus the fit's per-byte time for the rest: 16 us + (1048576 - 65536)
// ns. Four ranks (not measured) scale the fit as before; a sample list out of order is refused.
TEST(HostProfile, CollectivesOfTheMeasuredGroupSizeReadBetweenTheirSamples) {
  nlohmann::json j = synthetic(1e-9, 0, 1e-9);
  j["mpi"][0]["collectives"]["all_reduce"]["samples"] = {{{"bytes", 1024}, {"time_s", 2e-6}},
                                                        {{"bytes", 16384}, {"time_s", 10e-6}},
                                                        {{"bytes", 65536}, {"time_s", 16e-6}}};
  const ClusterSpec c = host_cluster(j, "samples");
  const CommModel comm(c);
  CommGroup two, four;
  two.ranks = two.ranks_per_node = 2;
  four.ranks = four.ranks_per_node = 4;
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(16384), two).value(), 10e-6, 1e-15);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(40960), two).value(), 13e-6, 1e-15);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(512), two).value(), 2e-6, 1e-15);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(1048576), two).value(), 16e-6 + (1048576 - 65536) * 1e-9, 1e-15);
  EXPECT_NEAR(comm.time(Collective::all_reduce, Bytes(1e6), four).value(), 3 * 10e-6 + 1.5e-3, 1e-12);
  // send_recv has no samples: its fit.
  EXPECT_NEAR(comm.time(Collective::send_recv, Bytes(1e6), two).value(), 2e-6 + 0.5e-3, 1e-12);
  std::filesystem::remove(c.gpu.host_profile);
  // With samples (4 KiB 5 us, 32 KiB 12 us), a send reads them whatever its group's size (one pair;
  // a pipeline of four stages sends as one of two does): at 18 KiB halfway, 8.5 us. One sample
  // alone: its time below and at it, plus the fit's per-byte time above.
  j["mpi"][0]["collectives"]["send_recv"]["samples"] = {{{"bytes", 4096}, {"time_s", 5e-6}},
                                                       {{"bytes", 32768}, {"time_s", 12e-6}}};
  {
    const ClusterSpec c2 = host_cluster(j, "send-samples");
    const CommModel comm2(c2);
    EXPECT_NEAR(comm2.time(Collective::send_recv, Bytes(18432), two).value(), 8.5e-6, 1e-15);
    EXPECT_NEAR(comm2.time(Collective::send_recv, Bytes(18432), four).value(), 8.5e-6, 1e-15);
    std::filesystem::remove(c2.gpu.host_profile);
  }
  MeasuredCollectives one;
  one.fits[0] = LinearFit{.fixed_s = 1e-6, .per_unit_s = 1e-9};
  one.samples[0] = {{1000.0, 4e-6}};
  EXPECT_DOUBLE_EQ(*one.time(0, 10.0), 4e-6);
  EXPECT_DOUBLE_EQ(*one.time(0, 1000.0), 4e-6);
  EXPECT_DOUBLE_EQ(*one.time(0, 3000.0), 4e-6 + 2000 * 1e-9);
  EXPECT_FALSE(one.time(1, 10.0).has_value());  // all_gather: neither a fit nor samples
  j["mpi"][0]["collectives"]["all_reduce"]["samples"][2]["bytes"] = 8192;
  try {
    parse_host_profile(j.dump(), "p.json");
    FAIL() << "accepted samples out of order";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "mpi[0].collectives.all_reduce.samples[2].bytes");
  }
}

}  // namespace
}  // namespace foresight::cost_models
