// `foresight calibrate` without a GPU (this machine, or a build without CUDA): a clear message on
// stderr, exit code 1, and no profile written. With a GPU the full run is scripts/gpu-test.sh's job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

// --refit needs no GPU: the shipped H100 profile refits and, with --out, is written whole with the
// new fit (measurements unchanged); a missing file or a profile without a device spec is refused
// with exit 2 and nothing written.
TEST(CalibrateCli, RefitOfTheShippedProfileAndBadInputs) {
  const std::string shipped = std::string(FORESIGHT_SOURCE_DIR) + "/scenarios/profiles/h100-sxm.json";
  const auto tmp = std::filesystem::temp_directory_path();
  const auto out_path = tmp / "foresight_refit_test_profile.json";
  std::filesystem::remove(out_path);
  std::ostringstream out, err;
  ASSERT_EQ(foresight::cli::run_cli({"calibrate", "--refit", shipped, "--out", out_path.string()}, out, err), 0)
      << err.str();
  EXPECT_NE(out.str().find("held-out median error"), std::string::npos) << out.str();
  ASSERT_TRUE(std::filesystem::exists(out_path));
  EXPECT_GT(std::filesystem::file_size(out_path), 100000u);  // the measurements travel with the fit

  std::ostringstream out2, err2;
  testing::internal::CaptureStderr();
  EXPECT_EQ(foresight::cli::run_cli({"calibrate", "--refit", (tmp / "no-such-profile.json").string()}, out2, err2), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("cannot read"), std::string::npos);

  const auto bad = tmp / "foresight_refit_no_spec.json";
  const auto bad_out = tmp / "foresight_refit_no_spec_out.json";
  std::filesystem::remove(bad_out);
  {
    std::ofstream(bad) << R"({"device": {"name": "x", "peak_tflops": 100},
      "measurements": [{"kernel": "copy", "bytes": 1048576, "time_s": 1e-5}]})";
  }
  std::ostringstream out3, err3;
  testing::internal::CaptureStderr();
  EXPECT_EQ(foresight::cli::run_cli({"calibrate", "--refit", bad.string(), "--out", bad_out.string()}, out3, err3), 2);
  const std::string msg = testing::internal::GetCapturedStderr();
  EXPECT_NE(msg.find("device.spec"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(bad_out));
}
