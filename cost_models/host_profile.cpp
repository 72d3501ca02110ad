#include "cost_models/host_profile.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/spec_json.hpp"

namespace foresight::cost_models {

namespace {

constexpr const char* kFormat = "foresight-cpu-profile/1";
constexpr const char* kVariants[3] = {"matmul_nn", "matmul_nt", "matmul_tn"};
// foresight::Collective's order (cost_models/comm.hpp); broadcast is not measured.
constexpr const char* kCollectives[6] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "", "send_recv"};

}  // namespace

const std::vector<std::string>& host_profile_ops() {
  static const std::vector<std::string> ops = {
      "zeros", "copy", "add", "add_bias", "bias_backward", "layernorm_forward", "layernorm_backward",
      "gelu_forward", "gelu_backward", "attention_forward", "attention_backward", "embedding_forward",
      "embedding_backward", "add_positions", "positions_backward", "logits_row_max", "logits_sum_exp_and_target",
      "cross_entropy_backward", "adamw", "sum_squares", "gather_rows_weighted", "row_dots",
      "copy_to_host", "copy_from_host"};
  return ops;
}

std::optional<double> MeasuredCollectives::time(int c, double bytes) const {
  const auto& f = fits[std::size_t(c)];
  const auto& s = samples[std::size_t(c)];
  if (s.empty()) return f ? std::optional<double>(f->time(bytes)) : std::nullopt;
  if (bytes <= s.front().first) return s.front().second;
  if (bytes >= s.back().first) return s.back().second + (f ? f->per_unit_s : 0.0) * (bytes - s.back().first);
  const auto hi = std::lower_bound(s.begin(), s.end(), bytes, [](const auto& p, double b) { return p.first < b; });
  const auto lo = hi - 1;
  return lo->second + (hi->second - lo->second) * (bytes - lo->first) / (hi->first - lo->first);
}

double HostProfile::slowdown_for(int ranks) const {
  if (slowdown.empty()) return ranks > cores && cores > 0 ? double(ranks) / cores : 1.0;
  if (ranks <= slowdown.front().first) return slowdown.front().second;
  for (std::size_t i = 1; i < slowdown.size(); ++i)
    if (ranks <= slowdown[i].first) {
      const auto [r0, s0] = slowdown[i - 1];
      const auto [r1, s1] = slowdown[i];
      return s0 + (s1 - s0) * double(ranks - r0) / double(r1 - r0);
    }
  // Beyond the measured counts the cores are time-shared: the last slowdown grows with the ratio.
  const auto [rl, sl] = slowdown.back();
  return sl * double(ranks) / double(rl);
}

double HostProfile::best_gemm_flops() const {
  double best = 0;
  for (const auto& v : matmul)
    for (const MatmulSample& s : v) best = std::max(best, 2.0 * s.m * s.n * s.k / s.time_s);
  return best;
}

