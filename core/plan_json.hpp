// plan.json: the executable plan the planner writes and the trainer reads (DESIGN.md "The
// executable plan"). One schema, one writer and one reader, both here in core/ so the planner and
// the trainer cannot drift apart. The reader checks every field (SpecError naming the field).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/experiment.hpp"

namespace foresight {

inline constexpr int kPlanJsonSchemaVersion = 1;

/// The prediction that came with a plan, so the trainer's summary can print predicted vs measured.
struct PlanPrediction {
  double iteration_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs
  double memory_GB = 0;       // most loaded GPU
  std::string engine;
};

struct ExecutablePlan {
  ModelSpec model;
  std::string cluster;  // name, for the record
  int gpus_per_node = 8;
  TrainingSpec training;
  PlanSpec plan;
  int gpus = 0;
  std::string data = "synthetic";  // "synthetic" or a path to a text file
  int steps = 20;
  std::string checkpoint_dir = "checkpoints";
  std::optional<PlanPrediction> prediction;
};

nlohmann::ordered_json to_json(const ExecutablePlan& p);

/// Parses and validates plan.json text; `source` names it in errors.
ExecutablePlan parse_plan_json(const std::string& text, const std::string& source);

/// The foresight-train flags that run a plan on GPUs in its precision recipe: the CUDA backend
/// (cuda-tf32 for a tf32 plan), --precision fp32 for fp32/tf32 plans and bf16 otherwise (the
/// trainer has no fp16 or fp8 recipe).
std::string gpu_train_flags(const ExecutablePlan& p);

/// The launch lines for a plan: mpirun and Slurm srun, one rank per GPU.
std::string launch_script(const ExecutablePlan& p, const std::string& plan_path);

/// The equivalent Megatron-LM pretrain_gpt.py arguments, where the plan maps onto them; empty when
/// it does not (e.g. TeraPipe slicing), with the reason in *why_not where one is passed.
std::string megatron_arguments(const ExecutablePlan& p, std::string* why_not = nullptr);

/// The DeepSpeed configuration (ds_config.json) a plan of framework deepspeed runs with: the batch
/// (train_batch_size = micro-batch x gradient_accumulation_steps x data-parallel ranks, which
/// DeepSpeed asserts), the precision, the ZeRO stage with the buckets and offload the simulator
/// priced, and activation checkpointing with cpu_checkpointing for offloaded activations. Tensor
/// and pipeline parallelism are the model code's (Megatron-DeepSpeed's mpu and PipelineModule),
/// not the config's. Null for another framework, or where DeepSpeed has no key for the plan, with
/// the reason in *why_not where one is passed.
nlohmann::ordered_json deepspeed_config(const ExecutablePlan& p, std::string* why_not = nullptr);

/// The launch line of IBM's fms-fsdp trainer (foundation-model-stack/fms-fsdp main_training_llama.py,
/// whose training config takes each field as a --flag=value) for a plan of framework fms-fsdp:
/// the ibm-fms LLaMA variant whose shapes are the model's (fms_fsdp/utils/config_utils.py), the
/// sharding strategy (fsdp, or hsdp over each node), activation checkpointing with the share of
/// blocks recomputed (selective_checkpointing), the per-GPU batch, the sequence length and
/// torch.compile. Empty for another framework, or where fms-fsdp has no variant or flag for the
/// plan, with the reason in *why_not where one is passed.
std::string fms_fsdp_arguments(const ExecutablePlan& p, std::string* why_not = nullptr);

}  // namespace foresight
