// The fit step of calibration on its own: from kernel samples to the fitted parameters and their
// held-out errors (used by `foresight calibrate` after measuring), and the samples read back from
// a profile JSON, so that a profile measured on a GPU can be refitted anywhere
// (`foresight calibrate --refit PROFILE`) and its fit checked in CI. CPU only.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/profile_json.hpp"
#include "core/hardware.hpp"

namespace foresight::calibrate {

/// A kernel calibration measures and fits besides GEMMs, by its name in profiles, with the launches
/// its measured call makes (the runner records them; profiles without a "launches" field use these).
struct MeasuredKernel {
  const char* name;
  SampleKind kind;  // memory (streaming) or attention
  int launches;
};
const std::vector<MeasuredKernel>& measured_kernels();
/// The entry for `name`, or null for GEMMs and records that are not fitted (host copies, collectives).
const MeasuredKernel* find_measured_kernel(const std::string& name);

/// What a refit needs of a profile's device block: name, spec (the scenarios/gpus entry its peaks
/// refer to, required) and peak_tflops (finite, positive). Throws std::invalid_argument naming the
/// field, its value and the rule.
DeviceFacts device_from_profile(const nlohmann::json& profile);

/// The kernel samples of a profile's measurements (gemm, the streaming kernels, attention);
/// other records (copies to the host, collectives, the soak) are not samples. Throws
/// std::invalid_argument naming the entry when a field the sample needs is missing or not positive.
std::vector<KernelSample> samples_from_profile(const nlohmann::json& profile);

/// Fits on 3 of every 4 samples of each kind and reports the error on the 4th (roofline, and for
/// GEMMs the profile interpolation the cost model uses), then fits on all: fills p.fit,
/// p.held_out and p.held_out_profile.
void fit_into(Profile& p, const GpuSpec& gpu, const std::vector<KernelSample>& samples);

}  // namespace foresight::calibrate
