#include "cost_models/calibrated.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "core/yaml_reader.hpp"

namespace foresight::cost_models {

namespace {

constexpr std::array<std::pair<CalibratedKnob, const char*>, 10> kKnobs = {{
    {CalibratedKnob::slot_overhead, "slot_overhead"},
    {CalibratedKnob::unit_overhead, "unit_overhead"},
    {CalibratedKnob::step_overhead, "step_overhead"},
    {CalibratedKnob::gemm_efficiency_scale, "gemm_efficiency_scale"},
    {CalibratedKnob::attention_efficiency_scale, "attention_efficiency_scale"},
    {CalibratedKnob::clock_scale, "clock_scale"},
    {CalibratedKnob::fp8_gemm_efficiency_scale, "fp8_gemm_efficiency_scale"},
    {CalibratedKnob::all_to_all_efficiency_scale, "all_to_all_efficiency_scale"},
    {CalibratedKnob::tp_comm_efficiency_scale, "tp_comm_efficiency_scale"},
    {CalibratedKnob::socket_one_gpu_efficiency_scale, "socket_one_gpu_efficiency_scale"},
}};

const char* knob_name(CalibratedKnob k) {
  for (const auto& [v, n] : kKnobs)
    if (v == k) return n;
  return "?";
}

std::string knob_names() {
  std::string s;
  for (const auto& [v, n] : kKnobs) {
    if (!s.empty()) s += " | ";
    s += n;
  }
  return s;
}

bool is_scale(CalibratedKnob k) {
  return k == CalibratedKnob::gemm_efficiency_scale || k == CalibratedKnob::attention_efficiency_scale ||
         k == CalibratedKnob::clock_scale || k == CalibratedKnob::fp8_gemm_efficiency_scale ||
         k == CalibratedKnob::all_to_all_efficiency_scale || k == CalibratedKnob::tp_comm_efficiency_scale ||
         k == CalibratedKnob::socket_one_gpu_efficiency_scale;
}

/// %.6g, so that a value written and read back prints the same.
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string range_text(double lo, double hi) {
  std::string s = "[";
  s += num(lo);
  s += ", ";
  s += num(hi);
  s += "]";
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

double CalibratedParameter::neutral() const { return is_scale(knob) ? 1.0 : 0.0; }

bool CalibratedScope::matches(const ClusterSpec& cluster, const TrainingSpec& training, const PlanSpec& plan) const {
  if (!frameworks.empty() && std::find(frameworks.begin(), frameworks.end(), plan.framework) == frameworks.end())
    return false;
  if (compute_capability && std::fabs(cluster.gpu.compute_capability - *compute_capability) > 1e-9) return false;
  if (min_zero && plan.zero < *min_zero) return false;
  if (max_zero && plan.zero > *max_zero) return false;
  if (dtype && training.dtype != *dtype) return false;
  if (!gpus.empty() && std::find(gpus.begin(), gpus.end(), cluster.gpu.name) == gpus.end()) return false;
  // By the recipe the kernels run (blockwise FP8 on Blackwell runs MXFP8's GEMMs).
  if (fp8_scaling && (training.dtype != Dtype::fp8 ||
                      effective_fp8_scaling(training.fp8_scaling, cluster.gpu.compute_capability) != *fp8_scaling))
    return false;
  if (network && cluster.inter.topology != *network) return false;
  return true;
}

std::string CalibratedScope::describe() const {
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (!frameworks.empty()) {
    std::string f = "framework ";
    for (std::size_t i = 0; i < frameworks.size(); ++i) f += (i ? " or " : "") + std::string(to_string(frameworks[i]));
    add(f);
  }
  if (compute_capability) add("compute capability " + num(*compute_capability));
  if (min_zero) add("zero >= " + std::to_string(*min_zero));
  if (max_zero) add("zero <= " + std::to_string(*max_zero));
  if (dtype) add(std::string("dtype ") + to_string(*dtype));
  if (fp8_scaling) add(std::string("fp8 scaling ") + to_string(*fp8_scaling));
  if (network) add(std::string("network ") + to_string(*network));
  if (!gpus.empty()) {
    std::string g = "GPU ";
    for (std::size_t i = 0; i < gpus.size(); ++i) g += (i ? " or " : "") + gpus[i];
    add(g);
  }
  return s.empty() ? "every execution" : s;
}

std::string ErrorBand::describe() const {
  std::string s;
  if (framework) s += to_string(*framework);
  if (compute_capability) {
    s += s.empty() ? "" : " on ";
    s += "compute capability " + num(*compute_capability);
  }
  return s.empty() ? "all validation cases" : s;
}

std::optional<ErrorBand> band_for(const std::vector<ErrorBand>& bands, Framework framework, double cc) {
  const ErrorBand* best = nullptr;
  int best_rank = -1;
  for (const ErrorBand& b : bands) {
    if (b.framework && *b.framework != framework) continue;
    if (b.compute_capability && std::fabs(*b.compute_capability - cc) > 1e-9) continue;
    const int rank = (b.framework ? 2 : 0) + (b.compute_capability ? 1 : 0);
    if (rank > best_rank) best = &b, best_rank = rank;
  }
  if (!best) return std::nullopt;
  return *best;
}

std::vector<ErrorBand> error_bands(const std::vector<BandSample>& samples, int min_cases) {
  std::vector<ErrorBand> out;
  auto band = [&](std::optional<Framework> f, std::optional<double> cc) {
    std::vector<double> r;
    for (const BandSample& s : samples)
      if ((!f || s.framework == *f) && (!cc || std::fabs(s.compute_capability - *cc) < 1e-9)) r.push_back(s.ratio);
    if (int(r.size()) < min_cases) return;
    std::sort(r.begin(), r.end());
    // Nearest rank: the smallest value with at least p% of the cases at or below it.
    auto rank = [&r](double p) { return r[std::size_t(std::max(0.0, std::ceil(p * double(r.size())) - 1.0))]; };
    // Ranks ceil(0.1 n) .. ceil(0.9 n) hold at least 80% of the cases; the band always holds
    // the prediction itself (lo <= 1 <= hi).
    ErrorBand b{f, cc, int(r.size()), std::min(1.0, rank(0.10)), std::max(1.0, rank(0.90))};
    // Four significant digits, as the file writes them, rounded outward: a case at an end of the
    // band stays inside it (rounded to nearest, the end cases fell outside half the time).
    auto outward = [](double v, bool up) {
      if (!(v > 0)) return v;
      const double unit = std::pow(10.0, std::floor(std::log10(v)) - 3.0);
      double q = v / unit;
      if (std::fabs(q - std::round(q)) < 1e-9 * q) q = std::round(q);  // 1.255 / 1e-3 is 1254.99..98
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g", (up ? std::ceil(q) : std::floor(q)) * unit);
      return std::strtod(buf, nullptr);
    };
    b.lo = outward(b.lo, false);
    b.hi = outward(b.hi, true);
    out.push_back(b);
  };
  std::vector<Framework> frameworks;
  std::vector<std::pair<Framework, double>> pairs;
  for (const BandSample& s : samples) {
    if (std::find(frameworks.begin(), frameworks.end(), s.framework) == frameworks.end()) frameworks.push_back(s.framework);
    const auto key = std::make_pair(s.framework, s.compute_capability);
    if (std::find(pairs.begin(), pairs.end(), key) == pairs.end()) pairs.push_back(key);
  }
  std::sort(frameworks.begin(), frameworks.end());
  std::sort(pairs.begin(), pairs.end());
  band(std::nullopt, std::nullopt);
  for (Framework f : frameworks) band(f, std::nullopt);
  for (const auto& [f, cc] : pairs) band(f, cc);
  return out;
}

CalibratedTerms calibrated_terms(const CalibrationSet& set, const ClusterSpec& cluster, const TrainingSpec& training,
                                 const PlanSpec& plan) {
  CalibratedTerms t;
  t.band = band_for(set.bands, plan.framework, cluster.gpu.compute_capability);
  for (const CalibratedParameter& p : set.parameters) {
    if (!p.scope.matches(cluster, training, plan)) continue;
    switch (p.knob) {
      case CalibratedKnob::slot_overhead: t.slot_overhead += Seconds(p.value); break;
      case CalibratedKnob::unit_overhead: t.unit_overhead += Seconds(p.value); break;
      case CalibratedKnob::step_overhead: t.step_overhead += Seconds(p.value); break;
      case CalibratedKnob::gemm_efficiency_scale: t.gemm_efficiency_scale *= p.value; break;
      case CalibratedKnob::attention_efficiency_scale: t.attention_efficiency_scale *= p.value; break;
      case CalibratedKnob::clock_scale:
        t.gemm_efficiency_scale *= p.value;
        t.attention_efficiency_scale *= p.value;
        break;
      case CalibratedKnob::fp8_gemm_efficiency_scale: t.fp8_gemm_efficiency_scale *= p.value; break;
      case CalibratedKnob::all_to_all_efficiency_scale: t.all_to_all_efficiency_scale *= p.value; break;
      case CalibratedKnob::tp_comm_efficiency_scale: t.tp_comm_efficiency_scale *= p.value; break;
      case CalibratedKnob::socket_one_gpu_efficiency_scale: t.socket_one_gpu_efficiency_scale *= p.value; break;
    }
    t.applied.push_back(p.name);
  }
  return t;
}

CalibrationSet load_calibration(const std::string& path) {
  const YAML::Node root = parse_yaml_file(path);
  MapReader top(root, path, "");
  MapReader cal(top.child("calibration", true), path, "calibration");
  CalibrationSet set;
  set.file = path;
  cal.get_string("generated_by", "");
  set.fit_engine = cal.get_enum<EngineKind>("fitted_with", EngineKind::analytic);
  const YAML::Node list = cal.child("parameters", true);
  if (!list.IsSequence())
    throw SpecError(location_of(list, path), "calibration.parameters", "", "must be a list of parameters");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string prefix = "calibration.parameters[" + std::to_string(i) + "]";
    MapReader r(list[i], path, prefix);
    CalibratedParameter p;
    p.name = r.get_string("name", std::nullopt);
    const std::string knob = r.get_string("knob", std::nullopt);
    bool found = false;
    for (const auto& [v, n] : kKnobs)
      if (knob == n) p.knob = v, found = true;
    if (!found) throw SpecError(r.where("knob"), r.path("knob"), knob, "must be one of: " + knob_names());
    p.unit = r.get_string("unit", std::nullopt);
    const std::string expected_unit = is_scale(p.knob) ? "1" : "s";
    if (p.unit != expected_unit)
      throw SpecError(r.where("unit"), r.path("unit"), p.unit, std::string("must be \"") + expected_unit + "\" for knob " + knob);
    p.meaning = r.get_string("meaning", std::nullopt);
    const YAML::Node range = r.child("range", true);
    if (!range.IsSequence() || range.size() != 2)
      throw SpecError(r.where("range"), r.path("range"), "", "must be [low, high]");
    try {
      p.lo = range[0].as<double>();
      p.hi = range[1].as<double>();
    } catch (const YAML::Exception&) {
      throw SpecError(r.where("range"), r.path("range"), "", "must be two numbers [low, high]");
    }
    if (!(std::isfinite(p.lo) && std::isfinite(p.hi) && p.lo <= p.hi) || (is_scale(p.knob) && p.lo <= 0) ||
        (!is_scale(p.knob) && p.lo < 0))
      throw SpecError(r.where("range"), r.path("range"), range_text(p.lo, p.hi),
                      is_scale(p.knob) ? "must satisfy 0 < low <= high" : "must satisfy 0 <= low <= high");
    p.range_source = r.get_string("range_source", std::nullopt);
    if (r.has("scope")) {
      MapReader s(r.child("scope", true), path, prefix + ".scope");
      if (s.has("frameworks")) {
        const YAML::Node fl = s.child("frameworks", true);
        if (!fl.IsSequence()) throw SpecError(s.where("frameworks"), s.path("frameworks"), "", "must be a list of framework names");
        for (const auto& f : fl) {
          const auto fw = parse_enum<Framework>(f.Scalar());
          if (!fw)
            throw SpecError(location_of(f, path), s.path("frameworks"), f.Scalar(), "must be one of: " + allowed_values<Framework>());
          p.scope.frameworks.push_back(*fw);
        }
      }
      if (s.has("compute_capability")) p.scope.compute_capability = s.get_double("compute_capability", std::nullopt, 0.0, true);
      if (s.has("min_zero")) p.scope.min_zero = s.get_int("min_zero", std::nullopt, 0);
      if (s.has("max_zero")) p.scope.max_zero = s.get_int("max_zero", std::nullopt, 0);
      if (s.has("dtype")) p.scope.dtype = s.get_enum<Dtype>("dtype", std::nullopt);
      if (s.has("fp8_scaling")) p.scope.fp8_scaling = s.get_enum<Fp8Scaling>("fp8_scaling", std::nullopt);
      if (s.has("network")) p.scope.network = s.get_enum<NetworkTopology>("network", std::nullopt);
      if (s.has("gpus")) {
        const YAML::Node gl = s.child("gpus", true);
        if (!gl.IsSequence() || gl.size() == 0)
          throw SpecError(s.where("gpus"), s.path("gpus"), "", "must be a non-empty list of GPU file names");
        for (const auto& g : gl) p.scope.gpus.push_back(g.Scalar());
      }
      s.finish();
    }
    p.value = r.has("value") ? r.get_double("value", std::nullopt, -1e300) : p.neutral();
    if (p.value < p.lo || p.value > p.hi)
      throw SpecError(r.where("value"), r.path("value"), num(p.value),
                      "must lie in the parameter's range " + range_text(p.lo, p.hi));
    if (r.has("fit")) {
      MapReader f(r.child("fit", true), path, prefix + ".fit");
      if (f.has("cases")) {
        const YAML::Node cl = f.child("cases", true);
        if (cl.IsSequence())
          for (const auto& c : cl) p.fit_cases.push_back(c.Scalar());
      }
      p.fit_rms_pct = f.get_double("rms_pct", 0.0, 0.0);
      f.finish();
    }
    r.finish();
    for (const auto& other : set.parameters)
      if (other.name == p.name) throw SpecError(r.where("name"), r.path("name"), p.name, "must be unique in the file");
    set.parameters.push_back(std::move(p));
  }
  if (cal.has("error_bars")) {
    const YAML::Node bl = cal.child("error_bars", true);
    if (!bl.IsSequence()) throw SpecError(location_of(bl, path), "calibration.error_bars", "", "must be a list");
    for (std::size_t i = 0; i < bl.size(); ++i) {
      MapReader b(bl[i], path, "calibration.error_bars[" + std::to_string(i) + "]");
      ErrorBand band;
      if (b.has("framework")) band.framework = b.get_enum<Framework>("framework", std::nullopt);
      if (b.has("compute_capability")) band.compute_capability = b.get_double("compute_capability", std::nullopt, 0.0, true);
      band.cases = b.get_int("cases", std::nullopt, 1);
      band.lo = b.get_double("lo", std::nullopt, 0.0, true);
      band.hi = b.get_double("hi", std::nullopt, 0.0, true);
      if (band.lo > 1.0 || band.hi < 1.0)
        throw SpecError(b.where("lo"), b.path("lo"), num(band.lo) + " .. " + num(band.hi), "must satisfy lo <= 1 <= hi");
      b.finish();
      set.bands.push_back(band);
    }
  }
  cal.finish();
  top.finish();
  return set;
}

const CalibrationSet& bundled_calibration() {
  static std::once_flag once;
  static CalibrationSet set;
  std::call_once(once, [] {
    const std::filesystem::path path = std::filesystem::path(scenarios_dir()) / "calibration.yaml";
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) set = load_calibration(path.string());
  });
  return set;
}

std::string calibration_yaml(const CalibrationSet& set) {
  std::string s;
  s += "# Calibrated parameters (DESIGN.md, Fidelity rules): declared here with their meaning, range and\n";
  s += "# scope; `value` and `fit` are written by `foresight calibrate --published` from the experiments\n";
  s += "# marked measured.role: calibration. Edit the declarations, then re-run the fit.\n";
  s += "calibration:\n";
  s += "  generated_by: \"foresight calibrate --published\"\n";
  s += std::string("  fitted_with: ") + to_string(set.fit_engine) + "\n";
  s += "  parameters:\n";
  for (const CalibratedParameter& p : set.parameters) {
    FORESIGHT_CHECK(std::isfinite(p.value)) << p.name << " fitted to " << p.value;
    s += "    - name: " + p.name + "\n";
    s += std::string("      knob: ") + knob_name(p.knob) + "\n";
    s += "      unit: " + quoted(p.unit) + "\n";
    s += "      meaning: " + quoted(p.meaning) + "\n";
    s += "      range: " + range_text(p.lo, p.hi) + "\n";
    s += "      range_source: " + quoted(p.range_source) + "\n";
    const CalibratedScope& sc = p.scope;
    if (!sc.frameworks.empty() || sc.compute_capability || sc.min_zero || sc.max_zero || sc.dtype || !sc.gpus.empty() ||
        sc.fp8_scaling || sc.network) {
      s += "      scope:";
      std::string inner;
      auto add = [&inner](const std::string& x) { inner += (inner.empty() ? " {" : ", ") + x; };
      if (!sc.frameworks.empty()) {
        std::string f = "frameworks: [";
        for (std::size_t i = 0; i < sc.frameworks.size(); ++i) f += (i ? ", " : "") + std::string(to_string(sc.frameworks[i]));
        add(f + "]");
      }
      if (sc.compute_capability) add("compute_capability: " + num(*sc.compute_capability));
      if (sc.min_zero) add("min_zero: " + std::to_string(*sc.min_zero));
      if (sc.max_zero) add("max_zero: " + std::to_string(*sc.max_zero));
      if (sc.dtype) add(std::string("dtype: ") + to_string(*sc.dtype));
      if (sc.fp8_scaling) add(std::string("fp8_scaling: ") + to_string(*sc.fp8_scaling));
      if (sc.network) add(std::string("network: ") + to_string(*sc.network));
      if (!sc.gpus.empty()) {
        std::string g = "gpus: [";
        for (std::size_t i = 0; i < sc.gpus.size(); ++i) g += (i ? ", " : "") + sc.gpus[i];
        add(g + "]");
      }
      s += inner + "}\n";
    }
    s += "      value: " + num(p.value) + "\n";
    if (!p.fit_cases.empty()) {
      s += "      fit: {cases: [";
      for (std::size_t i = 0; i < p.fit_cases.size(); ++i) s += (i ? ", " : "") + p.fit_cases[i];
      s += "], rms_pct: " + num(p.fit_rms_pct) + "}\n";
    }
  }
  if (!set.bands.empty()) {
    s += "  # Error bars: measured / predicted iteration time over the prediction cases of each scope\n";
    s += "  # (10th and 90th percentiles), from `foresight validate` with the values above.\n";
    s += "  error_bars:\n";
    for (const ErrorBand& b : set.bands) {
      // A non-finite bound means some prediction was not a number: a model bug, and a file its own
      // reader would refuse. Fail before anything is written.
      FORESIGHT_CHECK(std::isfinite(b.lo) && std::isfinite(b.hi)) << "error bar of " << b.cases << " cases: " << b.lo
                                                                     << " .. " << b.hi;
      s += "    - {";
      if (b.framework) s += std::string("framework: ") + to_string(*b.framework) + ", ";
      if (b.compute_capability) s += "compute_capability: " + num(*b.compute_capability) + ", ";
      s += "cases: " + std::to_string(b.cases) + ", lo: " + num(b.lo) + ", hi: " + num(b.hi) + "}\n";
    }
  }
  return s;
}

}  // namespace foresight::cost_models
