// The report page rendered in headless Chromium: its time goes to Python and Chromium, which the
// sanitizers do not instrument, so this binary (a *_uninstrumented_test.cpp) is labelled
// sanitizer-skip; the report's C++ runs under them in report_test.cpp.
#include "tests/apps/report_fixture.hpp"

using namespace report_fixture;

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
