#include "planner/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/scenario.hpp"
#include "planner/search.hpp"
#include "sim/costing.hpp"

namespace foresight::planner {

namespace {

std::string group_of(const Experiment& e) {
  const std::string& n = e.name;
  if (n.starts_with("mt-nlg")) return "MT-NLG (Smith et al. 2022)";
  if (n.starts_with("sc21")) return "Megatron-LM SC21 Table 1";
  if (n.starts_with("korthikanti")) return "Korthikanti 2022 Table 4";
  if (n.starts_with("terapipe")) return "TeraPipe (Li et al. 2021)";
  if (n.starts_with("deepspeed-moe")) return "DeepSpeed-MoE (Rajbhandari et al. 2022)";
  if (n.ends_with("-local-h100")) return "PyTorch eager on one H100 (shared/bench)";
  if (n.starts_with("llmfoundry")) return "llm-foundry MPT benchmarks (MosaicML, FSDP)";
  if (n.starts_with("torchtitan")) return "torchtitan (Meta, FSDP2)";
  return "other";
}


}  // namespace

ValidationReport validate_all(const std::string& root, sim::EngineKind engine,
                              const std::function<void(long done, long total)>& progress) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(root) / "experiments"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());

  ValidationReport rep;
  std::map<std::string, Seconds> predicted_iteration;  // for speedups against a baseline
  std::vector<Experiment> with_speedup;
  long done = 0;
  for (const auto& f : files) {
    if (progress) progress(done++, long(files.size()));
    Experiment e = load_experiment(f);
    if (!e.measured) continue;
    const Measured& m = *e.measured;
    const std::string group = group_of(e);
    auto add = [&](std::string quantity, double published, double predicted) {
      rep.cases.push_back({e.name, m.source, group, std::move(quantity), published, predicted});
    };
    const cost_models::ExecutionModel x = cost_models::resolve_execution(e);
    const CommModel comm(e.cluster);
    if (m.forward_ms || m.backward_ms) {
      // One transformer layer, forward and backward (recompute included), with its TP communication.
      const sim::ComputeCosts compute = sim::compute_costs(e, x);
      const sim::LayerCompute lc = compute.layer(e.model.seq_len, e.model.seq_len, false, 0);
      const Seconds tp = sim::tp_comm_per_layer({e, x, compute, comm}, e.model.seq_len);
      const Seconds recompute_tp = e.plan.recompute == Recompute::full ? tp : Seconds(0);
      if (m.forward_ms) add("forward_ms", *m.forward_ms, in_ms(lc.forward + tp));
      if (m.backward_ms) add("backward_ms", *m.backward_ms, in_ms(lc.backward + tp + lc.recompute + recompute_tp));
      continue;
    }
    e = with_token_slices(e, x);
    const sim::Prediction p = sim::predict({e, x, sim::compute_costs(e, x), comm}, engine);
    predicted_iteration[e.name] = p.iteration;
    if (m.iteration_s) add("iteration_s", *m.iteration_s, in_s(p.iteration));
    if (m.tflops_per_gpu)
      add(m.flops_definition == FlopsDefinition::hardware ? "tflops_per_gpu (hardware)" : "tflops_per_gpu (model)",
          *m.tflops_per_gpu, m.flops_definition == FlopsDefinition::hardware ? p.hw_tflops_per_gpu : p.tflops_per_gpu);
    if (m.tokens_per_s) add("tokens_per_s", *m.tokens_per_s, p.tokens_per_s);
    if (m.peak_memory_GiB) {
      // The most loaded GPU at its peak, counted as the measurement counts it.
      const cost_models::MemoryBreakdown& mem = p.memory_per_stage[p.most_loaded_stage];
      const Bytes predicted = m.memory_kind == MemoryKind::allocated  ? mem.allocated()
                              : m.memory_kind == MemoryKind::reserved ? mem.reserved()
                                                                      : mem.total();
      add(std::string("peak_memory_GiB (") + to_string(m.memory_kind) + ")", *m.peak_memory_GiB, in_GiB(predicted));
    }
    if (m.speedup) with_speedup.push_back(e);
  }
  if (progress) progress(long(files.size()), long(files.size()));
  for (const auto& e : with_speedup) {
    auto it = predicted_iteration.find(e.measured->baseline);
    if (it == predicted_iteration.end()) continue;
    rep.cases.push_back({e.name, e.measured->source, group_of(e), "speedup", *e.measured->speedup,
                         it->second / predicted_iteration[e.name]});
  }

  // MAPE over time-like quantities (TFLOP/s of the same run would count it twice).
  std::map<std::string, ValidationSummary> groups;
  ValidationSummary overall{"overall"};
  for (const auto& c : rep.cases) {
    if (c.quantity.starts_with("tflops") || c.quantity.starts_with("peak_memory")) continue;
    for (ValidationSummary* s : {&groups[c.group], &overall}) {
      s->cases += 1;
      s->mape_pct += std::fabs(c.error_pct());
      s->max_abs_pct = std::max(s->max_abs_pct, std::fabs(c.error_pct()));
    }
  }
  for (auto& [name, s] : groups) {
    s.group = name;
    s.mape_pct /= std::max(1, s.cases);
    rep.groups.push_back(s);
  }
  overall.mape_pct /= std::max(1, overall.cases);
  rep.groups.push_back(overall);
  return rep;
}

std::string validation_markdown(const ValidationReport& r, sim::EngineKind engine) {
  std::string s = "| experiment | quantity | published | predicted | error |\n| --- | --- | --- | --- | --- |\n";
  char buf[512];
  for (const auto& c : r.cases) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %.4g | %.4g | %+.1f%% |\n", c.experiment.c_str(), c.quantity.c_str(),
                  c.published, c.predicted, c.error_pct());
    s += buf;
  }
  s += "\n| source | cases | MAPE | largest error |\n| --- | --- | --- | --- |\n";
  for (const auto& g : r.groups) {
    std::snprintf(buf, sizeof buf, "| %s | %d | %.1f%% | %.1f%% |\n", g.group.c_str(), g.cases, g.mape_pct, g.max_abs_pct);
    s += buf;
  }
  s += std::string("\nEngine: ") + to_string(engine) + ". MAPE counts time-like quantities (iteration time, one layer's "
       "forward/backward, tokens/s, speedup); TFLOP/s rows restate the iteration time under the source's FLOP definition; "
       "peak-memory rows (the most loaded GPU, counted as the source counts it) are listed but not in the MAPE.\n";
  return s;
}

nlohmann::ordered_json validation_json(const ValidationReport& r, sim::EngineKind engine) {
  nlohmann::ordered_json j;
  j["engine"] = to_string(engine);
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const auto& c : r.cases)
    cases.push_back({{"experiment", c.experiment}, {"group", c.group}, {"quantity", c.quantity},
                     {"published", c.published}, {"predicted", c.predicted}, {"error_pct", c.error_pct()},
                     {"source", c.source}});
  j["cases"] = cases;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& g : r.groups)
    groups.push_back({{"group", g.group}, {"cases", g.cases}, {"mape_pct", g.mape_pct}, {"max_abs_pct", g.max_abs_pct}});
  j["groups"] = groups;
  j["mape_pct"] = r.groups.empty() ? 0.0 : r.groups.back().mape_pct;
  j["max_abs_pct"] = r.groups.empty() ? 0.0 : r.groups.back().max_abs_pct;
  return j;
}

}  // namespace foresight::planner
