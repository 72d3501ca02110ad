#include "core/plan_json.hpp"

#include <sstream>

#include "core/plan.hpp"
#include "core/spec_json.hpp"

namespace foresight {

nlohmann::ordered_json to_json(const ExecutablePlan& p) {
  nlohmann::ordered_json j;
  j["schema_version"] = kPlanJsonSchemaVersion;
  j["model"] = to_json(p.model);
  j["cluster"] = {{"name", p.cluster}, {"gpus_per_node", p.gpus_per_node}};
  j["training"] = to_json(p.training);
  j["plan"] = to_json(p.plan);
  j["gpus"] = p.gpus;
  j["data"] = p.data;
  j["steps"] = p.steps;
  j["checkpoint_dir"] = p.checkpoint_dir;
  if (p.prediction)
    j["prediction"] = {{"iteration_s", p.prediction->iteration_s},
                       {"tokens_per_s", p.prediction->tokens_per_s},
                       {"tflops_per_gpu", p.prediction->tflops_per_gpu},
                       {"memory_GB", p.prediction->memory_GB},
                       {"engine", p.prediction->engine}};
  return j;
}

namespace {

/// Reads fields of one JSON object with type and range checks, and rejects unknown keys.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& j, std::string source, std::string prefix)
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {
    if (!j_.is_object()) fail(prefix_, brief(j_), "must be an object");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& rule) const {
    throw SpecError(SourceLocation{source_, 0, 0}, field, value, rule);
  }
  std::string path(const std::string& k) const { return prefix_.empty() ? k : prefix_ + "." + k; }
  const nlohmann::json& get(const std::string& k, bool required) {
    seen_.push_back(k);
    static const nlohmann::json null;
    if (!j_.contains(k)) {
      if (required) fail(path(k), "", "is required but missing");
      return null;
    }
    return j_.at(k);
  }
  int integer(const std::string& k, std::optional<int> fallback, long long min) {
    const auto& v = get(k, !fallback);
    if (v.is_null()) return *fallback;
    if (!v.is_number_integer()) fail(path(k), brief(v), "must be an integer");
    if (v.is_number_unsigned() && v.get<unsigned long long>() > 2147483647ULL)
      fail(path(k), brief(v), "must be at most 2147483647");
    const long long x = v.get<long long>();
    if (x < min) fail(path(k), brief(v), "must be at least " + std::to_string(min));
    if (x > 2147483647LL) fail(path(k), brief(v), "must be at most 2147483647");
    return int(x);
  }
  double number(const std::string& k, std::optional<double> fallback, double min) {
    const auto& v = get(k, !fallback);
    if (v.is_null()) return *fallback;
    if (!v.is_number()) fail(path(k), brief(v), "must be a number");
    const double x = v.get<double>();
    if (!(x >= min)) fail(path(k), brief(v), "must be at least " + std::to_string(min));
    return x;
  }
  bool boolean(const std::string& k, std::optional<bool> fallback) {
    const auto& v = get(k, !fallback);
    if (v.is_null()) return *fallback;
    if (!v.is_boolean()) fail(path(k), brief(v), "must be true or false");
    return v.get<bool>();
  }
  std::string string(const std::string& k, std::optional<std::string> fallback) {
    const auto& v = get(k, !fallback);
    if (v.is_null()) return *fallback;
    if (!v.is_string()) fail(path(k), brief(v), "must be a string");
    return v.get<std::string>();
  }
  template <class E>
  E enumeration(const std::string& k, std::optional<E> fallback) {
    std::optional<std::string> fb;
    if (fallback) fb = to_string(*fallback);
    const std::string s = string(k, fb);
    if (auto e = parse_enum<E>(s)) return *e;
    fail(path(k), s, "must be one of: " + allowed_values<E>());
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (std::find(seen_.begin(), seen_.end(), it.key()) == seen_.end())
        fail(path(it.key()), "", "is not a known key");
  }

 private:
  const nlohmann::json& j_;
  std::string source_, prefix_;
  std::vector<std::string> seen_;
};

}  // namespace

