// foresight simulate EXPERIMENT: one iteration simulated with the analytic or the SimGrid engine;
// time, throughput, MFU/HFU, the breakdown of the critical stage and memory per GPU.
#include <CLI/CLI.hpp>

#include "apps/cli/cli.hpp"
#include "apps/cli/progress.hpp"
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
}  // namespace

Command simulate_command() {
  struct Opts {
    std::string experiment, engine = "analytic", trace;
    bool json = false, check = false;
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
        sub.footer("Exit codes: 0 the plan runs and fits; 1 a sanity check broke (with --check) or an internal error; "
                   "2 bad input (file, field, value and rule named); 3 the plan does not fit in device memory "
                   "(the most loaded stage and the shortfall are printed).");
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
            j["calibrated_parameters"] = p.calibrated_parameters;
            j["slowest_device"] = {{"gpus", p.slowest.devices}, {"device_spread_cv", p.slowest.cv},
                                   {"compute_factor", p.slowest.factor}};
            if (p.band) {
              j["iteration_s_range"] = {in_s(p.iteration_low()), in_s(p.iteration_high())};
              j["iteration_s_range_basis"] = {{"cases", p.band->cases}, {"scope", p.band->describe()},
                                              {"percentiles", {10, 90}}};
            } else {
              j["iteration_s_range"] = nullptr;
            }
            j["fits"] = p.fits();
            j["memory_shortfall_GB"] = in_GB(p.memory_shortfall());
            j["checks_failed"] = broken;
            out << j.dump(2) << "\n";
          } else {
            out << "Experiment " << e.name << " on " << e.gpus << " GPUs (" << e.cluster.gpu.name << "), engine "
                << o->engine << "\n  plan: tp " << e.plan.tp << (e.plan.cp > 1 ? " x cp " + std::to_string(e.plan.cp) : "")
                << " x pp " << e.plan.pp << " x dp " << e.plan.dp
                << (e.plan.ep > 1 ? ", ep " + std::to_string(e.plan.ep) : "")
                << (e.plan.etp() != e.plan.tp ? " (expert tp " + std::to_string(e.plan.etp()) + ")" : "")
                << ", micro-batch " << e.plan.micro_batch << ", " << to_string(e.plan.schedule)
                << (e.plan.virtual_stages > 1 ? " v" + std::to_string(e.plan.virtual_stages) : "")
                << token_slices_text(e.plan) << ", recompute "
                << to_string(e.plan.recompute) << ", zero " << e.plan.zero << "\n  executed as " << p.framework
                << ", " << p.attention << " attention\n  calibration: " << p.profile << "\n  calibrated: "
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
            if (!p.fits()) out << "DOES NOT FIT in device memory: " << p.memory_verdict() << "\n";
            for (const auto& b : broken) out << "CHECK FAILED: " << b << "\n";
          }
          // A plan that does not fit cannot run, whatever else holds: exit 3 (documented in --help).
          if (!p.fits()) return kExitDoesNotFit;
          return (o->check && !broken.empty()) ? kExitInternal : kExitOk;
        };
      }};
}

}  // namespace foresight::cli
