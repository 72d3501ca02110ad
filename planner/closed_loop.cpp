#include "planner/closed_loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "cost_models/host_profile.hpp"
#include "sim/costing.hpp"

namespace foresight::planner {

ClusterSpec local_cpu_cluster(const std::string& profile_path, int ranks) {
  const cost_models::HostProfile& h = *cost_models::cached_host_profile(profile_path);
  ClusterSpec c;
  c.name = "local-" + h.backend;
  // Every rank sits on node 0. The cost models also price each pipeline pair as if it crossed
  // nodes (the engines then take the in-node cost), so a second node exists for that arithmetic;
  // its network is the host's own MPI figures.
  c.nodes = 2;
  // One node holds every rank (and, for the layout arithmetic, room for more: a group strided
  // across the plan must never look like it leaves the host).
  c.gpus_per_node = std::max(64, ranks);
  GpuSpec& g = c.gpu;
  g.name = h.backend + ":" + h.hostname;
  g.host_profile = profile_path;
  g.sms = h.cores;
  const double pages = double(::sysconf(_SC_PHYS_PAGES)), page = double(::sysconf(_SC_PAGESIZE));
  g.hbm = Bytes(pages > 0 && page > 0 ? pages * page : 8e9);
  // A memcpy moves each byte twice (read + write); the profile counts both.
  g.hbm_bandwidth = BytesPerSecond(std::max(1.0, h.copy_GBps) * 1e9 / 2);
  const FlopsPerSecond best(std::max(1.0, h.best_gemm_flops()));
  g.peak_fp32 = g.peak_tf32 = g.peak_bf16 = g.peak_fp16 = best;
  g.kernels.gemm_efficiency = {1.0, "the profile's fastest GEMM is the peak"};
  g.kernels.memory_efficiency = {1.0, "the profile's copy bandwidth is the peak"};
  g.kernels.launch_overhead_us = {0.0, "ops are function calls; their fixed costs are in the profile"};
  g.source = profile_path;
  // Ranks exchange through MPI's shared memory: the point-to-point fit as the "link".
  c.intra.kind = IntraFabric::pcie;
  c.intra.bandwidth = BytesPerSecond(25e9);
  c.intra.latency = Seconds(1e-6);
  for (const auto& m : h.mpi)
    if (const auto& f = m.fits[std::size_t(Collective::send_recv)]) {
      if (f->per_unit_s > 0) c.intra.bandwidth = BytesPerSecond(1.0 / f->per_unit_s);
      c.intra.latency = Seconds(f->fixed_s);
      break;
    }
  c.inter.nics_per_node = 1;
  c.inter.nic_bandwidth = c.intra.bandwidth;
  c.inter.latency = c.intra.latency;
  // Activation offload goes through the backend's copy_to_host / copy_from_host (trainer/offload.cpp),
  // which the profile times per element of the plans' fp32 activations: a memcpy with a fresh host
  // vector on the CPU backend, a pageable cudaMemcpy on a device backend (its "PCIe").
  // The model prices offload by bytes alone, so each copy's fixed cost is spread over a typical
  // offloaded tensor of these plans (2^16 elements: tokens x hidden to tokens x ffn).
  const auto per_element = [&](const char* op) {
    const cost_models::LinearFit& f = h.ops.at(op);
    return f.per_unit_s + f.fixed_s / 65536.0;
  };
  c.host.pcie_bandwidth = BytesPerSecond(4.0 / (0.5 * (per_element("copy_to_host") + per_element("copy_from_host"))));
  c.host.memory = g.hbm;
  c.source = profile_path;
  return c;
}

ModelSpec closed_loop_model(bool moe) {
  ModelSpec m{.name = moe ? "loop-gpt-moe" : "loop-gpt", .layers = 4, .hidden = 64, .heads = 4, .seq_len = 64,
              .vocab = 256, .ffn_hidden = 256, .kv_heads = 4, .moe = std::nullopt};
  if (moe) m.moe = MoeSpec{.experts = 4, .top_k = 2, .capacity_factor = 1.25, .every = 2};
  return m;
}

std::vector<LoopCase> closed_loop_plans(int max_ranks, int steps) {
  struct Variant {
    const char* name;
    PlanSpec plan;
    bool moe = false;
  };
  auto plan = [](int tp, int pp, int dp) {
    PlanSpec p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.micro_batch = 2;
    p.framework = Framework::foresight_train;
    return p;
  };
  std::vector<Variant> v;
  v.push_back({"baseline", plan(1, 1, 1)});
  v.push_back({"full-recompute", plan(1, 1, 1)});
  v.back().plan.recompute = Recompute::full;
  v.push_back({"selective-recompute", plan(1, 1, 1)});
  v.back().plan.recompute = Recompute::selective;
  v.push_back({"offload-0.5", plan(1, 1, 1)});
  v.back().plan.offload.activations = 0.5;
  v.push_back({"moe", plan(1, 1, 1), true});
  v.push_back({"terapipe-slices", plan(1, 1, 1)});
  v.back().plan.schedule = Schedule::terapipe;
  v.back().plan.token_slices = {32, 32};
  if (max_ranks >= 2) {
    v.push_back({"tp2", plan(2, 1, 1)});
    v.push_back({"tp2-sp", plan(2, 1, 1)});
    v.back().plan.sequence_parallel = true;
    v.push_back({"pp2-1f1b", plan(1, 2, 1)});
    v.push_back({"pp2-gpipe", plan(1, 2, 1)});
    v.back().plan.schedule = Schedule::gpipe;
    v.push_back({"pp2-interleaved", plan(1, 2, 1)});
    v.back().plan.schedule = Schedule::interleaved;
    v.back().plan.virtual_stages = 2;
    v.push_back({"pp2-terapipe", plan(1, 2, 1)});
    v.back().plan.schedule = Schedule::terapipe;
    v.back().plan.token_slices = {32, 32};
    v.push_back({"dp2", plan(1, 1, 2)});
    v.push_back({"dp2-zero1", plan(1, 1, 2)});
    v.back().plan.zero = 1;
    v.push_back({"moe-dp2-ep2", plan(1, 1, 2), true});
    v.back().plan.ep = 2;
  }
  if (max_ranks >= 4) {
    v.push_back({"tp2-pp2", plan(2, 2, 1)});
    v.push_back({"pp2-dp2", plan(1, 2, 2)});
    v.push_back({"tp2-dp2-sp", plan(2, 1, 2)});
    v.back().plan.sequence_parallel = true;
  }
  std::vector<LoopCase> out;
  for (Variant& x : v) {
    ExecutablePlan p{.model = closed_loop_model(x.moe),
                     .cluster = "local",
                     .gpus_per_node = x.plan.gpus(),
                     .training = {.global_batch = 8, .dtype = Dtype::fp32, .optimizer = Optimizer::adam},
                     .plan = x.plan,
                     .gpus = x.plan.gpus(),
                     .data = "synthetic",
                     .steps = steps,
                     .checkpoint_dir = "checkpoints",
                     .prediction = std::nullopt};
    out.push_back(LoopCase{x.name, std::move(p)});
  }
  return out;
}

LoopCase context_calibration_case(int steps) {
  LoopCase c = closed_loop_plans(1, steps).front();  // the baseline
  c.name = "context-calibration";
  c.plan.plan.micro_batch = 1;
  return c;
}

sim::Prediction predict_local(LoopCase& c, const std::string& profile_path) {
  Experiment e;
  e.name = "local-" + c.name;
  e.file = "<validate --local>";
  e.model = c.plan.model;
  e.cluster = local_cpu_cluster(profile_path, c.plan.gpus);
  e.training = c.plan.training;
  e.plan = c.plan.plan;
  e.gpus = c.plan.gpus;
  if (const auto v = check_plan(e.model, e.cluster, e.training, e.plan, e.gpus))
    throw InternalError("closed-loop plan " + c.name + " breaks a plan rule: " + v->field + " = " + v->value + " " + v->rule);
  const sim::Prediction p = sim::predict(e, sim::EngineKind::analytic);
  c.plan.cluster = e.cluster.name;
  c.plan.prediction = PlanPrediction{.iteration_s = in_s(p.iteration),
                                     .tokens_per_s = p.tokens_per_s,
                                     .tflops_per_gpu = p.tflops_per_gpu,
                                     .memory_GB = in_GB(p.memory_per_stage[std::size_t(p.most_loaded_stage)].total()),
                                     .engine = "analytic (host profile " + profile_path + ")"};
  return p;
}

namespace {
double median_of(std::vector<double> v);
}

ProbeReading concurrent_probe_reading(const std::vector<double>& per_rank_s, int cores, double tolerance) {
  if (per_rank_s.empty()) return {};
  const auto [lo, hi] = std::minmax_element(per_rank_s.begin(), per_rank_s.end());
  if (int(per_rank_s.size()) <= cores && *lo > 0 && *hi > *lo * (1 + tolerance)) return {*lo, true};
  double sum = 0;
  for (double s : per_rank_s) sum += s;
  return {sum / double(per_rank_s.size()), false};
}

double concurrent_rank_slowdown(std::vector<double> paired_ratios, const std::vector<double>& alone_s,
                                const std::vector<double>& concurrent_s, int ranks, int cores, double other_reading) {
  if (ranks > cores) {
    if (paired_ratios.empty()) return 1.0;
    std::sort(paired_ratios.begin(), paired_ratios.end());
    return paired_ratios[paired_ratios.size() / 2];
  }
  // The quieter of the readings there are (none: 1).
  double s = other_reading > 0 ? other_reading : 0;
  if (!alone_s.empty() && !concurrent_s.empty()) {
    const double alone = *std::min_element(alone_s.begin(), alone_s.end());
    const double concurrent = *std::min_element(concurrent_s.begin(), concurrent_s.end());
    if (alone > 0) s = s > 0 ? std::min(s, concurrent / alone) : concurrent / alone;
  }
  return std::max(1.0, s);
}

int steadiest_pass(const std::function<double(int)>& pass, double most_drift, int most_passes) {
  FORESIGHT_CHECK(most_passes >= 1) << most_passes << " passes";
  int best = 0;
  double least = 0;
  for (int k = 0; k < most_passes; ++k) {
    const double d = pass(k);
    if (k == 0 || d < least) {
      best = k;
      least = d;
    }
    if (least <= most_drift) break;
  }
  return best;
}

OpTimingDrift op_timing_drift(const std::vector<double>& before_s, const std::vector<double>& after_s,
                              double inside_reference_s) {
  FORESIGHT_CHECK(!before_s.empty() && !after_s.empty()) << before_s.size() << " readings before, " << after_s.size()
                                                         << " after";
  const double quickest = std::min(*std::min_element(before_s.begin(), before_s.end()),
                                   *std::min_element(after_s.begin(), after_s.end()));
  FORESIGHT_CHECK(quickest > 0 && inside_reference_s > 0) << "probe readings " << quickest << " s around, "
                                                          << inside_reference_s << " s inside";
  return {.apart = std::abs(median_of(after_s) / median_of(before_s) - 1.0),
          .inside = std::max(0.0, inside_reference_s / quickest - 1.0)};
}

double others_load_slowdown(double others_cpu_s, double wall_s, int cores, int ranks) {
  if (wall_s <= 0) return 1.0;
  const double others_cores = std::max(0.0, others_cpu_s) / wall_s;
  const double spare = std::max(0.0, double(cores) - double(ranks));
  return 1.0 + std::max(0.0, others_cores - spare) / double(std::max(1, ranks));
}

bool quickest_run_corroborated(const std::vector<double>& run_steps_s, double tolerance) {
  std::vector<double> ran;
  for (double s : run_steps_s)
    if (s > 0) ran.push_back(s);
  if (ran.size() < 2) return false;
  std::partial_sort(ran.begin(), ran.begin() + 2, ran.end());
  return ran[1] <= ran[0] * (1 + tolerance);
}

LoopMeasurement measurement_from_summaries(const std::vector<nlohmann::json>& summaries,
                                           const std::vector<double>& run_slowdown, double tolerance) {
  FORESIGHT_CHECK(run_slowdown.empty() || run_slowdown.size() == summaries.size())
      << summaries.size() << " runs, " << run_slowdown.size() << " slowdown readings";
  LoopMeasurement m;
  // (run's median step, steps it is over, slowdown around it) of every run that measured steps.
  struct Run {
    double step_s;
    int steps;
    double slowdown;
  };
  std::vector<Run> runs;
  for (std::size_t r = 0; r < summaries.size(); ++r) {
    const nlohmann::json& s = summaries[r];
    const std::string run = "run " + std::to_string(r + 1) + ": ";
    m.run_steps_s.push_back(0.0);
    if (!s.is_object() || !s.contains("steps") || !s["steps"].is_array()) {
      m.error += run + "no summary; ";
      continue;
    }
    if (s.contains("status") && s["status"] != "ok") m.error += run + "status " + s["status"].dump() + "; ";
    const nlohmann::json& st = s["steps"];
    std::vector<double> steps;
    for (std::size_t i = 1; i < st.size(); ++i)  // the first step pays for warm-up
      if (st[i].contains("step_s") && st[i]["step_s"].is_number()) steps.push_back(st[i]["step_s"].get<double>());
    if (s.contains("measured") && s["measured"].is_object() && s["measured"].contains("memory_GB") &&
        s["measured"]["memory_GB"].is_number())
      m.memory_GB = std::max(m.memory_GB.value_or(0.0), s["measured"]["memory_GB"].get<double>());
    if (steps.empty()) continue;
    const double slow = run_slowdown.empty() ? 1.0 : run_slowdown[r];
    runs.push_back({median_of(steps), int(steps.size()), slow});
    m.run_steps_s.back() = runs.back().step_s;
    if (slow <= 1.0 + tolerance)
      ++m.quiet_runs;
    else
      ++m.disturbed_runs;
  }
  const Run* chosen = nullptr;
  for (const Run& r : runs)
    if (!chosen || r.step_s < chosen->step_s) chosen = &r;
  if (chosen) {
    m.step_s = chosen->step_s;
    m.steps = chosen->steps;
    m.host_slowdown = chosen->slowdown;
  }
  if (!m.step_s && m.error.empty()) m.error = "no measured steps";
  return m;
}

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::ordered_json number_or_null(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json closed_loop_json(const std::vector<LoopCase>& cases, const std::vector<sim::Prediction>& predicted,
                                        const std::vector<LoopMeasurement>& measured, const std::string& backend,
                                        const std::string& profile_path) {
  FORESIGHT_CHECK(cases.size() == predicted.size() && cases.size() == measured.size())
      << cases.size() << " cases, " << predicted.size() << " predictions, " << measured.size() << " measurements";
  nlohmann::ordered_json j;
  j["backend"] = backend;
  const cost_models::HostProfile& h = *cost_models::cached_host_profile(profile_path);
  j["host"] = {{"hostname", h.hostname}, {"cpu_model", h.cpu_model}, {"cores", h.cores}, {"kernels", h.kernels}};
  j["profile"] = profile_path;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<double> step_errors, mem_errors;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const sim::Prediction& p = predicted[i];
    const LoopMeasurement& m = measured[i];
    const double ps = in_s(p.iteration);
    const double pm = in_GB(p.memory_per_stage[std::size_t(p.most_loaded_stage)].total());
    nlohmann::ordered_json r;
    r["plan"] = cases[i].name;
    r["ranks"] = cases[i].plan.gpus;
    r["predicted_step_s"] = ps;
    r["measured_step_s"] = number_or_null(m.step_s);
    r["measured_steps"] = m.steps;
    r["run_steps_s"] = m.run_steps_s;
    r["quiet_runs"] = m.quiet_runs;
    r["disturbed_runs"] = m.disturbed_runs;
    r["host_slowdown"] = m.host_slowdown;
    std::optional<double> err, merr;
    if (m.step_s && ps > 0) err = 100.0 * (*m.step_s / ps - 1.0);
    if (m.memory_GB && pm > 0) merr = 100.0 * (*m.memory_GB / pm - 1.0);
    r["error_pct"] = number_or_null(err);
    r["predicted_mem_GB"] = pm;
    r["measured_mem_GB"] = number_or_null(m.memory_GB);
    r["mem_error_pct"] = number_or_null(merr);
    if (!m.error.empty()) r["run_error"] = m.error;
    const sim::TimeBreakdown& b = p.breakdown;
    r["breakdown_s"] = {{"compute", in_s(b.compute)},         {"recompute", in_s(b.recompute)},
                        {"host_wait", in_s(b.host)},
                        {"tp_comm", in_s(b.tp_comm)},         {"ep_comm", in_s(b.ep_comm)},
                        {"pp_comm_exposed", in_s(b.pp_comm_exposed)}, {"dp_comm_exposed", in_s(b.dp_comm_exposed)},
                        {"optimizer", in_s(b.optimizer)},     {"offload_stall", in_s(b.offload_stall)},
                        {"bubble", in_s(b.bubble)}};
    rows.push_back(r);
    if (err) step_errors.push_back(std::abs(*err));
    if (merr) mem_errors.push_back(std::abs(*merr));
  }
  j["cases"] = rows;
  j["measured_cases"] = step_errors.size();
  j["median_abs_pct"] = median_of(step_errors);
  j["max_abs_pct"] = step_errors.empty() ? 0.0 : *std::max_element(step_errors.begin(), step_errors.end());
  j["mem_median_abs_pct"] = median_of(mem_errors);
  j["mem_max_abs_pct"] = mem_errors.empty() ? 0.0 : *std::max_element(mem_errors.begin(), mem_errors.end());
  return j;
}

std::string closed_loop_markdown(const nlohmann::ordered_json& r, const std::string& command) {
  auto fmt = [](const nlohmann::ordered_json& v, const char* f) {
    if (!v.is_number()) return std::string("n/a");
    char b[64];
    std::snprintf(b, sizeof b, f, v.get<double>());
    return std::string(b);
  };
  std::string s = "# Closed loop: predicted vs measured on this machine\n\nGenerated by `" + command + "`.\n\n";
  s += "Backend " + r["backend"].get<std::string>() + " on " + r["host"]["hostname"].get<std::string>() + " (" +
       r["host"]["cpu_model"].get<std::string>() + ", " + std::to_string(r["host"]["cores"].get<int>()) +
       " cores), profile `" + r["profile"].get<std::string>() + "`. Each plan was predicted by the analytic engine " +
       "from the host profile before the trainer ran it; error = measured / predicted - 1. Measured step: each run's "
       "median step (its first, warm-up step left out), the smallest over the plan's runs (rounds): a shared "
       "machine's slow spells lengthen runs, often unseen by the readings around them, and never shorten one. Host "
       "speed: for that run, the largest ratio, around or during it, of the host probe's "
       "time to its time when the ops were calibrated, or of the load other processes put on the run's cores to "
       "none (1.00: as calibrated; a busy round: no attempt found the host within tolerance).\n\n";
  s += "| plan | ranks | predicted step (s) | measured step (s) | error | predicted peak (MB/rank) | measured peak "
       "(MB/rank) | memory error | host speed |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& c : r["cases"]) {
    s += "| " + c["plan"].get<std::string>() + " | " + std::to_string(c["ranks"].get<int>()) + " | " +
         fmt(c["predicted_step_s"], "%.4f") + " | " + fmt(c["measured_step_s"], "%.4f") + " | " +
         fmt(c["error_pct"], "%+.1f%%") + " | " +
         fmt(nlohmann::ordered_json(c["predicted_mem_GB"].get<double>() * 1e3), "%.2f") + " | " +
         (c["measured_mem_GB"].is_number() ? fmt(nlohmann::ordered_json(c["measured_mem_GB"].get<double>() * 1e3), "%.2f")
                                           : std::string("n/a")) +
         " | " + fmt(c["mem_error_pct"], "%+.1f%%") + " | " + fmt(c["host_slowdown"], "%.2f") +
         (c["disturbed_runs"].get<int>() == 0 ? std::string()
          : c["quiet_runs"].get<int>() == 0
              ? std::string(" (every round busy)")
              : " (" + std::to_string(c["disturbed_runs"].get<int>()) + " busy round" +
                    (c["disturbed_runs"].get<int>() > 1 ? "s" : "") + ")") +
         " |\n";
  }
  s += "\nStep time: median |error| " + fmt(r["median_abs_pct"], "%.1f%%") + ", largest " +
       fmt(r["max_abs_pct"], "%.1f%%") + " over " + std::to_string(r["measured_cases"].get<int>()) +
       " plans. Peak memory per rank: median |error| " + fmt(r["mem_median_abs_pct"], "%.1f%%") + ", largest " +
       fmt(r["mem_max_abs_pct"], "%.1f%%") + ".\n";
  if (r.contains("step_context"))
    s += "\nStep context: the predictions take the ops at " + fmt(r["step_context"], "%.3f") +
         "x their isolated timings, as a calibration plan none of these plans is (context-calibration: one rank, "
         "micro-batch 1) ran them inside its steps (`foresight calibrate --backend cpu`).\n";
  if (r.contains("host_probe_vs_calibration")) {
    const double v = r["host_probe_vs_calibration"].get<double>();
    s += "\nHost speed: around the kept runs the probe took " + fmt(v, "%.2f") +
         "x its time at calibration (median over runs; under 1: the host was quicker than when the ops were "
         "timed, and the predictions read slow by about as much" +
         std::string(v < 0.9 ? ": this calibration was made in a slow spell" : "") + ").\n";
  }
  return s;
}

}  // namespace foresight::planner
