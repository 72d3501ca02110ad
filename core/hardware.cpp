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

namespace foresight {

double InterNodeSpec::tier_oversubscription(long long a, long long b) const {
  // Groups nest (each tier's nodes divide the next's), so a pair split at tier t is split at every
  // tier below it too: its traffic climbs through the uplinks of all of them.
  double o = 1.0;
  for (const NetworkTier& t : tiers)
    if (a / t.nodes != b / t.nodes) o *= t.oversubscription;
  return o;
}

}  // namespace foresight
