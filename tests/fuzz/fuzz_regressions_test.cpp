// Every input a fuzz target once failed on (tests/data/fuzz-regressions/<target>/, minimized by
// scripts/fuzz.sh or written by hand for findings made while reading the code) is replayed here, in
// every build, so that it stays fixed: each must now be accepted or refused through SpecError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "tests/fuzz/fuzz_inputs.hpp"

namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::function<void(const std::string&)>> kTargets = {
    {"scenario_yaml", foresight::fuzz::scenario_yaml},
    {"plan_json", foresight::fuzz::plan_json},
    {"profile_json", foresight::fuzz::profile_json}};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class FuzzRegression : public ::testing::TestWithParam<std::string> {};

TEST_P(FuzzRegression, EveryInputIsAcceptedOrRefusedThroughSpecError) {
  const fs::path dir = fs::path(FORESIGHT_REGRESSIONS) / GetParam();
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int replayed = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (!f.is_regular_file() || f.path().filename() == "README.md") continue;
    SCOPED_TRACE(f.path().string());
    try {
      kTargets.at(GetParam())(slurp(f.path()));
    } catch (const std::exception& e) {
      ADD_FAILURE() << f.path() << " escaped the error channel: " << e.what();
    }
    ++replayed;
  }
  EXPECT_GT(replayed, 0) << "no regression inputs in " << dir;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, ::testing::Values("scenario_yaml", "plan_json", "profile_json"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
