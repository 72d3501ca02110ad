// foresight report: writes the HTML and markdown report with its figures, and the page renders in
// headless Chromium without a console error and with every image it names present as a real PNG.
#include "tests/apps/report_fixture.hpp"

using namespace report_fixture;

TEST_F(Report, WritesHtmlMarkdownDataAndEveryFigure) {
  ASSERT_EQ(rc_, 0) << log_;
  const std::string html = slurp(dir_ / "report.html");
  const std::string md = slurp(dir_ / "report.md");
  for (const char* section : {"Predicted against published", "closed loop", "Timeline of one iteration", "Plan search"}) {
    EXPECT_NE(html.find(section), std::string::npos) << section;
    EXPECT_NE(md.find(section), std::string::npos) << section;
  }
  // Every image the page names exists as a PNG of real size; the four always-present figures are there.
  const std::regex img("<img src=\"([^\"]+)\"");
  int images = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator(); ++it, ++images) {
    const auto [w, h] = png_size(dir_ / (*it)[1].str());
    EXPECT_GT(w, 300u) << (*it)[1];
    EXPECT_GT(h, 200u) << (*it)[1];
  }
  EXPECT_EQ(images, 4);  // validation, timeline, breakdown, Pareto (no closed-loop data in this test)

  const auto data = nlohmann::json::parse(slurp(dir_ / "report-data.json"));
  const auto& s = data["plan_search"];
  EXPECT_EQ(s["gpus"], 32);
  EXPECT_EQ(s["ranked"].size(), 5u);
  // Breakdown bars: the parts of each ranked plan add up to its iteration time.
  for (const auto& r : s["ranked"]) {
    double sum = 0;
    for (const auto& [k, v] : r["breakdown_s"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum, r["iteration_s"].get<double>(), 1e-6 * r["iteration_s"].get<double>()) << r["plan_text"];
  }
  // The front's fastest plan is the search's best, and no fitting plan beats a front plan on both axes.
  ASSERT_FALSE(s["pareto"].empty());
  EXPECT_DOUBLE_EQ(s["pareto"].back()["iteration_s"].get<double>(), s["ranked"][0]["iteration_s"].get<double>());
  for (const auto& f : s["fitting"])
    for (const auto& p : s["pareto"])
      EXPECT_FALSE(f["iteration_s"].get<double>() < p["iteration_s"].get<double>() &&
                   f["memory_GB"].get<double>() < p["memory_GB"].get<double>());
}


TEST(ReportCli, UnknownExperimentIsRefusedBeforeWritingAnything) {
  const fs::path dir = fs::temp_directory_path() / ("foresight-report-bad-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"report", "--out", dir.string(), "--plan-experiment", "no-such-experiment"}, out, err), 2);
  EXPECT_NE(err.str().find("no-such-experiment"), std::string::npos) << err.str();
  EXPECT_FALSE(fs::exists(dir));
}
