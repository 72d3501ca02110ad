// `foresight validate --local`: calibrate, predict, train, compare on this machine.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace foresight::cli {

struct LocalLoopOptions {
  std::string backend = "cpu";
  std::string work_dir = "foresight-local";  // profile, plans, logs and summaries
  std::string profile;                       // reuse this profile instead of calibrating
  std::string results = "reports/closed-loop.json";
  std::string markdown = "reports/closed-loop.md";
  std::vector<std::string> plans;  // run only these plans of the set (empty: all)
  int steps = 8;
  int rounds = 3;     // each plan runs once per round, rounds one after another
  int attempts = 2;   // runs of a plan per round until one is quiet
  double quiet_tolerance = 0.07;  // a run is quiet when the host probe is at most this much slower than at calibration
  int max_ranks = 0;  // 0: the host's cores (at least 2)
  bool json = false;
  std::string command;  // as typed, for the report
};

/// `foresight calibrate --backend cpu`: the trainer's CPU backend op by op (calibrate/cpu_bench.hpp),
/// then foresight-commbench under mpirun for the MPI collectives (2 ranks, and 4 on 4 or more
/// cores) and the slowdown of 1 .. 2 x cores concurrent ranks; writes the profile to `path`
/// (whole or not at all). Exit 0, or 1 when a measurement failed.
int calibrate_cpu(const std::string& path, bool quick, std::ostream& out, std::ostream& err);
/// The same for another backend of the trainer ("cuda": its ops timed by foresight-commbench --ops,
/// which links the CUDA backend; no collectives or oversubscription for one GPU).
/// `max_concurrent_ranks` > 0 times the slowdown of concurrent ranks up to that count (at least 2)
/// instead of 2 x cores.
int calibrate_trainer_backend(const std::string& path, const std::string& backend, bool quick, std::ostream& out,
                              std::ostream& err, int max_concurrent_ranks = 0);

/// Exit 0 when every run succeeded (the comparison is the output, not the exit code), 1 when a
/// run failed (its row says why), 2 on bad options.
int run_local_loop(const LocalLoopOptions& o, std::ostream& out, std::ostream& err);

}  // namespace foresight::cli