HostProfile parse_host_profile(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw SpecError(SourceLocation{source, 0, 0}, "", "", std::string("is not valid JSON: ") + e.what());
  }
  auto fail = [&](const std::string& field, const std::string& value, const std::string& rule) {
    throw SpecError(SourceLocation{source, 0, 0}, field, value, rule);
  };
  auto object = [&](const nlohmann::json& o, const char* key, const std::string& where) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(key)) fail(where.empty() ? key : where + "." + key, "", "is required but missing");
    return o.at(key);
  };
  // A number >= 0 (> 0 when `positive`), finite.
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where, bool positive) {
    const nlohmann::json& v = object(o, key, where);
    const std::string field = where.empty() ? key : where + "." + key;
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || (positive && v.get<double>() == 0))
      fail(field, brief(v), positive ? "must be a positive number" : "must be a number >= 0");
    return v.get<double>();
  };
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    fail("format", j.is_object() && j.contains("format") ? brief(j["format"]) : "",
         std::string("must be \"") + kFormat + "\" (a profile written by `foresight calibrate --backend cpu`)");
  HostProfile p;
  p.source = source;
  const nlohmann::json& host = object(j, "host", "");
  auto text_of = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    const nlohmann::json& v = object(o, key, where);
    if (!v.is_string()) fail(where + "." + key, brief(v), "must be a string");
    return v.get<std::string>();
  };
  p.hostname = text_of(host, "hostname", "host");
  p.cpu_model = host.contains("cpu_model") && host["cpu_model"].is_string() ? host["cpu_model"].get<std::string>() : "";
  p.kernels = text_of(host, "kernels", "host");
  if (host.contains("backend") && host["backend"].is_string()) p.backend = host["backend"].get<std::string>();
  p.cores = int(number(host, "cores", "host", true));
  if (j.contains("created_unix")) p.created_unix = (long long)number(j, "created_unix", "", false);

  const nlohmann::json& ops = object(j, "ops", "");
  for (int v = 0; v < 3; ++v) {
    const std::string where = std::string("ops.") + kVariants[v];
    const nlohmann::json& samples = object(object(ops, kVariants[v], "ops"), "samples", where);
    if (!samples.is_array() || samples.empty()) fail(where + ".samples", brief(samples), "must be a non-empty list");
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const std::string w = where + ".samples[" + std::to_string(i) + "]";
      p.matmul[std::size_t(v)].push_back(MatmulSample{.m = number(samples[i], "m", w, true),
                                                      .n = number(samples[i], "n", w, true),
                                                      .k = number(samples[i], "k", w, true),
                                                      .time_s = number(samples[i], "time_s", w, true)});
    }
  }
  for (const std::string& name : host_profile_ops()) {
    const std::string where = "ops." + name;
    const nlohmann::json& o = object(ops, name.c_str(), "ops");
    LinearFit f{.fixed_s = number(o, "fixed_s", where, false), .per_unit_s = number(o, "per_unit_s", where, false)};
    if (f.fixed_s == 0 && f.per_unit_s == 0) fail(where, "0", "must cost something: fixed_s and per_unit_s are both 0");
    p.ops.emplace(name, f);
  }
  if (j.contains("memory")) p.copy_GBps = number(j["memory"], "copy_GBps", "memory", true);

  if (j.contains("mpi")) {
    if (!j["mpi"].is_array()) fail("mpi", brief(j["mpi"]), "must be a list of {ranks, collectives}");
    for (std::size_t i = 0; i < j["mpi"].size(); ++i) {
      const nlohmann::json& e = j["mpi"][i];
      const std::string where = "mpi[" + std::to_string(i) + "]";
      MeasuredCollectives m;
      m.ranks = int(number(e, "ranks", where, true));
      if (m.ranks < 2) fail(where + ".ranks", std::to_string(m.ranks), "must be at least 2");
      const nlohmann::json& cs = object(e, "collectives", where);
      for (int c = 0; c < 6; ++c) {
        if (!*kCollectives[c] || !cs.contains(kCollectives[c])) continue;
        const std::string w = where + ".collectives." + kCollectives[c];
        m.fits[std::size_t(c)] = LinearFit{.fixed_s = number(cs[kCollectives[c]], "fixed_s", w, false),
                                           .per_unit_s = number(cs[kCollectives[c]], "per_byte_s", w, false)};
        if (!cs[kCollectives[c]].contains("samples")) continue;
        const nlohmann::json& ss = cs[kCollectives[c]]["samples"];
        if (!ss.is_array()) fail(w + ".samples", brief(ss), "must be a list of {bytes, time_s}");
        auto& out = m.samples[std::size_t(c)];
        for (std::size_t k = 0; k < ss.size(); ++k) {
          const std::string ws = w + ".samples[" + std::to_string(k) + "]";
          out.emplace_back(number(ss[k], "bytes", ws, true), number(ss[k], "time_s", ws, true));
          if (k > 0 && out[k].first <= out[k - 1].first)
            fail(ws + ".bytes", brief(ss[k]["bytes"]), "must increase along the list");
        }
      }
      p.mpi.push_back(m);
    }
    std::sort(p.mpi.begin(), p.mpi.end(), [](const auto& a, const auto& b) { return a.ranks < b.ranks; });
  }
  if (j.contains("oversubscription")) {
    const nlohmann::json& o = j["oversubscription"];
    if (!o.is_array()) fail("oversubscription", brief(o), "must be a list of {ranks, slowdown}");
    for (std::size_t i = 0; i < o.size(); ++i) {
      const std::string where = "oversubscription[" + std::to_string(i) + "]";
      p.slowdown.emplace_back(int(number(o[i], "ranks", where, true)), number(o[i], "slowdown", where, true));
      p.probe_s.push_back(o[i].contains("probe_s") ? number(o[i], "probe_s", where, true) : 0.0);
      if (i > 0 && p.slowdown[i].first <= p.slowdown[i - 1].first)
        fail(where + ".ranks", std::to_string(p.slowdown[i].first), "must increase along the list");
    }
  }
  if (j.contains("ops_probe")) {
    const nlohmann::json& o = j["ops_probe"];
    if (!o.is_array()) fail("ops_probe", brief(o), "must be a list of {threads, probe_s}");
    for (std::size_t i = 0; i < o.size(); ++i) {
      const std::string where = "ops_probe[" + std::to_string(i) + "]";
      p.ops_probe_s.emplace_back(int(number(o[i], "threads", where, true)), number(o[i], "probe_s", where, true));
    }
  }
  if (j.contains("step_context")) {
    p.step_context = number(j["step_context"], "factor", "step_context", true);
    if (p.step_context < 0.5 || p.step_context > 2.0)
      fail("step_context.factor", brief(j["step_context"]["factor"]),
           "must be within [0.5, 2] (the ops' time in a step over their time alone)");
    if (j["step_context"].contains("measured_factor"))
      p.step_context_measured = number(j["step_context"], "measured_factor", "step_context", true);
  }
  if (j.contains("launch") && j["launch"].contains("mpirun") && j["launch"]["mpirun"].is_array())
    for (const auto& a : j["launch"]["mpirun"])
      if (a.is_string()) p.mpirun.push_back(a.get<std::string>());
  return p;
}

