// foresight report: gathers what the report shows (validation against published runs, the
// closed loop when measured, one iteration's timeline, a plan search with its breakdowns and
// Pareto front) into report-data.json, then has reports/tools/make_report.py draw the figures
// with matplotlib and write report.html and report.md. The numbers come from here; the Python
// side only draws and lays out.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/cli/cli.hpp"
#include "core/cli_validators.hpp"
#include "core/plan_json.hpp"
#include "core/spec_json.hpp"
#include "core/scenario.hpp"
#include "foresight/config.hpp"
#include "planner/search.hpp"
#include "planner/validation.hpp"
#include "sim/costing.hpp"

namespace foresight::cli {

namespace {

const SourceLocation kCommandLine{"<command line>", 0, 0};

/// The Python with matplotlib: $FORESIGHT_PYTHON, else Debian's /usr/bin/python3 (where
/// python3-matplotlib installs), else python3 from PATH.
std::string python() {
  if (const char* p = std::getenv("FORESIGHT_PYTHON"); p && *p) return p;
  if (std::filesystem::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

/// Runs argv[0] with its arguments; returns its exit status (127 when it could not start).
int run_process(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

nlohmann::ordered_json search_json(const planner::SearchRequest& r, const planner::SearchResult& res,
                                   const std::optional<planner::PlanStanding>& standing, const PlanSpec& published) {
  nlohmann::ordered_json j{{"model", r.model.name},   {"cluster", r.cluster.name},
                           {"gpus", r.gpus},          {"global_batch", r.training.global_batch},
                           {"seq_len", r.model.seq_len}, {"framework", to_string(r.framework)},
                           {"device_memory_GB", in_GB(r.cluster.gpu.hbm)},
                           {"enumerated", res.enumerated}, {"pruned_memory", res.pruned_memory},
                           {"evaluated", res.evaluated}};
  nlohmann::ordered_json ranked = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < res.ranked.size(); ++i) {
    const auto& c = res.ranked[i];
    nlohmann::ordered_json pj{{"rank", i + 1},
                              {"plan_text", describe_plan(c.plan)},
                              {"plan", to_json(c.plan)},
                              {"iteration_s", in_s(c.analytic.iteration)},
                              {"simgrid_iteration_s", c.simgrid ? nlohmann::ordered_json(in_s(c.simgrid->iteration))
                                                                : nlohmann::ordered_json()},
                              {"tokens_per_s", c.analytic.tokens_per_s},
                              {"tflops_per_gpu", c.analytic.tflops_per_gpu},
                              {"mfu", c.analytic.mfu},
                              {"memory_GB", in_GB(c.peak_memory)}};
    pj["iteration_s_range"] = c.analytic.band ? nlohmann::ordered_json::array({in_s(c.analytic.iteration_low()),
                                                                              in_s(c.analytic.iteration_high())})
                                              : nlohmann::ordered_json();
    pj["breakdown_s"] = to_json(sim::prediction_sections(c.analytic))["breakdown_s"];
    ranked.push_back(pj);
  }
  j["ranked"] = ranked;
  nlohmann::ordered_json fitting = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < res.fitting_iterations_s.size(); ++i)
    fitting.push_back({{"iteration_s", res.fitting_iterations_s[i]}, {"memory_GB", res.fitting_memory_GB[i]}});
  j["fitting"] = fitting;
  nlohmann::ordered_json pareto = nlohmann::ordered_json::array();
  for (const auto& c : res.pareto)
    pareto.push_back({{"plan_text", describe_plan(c.plan)},
                      {"iteration_s", in_s(c.analytic.iteration)},
                      {"tokens_per_s", c.analytic.tokens_per_s},
                      {"memory_GB", in_GB(c.peak_memory)}});
  j["pareto"] = pareto;
  if (standing)
    j["published_plan"] = {{"plan_text", describe_plan(published)},
                           {"iteration_s", in_s(standing->prediction.iteration)},
                           {"rank", standing->rank ? nlohmann::ordered_json(*standing->rank) : nlohmann::ordered_json()},
                           {"of", standing->of}};
  return j;
}

}  // namespace

Command report_command() {
  struct Opts {
    std::string out = "reports", engine = "analytic", plan_experiment = "mt-nlg-530b-selene-280",
                timeline_experiment = "sc21-table1-145b", closed_loop;
    int top = 10, threads = 0;
    bool json = false;
  };
  return Command{
      "report",
      "Write the HTML and markdown report: predicted vs published, predicted vs measured (closed loop, when "
      "measured), a per-stage timeline, breakdown bars of the best plans and the planner's Pareto front. Figures "
      "are drawn with matplotlib (Debian: python3-matplotlib).",
      [](CLI::App& sub) {
        auto o = std::make_shared<Opts>();
        sub.add_option("--out", o->out, "Output directory (report.html, report.md, figures/)")->capture_default_str();
        sub.add_option("--engine", o->engine, "Engine for the validation section: analytic or simgrid")
            ->check(CLI::IsMember({"analytic", "simgrid"}))
            ->capture_default_str();
        sub.add_option("--plan-experiment", o->plan_experiment,
                       "Experiment whose model, cluster, GPUs and batch the plan search uses")
            ->capture_default_str();
        sub.add_option("--timeline-experiment", o->timeline_experiment, "Experiment drawn as a timeline")
            ->capture_default_str();
        sub.add_option("--closed-loop", o->closed_loop,
                       "Closed-loop results (from validate --local; default OUT/closed-loop.json when it exists)");
        sub.add_option("--top", o->top, "Plans in the breakdown bars")->check(CLI::Range(1, 50))->capture_default_str();
        sub.add_option("--threads", o->threads, "Worker threads for the search (default: all cores)")
            ->check(whole_at_least(0));
        sub.add_flag("--json", o->json, "Print the paths written as JSON");
        return [o](std::ostream& out, std::ostream& err) {
          const auto engine = *parse_enum<sim::EngineKind>(o->engine);
          // Load every input before writing anything, so that a bad name leaves nothing behind.
          const Experiment plan_base = load_experiment(resolve_scenario("experiments", o->plan_experiment));
          const Experiment timeline = load_experiment(resolve_scenario("experiments", o->timeline_experiment));
          const std::filesystem::path dir(o->out);
          std::string loop_path = o->closed_loop;
          if (loop_path.empty() && std::filesystem::exists(dir / "closed-loop.json")) loop_path = (dir / "closed-loop.json").string();
          nlohmann::ordered_json loop;
          if (!loop_path.empty()) {
            std::ifstream f(loop_path);
            if (!f) throw SpecError(kCommandLine, "--closed-loop", loop_path, "cannot be read");
            loop = nlohmann::ordered_json::parse(f, nullptr, false);
            if (loop.is_discarded() || !loop.contains("cases") || !loop["cases"].is_array())
              throw SpecError(SourceLocation{loop_path, 0, 0}, "cases", "", "must be a JSON object with a cases array");
          }

          err << "report: validating against published runs\n";
          const planner::ValidationReport val = planner::validate_all(scenarios_dir(), engine);

          err << "report: simulating " << timeline.name << " for the timeline\n";
          nlohmann::json trace;
          const sim::Prediction tl = sim::predict(timeline, sim::EngineKind::analytic, &trace);

          err << "report: searching plans for " << plan_base.name << "\n";
          planner::SearchRequest r;
          r.model = plan_base.model;
          r.cluster = plan_base.cluster;
          r.training = plan_base.training;
          r.gpus = plan_base.gpus;
          r.framework = plan_base.plan.framework;
          r.compile = plan_base.plan.compile;  // the experiment's torch.compile setting (its framework's)
          r.zero3_prefetch = plan_base.plan.zero3_prefetch;  // and the release it names, as `plan` carries them
          r.partitioned_pipe_grads = plan_base.plan.partitioned_pipe_grads;
          r.top_k = o->top;
          r.threads = o->threads;
          r.simgrid_top = false;  // the bars and the front are analytic; SimGrid adds minutes here
          const planner::SearchResult res = planner::search_plans(r);
          std::optional<planner::PlanStanding> standing;
          if (!res.ranked.empty()) standing = planner::rank_of(r, res, plan_base.plan);
          if (res.ranked.empty())
            throw SpecError(kCommandLine, "--plan-experiment", o->plan_experiment, "no plan fits its GPUs, so there is nothing to chart");

          nlohmann::ordered_json data;
          std::string command = "foresight report --out " + o->out + " --engine " + o->engine + " --plan-experiment " +
                                o->plan_experiment + " --timeline-experiment " + o->timeline_experiment;
          data["command"] = command;
          data["version"] = config::kVersion;
          data["validation"] = planner::validation_json(val, engine);
          data["closed_loop"] = loop;
          data["timeline"] = {{"experiment", timeline.name}, {"engine", "analytic"}, {"iteration_s", in_s(tl.iteration)},
                              {"trace_file", "report-trace.json"}};
          data["plan_search"] = search_json(r, res, standing, plan_base.plan);

          std::filesystem::create_directories(dir / "figures");
          write_file_atomically(dir / "report-trace.json", trace.dump());
          write_file_atomically(dir / "report-data.json", data.dump(1) + "\n");

          const std::string script = std::string(config::kSourceDir) + "/reports/tools/make_report.py";
          const int rc = run_process({python(), script, (dir / "report-data.json").string(), dir.string()});
          if (rc != 0) {
            err << "foresight: the report renderer (" << script << ") failed with exit code " << rc
                      << "; it needs Python 3 with matplotlib (Debian: apt-get install python3-matplotlib), or set "
                         "FORESIGHT_PYTHON to such an interpreter\n";
            return kExitInternal;
          }
          if (o->json) {
            out << nlohmann::ordered_json{{"html", (dir / "report.html").string()},
                                          {"markdown", (dir / "report.md").string()},
                                          {"data", (dir / "report-data.json").string()},
                                          {"trace", (dir / "report-trace.json").string()}}
                       .dump(2)
                << "\n";
          } else {
            out << "Wrote " << (dir / "report.html").string() << " and " << (dir / "report.md").string()
                << " (figures in " << (dir / "figures").string() << ", data in report-data.json)\n";
          }
          return kExitOk;
        };
      }};
}

}  // namespace foresight::cli
