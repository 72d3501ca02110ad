// DeepSpeed's pipeline partitioning against hand-worked partitions: DeepSpeed v0.5's
// partition_uniform / partition_balanced (deepspeed/runtime/utils.py) applied by hand to the layer
// list Megatron-DeepSpeed's GPTModelPipe builds.
#include "core/pipeline_partition.hpp"

#include <gtest/gtest.h>

#include "core/plan.hpp"

using namespace foresight;

namespace {

// BLOOM-176B (BigScience 2022): 70 layers, h 14336, 112 heads, vocab 250880, ALiBi; tp 4, pp 12.
ModelSpec bloom() {
  ModelSpec m{.name = "bloom-176b", .layers = 70, .hidden = 14336, .heads = 112, .seq_len = 2048,
              .vocab = 250880, .ffn_hidden = 4 * 14336, .kv_heads = 112, .moe = std::nullopt};
  m.position = PositionEmbedding::alibi;
  return m;
}

// A toy GPT: 8 layers, h 64 (ffn 256), learned positions over 128 tokens, vocab 4000, tied.
ModelSpec toy() {
  return ModelSpec{.name = "toy", .layers = 8, .hidden = 64, .heads = 4, .seq_len = 128, .vocab = 4000,
                   .ffn_hidden = 256, .kv_heads = 4, .moe = std::nullopt};
}

PlanSpec deepspeed_plan(int tp, int pp, const char* method) {
  PlanSpec p;
  p.tp = tp;
  p.pp = pp;
  p.framework = Framework::deepspeed;
  p.partition_method = method;
  return p;
}

}  // namespace

TEST(DeepSpeedPartition, UniformPutsTheRemainderOnTheLastStage) {
  // floor(75 / 12) = 6 entries a stage, the last 75 - 66 = 9.
  EXPECT_EQ(deepspeed_partition_uniform(75, 12),
            (std::vector<int>{0, 6, 12, 18, 24, 30, 36, 42, 48, 54, 60, 66, 75}));
  // Fewer items than parts: one each, then empty parts.
  EXPECT_EQ(deepspeed_partition_uniform(2, 4), (std::vector<int>{0, 1, 2, 2, 2}));
}

TEST(DeepSpeedPartition, BloomTypeTransformerOn12Stages) {
  // The list: cast, embedding, 70 transformer layers (entries 2..71), norm, head, cast: 75.
  // type:transformer weighs the layers 1, the rest 0; the inclusive prefix w[i] = i - 1 over the
  // layers. A probe with bottleneck B puts each boundary at the first entry whose prefix reaches
  // the running target, so every part weighs strictly less than B: with B in (6, 7] each stage
  // takes 6 layers (boundaries 8, 14, ..., 68) and the last takes the 4 left with the norm and
  // head; B <= 6 gives 5 a stage and leaves 15 for the last, which fails. The bisection settles
  // just above 6.
  const DeepSpeedPartition d = deepspeed_partition(bloom(), deepspeed_plan(4, 12, "type:transformer"));
  EXPECT_EQ(d.problem, "");
  EXPECT_EQ(d.stage_layers, (std::vector<int>{6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 4}));
  // The same through the plan: stage_layer_counts and the first layer of each stage.
  const PlanSpec p = deepspeed_plan(4, 12, "type:transformer");
  EXPECT_EQ(stage_layer_counts(bloom(), p), d.stage_layers);
  EXPECT_EQ(stage_first_layers(bloom(), p).back(), 66);
  // Uniform over the 75 entries instead: stage 0 = cast, embedding and 4 layers; the last stage
  // 9 entries = 6 layers, norm, head, cast.
  const DeepSpeedPartition u = deepspeed_partition(bloom(), deepspeed_plan(4, 12, "uniform"));
  EXPECT_EQ(u.stage_layers, (std::vector<int>{4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6}));
}

TEST(DeepSpeedPartition, BloomOn16StagesLeavesTheLastTwoEmptyAsDeepSpeedV05Did) {
  // 70 layers on 16 stages: with B in (5, 6] each stage takes 5 layers, 14 stages hold all 70
  // and the probe returns early with the last two stages empty; B <= 5 (4 a stage) leaves 10 for
  // the last stage and fails. So v0.5's bisection settles there (DeepSpeed PR #4312 replaced
  // the algorithm in 2023). The simulator refuses the split, naming the counts.
  const DeepSpeedPartition d = deepspeed_partition(bloom(), deepspeed_plan(4, 16, "type:transformer"));
  EXPECT_EQ(d.stage_layers, (std::vector<int>{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 0, 0}));
  EXPECT_NE(d.problem, "");
}

TEST(DeepSpeedPartition, ParametersBalanceTheEmbeddingAndHead) {
  // Per entry on one rank (tp 1): a layer 12h^2 + 13h = 49,152 + 832 = 49,984; the embedding
  // 4000 x 64 + 128 x 64 = 264,192; the norm 128; the tied head (the whole EmbeddingPipe again)
  // 264,192. Total 928,384. Three stages: stage 0 = embedding + a layers, stage 2 = b layers +
  // norm + head. a = b = 1: 314,176 / 6 x 49,984 = 299,904 / 314,304, heaviest 314,304;
  // a = 0 leaves stage 1 with 7 layers + ... = 349,888 or more; a = 2: 364,160. So 1, 6, 1.
  const std::vector<PipeLayerSpec> specs = deepspeed_layer_specs(toy(), 1);
  ASSERT_EQ(specs.size(), 13u);
  EXPECT_DOUBLE_EQ(specs[1].parameters, 264192.0);
  EXPECT_DOUBLE_EQ(specs[2].parameters, 49984.0);
  EXPECT_DOUBLE_EQ(specs[10].parameters, 128.0);
  EXPECT_DOUBLE_EQ(specs[11].parameters, 264192.0);
  const DeepSpeedPartition d = deepspeed_partition(toy(), deepspeed_plan(1, 3, "parameters"));
  EXPECT_EQ(d.problem, "");
  EXPECT_EQ(d.stage_layers, (std::vector<int>{1, 6, 1}));
  // With 4 layers the best split (0, 4, 0: heaviest 264,320) leaves the end stages without a
  // transformer layer, which the simulator cannot represent: refused with the counts.
  ModelSpec four = toy();
  four.layers = 4;
  const DeepSpeedPartition e = deepspeed_partition(four, deepspeed_plan(1, 3, "parameters"));
  EXPECT_EQ(e.stage_layers, (std::vector<int>{0, 4, 0}));
  EXPECT_NE(e.problem.find("stage 0 without a transformer layer"), std::string::npos) << e.problem;
}

TEST(DeepSpeedPartition, TensorParallelSplitsTheMatricesNotTheNorms) {
  // tp 2: each layer keeps its two layer norms (4h) and the two row-parallel biases (2h) whole:
  // (49,984 - 384) / 2 + 384 = 25,184; the embedding 4000 x 64 / 2 + 8,192 = 136,192.
  const std::vector<PipeLayerSpec> specs = deepspeed_layer_specs(toy(), 2);
  EXPECT_DOUBLE_EQ(specs[2].parameters, 25184.0);
  EXPECT_DOUBLE_EQ(specs[1].parameters, 136192.0);
}
