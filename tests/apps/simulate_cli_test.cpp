// foresight simulate: what it prints of the execution model, and a plan that does not fit in
// device memory said plainly (stage, need, shortfall) with exit code 3, in text and JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <sstream>

#include "apps/cli/cli.hpp"
#include "tests/apps/cli_run.hpp"

namespace {
using cli_run::Outcome;
Outcome simulate(std::vector<std::string> args) { return cli_run::run("simulate", std::move(args)); }
const std::string kDoesNotFit = std::string(FORESIGHT_TEST_DATA) + "/good/does_not_fit.yaml";
}  // namespace

TEST(SimulateCli, APlanThatDoesNotFitExitsThreeAndSaysWhere) {
  // Per layer, Korthikanti's no-recompute row (b 8, s 2048, h 2048, 16 heads): sbh (34 + 5as/h)
  // = 33,554,432 x (34 + 80) = 3.83 GB, x 24 layers = 91.8 GB of activations alone: more than the
  // 85.9 GB (80 GiB) of an H100.
  const Outcome r = simulate({kDoesNotFit});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.out.find("DOES NOT FIT in device memory: stage 0 needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the GPU has 85.9 GB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB short"), std::string::npos) << r.out;
  const Outcome j = simulate({kDoesNotFit, "--json"});
  EXPECT_EQ(j.rc, 3);
  const auto js = nlohmann::json::parse(j.out);
  EXPECT_FALSE(js["fits"].get<bool>());
  EXPECT_GT(js["memory_shortfall_GB"].get<double>(), 91.8 - 85.9);
  EXPECT_NE(js["checks_failed"].dump().find("memory: stage 0 needs"), std::string::npos);
  EXPECT_EQ(simulate({kDoesNotFit, "--check"}).rc, 3);
}

TEST(SimulateCli, TheSameRunAsPyTorchRunsItFits) {
  // The shipped example: the same model and batch under eager PyTorch (SDPA stores no scores).
  const Outcome r = simulate({"gpt3-1.3b-local-h100", "--json", "--check"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const auto js = nlohmann::json::parse(r.out);
  EXPECT_TRUE(js["fits"].get<bool>());
  EXPECT_EQ(js["attention"], "flash");
  EXPECT_NE(js["framework"].get<std::string>().find("pytorch"), std::string::npos);
  EXPECT_NE(js["profile"].get<std::string>().find("GEMM shapes"), std::string::npos);
}

TEST(SimulateCli, HelpDocumentsTheExitCodes) {
  const Outcome r = simulate({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("3 the plan does not fit in device memory"), std::string::npos) << r.out;
}

TEST(SimulateCli, NamesTheCalibratedParametersInEffect) {
  // scenarios/calibration.yaml scopes the 2020-21 Megatron-LM stack by framework megatron, fp16 and
  // compute capability 8: SC21's 76B row (fp16, A100) gets both of its parameters, Korthikanti's
  // 22B row (bf16, same cluster) none.
  const auto fp16 = nlohmann::json::parse(simulate({"sc21-table1-76b", "--json"}).out);
  const auto names = fp16["calibrated_parameters"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(names.begin(), names.end(), "megatron_fp16_a100_tp_comm_scale"), names.end()) << fp16.dump();
  EXPECT_NE(std::find(names.begin(), names.end(), "megatron_fp16_a100_gemm_scale"), names.end());
  const auto bf16 = nlohmann::json::parse(simulate({"korthikanti-table5-22b-full-recompute", "--json"}).out);
  EXPECT_TRUE(bf16["calibrated_parameters"].empty()) << bf16["calibrated_parameters"].dump();
  const Outcome text = simulate({"sc21-table1-76b"});
  EXPECT_NE(text.out.find("calibrated: megatron_fp16_a100_gemm_scale, megatron_fp16_a100_tp_comm_scale"), std::string::npos)
      << text.out;
}
