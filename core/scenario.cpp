#include "core/scenario.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/config_paths.hpp"
#include "core/spec_fields.hpp"
#include "core/yaml_reader.hpp"

namespace fs = std::filesystem;

namespace foresight {

std::string scenarios_dir() {
  if (const char* env = std::getenv("FORESIGHT_SCENARIOS"); env && *env) return env;
  return default_scenarios_dir();
}

std::string resolve_scenario(const std::string& kind, const std::string& name_or_path) {
  std::error_code ec;  // a name the file system refuses (too long, bad characters) is simply not there
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  const fs::path lib = fs::path(scenarios_dir()) / kind / (name_or_path + ".yaml");
  if (fs::is_regular_file(lib, ec)) return lib.string();
  throw SpecError(SourceLocation{"<command line>", 0, 0}, kind, name_or_path,
                  "is neither a file nor a name in " + (fs::path(scenarios_dir()) / kind).string());
}

namespace {


struct Section {
  YAML::Node node;
  std::string file;
};

/// Follows `parent[key]` to its mapping: inline, or through a chain of file references whose
/// top-level key is `top_key`. `kind_dir` is where bare names live ("models", "gpus").
class Resolver {
 public:
  Section resolve(MapReader& parent, const std::string& key, const std::string& top_key,
                  const std::string& kind_dir) {
    YAML::Node n = parent.child(key, true);
    std::vector<std::string> chain{canonical(parent.file())};
    std::string file = parent.file();
    SourceLocation at = parent.where(key);
    std::string field = parent.path(key);
    while (n.IsScalar()) {
      const std::string ref = n.Scalar();
      const std::string target = locate(ref, file, kind_dir);
      if (target.empty())
        throw SpecError(at, field, ref,
                        "refers to a file that does not exist (looked in " + looked_in(ref, file, kind_dir) + ")");
      const std::string canon = canonical(target);
      for (const auto& c : chain)
        if (c == canon) {
          std::string cyc;
          for (const auto& x : chain) cyc += x + " -> ";
          throw SpecError(at, field, ref, "makes a cyclic reference: " + cyc + canon);
        }
      chain.push_back(canon);
      YAML::Node root = parse_yaml_file(target);
      if (!root.IsMap() || root.size() != 1 || !root[top_key])
        throw SpecError(location_of(root, target), top_key, "",
                        "a file referenced as " + field + " (at " + at.to_string() +
                            ") must hold exactly one top-level key '" + top_key + "'");
      file = target;
      for (auto it = root.begin(); it != root.end(); ++it) {
        at = location_of(it->second, target);
        n = it->second;
      }
      field = top_key;
    }
    if (!n.IsMap())
      throw SpecError(at, field, "", "must be a mapping or a reference to a file");
    return Section{n, file};
  }

