// Subcommands whose engines land in later issues. Their options are declared now, so --help shows
// the interface; running one says plainly that it is not available yet and exits 1.
#include <CLI/CLI.hpp>
#include <iostream>

#include "apps/cli/cli.hpp"

namespace foresight::cli {

namespace {
std::function<int(std::ostream&)> not_yet(const std::string& what) {
  return [what](std::ostream&) {
    std::cerr << "foresight: " << what << " is not available in this build yet\n";
    return kExitInternal;
  };
}
}  // namespace

Command calibrate_command() {
  return {"calibrate", "Measure kernels and collectives on the local GPUs and write a calibration profile",
          [](CLI::App& sub) {
            sub.add_option("--model", "Model whose shapes to measure");
            sub.add_option("--out", "Profile file to write (default profile.json)");
            sub.add_flag("--json")->description("Print machine-readable JSON");
            return not_yet("calibrate (needs the CUDA kernels and a GPU)");
          }};
}

}  // namespace foresight::cli
