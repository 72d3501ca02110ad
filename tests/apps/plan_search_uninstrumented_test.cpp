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
TEST(PlanCli, PartialActivationOffloadSaysItsShare) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "mbridge2511-llama3-70b-64xgb200-fsdp-fp8", "--top", "1", "--no-simgrid"}, out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("off:act50%"), std::string::npos) << out.str();
  const std::size_t first = out.str().find("   1  ");
  ASSERT_NE(first, std::string::npos) << out.str();
  const std::string row = out.str().substr(first, out.str().find('\n', first) - first);
  EXPECT_NE(row.find("off:act"), std::string::npos) << row;
  EXPECT_NE(row.find("%"), std::string::npos) << row;
}
