#include "core/hardware.hpp"

namespace foresight {

FlopsPerSecond GpuSpec::peak(Dtype dt) const {
  switch (dt) {
    case Dtype::bf16: return peak_bf16;
    case Dtype::fp16: return peak_fp16;
    case Dtype::tf32: return peak_tf32;
    case Dtype::fp32: return peak_fp32;
    case Dtype::fp8: return peak_fp8;
  }
  return peak_bf16;
}

}  // namespace foresight
