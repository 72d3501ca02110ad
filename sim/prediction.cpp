#include "sim/prediction.hpp"

#include <cmath>
#include <sstream>

namespace foresight::sim {

Seconds TimeBreakdown::total() const {
  return compute + recompute + host + tp_comm + ep_comm + cp_comm + pp_comm_exposed + dp_comm_exposed + optimizer +
         offload_stall + bubble;
}

std::string Prediction::range_text() const {
  if (!band) return "no error bar: no validation case of this kind";
  return format_number(in_s(iteration_low()), 3) + " - " + format_number(in_s(iteration_high()), 3) +
         " s (10th-90th percentile of " + std::to_string(band->cases) + " validation cases, " + band->describe() + ")";
}

bool Prediction::fits() const { return memory_shortfall() <= Bytes(0) && host_memory_shortfall() <= Bytes(0); }

Bytes Prediction::memory_shortfall() const {
  if (memory_per_stage.empty()) return Bytes(0);
  return max(memory_per_stage[most_loaded_stage].total() - device_memory, Bytes(0));
}

Bytes Prediction::host_memory_shortfall() const {
  if (!(host_memory.value() > 0)) return Bytes(0);
  return max(host_memory_needed - host_memory, Bytes(0));
}

std::string Prediction::memory_verdict() const {
  std::string v;
  if (memory_shortfall() > Bytes(0))
    v = "stage " + std::to_string(most_loaded_stage) + " needs " +
        format_number(in_GB(memory_per_stage[most_loaded_stage].total()), 1) + " GB per GPU, the GPU has " +
        format_number(in_GB(device_memory), 1) + " GB: " + format_number(in_GB(memory_shortfall()), 1) + " GB short";
  if (host_memory_shortfall() > Bytes(0))
    v += (v.empty() ? "" : "; ") + std::string("the offload needs ") + format_number(in_GB(host_memory_needed), 1) +
         " GB of host memory per node, a node has " + format_number(in_GB(host_memory), 1) + " GB: " +
         format_number(in_GB(host_memory_shortfall()), 1) + " GB short";
  return v;
}

std::vector<Section> prediction_sections(const Prediction& p) {
  const TimeBreakdown& b = p.breakdown;
  std::vector<Section> s;
  s.push_back({"Throughput", "",
               {{"iteration_s", in_s(p.iteration), "s", "Iteration time", 3},
                {"tokens_per_s", p.tokens_per_s, "tokens/s", "Tokens per second", 0},
                {"tflops_per_gpu", p.tflops_per_gpu, "TFLOP/s", "Model TFLOP/s per GPU (no recompute)", 1},
                {"hw_tflops_per_gpu", p.hw_tflops_per_gpu, "TFLOP/s", "Hardware TFLOP/s per GPU (with recompute)", 1},
                {"mfu", p.mfu, "", "MFU (model FLOPs / peak)", 3},
                {"hfu", p.hfu, "", "HFU (hardware FLOPs / peak)", 3}}});
  s.push_back({"Breakdown of the critical stage (stage " + std::to_string(p.critical_stage) + ")", "breakdown_s",
               {{"compute", in_s(b.compute), "s", "Compute (forward + backward)", 3},
                {"recompute", in_s(b.recompute), "s", "Recompute", 3},
                {"host_wait", in_s(b.host), "s", "Framework host work, waited for", 3},
                {"tp_comm", in_s(b.tp_comm), "s", "Tensor-parallel communication", 3},
                {"ep_comm", in_s(b.ep_comm), "s", "Expert-parallel all-to-all", 3},
                {"cp_comm", in_s(b.cp_comm), "s", "Context-parallel K/V exchange, exposed", 3},
                {"pp_comm_exposed", in_s(b.pp_comm_exposed), "s", "Pipeline transfers, exposed", 3},
                {"dp_comm_exposed", in_s(b.dp_comm_exposed), "s", "Data-parallel sync, exposed", 3},
                {"optimizer", in_s(b.optimizer), "s", "Optimizer step", 3},
                {"offload_stall", in_s(b.offload_stall), "s", "Offload stalls", 3},
                {"bubble", in_s(b.bubble), "s", "Pipeline bubble", 3}}});
  if (!p.memory_per_stage.empty()) {
    const cost_models::MemoryBreakdown& m = p.memory_per_stage[p.most_loaded_stage];
    s.push_back({"Memory per GPU, most loaded stage (stage " + std::to_string(p.most_loaded_stage) + ")", "memory_GB",
                 {{"weights", in_GB(m.weights), "GB", "Weights", 2},
                  {"grads", in_GB(m.grads), "GB", "Gradients", 2},
                  {"optimizer", in_GB(m.optimizer), "GB", "Optimizer state", 2},
                  {"activations", in_GB(m.activations), "GB", "Activations", 2},
                  {"buffers", in_GB(m.buffers), "GB", "Buffers (buckets, p2p, MoE, ZeRO-3)", 2},
                  {"allocated", in_GB(m.allocated()), "GB", "Allocated (peak, allocator view)", 2},
                  {"headroom", in_GB(m.headroom), "GB", "Allocator headroom", 2},
                  {"runtime", in_GB(m.runtime), "GB", "CUDA context and NCCL", 2},
                  {"total", in_GB(m.total()), "GB", "Total", 2},
                  {"device", in_GB(p.device_memory), "GB", "Device memory", 2}}});
  }
  if (p.host_memory_needed > Bytes(0)) {
    Section host{"Host memory per node (offload)", "host_memory_GB",
                 {{"offload", in_GB(p.host_memory_needed), "GB", "Offloaded state of the plan's GPUs on a node", 2}}};
    if (p.host_memory > Bytes(0)) host.fields.push_back({"host", in_GB(p.host_memory), "GB", "Host memory", 2});
    s.push_back(std::move(host));
  }
  return s;
}

nlohmann::ordered_json memory_json(const cost_models::MemoryBreakdown& m) {
  return {{"weights", in_GB(m.weights)},         {"grads", in_GB(m.grads)},         {"optimizer", in_GB(m.optimizer)},
          {"activations", in_GB(m.activations)}, {"buffers", in_GB(m.buffers)},     {"allocated", in_GB(m.allocated())},
          {"headroom", in_GB(m.headroom)},       {"runtime", in_GB(m.runtime)},     {"total", in_GB(m.total())}};
}

std::vector<std::string> check_prediction(const Prediction& p) {
  std::vector<std::string> broken;
  auto fail = [&](const std::string& what) { broken.push_back(what); };
  const TimeBreakdown& b = p.breakdown;
  const double it = in_s(p.iteration);
  if (!(it > 0) || !std::isfinite(it)) fail("iteration time must be positive and finite");
  const std::pair<const char*, Seconds> parts[] = {
      {"compute", b.compute},     {"recompute", b.recompute},   {"host_wait", b.host},       {"tp_comm", b.tp_comm},
      {"ep_comm", b.ep_comm},     {"cp_comm", b.cp_comm},     {"pp_comm_exposed", b.pp_comm_exposed}, {"dp_comm_exposed", b.dp_comm_exposed},
      {"optimizer", b.optimizer}, {"offload_stall", b.offload_stall},     {"bubble", b.bubble}};
  for (const auto& [name, v] : parts) {
    if (v.value() < -1e-9 * it) fail(std::string(name) + " is negative");
    if (v > p.iteration * (1 + 1e-9)) fail(std::string(name) + " exceeds the iteration time");
  }
  if (std::fabs(in_s(b.total()) - it) > 1e-6 * it) {
    std::ostringstream o;
    o << "breakdown sums to " << in_s(b.total()) << " s, iteration is " << it << " s";
    fail(o.str());
  }
  if (p.tp == 1 && b.tp_comm > Seconds(0)) fail("tp = 1 but tensor-parallel communication is non-zero");
  if (p.cp == 1 && b.cp_comm > Seconds(0)) fail("cp = 1 but context-parallel communication is non-zero");
  if (p.pp == 1 && b.pp_comm_exposed > Seconds(0)) fail("pp = 1 but pipeline communication is non-zero");
  // (With pp > 1 the gradient sync also sums a tied embedding's two copies, dp or not.)
  if (p.dp * p.cp == 1 && p.pp == 1 && b.dp_comm_exposed > Seconds(0))
    fail("dp = cp = pp = 1 but data-parallel communication is non-zero");
  if (p.mfu > p.hfu + 1e-12) fail("MFU exceeds HFU");
  if (p.hfu > 1.0) fail("HFU exceeds 1: faster than the hardware's peak");
  if (!p.fits()) fail("memory: " + p.memory_verdict());
  for (std::size_t s = 0; s < p.memory_per_stage.size(); ++s)
    if (p.memory_per_stage[s].total() > p.memory_per_stage[p.most_loaded_stage].total())
      fail("stage " + std::to_string(s) + " uses more memory than the reported most loaded stage");
  return broken;
}

}  // namespace foresight::sim
