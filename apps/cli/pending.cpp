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

Command report_command() {
  return {"report", "Write the HTML and markdown report (validation, closed loop, timelines, Pareto front)",
          [](CLI::App& sub) {
            sub.add_option("--out", "Output directory (default reports/)");
            sub.add_flag("--json")->description("Print machine-readable JSON");
            return not_yet("report");
          }};
}

}  // namespace foresight::cli
