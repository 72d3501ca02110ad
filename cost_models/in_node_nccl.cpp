#include "cost_models/in_node_nccl.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "core/yaml_reader.hpp"
#include "cost_models/execution.hpp"
#include "cost_models/profile.hpp"

namespace foresight::cost_models {

namespace {

/// A sequence of positive numbers at `node` (field `field` of `file`).
std::vector<double> positive_list(const YAML::Node& node, const std::string& file, const std::string& field) {
  if (!node.IsSequence() || node.size() == 0)
    throw SpecError(location_of(node, file), field, YAML::Dump(node), "must be a non-empty list of numbers");
  std::vector<double> out;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string item = field + "[" + std::to_string(i) + "]";
    double v = 0;
    try {
      v = node[i].as<double>();
    } catch (const YAML::Exception&) {
      throw SpecError(location_of(node[i], file), item, YAML::Dump(node[i]), "must be a number");
    }
    if (!(v > 0) || !std::isfinite(v))
      throw SpecError(location_of(node[i], file), item, YAML::Dump(node[i]), "must be positive and finite");
    out.push_back(v);
  }
  return out;
}

}  // namespace

const InNodeCurve* InNodeNccl::nearest(Collective c, int ranks, int max_ranks) const {
  const InNodeCurve* best = nullptr;
  double best_d = 0;
  for (const InNodeCurve& k : curves) {
    if (k.collective != c || k.ranks > max_ranks) continue;
    const double d = std::abs(std::log2(double(k.ranks)) - std::log2(double(std::max(2, ranks))));
    if (!best || d < best_d || (d == best_d && k.ranks < best->ranks)) best = &k, best_d = d;
  }
  return best;
}

double InNodeNccl::seconds(const InNodeCurve& curve, double message) {
  const std::vector<double>& bytes = curve.bytes;
  const double m = std::clamp(message, bytes.front(), bytes.back());
  const auto hi = std::lower_bound(bytes.begin(), bytes.end(), m);
  const std::size_t j = std::size_t(hi - bytes.begin());
  if (j == 0) return curve.seconds.front();
  const std::size_t i = j - 1;
  const double f = std::log(m / bytes[i]) / std::log(bytes[j] / bytes[i]);
  return std::exp(std::log(curve.seconds[i]) + f * (std::log(curve.seconds[j]) - std::log(curve.seconds[i])));
}

InNodeNccl load_in_node_nccl(const std::string& path) {
  const YAML::Node root = parse_yaml_file(path);
  MapReader top(root, path, "");
  MapReader r(top.child("nccl_in_node", true), path, "nccl_in_node");
  top.finish();
  InNodeNccl t;
  t.file = path;
  t.gpu = r.get_string("gpu", std::nullopt);
  t.measured = r.get_string("measured", std::nullopt);
  t.source = r.get_string("source", std::nullopt);
  const YAML::Node sizes = r.child("bytes", true);
  const std::vector<double> bytes = positive_list(sizes, path, r.path("bytes"));
  for (std::size_t i = 1; i < bytes.size(); ++i)
    if (!(bytes[i] > bytes[i - 1]))
      throw SpecError(location_of(sizes[i], path), r.path("bytes") + "[" + std::to_string(i) + "]",
                      YAML::Dump(sizes[i]), "sizes must ascend");
  const YAML::Node curves = r.child("curves", true);
  if (!curves.IsSequence() || curves.size() == 0)
    throw SpecError(location_of(curves, path), r.path("curves"), YAML::Dump(curves), "must be a non-empty list");
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const std::string prefix = r.path("curves") + "[" + std::to_string(i) + "]";
    MapReader c(curves[i], path, prefix);
    InNodeCurve k;
    const std::string name = c.get_string("collective", std::nullopt);
    const std::optional<Collective> parsed = parse_enum<Collective>(name);
    if (!parsed || *parsed == Collective::broadcast || *parsed == Collective::send_recv)
      throw SpecError(c.where("collective"), c.path("collective"), name,
                      "must be all-reduce, all-gather, reduce-scatter or all-to-all");
    k.collective = *parsed;
    k.ranks = c.get_int("ranks", std::nullopt, 2);
    const YAML::Node us = c.child("us", true);
    k.seconds = positive_list(us, path, c.path("us"));
    if (k.seconds.size() != bytes.size())
      throw SpecError(location_of(us, path), c.path("us"), std::to_string(k.seconds.size()) + " times",
                      "must give one time per size (" + std::to_string(bytes.size()) + ")");
    k.bytes = bytes;
    for (std::size_t j = 1; j < k.seconds.size(); ++j)
      if (k.seconds[j] < k.seconds[j - 1])
        throw SpecError(location_of(us[j], path), c.path("us") + "[" + std::to_string(j) + "]", YAML::Dump(us[j]),
                        "times must not fall as sizes grow (take the running maximum of a noisy sweep)");
    for (double& s : k.seconds) s *= 1e-6;
    c.finish();
    for (const InNodeCurve& o : t.curves)
      if (o.collective == k.collective && o.ranks == k.ranks)
        throw SpecError(c.where("ranks"), c.path("ranks"), std::to_string(k.ranks),
                        std::string("repeats the ") + to_string(k.collective) + " curve of that group size");
    t.curves.push_back(std::move(k));
  }
  r.finish();
  return t;
}

