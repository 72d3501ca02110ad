#include "planner/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <Eigen/Dense>

#include "core/scenario.hpp"
#include "planner/search.hpp"
#include "sim/costing.hpp"

namespace foresight::planner {

namespace {

std::string group_of(const Experiment& e) {
  const std::string& n = e.name;
  if (n.starts_with("mt-nlg")) return "MT-NLG (Smith et al. 2022)";
  if (n.starts_with("sc21")) return "Megatron-LM SC21 Table 1";
  if (n.starts_with("korthikanti-table5")) return "Korthikanti 2022 Table 5 (end-to-end)";
  if (n.starts_with("korthikanti")) return "Korthikanti 2022 Table 4";
  if (n.starts_with("megatron2020")) return "Megatron-LM repository scaling table (2020)";
  if (n.starts_with("megatron-readme")) return "Megatron-LM README GPT-3 175B example (2021)";
  if (n.starts_with("mcore-r080")) return "Megatron-Core r0.8 README weak scaling (H100, 2024)";
  if (n.starts_with("terapipe")) return "TeraPipe (Li et al. 2021)";
  if (n.starts_with("deepspeed-moe")) return "DeepSpeed-MoE (Rajbhandari et al. 2022)";
  if (n.starts_with("deepspeed-azure")) return "DeepSpeed ZeRO-3 on Azure A100 (2022)";
  if (n.starts_with("deepspeed-zeropp")) return "DeepSpeed ZeRO-3 on DGX-2 V100 (ZeRO++ baselines, 2023)";
  if (n.ends_with("-local-h100") || n.ends_with("-local-h100-compile")) return "PyTorch on one H100 (shared/bench)";
  if (n.starts_with("llmfoundry")) return "llm-foundry MPT benchmarks (MosaicML, FSDP)";
  if (n.starts_with("fms-fsdp")) return "IBM fms-fsdp Llama 2 benchmarks (FSDP1, 2024)";
  if (n.starts_with("torchtitan")) return "torchtitan (Meta, FSDP2)";
  if (n.starts_with("bloom")) return "BLOOM-176B (BigScience 2022)";
  if (n.starts_with("bigscience-jz")) return "BigScience 176B topology benchmarks on Jean Zay (2022)";
  if (n.starts_with("gpt-neox")) return "GPT-NeoX-20B (Black et al. 2022)";
  if (n.starts_with("glm-130b")) return "GLM-130B (Zeng et al. 2022)";
  if (n.starts_with("nemo2407")) return "NeMo 24.07 on DGX H100 (Megatron-Core, FP8)";
  if (n.starts_with("mbridge") && (n.find("xb200-") != std::string::npos || n.find("xgb200-") != std::string::npos ||
                                   n.find("xgb300-") != std::string::npos))
    return "Megatron-Bridge on Blackwell (DGX B200, GB200 and GB300 NVL72)";
  if (n.starts_with("mbridge")) return "Megatron-Bridge on DGX H100 (Megatron-Core)";
  if (n.starts_with("dgxc2411")) return "DGX Cloud benchmarking recipes on H100 (NeMo 24.05 and 24.09, 2024)";
  if (n.starts_with("dgxc")) return "DGX Cloud benchmarking recipes on H100 (NeMo 2.0)";
  if (n.starts_with("deepseek-v3")) return "DeepSeek-V3 report (H800, DualPipe, FP8)";
  if (n.starts_with("megascale")) return "MegaScale's Megatron-LM baseline (Jiang et al. 2024, A100)";
  if (n.starts_with("flashattn")) return "FlashAttention's GPT training code (Dao et al. 2022-23, 8 A100 80GB)";
  return "other";
}


}  // namespace

namespace {

/// One experiment's predicted quantities (speedups aside), under `calibration`.
struct ExperimentPrediction {
  std::vector<ValidationCase> cases;
  std::optional<Seconds> iteration;
};

ExperimentPrediction predict_experiment(Experiment e, sim::EngineKind engine,
                                        const cost_models::CalibrationSet* calibration) {
  ExperimentPrediction out;
  const Measured& m = *e.measured;
  const std::string group = group_of(e);
  const cost_models::ExecutionModel x = cost_models::resolve_execution(e, calibration);
  auto add = [&](std::string quantity, double published, double predicted) {
    ValidationCase c{e.name, m.source, group, std::move(quantity), published, predicted, m.role};
    c.framework = e.plan.framework;
    c.compute_capability = e.cluster.gpu.compute_capability;
    c.band = x.calibrated.band;
    out.cases.push_back(std::move(c));
  };
  const CommModel comm(e.cluster, x.calibrated);
  if (m.forward_ms || m.backward_ms) {
    // One transformer layer, forward and backward (recompute included), with its TP communication.
    const sim::ComputeCosts compute = sim::compute_costs(e, x);
    const sim::LayerCompute lc = compute.layer(e.model.seq_len, e.model.seq_len, false, 0);
    const Seconds tp = sim::tp_comm_per_layer({e, x, compute, comm}, e.model.seq_len);
    const Seconds recompute_tp = e.plan.recompute == Recompute::full ? tp : Seconds(0);
    if (m.forward_ms) add("forward_ms", *m.forward_ms, in_ms(lc.forward + tp));
    if (m.backward_ms) add("backward_ms", *m.backward_ms, in_ms(lc.backward + tp + lc.recompute + recompute_tp));
    return out;
  }
  e = with_token_slices(e, x);
  const sim::Prediction p = sim::predict({e, x, sim::compute_costs(e, x), comm}, engine);
  out.iteration = p.iteration;
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
  return out;
}

std::vector<Experiment> measured_experiments(const std::string& root) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(root) / "experiments"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Experiment> out;
  for (const auto& f : files) {
    Experiment e = load_experiment(f);
    if (e.measured) out.push_back(std::move(e));
  }
  return out;
}

/// log(predicted / published) of every time-like quantity of a case.
std::vector<double> log_residuals(const ExperimentPrediction& p) {
  std::vector<double> r;
  for (const auto& c : p.cases)
    if (c.timed()) r.push_back(std::log(c.predicted / c.published));
  return r;
}

void summarise(ValidationSummary& s, double error_pct) {
  s.cases += 1;
  s.mape_pct += std::fabs(error_pct);
  s.max_abs_pct = std::max(s.max_abs_pct, std::fabs(error_pct));
}

}  // namespace

