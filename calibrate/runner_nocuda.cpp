// Built without a CUDA toolkit: there is nothing to measure with.
#include "calibrate/calibrate.hpp"

namespace foresight::calibrate {

std::string no_device_reason() {
  return "this build of foresight has no CUDA support (no CUDA toolkit was found at configure time)";
}

Profile run_calibration(const CalibrateOptions&, const ProgressFn&) { throw NoDevice(no_device_reason()); }

}  // namespace foresight::calibrate
