// check_plan: each rule by itself, on a plan that is otherwise valid.
#include <gtest/gtest.h>

#include "core/framework.hpp"
#include "core/plan.hpp"
#include "core/plan_json.hpp"

using namespace foresight;

namespace {
struct Fixture {
  ModelSpec m{.name = "m", .layers = 24, .hidden = 2048, .heads = 16, .seq_len = 2048, .vocab = 51200,
              .ffn_hidden = 8192, .kv_heads = 16, .moe = std::nullopt};
  ClusterSpec c;
  TrainingSpec t{.global_batch = 512, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  PlanSpec p;
  Fixture() {
    c.nodes = 4;
    c.gpus_per_node = 8;
    c.gpu.peak_bf16 = FlopsPerSecond(312e12);
    p.tp = 2;
    p.pp = 4;
    p.dp = 4;
    p.micro_batch = 2;
  }
  std::optional<PlanViolation> check() const { return check_plan(m, c, t, p, 32); }
};
}  // namespace

TEST(CheckPlan, ValidPlanPasses) { EXPECT_FALSE(Fixture().check().has_value()); }

TEST(CheckPlan, DeepSpeedsOlderPipelineEngineIsAccepted) {
  // plan.partitioned_pipe_grads false (DeepSpeed before v0.5.4) on a DeepSpeed pipeline.
  Fixture f;
  f.p.framework = Framework::deepspeed;
  f.p.zero = 1;
  f.p.partitioned_pipe_grads = false;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;
}

TEST(CheckPlan, Zero3PrefetchChoiceIsDeepSpeedsAtStage3) {
  // plan.zero3_prefetch names one of DeepSpeed's ZeRO-3 releases: refused for a framework without
  // the choice (saying whether it has a ZeRO-3 at all) and below stage 3.
  struct Case { std::function<void(Fixture&)> edit; const char* says; };
  const std::vector<Case> cases = {
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.zero3_prefetch = true; }, "megatron has no ZeRO-3"},
      {[](Fixture& f) { f.p.framework = Framework::torchtitan; f.p.pp = 1; f.p.dp = 32; f.p.tp = 1; f.p.zero = 3;
                        f.p.sequence_parallel = false; f.p.zero3_prefetch = true; }, "runs ZeRO-3 one way"},
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 1; f.p.zero3_prefetch = false; },
       "needs plan.zero 3 (it is 1)"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Fixture f;
    cases[i].edit(f);
    auto v = f.check();
    ASSERT_TRUE(v.has_value()) << "case " << i;
    EXPECT_EQ(v->field, "plan.zero3_prefetch") << "case " << i << ": " << v->rule;
    EXPECT_NE(v->rule.find(cases[i].says), std::string::npos) << "case " << i << ": " << v->rule;
  }
}

TEST(CheckPlan, DeepSpeedsZero3WithACompleteTraceIsAccepted) {
  // plan.zero3_prefetch true (DeepSpeed's ZeRO-3 once its prefetch trace completes) on stage 3.
  Fixture f;
  f.p.framework = Framework::deepspeed;
  f.p.pp = 1;
  f.p.dp = 16;
  f.p.zero = 3;
  f.p.zero3_prefetch = true;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;
}

TEST(CheckPlan, EachRuleNamesItsField) {
  struct Case { std::function<void(Fixture&)> edit; const char* field; };
  const std::vector<Case> cases = {
      {[](Fixture& f) { f.p.dp = 2; }, "plan"},
      {[](Fixture& f) { f.p.pp = 16; f.p.dp = 1; }, "plan.pp"},  // 24 % 16
      {[](Fixture& f) { f.p.tp = 32; f.p.pp = 1; f.p.dp = 1; }, "plan.tp"},
      {[](Fixture& f) { f.t.global_batch = 100; }, "training.global_batch"},
      {[](Fixture& f) { f.p.zero = 5; }, "plan.zero"},
      {[](Fixture& f) { f.p.virtual_stages = 2; }, "plan.virtual_stages"},
      {[](Fixture& f) { f.p.schedule = Schedule::interleaved; f.p.virtual_stages = 4; }, "plan.virtual_stages"},
      {[](Fixture& f) { f.p.token_slices = {1024, 1024}; }, "plan.token_slices"},
      {[](Fixture& f) { f.p.framework = Framework::terapipe; f.p.schedule = Schedule::terapipe;
                        f.p.token_slices = {1024, 1023}; }, "plan.token_slices"},
      {[](Fixture& f) { f.p.ep = 2; }, "plan.ep"},
      {[](Fixture& f) { f.p.offload.activations = -0.1; }, "plan.offload.activations"},
      {[](Fixture& f) { f.p.offload.optimizer = true; }, "plan.offload.optimizer"},  // no host memory bandwidth
      {[](Fixture& f) { f.t.dtype = Dtype::fp16; }, "training.dtype"},  // fixture GPU has no fp16 peak
      {[](Fixture& f) { f.p.dp_overlap = true; f.p.framework = Framework::deepspeed; }, "plan.dp_overlap"},
      {[](Fixture& f) { f.p.dp_overlap = true; f.p.framework = Framework::terapipe; f.p.schedule = Schedule::terapipe;
                        f.p.token_slices = {1024, 1024}; }, "plan.dp_overlap"},
      {[](Fixture& f) { f.p.framework = Framework::terapipe; }, "plan.schedule"},      // TeraPipe runs only its own
      {[](Fixture& f) { f.p.zero = 3; }, "plan.zero"},                                 // Megatron-LM: ZeRO-1 at most
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 2; }, "plan.zero"},  // not with a pipeline
      {[](Fixture& f) { f.p.stage_layers = {6, 6, 6}; }, "plan.stage_layers"},         // 3 entries for pp 4
      {[](Fixture& f) { f.p.stage_layers = {5, 7, 6, 5}; }, "plan.stage_layers"},      // sums to 23
      {[](Fixture& f) { f.p.stage_layers = {0, 8, 8, 8}; }, "plan.stage_layers"},      // an empty stage
      {[](Fixture& f) { f.p.stage_layers = {4, 7, 7, 6}; }, "plan.stage_layers"},      // Megatron-LM splits evenly
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.first_stage_layers = 5; },
       "plan.first_stage_layers"},                                                     // 19 over 3 stages
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.last_stage_layers = 3;
                        f.p.first_stage_layers = 3; f.p.pp = 2; f.p.dp = 8; },
       "plan.first_stage_layers"},                                                     // nothing in between
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.stage_layers = {3, 7, 7, 7};
                        f.p.schedule = Schedule::interleaved; f.p.virtual_stages = 2; }, "plan.stage_layers"},
      // (pp entries with interleaving: one per model chunk, pp x v, is what it takes)
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.stage_layers = {2, 3, 3, 3, 3, 3, 3, 4};
                        f.p.schedule = Schedule::interleaved; f.p.virtual_stages = 2; }, "plan.stage_layers"},
      // (Megatron-LM 2021-22's interleaved chunks are even; a count per chunk is torchtitan's and
      // Megatron-Core's --pipeline-model-parallel-layout)
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.first_stage_layers = 3;
                        f.p.schedule = Schedule::interleaved; f.p.virtual_stages = 2; }, "plan.schedule"},
      {[](Fixture& f) { f.p.shard_group = 3; f.p.zero = 3; f.p.framework = Framework::pytorch; }, "plan.shard_group"},      // does not divide dp 4
      {[](Fixture& f) { f.p.shard_group = 2; }, "plan.shard_group"},                    // zero 0
      {[](Fixture& f) { f.p.reshard_after_forward = false; f.p.zero = 1; }, "plan.reshard_after_forward"},
      {[](Fixture& f) { f.p.reshard_after_forward = false; f.p.zero = 3; f.p.pp = 1; f.p.dp = 16;
                        f.p.framework = Framework::deepspeed; }, "plan.reshard_after_forward"},  // no such mode
      {[](Fixture& f) { f.p.param_gather_overlap = true; f.p.zero = 3; f.p.framework = Framework::pytorch; },
       "plan.param_gather_overlap"},
      {[](Fixture& f) { f.m.attention_window = AttentionWindowSpec{.size = 128, .pattern = {1, 2}}; },
       "model.attention_window.pattern"},                                              // 2 is not 0 or 1
      {[](Fixture& f) { f.m.attention_window = AttentionWindowSpec{.size = 128, .pattern = {0, 0}}; },
       "model.attention_window.pattern"},                                              // windows nothing
      {[](Fixture& f) { f.m.attention_window = AttentionWindowSpec{.size = 128, .pattern = std::vector<int>(25, 1)}; },
       "model.attention_window.pattern"},                                              // longer than 24 layers
      {[](Fixture& f) { f.m.parallel_block_norms = 2; }, "model.parallel_block_norms"},  // sequential block
      {[](Fixture& f) { f.m.parallel_block = true; f.m.parallel_block_norms = 3; }, "model.parallel_block_norms"},
      {[](Fixture& f) { f.m.attention_window = AttentionWindowSpec{.size = 128, .pattern = {}};
                        f.p.framework = Framework::megatron_core; f.p.attention = AttentionImpl::flash;
                        f.p.cp = 2; f.p.dp = 2; }, "plan.cp"},                          // no windowed ring attention
      {[](Fixture& f) { f.p.framework = Framework::pytorch; f.p.compile_loss = true; }, "plan.compile_loss"},  // no compile
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.cross_entropy_fusion = CrossEntropyFusion::native; },
       "plan.cross_entropy_fusion"},                                                   // Megatron-Core only
      {[](Fixture& f) { f.p.framework = Framework::pytorch; f.p.fused_softmax = false; },
       "plan.fused_softmax"},                                                          // not Megatron's kernel
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.attention = AttentionImpl::flash;
                        f.p.fused_softmax = false; }, "plan.fused_softmax"},            // fused attention has no such pass
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.fused_softmax = false; },
       "plan.fused_softmax"},                                                          // its default attention is fused
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.zero = 1; f.p.bf16_optimizer = true; },
       "plan.bf16_optimizer"},                                                         // DeepSpeed's only
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 0; f.p.bf16_optimizer = true; },
       "plan.bf16_optimizer"},                                                         // shards as ZeRO-1
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 1; f.t.dtype = Dtype::fp16;
                        f.p.bf16_optimizer = true; }, "plan.bf16_optimizer"},          // bf16 only
      {[](Fixture& f) { f.p.framework = Framework::megatron; f.p.partitioned_pipe_grads = false; },
       "plan.partitioned_pipe_grads"},                                                 // DeepSpeed's releases only
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.partitioned_pipe_grads = true; },
       "plan.partitioned_pipe_grads"},
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 1; f.p.pp = 1; f.p.dp = 16;
                        f.p.partitioned_pipe_grads = false; }, "plan.partitioned_pipe_grads"},  // no stages
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Fixture f;
    cases[i].edit(f);
    auto v = f.check();
    ASSERT_TRUE(v.has_value()) << "case " << i;
    EXPECT_EQ(v->field, cases[i].field) << "case " << i << ": " << v->rule;
  }
}