double ValidationCase::time_ratio() const {
  if (quantity == "iteration_s" || quantity == "forward_ms" || quantity == "backward_ms") return published / predicted;
  if (quantity == "tokens_per_s") return predicted / published;
  return 0;
}

bool ValidationCase::inside_band() const {
  const double r = time_ratio();
  return band && r > 0 && r >= band->lo * (1 - 1e-9) && r <= band->hi * (1 + 1e-9);
}

std::vector<cost_models::ErrorBand> error_bands_of(const ValidationReport& r) {
  std::vector<cost_models::BandSample> samples;
  for (const auto& c : r.cases)
    if (c.role == MeasuredRole::prediction && c.time_ratio() > 0)
      samples.push_back({c.framework, c.compute_capability, c.time_ratio()});
  return cost_models::error_bands(samples);
}

namespace {

// The fit over experiments already read (validate's leave-one-out refits reuse one reading of the
// library rather than parsing every file again per left-out case).
cost_models::CalibrationSet fit_on(const std::vector<Experiment>& measured, const cost_models::CalibrationSet& declared,
                                   sim::EngineKind engine, const std::string& exclude) {
  std::vector<Experiment> cases;
  for (const Experiment& e : measured)
    if (e.measured->role == MeasuredRole::calibration && e.name != exclude) cases.push_back(e);
  cost_models::CalibrationSet set = declared;
  // The parameters some calibration case pins; the others stay neutral (no evidence for them).
  std::vector<int> active;
  for (int i = 0; i < int(set.parameters.size()); ++i) {
    cost_models::CalibratedParameter& p = set.parameters[i];
    p.value = std::clamp(p.neutral(), p.lo, p.hi);
    p.fit_cases.clear();
    p.fit_rms_pct = 0;
    for (const Experiment& e : cases)
      if (p.scope.matches(e.cluster, e.training, e.plan)) p.fit_cases.push_back(e.name);
    if (!p.fit_cases.empty() && p.hi > p.lo) active.push_back(i);
  }
  // Only the cases some active parameter reaches move with the fit.
  std::vector<const Experiment*> reached;
  for (const Experiment& e : cases)
    for (int i : active)
      if (set.parameters[i].scope.matches(e.cluster, e.training, e.plan)) {
        reached.push_back(&e);
        break;
      }
  // offset[k]: where reached case k's residuals start in the vector (the same for every set).
  std::vector<Eigen::Index> offset(reached.size() + 1, 0);
  auto residuals = [&](const cost_models::CalibrationSet& s) {
    std::vector<double> r;
    for (std::size_t k = 0; k < reached.size(); ++k) {
      for (double x : log_residuals(predict_experiment(*reached[k], engine, &s))) r.push_back(x);
      offset[k + 1] = Eigen::Index(r.size());
    }
    return Eigen::VectorXd(Eigen::Map<Eigen::VectorXd>(r.data(), Eigen::Index(r.size())));
  };
  if (!active.empty() && !reached.empty()) {
    const int n = int(active.size());
    Eigen::VectorXd r = residuals(set);
    double cost = r.squaredNorm();
    // Which cases each active parameter's scope matches: the execution model reads a parameter only
    // where its scope matches (cost_models/calibrated.cpp), so moving one parameter changes those
    // rows and no other. A Jacobian column or a scan point re-predicts only them (the other rows are
    // r's own values, exactly what a re-prediction would give): the same numbers at a fraction of
    // the predictions, which the leave-one-out refits of every validate repeat 21 times.
    std::vector<std::vector<std::size_t>> in_scope(n);
    for (int j = 0; j < n; ++j)
      for (std::size_t k = 0; k < reached.size(); ++k)
        if (set.parameters[active[j]].scope.matches(reached[k]->cluster, reached[k]->training, reached[k]->plan))
          in_scope[j].push_back(k);
    auto residuals_moving = [&](const cost_models::CalibrationSet& s, int j) {
      Eigen::VectorXd out = r;
      for (std::size_t k : in_scope[j]) {
        const std::vector<double> x = log_residuals(predict_experiment(*reached[k], engine, &s));
        for (std::size_t i = 0; i < x.size(); ++i) out(offset[k] + Eigen::Index(i)) = x[i];
      }
      return out;
    };
    // A parameter that enters as max(0, x - t) (a host time a kernel may hide) has no gradient at
    // its neutral value, so the steps below could never move it: such a parameter is first scanned
    // over its range (nine points, the others held) and starts from the best of them.
    for (int j = 0; j < n; ++j) {
      cost_models::CalibratedParameter& p = set.parameters[active[j]];
      const double saved = p.value, h = 1e-3 * (p.hi - p.lo);
      p.value = saved + h <= p.hi ? saved + h : saved - h;
      const bool flat = (residuals_moving(set, j) - r).cwiseAbs().maxCoeff() == 0.0;
      p.value = saved;
      if (!flat) continue;
      double best_value = saved, best_cost = cost;
      for (int k = 0; k <= 8; ++k) {
        p.value = p.lo + (p.hi - p.lo) * k / 8.0;
        const double c = residuals_moving(set, j).squaredNorm();
        if (c < best_cost - 1e-15) best_cost = c, best_value = p.value;
      }
      p.value = best_value;
      if (best_value != saved) {
        r = residuals(set);
        cost = best_cost;
      }
    }
    double lambda = 1e-6;
    for (int iter = 0; iter < 40; ++iter) {
      // Forward differences over a thousandth of each range (backward at the upper bound).
      Eigen::MatrixXd J(r.size(), n);
      for (int j = 0; j < n; ++j) {
        cost_models::CalibratedParameter& p = set.parameters[active[j]];
        const double h = 1e-3 * (p.hi - p.lo);
        const double step = p.value + h <= p.hi ? h : -h;
        const double saved = p.value;
        p.value = saved + step;
        J.col(j) = (residuals_moving(set, j) - r) / step;
        p.value = saved;
      }
      const Eigen::MatrixXd A = J.transpose() * J;
      const Eigen::VectorXd g = J.transpose() * r;
      bool improved = false;
      for (int tries = 0; tries < 12 && !improved; ++tries) {
        Eigen::MatrixXd D = A;
        for (int j = 0; j < n; ++j) D(j, j) += lambda * std::max(A(j, j), 1e-12);
        const Eigen::VectorXd delta = D.ldlt().solve(-g);
        cost_models::CalibrationSet trial = set;
        for (int j = 0; j < n; ++j) {
          cost_models::CalibratedParameter& p = trial.parameters[active[j]];
          p.value = std::clamp(p.value + delta(j), p.lo, p.hi);
        }
        const Eigen::VectorXd rt = residuals(trial);
        if (rt.squaredNorm() < cost - 1e-15) {
          set = std::move(trial);
          r = rt;
          const double gain = cost - rt.squaredNorm();
          cost = rt.squaredNorm();
          lambda = std::max(lambda / 10, 1e-9);
          improved = true;
          if (gain < 1e-12) iter = 40;  // converged
        } else {
          lambda *= 10;
        }
      }
      if (!improved) break;
    }
  }
  // Each parameter's fit residual over the cases in its scope, in percent.
  for (int i : active) {
    cost_models::CalibratedParameter& p = set.parameters[i];
    double sum = 0;
    int count = 0;
    for (const Experiment& e : cases)
      if (p.scope.matches(e.cluster, e.training, e.plan))
        for (double x : log_residuals(predict_experiment(e, engine, &set))) {
          const double pct = 100.0 * (std::exp(x) - 1.0);
          sum += pct * pct;
          ++count;
        }
    p.fit_rms_pct = count ? std::sqrt(sum / count) : 0.0;
    // A parameter pinned by one case fits it exactly: what is left is rounding noise (1e-13 %),
    // which differs between builds and would break the file's byte-for-byte reproduction.
    if (p.fit_rms_pct < 1e-6) p.fit_rms_pct = 0.0;
    // Rounded as the file writes it, so that a value read back is the value fitted.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", p.value);
    p.value = std::clamp(std::strtod(buf, nullptr), p.lo, p.hi);
    std::snprintf(buf, sizeof buf, "%.6g", p.fit_rms_pct);
    p.fit_rms_pct = std::strtod(buf, nullptr);
  }
  return set;
}

}  // namespace

