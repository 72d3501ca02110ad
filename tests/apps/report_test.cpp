// foresight report: writes the HTML and markdown report with its figures, and the page renders in
// headless Chromium without a console error and with every image it names present as a real PNG.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli/cli.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Width and height from a PNG's IHDR chunk; {0, 0} when the file is not a PNG.
std::pair<unsigned, unsigned> png_size(const fs::path& p) {
  const std::string b = slurp(p);
  if (b.size() < 24 || b.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || b.compare(12, 4, "IHDR") != 0) return {0, 0};
  auto be32 = [&](std::size_t i) {
    return (unsigned(uint8_t(b[i])) << 24) | (unsigned(uint8_t(b[i + 1])) << 16) | (unsigned(uint8_t(b[i + 2])) << 8) |
           unsigned(uint8_t(b[i + 3]));
  };
  return {be32(16), be32(20)};
}

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (fs::exists(c)) return c;
  return "";
}

struct ShellRun {
  int rc = 0;
  std::string out;
};
ShellRun run_shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {127, ""};
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.rc = ::pclose(p);
  return r;
}

class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("foresight-report-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    std::ostringstream out, err;
    // A small search (1.7B on 32 GPUs) and a short timeline keep the test quick.
    rc_ = foresight::cli::run_cli({"report", "--out", dir_.string(), "--plan-experiment", "sc21-table1-1.7b",
                                   "--timeline-experiment", "sc21-table1-18b", "--top", "5", "--threads", "2"},
                                  out, err);
    log_ = out.str() + err.str();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static inline fs::path dir_;
  static inline int rc_ = -1;
  static inline std::string log_;
};

}  // namespace

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

TEST_F(Report, RendersInHeadlessChromiumWithoutConsoleErrors) {
  ASSERT_EQ(rc_, 0) << log_;
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "Chromium is not installed (Debian: apt-get install chromium); not rendered";
  const ShellRun r = run_shell(browser + " --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --dump-dom "
                                    "file://" + (dir_ / "report.html").string() + " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  // Console messages appear as ":CONSOLE(" lines; a page with no script has none, so any is an error.
  EXPECT_EQ(r.out.find(":CONSOLE"), std::string::npos) << r.out;
  // The rendered DOM holds the report's content (the page loaded and parsed).
  EXPECT_NE(r.out.find("<h1>Foresight report</h1>"), std::string::npos);
  EXPECT_NE(r.out.find("report-pareto.png"), std::string::npos);
}

TEST(ReportCli, UnknownExperimentIsRefusedBeforeWritingAnything) {
  const fs::path dir = fs::temp_directory_path() / ("foresight-report-bad-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"report", "--out", dir.string(), "--plan-experiment", "no-such-experiment"}, out, err), 2);
  EXPECT_NE(err.str().find("no-such-experiment"), std::string::npos) << err.str();
  EXPECT_FALSE(fs::exists(dir));
}
