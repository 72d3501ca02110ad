// Whole one-rank training runs for the trainer's GPU tests (trainer_backend_gpu_test.cpp,
// trainer_backend_bf16_gpu_test.cpp): a tiny GPT plan, and what a run of it on a backend under a
// precision recipe reports. The run goes through train() with a one-rank communicator, as
// foresight-train does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/plan_json.hpp"
#include "trainer/communicator.hpp"
#include "trainer/precision.hpp"
#include "trainer/trainer.hpp"

namespace foresight::trainer::gpu_test {

/// What a one-rank run reports.
struct RunResult {
  std::vector<double> losses;  // per step
  std::string compute_dtype;
  double memory_MiB = 0;       // the largest step's peak backend allocation
};

/// A 6-step one-rank run of `plan_json` on `backend` under `precision`.
inline RunResult run(const std::string& plan_json, const std::string& backend, Precision precision) {
  const ExecutablePlan plan = parse_plan_json(plan_json, "inline plan");
  TrainerOptions opt;
  opt.backend = backend;
  opt.precision = precision;
  opt.steps = 6;
  opt.checkpoint_dir = ::testing::TempDir() + "/ck_" + backend + "_" + to_string(precision);
  auto self = make_self_communicator();
  RunResult r;
  const RunSummary s = train(plan, "inline plan", opt, *self, [&](const StepRecord& x) {
    r.losses.push_back(x.loss);
    r.memory_MiB = std::max(r.memory_MiB, x.memory_MiB);
  });
  EXPECT_EQ(s.status, "ok");
  r.compute_dtype = s.compute_dtype;
  return r;
}

/// Per-step losses of a one-rank fp32 run of `plan_json` on `backend`.
inline std::vector<double> losses(const std::string& plan_json, const std::string& backend) {
  return run(plan_json, backend, Precision::fp32).losses;
}

/// A 4-layer, 64-wide GPT on one GPU; `plan_extra` and `model_extra` are appended to the plan's
/// "plan" and "model" objects (schedule, recompute, slices; MoE).
/// `heads` 1 gives one 64-wide head, a head dim the fused attention kernels take (the bf16 CUDA
/// backend then runs kernels/attention.cu instead of the unfused path).
inline std::string tiny_plan(const std::string& plan_extra, const std::string& model_extra, int heads = 4) {
  return R"({"schema_version": 1,
  "model": {"name": "tiny", "layers": 4, "hidden": 64, "heads": )" + std::to_string(heads) +
         R"(, "seq_len": 32, "vocab": 256)" + model_extra + R"(},
  "cluster": {"name": "one-gpu", "gpus_per_node": 1},
  "training": {"global_batch": 8, "dtype": "fp32", "optimizer": "adam"},
  "plan": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 2, "placement": "tp-dp-pp", "zero": 0,
           "framework": "foresight-train")" + plan_extra + R"(},
  "gpus": 1, "data": "text", "steps": 6,
  "prediction": {"iteration_s": 0.05, "tokens_per_s": 2560, "tflops_per_gpu": 0.001, "memory_GB": 0.01, "engine": "test"}})";
}

/// The layouts the whole-run tests train, each a tiny_plan's extras: dense 1F1B, TeraPipe slices
/// with full recompute, selective recompute, MoE.
struct RunCase {
  const char* name;
  std::string plan, model;
  int heads = 4;
};
inline std::vector<RunCase> run_cases() {
  return {
      {"dense 1f1b", R"(, "schedule": "1f1b", "recompute": "none")", ""},
      {"terapipe slices + full recompute", R"(, "schedule": "terapipe", "recompute": "full", "token_slices": [8, 24])", ""},
      {"selective recompute", R"(, "schedule": "1f1b", "recompute": "selective")", ""},
      {"moe", R"(, "schedule": "1f1b", "recompute": "none")",
       R"(, "moe": {"experts": 4, "top_k": 2, "capacity_factor": 1.25, "every": 2})"},
      {"dense 1f1b, one 64-wide head", R"(, "schedule": "1f1b", "recompute": "none")", "", 1},
      {"terapipe slices, one 64-wide head", R"(, "schedule": "terapipe", "recompute": "selective", "token_slices": [8, 24])",
       "", 1},
  };
}

}  // namespace foresight::trainer::gpu_test
