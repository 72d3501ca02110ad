// Built without NCCL: collectives cannot be measured.
#include "calibrate/nccl_sweep.hpp"

namespace foresight::calibrate {

std::vector<Measurement> nccl_sweep(int, bool, const ProgressFn&, std::vector<std::string>& skipped, std::string&) {
  skipped.push_back("nccl: this build has no NCCL; no collective measured");
  return {};
}

}  // namespace foresight::calibrate