TEST(CheckPlan, MegatronsSoftmaxFallbackOnItsUnfusedAttention) {
  for (const Framework fw : {Framework::megatron, Framework::deepspeed}) {
    Fixture f;
    f.p.framework = fw;
    if (fw == Framework::deepspeed) f.p.dp_overlap = false;
    f.p.fused_softmax = false;
    EXPECT_FALSE(f.check().has_value()) << to_string(fw) << ": " << f.check()->rule;
  }
  Fixture g;
  g.p.framework = Framework::megatron_core;
  g.p.attention = AttentionImpl::unfused;  // Megatron-Core's local attention runs the same kernel
  g.p.fused_softmax = false;
  EXPECT_FALSE(g.check().has_value());
}

TEST(CheckPlan, UnevenSplitsThatAddUp) {
  Fixture f;
  f.p.framework = Framework::megatron_core;  // --decoder-first/last-pipeline-num-layers
  f.p.stage_layers = {4, 7, 7, 6};
  EXPECT_FALSE(f.check().has_value());
  f.p.stage_layers.clear();
  f.p.first_stage_layers = 3;  // 21 over the other three stages: 7 each
  EXPECT_FALSE(f.check().has_value());
  EXPECT_EQ(stage_layer_counts(f.m, f.p), (std::vector<int>{3, 7, 7, 7}));
  f.p.last_stage_layers = 5;  // 16 over two stages: 8 each
  EXPECT_FALSE(f.check().has_value());
  EXPECT_EQ(stage_layer_counts(f.m, f.p), (std::vector<int>{3, 8, 8, 5}));
  Fixture g;
  g.p.framework = Framework::megatron_core;
  g.p.pp = 5;  // 24 % 5: refused, and the message says how to split unevenly
  g.p.dp = 1;
  g.p.tp = 2;
  auto v = check_plan(g.m, g.c, g.t, g.p, 10);
  ASSERT_TRUE(v.has_value());
  EXPECT_NE(v->rule.find("plan.stage_layers"), std::string::npos);
  g.p.stage_layers = {4, 5, 5, 5, 5};
  g.t.global_batch = 2;
  EXPECT_FALSE(check_plan(g.m, g.c, g.t, g.p, 10).has_value());
}

TEST(CheckPlan, InterleavedChunksOfTheirOwnSize) {
  // torchtitan's generate_split_points for a looped schedule (pipelining_utils.py at 9dec370):
  // Llama 3.1 405B's 126 layers over 8 ranks x 2 stages: 126 // 16 = 7, the 14 left over one each
  // to stages 1..14, so [7, 8 x 14, 7]; stage k on rank k mod 8.
  Fixture f;
  f.m.layers = 126;
  f.p.framework = Framework::torchtitan;
  f.p.zero = 3;
  f.p.sequence_parallel = true;
  f.p.tp = 2;
  f.p.pp = 8;
  f.p.dp = 2;
  f.p.micro_batch = 1;
  f.t.global_batch = 16;  // 8 micro-batches, a multiple of pp
  f.p.schedule = Schedule::interleaved;
  f.p.virtual_stages = 2;
  f.p.stage_layers = std::vector<int>(16, 8);
  f.p.stage_layers.front() = 7;
  f.p.stage_layers.back() = 7;
  EXPECT_FALSE(f.check().has_value());
  EXPECT_EQ(stage_layer_counts(f.m, f.p), (std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15}));
  EXPECT_EQ(chunk_layer_counts(f.m, f.p), f.p.stage_layers);
  // Layers 0..6 are stage 0 (rank 0's first chunk) and 63..70 stage 8 (its second).
  f.p.recompute = Recompute::full;
  f.p.framework = Framework::generic;
  f.p.recompute_layers = 1;
  EXPECT_TRUE(recomputes_layer(f.m, f.p, 0));
  EXPECT_FALSE(recomputes_layer(f.m, f.p, 6));
  EXPECT_TRUE(recomputes_layer(f.m, f.p, 7));    // stage 1 starts at 7
  EXPECT_FALSE(recomputes_layer(f.m, f.p, 14));
  EXPECT_TRUE(recomputes_layer(f.m, f.p, 15));   // stage 2 at 15
  EXPECT_TRUE(recomputes_layer(f.m, f.p, 119));  // stage 15 = the last 7: 119..125
  EXPECT_FALSE(recomputes_layer(f.m, f.p, 118 + 7));
  // A count missing, or counts summing to 125, are refused by name.
  f.p.recompute_layers = 0;
  f.p.stage_layers.pop_back();
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.stage_layers");
  f.p.stage_layers.push_back(6);
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.stage_layers");
}

