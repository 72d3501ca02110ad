// The subcommand registry of `foresight`. Exit codes: 0 success, 2 bad input (scenario file, plan,
// command line), 1 internal error, 3 (simulate) the plan does not fit in device memory, or what it
// offloads in its nodes' host memory. Libraries never print; only these command functions do.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"  // write_file_atomically, which the commands use

namespace CLI {
class App;
}

namespace foresight {
struct PlanSpec;
}

namespace foresight::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUserError = 2;
inline constexpr int kExitDoesNotFit = 3;  // simulate: the most loaded GPU exceeds device memory, or the offload host memory

/// One subcommand: `setup` adds its options to `sub` and returns the action to run after parsing.
struct Command {
  std::string name;
  std::string help;
  std::function<std::function<int(std::ostream& out, std::ostream& err)>(CLI::App& sub)> setup;
};

/// Every registered subcommand, in --help order.
const std::vector<Command>& commands();

/// Parses argv, runs the chosen subcommand, maps errors to exit codes and messages on `err`.
int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err);

/// Convenience for tests: run_cli with a vector of arguments (argv[0] added).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

/// A plan in one line: "tp8 pp35 dp8 mb1 1f1b rc:full zero1".
std::string describe_plan(const PlanSpec& p);

/// The plan's recompute as its flags set it, in words: the mode, the first N layers of a stage where
/// only those are recomputed, and the modules recomputed on top (Megatron-Core's --recompute-modules).
std::string recompute_text(const PlanSpec& p);

// Subcommand definitions, one file each in apps/cli/.
Command describe_command();
Command simulate_command();
Command plan_command();
Command validate_command();
Command calibrate_command();
Command report_command();

}  // namespace foresight::cli
