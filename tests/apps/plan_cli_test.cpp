// foresight plan from the command line: an impossible request is a clear user error (exit 2).
#include <gtest/gtest.h>

#include <cctype>
#include <sstream>
#include <string>
#include <vector>

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

// Every row's numbers end in the same column as their headers, whatever the length of the plan's
// description (MT-NLG's top 10 includes "tp4 pp7 dp80 mb1 1f1b rc:full zero1 off:opt off:act",
// 51 characters, longer than the 48 the table once reserved).
TEST(PlanCli, RankedTableColumnsStayAlignedForLongPlanDescriptions) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "mt-nlg-530b-selene-280", "--top", "10", "--no-simgrid"}, out, err);
  ASSERT_EQ(rc, 0) << err.str();
  std::istringstream lines(out.str());
  std::string line, header;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("rank  plan", 0) == 0) header = line;
    else if (!header.empty() && line.size() > 5 && line[3] >= '0' && line[3] <= '9' && line[4] == ' ') rows.push_back(line);
  }
  ASSERT_FALSE(header.empty()) << out.str();
  ASSERT_EQ(rows.size(), 10u) << out.str();
  const std::size_t iteration_end = header.find("iteration s") + std::string("iteration s").size();
  bool saw_long = false;
  for (const std::string& r : rows) {
    saw_long = saw_long || r.find("off:opt off:act") != std::string::npos;
    // The header and every row end at the same column (memory GB is right-aligned), and the
    // iteration time's last digit sits under the header's last letter.
    EXPECT_EQ(r.size(), header.size()) << r;
    ASSERT_GE(r.size(), iteration_end);
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(r[iteration_end - 1]))) << r;
    EXPECT_EQ(r[iteration_end], ' ') << r;
  }
  EXPECT_TRUE(saw_long) << "the test needs a long plan description in the top 10:\n" << out.str();
}
