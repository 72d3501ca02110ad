// foresight simulate EXPERIMENT: one iteration simulated with the analytic or the SimGrid engine;
// time, throughput, MFU/HFU, the breakdown of the critical stage and memory per GPU.
#include <CLI/CLI.hpp>

#include "apps/cli/cli.hpp"
#include "apps/cli/progress.hpp"
#include "core/report.hpp"
#include "core/scenario.hpp"
#include "planner/search.hpp"
#include "sim/costing.hpp"

namespace foresight::cli {

namespace {
/// " (K token slices: a+b+...)" for TeraPipe plans, else "".
std::string token_slices_text(const PlanSpec& p) {
  if (p.token_slices.empty()) return "";
  std::string s = " (" + std::to_string(p.token_slices.size()) + " token slices: ";
  for (std::size_t i = 0; i < p.token_slices.size(); ++i) s += (i ? "+" : "") + std::to_string(p.token_slices[i]);
  return s + ")";
}

/// "a, b (scenarios/calibration.yaml)", or "none" when no calibrated parameter's scope holds.
std::string calibrated_text(const std::vector<std::string>& names) {
  if (names.empty()) return "none (no calibrated parameter's scope holds)";
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + " (scenarios/calibration.yaml)";
}

/// The ops of LayerOpTimes in the order a layer runs them, with the names --ops prints.
struct OpField {
  const char* name;
  const char* key;
  Seconds cost_models::LayerOpTimes::*field;
};
constexpr OpField kOps[] = {
    {"norms (and weight casts)", "norms", &cost_models::LayerOpTimes::layernorms},
    {"QKV GEMM", "qkv", &cost_models::LayerOpTimes::qkv},
    {"attention core", "attention_core", &cost_models::LayerOpTimes::attention_core},
    {"projection GEMM", "projection", &cost_models::LayerOpTimes::projection},
    {"dropout, residual, layout", "residual", &cost_models::LayerOpTimes::dropout_residual},
    {"MoE router", "moe_router", &cost_models::LayerOpTimes::moe_router},
    {"MoE permutes (and expert biases)", "moe_permute", &cost_models::LayerOpTimes::moe_permute},
    {"FC1 GEMM", "fc1", &cost_models::LayerOpTimes::fc1},
    {"activation (and bias grads)", "activation", &cost_models::LayerOpTimes::gelu},
    {"FC2 GEMM", "fc2", &cost_models::LayerOpTimes::fc2},
    {"FP8 casts", "fp8_casts", &cost_models::LayerOpTimes::fp8_casts},
};

std::string kind_text(const sim::LayerKindOps& k) {
  std::string s = k.moe ? "MoE" : "dense";
  if (k.window > 0) s += ", window " + std::to_string(k.window);
  return s;
}

std::string ms_text(Seconds t) { return format_number(in_ms(t), 3); }

/// `--ops`: each kind of layer op by op, and the embedding and LM head, for one micro-batch.
void print_ops(std::ostream& out, const Experiment& e, const sim::OpsBreakdown& ops) {
  out << "\nCompute of one micro-batch on one GPU, op by op (ms; micro-batch " << e.plan.micro_batch << " x "
      << (ops.kinds.empty() ? 0 : ops.kinds.front().tokens) << " tokens, attention context "
      << (ops.kinds.empty() ? 0 : ops.kinds.front().context) << "; tp " << e.plan.tp
      << (e.plan.sequence_parallel ? " with sequence parallelism" : "") << "; communication excluded)\n";
  auto row = [&](const std::string& name, const std::string& f, const std::string& b) {
    std::string line = "    " + name;
    line.resize(std::max<std::size_t>(line.size() + 1, 36), ' ');
    out << line << std::string(f.size() < 10 ? 10 - f.size() : 0, ' ') << f
        << std::string(b.size() < 12 ? 12 - b.size() : 1, ' ') << b << "\n";
  };
  for (const auto& k : ops.kinds) {
    out << "  " << kind_text(k) << " layers (" << k.layers << " of " << e.model.layers << ")\n";
    row("op", "forward", "backward");
    for (const auto& op : kOps) {
      const Seconds f = k.times.forward_ops.*op.field, b = k.times.backward_ops.*op.field;
      if (f.v == 0 && b.v == 0) continue;
      row(op.name, ms_text(f), ms_text(b));
    }
    row("layer", ms_text(k.times.forward()), ms_text(k.times.backward()));
    if (e.plan.recompute != Recompute::none || e.plan.recompute_modules.any()) {
      std::string what = to_string(e.plan.recompute);
      if (e.plan.recompute_modules.any()) what += " + " + recompute_module_names(e.plan.recompute_modules, ", ");
      row("recompute (" + what + ")", ms_text(k.recompute), "");
    }
  }
  out << "  outside the layers\n";
  row("embedding", ms_text(ops.edges.embedding_forward), ms_text(ops.edges.embedding_backward));
  row("final norm, LM head, loss", ms_text(ops.edges.head_forward), ms_text(ops.edges.head_backward));
  if (e.model.mtp_layers > 0)
    row("MTP module x" + std::to_string(e.model.mtp_layers) + " (+ a last-kind layer each)", ms_text(ops.edges.mtp_forward),
        ms_text(ops.edges.mtp_backward));
}

nlohmann::ordered_json ops_json(const sim::OpsBreakdown& ops) {
  nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
  for (const auto& k : ops.kinds) {
    nlohmann::ordered_json fwd, bwd;
    for (const auto& op : kOps) {
      fwd[op.key] = in_ms(k.times.forward_ops.*op.field);
      bwd[op.key] = in_ms(k.times.backward_ops.*op.field);
    }
    kinds.push_back({{"kind", kind_text(k)},
                     {"layers", k.layers},
                     {"tokens", k.tokens},
                     {"context", k.context},
                     {"forward_ms", fwd},
                     {"backward_ms", bwd},
                     {"layer_forward_ms", in_ms(k.times.forward())},
                     {"layer_backward_ms", in_ms(k.times.backward())},
                     {"recompute_ms", in_ms(k.recompute)}});
  }
  return {{"layer_kinds", kinds},
          {"edges_ms",
           {{"embedding_forward", in_ms(ops.edges.embedding_forward)},
            {"embedding_backward", in_ms(ops.edges.embedding_backward)},
            {"head_forward", in_ms(ops.edges.head_forward)},
            {"head_backward", in_ms(ops.edges.head_backward)},
            {"mtp_module_forward", in_ms(ops.edges.mtp_forward)},
            {"mtp_module_backward", in_ms(ops.edges.mtp_backward)}}}};
}
}  // namespace

Command simulate_command() {
  struct Opts {
    std::string experiment, engine = "analytic", trace;
    bool json = false, check = false, ops = false;
  };
  return Command{
      "simulate", "Simulate one iteration of an experiment and print time, throughput, breakdown, memory",
      [](CLI::App& sub) {
        auto o = std::make_shared<Opts>();
        sub.add_option("experiment", o->experiment, "Experiment file or bundled name (e.g. mt-nlg-530b-selene-280)")
            ->required();
        sub.add_option("--engine", o->engine, "analytic (fast, no contention) or simgrid (flows contend on NICs)")
            ->check(CLI::IsMember({"analytic", "simgrid"}));
        sub.add_flag("--json", o->json, "Print machine-readable JSON");
        sub.add_option("--trace", o->trace, "Write a Chrome/Perfetto trace (JSON) of the iteration to this file");
        sub.add_flag("--check", o->check, "Fail (exit 1) when a sanity check of the result breaks");
        sub.add_flag("--ops", o->ops,
                     "Also print each kind of layer op by op (forward, backward, recompute; one micro-batch on "
                     "one GPU, ms) and the embedding and LM head; with --json, an \"ops\" object");
        sub.footer("Exit codes: 0 the plan runs and fits; 1 a sanity check broke (with --check) or an internal error; "
                   "2 bad input (file, field, value and rule named); 3 the plan does not fit in device memory, or what "
                   "it offloads does not fit in its nodes' host memory (host.memory_GB; the most loaded stage or the "
                   "host's need and the shortfall are printed).");
        return [o](std::ostream& out, std::ostream& err) {
          // TeraPipe experiments that leave token_slices empty get the planner's optimal slicing,
          // exactly as `foresight validate` runs them.
          const Experiment loaded = load_experiment(resolve_scenario("experiments", o->experiment));
          // How the plan executes, resolved once: framework, attention, precision, profile.
          const cost_models::ExecutionModel x = cost_models::resolve_execution(loaded);
          const Experiment e = planner::with_token_slices(loaded, x);
          const auto engine = *parse_enum<sim::EngineKind>(o->engine);
          const sim::ComputeCosts compute = sim::compute_costs(e, x);
          const CommModel comm(e.cluster, x.calibrated);
          nlohmann::json trace;
          // A SimGrid run of a large plan takes seconds to minutes: say when it starts and ends.
          std::optional<Progress> run;
          if (engine == sim::EngineKind::simgrid)
            run.emplace(err, progress_mode(false), "simulate: SimGrid engine", 1, "iteration");
          const sim::Prediction p = sim::predict({e, x, compute, comm}, engine, o->trace.empty() ? nullptr : &trace);
          if (run) run->finish();
          const auto broken = sim::check_prediction(p);
          if (!o->trace.empty()) write_file_atomically(o->trace, trace.dump() + "\n", "--trace");
          const auto sections = sim::prediction_sections(p);
          if (o->json) {
            nlohmann::ordered_json j{{"experiment", e.name}, {"engine", o->engine}};
            j.update(to_json(sections));
            j["critical_stage"] = p.critical_stage;
            j["most_loaded_stage"] = p.most_loaded_stage;
            nlohmann::ordered_json stages = nlohmann::ordered_json::array();
            for (const auto& m : p.memory_per_stage)
              stages.push_back(sim::memory_json(m));
            j["memory_per_stage_GB"] = stages;
            j["framework"] = p.framework;
            j["attention"] = p.attention;
            j["profile"] = p.profile;
            j["in_node_collectives"] = p.collectives;
            j["calibrated_parameters"] = p.calibrated_parameters;
            j["slowest_device"] = {{"gpus", p.slowest.devices}, {"device_spread_cv", p.slowest.cv},
                                   {"compute_factor", p.slowest.factor}, {"sustained_clock_scale", p.slowest.sustained}};
            if (p.band) {
              j["iteration_s_range"] = {in_s(p.iteration_low()), in_s(p.iteration_high())};
              j["iteration_s_range_basis"] = {{"cases", p.band->cases}, {"scope", p.band->describe()},
                                              {"percentiles", {10, 90}}};
            } else {
              j["iteration_s_range"] = nullptr;
            }
            j["fits"] = p.fits();
            j["memory_shortfall_GB"] = in_GB(p.memory_shortfall());
            if (p.host_memory_needed > Bytes(0)) j["host_memory_shortfall_GB"] = in_GB(p.host_memory_shortfall());
            j["checks_failed"] = broken;
            if (o->ops) j["ops"] = ops_json(sim::ops_breakdown(e, x));
            out << j.dump(2) << "\n";
          } else {
            out << "Experiment " << e.name << " on " << e.gpus << " GPUs (" << e.cluster.gpu.name << "), engine "
                << o->engine << "\n  plan: tp " << e.plan.tp << (e.plan.cp > 1 ? " x cp " + std::to_string(e.plan.cp) + " (" + to_string(e.plan.cp_comm) + ")" : "")
                << " x pp " << e.plan.pp << " x dp " << e.plan.dp
                << (e.plan.ep > 1 ? ", ep " + std::to_string(e.plan.ep) : "")
                << (e.plan.etp() != e.plan.tp ? " (expert tp " + std::to_string(e.plan.etp()) + ")" : "")
                << ", micro-batch " << e.plan.micro_batch << ", " << to_string(e.plan.schedule)
                << (e.plan.virtual_stages > 1 ? " v" + std::to_string(e.plan.virtual_stages) : "")
                << token_slices_text(e.plan) << ", recompute "
                << recompute_text(e.plan) << ", zero " << e.plan.zero << "\n  in full: " << describe_plan(e.plan)
                << "\n  executed as " << p.framework
                << ", " << p.attention << " attention\n  calibration: " << p.profile
                << "\n  collectives in a node: " << p.collectives << "\n  calibrated: "
                << calibrated_text(p.calibrated_parameters) << "\n  pace: "
                << p.slowest.describe() << "\n\n"
                << format_console(sections) << "Iteration time range: " << p.range_text() << "\n";
            out << "Memory per GPU by stage (GB):";
            for (std::size_t s = 0; s < p.memory_per_stage.size(); ++s) {
              if (s % 10 == 0) out << "\n ";
              out << " " << format_number(in_GB(p.memory_per_stage[s].total()), 1);
            }
            out << "\n";
            if (e.measured && e.measured->iteration_s)
              out << "Published: " << *e.measured->iteration_s << " s per iteration (" << e.measured->source << ")\n";
            if (o->ops) print_ops(out, e, sim::ops_breakdown(e, x));
            if (!p.fits())
              out << "DOES NOT FIT in " << (p.memory_shortfall() > Bytes(0) ? "device" : "host") << " memory: "
                  << p.memory_verdict() << "\n";
            for (const auto& b : broken) out << "CHECK FAILED: " << b << "\n";
          }
          // A plan that does not fit cannot run, whatever else holds: exit 3 (documented in --help).
          if (!p.fits()) return kExitDoesNotFit;
          return (o->check && !broken.empty()) ? kExitInternal : kExitOk;
        };
      }};
}

}  // namespace foresight::cli
