#include "cost_models/profile.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/spec_json.hpp"

namespace foresight::cost_models {

ProfileData parse_profile(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw SpecError(SourceLocation{source, 0, 0}, "", "", std::string("is not valid JSON: ") + e.what());
  }
  auto fail = [&](const std::string& field, const std::string& value, const std::string& rule) {
    throw SpecError(SourceLocation{source, 0, 0}, field, value, rule);
  };
  auto positive = [&](const nlohmann::json& o, const char* key, const std::string& where, bool required) -> std::optional<double> {
    if (!o.contains(key)) {
      if (required) fail(where + "." + key, "", "is required but missing");
      return std::nullopt;
    }
    const auto& v = o.at(key);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      fail(where + "." + key, brief(v), "must be a positive number");
    return v.get<double>();
  };
  // The implementation and dtype a GEMM or attention entry was measured with.
  auto tag = [&](const nlohmann::json& m, const std::string& where) {
    if (!m.contains("impl") || !m["impl"].is_string() || m["impl"].get<std::string>().empty())
      fail(where + ".impl", m.contains("impl") ? brief(m["impl"]) : "",
           "must name the implementation that ran it (e.g. \"cublaslt\", \"flash\", \"foresight-cuda-core\"): "
           "a profile is used only for the implementation it measured");
    if (!m.contains("dtype") || !m["dtype"].is_string() || !parse_enum<Dtype>(m["dtype"].get<std::string>()))
      fail(where + ".dtype", m.contains("dtype") ? brief(m["dtype"]) : "", "must be one of: " + allowed_values<Dtype>());
    return std::make_pair(m["impl"].get<std::string>(), *parse_enum<Dtype>(m["dtype"].get<std::string>()));
  };
  if (!j.is_object()) fail("", "", "must be a JSON object");
  ProfileData p;
  p.source = source;
  if (!j.contains("device") || !j["device"].is_object()) fail("device", "", "is required and must be an object");
  if (j["device"].contains("name") && !j["device"]["name"].is_string())
    fail("device.name", brief(j["device"]["name"]), "must be a string");
  p.device = j["device"].value("name", "");
  p.peak_tflops = *positive(j["device"], "peak_tflops", "device", true);
  if (!j.contains("measurements") || !j["measurements"].is_array()) fail("measurements", "", "is required and must be a list");
  const auto& ms = j["measurements"];
  if (ms.size() > 1000000) fail("measurements", std::to_string(ms.size()), "must have at most 1000000 entries");
  std::vector<double> copy_rates;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const auto& m = ms[i];
    const std::string where = "measurements[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("kernel") || !m["kernel"].is_string())
      fail(where + ".kernel", "", "each measurement is an object with a kernel name");
    const std::string kernel = m["kernel"];
    const double t = *positive(m, "time_s", where, true);
    if (kernel == "gemm") {
      const auto [impl, dtype] = tag(m, where);
      GemmSample g{*positive(m, "m", where, true), *positive(m, "n", where, true), *positive(m, "k", where, true),
                   positive(m, "batch", where, false).value_or(1.0), t};
      if (2 * g.m * g.n * g.k * g.batch / t > p.peak_tflops * 1e12)
        fail(where + ".time_s", std::to_string(t), "implies more than the device's peak (efficiency above 1)");
      p.gemm.push_back({impl, dtype, g});
    } else if (kernel == "copy") {
      copy_rates.push_back(*positive(m, "bytes", where, true) / t / 1e9);
    } else if (kernel == "attention") {
      const auto [impl, dtype] = tag(m, where);
      const double eff = *positive(m, "flops", where, true) / t / (p.peak_tflops * 1e12);
      if (eff > 1.0) fail(where + ".time_s", std::to_string(t), "implies more than the device's peak (efficiency above 1)");
      p.attention.push_back({impl, dtype, eff});
    }
  }
  if (!copy_rates.empty()) {
    std::sort(copy_rates.begin(), copy_rates.end());
    p.copy_GBps = copy_rates.back();  // the large copies reach the streaming bandwidth
  }
  if (j.contains("fitted") && j["fitted"].is_object()) {
    const auto& f = j["fitted"];
    p.launch_overhead_us = positive(f, "launch_overhead_us", "fitted", false);
    for (const char* key : {"gemm_efficiency", "memory_efficiency", "flash_efficiency"})
      if (auto e = positive(f, key, "fitted", false); e && *e > 1.0)
        fail(std::string("fitted.") + key, brief(f[key]), "must be at most 1 (a fraction of the peak)");
  }
  return p;
}

ProfileData load_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(SourceLocation{path, 0, 0}, "", "", "cannot be opened for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_profile(ss.str(), path);
}

CalibrationProfile select_profile(const ProfileData& data, const std::string& gemm_impl, Dtype gemm_dtype,
                                  const std::string& attention_impl, Dtype attention_dtype) {
  CalibrationProfile p;
  p.device = data.device;
  p.source = data.source;
  p.peak_tflops = data.peak_tflops;
  for (const auto& g : data.gemm)
    if (g.impl == gemm_impl && g.dtype == gemm_dtype) p.gemm.push_back(g.sample);
  for (const auto& a : data.attention)
    if (a.impl == attention_impl && a.dtype == attention_dtype)
      p.attention_efficiency = std::max(p.attention_efficiency.value_or(0.0), a.efficiency);
  p.copy_GBps = data.copy_GBps;
  p.launch_overhead_us = data.launch_overhead_us;
  return p;
}

GemmEstimate profile_gemm(const CalibrationProfile& p, double m, double n, double k, double batch) {
  FORESIGHT_CHECK(!p.gemm.empty()) << "profile " << p.source << " has no GEMM measurements";
  struct Near {
    double d2, eff;
  };
  std::vector<Near> near;
  double lo[3] = {1e300, 1e300, 1e300}, hi[3] = {0, 0, 0};
  const double q[3] = {std::log(m), std::log(n), std::log(k)};
  for (const auto& g : p.gemm) {
    const double s[3] = {std::log(g.m), std::log(g.n), std::log(g.k)};
    double d2 = 0;
    for (int i = 0; i < 3; ++i) {
      d2 += (s[i] - q[i]) * (s[i] - q[i]);
      lo[i] = std::min(lo[i], s[i]);
      hi[i] = std::max(hi[i], s[i]);
    }
    const double eff = 2 * g.m * g.n * g.k * g.batch / g.time_s / (p.peak_tflops * 1e12);
    near.push_back({d2, eff});
  }
  std::sort(near.begin(), near.end(), [](const Near& a, const Near& b) { return a.d2 < b.d2; });
  GemmEstimate e;
  if (near.front().d2 < 1e-18) {
    e.efficiency = near.front().eff;  // a measured shape: its own efficiency
  } else {
    double wsum = 0, esum = 0;
    for (std::size_t i = 0; i < std::min<std::size_t>(4, near.size()); ++i) {
      const double w = 1.0 / near[i].d2;
      wsum += w;
      esum += w * near[i].eff;
    }
    e.efficiency = esum / wsum;
  }
  for (int i = 0; i < 3; ++i)
    if (q[i] < lo[i] - 1e-12 || q[i] > hi[i] + 1e-12) e.extrapolated = true;
  e.time_s = 2 * m * n * k * batch / (p.peak_tflops * 1e12 * e.efficiency);
  return e;
}

}  // namespace foresight::cost_models
