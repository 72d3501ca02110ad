// foresight plan: search the plan space for a model on a cluster, print the ranked plans, say
// where a published plan ranks, and write plan.json + launch script + Megatron-LM arguments.
// The ranked plans are one table (plan_table) that both the console and the JSON read; under
// mpirun the search is spread over the ranks (apps/cli/plan_mpi.hpp) and rank 0 prints.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "apps/cli/cli.hpp"
#include "apps/cli/plan_mpi.hpp"
#include "apps/cli/progress.hpp"
#include "core/cli_validators.hpp"
#include "core/framework.hpp"
#include "core/plan_json.hpp"
#include "core/scenario.hpp"
#include "core/spec_json.hpp"
#include "cost_models/device_spread.hpp"
#include "planner/search.hpp"

namespace foresight::cli {

namespace {

const SourceLocation kCommandLine{"<command line>", 0, 0};

struct Opts {
  std::string experiment = "mt-nlg-530b-selene-280", model, cluster, out, framework, dtype, fp8_scaling, compile;
  int gpus = 0, global_batch = 0, top = 10, threads = 0, pick = 1;
  double memory_headroom = planner::SearchRequest{}.memory_headroom;
  bool json = false, no_simgrid = false, terapipe = false;
};

/// The request the options describe, with the experiment's fields as defaults.
planner::SearchRequest request_from(const Opts& o, const Experiment& base) {
  planner::SearchRequest r;
  r.model = o.model.empty() ? base.model : load_model(resolve_scenario("models", o.model));
  r.cluster = o.cluster.empty() ? base.cluster : load_cluster(resolve_scenario("clusters", o.cluster));
  r.training = base.training;
  if (o.global_batch > 0) r.training.global_batch = o.global_batch;
  if (!o.dtype.empty()) {
    const auto d = parse_enum<Dtype>(o.dtype);
    if (!d || *d == Dtype::tf32)
      throw SpecError(kCommandLine, "--dtype", o.dtype, "must be one of: bf16, fp16, fp8, fp32");
    r.training.dtype = *d;
    // The experiment's FP8 scaling recipe belongs to its FP8 runs.
    if (*d != Dtype::fp8) r.training.fp8_scaling = Fp8Scaling::delayed;
  }
  if (!o.fp8_scaling.empty()) {
    const auto f = parse_enum<Fp8Scaling>(o.fp8_scaling);
    if (!f) throw SpecError(kCommandLine, "--fp8-scaling", o.fp8_scaling, "must be one of: " + allowed_values<Fp8Scaling>());
    if (r.training.dtype != Dtype::fp8)
      throw SpecError(kCommandLine, "--fp8-scaling", o.fp8_scaling,
                      "applies to FP8 training only (the dtype is " + std::string(to_string(r.training.dtype)) +
                          "; add --dtype fp8)");
    r.training.fp8_scaling = *f;
  }
  r.gpus = o.gpus > 0 ? o.gpus : std::min(base.gpus, r.cluster.total_gpus());
  // The experiment's framework describes how *it* ran; a new model or cluster is planned for
  // Megatron-LM unless --framework says otherwise.
  r.framework = (o.model.empty() && o.cluster.empty()) ? base.plan.framework : Framework::megatron;
  if (!o.framework.empty()) {
    auto f = parse_enum<Framework>(o.framework);
    if (!f) throw SpecError(kCommandLine, "--framework", o.framework, "must be one of: " + allowed_values<Framework>());
    r.framework = *f;
  }
  const FrameworkTraits& fw = framework_traits(r.framework);
  // A model the framework cannot build is refused here, naming the model feature, rather than
  // reported later as "no plan fits".
  if (auto v = fw.model_refusal(r.model))
    throw SpecError(kCommandLine, v->field, v->value,
                    v->rule + " (--framework " + fw.name + ", --model " + r.model.name + ")");
  // So is an FP8 recipe the framework or the GPU does not run (mxfp8 beside torchao, or on Hopper).
  if (auto v = fp8_recipe_violation(fw, r.training, r.cluster.gpu))
    throw SpecError(kCommandLine, o.fp8_scaling.empty() ? "training.fp8_scaling (of --experiment " + o.experiment + ")" : "--fp8-scaling",
                    v->value, v->rule + " (--framework " + fw.name + ", --cluster " + r.cluster.name + ")");
  // The experiment's torch.compile setting carries over to a framework that compiles, unless
  // --compile says on or off (on: every plan under torch.compile, which async TP needs; the loss
  // compiled with the blocks only where the experiment compiled it).
  const bool compiles = fw.compiled_elementwise.has_value();
  r.compile = base.plan.compile && compiles;
  if (!o.compile.empty()) {
    if (o.compile != "on" && o.compile != "off")
      throw SpecError(kCommandLine, "--compile", o.compile, "must be on or off");
    if (o.compile == "on" && !compiles)
      throw SpecError(kCommandLine, "--compile", o.compile,
                      std::string(fw.name) +
                          " has no torch.compile mode (pytorch and torchtitan have one: --framework)");
    r.compile = o.compile == "on";
  }
  r.compile_loss = r.compile && base.plan.compile_loss;
  // So does the recipe's fused cross-entropy, to a framework that runs it (Megatron-Core).
  r.cross_entropy_fusion =
      fw.cross_entropy_fusion ? base.plan.cross_entropy_fusion : CrossEntropyFusion::none;
  // And its deferred head weight gradients, on the pipelined candidates of a framework that defers
  // them (Megatron-Core).
  r.defer_embedding_wgrad = fw.defers_embedding_wgrad && base.plan.defer_embedding_wgrad;
  r.wgrad_deferral_limit = r.defer_embedding_wgrad ? base.plan.wgrad_deferral_limit : 0;
  // And the framework release the experiment names (DeepSpeed's ZeRO-3 with or without a complete
  // prefetch trace, its pipeline engine before or after v0.5.4): the search sets it on the
  // candidates of a framework that has the choice.
  r.zero3_prefetch = base.plan.zero3_prefetch;
  r.partitioned_pipe_grads = base.plan.partitioned_pipe_grads;
  // A precision the GPU has no tensor-core peak for (bf16 or FP8 on a V100, say) is refused here,
  // before any plan is priced, naming where the dtype came from.
  if (!(r.cluster.gpu.peak(r.training.dtype) > FlopsPerSecond(0))) {
    std::string has;
    for (const Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::fp32})
      if (r.cluster.gpu.peak(d) > FlopsPerSecond(0)) has += std::string(has.empty() ? "" : ", ") + to_string(d);
    throw SpecError(kCommandLine, o.dtype.empty() ? "training.dtype (of --experiment " + o.experiment + ")" : "--dtype",
                    to_string(r.training.dtype),
                    "the cluster's GPU " + r.cluster.gpu.name + " has no " + std::string(to_string(r.training.dtype)) +
                        " peak in its GPU file; pass --dtype with one it has (" + has + ")");
  }
  if (r.gpus > r.cluster.total_gpus())
    throw SpecError(kCommandLine, "--gpus", std::to_string(r.gpus),
                    "must not exceed the cluster's " + std::to_string(r.cluster.total_gpus()) + " GPUs");
  r.top_k = o.top;
  r.threads = o.threads;
  r.simgrid_top = !o.no_simgrid;
  r.memory_headroom = o.memory_headroom;
  r.terapipe = o.terapipe || base.plan.schedule == Schedule::terapipe;
  if (r.terapipe && !fw.schedules[int(Schedule::terapipe)])
    throw SpecError(kCommandLine, "--terapipe", to_string(r.framework),
                    "this framework has no token-level pipelining (TeraPipe slicing runs with --framework "
                    "terapipe or generic)");
  return r;
}

/// The ranked plans, one row each: the one list of columns both reporters read.
Table plan_table(const planner::SearchRequest& r, const planner::SearchResult& res) {
  Table t;
  t.columns = {{"rank", "rank", 0},
               {"plan", "plan", 0},
               {"iteration_s", "iteration s", 3},
               {"iteration_s_range", "range s", 0},
               {"simgrid_iteration_s", "simgrid s", 3},
               {"tokens_per_s", "tokens/s", 0},
               {"tflops_per_gpu", "TFLOP/s", 1},
               {"mfu", "MFU", 3},
               {"memory_GB", "memory GB", 1},
               {"spare_GB", "spare GB", 1}};
  for (std::size_t i = 0; i < res.ranked.size(); ++i) {
    const planner::Candidate& c = res.ranked[i];
    std::optional<double> simgrid;
    if (c.simgrid) simgrid = in_s(c.simgrid->iteration);
    // The error bar of the analytic prediction (cost_models::ErrorBand), "-" where none applies.
    const sim::Prediction& a = c.analytic;
    const Cell range = a.band ? Cell(format_number(in_s(a.iteration_low()), 2) + "-" + format_number(in_s(a.iteration_high()), 2),
                                     nlohmann::ordered_json::array({in_s(a.iteration_low()), in_s(a.iteration_high())}))
                              : Cell("-");
    t.rows.push_back({Cell(double(i + 1)), Cell(describe_plan(c.plan), to_json(c.plan)), Cell(in_s(c.analytic.iteration)),
                      range, Cell(simgrid), Cell(c.analytic.tokens_per_s), Cell(c.analytic.tflops_per_gpu), Cell(c.analytic.mfu),
                      Cell(in_GB(c.peak_memory)), Cell(in_GB(r.memory_limit() - c.peak_memory))});
  }
  return t;
}

/// Writes the picked plan's plan.json, launch.sh and megatron_args.txt into `dir`, ds_config.json
/// for a DeepSpeed plan and fms_fsdp_launch.txt for an fms-fsdp one; returns the names written, in order.
std::vector<std::string> write_outputs(const std::filesystem::path& dir, const planner::SearchRequest& r,
                                       const planner::Candidate& c) {
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
  std::filesystem::create_directories(dir);
  write_file_atomically(dir / "plan.json", to_json(ep).dump(2) + "\n");
  write_file_atomically(dir / "launch.sh", launch_script(ep, (dir / "plan.json").string()));
  std::filesystem::permissions(dir / "launch.sh", std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  std::string why_not;
  const std::string margs = megatron_arguments(ep, &why_not);
  write_file_atomically(dir / "megatron_args.txt",
                        margs.empty() ? "# this plan has no Megatron-LM equivalent: " + why_not + "\n" : margs + "\n");
  // A DeepSpeed plan also gets the configuration DeepSpeed reads; any other plan none, and no
  // stale one from an earlier run in the same folder.
  std::vector<std::string> written = {"plan.json", "launch.sh", "megatron_args.txt"};
  const nlohmann::ordered_json ds = deepspeed_config(ep);
  if (!ds.is_null()) {
    write_file_atomically(dir / "ds_config.json", ds.dump(2) + "\n");
    written.push_back("ds_config.json");
  } else {
    std::filesystem::remove(dir / "ds_config.json");
  }
  // An fms-fsdp plan also gets fms-fsdp's own launch line (no stale one elsewhere).
  if (framework_traits(c.plan.framework).launcher == Launcher::fms_fsdp) {
    std::string fms_why;
    const std::string fms = fms_fsdp_arguments(ep, &fms_why);
    write_file_atomically(dir / "fms_fsdp_launch.txt",
                          fms.empty() ? "# this plan has no fms-fsdp launch line: " + fms_why + "\n" : fms + "\n");
    written.push_back("fms_fsdp_launch.txt");
  } else {
    std::filesystem::remove(dir / "fms_fsdp_launch.txt");
  }
  return written;
}

/// What both reporters print: the request, the search's result, its ranked table and, when the
/// experiment's own plan was ranked, where it stands.
struct Report {
  const planner::SearchRequest& r;
  const planner::SearchResult& res;
  Table table;
  std::optional<planner::PlanStanding> standing;
  const PlanSpec& published;
};

void print_json(std::ostream& out, const Report& p) {
  const auto& r = p.r;
  const auto& res = p.res;
  nlohmann::ordered_json j;
  j["model"] = r.model.name;
  j["cluster"] = r.cluster.name;
  j["gpus"] = r.gpus;
  j["global_batch"] = r.training.global_batch;
  j["dtype"] = to_string(r.training.dtype);
  if (r.training.dtype == Dtype::fp8) j["fp8_scaling"] = to_string(r.training.fp8_scaling);
  j["framework"] = framework_traits(r.framework).describe();
  j["device_memory_GB"] = in_GB(r.cluster.gpu.hbm);
  j["memory_headroom"] = r.memory_headroom;
  j["memory_limit_GB"] = in_GB(r.memory_limit());
  j["enumerated"] = res.enumerated;
  j["pruned_memory"] = res.pruned_memory;
  j["evaluated"] = res.evaluated;
  j["ranked"] = to_json(p.table);
  if (res.best_terapipe && res.best_without_terapipe)
    j["terapipe"] = {{"best_iteration_s", in_s(res.best_terapipe->analytic.iteration)},
                     {"token_slices", res.best_terapipe->plan.token_slices},
                     {"best_without_iteration_s", in_s(res.best_without_terapipe->analytic.iteration)},
                     {"speedup", res.best_without_terapipe->analytic.iteration / res.best_terapipe->analytic.iteration}};
  if (p.standing)
    j["published_plan"] = {{"plan", to_json(p.published)},
                           {"iteration_s", in_s(p.standing->prediction.iteration)},
                           {"fits", p.standing->fits},
                           {"rank", p.standing->rank ? nlohmann::ordered_json(*p.standing->rank) : nlohmann::ordered_json()},
                           {"of", p.standing->of}};
  out << j.dump(2) << "\n";
}

void print_console(std::ostream& out, const Report& p) {
  const auto& r = p.r;
  const auto& res = p.res;
  out << "Plans for " << r.model.name << " on " << r.gpus << " x " << r.cluster.gpu.name << " (" << r.cluster.name
      << "), global batch " << r.training.global_batch << ", " << to_string(r.training.dtype)
      << (r.training.dtype == Dtype::fp8 ? std::string(" (") + to_string(r.training.fp8_scaling) + " scaling)" : "")
      << ", as " << framework_traits(r.framework).describe() << " runs them\n  " << res.enumerated << " plans enumerated, " << res.pruned_memory << " do not fit in "
      << format_number(in_GB(r.memory_limit()), 1) << " GB per GPU (" << format_number(in_GB(r.cluster.gpu.hbm), 1)
      << " GB device less a " << format_number(100 * r.memory_headroom, 0) << "% headroom"
      << (r.cluster.host.memory > Bytes(0) ? ", and what they offload in the nodes' host memory" : "") << "), " << res.evaluated
      << " simulated\n  pace: " << cost_models::slowest_device(r.cluster.gpu, r.gpus).describe() << "\n\n"
      << format_console(p.table)
      << "  (TFLOP/s per GPU and MFU count model FLOPs, without recompute; spare: what is left of the "
         "memory limit;\n   range: where the iteration time should fall, the 10th-90th percentile of measured over "
         "predicted time in the validation cases of the same framework and GPU generation)\n";
  if (res.best_terapipe && res.best_without_terapipe) {
    const auto& t = *res.best_terapipe;
    out << "\nTeraPipe: best plan with token slicing (" << describe_plan(t.plan) << ", " << t.plan.token_slices.size()
        << " slices) " << format_number(in_s(t.analytic.iteration), 3) << " s; best without ("
        << describe_plan(res.best_without_terapipe->plan) << ") "
        << format_number(in_s(res.best_without_terapipe->analytic.iteration), 3) << " s; speedup "
        << format_number(res.best_without_terapipe->analytic.iteration / t.analytic.iteration, 2) << "x\n";
  }
  if (p.standing) {
    out << "\nThe experiment's own plan (" << describe_plan(p.published)
        << "): " << format_number(in_s(p.standing->prediction.iteration), 3) << " s per iteration, ";
    if (p.standing->rank)
      out << "rank " << *p.standing->rank << " of " << p.standing->of << " fitting plans\n";
    else
      out << "does not fit in the memory limit by the memory model (the device's, or for a plan that offloads, its "
             "nodes' host memory)\n";
  }
}

/// A progress display per search stage (a new bar when the stage changes), on stderr.
planner::SearchProgress stage_progress(std::ostream& err, ProgressMode mode,
                                       std::shared_ptr<std::unique_ptr<Progress>> current) {
  auto stage = std::make_shared<int>(-1);
  auto mu = std::make_shared<std::mutex>();
  return [&err, mode, current, stage, mu](planner::SearchStage s, long done, long total) {
    std::lock_guard<std::mutex> lock(*mu);
    if (*stage != int(s)) {
      if (*current) (*current)->finish();
      *stage = int(s);
      *current = std::make_unique<Progress>(err, mode,
                                            s == planner::SearchStage::evaluate ? "plan: evaluating plans"
                                                                                : "plan: re-simulating the best with SimGrid",
                                            total, "plans");
    }
    (*current)->update(done);
  };
}

}  // namespace

Command plan_command() {
  return Command{
      "plan",
      "Search parallel plans for a model on a cluster, rank them, write plan.json and launch lines.\n"
      "Defaults come from --experiment (default mt-nlg-530b-selene-280: MT-NLG 530B on 280 Selene nodes, "
      "batch 1920); --model/--cluster/--gpus/--global-batch override them, and the experiment's own plan "
      "is ranked among the results. Under mpirun (mpirun -np N foresight plan ...) the plans and the "
      "SimGrid re-ranking are spread over the ranks and rank 0 prints exactly what one process prints.",
      [](CLI::App& sub) {
        auto o = std::make_shared<Opts>();
        sub.add_option("--experiment", o->experiment, "Experiment whose model, cluster, GPUs and batch are the defaults")
            ->capture_default_str();
        sub.add_option("--model", o->model, "Model file or bundled name (overrides the experiment's)");
        sub.add_option("--cluster", o->cluster, "Cluster file or bundled name (overrides the experiment's)");
        sub.add_option("--gpus", o->gpus, "GPUs to use (default: the experiment's)")->check(whole_at_least(1));
        sub.add_option("--global-batch", o->global_batch, "Sequences per iteration")->check(whole_at_least(1));
        sub.add_option("--dtype", o->dtype,
                       "Training precision: bf16 | fp16 | fp8 | fp32 (default: the experiment's); it must be one the "
                       "cluster's GPU has a peak for");
        sub.add_option("--fp8-scaling", o->fp8_scaling,
                       "With --dtype fp8: delayed (Transformer Engine), tensorwise or rowwise (torchao's dynamic "
                       "scaling; tensorwise also Transformer Engine's current scaling), mxfp8 (Transformer "
                       "Engine's 32-element block scaling, Blackwell only) or blockwise (DeepSeek-V3's 1x128 / "
                       "128x128 scaling, Transformer Engine's Float8BlockScaling; Hopper and newer)");
        sub.add_option("--compile", o->compile,
                       "on | off: plan every candidate under torch.compile or eager (frameworks that compile: "
                       "pytorch, torchtitan; async TP needs it). Default: the experiment's setting");
        sub.add_option("--framework", o->framework,
                       "Whose implementation runs the plan: " + allowed_values<Framework>() +
                           " (default: the experiment's; megatron when --model or --cluster is given)");
        sub.add_option("--memory-headroom", o->memory_headroom,
                       "Fraction of device memory a plan must leave free beyond what the memory model counts "
                       "(allocator fragmentation averages 15% in LLM training, GMLake ASPLOS 2024; 0.10 is vLLM's "
                       "default reserve)")
            ->check(CLI::Range(0.0, 0.9))
            ->capture_default_str();
        sub.add_option("--top", o->top, "Ranked plans to print (and re-simulate with SimGrid)")
            ->check(CLI::Range(1, 1000))
            ->capture_default_str();
        sub.add_option("--threads", o->threads, "Worker threads (default: the cores this process may use; under mpirun, shared among the ranks of a node)")->check(whole_at_least(0));
        sub.add_flag("--no-simgrid", o->no_simgrid, "Rank with the analytic engine only");
        sub.add_flag("--terapipe", o->terapipe,
                     "Also search TeraPipe token-level pipelining (slices from TeraPipe's dynamic program) and "
                     "report its speedup over the best plan without it");
        sub.add_flag("--json", o->json, "Print machine-readable JSON");
        sub.add_option("--out", o->out, "Directory to write plan.json, launch.sh and megatron_args.txt into (and ds_config.json for a DeepSpeed plan, fms_fsdp_launch.txt for an fms-fsdp one)");
        sub.add_option("--pick", o->pick, "Which ranked plan to write with --out (1 = best)")->check(whole_at_least(1));
        return [o](std::ostream& out, std::ostream& err) {
          const Experiment base = load_experiment(resolve_scenario("experiments", o->experiment));
          planner::SearchRequest r = request_from(*o, base);
          const MpiWorld world;
          if (r.threads == 0) r.threads = int(planner::default_threads(world.local_size()));
          auto current = std::make_shared<std::unique_ptr<Progress>>();
          const ProgressMode mode = world.rank() == 0 ? progress_mode(::isatty(STDERR_FILENO)) : ProgressMode::off;
          const planner::SearchResult res = distributed_search(world, r, stage_progress(err, mode, current));
          if (*current) (*current)->finish();
          if (world.rank() != 0) return kExitOk;  // rank 0 reports for all

          // The experiment's own plan, when it is a plan for this request.
          std::optional<planner::PlanStanding> standing;
          if (o->model.empty() && o->cluster.empty() && r.gpus == base.gpus &&
              r.training.global_batch == base.training.global_batch) {
            PlanSpec published = base.plan;
            published.framework = r.framework;
            // A release choice names one of the experiment's framework's releases; another framework
            // runs its own.
            if (!framework_traits(r.framework).zero3_prefetch_choice) published.zero3_prefetch.reset();
            if (!framework_traits(r.framework).pipe_grads_partitioning) published.partitioned_pipe_grads.reset();
            // Ranked only when the requested framework can run it (--framework may name one without
            // the experiment's compile or per-op checkpointing, for instance).
            if (!check_plan(r.model, r.cluster, r.training, published, r.gpus))
              standing = planner::rank_of(r, res, published);
          }
          if (res.ranked.empty()) {
            std::string msg = "no plan fits: " + r.model.name + " on " + std::to_string(r.gpus) + " x " + r.cluster.gpu.name;
            if (res.closest)
              msg += "; the closest plan (" + describe_plan(*res.closest) + ") needs " +
                     format_number(in_GiB(res.closest_need), 1) + " GiB per GPU, " +
                     format_number(in_GiB(res.closest_shortfall), 1) + " GiB more than the " +
                     format_number(in_GiB(r.memory_limit()), 1) + " GiB a plan may use (device less the " +
                     format_number(100 * r.memory_headroom, 0) + "% headroom)";
            throw SpecError(kCommandLine, "", "", msg);
          }
          if (o->pick > int(res.ranked.size()))
            throw SpecError(kCommandLine, "--pick", std::to_string(o->pick),
                            "must be at most the " + std::to_string(res.ranked.size()) + " ranked plans");
          std::vector<std::string> written;
          if (!o->out.empty()) written = write_outputs(o->out, r, res.ranked[o->pick - 1]);

          const Report rep{r, res, plan_table(r, res), standing, base.plan};
          if (o->json) {
            print_json(out, rep);
            return kExitOk;
          }
          print_console(out, rep);
          if (!o->out.empty()) {
            out << "\nWrote " << o->out << "/";
            for (std::size_t i = 0; i < written.size(); ++i)
              out << (i == 0 ? "" : i + 1 == written.size() ? " and " : ", ") << written[i];
            out << " (plan rank " << o->pick << ")\n";
          }
          return kExitOk;
        };
      }};
}

}  // namespace foresight::cli
