// foresight plan: search the plan space for a model on a cluster, print the ranked plans, say
// where a published plan ranks, and write plan.json + launch script + Megatron-LM arguments.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/cli/cli.hpp"
#include "core/framework.hpp"
#include "core/plan_json.hpp"
#include "core/spec_json.hpp"
#include "core/scenario.hpp"
#include "planner/search.hpp"

namespace foresight::cli {


Command plan_command() {
  struct Opts {
    std::string experiment = "mt-nlg-530b-selene-280", model, cluster, out, framework;
    int gpus = 0, global_batch = 0, top = 10, threads = 0, pick = 1;
    bool json = false, no_simgrid = false, terapipe = false;
  };
  return Command{
      "plan",
      "Search parallel plans for a model on a cluster, rank them, write plan.json and launch lines.\n"
      "Defaults come from --experiment (default mt-nlg-530b-selene-280: MT-NLG 530B on 280 Selene nodes, "
      "batch 1920); --model/--cluster/--gpus/--global-batch override them, and the experiment's own plan "
      "is ranked among the results.",
      [](CLI::App& sub) {
        auto o = std::make_shared<Opts>();
        sub.add_option("--experiment", o->experiment, "Experiment whose model, cluster, GPUs and batch are the defaults")
            ->capture_default_str();
        sub.add_option("--model", o->model, "Model file or bundled name (overrides the experiment's)");
        sub.add_option("--cluster", o->cluster, "Cluster file or bundled name (overrides the experiment's)");
        sub.add_option("--gpus", o->gpus, "GPUs to use (default: the experiment's)")->check(CLI::PositiveNumber);
        sub.add_option("--global-batch", o->global_batch, "Sequences per iteration")->check(CLI::PositiveNumber);
        sub.add_option("--framework", o->framework,
                       "Whose implementation runs the plan: " + allowed_values<Framework>() +
                           " (default: the experiment's; megatron when --model or --cluster is given)");
        sub.add_option("--top", o->top, "Ranked plans to print (and re-simulate with SimGrid)")
            ->check(CLI::Range(1, 1000))
            ->capture_default_str();
        sub.add_option("--threads", o->threads, "Worker threads (default: all cores)")->check(CLI::NonNegativeNumber);
        sub.add_flag("--no-simgrid", o->no_simgrid, "Rank with the analytic engine only");
        sub.add_flag("--terapipe", o->terapipe,
                     "Also search TeraPipe token-level pipelining (slices from TeraPipe's dynamic program) and "
                     "report its speedup over the best plan without it");
        sub.add_flag("--json", o->json, "Print machine-readable JSON");
        sub.add_option("--out", o->out, "Directory to write plan.json, launch.sh and megatron_args.txt into");
        sub.add_option("--pick", o->pick, "Which ranked plan to write with --out (1 = best)")->check(CLI::PositiveNumber);
        return [o](std::ostream& out) {
          const Experiment base = load_experiment(resolve_scenario("experiments", o->experiment));
          planner::SearchRequest r;
          r.model = o->model.empty() ? base.model : load_model(resolve_scenario("models", o->model));
          r.cluster = o->cluster.empty() ? base.cluster : load_cluster(resolve_scenario("clusters", o->cluster));
          r.training = base.training;
          if (o->global_batch > 0) r.training.global_batch = o->global_batch;
          r.gpus = o->gpus > 0 ? o->gpus : std::min(base.gpus, r.cluster.total_gpus());
          // The experiment's framework describes how *it* ran; a new model or cluster is planned
          // for Megatron-LM unless --framework says otherwise.
          r.framework = (o->model.empty() && o->cluster.empty()) ? base.plan.framework : Framework::megatron;
          if (!o->framework.empty()) {
            auto f = parse_enum<Framework>(o->framework);
            if (!f) throw SpecError(SourceLocation{"<command line>", 0, 0}, "--framework", o->framework,
                                    "must be one of: " + allowed_values<Framework>());
            r.framework = *f;
          }
          if (r.gpus > r.cluster.total_gpus())
            throw SpecError(SourceLocation{"<command line>", 0, 0}, "--gpus", std::to_string(r.gpus),
                            "must not exceed the cluster's " + std::to_string(r.cluster.total_gpus()) + " GPUs");
          r.top_k = o->top;
          r.threads = o->threads;
          r.simgrid_top = !o->no_simgrid;
          r.terapipe = o->terapipe || base.plan.schedule == Schedule::terapipe;
          if (r.terapipe && !framework_traits(r.framework).schedules[int(Schedule::terapipe)])
            throw SpecError(SourceLocation{"<command line>", 0, 0}, "--terapipe", to_string(r.framework),
                            "this framework has no token-level pipelining (TeraPipe slicing runs with --framework "
                            "terapipe or generic)");
          const bool tty = ::isatty(STDERR_FILENO);
          const auto progress = [tty](long done, long total) {
            if (!tty) return;
            const int width = 30, filled = int(width * done / std::max(1L, total));
            std::fprintf(stderr, "\r[%s%s] %ld/%ld plans", std::string(filled, '#').c_str(),
                         std::string(width - filled, ' ').c_str(), done, total);
            if (done == total) std::fprintf(stderr, "\n");
          };
          const planner::SearchResult res = planner::search_plans(r, progress);

          // The experiment's own plan, when it is a plan for this request.
          std::optional<planner::PlanStanding> standing;
          const bool same = o->model.empty() && o->cluster.empty() && r.gpus == base.gpus &&
                            r.training.global_batch == base.training.global_batch;
          if (same) {
            PlanSpec published = base.plan;
            published.framework = r.framework;
            standing = planner::rank_of(r, res, published);
          }

          if (res.ranked.empty()) {
            std::string msg = "no plan fits: " + r.model.name + " on " + std::to_string(r.gpus) + " x " + r.cluster.gpu.name;
            if (res.closest)
              msg += "; the closest plan (" + describe_plan(*res.closest) + ", with offload) needs " +
                     format_number(in_GiB(res.closest_need), 1) + " GiB per GPU, " +
                     format_number(in_GiB(res.closest_shortfall), 1) + " GiB more than the " +
                     format_number(in_GiB(r.cluster.gpu.hbm), 1) + " GiB the device has";
            throw SpecError(SourceLocation{"<command line>", 0, 0}, "", "", msg);
          }
          if (o->pick > int(res.ranked.size()))
            throw SpecError(SourceLocation{"<command line>", 0, 0}, "--pick", std::to_string(o->pick),
                            "must be at most the " + std::to_string(res.ranked.size()) + " ranked plans");

          if (!o->out.empty()) {
            const planner::Candidate& c = res.ranked[o->pick - 1];
            ExecutablePlan ep;
            ep.model = r.model;
            ep.cluster = r.cluster.name;
            ep.gpus_per_node = r.cluster.gpus_per_node;
            ep.training = r.training;
            ep.plan = c.plan;
            ep.gpus = r.gpus;
            const sim::Prediction& pr = c.simgrid ? *c.simgrid : c.analytic;
            ep.prediction = PlanPrediction{in_s(pr.iteration), pr.tokens_per_s, pr.tflops_per_gpu, in_GB(c.peak_memory),
                                           to_string(pr.engine)};
            std::filesystem::create_directories(o->out);
            const std::filesystem::path dir(o->out);
            write_file_atomically(dir / "plan.json", to_json(ep).dump(2) + "\n");
            write_file_atomically(dir / "launch.sh", launch_script(ep, (dir / "plan.json").string()));
            std::filesystem::permissions(dir / "launch.sh", std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
            const std::string margs = megatron_arguments(ep);
            write_file_atomically(dir / "megatron_args.txt",
                       margs.empty() ? "# this plan (" + std::string(to_string(c.plan.schedule)) + ") has no Megatron-LM equivalent\n"
                                     : margs + "\n");
          }

          if (o->json) {
            nlohmann::ordered_json j;
            j["model"] = r.model.name;
            j["cluster"] = r.cluster.name;
            j["gpus"] = r.gpus;
            j["global_batch"] = r.training.global_batch;
            j["enumerated"] = res.enumerated;
            j["pruned_memory"] = res.pruned_memory;
            j["evaluated"] = res.evaluated;
            nlohmann::ordered_json plans = nlohmann::ordered_json::array();
            for (std::size_t i = 0; i < res.ranked.size(); ++i) {
              const auto& c = res.ranked[i];
              nlohmann::ordered_json pj{{"rank", i + 1}, {"plan", to_json(c.plan)},
                                        {"iteration_s", in_s(c.analytic.iteration)},
                                        {"tokens_per_s", c.analytic.tokens_per_s},
                                        {"tflops_per_gpu", c.analytic.tflops_per_gpu},
                                        {"mfu", c.analytic.mfu},
                                        {"memory_GB", in_GB(c.peak_memory)}};
              if (c.simgrid) pj["simgrid_iteration_s"] = in_s(c.simgrid->iteration);
              plans.push_back(pj);
            }
            j["ranked"] = plans;
            if (res.best_terapipe && res.best_without_terapipe) {
              j["terapipe"] = {{"best_iteration_s", in_s(res.best_terapipe->analytic.iteration)},
                               {"token_slices", res.best_terapipe->plan.token_slices},
                               {"best_without_iteration_s", in_s(res.best_without_terapipe->analytic.iteration)},
                               {"speedup", res.best_without_terapipe->analytic.iteration / res.best_terapipe->analytic.iteration}};
            }
            if (standing) {
              j["published_plan"] = {{"plan", to_json(base.plan)},
                                     {"iteration_s", in_s(standing->prediction.iteration)},
                                     {"fits", standing->fits},
                                     {"rank", standing->rank ? nlohmann::ordered_json(*standing->rank) : nlohmann::ordered_json()},
                                     {"of", standing->of}};
            }
            out << j.dump(2) << "\n";
            return kExitOk;
          }
          out << "Plans for " << r.model.name << " on " << r.gpus << " x " << r.cluster.gpu.name << " (" << r.cluster.name
              << "), global batch " << r.training.global_batch << ", as " << to_string(r.framework) << " runs them\n"
              << "  " << res.enumerated << " plans enumerated, " << res.pruned_memory << " do not fit in "
              << format_number(in_GB(r.cluster.gpu.hbm), 1) << " GB, " << res.evaluated << " simulated\n\n";
          // The plan column is as wide as the longest description shown, so that long plans
          // (offload, interleaving, MoE) do not push the numbers out of their columns.
          int plan_width = 48;
          for (const auto& c : res.ranked) plan_width = std::max(plan_width, int(describe_plan(c.plan).size()));
          char buf[512];
          std::snprintf(buf, sizeof buf, "%4s  %-*s %12s %12s %10s %6s %10s\n", "rank", plan_width, "plan", "iteration s",
                        "simgrid s", "TFLOP/s", "MFU", "memory GB");
          out << buf;
          for (std::size_t i = 0; i < res.ranked.size(); ++i) {
            const auto& c = res.ranked[i];
            std::snprintf(buf, sizeof buf, "%4zu  %-*s %12.3f %12s %10.1f %6.3f %10.1f\n", i + 1, plan_width, describe_plan(c.plan).c_str(),
                          in_s(c.analytic.iteration),
                          c.simgrid ? format_number(in_s(c.simgrid->iteration), 3).c_str() : "-",
                          c.analytic.tflops_per_gpu, c.analytic.mfu, in_GB(c.peak_memory));
            out << buf;
          }
          out << "  (TFLOP/s per GPU and MFU count model FLOPs, without recompute)\n";
          if (res.best_terapipe && res.best_without_terapipe) {
            const auto& t = *res.best_terapipe;
            out << "\nTeraPipe: best plan with token slicing (" << describe_plan(t.plan) << ", "
                << t.plan.token_slices.size() << " slices) " << format_number(in_s(t.analytic.iteration), 3)
                << " s; best without (" << describe_plan(res.best_without_terapipe->plan) << ") "
                << format_number(in_s(res.best_without_terapipe->analytic.iteration), 3) << " s; speedup "
                << format_number(res.best_without_terapipe->analytic.iteration / t.analytic.iteration, 2) << "x\n";
          }
          if (standing) {
            out << "\nThe experiment's own plan (" << describe_plan(base.plan) << "): "
                << format_number(in_s(standing->prediction.iteration), 3) << " s per iteration, ";
            if (standing->rank)
              out << "rank " << *standing->rank << " of " << standing->of << " fitting plans\n";
            else
              out << "does not fit in device memory by the memory model\n";
          }
          if (!o->out.empty())
            out << "\nWrote " << o->out << "/plan.json, launch.sh and megatron_args.txt (plan rank " << o->pick << ")\n";
          return kExitOk;
        };
      }};
}

}  // namespace foresight::cli
