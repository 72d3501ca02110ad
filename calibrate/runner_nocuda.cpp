// Built without a CUDA toolkit: there is nothing to measure with.
#include "calibrate/calibrate.hpp"

namespace foresight::calibrate {

Profile run_calibration(const CalibrateOptions&, const ProgressFn&) {
  throw NoDevice("this build of foresight has no CUDA support (no CUDA toolkit was found at configure time)");
}

}  // namespace foresight::calibrate
