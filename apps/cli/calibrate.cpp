// `foresight calibrate`: measures this machine's kernels, collectives and host copies and writes a
// calibration profile (calibrate/calibrate.hpp). Without a GPU it says so and exits 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "apps/cli/cli.hpp"
#include "calibrate/calibrate.hpp"
#include "core/scenario.hpp"

namespace foresight::cli {

namespace {
struct CalibrateArgs {
  std::vector<std::string> models;
  std::string out = "profile.json";
  bool json = false;
  bool quick = false;
};
}  // namespace

Command calibrate_command() {
  return {"calibrate", "Measure kernels and collectives on the local GPUs and write a calibration profile",
          [](CLI::App& sub) {
            auto a = std::make_shared<CalibrateArgs>();
            sub.add_option("--model", a->models,
                           "Model(s) whose planner shapes to measure, by name or path (default gpt3-1.3b and gpt3-175b)");
            sub.add_option("--out", a->out, "Profile file to write (default profile.json)");
            sub.add_flag("--quick", a->quick, "A small grid (about a minute), for smoke tests");
            sub.add_flag("--json", a->json, "Print the profile as JSON on stdout");
            return [a](std::ostream& out) -> int {
              calibrate::CalibrateOptions o;
              o.quick = a->quick;
              o.git_sha = FORESIGHT_GIT_SHA;
              const std::vector<std::string> names =
                  a->models.empty() ? std::vector<std::string>{"gpt3-1.3b", "gpt3-175b"} : a->models;
              for (const auto& n : names) o.models.push_back(load_model(resolve_scenario("models", n)));
              std::string last_stage;
              auto progress = [&](const std::string& stage, int done, int total) {
                if (stage != last_stage && !last_stage.empty()) std::cerr << "\n";
                last_stage = stage;
                std::cerr << "\r[calibrate] " << stage << " " << done + 1 << "/" << total << std::flush;
              };
              calibrate::Profile p;
              try {
                p = calibrate::run_calibration(o, progress);
              } catch (const calibrate::NoDevice& e) {
                std::cerr << "foresight calibrate: " << e.what() << "; nothing measured, no profile written\n";
                return kExitInternal;
              } catch (const std::runtime_error& e) {  // a failed CUDA or NCCL call (kernels::CudaError)
                std::cerr << "\nforesight calibrate: measurement failed: " << e.what() << "\n";
                return kExitInternal;
              }
              std::cerr << "\n";
              const auto j = calibrate::to_json(p);
              std::ofstream f(a->out);
              if (!f) {
                std::cerr << "foresight calibrate: cannot write " << a->out << "\n";
                return kExitInternal;
              }
              f << j.dump(1) << "\n";
              if (a->json) {
                out << j.dump(2) << "\n";
                return kExitOk;
              }
              const auto& fp = p.fit.params;
              out << "calibrated " << p.device.name << " in " << int(p.wall_s) << " s: " << p.measurements.size()
                  << " measurements -> " << a->out << "\n";
              char line[256];
              std::snprintf(line, sizeof line,
                            "fitted: gemm efficiency %.3f, memory efficiency %.3f, flash efficiency %.3f, launch %.1f us "
                            "(median error %.1f%%)\n",
                            fp.gemm_efficiency, fp.memory_efficiency, fp.flash_efficiency,
                            fp.launch_overhead.value() * 1e6, 100 * p.fit.median_rel_error);
              out << line;
              std::snprintf(line, sizeof line,
                            "held-out median error: gemm %.1f%% (roofline) / %.1f%% (profile interpolation), memory "
                            "%.1f%%, attention %.1f%%\n",
                            100 * p.held_out.gemm, 100 * p.held_out_profile.gemm, 100 * p.held_out.memory,
                            100 * p.held_out.attention);
              out << line;
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
