// `foresight calibrate` without a GPU (this machine, or a build without CUDA): a clear message on
// stderr, exit code 1, and no profile written. With a GPU the full run is scripts/gpu-test.sh's job.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "apps/cli/cli.hpp"
#include "calibrate/calibrate.hpp"

TEST(CalibrateCli, WithoutAGpuExitsOneAndWritesNothing) {
  if (foresight::calibrate::no_device_reason().empty())
    GTEST_SKIP() << "a CUDA device is present: the no-GPU path cannot be exercised here";
  const auto out_path = std::filesystem::temp_directory_path() / "foresight_calibrate_test_profile.json";
  std::filesystem::remove(out_path);
  std::ostringstream out, err;
  testing::internal::CaptureStderr();
  const int rc = foresight::cli::run_cli({"calibrate", "--quick", "--out", out_path.string()}, out, err);
  const std::string msg = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(msg.find("nothing measured"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out_path));
}

TEST(CalibrateCli, HelpShowsTheOptions) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"calibrate", "--help"}, out, err), 0);
  for (const char* opt : {"--model", "--out", "--quick", "--json"}) EXPECT_NE(out.str().find(opt), std::string::npos) << opt;
}
