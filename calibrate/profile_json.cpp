#include "calibrate/profile_json.hpp"

namespace foresight::calibrate {

namespace {
nlohmann::json held_out_json(const HeldOutError& h) {
  return {{"gemm_median_rel_error", h.gemm},       {"gemm_samples", h.n_gemm},
          {"memory_median_rel_error", h.memory},   {"memory_samples", h.n_memory},
          {"attention_median_rel_error", h.attention}, {"attention_samples", h.n_attention}};
}
}  // namespace

nlohmann::json to_json(const Profile& p) {
  nlohmann::json j;
  const auto& d = p.device;
  j["device"] = {{"name", d.name},
                 {"spec", d.spec},
                 {"peak_tflops", d.peak_tflops},
                 {"hbm_GBps", d.hbm_GBps},
                 {"sms", d.sms},
                 {"compute_capability", d.compute_capability},
                 {"memory_GiB", d.memory_GiB},
                 {"l2_MiB", d.l2_MiB},
                 {"clock_MHz", d.clock_MHz},
                 {"memory_clock_MHz", d.memory_clock_MHz},
                 {"driver_version", d.driver_version},
                 {"cuda_runtime_version", d.runtime_version},
                 {"nccl_version", d.nccl_version},
                 {"gpus", d.gpus}};
  j["source"] = {{"tool", "foresight calibrate"}, {"git_sha", p.git_sha}, {"created_utc", p.created_utc},
                 {"model", p.model}, {"wall_s", p.wall_s}};
  nlohmann::json ms = nlohmann::json::array();
  for (const auto& m : p.measurements) {
    nlohmann::json e = m.shape;
    e["kernel"] = m.kernel;
    e["impl"] = m.impl;
    e["dtype"] = m.dtype;
    e["time_s"] = m.timing.median_s;
    e["p10_s"] = m.timing.p10_s;
    e["p90_s"] = m.timing.p90_s;
    e["spread"] = m.timing.spread();
    e["reps"] = m.timing.reps;
    if (m.tflops > 0) e["tflops"] = m.tflops;
    if (m.GBps > 0) e["GBps"] = m.GBps;
    ms.push_back(std::move(e));
  }
  j["measurements"] = std::move(ms);
  j["skipped"] = p.skipped;
  const auto& f = p.fit;
  j["fitted"] = {{"launch_overhead_us", f.params.launch_overhead.value() * 1e6},
                 {"gemm_efficiency", f.params.gemm_efficiency},
                 {"memory_efficiency", f.params.memory_efficiency},
                 {"flash_efficiency", f.params.flash_efficiency},
                 {"samples", f.samples},
                 {"rejected_as_outliers", f.rejected},
                 {"rejected_by_kernel", f.rejected_by_kernel},
                 {"rms_rel_error", f.rms_rel_error},
                 {"median_rel_error", f.median_rel_error},
                 {"held_out_roofline", held_out_json(p.held_out)},
                 {"held_out_profile_interpolation", held_out_json(p.held_out_profile)}};
  // The parser requires a positive launch overhead when present; a fit pinned at zero leaves it out.
  if (!(f.params.launch_overhead.value() > 0)) j["fitted"].erase("launch_overhead_us");
  return j;
}

}  // namespace foresight::calibrate