 private:
  static std::string canonical(const std::string& p) {
    std::error_code ec;
    auto c = fs::weakly_canonical(p, ec);
    return ec ? p : c.string();
  }
  static bool is_path(const std::string& ref) {
    return ref.find('/') != std::string::npos || ref.ends_with(".yaml") || ref.ends_with(".yml");
  }
  static std::vector<fs::path> candidates(const std::string& ref, const std::string& from,
                                          const std::string& kind_dir) {
    const fs::path dir = fs::path(from).parent_path();
    if (is_path(ref)) return {dir / ref};
    // A bare name: the referring file's own scenario tree first, then the bundled library.
    return {dir.parent_path() / kind_dir / (ref + ".yaml"), dir / (ref + ".yaml"),
            fs::path(scenarios_dir()) / kind_dir / (ref + ".yaml")};
  }
  static std::string locate(const std::string& ref, const std::string& from, const std::string& kind_dir) {
    std::error_code ec;  // a name the file system refuses (too long, bad characters) is simply not there
    for (const auto& c : candidates(ref, from, kind_dir))
      if (fs::is_regular_file(c, ec)) return c.string();
    return "";
  }
  static std::string looked_in(const std::string& ref, const std::string& from, const std::string& kind_dir) {
    std::string s;
    for (const auto& c : candidates(ref, from, kind_dir)) s += (s.empty() ? "" : ", ") + c.string();
    return s;
  }
};

GpuSpec read_gpu(const Section& s) {
  MapReader r(s.node, s.file, "gpu");
  GpuSpec g;
  g.name = r.get_string("name", std::nullopt);
  g.compute_capability = r.get_double("compute_capability", std::nullopt, 0.0, true);
  // The scopes of calibrated parameters and the FP8 formats a GPU runs key on it.
  if (g.compute_capability < 3.0 || g.compute_capability >= 20.0)
    throw SpecError(r.where("compute_capability"), "gpu.compute_capability", r.node()["compute_capability"].Scalar(),
                    "must be a CUDA compute capability, major.minor from 3.0 to below 20 (7.0 V100, 8.0 A100, "
                    "9.0 H100, 10.0 B200)");
  g.sms = r.get_int("sms", std::nullopt, 1);
  g.clock_MHz = r.get_double("clock_MHz", 0.0, 0.0);
  g.hbm = gibibytes(r.get_double("hbm_GiB", std::nullopt, 0.0, true));
  g.hbm_bandwidth = gigabytes_per_s(r.get_double("hbm_bandwidth_GBps", std::nullopt, 0.0, true));
  g.nvlink_bandwidth = gigabytes_per_s(r.get_double("nvlink_GBps", 0.0, 0.0));
  MapReader peaks(r.child("peak_TFLOPs", true), s.file, "gpu.peak_TFLOPs");
  g.peak_bf16 = teraflops_per_s(peaks.get_double("bf16", 0.0, 0.0));
  g.peak_fp16 = teraflops_per_s(peaks.get_double("fp16", std::nullopt, 0.0, true));
  g.peak_tf32 = teraflops_per_s(peaks.get_double("tf32", std::nullopt, 0.0, true));
  g.peak_fp32 = teraflops_per_s(peaks.get_double("fp32", std::nullopt, 0.0, true));
  g.peak_fp8 = teraflops_per_s(peaks.get_double("fp8", 0.0, 0.0));  // 0: the GPU has no FP8 tensor cores
  peaks.finish();
  {
    MapReader k(r.child("kernels", true), s.file, "gpu.kernels");
    // {value, source}; a fraction of a peak must lie in (0, 1].
    auto sourced = [&](const char* key, bool fraction) {
      MapReader v(k.child(key, true), s.file, k.path(key));
      SourcedValue sv;
      sv.value = v.get_double("value", std::nullopt, 0.0, true);
      if (fraction && sv.value > 1.0)
        throw SpecError(v.where("value"), v.path("value"), v.node()["value"].Scalar(),
                        "must be at most 1 (a fraction of the peak: nothing runs faster than the hardware)");
      sv.source = v.get_string("source", std::nullopt);
      v.finish();
      return sv;
    };
    auto optional = [&](const char* key) -> std::optional<SourcedValue> {
      if (!k.has(key)) return std::nullopt;
      return sourced(key, true);
    };
    // A figure's value breaking `rule`: refused naming the file, field and value.
    auto refuse = [&](const char* key, const char* rule) {
      throw SpecError(k.where(key), k.path(key) + ".value", k.node()[key]["value"].Scalar(), rule);
    };
    // An optional figure with a bound of its own, `rule` saying why.
    auto optional_at_most = [&](const char* key, bool fraction, double limit,
                                const char* rule) -> std::optional<SourcedValue> {
      if (!k.has(key)) return std::nullopt;
      SourcedValue v = sourced(key, fraction);
      if (v.value > limit) refuse(key, rule);
      return v;
    };
    // An optional figure that is one of two values (lo < hi), `rule` naming them.
    auto optional_either = [&](const char* key, double lo, double hi, const char* rule) -> std::optional<SourcedValue> {
      std::optional<SourcedValue> v = optional_at_most(key, false, hi, rule);
      if (v && v->value != lo && v->value != hi) refuse(key, rule);
      return v;
    };
    g.kernels.gemm_efficiency = sourced("gemm_efficiency", true);
    g.kernels.memory_efficiency = sourced("memory_efficiency", true);
    g.kernels.launch_overhead_us = sourced("launch_overhead_us", false);
    g.kernels.flash_attention_efficiency = optional("flash_attention_efficiency");
    g.kernels.cudnn_attention_efficiency = optional("cudnn_attention_efficiency");
    g.kernels.flash2_attention_efficiency = optional("flash2_attention_efficiency");
    g.kernels.flash_triton_attention_efficiency = optional("flash_triton_attention_efficiency");
    g.kernels.flash1_attention_efficiency = optional("flash1_attention_efficiency");
    g.kernels.unfused_score_efficiency = optional("unfused_score_efficiency");
    g.kernels.eager_norm_efficiency = optional("eager_norm_efficiency");
    g.kernels.eager_strided_efficiency = optional("eager_strided_efficiency");
    g.kernels.gemm_k_overhead = optional_at_most("gemm_k_overhead", false, 4096,
                                                 "must be at most 4096 (elements of K a tile's prologue and epilogue "
                                                 "cost; more would make every transformer GEMM mostly overhead)");
    g.kernels.gemm_tile_candidates = optional_either(
        "gemm_tile_candidates", 1, 3, "must be 1 (the default 256 x 128 tile) or 3 (the fastest of it, 128 x 256 and 128 x 128)");
    g.kernels.fp8_split_accumulation_slowdown = optional_at_most(
        "fp8_split_accumulation_slowdown", false, 2,
        "must be at most 2 (a slowdown factor of split-accumulation FP8 GEMMs; beyond 2 they would be slower than bf16)");
    if (g.kernels.fp8_split_accumulation_slowdown && g.kernels.fp8_split_accumulation_slowdown->value < 1)
      refuse("fp8_split_accumulation_slowdown", "must be at least 1 (promoting partial sums costs time, never saves it)");
    g.kernels.persistent_gemm_grid = optional_either(
        "persistent_gemm_grid", 0, 1, "must be 0 or 1 (whether the GEMM kernels launch one persistent thread block per SM)");
    g.kernels.sustained_clock_scale = optional_at_most("sustained_clock_scale", true, 1.0,
                                                       "must be at most 1 (a power-capped clock is at most the burst clock)");
    g.kernels.device_spread_cv = optional_at_most("device_spread_cv", true, 0.25,
                                                  "must be at most 0.25 (a coefficient of variation of healthy "
                                                  "devices' speed; a device 25% off the median is broken, not spread)");
    k.finish();
  }
  g.source = r.get_string("source", std::nullopt);
  r.get_string("notes", "");
  r.finish();
  return g;
}

/// cluster.inter_node.tiers: a list of {nodes, oversubscription}, innermost first. Groups must nest
/// (each tier's nodes a multiple of the one below) and grow, so every node pair has one path.
std::vector<NetworkTier> read_tiers(MapReader& out, int cluster_nodes) {
  const YAML::Node list = out.child("tiers", true);
  const std::string field = out.path("tiers");
  if (!list.IsSequence() || list.size() == 0)
    throw SpecError(out.where("tiers"), field, "", "must be a non-empty list of {nodes, oversubscription}");
  std::vector<NetworkTier> tiers;
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string at = field;
    at += "[";
    at += std::to_string(i);
    at += "]";
    if (!list[i].IsMap())
      throw SpecError(location_of(list[i], out.file()), at, "", "must be a mapping {nodes, oversubscription}");
    MapReader t(list[i], out.file(), at);
    NetworkTier tier;
    tier.nodes = t.get_int("nodes", std::nullopt, 1);
    tier.oversubscription = t.get_double("oversubscription", std::nullopt, 1.0);
    if (!tiers.empty() && (tier.nodes <= tiers.back().nodes || tier.nodes % tiers.back().nodes != 0)) {
      std::string rule = "must be a multiple of the tier below's ";
      rule += std::to_string(tiers.back().nodes);
      rule += " nodes and larger (switch groups nest)";
      throw SpecError(t.where("nodes"), t.path("nodes"), std::to_string(tier.nodes), rule);
    }
    if (tier.nodes > cluster_nodes) {
      std::string rule = "must not exceed cluster.nodes = ";
      rule += std::to_string(cluster_nodes);
      throw SpecError(t.where("nodes"), t.path("nodes"), std::to_string(tier.nodes), rule);
    }
    t.finish();
    tiers.push_back(tier);
  }
  return tiers;
}

ClusterSpec read_cluster(const Section& s, Resolver& res) {
  MapReader r(s.node, s.file, "cluster");
  ClusterSpec c;
  c.name = r.get_string("name", std::nullopt);
  c.nodes = r.get_int("nodes", std::nullopt, 1);
  c.gpus_per_node = r.get_int("gpus_per_node", std::nullopt, 1);
  if ((long long)c.nodes * c.gpus_per_node > kMaxClusterGpus)
    throw SpecError(r.where("nodes"), "cluster.nodes", std::to_string(c.nodes),
                    "times cluster.gpus_per_node = " + std::to_string(c.gpus_per_node) + " gives " +
                        std::to_string((long long)c.nodes * c.gpus_per_node) + " GPUs: must be at most " +
                        std::to_string(kMaxClusterGpus));
  c.gpu = read_gpu(res.resolve(r, "gpu", "gpu", "gpus"));
  {
    MapReader in(r.child("intra_node", true), s.file, "cluster.intra_node");
    c.intra.kind = in.get_enum<IntraFabric>("kind", std::nullopt);
    c.intra.bandwidth = gigabytes_per_s(in.get_double("bandwidth_GBps", std::nullopt, 0.0, true));
    c.intra.latency = microseconds(in.get_double("latency_us", std::nullopt, 0.0));
    in.finish();
  }
  {
    MapReader out(r.child("inter_node", true), s.file, "cluster.inter_node");
    c.inter.nics_per_node = out.get_int("nics_per_node", std::nullopt, 0);
    c.inter.nic_bandwidth = gigabits_per_s(out.get_double("nic_Gbps", std::nullopt, 0.0));
    // A NIC that moves nothing would leave every cross-node collective without a rate.
    if (c.inter.nics_per_node > 0 && c.inter.nic_bandwidth.value() <= 0)
      throw SpecError(out.where("nic_Gbps"), "cluster.inter_node.nic_Gbps", out.node()["nic_Gbps"].Scalar(),
                      "must be greater than 0 when cluster.inter_node.nics_per_node is " +
                          std::to_string(c.inter.nics_per_node) + " (give nics_per_node 0 for a node without NICs)");
    c.inter.latency = microseconds(out.get_double("latency_us", std::nullopt, 0.0));
    c.inter.topology = out.get_enum<NetworkTopology>("topology", NetworkTopology::fat_tree);
    if (out.has("oversubscription") && out.has("tiers"))
      throw SpecError(out.where("tiers"), "cluster.inter_node.tiers", "",
                      "give either cluster.inter_node.oversubscription (one layer) or cluster.inter_node.tiers, not both");
    c.inter.oversubscription = out.get_double("oversubscription", 1.0, 1.0);
    if (out.has("tiers")) c.inter.tiers = read_tiers(out, c.nodes);
    out.finish();
  }
  {
    MapReader h(r.child("host", true), s.file, "cluster.host");
    c.host.pcie_bandwidth = gigabytes_per_s(h.get_double("pcie_GBps", std::nullopt, 0.0, true));
    c.host.memory = gigabytes(h.get_double("memory_GB", std::nullopt, 0.0, true));
    c.host.memory_bandwidth = gigabytes_per_s(h.get_double("memory_GBps", 0.0, 0.0));
    c.host.pcie_node_bandwidth = gigabytes_per_s(h.get_double("pcie_node_GBps", 0.0, 0.0));
    h.finish();
  }
  c.source = r.get_string("source", "");
  r.get_string("notes", "");
  r.finish();
  if (c.nodes > 1 && c.inter.nics_per_node == 0)
    throw SpecError(r.where("inter_node"), "cluster.inter_node.nics_per_node", "0",
                    "must be at least 1 when the cluster has more than one node");
  return c;
}

ModelSpec read_model(const Section& s) {
  MapReader r(s.node, s.file, "model");
  ModelSpec m;
  YamlFieldReader fields(r);
  visit_fields(fields, m);
  r.get_string("source", "");
  r.get_string("notes", "");
  r.finish();
  auto v = complete_model(m);
  if (!v) v = check_model(m);
  if (v) {
    // "model.moe.top_k" -> the "moe" key of this mapping; "model.ffn_hidden" defaults from hidden.
    std::string key = v->field.substr(v->field.find('.') + 1);
    key = key.substr(0, key.find('.'));
    if (!r.has(key)) key = "hidden";
    throw SpecError(r.where(key), v->field, v->value, v->rule);
  }
  return m;
}

}  // namespace

