#include "trainer/summary.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace foresight::trainer {

namespace {

/// One column of the step record: JSON key, console label, unit and printf format.
struct StepField {
  const char* key;
  const char* label;
  const char* unit;
  const char* format;
  std::function<std::optional<double>(const StepRecord&)> get;
};

const std::vector<StepField>& step_fields() {
  static const std::vector<StepField> fields = {
      {"loss", "loss", "", "%.6f", [](const StepRecord& r) { return r.loss; }},
      {"lr", "lr", "", "%.3e", [](const StepRecord& r) { return r.lr; }},
      {"grad_norm", "grad norm", "", "%.4f", [](const StepRecord& r) { return r.grad_norm; }},
      {"step_s", "step", " s", "%.4f", [](const StepRecord& r) { return r.step_s; }},
      {"tokens_per_s", "", " tokens/s", "%.0f", [](const StepRecord& r) { return r.tokens_per_s; }},
      {"tflops_per_rank", "", " TFLOP/s/rank", "%.4f", [](const StepRecord& r) { return r.tflops_per_rank; }},
      {"mfu", "MFU", "", "%.3f", [](const StepRecord& r) { return r.mfu; }},
      {"memory_MiB", "mem", " MiB", "%.2f", [](const StepRecord& r) { return r.memory_MiB; }},
      {"offload_MiB", "offload", " MiB", "%.6f", [](const StepRecord& r) { return r.offload_MiB; }},
  };
  return fields;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::string format_step(const StepRecord& r, int total_steps) {
  std::string s = "step " + std::to_string(r.step) + "/" + std::to_string(total_steps);
  for (const StepField& f : step_fields()) {
    const auto v = f.get(r);
    s += " | ";
    if (*f.label) s += std::string(f.label) + " ";
    s += v ? fmt(f.format, *v) + f.unit : std::string("n/a");
  }
  return s;
}

nlohmann::ordered_json summary_json(const RunSummary& s, const ExecutablePlan& plan, const std::string& plan_file) {
  nlohmann::ordered_json j;
  j["plan"] = plan_file;
  j["status"] = s.status;
  j["backend"] = s.backend;
  j["comm"] = s.comm;
  j["compute_dtype"] = s.compute_dtype;
  j["plan_dtype"] = to_string(plan.training.dtype);
  j["ranks"] = s.ranks;
  j["layout"] = {{"tp", plan.plan.tp}, {"pp", plan.plan.pp}, {"dp", plan.plan.dp},
                 {"placement", to_string(plan.plan.placement)}, {"schedule", to_string(plan.plan.schedule)},
                 {"micro_batch", plan.plan.micro_batch}, {"micro_batches", plan.plan.micro_batches(plan.training)},
                 {"virtual_stages", plan.plan.virtual_stages}, {"sequence_parallel", plan.plan.sequence_parallel},
                 {"recompute", to_string(plan.plan.recompute)}, {"zero", plan.plan.zero},
                 {"offload_activations", plan.plan.offload.activations},
                 {"dp_buckets", s.dp_buckets}, {"dp_reduction", s.dp_reduction}};
  j["data"] = s.data;
  j["first_step"] = s.first_step;
  j["last_step"] = s.last_step;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const StepRecord& r : s.steps) {
    nlohmann::ordered_json e;
    e["step"] = r.step;
    for (const StepField& f : step_fields()) {
      const auto v = f.get(r);
      e[f.key] = v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
    }
    steps.push_back(e);
  }
  j["steps"] = steps;

  nlohmann::ordered_json measured;
  if (!s.steps.empty()) {
    std::vector<double> times, tflops;
    const std::size_t skip = s.steps.size() > 1 ? 1 : 0;  // the first step pays for warm-up
    for (std::size_t i = skip; i < s.steps.size(); ++i) {
      times.push_back(s.steps[i].step_s);
      tflops.push_back(s.steps[i].tflops_per_rank);
    }
    const double it = median(times);
    double mem = 0;
    for (const StepRecord& r : s.steps) mem = std::max(mem, r.memory_MiB);
    measured = {{"iteration_s", it},
                {"tokens_per_s", double(plan.training.global_batch) * plan.model.seq_len / it},
                {"tflops_per_gpu", median(tflops)},
                {"memory_GB", mem * 1048576.0 / 1e9}};
  }
  j["measured"] = measured;
  if (plan.prediction) {
    const PlanPrediction& p = *plan.prediction;
    nlohmann::ordered_json cmp;
    auto row = [&](const char* key, double predicted) {
      nlohmann::ordered_json r = {{"predicted", predicted}};
      if (measured.contains(key)) {
        const double m = measured[key].get<double>();
        r["measured"] = m;
        r["measured_over_predicted"] = predicted > 0 ? nlohmann::ordered_json(m / predicted) : nullptr;
      }
      cmp[key] = r;
    };
    row("iteration_s", p.iteration_s);
    row("tokens_per_s", p.tokens_per_s);
    row("tflops_per_gpu", p.tflops_per_gpu);
    row("memory_GB", p.memory_GB);
    cmp["engine"] = p.engine;
    j["predicted_vs_measured"] = cmp;
  } else {
    j["predicted_vs_measured"] = nullptr;
  }
  return j;
}

}  // namespace foresight::trainer