TEST(CheckPlan, OverlappedGradientReductionWhereTheFrameworkCanDoIt) {
  Fixture f;
  f.p.dp_overlap = true;  // Megatron-LM (torch DDP, --overlap-grad-reduce)
  EXPECT_FALSE(f.check().has_value());
  f.p.framework = Framework::deepspeed;
  f.p.pp = 1;  // DeepSpeed without its pipeline engine overlaps at ZeRO-2 (overlap_comm)
  f.p.dp = 16;
  f.p.zero = 2;
  EXPECT_FALSE(f.check().has_value());
  f.p.zero = 0;
  f.p.pp = 4;
  f.p.dp = 4;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("pipeline flush"), std::string::npos) << f.check()->rule;
}

TEST(CheckPlan, InterleavedNeedsMicroBatchesInGroupsOfPp) {
  Fixture f;
  f.p.schedule = Schedule::interleaved;
  f.p.virtual_stages = 2;  // 24 layers / (4*2) = 3 per chunk
  EXPECT_FALSE(f.check().has_value());  // 512 / (4*2) = 64 micro-batches, a multiple of 4
  f.t.global_batch = 8 * 6;            // 6 micro-batches: not a multiple of pp = 4
  auto v = f.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.schedule");
}

TEST(CheckPlan, BlockRecomputeRules) {
  // 24 layers on pp 4: 6 a stage. recompute_layers counts whole layers recomputed per stage.
  Fixture f;
  f.p.recompute = Recompute::full;
  f.p.recompute_layers = 2;
  EXPECT_FALSE(f.check().has_value());
  f.p.recompute_layers = 6;  // all of a stage: allowed (the same as 0)
  EXPECT_FALSE(f.check().has_value());
  f.p.recompute_layers = 7;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.recompute_layers");
  EXPECT_NE(f.check()->rule.find("largest stage (6)"), std::string::npos) << f.check()->rule;
  f.p.recompute_layers = 2;
  f.p.recompute = Recompute::selective;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("needs plan.recompute = full"), std::string::npos) << f.check()->rule;
  // DeepSpeed's pipeline engine checkpoints at a fixed interval: no block method.
  f.p.recompute = Recompute::full;
  f.p.framework = Framework::deepspeed;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.recompute_layers");
  EXPECT_NE(f.check()->rule.find("deepspeed"), std::string::npos) << f.check()->rule;
}

TEST(RecomputesLayer, FirstNOfEachStageOrChunk) {
  Fixture f;
  f.p.recompute = Recompute::full;
  // Uneven stages 2, 5, 5, 12 with N = 3: layers 0-1 (all of stage 0), 2-4, 7-9, 12-14.
  f.p.stage_layers = {2, 5, 5, 12};
  f.p.recompute_layers = 3;
  std::vector<int> redone;
  for (int l = 0; l < 24; ++l)
    if (recomputes_layer(f.m, f.p, l)) redone.push_back(l);
  EXPECT_EQ(redone, (std::vector<int>{0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 14}));
  // Interleaved, pp 4 x 2 chunks of 3 layers, N = 1: the first layer of every chunk.
  f.p.stage_layers.clear();
  f.p.schedule = Schedule::interleaved;
  f.p.virtual_stages = 2;
  f.p.recompute_layers = 1;
  redone.clear();
  for (int l = 0; l < 24; ++l)
    if (recomputes_layer(f.m, f.p, l)) redone.push_back(l);
  EXPECT_EQ(redone, (std::vector<int>{0, 3, 6, 9, 12, 15, 18, 21}));
  // 0 is every layer; selective recompute re-runs no whole layer.
  f.p.recompute_layers = 0;
  EXPECT_TRUE(recomputes_layer(f.m, f.p, 23));
  f.p.recompute = Recompute::selective;
  EXPECT_FALSE(recomputes_layer(f.m, f.p, 0));
}

TEST(CheckPlan, PartitionMethodOnlyForDeepSpeedAndWhenItFits) {
  Fixture f;
  f.p.partition_method = "type:transformer";
  ASSERT_TRUE(f.check().has_value());  // Megatron-LM has no such option
  EXPECT_EQ(f.check()->field, "plan.partition_method");
  EXPECT_NE(f.check()->rule.find("megatron does not"), std::string::npos) << f.check()->rule;
  f.p.framework = Framework::deepspeed;
  EXPECT_FALSE(f.check().has_value());
  f.p.stage_layers = {6, 6, 6, 6};
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("cannot be combined"), std::string::npos);
  f.p.stage_layers.clear();
  f.p.partition_method = "balanced";
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("not a DeepSpeed partition method"), std::string::npos);
  f.p.partition_method = "type:attention";
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("matches none"), std::string::npos);
  // 24 layers + 5 entries uniformly over 4 stages: 7 entries a stage, the last 8:
  // [cast, embedding, 5 layers] [7] [7] [5 layers, norm, head, cast] -> 5, 7, 7, 5.
  f.p.partition_method = "uniform";
  EXPECT_FALSE(f.check().has_value());
  EXPECT_EQ(stage_layer_counts(f.m, f.p), (std::vector<int>{5, 7, 7, 5}));
  EXPECT_EQ(stage_first_layers(f.m, f.p), (std::vector<int>{0, 5, 12, 19}));
}

