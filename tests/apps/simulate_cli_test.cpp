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

TEST(SimulateCli, OffloadedStateThatDoesNotFitTheHostExitsThreeAndSaysSo) {
  // ZeRO-Offload of GPT-3 1.3B over one DGX-2's 16 GPUs (ZeRO-2, one micro-batch a step). Its
  // parameters: 24 x (12h^2 + 13h) = 1,208,598,528 with h 2048, embeddings 51,200 x 2048 =
  // 104,857,600, positions 2048 x 2048 = 4,194,304, final norm 4,096: 1,317,654,528. Each GPU
  // updates a sixteenth, 82,353,408, and the host keeps 16 B of each (fp32 master, m, v, and the
  // fp32 gradient DeepSpeed copies down): 1,317,654,528 B a GPU, 21,082,472,448 B for the node's 16,
  // 1,082,472,448 B more than the fixture's 20 GB.
  const std::string fixture = std::string(FORESIGHT_TEST_DATA) + "/good/offload_host_short.yaml";
  const Outcome r = simulate({fixture});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.out.find("DOES NOT FIT in host memory: the offload needs 21.1 GB of host memory per node, a node "
                       "has 20.0 GB: 1.1 GB short"),
            std::string::npos)
      << r.out;
  const Outcome j = simulate({fixture, "--json"});
  EXPECT_EQ(j.rc, 3);
  const auto js = nlohmann::json::parse(j.out);
  EXPECT_FALSE(js["fits"].get<bool>());
  EXPECT_EQ(js["memory_shortfall_GB"].get<double>(), 0.0);  // the device has room
  EXPECT_NEAR(js["host_memory_shortfall_GB"].get<double>(), 1.082472448, 1e-9);
  EXPECT_NEAR(js["host_memory_GB"]["offload"].get<double>(), 21.082472448, 1e-9);
  EXPECT_NEAR(js["host_memory_GB"]["host"].get<double>(), 20.0, 1e-12);
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

TEST(SimulateCli, OpsPricesEachKindOfLayerOpByOp) {
  // DeepSpeed-MoE's 1.3B+MoE-128 (Rajbhandari et al. 2022): 24 layers, an MoE FFN in every other
  // one, i.e. 12 MoE layers and 12 dense ones (../shared/published/datapoints.yaml).
  const Outcome r = simulate({"deepspeed-moe-table3-1.3b-moe128", "--json", "--ops"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto kinds = nlohmann::json::parse(r.out)["ops"]["layer_kinds"];
  ASSERT_EQ(kinds.size(), 2u) << kinds.dump();
  int moe_layers = 0, dense_layers = 0;
  for (const auto& k : kinds) {
    (k["kind"] == "MoE" ? moe_layers : dense_layers) += k["layers"].get<int>();
    EXPECT_EQ(k["forward_ms"]["moe_router"].get<double>() > 0, k["kind"] == "MoE") << k.dump();
    // The layer's row is the sum of its ops.
    for (const char* dir : {"forward", "backward"}) {
      double sum = 0;
      for (const auto& [op, ms] : k[std::string(dir) + "_ms"].items()) sum += ms.get<double>();
      EXPECT_NEAR(sum, k[std::string("layer_") + dir + "_ms"].get<double>(), 1e-9 * sum) << dir;
    }
  }
  EXPECT_EQ(moe_layers, 12);
  EXPECT_EQ(dense_layers, 12);

  // Units: Megatron-Core's 1.7B (h 2048, micro-batch 4 x 4096 tokens, tp 1) has a QKV GEMM of
  // 2 x 16384 x 6144 x 2048 = 4.12e11 FLOP; in the milliseconds printed it must run below the
  // H100's 989.4 bf16 TFLOP/s and above a third of it.
  const Outcome m = simulate({"mcore-r080-weak-gpt-1.7b-48xh100", "--json", "--ops"});
  ASSERT_EQ(m.rc, 0) << m.err;
  const auto dense = nlohmann::json::parse(m.out)["ops"]["layer_kinds"];
  ASSERT_EQ(dense.size(), 1u);
  EXPECT_EQ(dense[0]["layers"], 24);
  EXPECT_EQ(dense[0]["tokens"], 4096);
  const double tflops = 2.0 * 16384 * 6144 * 2048 / (dense[0]["forward_ms"]["qkv"].get<double>() * 1e-3) / 1e12;
  EXPECT_LT(tflops, 989.4);
  EXPECT_GT(tflops, 989.4 / 3);

  const Outcome text = simulate({"mcore-r080-weak-gpt-1.7b-48xh100", "--ops"});
  EXPECT_NE(text.out.find("Compute of one micro-batch on one GPU, op by op (ms; micro-batch 4 x 4096 tokens"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("dense layers (24 of 24)"), std::string::npos);
  EXPECT_NE(text.out.find("final norm, LM head, loss"), std::string::npos);
  // Without --ops nothing of it.
  EXPECT_EQ(simulate({"mcore-r080-weak-gpt-1.7b-48xh100"}).out.find("op by op"), std::string::npos);
}
