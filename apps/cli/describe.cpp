// foresight describe EXPERIMENT: what the experiment is, before any simulation: parameters, FLOPs
// per iteration (model and hardware, Narayanan et al. 2021 eq. 3 convention), tokens, GPUs.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/cli/cli.hpp"
#include "core/flops.hpp"
#include "core/report.hpp"
#include "core/scenario.hpp"
#include "core/spec_json.hpp"
#include "cost_models/memory.hpp"
#include "sim/prediction.hpp"

namespace foresight::cli {

namespace {

std::vector<Section> describe_sections(const Experiment& e) {
  const double batch = e.training.global_batch;
  const Flops model = model_flops_per_iteration(e.model, batch);
  const Flops hw = hardware_flops_per_iteration(e.model, batch, e.plan);
  const double peak_total = e.gpus * e.cluster.gpu.peak(e.training.dtype).value();
  std::vector<Section> s;
  s.push_back({"Model", "",
               {{"parameters", parameter_count(e.model), "", "Parameters (exact count)", 0},
                {"parameters_B", parameter_count(e.model) / 1e9, "billion", "Parameters", 2},
                {"active_parameters_B", active_parameter_count(e.model) / 1e9, "billion",
                 "Active parameters per token", 2}}});
  if (e.model.mtp_layers > 0)
    s.back().fields.push_back({"mtp_parameters_B", mtp_parameters(e.model) / 1e9, "billion",
                             "of which in MTP modules (" + std::to_string(e.model.mtp_layers) +
                                 "; embedding and head shared)",
                             2});
  s.push_back({"Iteration", "",
               {{"tokens_per_iteration", batch * e.model.seq_len, "tokens", "Tokens per iteration", 0},
                {"model_flops_per_iteration", model.value(), "FLOP", "Model FLOPs (no recompute)", 4},
                {"hardware_flops_per_iteration", hw.value(), "FLOP",
                 "Hardware FLOPs (recompute " + recompute_text(e.plan) + ")", 4},
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
        return [o](std::ostream& out, std::ostream&) {
          const Experiment e = load_experiment(resolve_scenario("experiments", o->experiment));
          const auto sections = describe_sections(e);
          const auto memory = cost_models::memory_per_stage(cost_models::execution_model(e.training, e.plan), e.model,
                                                            e.training, e.plan);
          const int worst = cost_models::most_loaded_stage(memory);
          if (o->json) {
            nlohmann::ordered_json j{{"experiment", e.name}, {"file", e.file}};
            j.update(to_json(sections));
            j["model"] = to_json(e.model);
            j["cluster"] = to_json(e.cluster);
            j["training"] = to_json(e.training);
            j["plan"] = to_json(e.plan);
            nlohmann::ordered_json stages = nlohmann::ordered_json::array();
            for (const auto& m : memory)
              stages.push_back(sim::memory_json(m));
            j["memory_per_stage_GB"] = stages;
            j["most_loaded_stage"] = worst;
            j["device_memory_GB"] = in_GB(e.cluster.gpu.hbm);
            j["fits"] = cost_models::fits(memory[worst], e.cluster.gpu);
            out << j.dump(2) << "\n";
          } else {
            out << "Experiment " << e.name << " (" << e.file << ")\n"
                << "  " << e.model.name << ": " << e.model.layers << " layers, hidden " << e.model.hidden
                << ", " << e.model.heads << " heads, seq " << e.model.seq_len << ", vocab " << e.model.vocab
                << "\n  plan: tp " << e.plan.tp << " x pp " << e.plan.pp << " x dp " << e.plan.dp
                << ", micro-batch " << e.plan.micro_batch << ", global batch " << e.training.global_batch
                << (e.plan.cp > 1 ? ", cp " + std::to_string(e.plan.cp) : std::string())
                << (e.plan.ep > 1 ? ", ep " + std::to_string(e.plan.ep) : std::string()) << ", "
                << to_string(e.plan.schedule) << ", recompute " << recompute_text(e.plan)
                << "\n\n"
                << format_console(sections);
            out << "Memory per GPU by pipeline stage (GB; device " << format_number(in_GB(e.cluster.gpu.hbm), 1)
                << " GB)\n  stage   weights    grads  optimizer  activations  buffers  headroom    total\n";
            auto row = [&](std::size_t s) {
              const auto& m = memory[s];
              char buf[160];
              std::snprintf(buf, sizeof buf, "  %5zu  %8.2f %8.2f %10.2f %12.2f %8.2f %9.2f %8.2f%s\n", s, in_GB(m.weights),
                            in_GB(m.grads), in_GB(m.optimizer), in_GB(m.activations), in_GB(m.buffers),
                            in_GB(m.headroom), in_GB(m.total()), int(s) == worst ? "  <- most loaded" : "");
              out << buf;
            };
            // Long pipelines: the first three, the most loaded, the last (the rest look alike).
            for (std::size_t st = 0; st < memory.size(); ++st)
              if (memory.size() <= 8 || st < 3 || int(st) == worst || st + 1 == memory.size()) row(st);
              else if (st == 3) out << "    ...\n";
            const Bytes short_by = cost_models::memory_shortfall(memory[worst], e.cluster.gpu);
            if (short_by > Bytes(0))
              out << "Does NOT fit: stage " << worst << " needs " << format_number(in_GB(memory[worst].total()), 1)
                  << " GB, " << format_number(in_GB(short_by), 1) << " GB more than the device has\n";
            else
              out << "Fits: the most loaded stage uses " << format_number(in_GB(memory[worst].total()), 1) << " of "
                  << format_number(in_GB(e.cluster.gpu.hbm), 1) << " GB\n";
          }
          return kExitOk;
        };
      }};
}

}  // namespace foresight::cli