TEST(CheckPlan, MicrobatchLevelRecomputeRulesAndShares) {
  Fixture f;  // 24 layers, pp 4, dp 4, micro-batch 2: 64 micro-batches per pipeline
  f.p.recompute = Recompute::full;
  f.p.partial_recompute_microbatches = 1;
  ASSERT_TRUE(f.check().has_value());  // needs the block the partial micro-batches recompute
  EXPECT_EQ(f.check()->field, "plan.partial_recompute_microbatches");
  f.p.recompute_layers = 2;
  ASSERT_TRUE(f.check().has_value());  // Megatron-LM 2021-22 has no micro-batch granularity
  EXPECT_NE(f.check()->rule.find("megatron does not"), std::string::npos) << f.check()->rule;
  f.p.framework = Framework::megatron_core;
  EXPECT_FALSE(f.check().has_value());
  f.p.schedule = Schedule::gpipe;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_NE(f.check()->rule.find("1F1B"), std::string::npos);
  f.p.schedule = Schedule::one_f_one_b;
  // 8 micro-batches on pp 4 with K = 1: stage s's window is min(3 - s, 8) + 1 = 4 - s micro-batches,
  // and k % window >= 1 recompute every layer: stage 0 6 of 8, stage 2 4 of 8, stage 3 (window 1)
  // none.
  EXPECT_DOUBLE_EQ(whole_recompute_microbatch_share(f.p, 0, 8), 0.75);
  EXPECT_DOUBLE_EQ(whole_recompute_microbatch_share(f.p, 2, 8), 0.5);
  EXPECT_DOUBLE_EQ(whole_recompute_microbatch_share(f.p, 3, 8), 0.0);
  // Block layers always; the others at the stage's share.
  EXPECT_DOUBLE_EQ(layer_recompute_share(f.p, 1, 0, 8), 1.0);
  EXPECT_DOUBLE_EQ(layer_recompute_share(f.p, 2, 0, 8), 0.75);
  // Fewer micro-batches than the pipeline is deep: window m + 1, so only k >= K recompute all.
  EXPECT_DOUBLE_EQ(whole_recompute_microbatch_share(f.p, 0, 2), 0.5);
}

TEST(PlanJson, GradientAccumulationFusionRoundTripsAndReachesTheLaunchLine) {
  // Unset, set true and set false survive plan.json; Megatron-LM's arguments carry
  // --no-gradient-accumulation-fusion exactly when the priced execution has the separate pass
  // (megatron 2021 by default, megatron-core only when told so).
  Fixture f;
  ExecutablePlan plan;
  plan.model = f.m;
  plan.training = f.t;
  plan.plan = f.p;
  plan.gpus = 32;
  for (std::optional<bool> v : {std::optional<bool>{}, std::optional<bool>{true}, std::optional<bool>{false}}) {
    plan.plan.gradient_accumulation_fusion = v;
    const ExecutablePlan back = parse_plan_json(to_json(plan).dump(), "round-trip.json");
    EXPECT_EQ(back.plan.gradient_accumulation_fusion, v);
  }
  auto flag = [&](Framework fw, std::optional<bool> v) {
    plan.plan.framework = fw;
    plan.plan.gradient_accumulation_fusion = v;
    return megatron_arguments(plan).find("--no-gradient-accumulation-fusion") != std::string::npos;
  };
  EXPECT_TRUE(flag(Framework::megatron, std::nullopt));
  EXPECT_FALSE(flag(Framework::megatron, true));
  EXPECT_FALSE(flag(Framework::megatron_core, std::nullopt));
  EXPECT_TRUE(flag(Framework::megatron_core, false));
}

TEST(CheckPlan, KeepingGatheredParametersWhereTheFrameworkCan) {
  // ZeRO-3 over dp 16 at tp 2: DeepSpeed runs it, but only with each module released after its
  // forward; FSDP (framework pytorch) can keep the gathered parameters to the backward.
  Fixture f;
  f.p.pp = 1;
  f.p.dp = 16;
  f.p.zero = 3;
  f.p.framework = Framework::deepspeed;
  EXPECT_FALSE(f.check().has_value());
  EXPECT_TRUE(framework_traits(f.p.framework).runs(f.p));
  f.p.reshard_after_forward = false;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.reshard_after_forward");
  EXPECT_FALSE(framework_traits(f.p.framework).runs(f.p));
  f.p.framework = Framework::pytorch;
  EXPECT_FALSE(f.check().has_value());
  EXPECT_TRUE(framework_traits(f.p.framework).runs(f.p));
}

TEST(CheckPlan, MegatronCoreShardsAsMegatronFsdpCan) {
  // Megatron-Core's ZeRO-2/3 is Megatron-FSDP (--use-megatron-fsdp): core_v0.14-0.16
  // megatron/training/arguments.py asserts neither pp 1 nor the fusion off (training.py wraps each
  // pipeline chunk; TE writes weight gradients into its buckets), its expert groups are wired from
  // core_v0.16.0 (megatron_fsdp.py requires the expert data-parallel group), and
  // optim_grads_params always reshards after the forward.
  Fixture f;
  f.p.framework = Framework::megatron_core;
  f.p.zero = 1;
  EXPECT_FALSE(f.check().has_value());
  f.p.zero = 3;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;  // pp 4
  f.p.pp = 1;
  f.p.dp = 16;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;
  // Unset, the fusion resolves on (Megatron-LM's default) at every ZeRO stage; off where asked.
  EXPECT_TRUE(framework_traits(f.p.framework).fuses_gradient_accumulation(f.p));
  f.p.gradient_accumulation_fusion = false;
  EXPECT_FALSE(framework_traits(f.p.framework).fuses_gradient_accumulation(f.p));
  f.p.gradient_accumulation_fusion = true;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;
  f.p.gradient_accumulation_fusion.reset();
  f.p.reshard_after_forward = false;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.reshard_after_forward");
  f.p.reshard_after_forward = true;
  Fixture moe;
  moe.m.moe = MoeSpec{.experts = 8, .top_k = 2};
  moe.p.framework = Framework::megatron_core;
  moe.p.tp = 1;
  moe.p.pp = 1;
  moe.p.dp = 32;
  moe.p.ep = 4;
  moe.p.zero = 3;
  EXPECT_FALSE(moe.check().has_value()) << moe.check()->rule;
  moe.p.zero = 1;
  EXPECT_FALSE(moe.check().has_value()) << moe.check()->rule;
}

TEST(CheckPlan, LlmFoundryRunsDataParallelFsdpOnly) {
  // Composer's DDP or FSDP (llm-foundry issue #1743): no pipeline, no tensor parallelism, and
  // FSDP shards everything between steps: FULL_SHARD (zero 3) or SHARD_GRAD_OP (zero 3 keeping the
  // gathered parameters to the backward). Its ZeRO-2 is the latter, so zero 2 is refused, naming it.
  Fixture f;
  f.p.framework = Framework::llm_foundry;
  f.p.tp = 1;
  f.p.pp = 1;
  f.p.dp = 32;
  for (int zero : {0, 3}) {
    f.p.zero = zero;
    EXPECT_FALSE(f.check().has_value()) << "zero " << zero << ": " << f.check()->rule;
  }
  f.p.reshard_after_forward = false;
  EXPECT_FALSE(f.check().has_value()) << f.check()->rule;
  f.p.reshard_after_forward = true;
  f.p.zero = 2;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.zero");
  EXPECT_NE(f.check()->rule.find("reshard_after_forward false"), std::string::npos) << f.check()->rule;
  f.p.zero = 1;
  ASSERT_TRUE(f.check().has_value());
  EXPECT_EQ(f.check()->field, "plan.zero");
  f.p.zero = 3;
  PlanSpec piped = f.p;
  piped.pp = 4;
  piped.dp = 8;
  ASSERT_TRUE(check_plan(f.m, f.c, f.t, piped, 32).has_value());
  EXPECT_EQ(check_plan(f.m, f.c, f.t, piped, 32)->field, "plan.pp");
  PlanSpec split = f.p;
  split.tp = 2;
  split.dp = 16;
  ASSERT_TRUE(check_plan(f.m, f.c, f.t, split, 32).has_value());
  EXPECT_EQ(check_plan(f.m, f.c, f.t, split, 32)->field, "plan.tp");
  EXPECT_NE(check_plan(f.m, f.c, f.t, split, 32)->rule.find("llm-foundry has no tensor parallelism"), std::string::npos);
}

