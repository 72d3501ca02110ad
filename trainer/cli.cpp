#include "trainer/cli.hpp"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "calibrate/cpu_bench.hpp"
#include "core/cli_validators.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/plan_json.hpp"
#include "foresight/config.hpp"
#include "trainer/bootstrap.hpp"
#include "trainer/data.hpp"
#include "trainer/trainer.hpp"
#include "trainer/watchdog.hpp"

namespace foresight::trainer {

namespace {

ExecutablePlan read_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(SourceLocation{path, 0, 0}, "", "", "cannot be opened for reading");
  std::stringstream text;
  text << in.rdbuf();
  return parse_plan_json(text.str(), path);
}

// A deliberate failure, for testing what the other ranks do when one of them dies or freezes.
struct Fault {
  std::string kind;  // hang: the rank stops (SIGSTOP), as a frozen node; exit: _Exit(1); kill: SIGKILL
  int rank = -1;
  long step = -1;
};

// Parses KIND@RANK:STEP; throws SpecError naming the option on anything else.
Fault parse_fault(const std::string& text) {
  const auto at = text.find('@'), colon = text.find(':');
  Fault f;
  const auto bad = [&](const std::string& rule) {
    return SpecError(SourceLocation{"command line", 0, 0}, "--inject-fault", text, rule);
  };
  if (at == std::string::npos || colon == std::string::npos || colon < at) throw bad("must be KIND@RANK:STEP");
  f.kind = text.substr(0, at);
  if (f.kind != "hang" && f.kind != "exit" && f.kind != "kill") throw bad("KIND must be hang, exit or kill");
  char* end = nullptr;
  const std::string r = text.substr(at + 1, colon - at - 1), st = text.substr(colon + 1);
  f.rank = int(std::strtol(r.c_str(), &end, 10));
  if (r.empty() || *end != '\0' || f.rank < 0) throw bad("RANK must be a rank number >= 0");
  f.step = std::strtol(st.c_str(), &end, 10);
  if (st.empty() || *end != '\0' || f.step < 1) throw bad("STEP must be a step number >= 1");
  return f;
}

void inject(const Fault& f) {
  std::fprintf(stderr, "foresight-train: rank %d: injected fault '%s' after step %ld\n", f.rank, f.kind.c_str(), f.step);
  std::fflush(stderr);
  if (f.kind == "hang") std::raise(SIGSTOP);
  if (f.kind == "kill") std::raise(SIGKILL);
  std::_Exit(1);
}

// --time-ops: the CPU backend's ops timed in this process (calibrate/cpu_bench.hpp), the JSON
// written whole or not at all. Session 59 timed one GEMM shape at 0.43 ms in the foresight binary
// and 0.47-0.48 ms here, the same object code linked at other offsets (notes/status.md).
int time_ops(const std::string& path, bool quick, const std::string& backend) {
  if (backend != "cpu") {
    std::fprintf(stderr, "error: --time-ops times the cpu backend (--backend %s: its ops are timed by "
                 "foresight-commbench --ops)\n", backend.c_str());
    return 2;
  }
  // The folder is checked before a minute of timing, not after it.
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  if (!std::filesystem::is_directory(parent)) {
    std::fprintf(stderr, "error: --time-ops %s: folder %s does not exist\n", path.c_str(), parent.string().c_str());
    return 2;
  }
  try {
    const nlohmann::ordered_json j = calibrate::measure_cpu_backend({.quick = quick, .host_probe = {}}, std::cerr);
    write_file_atomically(path, j.dump(1) + "\n", "--time-ops");
  } catch (const SpecError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --time-ops %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  return 0;
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
  double timeout_s = 600;
  std::string fault_text;
  std::string precision_text = to_string(opt.precision);
  std::string time_ops_path;
  bool time_ops_quick = false;
  app.add_option("--plan", plan_path, "plan.json written by `foresight plan` (required unless --time-ops)");
  app.add_option("--summary", summary_path, "write the JSON summary (per-step losses, measured vs predicted) here");
  app.add_option("--backend", opt.backend,
                 "compute backend: cpu (the reference, in the --precision recipe), cuda (one GPU per rank, fp32 GEMMs) or cuda-tf32 "
                 "(fp32 GEMMs on TF32 tensor cores; under bf16 both run bf16 GEMMs); the cuda backends need a CUDA build "
                 "and a visible GPU. cpu-staged: "
                 "cpu with every message copied through the host-staging path the cuda backends use (a test)")
      ->capture_default_str();
  app.add_option("--precision", precision_text,
                 "mixed-precision recipe: fp32 (every tensor fp32) or bf16 (Megatron-LM's --bf16 with fp32 "
                 "gradient accumulation and all-reduce: bf16 weights' working copy and activations, rounded to "
                 "nearest even after every op; GEMMs accumulate in fp32; LayerNorm and softmax statistics, "
                 "main gradients, master weights and AdamW moments fp32). bf16 on the cpu backends is the tested "
                 "reference (floats holding bf16 values); on the cuda backends it stores packed 2-byte bf16 and runs "
                 "bf16 cuBLAS GEMMs with fp32 accumulation (compiled, not yet run on a GPU)")
      ->capture_default_str();
  std::string comm_text;
  app.add_option("--comm", comm_text,
                 "what carries collectives and pipeline messages: mpi, or nccl (bootstrapped over MPI; on the cpu "
                 "backend the NCCL code runs over its MPI stand-in, a test). Default: nccl for the cuda backends in "
                 "builds with NCCL, else mpi");
  app.add_option("--seed", opt.seed, "seed of the initial weights and of the data order")
      ->check(cli::unsigned_whole())
      ->capture_default_str();
  app.add_option("--data", data,
                 std::string("override plan.data: synthetic | text (the default corpus, ") + kDefaultTextPath +
                     ") | a file path");
  app.add_option("--steps", steps, "override plan.steps (the learning-rate schedule spans them)")
      ->check(cli::whole_at_least(1));
  app.add_option("--stop-after", opt.stop_after, "stop and checkpoint after this step, as if interrupted (0: never)")
      ->check(cli::whole_at_least(0));
  app.add_flag("--resume", opt.resume, "continue from the newest checkpoint in the checkpoint directory");
  app.add_option("--checkpoint-dir", checkpoint_dir, "override plan.checkpoint_dir");
  app.add_option("--checkpoint-every", opt.checkpoint_every, "checkpoint every N steps besides the last (0: only the last)")
      ->check(cli::whole_at_least(0));
  app.add_option("--lr", opt.optimizer.lr, "peak learning rate")
      ->check(cli::number_at_least(0, true, "a learning rate"))
      ->capture_default_str();
  app.add_option("--min-lr", opt.optimizer.min_lr, "learning rate at the end of the cosine decay (at most --lr)")
      ->check(cli::number_at_least(0, false, "a learning rate"))
      ->capture_default_str();
  app.add_option("--warmup-steps", opt.optimizer.warmup_steps, "linear warm-up steps")
      ->check(cli::whole_at_least(0))
      ->capture_default_str();
  app.add_option("--weight-decay", opt.optimizer.weight_decay, "AdamW decoupled weight decay (matrices only)")
      ->check(cli::number_at_least(0, false, "a decay factor per step, times the learning rate"))
      ->capture_default_str();
  app.add_option("--clip-grad", opt.optimizer.clip_norm, "global gradient-norm clip (0: off)")
      ->check(cli::number_at_least(0, false, "a gradient norm; 0 turns clipping off"))
      ->capture_default_str();
  app.add_option("--dp-bucket-kB", bucket_kB, "gradient all-reduce bucket size, kB (1024 bytes)")
      ->check(cli::number_at_least(0, true, "a bucket size in kB"))
      ->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops, "peak TFLOP/s of one rank's device, for MFU (none: MFU not reported)")
      ->check(cli::number_at_least(0, true, "TFLOP/s"));
  app.add_flag("--quiet", quiet, "no per-step log lines");
  app.add_option("--timeout-s", timeout_s,
                 "a rank that finishes no step for this long exits with code 4, and the launcher ends the job "
                 "(a peer died or hung); 0: wait forever")
      ->capture_default_str();
  app.add_option("--inject-fault", fault_text,
                 "testing aid: KIND@RANK:STEP makes RANK fail after STEP; KIND = hang (SIGSTOP, a frozen node), "
                 "exit (_Exit(1), a crash), kill (SIGKILL)");
  app.add_option("--time-ops", time_ops_path,
                 "calibration mode, what `foresight calibrate --backend cpu` runs: time every op of the CPU backend "
                 "in this binary, the one that runs them in training, write them to this file as JSON and exit "
                 "(no plan; the speed of the backend's loops depends on where they land in a binary, so they are "
                 "timed where they run)");
  app.add_flag("--time-ops-quick", time_ops_quick, "with --time-ops: a small grid of shapes (smoke tests)");
  app.add_flag("--one-message-at-a-time", opt.one_message_at_a_time,
               "testing aid: issue each pipeline send and receive alone instead of in batches (the old executor; "
               "1F1B then deadlocks under NCCL, whose sends wait for their receives)");
  app.footer("Exit codes: 0 done, 2 bad input (file, field, value and rule on stderr), 3 non-finite loss or "
             "gradient norm (step on stderr), 4 no progress within --timeout-s (a peer died or hung).\n"
             "Environment (the first three read by --backend cuda; a value outside a listed set exits 2 naming it):\n"
             "  FORESIGHT_ATTENTION=fused|pipelined|unfused  bf16 attention: the tensor-core kernel (default), its "
             "cp.async form, or Megatron-LM's unfused path\n"
             "  FORESIGHT_GEMM=lt|cublas  bf16 GEMMs through kernels::gemm (cuBLASLt, the GEMM foresight calibrate "
             "times; default) or cublasGemmEx\n"
             "  FORESIGHT_GEMM_EPILOGUE=gelu|bias|none  bias and GeLU in cuBLASLt's epilogues (default), the bias "
             "only, or separate kernels\n"
             "  FORESIGHT_PROFILE_OPS=1  print each op's time (calls x median) when the run ends: GPU time from events "
             "on --backend cuda, the host clock on --backend cpu (ops named as foresight calibrate --backend cpu "
             "names them)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!time_ops_path.empty()) return time_ops(time_ops_path, time_ops_quick, opt.backend);
  if (plan_path.empty()) {
    std::fprintf(stderr, "error: --plan is required (the plan.json to run), or --time-ops FILE\n");
    return 2;
  }
  opt.data = data;
  opt.checkpoint_dir = checkpoint_dir;
  opt.steps = steps;
  opt.peak_tflops = peak_tflops;
  std::optional<Fault> fault;
  try {
    if (!std::isfinite(timeout_s) || timeout_s < 0)
      throw SpecError(SourceLocation{"command line", 0, 0}, "--timeout-s", std::to_string(timeout_s),
                      "must be a number of seconds >= 0");
    if (opt.optimizer.min_lr > opt.optimizer.lr)
      throw SpecError(SourceLocation{"command line", 0, 0}, "--min-lr", std::to_string(opt.optimizer.min_lr),
                      "must be at most the peak learning rate --lr (" + std::to_string(opt.optimizer.lr) +
                          "): the cosine decay falls from --lr to --min-lr (give --min-lr with a low --lr)");
    if (bucket_kB > 1e12)
      throw SpecError(SourceLocation{"command line", 0, 0}, "--dp-bucket-kB", std::to_string(bucket_kB),
                      "must be at most 1e12 kB (a petabyte; one bucket then holds any model's gradients)");
    opt.dp_bucket_bytes = std::int64_t(bucket_kB * 1024.0);
    if (!fault_text.empty()) fault = parse_fault(fault_text);
    const std::optional<Precision> precision = parse_enum<Precision>(precision_text);
    if (!precision)
      throw SpecError(SourceLocation{"command line", 0, 0}, "--precision", precision_text,
                      "must be one of " + allowed_values<Precision>());
    opt.precision = *precision;
    if (comm_text.empty()) {
      const bool cuda = opt.backend.rfind("cuda", 0) == 0;
      opt.comm = cuda && config::kHaveNccl ? CommLibrary::nccl : CommLibrary::mpi;
    } else if (const auto c = parse_enum<CommLibrary>(comm_text)) {
      opt.comm = *c;
    } else {
      throw SpecError(SourceLocation{"command line", 0, 0}, "--comm", comm_text,
                      "must be one of " + allowed_values<CommLibrary>());
    }
  } catch (const SpecError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }

  Runtime runtime(argc, argv);
  int rank = 0;
  try {
    auto world = runtime.world();
    rank = world->rank();
    Watchdog watchdog(timeout_s, rank);
    ExecutablePlan plan;
    agree(*world, [&] { plan = read_plan(plan_path); });
    const int total = steps.value_or(plan.steps);
    if (rank == 0 && !quiet)
      if (const std::string note = sized_for_gpus_note(plan, opt.backend, world->size()); !note.empty())
        std::fprintf(stderr, "note: %s\n", note.c_str());
    if (rank == 0 && !quiet)
      std::printf("foresight-train: %s on %d rank(s): tp=%d pp=%d dp=%d (%s), %s schedule, %d micro-batches of %d, "
                  "recompute %s, zero %d, %d steps, precision %s\n",
                  plan.model.name.c_str(), world->size(), plan.plan.tp, plan.plan.pp, plan.plan.dp,
                  to_string(plan.plan.placement), to_string(plan.plan.schedule), plan.plan.micro_batches(plan.training),
                  plan.plan.micro_batch, to_string(plan.plan.recompute), plan.plan.zero, total, to_string(opt.precision));
    const RunSummary s = train(plan, plan_path, opt, *world, [&](const StepRecord& r) {
      if (rank == 0 && !quiet) {
        std::printf("%s\n", format_step(r, total).c_str());
        std::fflush(stdout);
      }
      watchdog.beat(r.step);
      if (fault && fault->rank == rank && fault->step == r.step) inject(*fault);
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
