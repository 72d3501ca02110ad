// foresight plan from the command line: an impossible request is a clear user error (exit 2).
#include <gtest/gtest.h>

#include <sstream>

#include "apps/cli/cli.hpp"

TEST(PlanCli, ImpossibleRequestSaysWhatRunsOutAndByHowMuch) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "sc21-table1-1t", "--gpus", "8", "--global-batch", "8", "--no-simgrid"}, out, err);
  EXPECT_EQ(rc, 2) << out.str();
  EXPECT_NE(err.str().find("no plan fits"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("GiB more than"), std::string::npos) << err.str();
  EXPECT_TRUE(out.str().empty());
}