cost_models::CalibrationSet fit_calibration(const std::string& root, const cost_models::CalibrationSet& declared,
                                            sim::EngineKind engine, const std::string& exclude) {
  return fit_on(measured_experiments(root), declared, engine, exclude);
}

ValidationReport validate_all(const std::string& root, sim::EngineKind engine,
                              const std::function<void(long done, long total)>& progress,
                              const cost_models::CalibrationSet* calibration, bool leave_one_out) {
  const cost_models::CalibrationSet& cal = calibration ? *calibration : cost_models::bundled_calibration();
  const std::vector<Experiment> experiments = measured_experiments(root);
  ValidationReport rep;
  rep.refit_engine = cal.fit_engine;
  std::map<std::string, Seconds> predicted_iteration;  // for speedups against a baseline
  std::vector<const Experiment*> with_speedup;
  long done = 0;
  for (const Experiment& e : experiments) {
    if (progress) progress(done++, long(experiments.size()));
    ExperimentPrediction p = predict_experiment(e, engine, &cal);
    if (p.iteration) predicted_iteration[e.name] = *p.iteration;
    if (leave_one_out && e.measured->role == MeasuredRole::calibration && !cal.parameters.empty()) {
      // Refitted as the calibration file was fitted (its engine), then predicted with this one.
      const cost_models::CalibrationSet without = fit_on(experiments, cal, cal.fit_engine, e.name);
      const ExperimentPrediction q = predict_experiment(e, engine, &without);
      for (std::size_t i = 0; i < p.cases.size() && i < q.cases.size(); ++i) p.cases[i].predicted_left_out = q.cases[i].predicted;
    }
    for (auto& c : p.cases) rep.cases.push_back(std::move(c));
    if (e.measured->speedup) with_speedup.push_back(&e);
  }
  if (progress) progress(long(experiments.size()), long(experiments.size()));
  for (const Experiment* e : with_speedup) {
    auto it = predicted_iteration.find(e->measured->baseline);
    if (it == predicted_iteration.end()) continue;
    rep.cases.push_back({e->name, e->measured->source, group_of(*e), "speedup", *e->measured->speedup,
                         it->second / predicted_iteration[e->name], e->measured->role});
  }

  // MAPE over time-like prediction cases (TFLOP/s of the same run would count it twice);
  // calibration cases apart, in-sample and left out.
  std::map<std::string, ValidationSummary> groups;
  ValidationSummary overall{"overall"};
  for (const auto& c : rep.cases) {
    if (!c.timed()) continue;
    if (c.role == MeasuredRole::calibration) {
      summarise(rep.calibration, c.error_pct());
      if (c.predicted_left_out > 0) summarise(rep.leave_one_out, c.left_out_error_pct());
      continue;
    }
    summarise(groups[c.group], c.error_pct());
    summarise(overall, c.error_pct());
    if (c.band && c.time_ratio() > 0) {
      rep.band_cases += 1;
      rep.inside_band += c.inside_band();
    }
  }
  for (auto& [name, s] : groups) {
    s.group = name;
    s.mape_pct /= std::max(1, s.cases);
    rep.groups.push_back(s);
  }
  overall.mape_pct /= std::max(1, overall.cases);
  rep.groups.push_back(overall);
  rep.calibration.mape_pct /= std::max(1, rep.calibration.cases);
  rep.leave_one_out.mape_pct /= std::max(1, rep.leave_one_out.cases);
  return rep;
}