HostProfile load_host_profile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw SpecError(SourceLocation{path, 0, 0}, "", "", "cannot be read (run `foresight calibrate --backend cpu`)");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_host_profile(ss.str(), path);
}

std::shared_ptr<const HostProfile> cached_host_profile(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const HostProfile>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  auto p = std::make_shared<const HostProfile>(load_host_profile(path));
  cache.emplace(path, p);
  return p;
}

HostOps::HostOps(std::shared_ptr<const HostProfile> profile, int ranks) : profile_(std::move(profile)) {
  FORESIGHT_CHECK(profile_) << "HostOps without a profile";
  slowdown_ = profile_->slowdown_for(ranks) * profile_->step_context;
}

Seconds HostOps::matmul(MatmulVariant v, double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return Seconds(0);
  const auto& samples = profile_->matmul[std::size_t(v)];
  // The 8 nearest shapes in log space (a cell's corners when the samples form a grid: with fewer,
  // a shape at a cell's centre would take an arbitrary half of its equidistant corners); a shape
  // measured exactly gets its own time.
  std::vector<std::pair<double, double>> near;  // (distance^2, seconds per multiply-add)
  near.reserve(samples.size());
  for (const MatmulSample& s : samples) {
    const double dm = std::log(m / s.m), dn = std::log(n / s.n), dk = std::log(k / s.k);
    near.emplace_back(dm * dm + dn * dn + dk * dk, s.time_s / (s.m * s.n * s.k));
  }
  const std::size_t take = std::min<std::size_t>(8, near.size());
  std::partial_sort(near.begin(), near.begin() + long(take), near.end());
  if (near.front().first < 1e-12) return Seconds(near.front().second * m * n * k * slowdown_);
  double wsum = 0, acc = 0;
  for (std::size_t i = 0; i < take; ++i) {
    const double w = 1.0 / near[i].first;
    wsum += w;
    acc += w * std::log(near[i].second);  // geometric: the rates span orders of magnitude
  }
  return Seconds(std::exp(acc / wsum) * m * n * k * slowdown_);
}

Seconds HostOps::op(const std::string& name, double units) const {
  const auto it = profile_->ops.find(name);
  FORESIGHT_CHECK(it != profile_->ops.end()) << "host profile " << profile_->source << " has no op " << name;
  if (units <= 0) return Seconds(0);
  return Seconds(it->second.time(units) * slowdown_);
}

}  // namespace foresight::cost_models
