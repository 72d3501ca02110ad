// foresight describe: the published MT-NLG 280-node figures (issue acceptance) and the memory
// breakdown per pipeline stage.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/cli/cli.hpp"

namespace {
nlohmann::json describe_json(const std::string& experiment) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"describe", experiment, "--json"}, out, err), 0) << err.str();
  return nlohmann::json::parse(out.str());
}
}  // namespace

TEST(Describe, MtNlg280MatchesPublishedSizeAndFlops) {
  const auto j = describe_json("mt-nlg-530b-selene-280");
  EXPECT_NEAR(j["parameters_B"].get<double>() / 530.0, 1.0, 0.01);
  // Smith et al. 2022 sec. 2.4: 126 TFLOP/s per GPU x 2240 GPUs x 60.1 s (hardware FLOPs).
  EXPECT_NEAR(j["hardware_flops_per_iteration"].get<double>() / (126e12 * 2240 * 60.1), 1.0, 0.03);
  EXPECT_EQ(j["gpus"].get<double>(), 2240);
}

TEST(Describe, MemoryPerStageIsReportedAndMtNlgFits) {
  const auto j = describe_json("mt-nlg-530b-selene-280");
  ASSERT_EQ(j["memory_per_stage_GB"].size(), 35u);
  for (const auto& s : j["memory_per_stage_GB"]) {
    const double parts = s["weights"].get<double>() + s["grads"].get<double>() + s["optimizer"].get<double>() +
                         s["activations"].get<double>() + s["buffers"].get<double>() + s["headroom"].get<double>() +
                         s["runtime"].get<double>();
    EXPECT_NEAR(parts, s["total"].get<double>(), 1e-9);
  }
  EXPECT_TRUE(j["fits"].get<bool>());
  // The first stage holds the most in-flight micro-batches under 1F1B (Korthikanti 2022 sec. 4.2.3).
  EXPECT_EQ(j["most_loaded_stage"].get<int>(), 0);
}

TEST(Describe, ConsolePrintsTheStageTable) {
  std::ostringstream out, err;
  ASSERT_EQ(foresight::cli::run_cli({"describe", "sc21-table1-1t"}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("Memory per GPU by pipeline stage (GB"), std::string::npos);
  EXPECT_NE(out.str().find("most loaded"), std::string::npos);
}

TEST(Describe, ThePlanLineNamesWhatTheHardwareFlopsRecompute) {
  // DeepSeek-V3 as NeMo 25.04 ran it recomputes only the MLA up-projections (recompute none plus
  // the module), which the hardware FLOPs count: the labels say so, and name cp/ep where set.
  std::ostringstream out, err;
  ASSERT_EQ(foresight::cli::run_cli({"describe", "dgxc2505-deepseek-v3-1024xh100-bf16"}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("ep 64, 1f1b, recompute none + modules mla_up_proj"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Hardware FLOPs (recompute none + modules mla_up_proj)"), std::string::npos) << out.str();
  const auto j = describe_json("dgxc2505-deepseek-v3-1024xh100-bf16");
  EXPECT_GT(j["hardware_flops_per_iteration"].get<double>(), j["model_flops_per_iteration"].get<double>());
}
