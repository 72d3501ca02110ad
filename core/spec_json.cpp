#include "core/spec_json.hpp"

namespace foresight {

nlohmann::ordered_json to_json(const ModelSpec& m) {
  nlohmann::ordered_json j{{"name", m.name},         {"layers", m.layers},     {"hidden", m.hidden},
                           {"heads", m.heads},       {"seq_len", m.seq_len},   {"vocab", m.vocab},
                           {"ffn_hidden", m.ffn_hidden}, {"kv_heads", m.kv_heads}};
  if (m.moe)
    j["moe"] = {{"experts", m.moe->experts},
                {"top_k", m.moe->top_k},
                {"capacity_factor", m.moe->capacity_factor},
                {"every", m.moe->every}};
  return j;
}

nlohmann::ordered_json to_json(const GpuSpec& g) {
  return {{"name", g.name},
          {"sms", g.sms},
          {"clock_MHz", g.clock_MHz},
          {"hbm_GiB", in_GiB(g.hbm)},
          {"hbm_bandwidth_GBps", in_GBps(g.hbm_bandwidth)},
          {"nvlink_GBps", in_GBps(g.nvlink_bandwidth)},
          {"peak_TFLOPs",
           {{"bf16", in_TFLOPs(g.peak_bf16)},
            {"fp16", in_TFLOPs(g.peak_fp16)},
            {"tf32", in_TFLOPs(g.peak_tf32)},
            {"fp32", in_TFLOPs(g.peak_fp32)}}}};
}

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
            {"oversubscription", c.inter.oversubscription}}},
          {"host", {{"pcie_GBps", in_GBps(c.host.pcie_bandwidth)}, {"memory_GB", in_GB(c.host.memory)}}}};
}

nlohmann::ordered_json to_json(const TrainingSpec& t) {
  return {{"global_batch", t.global_batch}, {"dtype", to_string(t.dtype)}, {"optimizer", to_string(t.optimizer)}};
}

nlohmann::ordered_json to_json(const PlanSpec& p) {
  return {{"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"micro_batch", p.micro_batch},
          {"schedule", to_string(p.schedule)},
          {"virtual_stages", p.virtual_stages},
          {"sequence_parallel", p.sequence_parallel},
          {"dp_overlap", p.dp_overlap},
          {"recompute", to_string(p.recompute)},
          {"zero", p.zero},
          {"offload", {{"optimizer", p.offload.optimizer}, {"activations", p.offload.activations}}},
          {"ep", p.ep},
          {"token_slices", p.token_slices},
          {"framework", to_string(p.framework)},
          {"placement", to_string(p.placement)}};
}

std::string brief(const nlohmann::json& v) {
  if (v.is_array()) return "[a list of " + std::to_string(v.size()) + "]";
  if (v.is_object()) return "{an object}";
  const std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace foresight
