#include "core/pipeline_partition.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <utility>

#include "core/flops.hpp"
#include "core/plan.hpp"

namespace foresight {

std::vector<PipeLayerSpec> deepspeed_layer_specs(const ModelSpec& m, int tp) {
  const double t = std::max(1, tp), h = m.hidden;
  // Megatron's layers split their weights over tp but keep the layer norms and the biases of the
  // row-parallel output projection and FC2 whole on every rank.
  const double replicated = 2.0 * norm_parameters(m) + (m.bias ? 2.0 * h : 0.0);
  const double transformer = (dense_layer_parameters(m) - replicated) / t + replicated;
  const double positions = m.position == PositionEmbedding::learned ? double(m.seq_len) * h : 0.0;
  const double embedding = double(m.vocab) * h / t + positions;  // VocabParallelEmbedding + positions
  std::vector<PipeLayerSpec> specs;
  specs.push_back({"_to_float16", 0, false});
  specs.push_back({"EmbeddingPipe", embedding, false});
  for (int l = 0; l < m.layers; ++l) specs.push_back({"ParallelTransformerLayerPipe", transformer, true});
  specs.push_back({m.norm == Norm::rmsnorm ? "MixedFusedRMSNorm" : "LayerNorm", norm_parameters(m), false});
  // Tied: a TiedLayerSpec of EmbeddingPipe, built (and counted) whole; untied: LMHeadPipe.
  if (m.tie_embeddings) specs.push_back({"EmbeddingPipe", embedding, false});
  else specs.push_back({"LMHeadPipe", double(m.vocab) * h / t, false});
  specs.push_back({"float16_to_fp32", 0, false});
  return specs;
}

std::vector<int> deepspeed_partition_uniform(int items, int parts) {
  std::vector<int> bounds(parts + 1, 0);
  if (items <= parts) {
    for (int p = 0; p <= parts; ++p) bounds[p] = std::min(p, items);
    return bounds;
  }
  const int chunk = items / parts;
  for (int p = 0; p < parts; ++p) bounds[p] = std::min(chunk * p, items);
  bounds[parts] = items;
  return bounds;
}

namespace {

/// _lprobe: boundaries for a heaviest-part limit `bottleneck` over inclusive prefix sums `w`, and
/// whether every part stays within it. Written as DeepSpeed's Python runs it, Python's w[-1] where
/// an index reaches -1 included.
std::pair<std::vector<int>, bool> lprobe(const std::vector<double>& w, int parts, double bottleneck) {
  const int n = int(w.size());
  const double total = w.back();
  std::vector<int> bounds(parts + 1, n);
  bounds[0] = 0;
  double bsum = bottleneck;
  const int chunk = n / parts;
  int step = chunk;
  auto at = [&](int i) { return i < 0 ? w[n + i] : w[i]; };
  for (int p = 1; p < parts; ++p) {
    while (step < n && w[step] < bsum) step += chunk;  // jump to the next bucket
    const int lo = step - chunk, hi = std::min(step, n);
    bounds[p] = int(std::lower_bound(w.begin() + lo, w.begin() + hi, bsum) - w.begin());  // bisect_left
    if (bounds[p] == n) return {bounds, w.back() - at(bounds[p - 1]) < bottleneck};
    bsum = at(bounds[p] - 1) + bottleneck;
  }
  return {bounds, bsum >= total};
}

}  // namespace

std::vector<int> deepspeed_partition_balanced(const std::vector<double>& weights, int parts) {
  const int n = int(weights.size());
  if (n <= parts) return deepspeed_partition_uniform(n, parts);
  std::vector<double> w(weights);
  for (int i = 1; i < n; ++i) w[i] += w[i - 1];
  const double eps = 1e-3;
  double lower = w.back() / parts, upper = w.back();
  while (upper > lower + eps) {
    const double mid = lower + (upper - lower) / 2;
    if (lprobe(w, parts, mid).second) upper = mid;
    else lower = mid + eps;
  }
  return lprobe(w, parts, upper).first;
}

DeepSpeedPartition deepspeed_partition(const ModelSpec& m, const PlanSpec& p) {
  DeepSpeedPartition out;
  const int pp = std::max(1, p.pp);
  const std::vector<PipeLayerSpec> specs = deepspeed_layer_specs(m, p.tp);
  const int n = int(specs.size());
  std::vector<int> bounds;
  const std::string& method = p.partition_method;
  if (method == "uniform") {
    bounds = deepspeed_partition_uniform(n, pp);
  } else if (method == "parameters") {
    if (m.moe) {
      out.problem = "is not modelled for MoE models yet (expert parameters per rank depend on ep)";
      return out;
    }
    std::vector<double> w;
    for (const auto& s : specs) w.push_back(s.parameters);
    bounds = deepspeed_partition_balanced(w, pp);
  } else if (method.rfind("type:", 0) == 0) {
    // The planner and validate ask for the same few patterns and six layer names many thousand
    // times; compiling a case-insensitive std::regex and searching with it was a third of
    // `foresight validate`'s time. Each thread keeps what it has matched (deterministic: the same
    // pattern and name always give the same answer).
    const std::string pattern = method.substr(5);
    thread_local std::map<std::string, std::optional<std::regex>> compiled;
    thread_local std::map<std::pair<std::string, std::string>, bool> matched;
    if (compiled.size() > 64) {  // a fuzzer's stream of patterns must not grow it without bound
      compiled.clear();
      matched.clear();
    }
    auto c = compiled.find(pattern);
    if (c == compiled.end()) {
      std::optional<std::regex> re;
      try {
        re = std::regex(pattern, std::regex::icase | std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        re.reset();
      }
      c = compiled.emplace(pattern, std::move(re)).first;
    }
    if (!c->second) {
      out.problem = "is not a valid regular expression after type:";
      return out;
    }
    std::vector<double> w;
    bool any = false;
    for (const auto& s : specs) {
      auto [it, fresh] = matched.try_emplace({pattern, s.name}, false);
      if (fresh) it->second = std::regex_search(s.name, *c->second);
      const bool hit = it->second;
      any = any || hit;
      w.push_back(hit ? 1.0 : 0.0);
    }
    if (!any) {
      // DeepSpeed raises "Partitioning '...' found no valid layers to partition."
      out.problem = "matches none of the layer types (_to_float16, EmbeddingPipe, ParallelTransformerLayerPipe, "
                    "LayerNorm / MixedFusedRMSNorm, EmbeddingPipe or LMHeadPipe, float16_to_fp32)";
      return out;
    }
    bounds = deepspeed_partition_balanced(w, pp);
  } else {
    out.problem = "is not a DeepSpeed partition method (uniform, parameters or type:<regex>)";
    return out;
  }
  out.stage_layers.assign(pp, 0);
  for (int s = 0; s < pp; ++s)
    for (int i = bounds[s]; i < bounds[s + 1]; ++i) out.stage_layers[s] += specs[i].transformer;
  if (bounds[1] <= 1) out.problem = "puts the embedding on stage 1, not stage 0";
  else if (bounds[pp - 1] > n - 2) out.problem = "puts the LM head before the last stage";
  for (int s = 0; s < pp && out.problem.empty(); ++s)
    if (out.stage_layers[s] == 0) out.problem = "leaves stage " + std::to_string(s) + " without a transformer layer";
  return out;
}

}  // namespace foresight