InNodeNccl in_node_nccl_of(const ProfileData& profile) {
  InNodeNccl t;
  t.source = t.file = profile.source;
  t.measured = profile.device + " (foresight calibrate)";
  // Samples by (collective, ranks), sizes ascending; a size measured twice keeps the later sample.
  std::map<std::pair<int, int>, std::map<double, double>> by_curve;
  for (const NcclSample& s : profile.nccl)
    if (s.nodes == 1 && s.ranks >= 2) by_curve[{int(s.collective), s.ranks}][s.bytes] = s.time_s;
  for (const auto& [key, points] : by_curve) {
    InNodeCurve k;
    k.collective = Collective(key.first);
    k.ranks = key.second;
    for (const auto& [b, sec] : points)
      k.bytes.push_back(b), k.seconds.push_back(k.seconds.empty() ? sec : std::max(sec, k.seconds.back()));
    t.curves.push_back(std::move(k));
  }
  return t;
}

std::shared_ptr<const InNodeNccl> bundled_in_node_nccl(const std::string& gpu_name) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const InNodeNccl>> cache;
  if (gpu_name.empty()) return nullptr;
  const std::filesystem::path path = std::filesystem::path(scenarios_dir()) / "collectives" / (gpu_name + ".yaml");
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(path.string()); it != cache.end()) return it->second;
  }
  // Built outside the lock (bundled_profile takes its own); a thread that built it first wins.
  const std::shared_ptr<const ProfileData> profile = bundled_profile(gpu_name);
  InNodeNccl t;
  if (profile) t = in_node_nccl_of(*profile);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    InNodeNccl published = load_in_node_nccl(path.string());
    if (published.gpu != gpu_name)
      throw SpecError(SourceLocation{path.string(), 0, 0}, "nccl_in_node.gpu", published.gpu,
                      "must name the GPU the file is for (" + gpu_name + ")");
    const bool measured_here = !t.curves.empty();
    for (InNodeCurve& k : published.curves) {
      const bool have = std::any_of(t.curves.begin(), t.curves.end(), [&](const InNodeCurve& o) {
        return o.collective == k.collective && o.ranks == k.ranks;
      });
      if (!have) t.curves.push_back(std::move(k));
    }
    t.gpu = published.gpu;
    t.measured = measured_here ? t.measured + "; elsewhere " + published.measured : published.measured;
    t.source = measured_here ? t.source + "; " + published.source : published.source;
    t.file = measured_here ? t.file + " and " + published.file : published.file;
  }
  std::shared_ptr<const InNodeNccl> shared;
  if (!t.curves.empty()) shared = std::make_shared<const InNodeNccl>(std::move(t));
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(path.string(), std::move(shared)).first->second;
}

}  // namespace foresight::cost_models
