// The fixture of the report tests (report_test.cpp, and the Chromium rendering in
// report_uninstrumented_test.cpp): one report written per test process, helpers to read it.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli/cli.hpp"
#include "core/scenario.hpp"

namespace fs = std::filesystem;

namespace report_fixture {

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

/// The bundled library with three sources' experiments only (SC21 Table 1, Korthikanti Table 4,
/// MT-NLG, three of them calibration cases): the report's validation section over the whole
/// library took 300 s instrumented on CI's machine, and what it renders does not depend on how
/// many rows it has. ValidateCli.EveryMeasuredExperimentIsCompared validates the whole library.
inline fs::path subset_library(const fs::path& dir) {
  const fs::path src = foresight::scenarios_dir();
  fs::create_directories(dir / "experiments");
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.path().filename() != "experiments")
      fs::copy(entry.path(), dir / entry.path().filename(), fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(src / "experiments")) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with("sc21-table1-") || n.starts_with("korthikanti-table4-") || n.starts_with("mt-nlg-530b-selene-"))
      fs::copy_file(entry.path(), dir / "experiments" / n);
  }
  return dir;
}

class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("foresight-report-test-" + std::to_string(::getpid()));
    lib_ = fs::temp_directory_path() / ("foresight-report-library-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::remove_all(lib_);
    const std::string bundled = foresight::scenarios_dir();
    ::setenv("FORESIGHT_SCENARIOS", subset_library(lib_).c_str(), 1);
    std::ostringstream out, err;
    // A small search (1.7B on 32 GPUs) and a short timeline keep the test quick.
    rc_ = foresight::cli::run_cli({"report", "--out", dir_.string(), "--plan-experiment", "sc21-table1-1.7b",
                                   "--timeline-experiment", "sc21-table1-18b", "--top", "5", "--threads", "2"},
                                  out, err);
    ::setenv("FORESIGHT_SCENARIOS", bundled.c_str(), 1);
    log_ = out.str() + err.str();
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    fs::remove_all(lib_);
  }
  static inline fs::path dir_, lib_;
  static inline int rc_ = -1;
  static inline std::string log_;
};

}  // namespace report_fixture