TEST(CheckPlan, AsyncTpNeedsTorchCompile) {
  // torchtitan's and PyTorch's TP overlap is async TP, an Inductor pass (torchtitan
  // parallelize_llama.py: "Async TP requires --training.compile").
  for (Framework fw : {Framework::torchtitan, Framework::pytorch}) {
    Fixture f;
    f.p.framework = fw;
    f.p.pp = 1;
    f.p.dp = 16;
    f.p.zero = 3;
    f.p.sequence_parallel = true;
    f.p.tp_overlap = true;
    f.p.compile = true;
    EXPECT_FALSE(f.check().has_value()) << to_string(fw) << ": " << f.check()->rule;
    f.p.compile = false;
    ASSERT_TRUE(f.check().has_value()) << to_string(fw);
    EXPECT_EQ(f.check()->field, "plan.tp_overlap");
    EXPECT_NE(f.check()->rule.find("plan.compile"), std::string::npos) << f.check()->rule;
  }
  // Megatron-Core's overlap is Transformer Engine's userbuffers: no compile involved.
  Fixture m;
  m.p.framework = Framework::megatron_core;
  m.p.sequence_parallel = true;
  m.p.tp_overlap = true;
  EXPECT_FALSE(m.check().has_value()) << m.check()->rule;
}

TEST(CheckPlan, AnOffloadedOptimizerNeedsTheHostsMemoryBandwidth) {
  Fixture f;
  f.c.name = "nodes-without-a-host-figure";
  f.p.framework = Framework::deepspeed;  // its ZeRO optimizers offload (Megatron-LM 2021-22 cannot)
  f.p.zero = 1;
  f.p.offload.optimizer = true;
  const std::optional<PlanViolation> v = f.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.offload.optimizer");
  EXPECT_NE(v->rule.find("cluster.host.memory_GBps"), std::string::npos) << v->rule;
  EXPECT_NE(v->rule.find("nodes-without-a-host-figure"), std::string::npos) << v->rule;
  f.c.host.memory_bandwidth = BytesPerSecond(260e9);
  EXPECT_FALSE(f.check().has_value());
}

TEST(CheckPlan, Fp8ParamGatherNeedsFp8ShardedParametersAndAFrameworkThatDoesIt) {
  auto with = [](auto edit) {
    Fixture f;
    f.c.gpu.peak_fp8 = FlopsPerSecond(624e12);
    f.t.dtype = Dtype::fp8;
    f.t.fp8_scaling = Fp8Scaling::tensorwise;
    f.p.framework = Framework::megatron_core;
    f.p.zero = 1;
    f.p.fp8_param_gather = true;
    edit(f);
    return f.check();
  };
  EXPECT_FALSE(with([](Fixture&) {}).has_value());  // Megatron-Core's --fp8-param-gather
  auto rule = [&](auto edit) {
    const auto v = with(edit);
    return v ? v->field + ": " + v->rule : std::string("accepted");
  };
  EXPECT_NE(rule([](Fixture& f) { f.t.dtype = Dtype::bf16; f.t.fp8_scaling = Fp8Scaling::delayed; })
                .find("plan.fp8_param_gather: needs training.dtype = fp8"),
            std::string::npos);
  EXPECT_NE(rule([](Fixture& f) { f.p.zero = 0; }).find("plan.fp8_param_gather: needs plan.zero >= 1"), std::string::npos);
  // Megatron-LM (2021) has no such mode; torchtitan (torchao) only with tensorwise scales.
  EXPECT_NE(rule([](Fixture& f) { f.p.framework = Framework::megatron; }).find("does not gather parameters in FP8"),
            std::string::npos);
  EXPECT_NE(rule([](Fixture& f) {
              f.p.framework = Framework::torchtitan;
              f.p.zero = 3;
              f.p.tp = 1;
              f.p.pp = 1;
              f.p.dp = 32;
              f.t.fp8_scaling = Fp8Scaling::rowwise;
            }).find("supports tensorwise scales only"),
            std::string::npos);
}

TEST(CheckPlan, PipelineSendOverlapIsMegatronCoresAndInterleavedOnly) {
  // Megatron-Core overlaps pipeline sends only in the interleaved schedule (overlap_p2p_comm);
  // Megatron-LM 2021-22 and the others send blocking.
  auto rule = [](auto edit) {
    Fixture f;
    f.p.framework = Framework::megatron_core;
    f.p.sequence_parallel = true;
    f.p.schedule = Schedule::interleaved;
    f.p.virtual_stages = 2;
    f.p.p2p_overlap = true;
    edit(f);
    const auto v = f.check();
    return v ? v->field + ": " + v->rule : std::string("accepted");
  };
  EXPECT_EQ(rule([](Fixture&) {}), "accepted");
  EXPECT_NE(rule([](Fixture& f) { f.p.framework = Framework::megatron; }).find("plan.p2p_overlap: megatron sends between pipeline stages blocking"),
            std::string::npos);
  EXPECT_NE(rule([](Fixture& f) { f.p.schedule = Schedule::one_f_one_b; }).find("plan.p2p_overlap: needs plan.schedule interleaved"),
            std::string::npos);
  EXPECT_EQ(rule([](Fixture& f) { f.p.p2p_overlap = false; }), "accepted");
}

namespace {
// check_plan's verdict on FP8 recipe `scaling` under `fw` on a GPU of compute capability `cc`.
std::string fp8_recipe_rule(Fp8Scaling scaling, double cc, Framework fw) {
  Fixture f;
  f.c.gpu.name = "gpu";
  f.c.gpu.peak_fp8 = FlopsPerSecond(2250e12);
  f.c.gpu.compute_capability = cc;
  f.t.dtype = Dtype::fp8;
  f.t.fp8_scaling = scaling;
  f.p.framework = fw;
  if (fw == Framework::torchtitan) {  // FSDP over all 32 GPUs, a plan torchtitan runs
    f.p.zero = 3;
    f.p.tp = f.p.pp = 1;
    f.p.dp = 32;
  }
  const auto v = f.check();
  return v ? v->field + ": " + v->rule : std::string("accepted");
}
}  // namespace

TEST(CheckPlan, Mxfp8NeedsTransformerEngineAndComputeCapability10) {
  // Transformer Engine's MXFP8 recipe: its frameworks only, and only on SM 10.x (TE v2.x
  // check_mxfp8_support refuses below 10.0 and on 12.0+).
  auto rule = [](double cc, Framework fw) { return fp8_recipe_rule(Fp8Scaling::mxfp8, cc, fw); };
  EXPECT_EQ(rule(10.0, Framework::megatron_core), "accepted");
  EXPECT_NE(rule(9.0, Framework::megatron_core).find("training.fp8_scaling: needs a GPU with block-scaled FP8 tensor cores"),
            std::string::npos);
  EXPECT_NE(rule(12.0, Framework::megatron_core).find("compute capability 10.x"), std::string::npos);
  EXPECT_NE(rule(10.0, Framework::torchtitan).find("training.fp8_scaling: is Transformer Engine's MXFP8BlockScaling"),
            std::string::npos);
}

