// Absurd but valid inputs (a million GPUs, ten thousand layers, a billion sequences per batch,
// widths at the edge of the integer range): each command either finishes or is refused through the
// user-error channel (exit 2, the field, the value and the rule), within a bounded time and memory.
// Each run happens in a forked child so that its peak memory (ru_maxrss) can be measured and a hang
// can be cut short (alarm) without taking the test binary down.
#include "tests/apps/absurd_inputs_fixture.hpp"

using namespace absurd;

TEST_F(AbsurdInputs, MillionGpusDescribeAndSimulate) {
  const std::string e = experiment(kGpt3, "125000", 1000000, kMillionPlan);
  Outcome d = run({"describe", e, "--json"});
  ASSERT_EQ(d.rc, 0) << d.err;
  const auto j = nlohmann::json::parse(d.out);
  EXPECT_EQ(j["gpus"].get<double>(), 1e6);
  EXPECT_EQ(j["micro_batches_per_pipeline"].get<double>(), 64);  // 1e6 / (15625 * 1)
  EXPECT_EQ(j["memory_per_stage_GB"].size(), 8u);

  Outcome s = run({"simulate", e, "--json"});
  ASSERT_EQ(s.rc, 0) << s.err;
  const auto p = nlohmann::json::parse(s.out);
  // Tokens per second from the definition: 1e6 sequences of 2048 tokens per iteration.
  const double it = p["iteration_s"].get<double>();
  EXPECT_GT(it, 0);
  EXPECT_NEAR(p["tokens_per_s"].get<double>(), 1e6 * 2048 / it, 1e-6 * 1e6 * 2048 / it);
}

TEST_F(AbsurdInputs, MillionGpusOnSimgridIsRefusedWithTheLimit) {
  // SimGrid replays every data-parallel replica: 15,625 of 1,024 scheduled passes each.
  const std::string e = experiment(kGpt3, "125000", 1000000, kMillionPlan);
  expect_refused(run({"simulate", e, "--engine", "simgrid"}), {"experiment.yaml:", "plan.dp = 15625", "simgrid", "at most", "--engine analytic"});
}


TEST_F(AbsurdInputs, TenThousandLayers) {
  // 10,000 layers of width 1024 over 100 pipeline stages.
  const std::string e = experiment("{name: deep, layers: 10000, hidden: 1024, heads: 16, seq_len: 2048, vocab: 51200}",
                                   "100", 512, "{tp: 8, pp: 100, dp: 1, micro_batch: 1, recompute: full}");
  Outcome d = run({"describe", e, "--json"});
  ASSERT_EQ(d.rc, 0) << d.err;
  // Parameters by hand (Narayanan et al. 2021: 12 L h^2 + 13 L h per layer, plus (V + s) h + 2 h):
  const double L = 10000, h = 1024, V = 51200, s = 2048;
  const double expected = 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h;
  EXPECT_NEAR(nlohmann::json::parse(d.out)["parameters"].get<double>(), expected, 1e-9 * expected);
  Outcome s_ = run({"simulate", e, "--json"});
  ASSERT_EQ(s_.rc, 0) << s_.err;
  EXPECT_EQ(nlohmann::json::parse(s_.out)["memory_per_stage_GB"].size(), 100u);
}

TEST_F(AbsurdInputs, BillionSequenceBatchDescribesButRefusesToSimulate) {
  const std::string e = experiment(kGpt3, "8", 1000000000, "{tp: 8, pp: 8, dp: 1, micro_batch: 1}");
  Outcome d = run({"describe", e, "--json"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_EQ(nlohmann::json::parse(d.out)["tokens_per_iteration"].get<double>(), 1e9 * 2048);
  // 10^9 micro-batches on each of 8 stages: far beyond what the simulator holds.
  expect_refused(run({"simulate", e}), {"experiment.yaml", "training.global_batch = 1000000000", "at most"});
}

TEST_F(AbsurdInputs, HugeWidthsAndVocab) {
  // hidden 2^20, vocab 2^31 - 1: representable, enormous; it does not fit, and says so.
  const std::string e =
      experiment("{name: wide, layers: 8, hidden: 1048576, heads: 128, seq_len: 2048, vocab: 2147483647}", "8", 64,
                 "{tp: 8, pp: 8, dp: 1, micro_batch: 1}");
  Outcome d = run({"describe", e, "--json"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_FALSE(nlohmann::json::parse(d.out)["fits"].get<bool>());
  // simulate still predicts, and exits 3: the plan does not fit in device memory.
  Outcome s = run({"simulate", e, "--json"});
  ASSERT_EQ(s.rc, 3) << s.err;
  EXPECT_TRUE(std::isfinite(nlohmann::json::parse(s.out)["iteration_s"].get<double>()));
  EXPECT_FALSE(nlohmann::json::parse(s.out)["fits"].get<bool>());
}

TEST_F(AbsurdInputs, DefaultFfnBeyondTheIntegerRangeIsRefused) {
  // ffn_hidden defaults to 4 * hidden = 2^32: not representable, refused rather than wrapped.
  const std::string e = experiment("{name: w, layers: 8, hidden: 1073741824, heads: 128, seq_len: 2048, vocab: 51200}",
                                   "8", 64, "{tp: 8, pp: 8, dp: 1, micro_batch: 1}");
  expect_refused(run({"describe", e}), {"experiment.yaml:", "model.ffn_hidden", "4294967296", "at most 2147483647"});
}

TEST_F(AbsurdInputs, ClusterBeyondTheGpuLimitIsRefused) {
  // 2^31 - 1 nodes of 8 GPUs: more GPUs than an int counts; refused at the cluster, not wrapped.
  const std::string e = experiment(kGpt3, "2147483647", 64, "{tp: 8, pp: 8, dp: 1, micro_batch: 1}");
  expect_refused(run({"describe", e}), {"experiment.yaml:", "cluster.nodes = 2147483647", "GPUs", "at most"});
}

TEST_F(AbsurdInputs, PlanProductsBeyondTheIntegerRangeAreRefused) {
  // dp * micro_batch = 2^40 overflows an int: the batch rule must still be judged exactly.
  const std::string e = experiment(kGpt3, "1", 64, "{tp: 1, pp: 1, dp: 8, micro_batch: 137438953472}");
  expect_refused(run({"describe", e}), {"plan.micro_batch = 137438953472", "at most 2147483647"});
  const std::string f = experiment(kGpt3, "1", 2147483647, "{tp: 1, pp: 1, dp: 8, micro_batch: 1073741824}");
  expect_refused(run({"describe", f}), {"training.global_batch = 2147483647", "8 * 1073741824 = 8589934592"});
}
