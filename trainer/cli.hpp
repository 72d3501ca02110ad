// The foresight-train command line: parses the flags, starts the message-passing runtime, reads
// plan.json, trains, prints the per-step log on rank 0 and writes the JSON summary.
// Exit codes: 0 done (or stopped by --stop-after), 2 user error (plan, data, checkpoint, launch),
// 3 non-finite loss or gradient norm, 1 internal error.
#pragma once

namespace foresight::trainer {

int run_trainer_cli(int argc, char** argv);

}  // namespace foresight::trainer
