// foresight describe EXPERIMENT: what the experiment is, before any simulation: parameters, FLOPs
// per iteration (model and hardware, Narayanan et al. 2021 eq. 3 convention), tokens, GPUs.
#include <CLI/CLI.hpp>

#include "apps/cli/cli.hpp"
#include "core/flops.hpp"
#include "core/report.hpp"
#include "core/scenario.hpp"
#include "core/spec_json.hpp"

namespace foresight::cli {

namespace {

std::vector<Section> describe_sections(const Experiment& e) {
  const double batch = e.training.global_batch;
  const Flops model = model_flops_per_iteration(e.model, batch);
  const Flops hw = hardware_flops_per_iteration(e.model, batch, e.plan.recompute);
  const double peak_total = e.gpus * e.cluster.gpu.peak(e.training.dtype).value();
  std::vector<Section> s;
  s.push_back({"Model", "",
               {{"parameters", parameter_count(e.model), "", "Parameters (exact count)", 0},
                {"parameters_B", parameter_count(e.model) / 1e9, "billion", "Parameters", 2},
                {"active_parameters_B", active_parameter_count(e.model) / 1e9, "billion",
                 "Active parameters per token", 2}}});
  s.push_back({"Iteration", "",
               {{"tokens_per_iteration", batch * e.model.seq_len, "tokens", "Tokens per iteration", 0},
                {"model_flops_per_iteration", model.value(), "FLOP", "Model FLOPs (no recompute)", 4},
                {"hardware_flops_per_iteration", hw.value(), "FLOP",
                 std::string("Hardware FLOPs (recompute ") + to_string(e.plan.recompute) + ")", 4},
                {"micro_batches_per_pipeline", double(e.plan.micro_batches(e.training)), "",
                 "Micro-batches per pipeline", 0}}});
  s.push_back({"Cluster", "",
               {{"gpus", double(e.gpus), "GPUs", "GPUs used", 0},
                {"nodes", double(e.gpus) / e.cluster.gpus_per_node, "nodes", "Nodes used", 1},
                {"peak_pflops_total", peak_total / 1e15, "PFLOP/s",
                 std::string("Peak ") + to_string(e.training.dtype) + " of the GPUs used", 1},
                {"ideal_iteration_s", hw.value() / peak_total, "s",
                 "Iteration time at 100% of peak (hardware FLOPs)", 3}}});
  return s;
}

}  // namespace

Command describe_command() {
  struct Opts {
    std::string experiment;
    bool json = false;
  };
  return Command{
      "describe", "Describe an experiment: parameters, FLOPs and tokens per iteration, GPUs used",
      [](CLI::App& sub) {
        auto o = std::make_shared<Opts>();
        sub.add_option("experiment", o->experiment, "Experiment file or bundled name (e.g. mt-nlg-530b-selene-280)")
            ->required();
        sub.add_flag("--json", o->json, "Print machine-readable JSON instead of a table");
        return [o](std::ostream& out) {
          const Experiment e = load_experiment(resolve_scenario("experiments", o->experiment));
          const auto sections = describe_sections(e);
          if (o->json) {
            nlohmann::ordered_json j{{"experiment", e.name}, {"file", e.file}};
            j.update(to_json(sections));
            j["model"] = to_json(e.model);
            j["cluster"] = to_json(e.cluster);
            j["training"] = to_json(e.training);
            j["plan"] = to_json(e.plan);
            out << j.dump(2) << "\n";
          } else {
            out << "Experiment " << e.name << " (" << e.file << ")\n"
                << "  " << e.model.name << ": " << e.model.layers << " layers, hidden " << e.model.hidden
                << ", " << e.model.heads << " heads, seq " << e.model.seq_len << ", vocab " << e.model.vocab
                << "\n  plan: tp " << e.plan.tp << " x pp " << e.plan.pp << " x dp " << e.plan.dp
                << ", micro-batch " << e.plan.micro_batch << ", global batch " << e.training.global_batch
                << ", " << to_string(e.plan.schedule) << ", recompute " << to_string(e.plan.recompute)
                << "\n\n"
                << format_console(sections);
          }
          return kExitOk;
        };
      }};
}

}  // namespace foresight::cli
