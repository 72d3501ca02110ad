// Plan searches whose answers are checked here and whose code the sanitizer pass takes through
// smaller searches (plan_cli_test, search_test): the 64-GPU GB200 Llama 3 70B search takes 8 s
// here and 91 s instrumented on CI's machine, so this binary (a *_uninstrumented_test.cpp) is
// labelled sanitizer-skip.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "apps/cli/cli.hpp"

// Megatron-Core offloads a share of its layers (Transformer Engine's cpu_offloading_num_layers): the
// plan's description says how much. Megatron-Bridge's GB200 Llama 3 70B recipe offloads 40 of its
// 80 layers; the search's own offloading plans take the fewest layers that fit, a share below 100%.
// They must also fit the rack's host memory (17,280 GB for 72 GPUs, 240 GB a GPU on a Grace
// superchip's 480 GB): the 80% of four micro-batches' activations that would rank first without that
// check needs about 500 GB a GPU, so the offloading plans rank lower (with the optimizer offloaded
// too); the first of them is checked.
TEST(PlanCli, PartialActivationOffloadSaysItsShare) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "mbridge2511-llama3-70b-64xgb200-fsdp-fp8", "--top", "60", "--no-simgrid"}, out, err);
  ASSERT_EQ(rc, 0) << err.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("off:act50%"), std::string::npos) << text;  // the experiment's own plan
  std::size_t row_start = std::string::npos;
  for (std::size_t at = text.find("\n"); at != std::string::npos; at = text.find('\n', at + 1)) {
    const std::size_t end = text.find('\n', at + 1);
    const std::string line = text.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    if (line.rfind("The experiment", 0) == 0) break;
    if (line.find("off:act") != std::string::npos) {
      row_start = at + 1;
      break;
    }
  }
  ASSERT_NE(row_start, std::string::npos) << "no ranked plan offloads activations:\n" << text;
  const std::string row = text.substr(row_start, text.find('\n', row_start) - row_start);
  const std::size_t share = row.find("off:act");
  const std::size_t pct = row.find('%', share);
  ASSERT_NE(pct, std::string::npos) << row;
  const int percent = std::stoi(row.substr(share + 7, pct - share - 7));
  EXPECT_GT(percent, 0) << row;
  EXPECT_LT(percent, 100) << row;
}