TEST(CheckPlan, BlockwiseFp8NeedsItsFrameworksAndComputeCapability9) {
  // Transformer Engine's Float8BlockScaling: compute capability 9.0 or higher
  // (check_fp8_block_scaling_support), emulated with MXFP8 GEMMs on 10.x, which TE does not run
  // on 12.0+; Megatron-Core (--fp8-recipe blockwise) and the idealised entry run it, torchao does
  // not.
  auto rule = [](double cc, Framework fw) { return fp8_recipe_rule(Fp8Scaling::blockwise, cc, fw); };
  EXPECT_EQ(rule(9.0, Framework::megatron_core), "accepted");
  EXPECT_EQ(rule(10.0, Framework::megatron_core), "accepted");
  EXPECT_EQ(rule(9.0, Framework::generic), "accepted");
  EXPECT_NE(rule(8.9, Framework::megatron_core).find("training.fp8_scaling: needs compute capability 9.x or 10.x"),
            std::string::npos) << rule(8.9, Framework::megatron_core);
  EXPECT_NE(rule(12.0, Framework::megatron_core).find("needs compute capability 9.x or 10.x"), std::string::npos)
      << rule(12.0, Framework::megatron_core);
  EXPECT_NE(rule(9.0, Framework::torchtitan).find("torchtitan does not run it"), std::string::npos)
      << rule(9.0, Framework::torchtitan);
}

TEST(CheckPlan, ZeroBubbleAndDualPipeRules) {
  // Fixture: pp 4, dp 4, micro-batch 2, global batch 512: 64 micro-batches per pipeline.
  struct Case { std::function<void(Fixture&)> edit; const char* field; const char* says; };
  const std::vector<Case> cases = {
      // Frameworks that do not run them (Megatron-LM here; the idealised entry does).
      {[](Fixture& f) { f.p.schedule = Schedule::dualpipe; }, "plan.schedule", "does not run"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.schedule = Schedule::zb_h1; f.p.pp = 1; f.p.dp = 16; },
       "plan.schedule", "pp >= 2"},
      // dualpipe.py: an even number of ranks, an even number of chunks, at least 2 x ranks of them.
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.schedule = Schedule::dualpipe; f.p.pp = 1; f.p.dp = 16; },
       "plan.schedule", "even plan.pp"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.schedule = Schedule::dualpipe; f.t.global_batch = 56; },
       "plan.schedule", "at least 2 x plan.pp"},  // 7 micro-batches
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.schedule = Schedule::dualpipe; f.p.zero = 3; },
       "plan.schedule", "zero = 3"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.recompute_modules.layernorm = true;
                        f.p.recompute = Recompute::full; }, "plan.recompute_modules", "full"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.recompute_modules.mla_up_proj = true; },
       "plan.recompute_modules.mla_up_proj", "mla"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.recompute_modules.moe_act = true; },
       "plan.recompute_modules.moe_act", "moe"},
      {[](Fixture& f) { f.p.recompute_modules.layernorm = true; }, "plan.recompute_modules", "per-module"},
      // Whole submodules: a dense MLP needs a dense layer, an MoE block an MoE model and no EP
      // overlap (transformer_config.py asserts it), the shared experts some shared experts.
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2}; f.p.framework = Framework::generic;
                        f.p.recompute_modules.mlp = true; }, "plan.recompute_modules.mlp", "dense"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.recompute_modules.moe = true; },
       "plan.recompute_modules.moe", "moe"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2}; f.p.framework = Framework::megatron_core; f.p.ep = 4;
                        f.p.ep_overlap = true; f.p.recompute_modules.moe = true; },
       "plan.recompute_modules.moe", "ep_overlap"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2}; f.p.framework = Framework::generic;
                        f.p.recompute_modules.shared_experts = true; },
       "plan.recompute_modules.shared_experts", "shared_experts > 0"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.ep_dispatcher = EpDispatcher::deepep; },
       "plan.ep_dispatcher", "moe"},
      // Transformer Engine's MoE fusions: an MoE model, a framework that has them; the shared
      // experts' overlap needs shared experts and, as Megatron-Core asserts, the alltoall
      // dispatcher without the combined 1F1B overlap.
      // torch.optim's foreach path is priced for Adam(W) on the GPU.
      {[](Fixture& f) { f.t.optimizer = Optimizer::lamb; f.p.optimizer_impl = OptimizerImpl::foreach; },
       "plan.optimizer_impl", "Adam(W)"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.moe_permute_fusion = true; },
       "plan.moe_permute_fusion", "moe"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2}; f.p.moe_permute_fusion = true; },
       "plan.moe_permute_fusion", "no Transformer Engine MoE fusions"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2}; f.p.framework = Framework::generic;
                        f.p.moe_shared_expert_overlap = true; },
       "plan.moe_shared_expert_overlap", "shared_experts > 0"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2, .shared_experts = 1};
                        f.p.framework = Framework::generic; f.p.tp = 1; f.p.pp = 1; f.p.dp = 32; f.p.ep = 8;
                        f.p.ep_dispatcher = EpDispatcher::deepep; f.p.moe_shared_expert_overlap = true; },
       "plan.moe_shared_expert_overlap", "deepep"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 8, .top_k = 2, .shared_experts = 1};
                        f.p.framework = Framework::megatron_core; f.p.ep = 4; f.p.ep_overlap = true;
                        f.p.moe_shared_expert_overlap = true; },
       "plan.moe_shared_expert_overlap", "ep_overlap"},
      // DeepEP has kernel configurations for some expert-parallel sizes only, and its internode
      // kernels assume 8-GPU nodes (the fixture's 32 GPUs as 8 nodes of 4 here).
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 24, .top_k = 2}; f.p.framework = Framework::generic;
                        f.p.tp = 1; f.p.pp = 1; f.p.dp = 32; f.p.ep = 12; f.p.ep_dispatcher = EpDispatcher::deepep; },
       "plan.ep", "DeepEP"},
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 16, .top_k = 2}; f.p.framework = Framework::generic;
                        f.c.nodes = 8; f.c.gpus_per_node = 4;
                        f.p.tp = 1; f.p.pp = 1; f.p.dp = 32; f.p.ep = 16; f.p.ep_dispatcher = EpDispatcher::deepep; },
       "plan.ep_dispatcher", "8 GPUs per node"},
      // Its group is expert-TP x EP (Megatron-Core's tp_ep_group): tp 2 unfolded, ep 8 = 16 ranks,
      // across those 4-GPU nodes.
      {[](Fixture& f) { f.m.moe = MoeSpec{.experts = 16, .top_k = 2}; f.p.framework = Framework::generic;
                        f.c.nodes = 8; f.c.gpus_per_node = 4;
                        f.p.tp = 2; f.p.pp = 1; f.p.dp = 16; f.p.ep = 8; f.p.sequence_parallel = true;
                        f.p.ep_dispatcher = EpDispatcher::deepep; },
       "plan.ep_dispatcher", "8 GPUs per node"},
      // Megatron-Core's deferred head weight gradients: a pipeline to hide them in, a limit only
      // with the deferral, a framework that defers them.
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.defer_embedding_wgrad = true; f.p.pp = 1;
                        f.p.dp = 16; },
       "plan.defer_embedding_wgrad", "plan.pp > 1"},
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.wgrad_deferral_limit = 4; },
       "plan.wgrad_deferral_limit", "needs plan.defer_embedding_wgrad"},
      {[](Fixture& f) { f.p.defer_embedding_wgrad = true; }, "plan.defer_embedding_wgrad", "does not defer"},
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.defer_embedding_wgrad = true;
                        f.p.gradient_accumulation_fusion = false; },
       "plan.defer_embedding_wgrad", "gradient accumulation fusion"},
      // MTP is not priced on a CPU device (the bundled trainer's host profile).
      {[](Fixture& f) { f.p.framework = Framework::generic; f.m.mtp_layers = 1; f.c.gpu.host_profile = "cpu.json"; },
       "model.mtp_layers", "CPU device"},
      // Only the first segment (the embedding alone) and the last (the loss alone, or with the
      // MTP modules: 'mL') may hold no layers.
      {[](Fixture& f) { f.p.framework = Framework::generic; f.m.mtp_layers = 1; f.p.stage_layers = {8, 8, 0, 8}; },
       "plan.stage_layers", "at least one layer"},
      {[](Fixture& f) { f.p.framework = Framework::generic; f.p.stage_layers = {8, 0, 8, 8}; },
       "plan.stage_layers", "at least one layer"},
      // Multi-token prediction: Megatron-Core (--mtp-num-layers) and the idealised entry build it.
      {[](Fixture& f) { f.m.mtp_layers = 1; }, "model.mtp_layers", "megatron-core or generic do"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Fixture f;
    cases[i].edit(f);
    const auto v = f.check();
    ASSERT_TRUE(v.has_value()) << "case " << i;
    EXPECT_EQ(v->field, cases[i].field) << "case " << i << ": " << v->rule;
    EXPECT_NE(v->rule.find(cases[i].says), std::string::npos) << "case " << i << ": " << v->rule;
  }
  for (auto fw : {Framework::megatron_core, Framework::generic}) {
    Fixture f;
    f.p.framework = fw;
    f.p.sequence_parallel = true;  // Megatron-Core's TP needs it
    f.m.mtp_layers = 1;
    EXPECT_FALSE(f.check().has_value()) << to_string(fw) << ": " << f.check()->rule;
    f.p.stage_layers = {8, 8, 8, 0};  // Megatron-Core's "...|mL": the MTP module and the loss alone
    EXPECT_FALSE(f.check().has_value()) << to_string(fw) << ": " << f.check()->rule;
    // account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split: the
    // embedding alone first, the loss alone last (Megatron-Bridge's Llama 3.1 405B at VP 8).
    f.m.mtp_layers = 0;
    f.p.stage_layers = {0, 12, 12, 0};
    EXPECT_FALSE(f.check().has_value()) << to_string(fw) << ": " << f.check()->rule;
  }
  // What they accept: ZB-H1 and DualPipe (64 micro-batches, even pp) on the idealised framework.
  for (auto s : {Schedule::zb_h1, Schedule::dualpipe}) {
    Fixture f;
    f.p.framework = Framework::generic;
    f.p.schedule = s;
    EXPECT_FALSE(f.check().has_value()) << to_string(s) << ": " << f.check()->rule;
  }
}