GpuSpec parse_gpu(const std::string& yaml, const std::string& path) {
  YAML::Node root = parse_yaml(yaml, path);
  MapReader top(root, path, "");
  Resolver res;
  GpuSpec g = read_gpu(res.resolve(top, "gpu", "gpu", "gpus"));
  top.finish();
  return g;
}

ClusterSpec parse_cluster(const std::string& yaml, const std::string& path) {
  YAML::Node root = parse_yaml(yaml, path);
  MapReader top(root, path, "");
  Resolver res;
  ClusterSpec c = read_cluster(res.resolve(top, "cluster", "cluster", "clusters"), res);
  top.finish();
  return c;
}

ModelSpec parse_model(const std::string& yaml, const std::string& path) {
  YAML::Node root = parse_yaml(yaml, path);
  MapReader top(root, path, "");
  Resolver res;
  ModelSpec m = read_model(res.resolve(top, "model", "model", "models"));
  top.finish();
  return m;
}

Experiment parse_experiment(const std::string& yaml, const std::string& path) {
  YAML::Node root = parse_yaml(yaml, path);
  MapReader top(root, path, "");
  Resolver res;
  const Section sec = res.resolve(top, "experiment", "experiment", "experiments");
  top.finish();

  Experiment e;
  e.file = path;
  e.name = fs::path(path).stem().string();
  MapReader r(sec.node, sec.file, "experiment");
  e.model = read_model(res.resolve(r, "model", "model", "models"));
  e.cluster = read_cluster(res.resolve(r, "cluster", "cluster", "clusters"), res);
  {
    MapReader t(r.child("training", true), sec.file, "training");
    YamlFieldReader fields(t, &e.locations);
    visit_fields(fields, e.training);
    t.finish();
  }
  {
    MapReader p(r.child("plan", true), sec.file, "plan");
    YamlFieldReader fields(p, &e.locations);
    visit_fields(fields, e.plan);
    e.locations["plan"] = location_of(p.node(), sec.file);
    p.finish();
  }
  if (r.has("nodes") && r.has("gpus"))
    throw SpecError(r.where("gpus"), "experiment.gpus", "", "give either experiment.nodes or experiment.gpus, not both");
  if (r.has("gpus")) {
    e.gpus = r.get_int("gpus", std::nullopt, 1);
    e.locations["experiment.gpus"] = r.where("gpus");
  } else {
    const int nodes = r.get_int("nodes", e.cluster.nodes, 1);
    if (nodes > e.cluster.nodes)
      throw SpecError(r.where("nodes"), "experiment.nodes", std::to_string(nodes),
                      "must not exceed the cluster's " + std::to_string(e.cluster.nodes) + " nodes");
    e.gpus = nodes * e.cluster.gpus_per_node;
    e.locations["experiment.gpus"] = r.where("nodes");
  }
  if (r.has("measured")) {
    MapReader mr(r.child("measured", true), sec.file, "measured");
    Measured m;
    auto opt = [&](const char* k) -> std::optional<double> {
      if (!mr.has(k)) return std::nullopt;
      return mr.get_double(k, std::nullopt, 0.0, true);
    };
    m.iteration_s = opt("iteration_s");
    m.tflops_per_gpu = opt("tflops_per_gpu");
    m.tokens_per_s = opt("tokens_per_s");
    m.samples_per_s = opt("samples_per_s");
    m.forward_ms = opt("forward_ms");
    m.backward_ms = opt("backward_ms");
    m.speedup = opt("speedup");
    m.peak_memory_GiB = opt("peak_memory_GiB");
    if (m.peak_memory_GiB && !mr.has("memory_kind"))
      throw SpecError(mr.where("peak_memory_GiB"), "measured.memory_kind", "",
                      "is required with measured.peak_memory_GiB: one of " + allowed_values<MemoryKind>() +
                          " (what the figure counts)");
    m.memory_kind = mr.get_enum<MemoryKind>("memory_kind", MemoryKind::allocated);
    m.baseline = mr.get_string("baseline", "");
    if (m.speedup && m.baseline.empty())
      throw SpecError(mr.where("speedup"), "measured.baseline", "", "is required when measured.speedup is given");
    m.flops_definition = mr.get_enum<FlopsDefinition>("flops_definition", FlopsDefinition::hardware);
    m.source = mr.get_string("source", std::nullopt);
    m.datapoint = mr.get_string("datapoint", "");
    m.role = mr.get_enum<MeasuredRole>("role", MeasuredRole::prediction);
    mr.finish();
    e.measured = m;
  }
  e.notes = r.get_string("notes", "");
  r.get_string("source", "");
  r.finish();
  validate_experiment(e);
  return e;
}

GpuSpec load_gpu(const std::string& path) { return parse_gpu(read_text_file(path), path); }
ClusterSpec load_cluster(const std::string& path) { return parse_cluster(read_text_file(path), path); }
ModelSpec load_model(const std::string& path) { return parse_model(read_text_file(path), path); }
Experiment load_experiment(const std::string& path) { return parse_experiment(read_text_file(path), path); }

void validate_experiment(const Experiment& e) {
  if (auto v = check_plan(e.model, e.cluster, e.training, e.plan, e.gpus))
    throw SpecError(e.location_of(v->field), v->field, v->value, v->rule);
}

}  // namespace foresight
