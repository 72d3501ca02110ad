// Runs one foresight subcommand in-process and keeps what it printed: the plan and simulate
// tests share it (the absurd-input tests fork instead, to bound time and memory).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "apps/cli/cli.hpp"

namespace cli_run {

struct Outcome {
  int rc;
  std::string out, err;
};

inline Outcome run(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), command);
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(args, out, err);
  return {rc, out.str(), err.str()};
}

}  // namespace cli_run
