// The million-GPU plan search: the planner's code at a scale that takes 25x longer instrumented,
// so this binary (a *_uninstrumented_test.cpp) is labelled sanitizer-skip; everything it runs is
// in the sanitizer pass through the smaller searches.
#include "tests/apps/absurd_inputs_fixture.hpp"

using namespace absurd;

TEST_F(AbsurdInputs, MillionGpusPlanSearch) {
  const std::string e = experiment(kGpt3, "125000", 1000000, kMillionPlan);
  Outcome o = run({"plan", "--experiment", e, "--no-simgrid", "--json", "--top", "3", "--threads", "2"});
  ASSERT_EQ(o.rc, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_FALSE(j["ranked"].empty());
  for (const auto& r : j["ranked"]) {
    const auto& pl = r["plan"];
    EXPECT_EQ(pl["tp"].get<long>() * pl["pp"].get<long>() * pl["dp"].get<long>(), 1000000);
  }
}