TEST(CheckPlan, DualPipeStagesHoldTheirMirrorSegment) {
  // pp 4 under DualPipe: stage s runs segment s (chunk 0) and segment 3 - s (chunk 1); both end
  // stages hold the embedding and the head.
  PlanSpec p;
  p.pp = 4;
  p.schedule = Schedule::dualpipe;
  EXPECT_EQ(p.model_chunks(), 2);
  EXPECT_EQ(p.segments(), 4);
  EXPECT_EQ(p.chunk_segment(1, 0), 1);
  EXPECT_EQ(p.chunk_segment(1, 1), 2);
  EXPECT_EQ(p.chunk_segment(3, 1), 0);
  EXPECT_TRUE(p.holds_first_segment(3));
  EXPECT_TRUE(p.holds_last_segment(0));
  EXPECT_FALSE(p.holds_first_segment(1));
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 3;
  EXPECT_EQ(p.segments(), 12);
  EXPECT_EQ(p.chunk_segment(1, 2), 9);
  EXPECT_FALSE(p.holds_first_segment(3));
}

TEST(CheckPlan, OffloadOnlyAsEachFrameworkDoesIt) {
  // Fixture: tp 2, pp 4, dp 4, 24 layers, recompute none, zero 0; the cluster states its hosts'
  // memory bandwidth so that only the framework rules are at stake. Each rule as the framework's
  // own code states it (core/framework.cpp cites the lines).
  struct Case { std::function<void(Fixture&)> edit; const char* says; };
  const std::vector<Case> refused = {
      // Megatron-LM 2021-22: no CPU optimizer, no activation offload.
      {[](Fixture& f) { f.p.zero = 1; f.p.offload.optimizer = true; }, "--optimizer-cpu-offload"},
      {[](Fixture& f) { f.p.offload.activations = 0.5; }, "keeps activations on the GPU"},
      // Megatron-Core: the optimizer offload rides the distributed optimizer (zero 1 only).
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.offload.optimizer = true; }, "plan.zero 1 (it is 0)"},
      // ... and TransformerConfig's cpu_offloading: no pipeline, no recompute, not every layer.
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.offload.activations = 0.5; }, "without a pipeline"},
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.pp = 1; f.p.dp = 16;
                        f.p.recompute = Recompute::selective; f.p.offload.activations = 0.5; }, "activation recompute"},
      {[](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.pp = 1; f.p.dp = 16;
                        f.p.offload.activations = 1.0; }, "below 1"},
      // DeepSpeed: offload_optimizer is a ZeRO mode (stage >= 1); cpu_checkpointing needs
      // activation checkpointing.
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.offload.optimizer = true; }, "plan.zero 1 to 3 (it is 0)"},
      {[](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.offload.activations = 1.0; }, "plan.recompute full"},
      // FSDP's CPU offload moves parameters too: not what plan.offload describes.
      {[](Fixture& f) { f.p.framework = Framework::torchtitan; f.p.tp = 1; f.p.pp = 1; f.p.dp = 32; f.p.zero = 3;
                        f.p.offload.optimizer = true; }, "CPUOffloadPolicy"},
      {[](Fixture& f) { f.p.framework = Framework::pytorch; f.p.tp = 1; f.p.pp = 1; f.p.dp = 32;
                        f.p.offload.activations = 0.5; }, "keeps saved activations on the GPU"},
      {[](Fixture& f) { f.p.framework = Framework::foresight_train; f.p.zero = 1; f.p.offload.optimizer = true; },
       "does not run optimizer offload yet"},
  };
  for (std::size_t i = 0; i < refused.size(); ++i) {
    Fixture f;
    f.c.host.memory_bandwidth = BytesPerSecond(200e9);
    refused[i].edit(f);
    const std::optional<PlanViolation> v = f.check();
    ASSERT_TRUE(v.has_value()) << "case " << i;
    EXPECT_EQ(v->field.rfind("plan.offload.", 0), 0u) << "case " << i << ": " << v->field;
    EXPECT_NE(v->rule.find(refused[i].says), std::string::npos) << "case " << i << ": " << v->rule;
  }
  const std::vector<std::function<void(Fixture&)>> allowed = {
      [](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.zero = 1; f.p.offload.optimizer = true; },
      [](Fixture& f) { f.p.framework = Framework::megatron_core; f.p.pp = 1; f.p.dp = 16; f.p.offload.activations = 23.0 / 24; },
      [](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.zero = 1; f.p.offload.optimizer = true;
                       f.p.recompute = Recompute::full; f.p.offload.activations = 1.0; },
      [](Fixture& f) { f.p.framework = Framework::deepspeed; f.p.tp = 1; f.p.pp = 1; f.p.dp = 32; f.p.zero = 3;
                       f.p.offload.optimizer = true; },
      [](Fixture& f) { f.p.framework = Framework::foresight_train; f.p.offload.activations = 0.5; },
      [](Fixture& f) { f.p.framework = Framework::generic; f.p.offload.optimizer = true; f.p.offload.activations = 1.0; },
  };
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    Fixture f;
    f.c.host.memory_bandwidth = BytesPerSecond(200e9);
    allowed[i](f);
    const std::optional<PlanViolation> v = f.check();
    EXPECT_FALSE(v.has_value()) << "case " << i << ": " << v->field << ": " << v->rule;
  }
  // Megatron-Core's largest fraction leaves one layer on the device.
  EXPECT_DOUBLE_EQ(framework_traits(Framework::megatron_core).max_activation_offload(24), 23.0 / 24);
  EXPECT_DOUBLE_EQ(framework_traits(Framework::deepspeed).max_activation_offload(24), 1.0);
}

