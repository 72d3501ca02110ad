// `foresight calibrate` without a GPU (this machine, or a build without CUDA): a clear message on
// stderr, exit code 1, and no profile written. With a GPU the full run is scripts/gpu-test.sh's job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "apps/cli/cli.hpp"
#include "calibrate/calibrate.hpp"
#include "cost_models/profile.hpp"

TEST(CalibrateCli, WithoutAGpuExitsOneAndWritesNothing) {
  if (foresight::calibrate::no_device_reason().empty())
    GTEST_SKIP() << "a CUDA device is present: the no-GPU path cannot be exercised here";
  const auto out_path = std::filesystem::temp_directory_path() / ("foresight_calibrate_test_profile_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(out_path);
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli({"calibrate", "--quick", "--out", out_path.string()}, out, err);
  const std::string msg = err.str();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(msg.find("nothing measured"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out_path));
}

TEST(CalibrateCli, HelpShowsTheOptions) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"calibrate", "--help"}, out, err), 0);
  for (const char* opt : {"--model", "--out", "--quick", "--json", "--refit"}) EXPECT_NE(out.str().find(opt), std::string::npos) << opt;
}

// --refit needs no GPU: the shipped H100 profile refits and, with --out, is written whole with the
// new fit (measurements unchanged, readable by the cost model's parser, no temporary left); bad
// inputs and option mixes are refused with exit 2, naming the field, and nothing written.
TEST(CalibrateCli, RefitOfTheShippedProfileAndBadInputs) {
  const std::string shipped = std::string(FORESIGHT_SOURCE_DIR) + "/scenarios/profiles/h100-sxm.json";
  const auto tmp = std::filesystem::temp_directory_path() / ("foresight_refit_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const auto out_path = tmp / "profile.json";
  std::ostringstream out, err;
  ASSERT_EQ(foresight::cli::run_cli({"calibrate", "--refit", shipped, "--out", out_path.string()}, out, err), 0)
      << err.str();
  EXPECT_NE(out.str().find("held-out median error"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("left out of the fit as outliers:"), std::string::npos) << out.str();
  ASSERT_TRUE(std::filesystem::exists(out_path));
  EXPECT_FALSE(std::filesystem::exists(tmp / "profile.json.tmp"));
  const auto before = nlohmann::json::parse(std::ifstream(shipped));
  const auto after = nlohmann::json::parse(std::ifstream(out_path));
  EXPECT_EQ(after["measurements"], before["measurements"]);
  EXPECT_TRUE(after["fitted"].contains("rejected_as_outliers"));
  EXPECT_TRUE(after["source"].contains("refitted_by"));
  const auto parsed = foresight::cost_models::load_profile(out_path.string());
  EXPECT_GT(parsed.gemm.size(), 300u);

  auto refused = [&](std::vector<std::string> args, const std::string& needle, const std::filesystem::path& target) {
    std::ostringstream o, e;
    EXPECT_EQ(foresight::cli::run_cli(args, o, e), 2) << args[2];
    const std::string msg = e.str();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    if (!target.empty()) {
      EXPECT_FALSE(std::filesystem::exists(target)) << target;
    }
  };
  refused({"calibrate", "--refit", (tmp / "no-such-profile.json").string()}, "cannot read", {});
  refused({"calibrate", "--refit", shipped, "--quick"}, "--refit takes only --out", {});
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp / name) << text;
    return (tmp / name).string();
  };
  const auto bad_out = tmp / "bad_out.json";
  refused({"calibrate", "--refit",
           write("no_spec.json", R"({"device": {"name": "x", "peak_tflops": 100},
             "measurements": [{"kernel": "copy", "bytes": 1048576, "time_s": 1e-5}]})"),
           "--out", bad_out.string()},
          "device.spec", bad_out);
  refused({"calibrate", "--refit",
           write("bad_peak.json", R"({"device": {"name": "x", "spec": "h100-sxm", "peak_tflops": 0},
             "measurements": [{"kernel": "copy", "bytes": 1048576, "time_s": 1e-5}]})"),
           "--out", bad_out.string()},
          "device.peak_tflops = 0: must be a finite positive number", bad_out);
  refused({"calibrate", "--refit",
           write("bad_launches.json", R"({"device": {"name": "x", "spec": "h100-sxm", "peak_tflops": 989.4},
             "measurements": [{"kernel": "copy", "bytes": 1048576, "time_s": 1e-5, "launches": -1}]})"),
           "--out", bad_out.string()},
          "measurements[0] (copy).launches = -1: must be a finite positive number", bad_out);
  refused({"calibrate", "--refit",
           write("bad_entry.json", R"({"device": {"name": "x", "spec": "h100-sxm", "peak_tflops": 989.4},
             "measurements": [7]})"),
           "--out", bad_out.string()},
          "measurements[0] (?): must be an object", bad_out);
  // --out names a directory: the rename fails, the reason is given and no temporary stays.
  refused({"calibrate", "--refit", shipped, "--out", tmp.string()},
          "--out = " + tmp.string() + ": cannot be replaced: Is a directory", {});
  EXPECT_FALSE(std::filesystem::exists(tmp.string() + ".partial"));
  std::filesystem::remove_all(tmp);
}
