#include "trainer/cli.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "core/plan_json.hpp"
#include "trainer/bootstrap.hpp"
#include "trainer/data.hpp"
#include "trainer/trainer.hpp"

namespace foresight::trainer {

namespace {

ExecutablePlan read_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(SourceLocation{path, 0, 0}, "", "", "cannot be opened for reading");
  std::stringstream text;
  text << in.rdbuf();
  return parse_plan_json(text.str(), path);
}

}  // namespace

int run_trainer_cli(int argc, char** argv) {
  CLI::App app{"foresight-train: run the training a plan.json describes (launch with mpirun -np <gpus>)"};
  std::string plan_path, summary_path;
  TrainerOptions opt;
  std::optional<std::string> data, checkpoint_dir;
  std::optional<int> steps;
  double bucket_kB = double(opt.dp_bucket_bytes) / 1024.0;
  std::optional<double> peak_tflops;
  bool quiet = false;
  app.add_option("--plan", plan_path, "plan.json written by `foresight plan`")->required();
  app.add_option("--summary", summary_path, "write the JSON summary (per-step losses, measured vs predicted) here");
  app.add_option("--backend", opt.backend, "compute backend")->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the initial weights and of the data order")->capture_default_str();
  app.add_option("--data", data,
                 std::string("override plan.data: synthetic | text (the default corpus, ") + kDefaultTextPath +
                     ") | a file path");
  app.add_option("--steps", steps, "override plan.steps (the learning-rate schedule spans them)");
  app.add_option("--stop-after", opt.stop_after, "stop and checkpoint after this step, as if interrupted (0: never)");
  app.add_flag("--resume", opt.resume, "continue from the newest checkpoint in the checkpoint directory");
  app.add_option("--checkpoint-dir", checkpoint_dir, "override plan.checkpoint_dir");
  app.add_option("--checkpoint-every", opt.checkpoint_every, "checkpoint every N steps besides the last (0: only the last)");
  app.add_option("--lr", opt.optimizer.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", opt.optimizer.min_lr, "learning rate at the end of the cosine decay")->capture_default_str();
  app.add_option("--warmup-steps", opt.optimizer.warmup_steps, "linear warm-up steps")->capture_default_str();
  app.add_option("--weight-decay", opt.optimizer.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str();
  app.add_option("--clip-grad", opt.optimizer.clip_norm, "global gradient-norm clip (0: off)")->capture_default_str();
  app.add_option("--dp-bucket-kB", bucket_kB, "gradient all-reduce bucket size, kB (1024 bytes)")->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops, "peak TFLOP/s of one rank's device, for MFU (none: MFU not reported)");
  app.add_flag("--quiet", quiet, "no per-step log lines");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  opt.data = data;
  opt.checkpoint_dir = checkpoint_dir;
  opt.steps = steps;
  opt.peak_tflops = peak_tflops;
  opt.dp_bucket_bytes = std::int64_t(bucket_kB * 1024.0);

  Runtime runtime(argc, argv);
  int rank = 0;
  try {
    auto world = runtime.world();
    rank = world->rank();
    ExecutablePlan plan;
    agree(*world, [&] { plan = read_plan(plan_path); });
    const int total = steps.value_or(plan.steps);
    if (rank == 0 && !quiet)
      std::printf("foresight-train: %s on %d rank(s): tp=%d pp=%d dp=%d (%s), %s schedule, %d micro-batches of %d, "
                  "recompute %s, zero %d, %d steps\n",
                  plan.model.name.c_str(), world->size(), plan.plan.tp, plan.plan.pp, plan.plan.dp,
                  to_string(plan.plan.placement), to_string(plan.plan.schedule), plan.plan.micro_batches(plan.training),
                  plan.plan.micro_batch, to_string(plan.plan.recompute), plan.plan.zero, total);
    const RunSummary s = train(plan, plan_path, opt, *world, [&](const StepRecord& r) {
      if (rank == 0 && !quiet) {
        std::printf("%s\n", format_step(r, total).c_str());
        std::fflush(stdout);
      }
    });
    if (rank == 0) {
      if (!summary_path.empty()) {
        std::ofstream out(summary_path);
        out << summary_json(s, plan, plan_path).dump(2) << "\n";
        if (!out) throw SpecError(SourceLocation{summary_path, 0, 0}, "--summary", summary_path, "cannot be written");
      }
      if (!quiet) std::printf("foresight-train: %s; data %s; backend %s (%s)\n", s.status.c_str(), s.data.c_str(),
                              s.backend.c_str(), s.compute_dtype.c_str());
    }
    if (s.status.rfind("non-finite", 0) == 0) {
      if (rank == 0) std::fprintf(stderr, "error: %s: stopped\n", s.status.c_str());
      return 3;
    }
    return 0;
  } catch (const SpecError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const PeerFailure&) {
    return 2;  // the failing rank printed the error
  } catch (const std::exception& e) {
    std::fprintf(stderr, "foresight-train: rank %d: internal error: %s\n", rank, e.what());
    runtime.abort(1);
  }
}

}  // namespace foresight::trainer
