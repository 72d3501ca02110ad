// The note foresight-train prints when a plan made for GPUs is started on a CPU backend.
#include <gtest/gtest.h>

#include "trainer/trainer.hpp"

namespace foresight::trainer {
namespace {

ExecutablePlan plan(ModelSpec m, int global_batch) {
  PlanSpec q;
  q.tp = 2;
  q.dp = 4;
  return ExecutablePlan{.model = std::move(m),
                        .cluster = "selene",
                        .gpus_per_node = 8,
                        .training = {.global_batch = global_batch, .dtype = Dtype::bf16, .optimizer = Optimizer::adam},
                        .plan = q,
                        .gpus = 8,
                        .prediction = PlanPrediction{.iteration_s = 1.25, .tokens_per_s = 0, .tflops_per_gpu = 0,
                                                     .memory_GB = 31.5, .engine = "analytic"}};
}

TEST(GpuPlanNote, SaysSoWhenAGpuPlanRunsOnTheCpu) {
  // GPT-3 1.3B, 512 x 2048 tokens: about 6 x 1.3e9 x 1.05e6 = 8e15 FLOP a step, over 8 ranks at
  // 1e11 FLOP/s each about 1e4 s, far beyond a minute.
  const ModelSpec gpt13{.name = "gpt3-1.3b", .layers = 24, .hidden = 2048, .heads = 16, .seq_len = 2048,
                        .vocab = 51200, .ffn_hidden = 8192, .kv_heads = 16, .moe = std::nullopt};
  const ExecutablePlan p = plan(gpt13, 512);
  const std::string note = sized_for_gpus_note(p, "cpu", 8);
  EXPECT_NE(note.find("planned for the GPUs of selene"), std::string::npos) << note;
  EXPECT_NE(note.find("predicted 1.25 s per step, 31.5 GB per GPU"), std::string::npos) << note;
  EXPECT_NE(note.find("--backend cuda --precision bf16"), std::string::npos) << note;
  EXPECT_NE(note.find("e+04 s per step"), std::string::npos) << note;  // ~1e4 s
  EXPECT_FALSE(sized_for_gpus_note(p, "cpu-staged", 8).empty());
  // On the GPU backends: nothing to say.
  EXPECT_TRUE(sized_for_gpus_note(p, "cuda", 8).empty());
  EXPECT_TRUE(sized_for_gpus_note(p, "cuda-tf32", 8).empty());
  // An fp32 plan is pointed at the fp32 recipe, as its launch.sh runs it.
  ExecutablePlan f32 = p;
  f32.training.dtype = Dtype::fp32;
  const std::string fp32_note = sized_for_gpus_note(f32, "cpu", 8);
  EXPECT_NE(fp32_note.find("--backend cuda --precision fp32"), std::string::npos) << fp32_note;
  EXPECT_EQ(fp32_note.find("bf16"), std::string::npos) << fp32_note;
}

TEST(GpuPlanNote, QuietForPlansTheCpuRunsInSeconds) {
  // The test layouts' tiny model (4 layers, hidden 32, 8 x 16 tokens): about 1e8 FLOP a step.
  const ModelSpec tiny{.name = "tiny", .layers = 4, .hidden = 32, .heads = 4, .seq_len = 16, .vocab = 256,
                       .ffn_hidden = 128, .kv_heads = 4, .moe = std::nullopt};
  EXPECT_TRUE(sized_for_gpus_note(plan(tiny, 8), "cpu", 8).empty());
}

}  // namespace
}  // namespace foresight::trainer