TEST(CheckPlan, TheTrainersEntryRefusesWhatTheTrainerDoesNotBuild) {
  // foresight-train builds GPT-2/3 blocks only (trainer/gpt.hpp); each other feature is named.
  struct Case { std::function<void(ModelSpec&)> edit; const char* field; };
  const std::vector<Case> cases = {
      {[](ModelSpec& m) { m.activation = Activation::swiglu; }, "model.activation"},
      {[](ModelSpec& m) { m.tie_embeddings = false; }, "model.tie_embeddings"},
      {[](ModelSpec& m) { m.position = PositionEmbedding::rope; }, "model.position_embedding"},
      {[](ModelSpec& m) { m.norm = Norm::rmsnorm; }, "model.norm"},
      {[](ModelSpec& m) { m.bias = false; }, "model.bias"},
      {[](ModelSpec& m) { m.kv_heads = 4; }, "model.kv_heads"},
      {[](ModelSpec& m) { m.attention_head_dim = 64; }, "model.head_dim"},  // 16 x 64 != 2048
      {[](ModelSpec& m) { m.moe = MoeSpec{.experts = 8, .top_k = 2, .dropless = true}; }, "model.moe.dropless"},
      {[](ModelSpec& m) { m.moe = MoeSpec{.experts = 8, .top_k = 2, .first_dense = 1}; }, "model.moe.first_dense"},
  };
  const FrameworkTraits& trainer = framework_traits(Framework::foresight_train);
  for (const Case& c : cases) {
    Fixture f;
    c.edit(f.m);
    const std::optional<PlanViolation> v = trainer.model_refusal(f.m);
    ASSERT_TRUE(v.has_value()) << c.field;
    EXPECT_EQ(v->field, c.field);
    EXPECT_NE(v->rule.find("foresight-train does not run"), std::string::npos) << v->rule;
    // Only the trainer's entry is limited to GPT blocks.
    EXPECT_FALSE(framework_traits(Framework::megatron_core).model_refusal(f.m).has_value()) << c.field;
  }
  EXPECT_FALSE(trainer.model_refusal(Fixture().m).has_value());
  // Its plan-level limits: ZeRO-1 beside expert parallelism, HSDP, an overlapped reduction.
  Fixture f;
  f.m.moe = MoeSpec{.experts = 8, .top_k = 2};
  f.p.framework = Framework::foresight_train;
  f.p.zero = 1;
  f.p.ep = 4;
  std::optional<PlanViolation> v = f.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.zero");
  f.p.ep = 1;
  f.p.shard_group = 2;
  v = f.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.shard_group");
  f.p.shard_group = 0;
  f.p.dp_overlap = true;
  v = f.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.dp_overlap");
}

TEST(CheckPlan, DeepSpeedOverlapsOnlyAtZero2AndBuildsMoeWithoutPipelineOrZero3) {
  // DeepSpeed v0.5.8 engine.py allreduce_gradients: stage 0 all-reduces and stage 1 reduces at the
  // accumulation boundary; only stage 2 reduces during the backward (overlap_comm). Fixture with
  // pp 1 and dp 16.
  auto flat = [](Fixture& f) {
    f.p.framework = Framework::deepspeed;
    f.p.pp = 1;
    f.p.dp = 16;
    f.p.dp_overlap = true;
  };
  for (int zero : {0, 1, 2, 3}) {
    Fixture f;
    flat(f);
    f.p.zero = zero;
    const std::optional<PlanViolation> v = f.check();
    if (zero == 2) {
      EXPECT_FALSE(v.has_value()) << v->rule;
    } else {
      ASSERT_TRUE(v.has_value()) << "zero " << zero;
      EXPECT_EQ(v->field, "plan.dp_overlap");
      EXPECT_NE(v->rule.find("only at ZeRO stage 2"), std::string::npos) << v->rule;
    }
  }
  // With a pipeline the pipeline engine's own reason comes first.
  Fixture piped;
  piped.p.framework = Framework::deepspeed;
  piped.p.dp_overlap = true;
  piped.p.zero = 1;
  ASSERT_TRUE(piped.check().has_value());
  EXPECT_NE(piped.check()->rule.find("pipeline flush"), std::string::npos) << piped.check()->rule;

  // MoE: Megatron-DeepSpeed's GPTModelPipe is dense (MoE runs with --no-pipeline-parallel), and
  // DeepSpeed asserts "MoE not supported with Stage 3" whatever the expert parallelism.
  Fixture moe;
  moe.m.moe = MoeSpec{.experts = 8, .top_k = 1};
  moe.p.framework = Framework::deepspeed;
  std::optional<PlanViolation> v = moe.check();  // pp 4
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.pp");
  moe.p.pp = 1;
  moe.p.dp = 16;
  moe.p.zero = 3;
  moe.p.tp = 1;
  moe.p.dp = 32;
  v = moe.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->field, "plan.zero");
  EXPECT_NE(v->rule.find("MoE not supported with Stage 3"), std::string::npos) << v->rule;
  moe.p.zero = 2;
  EXPECT_FALSE(moe.check().has_value()) << moe.check()->rule;
  // Other frameworks pipeline MoE models.
  Fixture core;
  core.m.moe = MoeSpec{.experts = 8, .top_k = 1};
  core.p.framework = Framework::megatron_core;
  EXPECT_FALSE(core.check().has_value()) << core.check()->rule;
}

TEST(CheckPlan, DeferredHeadWeightGradientsRunOnMegatronCorePipelines) {
  Fixture f;
  f.p.framework = Framework::megatron_core;
  f.p.defer_embedding_wgrad = true;
  EXPECT_FALSE(f.check().has_value());
  f.p.wgrad_deferral_limit = 22;  // the NeMo recipes' figure; more than the step's micro-batches is allowed
  EXPECT_FALSE(f.check().has_value());
}
