// foresight validate --json: every measured experiment appears with its error; the one-layer
// Korthikanti 2022 Table 4 group stays within its published-data tolerance. And determinism:
// the same inputs give byte-identical JSON, whatever the thread count.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "apps/cli/cli.hpp"
#include "core/scenario.hpp"
#include "planner/validation.hpp"
#include "sim/simgrid_engine.hpp"

namespace {
std::string run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli(args, out, err), 0) << err.str();
  return out.str();
}
}  // namespace

TEST(ValidateCli, EveryMeasuredExperimentIsCompared) {
  const auto j = nlohmann::json::parse(run({"validate", "--json"}));
  std::set<std::string> experiments;
  for (const auto& c : j["cases"]) {
    experiments.insert(c["experiment"].get<std::string>());
    EXPECT_GT(c["published"].get<double>(), 0);
    EXPECT_GT(c["predicted"].get<double>(), 0);
  }
  EXPECT_TRUE(experiments.count("mt-nlg-530b-selene-280"));
  EXPECT_TRUE(experiments.count("sc21-table1-1t"));
  EXPECT_TRUE(experiments.count("korthikanti-table4-full-recompute"));
  EXPECT_TRUE(j.contains("mape_pct") && j.contains("max_abs_pct"));
  bool found = false;
  for (const auto& g : j["groups"])
    if (g["group"] == "Korthikanti 2022 Table 4") {
      found = true;
      EXPECT_EQ(g["cases"].get<int>(), 10);
      EXPECT_LE(g["max_abs_pct"].get<double>(), 10.0);  // the compute issue's target: each within 10%
    }
  EXPECT_TRUE(found);
}

TEST(Determinism, SimulateJsonIsByteIdentical) {
  EXPECT_EQ(run({"simulate", "sc21-table1-145b", "--json"}), run({"simulate", "sc21-table1-145b", "--json"}));
}

TEST(Determinism, PlanJsonIsIndependentOfThreads) {
  const std::vector<std::string> base = {"plan", "--experiment", "sc21-table1-1.7b", "--no-simgrid", "--json", "--top", "5"};
  auto with = [&](const char* threads) {
    auto a = base;
    a.push_back("--threads");
    a.push_back(threads);
    return run(a);
  };
  EXPECT_EQ(with("1"), with("2"));
}

// The TeraPipe 1B layout on the SimGrid engine: its eight DP rings and eight replicas' pipeline
// hops contend for each p3.16xlarge's one NIC. The socket transport's rate depends on how many GPUs
// drive the NIC (0.58 of wire speed for eight, 0.95 for one; comm.cpp), and each traffic class
// keeps its own rate on the shared link (SimgridPlatform's wire factors): -2.0% and +3.6% when
// this bound was set (with one rate per node, the eight-GPU one, they were +12.2% and +17.3%);
// +2.1% and +7.4% by session 40, +4.8% and +8.5% once TeraPipe's own elementwise and softmax
// traffic was priced (session 41; the analytic engine -4.2% and +1.2%): held to 9%.
TEST(ValidateCli, TeraPipe1bWithinNinePercentOnSimGrid) {
  if (!foresight::sim::simgrid_available()) GTEST_SKIP() << "SimGrid not in this build";
  std::map<std::string, double> predicted, published;
  for (const std::string name : {"terapipe-gpt3-1b-p3-gpipe", "terapipe-gpt3-1b-p3-terapipe"}) {
    const auto j = nlohmann::json::parse(run({"simulate", name, "--engine", "simgrid", "--json"}));
    predicted[name] = j["iteration_s"].get<double>();
    const auto e = foresight::load_experiment(foresight::resolve_scenario("experiments", name));
    ASSERT_TRUE(e.measured && e.measured->iteration_s) << name;
    published[name] = *e.measured->iteration_s;
    EXPECT_NEAR(predicted[name] / published[name], 1.0, 0.09) << name << ": " << predicted[name] << " s";
  }
  const double published_speedup = published["terapipe-gpt3-1b-p3-gpipe"] / published["terapipe-gpt3-1b-p3-terapipe"];
  const double speedup = predicted["terapipe-gpt3-1b-p3-gpipe"] / predicted["terapipe-gpt3-1b-p3-terapipe"];
  EXPECT_NEAR(speedup / published_speedup, 1.0, 0.10) << "speedup " << speedup << " vs " << published_speedup;
}


// --local --max-ranks below 1 is refused before anything runs; it used to fall back to the host's
// core count without a word (session 70's fuzzing of the command lines).
TEST(ValidateCli, LocalMaxRanksBelowOneIsRefused) {
  for (const char* value : {"0", "-2"}) {
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli({"validate", "--local", "--max-ranks", value, "--work-dir",
                                       (std::filesystem::temp_directory_path() / "foresight-never-made").string()},
                                      out, err),
              2);
    EXPECT_NE(err.str().find("--max-ranks: must be a whole number from 1"), std::string::npos) << err.str();
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::temp_directory_path() / "foresight-never-made"));
  }
}
