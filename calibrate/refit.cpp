#include "calibrate/refit.hpp"

#include <cmath>
#include <stdexcept>

#include "calibrate/stats.hpp"
#include "cost_models/profile.hpp"

namespace foresight::calibrate {

int default_launches(const std::string& kernel) {
  // Attention forward+backward and layernorm backward (dx, then dgamma/dbeta) are two launches;
  // every other measured call one. Profiles from this commit on also record "launches".
  return kernel == "attention" || kernel == "layernorm_backward" ? 2 : 1;
}

namespace {
std::string where(const nlohmann::json& e, std::size_t index) {
  std::string k = "?";
  if (e.is_object() && e.contains("kernel") && e["kernel"].is_string()) k = e["kernel"].get<std::string>();
  return "measurements[" + std::to_string(index) + "] (" + k + ")";
}
// A finite positive number, or an error naming the entry, the field, the value and the rule.
double positive(const nlohmann::json& e, const char* field, std::size_t index) {
  const std::string value = e.contains(field) ? e[field].dump() : "missing";
  if (!e.contains(field) || !e[field].is_number() || !std::isfinite(e[field].get<double>()) ||
      !(e[field].get<double>() > 0))
    throw std::invalid_argument(where(e, index) + "." + field + " = " + value + ": must be a finite positive number");
  return e[field].get<double>();
}
double positive_or(const nlohmann::json& e, const char* field, std::size_t index, double fallback) {
  return e.contains(field) ? positive(e, field, index) : fallback;
}
}  // namespace

std::vector<KernelSample> samples_from_profile(const nlohmann::json& profile) {
  std::vector<KernelSample> out;
  if (!profile.contains("measurements") || !profile["measurements"].is_array())
    throw std::invalid_argument("profile: no 'measurements' array");
  const auto& ms = profile["measurements"];
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const auto& e = ms[i];
    if (!e.is_object() || !e.contains("kernel") || !e["kernel"].is_string())
      throw std::invalid_argument(where(e, i) + ": must be an object with a string field 'kernel'");
    const std::string kernel = e["kernel"].get<std::string>();
    KernelSample s;
    s.name = kernel;
    if (kernel == "gemm") {
      s.kind = SampleKind::gemm;
      s.gemm = {positive(e, "m", i), positive(e, "n", i), positive(e, "k", i), positive_or(e, "batch", i, 1.0)};
    } else if (kernel == "copy" || kernel == "gelu_forward" || kernel == "gelu_backward" || kernel == "residual_add" ||
               kernel == "layernorm_forward" || kernel == "layernorm_backward" || kernel == "softmax_cross_entropy" ||
               kernel == "adamw") {
      s.kind = SampleKind::memory;
      s.bytes = positive(e, "bytes", i);
      s.launches = int(positive_or(e, "launches", i, default_launches(kernel)));
    } else if (kernel == "attention_fwd" || kernel == "attention") {
      s.kind = SampleKind::attention;
      const double B = positive(e, "B", i), H = positive(e, "H", i), T = positive(e, "T", i);
      s.batch_heads = B * H;
      s.tokens = s.context = T;
      s.head_dim = positive(e, "D", i);
      s.passes = kernel == "attention" ? 3.5 : 1.0;
      s.launches = default_launches(kernel);
    } else {
      continue;  // host copies, collectives, the burst/soak pair, GEMMs with epilogues
    }
    s.time_s = positive(e, "time_s", i);
    out.push_back(std::move(s));
  }
  return out;
}

void fit_into(Profile& p, const GpuSpec& gpu, const std::vector<KernelSample>& samples) {
  const auto [train, held] = split_held_out(samples, 4);
  const auto part = fit_roofline(gpu, Dtype::bf16, train);
  p.held_out = held_out_error(gpu, Dtype::bf16, part.params, held);
  // What the cost model does with a profile for GEMMs: interpolate the measured efficiencies.
  cost_models::CalibrationProfile cp;
  cp.peak_tflops = p.device.peak_tflops;
  for (const auto& s : train)
    if (s.kind == SampleKind::gemm) cp.gemm.push_back({s.gemm.m, s.gemm.n, s.gemm.k, s.gemm.batch, s.time_s});
  std::vector<double> interp;
  for (const auto& s : held)
    if (s.kind == SampleKind::gemm && !cp.gemm.empty())
      interp.push_back(std::abs(cost_models::profile_gemm(cp, s.gemm.m, s.gemm.n, s.gemm.k, s.gemm.batch).time_s -
                                s.time_s) /
                       s.time_s);
  p.held_out_profile = {};
  if (!interp.empty()) {
    p.held_out_profile.gemm = quantile(interp, 0.5);
    p.held_out_profile.n_gemm = int(interp.size());
  }
  p.fit = fit_roofline(gpu, Dtype::bf16, samples);
}

}  // namespace foresight::calibrate
