#include "core/spec_json.hpp"

#include "core/json_reader.hpp"
#include "core/spec_fields.hpp"

namespace foresight {

namespace {
template <class S>
nlohmann::ordered_json fields_json(const S& spec) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  JsonFieldWriter w(j);
  visit_fields(w, spec);
  return j;
}
}  // namespace

nlohmann::ordered_json to_json(const ModelSpec& m) { return fields_json(m); }

nlohmann::ordered_json to_json(const GpuSpec& g) {
  nlohmann::ordered_json kernels = nlohmann::ordered_json::object();
  auto put = [&](const char* key, const std::optional<SourcedValue>& v) {
    if (v) kernels[key] = {{"value", v->value}, {"source", v->source}};
  };
  put("gemm_efficiency", g.kernels.gemm_efficiency);
  put("memory_efficiency", g.kernels.memory_efficiency);
  put("launch_overhead_us", g.kernels.launch_overhead_us);
  put("flash_attention_efficiency", g.kernels.flash_attention_efficiency);
  put("cudnn_attention_efficiency", g.kernels.cudnn_attention_efficiency);
  put("flash2_attention_efficiency", g.kernels.flash2_attention_efficiency);
  put("flash_triton_attention_efficiency", g.kernels.flash_triton_attention_efficiency);
  put("flash1_attention_efficiency", g.kernels.flash1_attention_efficiency);
  put("unfused_score_efficiency", g.kernels.unfused_score_efficiency);
  put("eager_norm_efficiency", g.kernels.eager_norm_efficiency);
  put("eager_strided_efficiency", g.kernels.eager_strided_efficiency);
  put("device_spread_cv", g.kernels.device_spread_cv);
  put("sustained_clock_scale", g.kernels.sustained_clock_scale);
  put("gemm_k_overhead", g.kernels.gemm_k_overhead);
  put("gemm_tile_candidates", g.kernels.gemm_tile_candidates);
  put("fp8_split_accumulation_slowdown", g.kernels.fp8_split_accumulation_slowdown);
  put("persistent_gemm_grid", g.kernels.persistent_gemm_grid);
  return {{"name", g.name},
          {"compute_capability", g.compute_capability},
          {"sms", g.sms},
          {"clock_MHz", g.clock_MHz},
          {"hbm_GiB", in_GiB(g.hbm)},
          {"hbm_bandwidth_GBps", in_GBps(g.hbm_bandwidth)},
          {"nvlink_GBps", in_GBps(g.nvlink_bandwidth)},
          {"peak_TFLOPs",
           {{"bf16", in_TFLOPs(g.peak_bf16)},
            {"fp16", in_TFLOPs(g.peak_fp16)},
            {"tf32", in_TFLOPs(g.peak_tf32)},
            {"fp32", in_TFLOPs(g.peak_fp32)},
            {"fp8", in_TFLOPs(g.peak_fp8)}}},
          {"kernels", kernels}};
}

namespace {
nlohmann::ordered_json tiers_json(const std::vector<NetworkTier>& tiers) {
  auto out = nlohmann::ordered_json::array();
  for (const NetworkTier& t : tiers) out.push_back({{"nodes", t.nodes}, {"oversubscription", t.oversubscription}});
  return out;
}
// The node-wide host link rate only where the file states it (most clusters do not).
nlohmann::ordered_json host_json(const HostSpec& h) {
  nlohmann::ordered_json j = {{"pcie_GBps", in_GBps(h.pcie_bandwidth)},
                              {"memory_GB", in_GB(h.memory)},
                              {"memory_GBps", in_GBps(h.memory_bandwidth)}};
  if (h.pcie_node_bandwidth.value() > 0) j["pcie_node_GBps"] = in_GBps(h.pcie_node_bandwidth);
  return j;
}
}  // namespace

nlohmann::ordered_json to_json(const ClusterSpec& c) {
  return {{"name", c.name},
          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node},
          {"gpu", to_json(c.gpu)},
          {"intra_node",
           {{"kind", to_string(c.intra.kind)},
            {"bandwidth_GBps", in_GBps(c.intra.bandwidth)},
            {"latency_us", in_us(c.intra.latency)}}},
          {"inter_node",
           {{"nics_per_node", c.inter.nics_per_node},
            {"nic_Gbps", in_GBps(c.inter.nic_bandwidth) * 8.0},
            {"latency_us", in_us(c.inter.latency)},
            {"topology", to_string(c.inter.topology)},
            {"oversubscription", c.inter.oversubscription},
            {"tiers", tiers_json(c.inter.tiers)}}},
          {"host", host_json(c.host)}};
}

nlohmann::ordered_json to_json(const TrainingSpec& t) { return fields_json(t); }

nlohmann::ordered_json to_json(const PlanSpec& p) { return fields_json(p); }

std::string brief(const nlohmann::json& v) {
  if (v.is_array()) return "[a list of " + std::to_string(v.size()) + "]";
  if (v.is_object()) return "{an object}";
  const std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace foresight
