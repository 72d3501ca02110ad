// The fixture of the absurd-input tests (absurd_inputs_test.cpp, and the million-GPU plan search
// in absurd_inputs_uninstrumented_test.cpp): each run in a forked child so that its peak memory
// (ru_maxrss) can be measured and a hang cut short (alarm) without taking the test binary down.
#pragma once

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

namespace absurd {

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

}  // namespace absurd
