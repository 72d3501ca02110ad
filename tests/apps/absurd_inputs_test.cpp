// Absurd but valid inputs (a million GPUs, ten thousand layers, a billion sequences per batch,
// widths at the edge of the integer range): each command either finishes or is refused through the
// user-error channel (exit 2, the field, the value and the rule), within a bounded time and memory.
// Each run happens in a forked child so that its peak memory (ru_maxrss) can be measured and a hang
// can be cut short (alarm) without taking the test binary down.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli/cli.hpp"

namespace fs = std::filesystem;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 4;  // AddressSanitizer: slower, and its shadow memory counts in the RSS
#else
constexpr int kSlowdown = 1;
#endif
constexpr unsigned kSecondsLimit = 60 * kSlowdown;
constexpr long kRssLimitMiB = 1024 * kSlowdown;

struct Outcome {
  int rc = -1;
  std::string out, err;
  long rss_MiB = 0;
};

/// Runs the CLI in a child process; the child is killed after kSecondsLimit.
Outcome run_child(const std::vector<std::string>& args, const fs::path& dir) {
  const fs::path out_file = dir / "stdout.txt", err_file = dir / "stderr.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(kSecondsLimit);
    std::ostringstream out, err;
    const int rc = foresight::cli::run_cli(args, out, err);
    std::ofstream(out_file) << out.str();
    std::ofstream(err_file) << err.str();
    std::_Exit(rc);
  }
  Outcome o;
  int status = 0;
  rusage ru{};
  EXPECT_EQ(::wait4(pid, &status, 0, &ru), pid);
  o.rss_MiB = ru.ru_maxrss / 1024;
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "killed by signal " << WTERMSIG(status)
                  << (WTERMSIG(status) == SIGALRM ? " (did not finish within the time limit)" : "");
    return o;
  }
  o.rc = WEXITSTATUS(status);
  std::ifstream o_in(out_file), e_in(err_file);
  std::stringstream a, b;
  a << o_in.rdbuf();
  b << e_in.rdbuf();
  o.out = a.str();
  o.err = b.str();
  return o;
}

class AbsurdInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("foresight-absurd-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Writes an experiment with the bundled A100 GPU; `model`, `cluster` and `plan` are YAML flow mappings.
  std::string experiment(const std::string& model, const std::string& nodes, int global_batch,
                         const std::string& plan) {
    const fs::path p = dir_ / "experiment.yaml";
    std::ofstream(p) << "experiment:\n  model: " << model << "\n"
                     << "  cluster:\n    name: huge\n    nodes: " << nodes << "\n    gpus_per_node: 8\n"
                     << "    gpu: a100-sxm4-80gb\n"
                     << "    intra_node: {kind: nvswitch, bandwidth_GBps: 300, latency_us: 3}\n"
                     << "    inter_node: {nics_per_node: 8, nic_Gbps: 200, latency_us: 5}\n"
                     << "    host: {pcie_GBps: 25, memory_GB: 2000}\n"
                     << "  training: {global_batch: " << global_batch << "}\n"
                     << "  plan: " << plan << "\n";
    return p.string();
  }

  /// Runs and checks the bounds: finished (not killed), exit 0, 2 or 3 (simulate: does not fit),
  /// peak memory under the limit.
  Outcome run(const std::vector<std::string>& args) {
    Outcome o = run_child(args, dir_);
    EXPECT_TRUE(o.rc == 0 || o.rc == 2 || o.rc == 3) << "exit " << o.rc << ": " << o.err;
    EXPECT_LT(o.rss_MiB, kRssLimitMiB) << "peak memory " << o.rss_MiB << " MiB";
    peak_rss_MiB_ = std::max(peak_rss_MiB_, o.rss_MiB);
    RecordProperty("peak_rss_MiB", std::to_string(peak_rss_MiB_));
    return o;
  }
  void expect_refused(const Outcome& o, const std::vector<std::string>& parts) {
    EXPECT_EQ(o.rc, 2) << o.out;
    EXPECT_TRUE(o.out.empty()) << "nothing on stdout when refused";
    for (const auto& p : parts) EXPECT_NE(o.err.find(p), std::string::npos) << "'" << p << "' missing in: " << o.err;
  }

  fs::path dir_;
  long peak_rss_MiB_ = 0;
};

// GPT-3 175B on a million A100s: 125,000 nodes, tp 8 x pp 8 x dp 15,625, 64 micro-batches each.
constexpr const char* kGpt3 = "{name: gpt3-175b, layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200}";
constexpr const char* kMillionPlan = "{tp: 8, pp: 8, dp: 15625, micro_batch: 1, recompute: full, zero: 1}";

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

TEST_F(AbsurdInputs, MillionGpusPlanSearch) {
  const std::string e = experiment(kGpt3, "125000", 1000000, kMillionPlan);
  Outcome o = run({"plan", "--experiment", e, "--no-simgrid", "--json", "--top", "3", "--threads", "2"});
  ASSERT_EQ(o.rc, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_FALSE(j["ranked"].empty());
  for (const auto& r : j["ranked"]) {
    const auto& pl = r["plan"];
    EXPECT_EQ(pl["tp"].get<long>() * pl["pp"].get<long>() * pl["dp"].get<long>(), 1000000);
  }
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

}  // namespace