std::string validation_markdown(const ValidationReport& r, sim::EngineKind engine) {
  std::string s = "| experiment | quantity | role | published | predicted | error |\n| --- | --- | --- | --- | --- | --- |\n";
  char buf[512];
  for (const auto& c : r.cases) {
    std::string error;
    std::snprintf(buf, sizeof buf, "%+.1f%%", c.error_pct());
    error = buf;
    if (c.role == MeasuredRole::calibration && c.predicted_left_out > 0) {
      std::snprintf(buf, sizeof buf, " (left out: %+.1f%%)", c.left_out_error_pct());
      error += buf;
    }
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %.4g | %.4g | %s |\n", c.experiment.c_str(), c.quantity.c_str(),
                  to_string(c.role), c.published, c.predicted, error.c_str());
    s += buf;
  }
  s += "\n| source (prediction cases) | cases | MAPE | largest error |\n| --- | --- | --- | --- |\n";
  for (const auto& g : r.groups) {
    std::snprintf(buf, sizeof buf, "| %s | %d | %.1f%% | %.1f%% |\n", g.group.c_str(), g.cases, g.mape_pct, g.max_abs_pct);
    s += buf;
  }
  for (const ValidationSummary* g : {&r.calibration, &r.leave_one_out}) {
    if (g->cases == 0) continue;
    std::snprintf(buf, sizeof buf, "| %s | %d | %.1f%% | %.1f%% |\n", g->group.c_str(), g->cases, g->mape_pct, g->max_abs_pct);
    s += buf;
  }
  if (r.band_cases > 0) {
    std::snprintf(buf, sizeof buf,
                  "\nError bars: %d of %d prediction cases (%.0f%%) fall inside the error bar their prediction "
                  "carries (10th-90th percentile of the residuals of their scope, scenarios/calibration.yaml).\n",
                  r.inside_band, r.band_cases, 100.0 * r.inside_band / r.band_cases);
    s += buf;
  }
  s += std::string("\nEngine: ") + to_string(engine) + ". MAPE counts time-like quantities (iteration time, one layer's "
       "forward/backward, tokens/s, speedup); TFLOP/s rows restate the iteration time under the source's FLOP definition; "
       "peak-memory rows (the most loaded GPU, counted as the source counts it) are listed but not in the MAPE. "
       "Calibration cases (measured.role: calibration) pin the parameters of scenarios/calibration.yaml and are "
       "not in the overall figure; each is also predicted by a fit made without it (leave-one-out; refitted on the " +
       to_string(r.refit_engine) + " engine, as scenarios/calibration.yaml was fitted).\n";
  return s;
}

