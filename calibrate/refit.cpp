#include "calibrate/refit.hpp"

#include <cmath>
#include <stdexcept>

#include "calibrate/stats.hpp"
#include "cost_models/profile.hpp"

namespace foresight::calibrate {

const std::vector<MeasuredKernel>& measured_kernels() {
  // Attention forward+backward and layernorm backward (dx, then dgamma/dbeta) are two launches.
  static const std::vector<MeasuredKernel> k = {
      {"copy", SampleKind::memory, 1},
      {"gelu_forward", SampleKind::memory, 1},
      {"gelu_backward", SampleKind::memory, 1},
      {"residual_add", SampleKind::memory, 1},
      {"layernorm_forward", SampleKind::memory, 1},
      {"layernorm_backward", SampleKind::memory, 2},
      {"softmax_cross_entropy", SampleKind::memory, 1},
      {"adamw", SampleKind::memory, 1},
      {"attention_fwd", SampleKind::attention, 1},
      {"attention", SampleKind::attention, 2},
  };
  return k;
}

const MeasuredKernel* find_measured_kernel(const std::string& name) {
  for (const auto& k : measured_kernels())
    if (name == k.name) return &k;
  return nullptr;
}

namespace {
std::string where(const nlohmann::json& e, std::size_t index) {
  std::string k = "?";
  if (e.is_object() && e.contains("kernel") && e["kernel"].is_string()) k = e["kernel"].get<std::string>();
  return "measurements[" + std::to_string(index) + "] (" + k + ")";
}
// A finite positive number, or an error naming the entry (`path`), the field, the value and the rule.
double positive(const nlohmann::json& e, const char* field, const std::string& path) {
  const std::string value = e.contains(field) ? e[field].dump() : "missing";
  if (!e.contains(field) || !e[field].is_number() || !std::isfinite(e[field].get<double>()) ||
      !(e[field].get<double>() > 0))
    throw std::invalid_argument(path + "." + field + " = " + value + ": must be a finite positive number");
  return e[field].get<double>();
}
double positive(const nlohmann::json& e, const char* field, std::size_t index) {
  return positive(e, field, where(e, index));
}
double positive_or(const nlohmann::json& e, const char* field, std::size_t index, double fallback) {
  return e.contains(field) ? positive(e, field, index) : fallback;
}
}  // namespace

DeviceFacts device_from_profile(const nlohmann::json& profile) {
  if (!profile.contains("device") || !profile["device"].is_object())
    throw std::invalid_argument("device: missing or not an object");
  const auto& d = profile["device"];
  DeviceFacts f;
  f.name = d.contains("name") && d["name"].is_string() ? d["name"].get<std::string>() : "";
  f.spec = d.contains("spec") && d["spec"].is_string() ? d["spec"].get<std::string>() : "";
  if (f.spec.empty())
    throw std::invalid_argument("device.spec = \"\": the refit needs the scenarios/gpus entry the peaks refer to");
  f.peak_tflops = positive(d, "peak_tflops", "device");
  return f;
}

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
    const MeasuredKernel* known = find_measured_kernel(kernel);
    KernelSample s;
    s.name = kernel;
    if (kernel == "gemm") {
      s.kind = SampleKind::gemm;
      s.gemm = {positive(e, "m", i), positive(e, "n", i), positive(e, "k", i), positive_or(e, "batch", i, 1.0)};
    } else if (known && known->kind == SampleKind::memory) {
      s.kind = SampleKind::memory;
      s.bytes = positive(e, "bytes", i);
      s.launches = int(positive_or(e, "launches", i, known->launches));
    } else if (known && known->kind == SampleKind::attention) {
      s.kind = SampleKind::attention;
      const double B = positive(e, "B", i), H = positive(e, "H", i), T = positive(e, "T", i);
      s.batch_heads = B * H;
      s.tokens = s.context = T;
      s.head_dim = positive(e, "D", i);
      s.passes = kernel == "attention" ? 3.5 : 1.0;
      s.launches = known->launches;
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