ExecutablePlan parse_plan_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw SpecError(SourceLocation{source, 0, 0}, "", "", std::string("is not valid JSON: ") + e.what());
  }
  JsonReader top(j, source, "");
  ExecutablePlan p;
  const int version = top.integer("schema_version", std::nullopt, 1);
  if (version != kPlanJsonSchemaVersion)
    top.fail("schema_version", std::to_string(version), "must be " + std::to_string(kPlanJsonSchemaVersion));
  {
    JsonReader m(top.get("model", true), source, "model");
    p.model.name = m.string("name", std::nullopt);
    p.model.layers = m.integer("layers", std::nullopt, 1);
    p.model.hidden = m.integer("hidden", std::nullopt, 1);
    p.model.heads = m.integer("heads", std::nullopt, 1);
    p.model.seq_len = m.integer("seq_len", std::nullopt, 1);
    p.model.vocab = m.integer("vocab", std::nullopt, 1);
    if (m.get("ffn_hidden", false).is_null() && 4LL * p.model.hidden > 2147483647LL)
      m.fail("model.ffn_hidden", std::to_string(4LL * p.model.hidden) + " (default: 4 * model.hidden)",
             "must be at most 2147483647; give model.ffn_hidden explicitly");
    p.model.ffn_hidden = m.integer("ffn_hidden", 4 * p.model.hidden, 1);
    p.model.kv_heads = m.integer("kv_heads", p.model.heads, 1);
    if (!m.get("moe", false).is_null()) {
      JsonReader mo(m.get("moe", false), source, "model.moe");
      MoeSpec moe;
      moe.experts = mo.integer("experts", std::nullopt, 1);
      moe.top_k = mo.integer("top_k", 1, 1);
      moe.capacity_factor = mo.number("capacity_factor", 1.0, 1e-9);
      moe.every = mo.integer("every", 1, 1);
      mo.finish();
      p.model.moe = moe;
    }
    m.finish();
  }
  {
    JsonReader c(top.get("cluster", true), source, "cluster");
    p.cluster = c.string("name", std::nullopt);
    p.gpus_per_node = c.integer("gpus_per_node", std::nullopt, 1);
    c.finish();
  }
  {
    JsonReader t(top.get("training", true), source, "training");
    p.training.global_batch = t.integer("global_batch", std::nullopt, 1);
    p.training.dtype = t.enumeration<Dtype>("dtype", Dtype::bf16);
    p.training.optimizer = t.enumeration<Optimizer>("optimizer", Optimizer::adam);
    t.finish();
  }
  {
    JsonReader q(top.get("plan", true), source, "plan");
    PlanSpec& pl = p.plan;
    pl.tp = q.integer("tp", std::nullopt, 1);
    pl.pp = q.integer("pp", std::nullopt, 1);
    pl.dp = q.integer("dp", std::nullopt, 1);
    pl.micro_batch = q.integer("micro_batch", std::nullopt, 1);
    pl.schedule = q.enumeration<Schedule>("schedule", Schedule::one_f_one_b);
    pl.virtual_stages = q.integer("virtual_stages", 1, 1);
    pl.sequence_parallel = q.boolean("sequence_parallel", false);
    pl.dp_overlap = q.boolean("dp_overlap", false);
    pl.recompute = q.enumeration<Recompute>("recompute", Recompute::none);
    pl.zero = q.integer("zero", 0, 0);
    if (!q.get("offload", false).is_null()) {
      JsonReader o(q.get("offload", false), source, "plan.offload");
      pl.offload.optimizer = o.boolean("optimizer", false);
      pl.offload.activations = o.number("activations", 0.0, 0.0);
      o.finish();
    }
    pl.ep = q.integer("ep", 1, 1);
    const auto& slices = q.get("token_slices", false);
    if (!slices.is_null()) {
      if (!slices.is_array()) q.fail("plan.token_slices", brief(slices), "must be a list of integers");
      for (const auto& s : slices) {
        if (!s.is_number_integer() || s.get<long long>() < 1 || s.get<long long>() > 2147483647LL)
          q.fail("plan.token_slices", brief(s), "every slice must be a positive integer");
        pl.token_slices.push_back(s.get<int>());
      }
    }
    pl.framework = q.enumeration<Framework>("framework", Framework::generic);
    pl.placement = q.enumeration<Placement>("placement", Placement::tp_dp_pp);
    q.finish();
  }
  p.gpus = top.integer("gpus", std::nullopt, 1);
  if (p.gpus > kMaxClusterGpus) top.fail("gpus", std::to_string(p.gpus), "must be at most " + std::to_string(kMaxClusterGpus));
  if (p.gpus_per_node > kMaxClusterGpus)
    top.fail("cluster.gpus_per_node", std::to_string(p.gpus_per_node), "must be at most " + std::to_string(kMaxClusterGpus));
  p.data = top.string("data", "synthetic");
  p.steps = top.integer("steps", 20, 1);
  p.checkpoint_dir = top.string("checkpoint_dir", "checkpoints");
  if (!top.get("prediction", false).is_null()) {
    JsonReader pr(top.get("prediction", false), source, "prediction");
    PlanPrediction x;
    x.iteration_s = pr.number("iteration_s", std::nullopt, 0.0);
    x.tokens_per_s = pr.number("tokens_per_s", 0.0, 0.0);
    x.tflops_per_gpu = pr.number("tflops_per_gpu", 0.0, 0.0);
    x.memory_GB = pr.number("memory_GB", 0.0, 0.0);
    x.engine = pr.string("engine", "");
    pr.finish();
    p.prediction = x;
  }
  top.finish();
  // The same plan rules as scenario files; the cluster here is only what the trainer needs.
  ClusterSpec c;
  c.nodes = (p.gpus + p.gpus_per_node - 1) / p.gpus_per_node;
  c.gpus_per_node = p.gpus_per_node;
  c.gpu.peak_fp32 = c.gpu.peak_tf32 = c.gpu.peak_fp16 = c.gpu.peak_bf16 = FlopsPerSecond(1);  // not checked here
  if (auto v = check_plan(p.model, c, p.training, p.plan, p.gpus))
    throw SpecError(SourceLocation{source, 0, 0}, v->field, v->value, v->rule);
  return p;
}

