// `foresight calibrate --backend cpu` and `validate --local`: the fit they rely on, against hand
// values, and their refusals of bad arguments (exit 2, nothing written). The whole measurement and
// loop run in apps.ClosedLoopCpu (tests/apps/closed_loop.cmake).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <unistd.h>

#include "cli_run.hpp"
#include "calibrate/cpu_bench.hpp"
#include "trainer/backend.hpp"
#include "trainer/cpu_backend.hpp"

namespace {

TEST(CpuCalibration, LinearFitRecoversAnExactLine) {
  const std::vector<double> units = {1e3, 4e3, 16e3, 64e3};
  std::vector<double> times;
  for (double u : units) times.push_back(3e-6 + 2e-9 * u);
  const auto f = foresight::calibrate::fit_linear(units, times);
  EXPECT_NEAR(f.fixed_s, 3e-6, 1e-12);
  EXPECT_NEAR(f.per_unit_s, 2e-9, 1e-15);
  EXPECT_NEAR(f.max_rel_residual, 0.0, 1e-9);
}

TEST(CpuCalibration, CollectivesOfSeveralLaunchesAreTakenAtEachSizesQuickest) {
  // Three launches of one collective on the line 5 us + 0.1 ns/byte, each slow somewhere else: the
  // first 10x at 1 KiB, the second 3x at 4 MiB, the third 1.5x everywhere. Merged: the line itself.
  const std::vector<double> bytes = {1024, 16384, 262144, 4194304};
  auto line = [](double b) { return 5e-6 + 1e-10 * b; };
  std::vector<nlohmann::ordered_json> launches;
  for (int k = 0; k < 3; ++k) {
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      double t = line(bytes[i]);
      if (k == 0 && i == 0) t *= 10;
      if (k == 1 && i + 1 == bytes.size()) t *= 3;
      if (k == 2) t *= 1.5;
      samples.push_back({{"bytes", bytes[i]}, {"time_s", t}});
    }
    launches.push_back({{"all_reduce", {{"fixed_s", 0.0}, {"per_byte_s", 0.0}, {"samples", samples}}}});
  }
  const auto m = foresight::calibrate::quickest_collectives(launches);
  EXPECT_NEAR(m["all_reduce"]["fixed_s"].get<double>(), 5e-6, 1e-12);
  EXPECT_NEAR(m["all_reduce"]["per_byte_s"].get<double>(), 1e-10, 1e-16);
  EXPECT_EQ(m["all_reduce"]["launches"].get<int>(), 3);
  EXPECT_NEAR(m["all_reduce"]["samples"][0]["time_s"].get<double>(), line(1024), 1e-15);
  // Launches that timed different sizes are not merged.
  launches[1]["all_reduce"]["samples"][2]["bytes"] = 300000.0;
  EXPECT_ANY_THROW(foresight::calibrate::quickest_collectives(launches));
}

TEST(CpuCalibration, ANegativeInterceptIsRefittedThroughTheOrigin) {
  // 1 ns per unit less 2 us: the unconstrained fit's intercept is -2 us, a negative time.
  const std::vector<double> units = {4e3, 8e3, 16e3};
  const std::vector<double> times = {2e-6, 6e-6, 14e-6};
  const auto f = foresight::calibrate::fit_linear(units, times);
  EXPECT_EQ(f.fixed_s, 0.0);
  // Through the origin, relative residuals: b = sum(u/t) / sum((u/t)^2) with u/t = 2000, 1333.3, 1142.9.
  const double x[3] = {4e3 / 2e-6, 8e3 / 6e-6, 16e3 / 14e-6};
  EXPECT_NEAR(f.per_unit_s, (x[0] + x[1] + x[2]) / (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]), 1e-18);
}

TEST(CpuCalibration, AFlatOpIsFittedAsAFixedCost) {
  // A launch-bound GPU op: the same ~4.5 us whatever the size (the first H200 run's copy, add,
  // gelu). The unconstrained slope comes out negative; the flat boundary fits, a = the relative
  // least-squares constant sum(1/t) / sum(1/t^2), the origin one would leave a 90%+ residual.
  const std::vector<double> units = {4096, 16384, 65536, 262144};
  const std::vector<double> times = {4.70e-6, 4.56e-6, 4.67e-6, 4.54e-6};
  const auto f = foresight::calibrate::fit_linear(units, times);
  EXPECT_EQ(f.per_unit_s, 0.0);
  double s1 = 0, s2 = 0;
  for (double t : times) {
    s1 += 1 / t;
    s2 += 1 / (t * t);
  }
  EXPECT_NEAR(f.fixed_s, s1 / s2, 1e-15);
  EXPECT_LT(f.max_rel_residual, 0.02);
}

