// NCCL collectives on the GPUs of this machine (single process, ncclCommInitAll): all-reduce,
// all-gather, reduce-scatter, broadcast and all-to-all from 8 B to 1 GiB for every group size from
// 2 to the number of GPUs, with nccl-tests' bus-bandwidth convention. With one GPU (or a build
// without NCCL) nothing is measured and `skipped` says why.
#pragma once

#include <string>
#include <vector>

#include "calibrate/calibrate.hpp"

namespace foresight::calibrate {

std::vector<Measurement> nccl_sweep(int gpus, bool quick, const ProgressFn& progress, std::vector<std::string>& skipped,
                                    std::string& nccl_version);

}  // namespace foresight::calibrate
