// `foresight validate --local`: calibrate, predict, train, compare on this machine.
#pragma once

#include <ostream>
#include <string>

namespace foresight::cli {

struct LocalLoopOptions {
  std::string backend = "cpu";
  std::string work_dir = "foresight-local";  // profile, plans, logs and summaries
  std::string profile;                       // reuse this profile instead of calibrating
  std::string results = "reports/closed-loop.json";
  std::string markdown = "reports/closed-loop.md";
  int steps = 8;
  int max_ranks = 0;  // 0: the host's cores (at least 2)
  bool json = false;
  std::string command;  // as typed, for the report
};

/// Exit 0 when every run succeeded (the comparison is the output, not the exit code), 1 when a
/// run failed (its row says why), 2 on bad options.
int run_local_loop(const LocalLoopOptions& o, std::ostream& out, std::ostream& err);

}  // namespace foresight::cli