// A sample's timings (the GEMMs': one per round) are each stated at the probe's quickest readings,
// then the median taken. Hand computation: readings 2, 1, 1, 1 ms, reference 1 ms. A timing before
// reading 0 is read at (2 + 1) / 2 = 1.5x and divided by it, one before reading 1 or 2 at 1x
// (left alone); the probe never makes a timing longer.
TEST(CpuCalibration, EachRoundIsStatedAtTheProbesQuickestReadingsThenTheMedianTaken) {
  using foresight::calibrate::ProbedTiming;
  using foresight::calibrate::settled_time;
  const std::vector<double> readings = {2e-3, 1e-3, 1e-3, 1e-3};
  double largest = 1;
  // Three rounds, the first in the slow spell: 3.0 / 1.5 = 2.0, 1.0, 1.2 -> median 1.2.
  EXPECT_DOUBLE_EQ(settled_time({{3.0, 0}, {1.0, 1}, {1.2, 2}}, readings, 1e-3, &largest), 1.2);
  EXPECT_DOUBLE_EQ(largest, 1.5);
  // A round timed slow during the spell but quick after the scaling does not pull the median down
  // on its own: 0.9 / 1.5 = 0.6, 1.0, 1.2 -> 1.0.
  EXPECT_DOUBLE_EQ(settled_time({{0.9, 0}, {1.0, 1}, {1.2, 2}}, readings, 1e-3, nullptr), 1.0);
  // One timing (every op but the GEMMs): scaled alone.
  EXPECT_DOUBLE_EQ(settled_time({{3.0, 0}}, readings, 1e-3, nullptr), 2.0);
  // A reference above the readings (probe read quicker than it): nothing is multiplied.
  EXPECT_DOUBLE_EQ(settled_time({{3.0, 0}}, readings, 4e-3, nullptr), 3.0);
  // No probe (reading -1, a GPU backend): the plain median, the mean of the middle two when even.
  EXPECT_DOUBLE_EQ(settled_time({{4.0, -1}, {1.0, -1}, {2.0, -1}, {3.0, -1}}, {}, 0, nullptr), 2.5);
  EXPECT_THROW(settled_time({}, readings, 1e-3, nullptr), std::exception);
  EXPECT_THROW(settled_time({{1.0, 3}}, readings, 1e-3, nullptr), std::exception);  // no reading after it
}

// A slow spell the probe saw (its first two readings 1000x the others) is taken out of the samples
// timed in it: they are divided by the probe's time around them over its quickest tenth of readings
// ((1000 + 1000) / 2 = 1000x for the timings of the first half second, (1000 + 1) / 2 = 500.5x for
// the next), the later ones are left alone. Checked against a second calibration whose probe reads
// the same throughout: real timings of a sample vary between the two by tens of percent at most,
// a 500x factor stands out.
TEST(CpuCalibration, SamplesTimedWhileTheProbeReadSlowAreStatedAtItsQuickestReadings) {
  const std::unique_ptr<foresight::trainer::Backend> be = foresight::trainer::make_cpu_backend();
  std::ostringstream log;
  const nlohmann::ordered_json steady = foresight::calibrate::measure_backend(
      *be, [] {}, {.quick = true, .host_probe = [] { return 1e-3; }}, log);
  EXPECT_DOUBLE_EQ(steady["host_probe"]["largest_scale"].get<double>(), 1.0);
  int readings = 0;
  const nlohmann::ordered_json spell = foresight::calibrate::measure_backend(
      *be, [] {}, {.quick = true, .host_probe = [&] { return ++readings <= 2 ? 1.0 : 1e-3; }}, log);
  ASSERT_GE(readings, 4) << "the quick pass took under a second: too few readings to test with";
  EXPECT_DOUBLE_EQ(spell["host_probe"]["reference_s"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(spell["host_probe"]["largest_scale"].get<double>(), 1000.0);
  EXPECT_EQ(spell["host_probe"]["readings"].get<int>(), readings);
  int scaled = 0, kept = 0;
  for (const auto& [name, op] : spell["ops"].items()) {
    const auto& a = op["samples"];
    const auto& b = steady["ops"][name]["samples"];
    for (std::size_t i = 0; i < a.size(); ++i)
      (a[i]["time_s"].get<double>() * 100 < b[i]["time_s"].get<double>() ? scaled : kept)++;
  }
  // The first second's samples (the GEMM grid's first rounds come first) against the later ones.
  EXPECT_GT(scaled, 0) << log.str();
  EXPECT_GT(kept, 0) << log.str();
  EXPECT_NE(log.str().find("host probe during the ops"), std::string::npos) << log.str();
}

TEST(CpuCalibration, RefusesOptionsItDoesNotTake) {
  const auto dir = std::filesystem::temp_directory_path() / ("foresight-calibrate-cpu-test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto a = cli_run::run("calibrate", {"--backend", "cpu", "--published"});
  EXPECT_EQ(a.rc, 2) << a.err;
  EXPECT_NE(a.err.find("--backend cpu"), std::string::npos) << a.err;
  const auto b = cli_run::run("calibrate", {"--backend", "tpu", "--out", (dir / "p.json").string()});
  EXPECT_EQ(b.rc, 2) << b.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "p.json"));
}

TEST(LocalLoop, RefusesBadOptionsBeforeRunningAnything) {
  const auto dir = std::filesystem::temp_directory_path() / ("foresight-local-loop-test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto a = cli_run::run("validate", {"--local", "--backend", "tpu", "--work-dir", dir.string()});
  EXPECT_EQ(a.rc, 2) << a.err;
  EXPECT_NE(a.err.find("--backend"), std::string::npos) << a.err;
  const auto b = cli_run::run("validate", {"--local", "--steps", "1", "--work-dir", dir.string()});
  EXPECT_EQ(b.rc, 2) << b.err;
  EXPECT_NE(b.err.find("--steps"), std::string::npos) << b.err;
  const auto c = cli_run::run("validate", {"--local", "--profile", (dir / "missing.json").string(), "--work-dir",
                                           dir.string()});
  EXPECT_EQ(c.rc, 2) << c.err;
  EXPECT_NE(c.err.find("missing.json"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "a refused run left its work directory behind";
}

}  // namespace