std::string launch_script(const ExecutablePlan& p, const std::string& plan_path) {
  std::ostringstream s;
  const int nodes = (p.gpus + p.gpus_per_node - 1) / p.gpus_per_node;
  s << "#!/usr/bin/env bash\n"
    << "# Launch lines for " << plan_path << ": " << p.gpus << " ranks, one per GPU, " << p.gpus_per_node
    << " per node on " << nodes << " node(s). NCCL is bootstrapped over MPI.\n"
    << "set -euo pipefail\n"
    << "PLAN=\"${PLAN:-" << plan_path << "}\"\n"
    << "if [ -n \"${SLURM_JOB_ID:-}\" ]; then\n"
    << "  exec srun --nodes=" << nodes << " --ntasks=" << p.gpus << " --ntasks-per-node=" << p.gpus_per_node
    << " --gpus-per-task=1 foresight-train --plan \"$PLAN\"\n"
    << "else\n"
    << "  exec mpirun -np " << p.gpus << " --map-by ppr:" << p.gpus_per_node << ":node --bind-to none foresight-train --plan \"$PLAN\"\n"
    << "fi\n";
  return s.str();
}

std::string megatron_arguments(const ExecutablePlan& p) {
  const PlanSpec& q = p.plan;
  if (q.schedule == Schedule::terapipe) return "";
  if (q.schedule == Schedule::gpipe) return "";
  std::ostringstream s;
  s << "--num-layers " << p.model.layers << " --hidden-size " << p.model.hidden << " --num-attention-heads "
    << p.model.heads << " --ffn-hidden-size " << p.model.ffn_hidden << " --seq-length " << p.model.seq_len
    << " --max-position-embeddings " << p.model.seq_len << " --micro-batch-size " << q.micro_batch
    << " --global-batch-size " << p.training.global_batch << " --tensor-model-parallel-size " << q.tp
    << " --pipeline-model-parallel-size " << q.pp;
  if (q.schedule == Schedule::interleaved)
    s << " --num-layers-per-virtual-pipeline-stage " << p.model.layers / (q.pp * q.virtual_stages);
  if (q.sequence_parallel) s << " --sequence-parallel";
  if (q.recompute == Recompute::full) s << " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (q.recompute == Recompute::selective) s << " --recompute-granularity selective";
  if (q.zero >= 1) s << " --use-distributed-optimizer";
  if (q.dp_overlap) s << " --overlap-grad-reduce";
  if (p.model.kv_heads != p.model.heads) s << " --group-query-attention --num-query-groups " << p.model.kv_heads;
  if (p.model.moe)
    s << " --num-experts " << p.model.moe->experts << " --moe-router-topk " << p.model.moe->top_k
      << " --expert-model-parallel-size " << q.ep;
  if (p.training.dtype == Dtype::bf16) s << " --bf16";
  if (p.training.dtype == Dtype::fp16) s << " --fp16";
  return s.str();
}

}  // namespace foresight
