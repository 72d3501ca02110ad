// `foresight calibrate`: measures this machine's kernels, collectives and host copies and writes a
// calibration profile (calibrate/calibrate.hpp). Without a GPU it says so and exits 1.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <memory>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/cli/cli.hpp"
#include "apps/cli/local_loop.hpp"
#include "apps/cli/progress.hpp"
#include "foresight/git_sha.hpp"
#include "calibrate/calibrate.hpp"
#include "calibrate/refit.hpp"
#include "core/scenario.hpp"
#include "cost_models/calibrated.hpp"
#include "planner/validation.hpp"

namespace foresight::cli {

namespace {
struct CalibrateArgs {
  std::vector<std::string> models;
  std::string out = "profile.json";
  bool json = false;
  bool quick = false;
  std::string refit;
  bool published = false;
  std::string engine = "analytic";
  std::string backend = "cuda";
};
}  // namespace

namespace {
// Prints the fitted parameters and their held-out errors (both the fresh and the refitted path).
void print_fit(std::ostream& out, const calibrate::Profile& p) {
  const auto& fp = p.fit.params;
  char line[256];
  std::snprintf(line, sizeof line,
                "fitted: gemm efficiency %.3f, memory efficiency %.3f, flash efficiency %.3f, launch %.1f us "
                "(median error %.1f%% over %d samples, %d left out as outliers)\n",
                fp.gemm_efficiency, fp.memory_efficiency, fp.flash_efficiency, fp.launch_overhead.value() * 1e6,
                100 * p.fit.median_rel_error, p.fit.samples, p.fit.rejected);
  out << line;
  std::snprintf(line, sizeof line,
                "held-out median error: gemm %.1f%% (roofline) / %.1f%% (profile interpolation, what the cost model "
                "uses), memory %.1f%%, attention %.1f%%\n",
                100 * p.held_out.gemm, 100 * p.held_out_profile.gemm, 100 * p.held_out.memory,
                100 * p.held_out.attention);
  out << line;
  if (!p.fit.rejected_by_kernel.empty()) {
    out << "left out of the fit as outliers:";
    for (const auto& [name, n] : p.fit.rejected_by_kernel) out << " " << name << " " << n;
    out << "\n";
  }
}

int refit_profile(const std::string& path, const std::string& out_path, std::ostream& out, std::ostream& err) {
  std::ifstream f(path);
  if (!f) {
    err << "foresight calibrate: cannot read " << path << "\n";
    return kExitUserError;
  }
  nlohmann::json j;
  calibrate::Profile p;
  GpuSpec gpu;
  std::vector<calibrate::KernelSample> samples;
  try {
    j = nlohmann::json::parse(f);
    samples = calibrate::samples_from_profile(j);
    p.device = calibrate::device_from_profile(j);
    gpu = load_gpu(resolve_scenario("gpus", p.device.spec));
    if (samples.empty()) throw std::invalid_argument("no gemm, streaming or attention measurements to fit");
    calibrate::fit_into(p, gpu, samples);
  } catch (const std::exception& e) {
    err << "foresight calibrate: " << path << ": " << e.what() << "\n";
    return kExitUserError;
  }
  out << "refitted " << p.device.name << " from " << path << ": " << samples.size() << " kernel samples\n";
  print_fit(out, p);
  if (!out_path.empty()) {
    // Only the fitted block changes; the measurements stay as measured.
    j["fitted"] = calibrate::to_json(p)["fitted"];
    if (!j.contains("source") || !j["source"].is_object()) j["source"] = nlohmann::json::object();
    j["source"]["refitted_by"] = std::string("foresight calibrate --refit at ") + config::kGitSha;
    write_file_atomically(out_path, j.dump(1) + "\n", "--out");  // never a half-written profile (exit 2 if not)
    out << "wrote " << out_path << "\n";
  }
  return kExitOk;
}
}  // namespace

namespace {
/// `foresight calibrate --published`: fits scenarios/calibration.yaml's declared parameters on the
/// experiments marked measured.role: calibration and writes the file back (or to --out).
int fit_published(const std::string& engine_name, const std::string& out_path, std::ostream& out) {
  const std::string declared_path = (std::filesystem::path(scenarios_dir()) / "calibration.yaml").string();
  const cost_models::CalibrationSet declared = cost_models::load_calibration(declared_path);
  const auto engine = *parse_enum<sim::EngineKind>(engine_name);
  cost_models::CalibrationSet fitted = planner::fit_calibration(scenarios_dir(), declared, engine);
  fitted.fit_engine = engine;
  // Error bars from the prediction cases' residuals under the fitted values.
  fitted.bands = planner::error_bands_of(planner::validate_all(scenarios_dir(), engine, {}, &fitted, false));
  const std::string target = out_path.empty() ? declared_path : out_path;
  write_file_atomically(target, cost_models::calibration_yaml(fitted), "--out");
  char line[512];
  out << "Calibrated parameters (fitted on measured.role: calibration cases, " << engine_name << " engine)\n";
  for (const auto& p : fitted.parameters) {
    std::snprintf(line, sizeof line, "  %-34s %12.6g %-2s  range [%g, %g]  %s\n", p.name.c_str(), p.value,
                  p.unit == "1" ? "" : p.unit.c_str(), p.lo, p.hi, p.scope.describe().c_str());
    out << line;
    if (p.fit_cases.empty()) {
      out << "      no calibration case in its scope: left at its neutral value\n";
    } else {
      std::string cases;
      for (const auto& c : p.fit_cases) cases += (cases.empty() ? "" : ", ") + c;
      std::snprintf(line, sizeof line, "      fitted on %zu case(s), rms residual %.2f%%: ", p.fit_cases.size(), p.fit_rms_pct);
      out << line << cases << "\n";
    }
  }
  for (const auto& b : fitted.bands) {
    std::snprintf(line, sizeof line, "  error bar %-46s %3d cases: measured / predicted time %.3g .. %.3g\n",
                  b.describe().c_str(), b.cases, b.lo, b.hi);
    out << line;
  }
  out << "wrote " << target << "\n";
  return kExitOk;
}
}  // namespace

Command calibrate_command() {
  return {"calibrate", "Measure kernels and collectives on the local GPUs and write a calibration profile",
          [](CLI::App& sub) {
            auto a = std::make_shared<CalibrateArgs>();
            sub.add_option("--model", a->models,
                           "Model(s) whose planner shapes to measure, by name or path (default gpt3-1.3b and gpt3-175b)");
            auto* out_opt = sub.add_option("--out", a->out, "Profile file to write (default profile.json)");
            sub.add_flag("--quick", a->quick, "A small grid (about a minute), for smoke tests");
            sub.add_flag("--json", a->json, "Print the profile as JSON on stdout");
            sub.add_option("--refit", a->refit,
                           "Fit again from a profile's measurements (no GPU needed); with --out, write the "
                           "profile with the new fit");
            sub.add_flag("--published", a->published,
                         "Fit the calibrated parameters declared in scenarios/calibration.yaml on the experiments "
                         "marked measured.role: calibration (no GPU needed) and write the file back (or to --out)");
            sub.add_option("--engine", a->engine, "Engine for --published: analytic or simgrid")
                ->check(CLI::IsMember({"analytic", "simgrid"}));
            sub.add_option("--backend", a->backend,
                           "What to measure: cuda (the GPUs' kernels and NCCL, the default) or cpu (the bundled "
                           "trainer's CPU backend op by op, its MPI collectives and the slowdown of concurrent ranks "
                           "on this host, about 80 s on two cores; the ops are timed again, three passes at most, "
                           "when the host changed speed during them; then a calibration plan, one rank at "
                           "micro-batch 1, is run three times for the ops' step context: its step over its "
                           "prediction from the ops alone; --out default cpu-profile.json)")
                ->check(CLI::IsMember({"cuda", "cpu"}));
            return [a, out_opt](std::ostream& out, std::ostream& err) -> int {
              if (a->backend == "cpu") {
                if (a->published || !a->refit.empty() || a->json || !a->models.empty()) {
                  err << "foresight calibrate: --backend cpu takes only --out and --quick\n";
                  return kExitUserError;
                }
                if (out_opt->count() > 0 && a->out.empty()) {
                  err << "foresight calibrate: --out \"\": give a file name\n";
                  return kExitUserError;
                }
                return calibrate_cpu(out_opt->count() > 0 ? a->out : "cpu-profile.json", a->quick, out, err);
              }
              if (a->published) {
                if (a->quick || a->json || !a->models.empty() || !a->refit.empty()) {
                  err << "foresight calibrate: --published takes only --out and --engine (it measures nothing)\n";
                  return kExitUserError;
                }
                return fit_published(a->engine, out_opt->count() > 0 ? a->out : "", out);
              }
              if (!a->refit.empty()) {
                // Refitting measures nothing: the measuring options would be silently ignored.
                if (a->quick || a->json || !a->models.empty()) {
                  err << "foresight calibrate: --refit takes only --out (--quick, --model and --json "
                               "choose what to measure or print, and a refit measures nothing)\n";
                  return kExitUserError;
                }
                if (out_opt->count() > 0 && a->out.empty()) {
                  err << "foresight calibrate: --out \"\": give a file name\n";
                  return kExitUserError;
                }
                return refit_profile(a->refit, out_opt->count() > 0 ? a->out : "", out, err);
              }
              calibrate::CalibrateOptions o;
              o.quick = a->quick;
              o.git_sha = config::kGitSha;
              const std::vector<std::string> names =
                  a->models.empty() ? std::vector<std::string>{"gpt3-1.3b", "gpt3-175b"} : a->models;
              for (const auto& n : names) o.models.push_back(load_model(resolve_scenario("models", n)));
              // One progress display per stage (GEMMs, attention, streaming kernels, collectives, copies).
              const ProgressMode mode = a->json ? ProgressMode::lines : progress_mode(::isatty(STDERR_FILENO));
              std::string last_stage;
              std::unique_ptr<Progress> bar;
              auto progress = [&](const std::string& stage, int done, int total) {
                if (stage != last_stage) {
                  if (bar) bar->finish();
                  bar = std::make_unique<Progress>(err, mode, "calibrate: " + stage, total, "measurements");
                  last_stage = stage;
                }
                bar->update(done + 1);
              };
              calibrate::Profile p;
              try {
                p = calibrate::run_calibration(o, progress);
              } catch (const calibrate::NoDevice& e) {
                err << "foresight calibrate: " << e.what() << "; nothing measured, no profile written\n";
                return kExitInternal;
              } catch (const std::runtime_error& e) {  // a failed CUDA or NCCL call (kernels::CudaError)
                if (bar) bar->finish();
                err << "foresight calibrate: measurement failed: " << e.what() << "\n";
                return kExitInternal;
              }
              if (bar) bar->finish();
              const auto j = calibrate::to_json(p);
              write_file_atomically(a->out, j.dump(1) + "\n", "--out");  // never half-written (exit 2 if not)
              if (a->json) {
                out << j.dump(2) << "\n";
                return kExitOk;
              }
              out << "calibrated " << p.device.name << " in " << int(p.wall_s) << " s: " << p.measurements.size()
                  << " measurements -> " << a->out << "\n";
              print_fit(out, p);
              char line[256];
              double burst = 0, sustained = 0;
              for (const auto& m : p.measurements) {
                if (m.kernel == "gemm_burst") burst = m.tflops;
                if (m.kernel == "gemm_sustained") sustained = m.tflops;
              }
              if (burst > 0 && sustained > 0) {
                std::snprintf(line, sizeof line,
                              "GEMM 8192^3: %.1f TFLOP/s as a burst, %.1f TFLOP/s after a soak (sustained / burst %.3f)\n",
                              burst, sustained, sustained / burst);
                out << line;
              }
              for (const auto& s : p.skipped) out << "skipped: " << s << "\n";
              return kExitOk;
            };
          }};
}

}  // namespace foresight::cli
