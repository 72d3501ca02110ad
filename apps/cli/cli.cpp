#include "apps/cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "core/plan.hpp"
#include "foresight/config.hpp"

namespace foresight::cli {

std::string recompute_text(const PlanSpec& p) {
  std::string t = to_string(p.recompute);
  if (p.recompute_layers > 0) t += " (first " + std::to_string(p.recompute_layers) + " layers of a stage)";
  if (p.recompute_modules.any()) t += " + modules " + recompute_module_names(p.recompute_modules, ", ");
  return t;
}

std::string describe_plan(const PlanSpec& p) {
  std::string s = "tp" + std::to_string(p.tp);
  if (p.cp > 1) {
    s += " cp";
    s += std::to_string(p.cp);
    if (p.cp_comm == CpComm::all_to_all) s += "(a2a)";
    if (p.cp_comm == CpComm::all_to_all_ring) s += "(a2a" + std::to_string(p.cp_a2a) + "+p2p)";
    if (p.cp_comm == CpComm::all_gather) s += "(all-gather)";
  }
  s += " pp" + std::to_string(p.pp) + " dp" + std::to_string(p.dp) + " mb" +
                  std::to_string(p.micro_batch) + " " + to_string(p.schedule);
  if (p.schedule == Schedule::interleaved) s += "(v" + std::to_string(p.virtual_stages) + ")";
  if (!p.stage_layers.empty()) {
    s += " layers:";
    for (std::size_t i = 0; i < p.stage_layers.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(p.stage_layers[i]);
    }
  }
  if (p.first_stage_layers > 0) {
    s += " first:";
    s += std::to_string(p.first_stage_layers);
  }
  if (p.last_stage_layers > 0) {
    s += " last:";
    s += std::to_string(p.last_stage_layers);
  }
  if (!p.partition_method.empty()) {
    s += " partition:";
    s += p.partition_method;
  }
  if (p.sequence_parallel) s += " sp";
  if (p.tp_overlap) s += " tp-overlap";
  if (p.compile) s += " compile";
  s += std::string(" rc:") + to_string(p.recompute);
  if (p.recompute_layers > 0) {
    s += '/';
    s += std::to_string(p.recompute_layers);
  }
  if (p.recompute_modules.any()) {
    // Megatron-Core's --recompute-modules names.
    s += "+" + recompute_module_names(p.recompute_modules, ",");
  }
  if (p.partial_recompute_microbatches > 0) {
    s += " partial-mb:";
    s += std::to_string(p.partial_recompute_microbatches);
  }
  if (p.zero) s += " zero" + std::to_string(p.zero);
  if (p.zero && p.shard_group > 0 && p.shard_group < p.dp) s += "/" + std::to_string(p.shard_group);
  if (p.zero == 3 && !p.reshard_after_forward) s += " keep-fwd";
  if (p.dp_overlap) s += " rs-overlap";
  if (p.param_gather_overlap) s += " ag-overlap";
  if (p.ep > 1) s += " ep" + std::to_string(p.ep);
  if (p.etp() != p.tp) s += " etp" + std::to_string(p.etp());
  if (p.ep_overlap) s += " ep-overlap";
  if (p.ep_dispatcher == EpDispatcher::deepep) s += " deepep";
  if (p.moe_permute_fusion) s += " permute-fusion";
  if (p.moe_shared_expert_overlap) s += " shared-overlap";
  if (p.defer_embedding_wgrad) {
    s += " defer-head-wgrad";
    if (p.wgrad_deferral_limit > 0) s += ":" + std::to_string(p.wgrad_deferral_limit);
  }
  if (p.cross_entropy_fusion != CrossEntropyFusion::none) s += std::string(" ce:") + to_string(p.cross_entropy_fusion);
  if (p.offload.optimizer) s += " off:opt";
  if (p.offload.activations > 0) {
    s += " off:act";
    // A share of the layers (Megatron-Core's cpu_offloading_num_layers): how much, in percent.
    if (p.offload.activations < 1.0) s += std::to_string(int(std::lround(100.0 * p.offload.activations))) + "%";
  }
  return s;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {describe_command(), simulate_command(), plan_command(),
                                            validate_command(), calibrate_command(), report_command()};
  return list;
}

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Foresight: how fast will this transformer train on that cluster, with which parallel plan, "
      "and will it fit?\nScenario names (e.g. mt-nlg-530b-selene-280) are looked up in the bundled "
      "scenarios/ folder (or $FORESIGHT_SCENARIOS); paths work too.",
      "foresight"};
  app.set_version_flag("--version", std::string(config::kVersion));
  app.require_subcommand(1);
  std::function<int(std::ostream&, std::ostream&)> action;
  for (const auto& c : commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    auto run = c.setup(*sub);
    sub->callback([&action, run] { action = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::Success& e) {
    // --help of a subcommand or --version: CLI11 writes it through exit().
    std::ostringstream o, e2;
    app.exit(e, o, e2);
    out << o.str() << e2.str();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::ostringstream o, e2;
    app.exit(e, o, e2);
    err << o.str() << e2.str();
    return kExitUserError;
  } catch (const SpecError& e) {
    err << "error: " << e.what() << "\n";
    return kExitUserError;
  }
  if (!action) return kExitUserError;
  try {
    return action(out, err);
  } catch (const SpecError& e) {
    err << "error: " << e.what() << "\n";
    return kExitUserError;
  } catch (const InternalError& e) {
    err << "internal error (a bug in foresight, please report): " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    err << "internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> storage{"foresight"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  return run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
}

}  // namespace foresight::cli
