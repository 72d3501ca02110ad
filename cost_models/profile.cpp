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
    } else if (kernel.rfind("nccl_", 0) == 0) {
      // calibrate/nccl_sweep.cpp's names: "nccl_" and the collective with underscores.
      std::string name = kernel.substr(5);
      std::replace(name.begin(), name.end(), '_', '-');
      const std::optional<Collective> c = parse_enum<Collective>(name);
      // Broadcast (and anything else) is not priced from measurements by the comm model.
      if (!c || *c == Collective::broadcast || *c == Collective::send_recv) continue;
      NcclSample s;
      s.collective = *c;
      s.bytes = *positive(m, "bytes", where, true);
      // A whole count of at least `least`; `fallback` when absent (none: required).
      auto count = [&](const char* key, std::optional<double> fallback, double least) {
        const double v = fallback ? positive(m, key, where, false).value_or(*fallback) : *positive(m, key, where, true);
        if (v != std::floor(v) || v < least || v > 1e6)
          fail(where + "." + key, brief(m[key]), "must be a whole number from " + std::to_string(int(least)) + " to 1000000");
        return int(v);
      };
      s.ranks = count("ranks", std::nullopt, 2);
      s.nodes = count("nodes", 1.0, 1);
      s.time_s = t;
      p.nccl.push_back(s);
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

GemmIndex index_gemm(const CalibrationProfile& p) {
  FORESIGHT_CHECK(!p.gemm.empty()) << "profile " << p.source << " has no GEMM measurements";
  GemmIndex x;
  x.peak_tflops = p.peak_tflops;
  x.lo = {1e300, 1e300, 1e300};
  x.hi = {0, 0, 0};
  for (const auto& g : p.gemm) {
    const std::array<double, 4> s = {std::log(g.m), std::log(g.n), std::log(g.k),
                                     2 * g.m * g.n * g.k * g.batch / g.time_s / (p.peak_tflops * 1e12)};
    for (int i = 0; i < 3; ++i) {
      x.lo[i] = std::min(x.lo[i], s[i]);
      x.hi[i] = std::max(x.hi[i], s[i]);
    }
    x.points.push_back(s);
  }
  return x;
}

GemmEstimate profile_gemm(const GemmIndex& x, double m, double n, double k, double batch) {
  FORESIGHT_CHECK(!x.points.empty()) << "a GEMM index without samples";
  const double q[3] = {std::log(m), std::log(n), std::log(k)};
  auto distance2 = [&](const std::array<double, 4>& s) {
    double d2 = 0;
    for (int i = 0; i < 3; ++i) d2 += (s[i] - q[i]) * (s[i] - q[i]);
    return d2;
  };
  // The distance of the 4th nearest sample (the 4 smallest kept in order).
  constexpr std::size_t kNearest = 4;
  double best[kNearest];
  std::size_t found = 0;
  const std::array<double, 4>* exact = nullptr;
  for (const auto& s : x.points) {
    const double d2 = distance2(s);
    if (d2 < 1e-18 && !exact) exact = &s;
    if (found == kNearest && d2 >= best[kNearest - 1]) continue;
    std::size_t at = found < kNearest ? found++ : kNearest - 1;
    for (; at > 0 && best[at - 1] > d2; --at) best[at] = best[at - 1];
    best[at] = d2;
  }
  GemmEstimate e;
  if (exact) {
    e.efficiency = (*exact)[3];  // a measured shape: its own efficiency
  } else {
    // Inverse-square-distance weights over the 4 nearest and every sample as near as the 4th: a
    // sweep on a grid puts a shape between grid points at equal distances from several samples,
    // and which of them counted must not depend on the order the profile lists them in.
    const double cut = best[found - 1] * (1 + 1e-9);
    double wsum = 0, esum = 0;
    for (const auto& s : x.points) {
      const double d2 = distance2(s);
      if (d2 > cut) continue;
      wsum += 1.0 / d2;
      esum += s[3] / d2;
    }
    e.efficiency = esum / wsum;
  }
  for (int i = 0; i < 3; ++i)
    if (q[i] < x.lo[i] - 1e-12 || q[i] > x.hi[i] + 1e-12) e.extrapolated = true;
  e.time_s = 2 * m * n * k * batch / (x.peak_tflops * 1e12 * e.efficiency);
  return e;
}

GemmEstimate profile_gemm(const CalibrationProfile& p, double m, double n, double k, double batch) {
  return profile_gemm(index_gemm(p), m, n, k, batch);
}

}  // namespace foresight::cost_models
