#include <set>

#include "tests/fuzz/fuzz_inputs.hpp"

#include "core/flops.hpp"
#include "core/plan_json.hpp"
#include "core/scenario.hpp"
#include "cost_models/memory.hpp"
#include "cost_models/profile.hpp"

namespace foresight::fuzz {

void scenario_yaml(const std::string& text) {
  const std::string path = std::string(FORESIGHT_SOURCE_DIR) + "/tests/data/good/fuzz-input.yaml";
  // Which loader applies depends on the file's top-level key; the others refuse it at once, so
  // trying those whose key appears in the text covers every loader at little cost.
  try {
    const Experiment e = parse_experiment(text, path);
    // What `describe` computes next from an accepted experiment.
    parameter_count(e.model);
    hardware_flops_per_iteration(e.model, e.training.global_batch, e.plan.recompute);
    cost_models::memory_per_stage(cost_models::execution_model(e.training, e.plan), e.model, e.training, e.plan);
  } catch (const SpecError&) {
  }
  if (text.find("model") != std::string::npos) try {
      parse_model(text, path);
    } catch (const SpecError&) {
    }
  if (text.find("cluster") != std::string::npos) try {
      parse_cluster(text, path);
    } catch (const SpecError&) {
    }
  if (text.find("gpu") != std::string::npos) try {
      parse_gpu(text, path);
    } catch (const SpecError&) {
    }
}

void plan_json(const std::string& text) {
  try {
    const ExecutablePlan p = parse_plan_json(text, "plan.json");
    // What the planner and the trainer do with an accepted plan: write it back, print its launch lines
    // and configurations.
    parse_plan_json(to_json(p).dump(), "plan.json (rewritten)");
    launch_script(p, "plan.json");
    megatron_arguments(p);
    deepspeed_config(p);
  } catch (const SpecError&) {
  }
}

void profile_json(const std::string& text) {
  try {
    const cost_models::ProfileData data = cost_models::parse_profile(text, "profile.json");
    // What an execution takes from it: its own implementation's GEMMs and attention.
    std::set<std::pair<std::string, Dtype>> kinds;
    for (const auto& g : data.gemm) kinds.insert({g.impl, g.dtype});
    for (const auto& [impl, dtype] : kinds) {
      const cost_models::CalibrationProfile p = cost_models::select_profile(data, impl, dtype, "flash", Dtype::bf16);
      cost_models::profile_gemm(p, 4096, 4096, 4096, 1);
    }
  } catch (const SpecError&) {
  }
}

}  // namespace foresight::fuzz