nlohmann::ordered_json validation_json(const ValidationReport& r, sim::EngineKind engine) {
  nlohmann::ordered_json j;
  j["engine"] = to_string(engine);
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const auto& c : r.cases) {
    cases.push_back({{"experiment", c.experiment}, {"group", c.group}, {"quantity", c.quantity},
                     {"role", to_string(c.role)}, {"published", c.published}, {"predicted", c.predicted},
                     {"error_pct", c.error_pct()}, {"source", c.source}});
    if (c.band && c.time_ratio() > 0) {
      cases.back()["band"] = {c.band->lo, c.band->hi};
      cases.back()["time_ratio"] = c.time_ratio();
      cases.back()["inside_band"] = c.inside_band();
    }
    if (c.role == MeasuredRole::calibration && c.predicted_left_out > 0) {
      cases.back()["predicted_left_out"] = c.predicted_left_out;
      cases.back()["left_out_error_pct"] = c.left_out_error_pct();
    }
  }
  j["cases"] = cases;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& g : r.groups)
    groups.push_back({{"group", g.group}, {"cases", g.cases}, {"mape_pct", g.mape_pct}, {"max_abs_pct", g.max_abs_pct}});
  j["groups"] = groups;
  for (const auto& [key, g] : {std::pair<const char*, const ValidationSummary*>{"calibration", &r.calibration},
                               {"leave_one_out", &r.leave_one_out}})
    j[key] = {{"cases", g->cases}, {"mape_pct", g->mape_pct}, {"max_abs_pct", g->max_abs_pct}};
  j["leave_one_out"]["refit_engine"] = to_string(r.refit_engine);
  j["error_bars"] = {{"cases", r.band_cases}, {"inside", r.inside_band}};
  j["mape_pct"] = r.groups.empty() ? 0.0 : r.groups.back().mape_pct;
  j["max_abs_pct"] = r.groups.empty() ? 0.0 : r.groups.back().max_abs_pct;
  return j;
}

}  // namespace foresight::planner
