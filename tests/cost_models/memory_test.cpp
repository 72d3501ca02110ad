// Memory per GPU against independent references: Korthikanti et al. 2022 (arXiv:2205.05198)
// Table 2 and eqs. 1-6, Megatron-LM's docs/distrib_optimizer.md bytes/param table, the ZeRO paper
// (Rajbhandari et al. 2020) Fig. 1 example, and hand computations written out beside each check.
#include "cost_models/memory.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "core/flops.hpp"
#include "core/scenario.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::cost_models {
namespace {

using namespace foresight::literals;

// GPT-3 175B as Korthikanti sec. 5 uses it: a = 96, s = 2048, h = 12288 (5as/h = 80).
ModelSpec gpt3_175b() {
  return ModelSpec{.name = "gpt3-175b", .layers = 96, .hidden = 12288, .heads = 96, .seq_len = 2048,
                   .vocab = 51200, .ffn_hidden = 4 * 12288, .kv_heads = 96, .moe = std::nullopt};
}

// MT-NLG 530B (Smith et al. 2022): 105 layers, h 20480, 128 heads, s 2048, vocab 51200.
ModelSpec mt_nlg_530b() {
  return ModelSpec{.name = "mt-nlg-530b", .layers = 105, .hidden = 20480, .heads = 128, .seq_len = 2048,
                   .vocab = 51200, .ffn_hidden = 4 * 20480, .kv_heads = 128, .moe = std::nullopt};
}

// SC21 1T (Narayanan et al. 2021 Table 1): 128 layers, h 25600, 160 heads, s 2048, vocab 51200.
ModelSpec sc21_1t() {
  return ModelSpec{.name = "sc21-1t", .layers = 128, .hidden = 25600, .heads = 160, .seq_len = 2048,
                   .vocab = 51200, .ffn_hidden = 4 * 25600, .kv_heads = 160, .moe = std::nullopt};
}

// Llama 3 70B (Dubey et al. 2024 Table 3: 80 layers, h 8192, 64 heads, 8 KV heads, SwiGLU ffn
// 28672, RMSNorm, RoPE, no biases, untied head; vocabulary 128,256) as Megatron-Bridge trains it:
// sequences of 8192, no dropout.
ModelSpec llama3_70b() {
  ModelSpec m{.name = "llama3-70b", .layers = 80, .hidden = 8192, .heads = 64, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 28672, .kv_heads = 8, .moe = std::nullopt};
  m.activation = Activation::swiglu;
  m.norm = Norm::rmsnorm;
  m.position = PositionEmbedding::rope;
  m.bias = false;
  m.tie_embeddings = false;
  m.dropout = false;
  return m;
}

// Selene: DGX A100 80GB nodes, PCIe Gen4 25 GB/s per direction, 2 TB host memory.
ClusterSpec selene() {
  ClusterSpec c;
  c.name = "selene";
  c.nodes = 560;
  c.gpus_per_node = 8;
  c.gpu.name = "a100-sxm4-80gb";
  c.gpu.hbm = 80_GiB;
  c.host = HostSpec{.pcie_bandwidth = 25_GBps, .memory = 2000_GB, .memory_bandwidth = 260_GBps};
  return c;
}

// How a plan executes when trained in `dtype` with Adam (framework and attention from the plan).
ExecutionModel exec(const PlanSpec& p, Dtype dtype = Dtype::bf16) {
  return execution_model(TrainingSpec{.global_batch = 1, .dtype = dtype, .optimizer = Optimizer::adam}, p);
}
ExecutionModel exec(const TrainingSpec& t, const PlanSpec& p) { return execution_model(t, p); }

// One layer's stashed activations for a whole sequence of the plan's micro-batch size `b`.
Bytes layer(const ModelSpec& m, const PlanSpec& p, int b, int seq) { return activation_bytes_per_layer(exec(p), m, p, b, seq); }

PlanSpec plan_with(int tp, bool sp, Recompute rc) {
  PlanSpec p;
  p.tp = tp;
  p.sequence_parallel = sp;
  p.recompute = rc;
  return p;
}

// ---- Korthikanti Table 2, literally, for GPT-3 (s=2048, b=1, h=12288, a=96, t=8) --------------
// sbh = 2048 * 12288 = 25,165,824 and 5as/h = 5*96*2048/12288 = 80.

TEST(KorthikantiTable2, NoParallelism) {
  // sbh (34 + 80) = 25,165,824 * 114
  EXPECT_DOUBLE_EQ(activations_no_parallelism(2048, 1, 12288, 96).value(), 2868903936.0);
}

TEST(KorthikantiTable2, TensorParallel) {
  // sbh (10 + 24/8 + 80/8) = 25,165,824 * 23
  EXPECT_DOUBLE_EQ(activations_tensor_parallel(2048, 1, 12288, 96, 8).value(), 578813952.0);
}

TEST(KorthikantiTable2, TensorSequenceParallel) {
  // sbh (34/8 + 80/8) = 25,165,824 * 14.25
  EXPECT_DOUBLE_EQ(activations_tensor_sequence_parallel(2048, 1, 12288, 96, 8).value(), 358612992.0);
}

TEST(KorthikantiTable2, TensorParallelSelective) {
  // sbh (10 + 24/8) = 25,165,824 * 13
  EXPECT_DOUBLE_EQ(activations_tensor_parallel_selective(2048, 1, 12288, 8).value(), 327155712.0);
}

TEST(KorthikantiTable2, TensorSequenceParallelSelective) {
  // sbh (34/8) = 25,165,824 * 4.25
  EXPECT_DOUBLE_EQ(activations_tensor_sequence_parallel_selective(2048, 1, 12288, 8).value(), 106954752.0);
}

TEST(KorthikantiTable2, FullRecompute) {
  // sbh * 2
  EXPECT_DOUBLE_EQ(activations_full_recompute(2048, 1, 12288).value(), 50331648.0);
}

TEST(KorthikantiTable2, SelectiveSavesSeventyPercentForGpt3) {
  // Sec. 5: "selective activation recomputation ... save 70% and 65% of the required memory for
  // activations for the GPT-3 and MT-NLG models": 80/114 = 0.70, 64/98 = 0.65.
  const double gpt3 = 1 - activations_tensor_sequence_parallel_selective(2048, 1, 12288, 8) /
                              activations_tensor_sequence_parallel(2048, 1, 12288, 96, 8);
  const double mtnlg = 1 - activations_tensor_sequence_parallel_selective(2048, 1, 20480, 8) /
                               activations_tensor_sequence_parallel(2048, 1, 20480, 128, 8);
  EXPECT_NEAR(gpt3, 0.70, 0.005);
  EXPECT_NEAR(mtnlg, 0.65, 0.005);
}

TEST(KorthikantiEquations, Eq5FirstStageAndInterleavingFactor) {
  // Eq. 5: sbhL/t (34 + 5as/h) = 25,165,824 * 96 / 8 * 114
  EXPECT_DOUBLE_EQ(first_stage_activations_eq5(2048, 1, 12288, 96, 8, 96).value(), 34426847232.0);
  // Sec. 4.2.3: 1 + (p-1)/(pm) with p = 8, m = 3 (sec. 6 uses m = 3 for 175B): 1 + 7/24
  EXPECT_DOUBLE_EQ(interleaved_activation_factor(8, 3), 31.0 / 24.0);
  EXPECT_DOUBLE_EQ(interleaved_activation_factor(8, 1), 1.0 + 7.0 / 8.0);
}

TEST(KorthikantiEquations, Sec43EmbeddingAndOutput) {
  // p = 1: sbh/8 + 4sbh/8 (1 + 51200/12288) = 3,145,728 + 12,582,912 + 52,428,800 (4sbv/t)
  EXPECT_DOUBLE_EQ(embedding_and_output_activations_sec43(2048, 1, 12288, 51200, 8, 1).value(), 68157440.0);
  // p = 8: only the embedding dropout masks of 8 micro-batches, sbhp/t = sbh
  EXPECT_DOUBLE_EQ(embedding_and_output_activations_sec43(2048, 1, 12288, 51200, 8, 8).value(), 25165824.0);
}

// ---- The generalised model reproduces each Table 2 row for Megatron's GPT -----------------------

TEST(ActivationBytesPerLayer, ReducesToEveryTable2Row) {
  const ModelSpec m = gpt3_175b();
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  EXPECT_DOUBLE_EQ(layer(m, plan_with(1, false, Recompute::none), 1, 2048).value(),
                   activations_no_parallelism(s, b, h, a).value());
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, false, Recompute::none), 1, 2048).value(),
                   activations_tensor_parallel(s, b, h, a, t).value());
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, true, Recompute::none), 1, 2048).value(),
                   activations_tensor_sequence_parallel(s, b, h, a, t).value());
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, false, Recompute::selective), 1, 2048).value(),
                   activations_tensor_parallel_selective(s, b, h, t).value());
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, true, Recompute::selective), 1, 2048).value(),
                   activations_tensor_sequence_parallel_selective(s, b, h, t).value());
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, false, Recompute::full), 1, 2048).value(),
                   activations_full_recompute(s, b, h).value());
  // With sequence parallelism the stored layer input is the sequence-sharded one: 2sbh/t.
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, true, Recompute::full), 1, 2048).value(),
                   activations_full_recompute(s, b, h).value() / 8);
  // Linear in the micro-batch size.
  EXPECT_DOUBLE_EQ(layer(m, plan_with(8, false, Recompute::none), 4, 2048).value(),
                   4 * activations_tensor_parallel(s, b, h, a, t).value());
}

TEST(ActivationBytesPerLayer, SoftmaxFallbackKeepsItsOutputInFp32) {
  // Korthikanti's 5as/h term counts the softmax output (2 bytes), its dropout mask (1) and the
  // dropout output (2) per score element. Megatron's PyTorch fallback (plan.fused_softmax false)
  // keeps the fp32 softmax output for its backward: 4 + 1 + 2 = 7, i.e. 2as/h more, over t.
  // GPT-3 175B at t 8: sbh x 2 x 96 x 2048 / 12288 / 8 = 25,165,824 x 4 bytes more.
  const ModelSpec m = gpt3_175b();
  PlanSpec fallback = plan_with(8, false, Recompute::none);
  fallback.fused_softmax = false;
  EXPECT_DOUBLE_EQ(layer(m, fallback, 1, 2048).value() - layer(m, plan_with(8, false, Recompute::none), 1, 2048).value(),
                   25165824.0 * 4);
  // Full recompute stores only the layer input; the fallback changes nothing there.
  fallback.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(layer(m, fallback, 1, 2048).value(), layer(m, plan_with(8, false, Recompute::full), 1, 2048).value());
}

TEST(ActivationBytesPerLayer, GroupedQueryAttentionAndWideFfn) {
  // h = 4096, 32 heads, 8 KV heads (k = 1024), ffn 11008, s = 2048, b = 1, t = 1:
  // replicated 10; sharded 4 + 4*1024/4096 + 4*11008/4096 = 15.75; 5as/h = 5*32*2048/4096 = 80.
  // sbh = 8,388,608; (10 + 15.75 + 80) * sbh = 887,095,296.
  const ModelSpec m{.name = "gqa", .layers = 32, .hidden = 4096, .heads = 32, .seq_len = 2048,
                    .vocab = 32000, .ffn_hidden = 11008, .kv_heads = 8, .moe = std::nullopt};
  EXPECT_DOUBLE_EQ(layer(m, plan_with(1, false, Recompute::none), 1, 2048).value(),
                   887095296.0);
}

TEST(ActivationBytesPerLayer, TerapipeSlices) {
  const ModelSpec m = gpt3_175b();
  const PlanSpec p = plan_with(8, false, Recompute::none);
  // One slice is the whole sequence.
  EXPECT_DOUBLE_EQ(terapipe_activation_bytes_per_layer(exec(p), m, p, 1, {2048}).value(),
                   activation_bytes_per_layer(exec(p), m, p, 1, 2048).value());
  // Two slices of 1024: linear part unchanged, sbh*13 = 327,155,712; attention over
  // 1024*1024 + 1024*2048 = 3,145,728 pairs: 5*96*3,145,728/8 = 188,743,680. Sum 515,899,392.
  EXPECT_DOUBLE_EQ(terapipe_activation_bytes_per_layer(exec(p), m, p, 1, {1024, 1024}).value(), 515899392.0);
}

TEST(RecomputeWorkingBytes, OneLayerRematerialised) {
  const ModelSpec m = gpt3_175b();
  EXPECT_DOUBLE_EQ(recompute_working_bytes(exec(plan_with(8, false, Recompute::none)), m, plan_with(8, false, Recompute::none), 1, 2048).value(), 0.0);
  // Full: the TP row of Table 2 for one layer, 578,813,952, less the layer input the stash holds
  // (2sbh = 2 x 2048 x 12288 = 50,331,648), which the re-run reads rather than rebuilds.
  EXPECT_DOUBLE_EQ(recompute_working_bytes(exec(plan_with(8, false, Recompute::full)), m, plan_with(8, false, Recompute::full), 1, 2048).value(), 528482304.0);
  // Selective: the attention core 5as^2b/t = 5*96*2048^2/8 = 251,658,240.
  EXPECT_DOUBLE_EQ(recompute_working_bytes(exec(plan_with(8, true, Recompute::selective)), m, plan_with(8, true, Recompute::selective), 1, 2048).value(), 251658240.0);
}

// ---- Pipeline schedules -------------------------------------------------------------------------

TEST(MicrobatchesInFlight, PerSchedule) {
  PlanSpec p;
  p.pp = 4;
  p.schedule = Schedule::one_f_one_b;
  EXPECT_EQ(microbatches_in_flight(p, 8, 0), 4);
  EXPECT_EQ(microbatches_in_flight(p, 8, 1), 3);
  EXPECT_EQ(microbatches_in_flight(p, 8, 3), 1);
  EXPECT_EQ(microbatches_in_flight(p, 2, 0), 2);  // fewer micro-batches than stages
  EXPECT_EQ(microbatches_in_flight(p, 2, 3), 1);

  p.schedule = Schedule::gpipe;
  EXPECT_EQ(microbatches_in_flight(p, 8, 0), 8);
  EXPECT_EQ(microbatches_in_flight(p, 8, 3), 8);
  p.schedule = Schedule::terapipe;
  EXPECT_EQ(microbatches_in_flight(p, 8, 2), 8);

  // Interleaved, p = 4, v = 2: Megatron's warm-up (p - s - 1)*2 + (v - 1)*p, plus one:
  // stage 0: 6 + 4 + 1 = 11 chunk forwards; stage 3: 0 + 4 + 1 = 5.
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 2;
  EXPECT_EQ(microbatches_in_flight(p, 8, 0), 11);
  EXPECT_EQ(microbatches_in_flight(p, 8, 3), 5);
  EXPECT_EQ(microbatches_in_flight(p, 4, 0), 8);  // capped at m * v
}

TEST(StageActivations, OneFOneBFirstStageIsEq5) {
  // 1F1B with tp 8 + SP, no recompute, pp 8: stage 0 stashes 8 micro-batches x 12 layers = eq. 5.
  const ModelSpec m = gpt3_175b();
  PlanSpec p = plan_with(8, true, Recompute::none);
  p.pp = 8;
  p.dp = 1;
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 0).value(),
                   first_stage_activations_eq5(2048, 1, 12288, 96, 8, 96).value());
  // The last stage holds one micro-batch: 12 layers' worth.
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 7).value(),
                   12 * activations_tensor_sequence_parallel(2048, 1, 12288, 96, 8).value());
  // Sec. 4.3 for p > 1: the embedding dropout masks, sbhp/t.
  EXPECT_DOUBLE_EQ(input_embedding_activation_bytes(exec(p), m, p, 1, 2048, 8).value(),
                   embedding_and_output_activations_sec43(2048, 1, 12288, 51200, 8, 8).value());
}

TEST(StageActivations, InterleavedFirstStageIsEq5TimesFactor) {
  // Korthikanti sec. 6: 175B with m = 3 interleaving stages, p = 8: 96/(8*3) = 4 layers a chunk;
  // stage 0 holds (7*2 + 2*8 + 1) = 31 chunks = 124 layers = 96 (1 + 7/24).
  const ModelSpec m = gpt3_175b();
  PlanSpec p = plan_with(8, true, Recompute::selective);
  p.pp = 8;
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 3;
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  // Eq. 6 (34 sbhL/t) scaled by the factor.
  const double eq6 = 34.0 * 2048 * 12288 * 96 / 8;
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 0).value(),
                   eq6 * interleaved_activation_factor(8, 3));
}

TEST(StageActivations, SinglestageIncludesSec43OutputLayer) {
  // p = 1 with tp 8 + SP: embedding + final layernorm + output layer = Korthikanti sec. 4.3.
  const ModelSpec m = gpt3_175b();
  const PlanSpec p = plan_with(8, true, Recompute::none);
  EXPECT_DOUBLE_EQ((input_embedding_activation_bytes(exec(p), m, p, 1, 2048, 1) +
                    output_layer_activation_bytes(exec(p), m, p, 1, 2048)).value(),
                   embedding_and_output_activations_sec43(2048, 1, 12288, 51200, 8, 1).value());
}

TEST(StageActivations, MtNlgFirstStageByHand) {
  // MT-NLG 530B, tp 8, pp 35, 1F1B, full recompute, no SP, m = 1920/8 = 240.
  // sbh = 2048 * 20480 = 41,943,040.
  // stash: 35 micro-batches x 3 layers x 2sbh = 105 * 83,886,080 = 8,808,038,400
  // embedding dropout masks: 35 * sbh = 1,468,006,400
  // recompute working set: sbh (10 + 24/8 + 5*128*2048/(20480*8)) = 21 sbh, less the stashed
  // input 2 sbh: 19 sbh = 796,917,760
  // total 11,072,962,560
  const ModelSpec m = mt_nlg_530b();
  PlanSpec p = plan_with(8, false, Recompute::full);
  p.pp = 35;
  p.dp = 8;
  const TrainingSpec tr{.global_batch = 1920, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  EXPECT_DOUBLE_EQ(stage_activation_bytes(exec(tr, p), m, tr, p, 0).value(), 11072962560.0);
}

// ---- Parameters and bytes per parameter ---------------------------------------------------------

TEST(ParametersOnGpu, StagesAddUpToTheModel) {
  // Summed over stages and tp ranks: every layer once, the word embedding twice (Megatron's copy
  // on the last stage), positions and the final layernorm on each of the tp ranks.
  const ModelSpec m = gpt3_175b();
  PlanSpec p;
  p.tp = 8;
  p.pp = 8;
  double sum = 0;
  for (int s = 0; s < p.pp; ++s) sum += parameters_on_gpu(framework_traits(p.framework), m, p, s).total() * p.tp;
  const double h = m.hidden;
  const double expected = parameter_count(m) + double(m.vocab) * h + (p.tp - 1) * (m.seq_len * h + 2 * h);
  EXPECT_NEAR(sum, expected, expected * 1e-12);
  // A middle stage: 12 layers x (12h^2 + 13h) / 8.
  EXPECT_DOUBLE_EQ(parameters_on_gpu(framework_traits(p.framework), m, p, 3).dense, 12 * (12.0 * h * h + 13 * h) / 8);
}

TEST(ParametersOnGpu, MtpModulesSitOnTheLastStageWithAnEmbeddingCopy) {
  // GPT-3 175B, untied, with one MTP module, tp 8 x pp 8 (Megatron-Core): the last stage holds the
  // module's layer ((12h^2 + 13h) / 8 with Megatron's biases), its 2h x h projection split over tp,
  // three LayerNorms (2h each) and a copy of the embedding for the next tokens' lookup, its word
  // rows split over tp and its learned positions whole (GPTModel builds its LanguageModelEmbedding
  // where mtp_process is set); the other stages are unchanged.
  ModelSpec m = gpt3_175b();
  m.tie_embeddings = false;
  PlanSpec p = plan_with(8, true, Recompute::none);
  p.pp = 8;
  p.framework = Framework::megatron_core;
  ModelSpec with = m;
  with.mtp_layers = 1;
  const FrameworkTraits& fw = framework_traits(p.framework);
  const double h = m.hidden;
  const double layer = (12.0 * h * h + 13 * h) / 8, projection = 2.0 * h * h / 8, norms = 3 * 2 * h;
  const double embedding = double(m.vocab) * h / 8 + 2048.0 * h;
  for (int s = 0; s < 7; ++s) EXPECT_DOUBLE_EQ(parameters_on_gpu(fw, with, p, s).dense, parameters_on_gpu(fw, m, p, s).dense) << s;
  EXPECT_DOUBLE_EQ(parameters_on_gpu(fw, with, p, 7).dense - parameters_on_gpu(fw, m, p, 7).dense,
                   layer + projection + norms + embedding);
  EXPECT_EQ(stage_layers(with, p, 7).back(), 96);  // the module's layer after the model's 96
  // Its activations: one more layer stashed on the last stage (1F1B: one micro-batch in flight
  // there), another head's logits and inputs, and the two norms' and the projection's inputs.
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  const ExecutionModel x = exec(tr, p);
  const Bytes added = stage_activation_bytes(x, with, tr, p, 7) - stage_activation_bytes(x, m, tr, p, 7);
  const Bytes expected = activation_bytes_per_layer(x, m, p, 1, 2048) + output_layer_activation_bytes(x, m, p, 1, 2048) +
                         Bytes(4.0 * 2 * 2048 * h / 8);  // h, h and 2h per token, 16-bit, sequence-parallel
  EXPECT_NEAR(added.value(), expected.value(), 1.0);
  // DualPipe: both end stages hold the last segment, and with it the embedding already.
  PlanSpec d = p;
  d.framework = Framework::generic;
  d.schedule = Schedule::dualpipe;
  const FrameworkTraits& g = framework_traits(d.framework);
  EXPECT_DOUBLE_EQ(parameters_on_gpu(g, with, d, 0).dense - parameters_on_gpu(g, m, d, 0).dense, layer + projection + norms);
}

TEST(BufferBytes, DeepEpBuffersAsItsSizeHintsCountThem) {
  // DeepSeek-V3 (hidden 7168) at ep 64 through DeepEP (deepseek-ai/DeepEP @ dd758ca,
  // csrc/legacy/config.hpp get_nvl_buffer_size_hint / get_rdma_buffer_size_hint; the dispatch
  // configuration for 64 ranks, Config(20, 32, 288, 8, 128)): 10 channels, 8 NVLink peers, 8 RDMA
  // ranks, 14336 hidden bytes, 8 bytes of source metadata, 128 int64 top-k indices, 128 fp32
  // weights and 128 fp32 scales per queued token.
  //  NVLink: 10 x 8 x (2 x 8 + 3) x 4 = 6,080 + 10 x 8 x 288 x (14336 + 8 + 1024 + 512 + 512)
  //          = 377,671,680; 377,677,760 rounded up to 128 bytes = 377,677,824.
  //  RDMA:   10 x 8 x (8 x 2 + 2) x 2 x 4 = 11,520 + 10 x 8 x 128 x (14336 + 8 + 1024 + 512 + 512
  //          + 16) x 2 = 336,035,840; 336,047,360 (a multiple of 128).
  ModelSpec m = load_model(resolve_scenario("models", "deepseek-v3"));
  PlanSpec p;
  p.ep = 64;
  p.ep_dispatcher = EpDispatcher::deepep;
  EXPECT_EQ(deepep_buffer_bytes(m, p).value(), 377677824.0 + 336047360.0);
  // Eight ranks, one node: no RDMA queues; 256 tokens per NVLink queue, one RDMA rank:
  // 10 x 8 x 5 x 4 = 1,600 + 10 x 8 x 256 x 16392 = 335,708,160; 335,709,760 -> 335,709,824.
  p.ep = 8;
  EXPECT_EQ(deepep_buffer_bytes(m, p).value(), 335709824.0);
  // Sixteen ranks (two nodes): RDMA queues of 128 tokens rounded up to the dispatch send chunk of
  // 20 (Config's align_up): 140. NVLink 10 x 8 x (2 x 2 + 3) x 4 = 2,240 + 10 x 8 x 288 x 16392 =
  // 377,673,920 -> 377,673,984; RDMA 10 x 2 x 18 x 2 x 4 = 2,880 + 10 x 2 x 140 x 2 x 16408 =
  // 91,887,680 -> 91,887,744.
  p.ep = 16;
  EXPECT_EQ(deepep_buffer_bytes(m, p).value(), 377673984.0 + 91887744.0);
  // The group is expert-TP x EP: tp 2 unfolded with ep 8 is that same 16-rank group.
  p.ep = 8;
  p.tp = 2;
  EXPECT_EQ(deepep_buffer_bytes(m, p).value(), 377673984.0 + 91887744.0);
  p.ep_dispatcher = EpDispatcher::nccl;
  EXPECT_EQ(deepep_buffer_bytes(m, p).value(), 0.0);
}

TEST(StateBytesPerParam, MegatronDistribOptimizerTable) {
  // Megatron-LM docs/distrib_optimizer.md: bytes/param, non-distributed and distributed (d = 8).
  const auto bytes = [](Dtype dt, int zero) {
    return state_bytes_per_param(element_sizes(dt, Optimizer::adam, framework_traits(Framework::megatron)), zero, 8).total();
  };
  EXPECT_DOUBLE_EQ(bytes(Dtype::fp16, 0), 20.0);            // float16 param, float16 grads
  EXPECT_DOUBLE_EQ(bytes(Dtype::fp16, 1), 4.0 + 16.0 / 8);  // 4 + 16/d
  EXPECT_DOUBLE_EQ(bytes(Dtype::bf16, 0), 18.0);            // 16-bit param, fp32 grads
  EXPECT_DOUBLE_EQ(bytes(Dtype::bf16, 1), 6.0 + 12.0 / 8);  // 6 + 12/d
  EXPECT_DOUBLE_EQ(bytes(Dtype::fp32, 0), 16.0);            // fp32 param, fp32 grads
  EXPECT_DOUBLE_EQ(bytes(Dtype::fp32, 1), 8.0 + 8.0 / 8);   // 8 + 8/d
}

TEST(StateBytesPerParam, Bf16OptimizerStateAsNemoDistributedAdamKeepsIt) {
  // NeMo's distributed fused Adam with optim.dtype bf16 over bf16 weights (megatron_base_model.py:
  // store_params False): bf16 m and v (2 + 2 bytes) and no master copy; with FP8 parameters
  // (store_params True) a bf16 master (2). Megatron-Core, bf16 training, distributed over d = 8,
  // its gradient buffer fp32 (4): 2 + 4 + 4/8, or 2 + 4 + 6/8 with FP8 parameters; fp32 state: 2 + 4 + 12/8.
  const FrameworkTraits& f = framework_traits(Framework::megatron_core);
  const ElementSizes plain = element_sizes(Dtype::bf16, Optimizer::adam, f);
  const ElementSizes half = element_sizes(Dtype::bf16, Optimizer::adam, f, Dtype::bf16);
  const ElementSizes fp8 = element_sizes(Dtype::fp8, Optimizer::adam, f, Dtype::bf16, true);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(plain, 1, 8).total(), 2.0 + 4.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(half, 1, 8).total(), 2.0 + 4.0 + 4.0 / 8);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(fp8, 1, 8).total(), 2.0 + 4.0 + 6.0 / 8);
  // The step's HBM bytes per parameter: read the gradient (4), read and write the weight or master
  // and the moments, write the model copy where a master exists: 4 + 2 (2 + 4) = 16; with a bf16
  // master 4 + 2 (2 + 4) + 2 = 18; fp32 state 4 + 2 (4 + 8) + 2 = 30.
  EXPECT_DOUBLE_EQ(half.optimizer_step, 16.0);
  EXPECT_DOUBLE_EQ(fp8.optimizer_step, 18.0);
  EXPECT_DOUBLE_EQ(plain.optimizer_step, 30.0);
  // SGD keeps one moment: 2 bytes in bf16.
  EXPECT_DOUBLE_EQ(element_sizes(Dtype::bf16, Optimizer::sgd, f, Dtype::bf16).moments, 2.0);
}

TEST(StateBytesPerParam, ForeachAdamWPassesOverTheState) {
  // torch.optim.AdamW's foreach path under torchtitan (FSDP2: fp32 parameters, fp32 gradients and
  // moments; _multi_tensor_adamw): weight decay p *= (2 x 4), lerp of m toward g (4 + 4 + 4), v *=
  // beta2 (4 + 4), v += g x g (4 + 4 + 4), t = sqrt(v) (4 + 4), t /= c and t += eps (8 + 8), p +=
  // s m / t (4 + 4 + 4 + 4): 80 bytes in 8 launches, where the fused kernel reads g, p, m, v and
  // writes p, m, v (28, one launch). With 16-bit weights and an fp32 master (Megatron's layout) the
  // 16-bit copy is written too: 82.
  const FrameworkTraits& tt = framework_traits(Framework::torchtitan);
  const ElementSizes fused = element_sizes(Dtype::bf16, Optimizer::adam, tt);
  const ElementSizes foreach = element_sizes(Dtype::bf16, Optimizer::adam, tt, Dtype::fp32, false, false, OptimizerImpl::foreach);
  EXPECT_DOUBLE_EQ(fused.optimizer_step, 28.0);
  EXPECT_EQ(fused.optimizer_launches, 1);
  EXPECT_DOUBLE_EQ(foreach.optimizer_step, 80.0);
  EXPECT_EQ(foreach.optimizer_launches, 8);
  const ElementSizes master = element_sizes(Dtype::bf16, Optimizer::adam, framework_traits(Framework::megatron_core),
                                            Dtype::fp32, false, false, OptimizerImpl::foreach);
  EXPECT_DOUBLE_EQ(master.optimizer_step, 82.0);
  // Composer's DecoupledAdamW (llm-foundry) loops over the tensors: p.mul_ (2 x 4), m.mul_ then
  // .add_(g) (8 + 12), v.mul_ then .addcmul_(g, g) (8 + 12), (v.sqrt() / c).add_(eps) (8 + 8 + 8),
  // p.addcdiv_(m, denom) (16): 88 bytes in 9 kernels.
  const ElementSizes loop = element_sizes(Dtype::bf16, Optimizer::adam, framework_traits(Framework::llm_foundry),
                                          Dtype::fp32, false, false, OptimizerImpl::for_loop);
  EXPECT_DOUBLE_EQ(loop.optimizer_step, 88.0);
  EXPECT_EQ(loop.optimizer_launches, 9);
  // SGD keeps its own step: the foreach Adam passes do not apply.
  EXPECT_DOUBLE_EQ(element_sizes(Dtype::bf16, Optimizer::sgd, tt, Dtype::fp32, false, false, OptimizerImpl::foreach).optimizer_step,
                   element_sizes(Dtype::bf16, Optimizer::sgd, tt).optimizer_step);
}

TEST(StateBytesPerParam, ZeroPaperFigure1) {
  // Rajbhandari et al. 2020 Fig. 1: Psi = 7.5B, N_d = 64, K = 12: baseline (2+2+K)Psi = 120 GB,
  // P_os (4 + K/N_d)Psi = 31.4 GB, P_os+g (2 + 14/N_d)Psi = 16.6 GB, P_os+g+p 16Psi/N_d = 1.9 GB.
  const double psi = 7.5e9;
  const auto gb = [&](int zero) {
    return psi * state_bytes_per_param(element_sizes(Dtype::fp16, Optimizer::adam, framework_traits(Framework::deepspeed)), zero, 64).total() / 1e9;
  };
  EXPECT_DOUBLE_EQ(gb(0), 120.0);
  EXPECT_NEAR(gb(1), 31.4, 0.05);
  EXPECT_NEAR(gb(2), 16.6, 0.05);
  EXPECT_NEAR(gb(3), 1.9, 0.05);
  const StateBytesPerParam z2 = state_bytes_per_param(element_sizes(Dtype::bf16, Optimizer::adam, framework_traits(Framework::deepspeed)), 2, 64);
  EXPECT_DOUBLE_EQ(z2.weights, 2.0);
  EXPECT_DOUBLE_EQ(z2.grads, 2.0 / 64);
  EXPECT_DOUBLE_EQ(z2.optimizer, 12.0 / 64);
}

TEST(StateBytesPerParam, Bf16OptimizerKeepsAnUnshardedFp32GradientBuffer) {
  // DeepSpeed's BF16_Optimizer (bf16_optimizer.py @ 77b649d16, BLOOM's): bf16 weights and
  // gradients, an fp32 gradient buffer over the rank's whole model (not partitioned; BigScience's
  // notes: "The additional memory usage is 4bytes x params and it's not sharded across gpus"), the
  // fp32 master and moments sharded as ZeRO-1. Per micro-batch update_hp_grads casts each bf16
  // gradient to fp32 (read 2, write 4) and adds it in (read 4 + 4, write 4): 18 bytes per parameter.
  const FrameworkTraits& ds = framework_traits(Framework::deepspeed);
  const ElementSizes z1 = element_sizes(Dtype::bf16, Optimizer::adam, ds, Dtype::fp32, false, /*bf16_optimizer=*/true);
  EXPECT_DOUBLE_EQ(z1.accumulate, 18.0);
  EXPECT_DOUBLE_EQ(z1.reduce, 2.0);  // all-reduced cast back to bf16
  const StateBytesPerParam s = state_bytes_per_param(z1, 1, 8);
  EXPECT_DOUBLE_EQ(s.weights, 2.0);
  EXPECT_DOUBLE_EQ(s.grads, 2.0 + 4.0);
  EXPECT_DOUBLE_EQ(s.optimizer, 12.0 / 8);
  // Without it (DeepSpeed v0.5's ZeRO optimizer in bf16, as MT-NLG ran): bf16 gradients
  // accumulate in place, 3 x 2 bytes, and no buffer.
  const ElementSizes zero1 = element_sizes(Dtype::bf16, Optimizer::adam, ds);
  EXPECT_DOUBLE_EQ(zero1.accumulate, 6.0);
  EXPECT_DOUBLE_EQ(zero1.accumulation_buffer, 0.0);
}

// ---- The acceptance plans -----------------------------------------------------------------------

void print_stage(const char* what, int stage, const MemoryBreakdown& b) {
  std::printf("%s stage %d: weights %.2f grads %.2f optimizer %.2f activations %.2f buffers %.2f "
              "headroom %.2f total %.2f GiB\n",
              what, stage, in_GiB(b.weights), in_GiB(b.grads), in_GiB(b.optimizer), in_GiB(b.activations),
              in_GiB(b.buffers), in_GiB(b.headroom), in_GiB(b.total()));
}

struct Plan530 {
  ModelSpec model = mt_nlg_530b();
  TrainingSpec training{.global_batch = 1920, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  PlanSpec plan;
  Plan530(Recompute rc) {
    plan.tp = 8;
    plan.pp = 35;
    plan.dp = 8;
    plan.micro_batch = 1;
    plan.schedule = Schedule::one_f_one_b;
    plan.recompute = rc;
    plan.zero = 1;
    plan.framework = Framework::megatron;  // the conservative 6 + 12/d of the distributed optimizer
  }
};

TEST(AcceptancePlans, MtNlg530bOn280NodesFits) {
  const Plan530 x(Recompute::full);
  const auto stages = memory_per_stage(exec(x.training, x.plan), x.model, x.training, x.plan);
  const int worst = most_loaded_stage(stages);
  print_stage("MT-NLG 530B full recompute, most loaded", worst, stages[worst]);
  print_stage("MT-NLG 530B full recompute", 17, stages[17]);
  print_stage("MT-NLG 530B full recompute", 34, stages[34]);
  EXPECT_EQ(worst, 0);
  EXPECT_TRUE(fits(stages[worst], selene().gpu));
  EXPECT_EQ(memory_shortfall(stages[worst], selene().gpu).value(), 0.0);
  // Weights by hand: stage 0 holds 3 layers (12h^2 + 13h)/8 + 51200*20480/8 + 2048*20480
  // = 1,887,536,640 + 131,072,000 + 41,943,040 = 2,060,551,680 params, 2 bytes each.
  EXPECT_DOUBLE_EQ(stages[0].weights.value(), 2.0 * 2060551680.0);
  // Optimizer: 12/8 bytes per param with the distributed optimizer over dp = 8.
  EXPECT_DOUBLE_EQ(stages[0].optimizer.value(), 1.5 * 2060551680.0);
  // The parts add up.
  const MemoryBreakdown& b = stages[worst];
  EXPECT_DOUBLE_EQ(b.total().value(),
                   (b.weights + b.grads + b.optimizer + b.activations + b.buffers + b.headroom + b.runtime).value());
}

TEST(AcceptancePlans, MtNlg530bAsDeepSpeedRanItFits) {
  // The scenario file's framework: DeepSpeed ZeRO-1 (2 + 2 + 12/8 bytes/param, ZeRO paper) with its
  // 5e8-element reduce bucket.
  Plan530 x(Recompute::full);
  x.plan.framework = Framework::deepspeed;
  const auto stages = memory_per_stage(exec(x.training, x.plan), x.model, x.training, x.plan);
  const int worst = most_loaded_stage(stages);
  print_stage("MT-NLG 530B (DeepSpeed ZeRO-1) full recompute, most loaded", worst, stages[worst]);
  EXPECT_TRUE(fits(stages[worst], selene().gpu));
  EXPECT_DOUBLE_EQ(stages[0].grads.value(), 2.0 * 2060551680.0);
}

TEST(AcceptancePlans, MtNlg530bWithoutRecomputeDoesNotFit) {
  const Plan530 x(Recompute::none);
  const auto stages = memory_per_stage(exec(x.training, x.plan), x.model, x.training, x.plan);
  const int worst = most_loaded_stage(stages);
  print_stage("MT-NLG 530B no recompute, most loaded", worst, stages[worst]);
  EXPECT_EQ(worst, 0);
  EXPECT_FALSE(fits(stages[worst], selene().gpu));
  // Eq. 2 x 105 layers' worth alone is 21 sbh x 105 = 92.5 GB > 80 GiB.
  EXPECT_GT(stages[0].activations.value(), 105 * activations_tensor_parallel(2048, 1, 20480, 128, 8).value());
  EXPECT_GT(in_GiB(memory_shortfall(stages[worst], selene().gpu)), 10.0);
}

TEST(AcceptancePlans, Sc21OneTrillionFits) {
  const ModelSpec m = sc21_1t();
  const TrainingSpec tr{.global_batch = 3072, .dtype = Dtype::fp16, .optimizer = Optimizer::adam};
  PlanSpec p;
  p.tp = 8;
  p.pp = 64;
  p.dp = 6;
  p.micro_batch = 1;
  p.schedule = Schedule::one_f_one_b;
  p.recompute = Recompute::full;
  p.zero = 0;
  p.framework = Framework::megatron;
  const auto stages = memory_per_stage(exec(tr, p), m, tr, p);
  const int worst = most_loaded_stage(stages);
  print_stage("SC21 1T, most loaded", worst, stages[worst]);
  print_stage("SC21 1T", 63, stages[63]);
  EXPECT_TRUE(fits(stages[worst], selene().gpu));
  // Model state by hand, stage 1 (2 layers, nothing else): 2 (12h^2 + 13h)/8 params x 20 bytes
  // (Megatron fp16: 2 + 2 + 4 master + 4 main grad + 8 Adam) = 1,966,163,200 x 20.
  const double params = 2 * (12.0 * 25600 * 25600 + 13 * 25600) / 8;
  EXPECT_DOUBLE_EQ(params, 1966163200.0);
  EXPECT_DOUBLE_EQ((stages[1].weights + stages[1].grads + stages[1].optimizer).value(), 20 * params);
}

TEST(AcceptancePlans, OneTrillionOnEightGpusDoesNotFit) {
  // The message the planner prints: "needs X GiB, device has 80 GiB".
  const ModelSpec m = sc21_1t();
  const TrainingSpec tr{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  PlanSpec p;
  p.tp = 8;
  p.recompute = Recompute::full;
  const MemoryBreakdown b = memory_per_gpu(exec(tr, p), m, tr, p, 0);
  EXPECT_FALSE(fits(b, selene().gpu));
  // At least the 18 bytes/param of ~1T/8 params: > 2,000 GiB.
  EXPECT_GT(in_GiB(memory_shortfall(b, selene().gpu)), 2000.0);
}

TEST(MemoryPerGpu, OptimizerOffloadEmptiesTheOptimizerState) {
  Plan530 x(Recompute::full);
  x.plan.offload.optimizer = true;
  const MemoryBreakdown b = memory_per_gpu(exec(x.training, x.plan), x.model, x.training, x.plan, 0);
  EXPECT_EQ(b.optimizer.value(), 0.0);
}

TEST(MemoryPerGpu, ZeroOffloadStreamsItsGradientsToTheHost) {
  // DeepSpeed's ZeRO-Offload (ZeRO-2 with offload_optimizer) copies each reduced bucket's
  // gradients into the host's fp32 partition and keeps no device gradient buffer beyond the
  // reduction bucket, even on one GPU; ZeRO-2 on the device keeps its partition (all of it at dp 1).
  // The DeepSpeed tutorial's 10B GPT-2 (docs/_tutorials/zero-offload.md: 50 layers, h 4096, 32
  // heads, micro-batch 10, activation checkpointing, one V100-SXM3 32GB; sequence 1024 and the
  // GPT-2 vocabulary padded to 50304 as DeepSpeed's Megatron-LM scripts set them).
  const ModelSpec m{.name = "gpt2-10b", .layers = 50, .hidden = 4096, .heads = 32, .seq_len = 1024, .vocab = 50304,
                    .ffn_hidden = 4 * 4096, .kv_heads = 32, .moe = std::nullopt};
  const ClusterSpec dgx2 = load_cluster(resolve_scenario("clusters", "dgx2-v100"));
  const TrainingSpec tr{.global_batch = 10, .dtype = Dtype::fp16, .optimizer = Optimizer::adam};
  PlanSpec p;
  p.micro_batch = 10;
  p.zero = 2;
  p.recompute = Recompute::full;
  p.framework = Framework::deepspeed;
  const double params = parameters_on_gpu(framework_traits(p.framework), m, p, 0).total();
  const MemoryBreakdown on_device = memory_per_gpu(exec(tr, p), m, tr, p, 0);
  EXPECT_DOUBLE_EQ(on_device.grads.value(), 2.0 * params);  // fp16, unsharded at dp 1
  p.offload.optimizer = true;
  const MemoryBreakdown offloaded = memory_per_gpu(exec(tr, p), m, tr, p, 0);
  EXPECT_EQ(offloaded.grads.value(), 0.0);
  EXPECT_EQ(offloaded.optimizer.value(), 0.0);
  // The staging buffer of the largest parameter, the word embedding (50304 x 4096 fp16), is a
  // buffer now. The reduction bucket was one already: ZeRO-2's backward allocates ipg_buffer whole
  // (reduce_bucket_size's default, 5e8 fp16 elements) even on one GPU.
  EXPECT_DOUBLE_EQ((offloaded.buffers - on_device.buffers).value(), 50304.0 * 4096 * 2.0);
  PlanSpec z0 = p;
  z0.zero = 0;
  z0.offload.optimizer = false;
  EXPECT_DOUBLE_EQ((on_device.buffers - memory_per_gpu(exec(tr, z0), m, tr, z0, 0).buffers).value(), 5e8 * 2.0);
  // With overlap_comm a second one "to avoid data access conflict" (stage_1_and_2.py backward).
  PlanSpec overlapped = p;
  overlapped.dp_overlap = true;
  EXPECT_DOUBLE_EQ((memory_per_gpu(exec(tr, overlapped), m, tr, overlapped, 0).buffers - offloaded.buffers).value(),
                   5e8 * 2.0);
  // What the tutorial ran fits the V100's 32 GiB (33.65 of 34.36 GB); before gradients streamed to
  // the host the model put it at 53.8 GB. (The paper's largest single-GPU model, 13B at batch 4,
  // Ren et al. 2021 Table 3 and Fig. 8, needs 34.50 GB at sequence 1024, 0.14 GB over: its
  // sequence length is not stated, so it is not asserted either way.)
  EXPECT_TRUE(fits(offloaded, dgx2.gpu)) << in_GB(offloaded.total()) << " GB";
  // ZeRO-1 has no backward hooks: its whole fp16 .grad fills before the reduction moves it.
  PlanSpec z1 = p;
  z1.zero = 1;
  EXPECT_DOUBLE_EQ(memory_per_gpu(exec(tr, z1), m, tr, z1, 0).grads.value(), 2.0 * params);
  // Megatron-Core's optimizer offload keeps its gradient buffer on the device.
  PlanSpec mcore = p;
  mcore.framework = Framework::megatron_core;
  mcore.zero = 1;
  EXPECT_GT(memory_per_gpu(exec(tr, mcore), m, tr, mcore, 0).grads.value(), 0.0);
}

TEST(MemoryPerGpu, DeepSpeedsWholeReductionBucketsWhereItsOptimizerAllocatesThem) {
  // DeepSpeed's stage-1/2 optimizer allocates ipg_buffer (reduce_bucket_size 16-bit elements) in
  // its backward wherever contiguous gradients are on: at stage 1 only under cpu_offload or, from
  // v0.8, with MoE layers; under a pipeline only the last stage calls that backward (the others
  // allocate theirs after the flush). Bucket 1e9 elements of fp16: 2 GB by hand.
  const ModelSpec dense{.name = "gpt", .layers = 8, .hidden = 2048, .heads = 16, .seq_len = 1024, .vocab = 50304,
                        .ffn_hidden = 8192, .kv_heads = 16, .moe = std::nullopt};
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::fp16, .optimizer = Optimizer::adam};
  PlanSpec p;
  p.framework = Framework::deepspeed;
  p.dp = 4;
  p.micro_batch = 2;
  p.zero = 1;
  p.reduce_bucket = 1000000000;
  const double grads = parameters_on_gpu(framework_traits(p.framework), dense, p, 0).total() * 2.0;
  // ZeRO-1 without offload flattens at most the gradients there are (here fewer than the bucket).
  ASSERT_LT(grads, 1e9 * 2.0);
  const Bytes flat = memory_per_gpu(exec(tr, p), dense, tr, p, 0).buffers;
  PlanSpec offloaded = p;
  offloaded.offload.optimizer = true;
  const Bytes whole = memory_per_gpu(exec(tr, offloaded), dense, tr, offloaded, 0).buffers;
  const double staging = 50304.0 * 2048 * 2.0;  // the largest parameter (word embedding), fp16
  EXPECT_DOUBLE_EQ((whole - flat).value(), 1e9 * 2.0 - grads + staging);
  // With a pipeline of two: the last stage holds the bucket, the first does not.
  PlanSpec piped = offloaded;
  piped.pp = 2;
  piped.dp = 2;
  const double stage_grads = parameters_on_gpu(framework_traits(p.framework), dense, piped, 0).total() * 2.0;
  PlanSpec piped_flat = piped;
  piped_flat.offload.optimizer = false;
  const double recv = 2.0 * 2.0 * 1024 * 2 * 2048;  // activation and gradient receives, fp16
  EXPECT_DOUBLE_EQ(memory_per_gpu(exec(tr, piped_flat), dense, tr, piped_flat, 0).buffers.value(), stage_grads + recv);
  EXPECT_DOUBLE_EQ(memory_per_gpu(exec(tr, piped), dense, tr, piped, 0).buffers.value(), recv + staging);
  EXPECT_GE(memory_per_gpu(exec(tr, piped), dense, tr, piped, 1).buffers.value(), 1e9 * 2.0 + recv);
  // A model with MoE layers keeps contiguous gradients at stage 1 (v0.8+): the bucket whole, no offload.
  ModelSpec moe = dense;
  moe.moe = MoeSpec{.experts = 4, .top_k = 1, .capacity_factor = 1.0, .every = 2};
  PlanSpec expert = p;
  expert.ep = 2;
  EXPECT_DOUBLE_EQ(memory_per_gpu(exec(tr, expert), moe, tr, expert, 0).buffers.value() -
                       deepep_buffer_bytes(moe, expert).value() -
                       2.0 * moe.moe->routed_factor() * 2.0 * 2 * 1024 * 2048,
                   1e9 * 2.0);
}

TEST(MemoryPerGpu, MoeExpertsShardOverExpertParallelism) {
  // 2 layers, the second an MoE layer with 8 experts; ep 4 holds 2 experts per GPU.
  ModelSpec m{.name = "moe", .layers = 2, .hidden = 1024, .heads = 16, .seq_len = 1024, .vocab = 50000,
              .ffn_hidden = 4096, .kv_heads = 16, .moe = MoeSpec{.experts = 8, .top_k = 1, .capacity_factor = 1.0, .every = 2}};
  PlanSpec p;
  p.dp = 4;
  p.ep = 4;
  const StageParameters sp = parameters_on_gpu(framework_traits(p.framework), m, p, 0);
  // Expert FFN: 2*1024*4096 + 4096 + 1024 = 8,393,728 params each; 2 on this GPU.
  EXPECT_DOUBLE_EQ(sp.expert, 2 * 8393728.0);
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_FALSE(m.is_moe_layer(0));
  // The MoE layer stores more activations than the dense one (router logits, dispatched tokens).
  EXPECT_GT(activation_bytes_per_layer(exec(p), m, p, 1, 1024, true), activation_bytes_per_layer(exec(p), m, p, 1, 1024, false));
}

TEST(GradAccumulation, BytesPerParameterByFramework) {
  const auto accumulate = [](Dtype dt, Framework f) {
    return element_sizes(dt, Optimizer::adam, framework_traits(f)).accumulate;
  };
  // Megatron fp32 main grad: read 4 + read 2 + write 4; fp32 training reads and writes 4 three times.
  EXPECT_EQ(accumulate(Dtype::bf16, Framework::megatron), 10.0);
  EXPECT_EQ(accumulate(Dtype::fp16, Framework::megatron), 10.0);
  EXPECT_EQ(accumulate(Dtype::fp32, Framework::megatron), 12.0);
  // PyTorch AccumulateGrad in the parameter dtype: grad += new_grad.
  EXPECT_EQ(accumulate(Dtype::fp16, Framework::deepspeed), 6.0);
  EXPECT_EQ(accumulate(Dtype::fp16, Framework::terapipe), 6.0);
  // Autocast keeps fp32 parameters, so fp32 gradients: 3 x 4.
  EXPECT_EQ(accumulate(Dtype::bf16, Framework::pytorch), 12.0);
}

// GPT-3 XL's shape as ../shared/bench and FlashAttention's training code run it: 24 x 2048, 16
// heads of 128, sequence 2048, GeLU MLP 4x, the given (padded) GPT-2 vocabulary.
ModelSpec gpt_1p3b(int vocab) {
  return ModelSpec{.name = "gpt-1.3b", .layers = 24, .hidden = 2048, .heads = 16, .seq_len = 2048,
                   .vocab = vocab, .ffn_hidden = 8192, .kv_heads = 16, .moe = std::nullopt};
}
PlanSpec one_gpu_micro_batch_8(Framework f) {
  PlanSpec p;
  p.micro_batch = 8;
  p.framework = f;
  return p;
}

TEST(MemoryPerGpu, PyTorchAutocastOneH100ByHand) {
  // ../shared/bench/torch_gpt_baseline.py's 1.3B run (24 x 2048, 16 heads, seq 2048, vocab 50304,
  // micro-batch 8, one GPU) as eager PyTorch runs it, by hand. sbh = 2048 * 8 * 2048 = 33,554,432.
  // Per layer, saved for the backward: ln1 input fp32 4, qkv input bf16 2, the qkv output that
  // SDPA keeps q, k, v in 6, SDPA's output 2 and its reshaped copy (the projection's input) 2,
  // ln2 input fp32 4, fc input 2, GeLU input 8, fc2 input 8: 38 sbh = 1,275,068,416; plus fp32
  // logsumexp per head and query, 4 * 16 * 16,384 = 1,048,576: 1,276,116,992 bytes.
  const ModelSpec m = gpt_1p3b(50304);
  const PlanSpec p = one_gpu_micro_batch_8(Framework::pytorch);
  const TrainingSpec tr{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  const ExecutionModel x = exec(tr, p);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x, m, p, 8, 2048).value(), 1276116992.0);
  // The peak, at the loss's backward: no gradient exists yet (set_to_none, one micro-batch).
  // Parameters P = 24 (12h^2 + 13h) + V h + s h + 2h = 1,315,819,520: fp32 weights and their bf16
  // autocast copies 6P, Adam's m and v 8P. Activations: 24 layers, the output layer's final-norm
  // input (fp32) and head input (bf16) 6 sbh = 201,326,592, and the loss's three fp32 (tokens,
  // vocab) buffers 12 x 16,384 x 50,304 = 9,890,168,832.
  const double P = 1315819520.0;
  const MemoryBreakdown b = memory_per_gpu(x, m, tr, p, 0);
  EXPECT_DOUBLE_EQ(b.weights.value(), 6 * P);
  EXPECT_DOUBLE_EQ(b.grads.value(), 0.0);
  EXPECT_DOUBLE_EQ(b.optimizer.value(), 8 * P);
  EXPECT_DOUBLE_EQ(b.activations.value(), 24 * 1276116992.0 + 201326592.0 + 9890168832.0);
  EXPECT_DOUBLE_EQ(b.allocated().value(), 59139776512.0);
  // With two micro-batches the gradients of the first are alive during the second: 4P more.
  const TrainingSpec two{.global_batch = 16, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  EXPECT_DOUBLE_EQ(memory_per_gpu(exec(two, p), m, two, p, 0).grads.value(), 4 * P);
}

TEST(MemoryPerGpu, FlashAttnTrainingCodeOneLayerByHand) {
  // Dao-AILab/flash-attention's training code (framework flash-attn) on the same 1.3B shape with
  // GPT2Config's dropout, by hand from what its kernels save (flash_attn/ops/layer_norm.py,
  // fused_dense.py FusedMLPFunc at checkpoint_lvl 0, flash_attn_qkvpacked_func, mha.py). sbh =
  // 33,554,432. Per layer: at each of the two dropout-add-LayerNorm sites the fp32 residual stream 4
  // (residual_in_fp32) and the 1-byte dropout mask, and the bf16 normed output 2 (the next linear's
  // input); the packed qkv 6 and the attention output 2, which the projection reads as a view (no
  // copy); fc1's pre-activation 8 and GeLU output 8: 2 x (4 + 1 + 2) + 6 + 2 + 16 = 38 sbh =
  // 1,275,068,416 bytes, plus the fp32 log-sum-exp per head and query, 4 x 16 x 16,384 = 1,048,576.
  const ModelSpec m = gpt_1p3b(50264);
  const PlanSpec p = one_gpu_micro_batch_8(Framework::flash_attn);
  const TrainingSpec tr{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  const ExecutionModel x = exec(tr, p);
  EXPECT_EQ(x.attention, AttentionImpl::flash2);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x, m, p, 8, 2048).value(), 1276116992.0);
  // The loss: flash-attn's CrossEntropyLoss(inplace_backward=True) keeps the bf16 logits and writes
  // their gradient over them, 2 x 16,384 x 50,264 = 1,647,050,752 bytes, where eager
  // F.cross_entropy on fp32 logits holds 12 a logit (the test above).
  PlanSpec eager = p;
  eager.framework = Framework::pytorch;
  const MemoryBreakdown fa = memory_per_gpu(x, m, tr, p, 0);
  const MemoryBreakdown pt = memory_per_gpu(exec(tr, eager), m, tr, eager, 0);
  // The layers store the same 38 sbh either way (eager PyTorch's attention-output copy where
  // flash-attn has its dropout masks), so the difference is the loss's, 10 bytes a logit, less
  // the embedding's 1-byte dropout mask (Korthikanti 2022 sec. 4.3's sbhp/t), 1 sbh, which only
  // the run with dropout stores.
  EXPECT_DOUBLE_EQ(pt.activations.value() - fa.activations.value(), 10.0 * 16384 * 50264 - 33554432.0);
}

TEST(ParametersOnGpu, TeraPipeStagesHoldLayersOnly) {
  // TeraPipe's model has no embedding or head: 1B on pp 24 holds one layer per GPU,
  // 12h^2 + 13h = 50.36M parameters at h = 2048 (weights and biases, two layernorms).
  const Experiment e = load_experiment(resolve_scenario("experiments", "terapipe-gpt3-1b-p3-gpipe"));
  const double h = e.model.hidden;
  for (int s : {0, 11, 23})
    EXPECT_NEAR(parameters_on_gpu(framework_traits(e.plan.framework), e.model, e.plan, s).total(), 12 * h * h + 13 * h, 1.0) << s;
}


TEST(UnevenPipeline, LayersPerStageAndTheirMemoryByHand) {
  // GPT-3 175B's 96 layers on pp 8 as Megatron's --decoder-first/last-pipeline-num-layers 9 / 9:
  // the six middle stages split 78 layers, 13 each. 1F1B with tp 8 + SP, no recompute, 64
  // micro-batches: stage s stashes (p - s) micro-batches of its own layers (Korthikanti eq. 5's
  // per-layer 34sbh/t + 5as^2b/t, here the plan's fused-attention-free Megatron layer).
  const ModelSpec m = gpt3_175b();
  PlanSpec p = plan_with(8, true, Recompute::none);
  p.pp = 8;
  p.first_stage_layers = 9;
  p.last_stage_layers = 9;
  EXPECT_EQ(stage_layer_counts(m, p), (std::vector<int>{9, 13, 13, 13, 13, 13, 13, 9}));
  EXPECT_EQ(stage_first_layers(m, p), (std::vector<int>{0, 9, 22, 35, 48, 61, 74, 87}));
  EXPECT_EQ(stage_layers(m, p, 7), (std::vector<int>{87, 88, 89, 90, 91, 92, 93, 94, 95}));
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  const Bytes per_layer = activations_tensor_sequence_parallel(2048, 1, 12288, 96, 8);
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 0).value(), (8 * 9 * per_layer).value());
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 1).value(), (7 * 13 * per_layer).value());
  // Weights: 9 layers of (12h^2 + 13h) / 8 on the first stage, 13 on the second.
  const double h = m.hidden, layer = (12.0 * h * h + 13 * h) / 8;
  const FrameworkTraits& fw = framework_traits(p.framework);
  EXPECT_DOUBLE_EQ(parameters_on_gpu(fw, m, p, 1).dense, 13 * layer);
  EXPECT_DOUBLE_EQ(parameters_on_gpu(fw, m, p, 0).dense, 9 * layer + double(m.vocab) * h / 8 + double(m.seq_len) * h);
  // The explicit list is the same split.
  PlanSpec q = p;
  q.first_stage_layers = q.last_stage_layers = 0;
  q.stage_layers = {9, 13, 13, 13, 13, 13, 13, 9};
  for (int s = 0; s < 8; ++s) EXPECT_EQ(stage_layers(m, q, s), stage_layers(m, p, s)) << s;
}


TEST(ActivationBytesPerLayer, GatedMlpStoresGateUpAndProduct) {
  // Llama 3.1 8B, one sequence of 8192, tp 1, Megatron-Core (fused attention, bf16, no dropout:
  // the Llama recipe's dropout is 0, model.dropout false). In units of sbh (s b h = 8192 x 4096):
  // replicated QKV input and FFN input (2 + 2), two norm inputs (2 + 2); sharded Q (2), K and V
  // (2 x 2 x 1024/4096), projection input (2), and the SwiGLU's gate, up and product (3 x 2 x
  // 14336/4096); plus fp32 softmax statistics per head and query (4 x 32 x 8192).
  ModelSpec m = load_model(resolve_scenario("models", "llama3.1-8b"));
  ASSERT_EQ(m.dropout, std::optional<bool>(false));
  PlanSpec p;
  p.framework = Framework::megatron_core;
  const double sbh = 8192.0 * 4096;
  const double units = (2 + 2 + 2 + 2) + (2 + 2 * 2 * 0.25 + 2 + 3 * 2 * 14336.0 / 4096);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p), m, p, 1, 8192).value(), units * sbh + 4.0 * 32 * 8192);
  // A recipe with dropout (Megatron-Core's GPT default, the model's field unset) stores the two
  // residual sites' 1-byte masks as well.
  m.dropout.reset();
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p), m, p, 1, 8192).value(), (units + 2) * sbh + 4.0 * 32 * 8192);
}


// Mixtral 8x7B, dropless with a stated imbalance of 1.3, on the 8 GPUs of one DGX H100 under
// Megatron-Core: dp 8, one micro-batch of 1; the caller sets ep and what it tests.
Experiment mixtral_dropless_on_one_dgx_h100() {
  Experiment e = load_experiment(resolve_scenario("experiments", "sc21-table1-1.7b"));
  e.model = load_model(resolve_scenario("models", "mixtral-8x7b"));
  e.model.moe->imbalance = 1.3;
  e.cluster = load_cluster(resolve_scenario("clusters", "dgx-h100-superpod"));
  e.plan = PlanSpec{};
  e.plan.dp = 8;
  e.plan.framework = Framework::megatron_core;
  e.gpus = 8;
  e.training = TrainingSpec{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  return e;
}

TEST(MoeCompute, BusiestExpertTokensDropless) {
  // Mixtral 8x7B, dropless with a stated imbalance of 1.3, ep 8 (one expert per GPU): a GPU's
  // expert processes T x top_k x 1.3 tokens of a micro-batch of T = 4096 tokens per GPU:
  // 4096 x 2 x 1.3 = 10,649.6 rows through its (2 x 14336) x 4096 gate/up GEMM.
  Experiment e = mixtral_dropless_on_one_dgx_h100();
  e.plan.ep = 8;
  const ExecutionModel x = resolve_execution(e);
  const LayerTimes lt = layer_times(x, e.model, e.plan, 4096, 4096, true);
  EXPECT_DOUBLE_EQ(lt.forward_ops.fc1.value(), x.roofline().gemm({4096 * 2 * 1.3, 2 * 14336.0, 4096.0, 1}).value());
  // With 8 experts on one GPU (ep 1) the same rows split into 8 grouped GEMMs of 1/8 each, which
  // Transformer Engine launches one by one, each timed with its own launch by the H100's measured
  // profile.
  e.plan.ep = 1;
  const ExecutionModel x1 = resolve_execution(e);
  ASSERT_TRUE(x1.roofline().gemm_times_measured());
  const LayerTimes l1 = layer_times(x1, e.model, e.plan, 4096, 4096, true);
  EXPECT_DOUBLE_EQ(l1.forward_ops.fc1.value(), x1.roofline().gemm({4096 * 2 * 1.3 / 8, 2 * 14336.0, 4096.0, 8}).value());
}

TEST(MoeCompute, ExpertBiasesAddedExpertByExpertOutsideTheGemm) {
  // Megatron-Core's TEGroupedMLP with expert biases (GPT-OSS) adds FC2's bias as t + b * p per
  // local expert and concatenates the pieces (experts.py _apply_bias): Mixtral 8x7B with biases,
  // dropless at 1.3, T = 4096: whatever the experts per GPU, its busiest GPU's FC2 writes
  // 4096 x 2 x 1.3 rows of 4096. With bf16 probabilities, forward 12 bytes an element over 2 launches
  // an expert and one, backward 16 over 5 an expert and one; DeepEP's fp32 probabilities 28 over
  // 2 an expert and two, and 40 over 7 an expert and four. Booked as MoE data movement: the GEMMs'
  // times do not move.
  Experiment e = mixtral_dropless_on_one_dgx_h100();
  const double rows = 4096 * 2 * 1.3 * 4096.0;
  struct Case { int ep; EpDispatcher dispatcher; double fwd_bytes, bwd_bytes; int fwd_launches, bwd_launches; };
  for (const Case c : {Case{1, EpDispatcher::nccl, 12, 16, 2 * 8 + 1, 5 * 8 + 1},
                       Case{2, EpDispatcher::nccl, 12, 16, 2 * 4 + 1, 5 * 4 + 1},
                       Case{2, EpDispatcher::deepep, 28, 40, 2 * 4 + 2, 7 * 4 + 4}}) {
    e.plan.ep = c.ep;
    e.plan.ep_dispatcher = c.dispatcher;
    const ExecutionModel x = resolve_execution(e);
    const RooflineCompute& rc = x.roofline();
    e.model.bias = false;
    const LayerTimes plain = layer_times(x, e.model, e.plan, 4096, 4096, true);
    e.model.bias = true;
    const LayerTimes biased = layer_times(x, e.model, e.plan, 4096, 4096, true);
    EXPECT_NEAR((biased.forward_ops.moe_permute - plain.forward_ops.moe_permute).value(),
                rc.memory_bound(Bytes(c.fwd_bytes * rows), c.fwd_launches).value(), 1e-12) << c.ep;
    EXPECT_NEAR((biased.backward_ops.moe_permute - plain.backward_ops.moe_permute).value(),
                rc.memory_bound(Bytes(c.bwd_bytes * rows), c.bwd_launches).value(), 1e-12) << c.ep;
    EXPECT_GT(biased.forward_ops.moe_permute.value(), plain.forward_ops.moe_permute.value() * 1.5) << c.ep;
    EXPECT_DOUBLE_EQ(biased.forward_ops.fc2.value(), plain.forward_ops.fc2.value()) << c.ep;
    EXPECT_DOUBLE_EQ(biased.backward_ops.fc2.value(), plain.backward_ops.fc2.value()) << c.ep;
  }
  // A framework without that code path (the megatron entry, whose MoE dispatch is a plain permute)
  // gets no such passes.
  e.plan.ep = 1;
  e.plan.ep_dispatcher = EpDispatcher::nccl;
  e.plan.framework = Framework::megatron;
  const ExecutionModel xm = resolve_execution(e);
  const LayerTimes m_biased = layer_times(xm, e.model, e.plan, 4096, 4096, true);
  e.model.bias = false;
  EXPECT_DOUBLE_EQ(m_biased.forward_ops.moe_permute.value(),
                   layer_times(xm, e.model, e.plan, 4096, 4096, true).forward_ops.moe_permute.value());
}

TEST(MoeCompute, FusedPermuteReadsEachTokenOnceAndWritesEachCopy) {
  // Megatron-Core's alltoall dispatcher on Mixtral 8x7B (top-2, dropless at 1.3), T = 4096 tokens
  // of width 4096 in bf16, ep 2 (4 experts a GPU). It routes 4096 x 2.6 = 10,649.6 copies and,
  // holding 4 experts, sorts the 10,649.6 rows it receives by expert and back. Unfused, permute and
  // unpermute read and write every copy (4 row passes of the copies) and the sorts are 4 more of
  // the received rows; Transformer Engine's fused permute reads each token row once and writes its
  // copies, and its unpermute the reverse: 2 x (4096 + 10,649.6) rows for the copies, the sorts
  // unchanged. Forward and backward alike, in 4 launches.
  Experiment e = mixtral_dropless_on_one_dgx_h100();
  e.plan.ep = 2;
  const double T = 4096, copies = T * 2 * 1.3, h = 4096;
  const ExecutionModel x = resolve_execution(e);
  const RooflineCompute& rc = x.roofline();
  const LayerTimes unfused = layer_times(x, e.model, e.plan, 4096, 4096, true);
  EXPECT_NEAR(unfused.forward_ops.moe_permute.value(),
              rc.memory_bound(Bytes(2.0 * (4 * copies + 4 * copies) * h), 4).value(), 1e-12);
  e.plan.moe_permute_fusion = true;
  const LayerTimes fused = layer_times(x, e.model, e.plan, 4096, 4096, true);
  EXPECT_NEAR(fused.forward_ops.moe_permute.value(),
              rc.memory_bound(Bytes(2.0 * (2 * (T + copies) + 4 * copies) * h), 4).value(), 1e-12);
  EXPECT_DOUBLE_EQ(fused.backward_ops.moe_permute.value(), fused.forward_ops.moe_permute.value());
  EXPECT_DOUBLE_EQ(fused.forward_ops.fc1.value(), unfused.forward_ops.fc1.value());
}

TEST(MoeCompute, DeepSpeedGatingMovesItsTokenExpertCapacityTensors) {
  // DeepSpeed-MoE 1.3B+MoE-128 (v0.5.8 sharded_moe.py): micro-batch 4 x 2048 tokens, top-1 at
  // capacity factor 1, so E x C = 8192 slots and the gate's (S, E, C) tensors hold 8192 x 8192
  // elements. Around its two one-hot einsums (each a GEMM of 8192 x 2048 x 8192) the forward moves
  // 18 bytes an element in 4 kernels (fp32 combine_weights written, .bool() read 4 write 1, the two
  // casts to fp16 read 1 write 2 and read 4 write 2), the backward 10 in 2 beside its three GEMMs.
  const Experiment e = load_experiment(resolve_scenario("experiments", "deepspeed-moe-table3-1.3b-moe128"));
  const ExecutionModel x = resolve_execution(e);
  ASSERT_EQ(x.moe_dispatch, MoeDispatch::einsum);
  const RooflineCompute& rc = x.roofline();
  const LayerTimes t = layer_times(x, e.model, e.plan, 2048, 2048, true);
  const double T = 4 * 2048.0, sec = T * T;
  const Seconds one = rc.gemm({T, 2048, T, 1});
  EXPECT_NEAR(t.forward_ops.moe_permute.value(), (2.0 * one + rc.memory_bound(Bytes(18.0 * sec), 4)).value(), 1e-12);
  EXPECT_NEAR(t.backward_ops.moe_permute.value(), (3.0 * one + rc.memory_bound(Bytes(10.0 * sec), 2)).value(), 1e-12);
}

namespace {
// The local H100 experiment with `model` under Megatron-Core's FP8 recipe (TE, delayed scaling).
Experiment fp8_megatron_core_on_h100(const char* model) {
  Experiment e = load_experiment(resolve_scenario("experiments", "gpt3-1.3b-local-h100"));
  e.model = load_model(resolve_scenario("models", model));
  e.training.dtype = Dtype::fp8;
  e.plan.framework = Framework::megatron_core;
  return e;
}
}  // namespace

TEST(Fp8Recipe, CastsByHandAndTheHeadInBf16) {
  // Llama 3.1 8B on one H100, tp 1, 4096 tokens, FP8 linears (Megatron-Core, TE delayed scaling):
  // the forward quantizes the inputs of projection (T q) and FC2 (T f), 3 bytes per element (read
  // 2, write 1); QKV's and FC1's inputs (T h each) leave TE's LayerNormLinear already in FP8;
  // the backward casts and transposes the output gradients of QKV (T (q + 2 kv)), projection
  // (T h), FC1 (T 2f: gate and up) and FC2 (T h), 4 bytes each, and transposes the saved inputs
  // (2 bytes each).
  Experiment e = fp8_megatron_core_on_h100("llama3.1-8b");
  const ExecutionModel x = resolve_execution(e);
  const double T = 8.0 * 4096, h = 4096, q = 4096, kv = 1024, f = 14336;
  const LayerTimes lt = layer_times(x, e.model, e.plan, 4096, 4096, false);
  const double inputs = T * h + T * q + T * h + T * f;
  const double grads = T * (q + 2 * kv) + T * h + T * 2 * f + T * h;
  EXPECT_DOUBLE_EQ(lt.forward_ops.fp8_casts.value(), x.roofline().memory_bound(Bytes(3 * (T * q + T * f)), 4).value());
  EXPECT_DOUBLE_EQ(lt.backward_ops.fp8_casts.value(),
                   x.roofline().memory_bound(Bytes(4 * grads + 2 * inputs), 8).value());
  // The LM head runs at the 16-bit GEMM speed: the same as a bf16 execution's.
  Experiment b = e;
  b.training.dtype = Dtype::bf16;
  const ExecutionModel xb = resolve_execution(b);
  EXPECT_DOUBLE_EQ(x.roofline16().gemm({T, 128256, h, 1}).value(), xb.roofline().gemm({T, 128256, h, 1}).value());
  // bf16 training has no casts.
  EXPECT_EQ(layer_times(xb, b.model, b.plan, 4096, 4096, false).forward_ops.fp8_casts.value(), 0.0);
}


TEST(Fp8Recipe, RowParallelGradientsAreCastOnTheSequenceShardThenGatheredAndTransposed) {
  // Llama 3.1 8B at tp 2 (Megatron-Core, TE delayed scaling), 8 x 4096 tokens a micro-batch. Under
  // sequence parallelism the projection's and FC2's output gradients (T h each) arrive on the
  // rank's T / 2 rows: TE casts that shard (read 2, write 1) before gathering it in FP8, then
  // transposes the gathered tensor (read 1, write 1): 3 / 2 + 2 = 3.5 bytes an element where the
  // whole gradient's cast-transpose moves 4. Nothing else in the backward's casts moves, and
  // the router of an MoE layer stays a 16-bit GEMM.
  Experiment e = fp8_megatron_core_on_h100("llama3.1-8b");
  e.plan.tp = 2;
  e.plan.sequence_parallel = true;
  const ExecutionModel x = resolve_execution(e);
  ASSERT_EQ(x.fp8_scaling, Fp8Scaling::delayed);
  Experiment off = e;
  off.plan.sequence_parallel = false;
  const LayerTimes on_sp = layer_times(x, e.model, e.plan, 4096, 4096, false);
  const LayerTimes no_sp = layer_times(resolve_execution(off), off.model, off.plan, 4096, 4096, false);
  const RooflineCompute& rc = x.roofline();
  const double per_byte = (rc.memory_bound(Bytes(2e9), 8) - rc.memory_bound(Bytes(1e9), 8)).value() / 1e9;
  const double T = 8.0 * 4096, h = 4096;
  EXPECT_NEAR((no_sp.backward_ops.fp8_casts - on_sp.backward_ops.fp8_casts).value(), (4.0 - 3.5) * 2 * T * h * per_byte,
              1e-12);
  // Qwen3-30B-A3B's router (128 experts, h 2048) at tp 1: a 16-bit GEMM of T x 128 x 2048 and its
  // three fp32 passes over the T x 128 scores, not the FP8 GEMM rate.
  Experiment moe = e;
  moe.model = load_model(resolve_scenario("models", "qwen3-30b-a3b"));
  moe.plan.tp = 1;
  moe.plan.sequence_parallel = false;
  const ExecutionModel xm = resolve_execution(moe);
  const LayerTimes lm = layer_times(xm, moe.model, moe.plan, 4096, 4096, true);
  EXPECT_DOUBLE_EQ(lm.forward_ops.moe_router.value(),
                   (xm.roofline16().gemm({T, 128, 2048, 1}) + xm.roofline().memory_bound(Bytes(4.0 * T * 128 * 3), 2)).value());
  EXPECT_NE(xm.roofline16().gemm({T, 128, 2048, 1}).value(), xm.roofline().gemm({T, 128, 2048, 1}).value());
}

TEST(Fp8Recipe, Mxfp8QuantizesBothUsagesOnceAndSwizzlesScalesPerGemm) {
  // Llama 3 8B on DGX B200 under Transformer Engine's MXFP8 recipe, tp 1, micro-batch 2 of 8192
  // tokens (T = 16384). Forward: every GEMM input is quantized once, row-wise and column-wise
  // (read 2, write 1 + 1, two scale bytes per 32 elements): QKV T h, projection T q, FC1 T h, FC2
  // T f; the norms' outputs too (no fused norm + MXFP8 without NVTE_NORM_FWD_USE_CUDNN). Before
  // each GEMM both operands' scales are swizzled (read and write a byte per 32 elements): the
  // input and the weight. Backward: each output gradient quantized the same way, no transposes;
  // swizzles for the output gradient (twice), the saved input and the weight. Launches: 4
  // quantizes + 8 swizzles forward, 4 + 16 backward.
  Experiment e = load_experiment(resolve_scenario("experiments", "mbridge2509-llama3-8b-8xb200-mxfp8"));
  ASSERT_EQ(e.training.fp8_scaling, Fp8Scaling::mxfp8);
  ASSERT_EQ(e.plan.tp, 1);
  const ExecutionModel x = resolve_execution(e);
  const double T = 2.0 * 8192, h = 4096, q = 4096, kv = 1024, f = 14336;
  const double inputs = T * h + T * q + T * h + T * f;
  const double grads = T * (q + 2 * kv) + T * h + T * 2 * f + T * h;
  const double weights = h * (q + 2 * kv) + q * h + 3 * h * f;
  const LayerTimes lt = layer_times(x, e.model, e.plan, 8192, 8192, false);
  const double quantize = 4 + 2.0 / 32, swizzle = 2.0 / 32;
  EXPECT_DOUBLE_EQ(lt.forward_ops.fp8_casts.value(),
                   x.roofline().memory_bound(Bytes(quantize * inputs + swizzle * (inputs + weights)), 12).value());
  EXPECT_DOUBLE_EQ(lt.backward_ops.fp8_casts.value(),
                   x.roofline().memory_bound(Bytes(quantize * grads + swizzle * (2 * grads + inputs + weights)), 20).value());
  // Its parameters are gathered in 16 bits (through the gradient buffer); current scaling's in FP8.
  EXPECT_DOUBLE_EQ(layer_gather_bytes(x, e.model, e.plan, 2.0), 2.0);
  Experiment cs = e;
  cs.training.fp8_scaling = Fp8Scaling::tensorwise;
  EXPECT_LT(layer_gather_bytes(resolve_execution(cs), cs.model, cs.plan, 2.0), 1.01);
}

TEST(Fp8Recipe, BlockwiseSplitsEveryGemmAndQuantizesBothUsagesOnce) {
  // Llama 3.1 8B on one H100, tp 1, 4096-token sequences, micro-batch 8 (T = 32768), Megatron-Core
  // with Transformer Engine's Float8BlockScaling. Every GEMM, the forward's too, runs with split
  // accumulation (use_split_accumulator fixed True for fprop, dgrad and wgrad): the forward GEMMs
  // cost what the gradient GEMMs of their shape cost. Casts: every GEMM input and output gradient
  // quantized once into both usages (read 2, write 1 + 1, an fp32 scale per 128 elements of
  // each), nothing transposed in the backward, no swizzle; the norms' outputs included.
  Experiment e = load_experiment(resolve_scenario("experiments", "gpt3-1.3b-local-h100"));
  e.model = load_model(resolve_scenario("models", "llama3.1-8b"));
  e.training.dtype = Dtype::fp8;
  e.training.fp8_scaling = Fp8Scaling::blockwise;
  e.plan.framework = Framework::megatron_core;
  const ExecutionModel x = resolve_execution(e);
  ASSERT_EQ(x.fp8_scaling, Fp8Scaling::blockwise);
  const double T = 8.0 * 4096, h = 4096, q = 4096, kv = 1024, f = 14336;
  const LayerTimes lt = layer_times(x, e.model, e.plan, 4096, 4096, false);
  const RooflineCompute& rc = x.roofline();
  EXPECT_DOUBLE_EQ(lt.forward_ops.qkv.value(), rc.gemm_grad({T, q + 2 * kv, h, 1}).value());
  EXPECT_DOUBLE_EQ(lt.forward_ops.fc2.value(), rc.gemm_grad({T, h, f, 1}).value());
  EXPECT_GT(lt.forward_ops.fc2.value(), rc.gemm({T, h, f, 1}).value() * 1.1);  // H100: split accumulation 1.15x
  const double inputs = T * h + T * q + T * h + T * f;
  const double grads = T * (q + 2 * kv) + T * h + T * 2 * f + T * h;
  const double quantize = 4 + 8.0 / 128;
  EXPECT_DOUBLE_EQ(lt.forward_ops.fp8_casts.value(), rc.memory_bound(Bytes(quantize * inputs), 8).value());
  EXPECT_DOUBLE_EQ(lt.backward_ops.fp8_casts.value(), rc.memory_bound(Bytes(quantize * grads), 12).value());
  // Current scaling's forward GEMMs keep fast accumulation.
  Experiment cs = e;
  cs.training.fp8_scaling = Fp8Scaling::tensorwise;
  const ExecutionModel xc = resolve_execution(cs);
  EXPECT_DOUBLE_EQ(layer_times(xc, cs.model, cs.plan, 4096, 4096, false).forward_ops.fc2.value(),
                   xc.roofline().gemm({T, h, f, 1}).value());
  // On Blackwell Transformer Engine emulates the recipe's GEMMs with MXFP8 ones: MXFP8's calibrated
  // GEMM speed, and before each GEMM both operands' block scales converted and swizzled (a byte per
  // 32 elements read and written, as MXFP8's swizzle); the tensors stay blockwise FP8, quantized
  // once into both usages and gathered in one byte. Llama 3 8B on DGX B200, tp 1, micro-batch 2 of
  // 8192 tokens (T = 16384).
  Experiment b = load_experiment(resolve_scenario("experiments", "mbridge2509-llama3-8b-8xb200-mxfp8"));
  Experiment bb = b;
  bb.training.fp8_scaling = Fp8Scaling::blockwise;
  const ExecutionModel xm = resolve_execution(b), xb = resolve_execution(bb);
  EXPECT_EQ(xb.fp8_scaling, Fp8Scaling::blockwise);
  EXPECT_NE(xm.calibrated.fp8_gemm_efficiency_scale, 1.0);
  EXPECT_DOUBLE_EQ(xb.calibrated.fp8_gemm_efficiency_scale, xm.calibrated.fp8_gemm_efficiency_scale);
  const LayerTimes tb = layer_times(xb, bb.model, bb.plan, 8192, 8192, false);
  const LayerTimes tm = layer_times(xm, b.model, b.plan, 8192, 8192, false);
  EXPECT_DOUBLE_EQ(tb.forward_ops.fc2.value(), tm.forward_ops.fc2.value());
  const double Tb = 2.0 * 8192;
  const double inputs_b = Tb * h + Tb * q + Tb * h + Tb * f, grads_b = Tb * (q + 2 * kv) + Tb * h + Tb * 2 * f + Tb * h;
  const double weights = h * (q + 2 * kv) + q * h + 3 * h * f, swizzle = 2.0 / 32;
  EXPECT_DOUBLE_EQ(tb.forward_ops.fp8_casts.value(),
                   xb.roofline().memory_bound(Bytes(quantize * inputs_b + swizzle * (inputs_b + weights)), 16).value());
  EXPECT_DOUBLE_EQ(tb.backward_ops.fp8_casts.value(),
                   xb.roofline()
                       .memory_bound(Bytes(quantize * grads_b + swizzle * (2 * grads_b + inputs_b + weights)), 28)
                       .value());
  Experiment gathered = bb;
  gathered.plan.fp8_param_gather = true;
  EXPECT_LT(layer_gather_bytes(resolve_execution(gathered), gathered.model, gathered.plan, 2.0), 1.01);
}

TEST(ActivationBytesPerLayer, ParallelBlockStoresTheSharedInputOnce) {
  // The Llama 3.1 8B layer of GatedMlpStoresGateUpAndProduct as a parallel block: one norm input
  // (2) instead of two, and with one shared norm one normed input feeding both QKV and FC1 (2)
  // instead of two: 4 sbh fewer bytes; with a norm per branch (GPT-NeoX) the two normed inputs
  // stay and only the layer input is stored once: 2 sbh fewer.
  ModelSpec m = load_model(resolve_scenario("models", "llama3.1-8b"));
  PlanSpec p;
  p.framework = Framework::megatron_core;
  const double sbh = 8192.0 * 4096;
  const Bytes sequential = activation_bytes_per_layer(exec(p), m, p, 1, 8192);
  m.parallel_block = true;
  EXPECT_DOUBLE_EQ((sequential - activation_bytes_per_layer(exec(p), m, p, 1, 8192)).value(), 4 * sbh);
  m.parallel_block_norms = 2;
  EXPECT_DOUBLE_EQ((sequential - activation_bytes_per_layer(exec(p), m, p, 1, 8192)).value(), 2 * sbh);
}

TEST(Fp8Recipe, RoutedExpertsQuantizeTheirRoutedRows) {
  // Mixtral 8x7B on one H100, tp 1, ep 1, one sequence of T = 4096 tokens, FP8 linears, dropless
  // top-2 routing (imbalance 1): the experts see 2T rows. Forward casts: projection input T q, the
  // experts' FC1 input 2T h (the permuted rows, not T h), their FC2 input 2T f; QKV's input leaves
  // TE's LayerNormLinear in FP8 (delayed scaling), the experts' is not a norm's output.
  // Backward: output gradients of QKV T (q + 2 kv), projection T h, FC1 2T x 2f (gate and up),
  // FC2 2T h; plus the transposes of the saved inputs.
  Experiment e = fp8_megatron_core_on_h100("mixtral-8x7b");
  e.plan.micro_batch = 1;
  const ExecutionModel x = resolve_execution(e);
  const double T = 4096, h = 4096, q = 4096, kv = 1024, f = 14336;
  const LayerTimes lt = layer_times(x, e.model, e.plan, 4096, 4096, true);
  const double inputs = T * h + T * q + 2 * T * h + 2 * T * f;
  const double grads = T * (q + 2 * kv) + T * h + 2 * T * 2 * f + 2 * T * h;
  EXPECT_DOUBLE_EQ(lt.forward_ops.fp8_casts.value(), x.roofline().memory_bound(Bytes(3 * (inputs - T * h)), 4).value());
  EXPECT_DOUBLE_EQ(lt.backward_ops.fp8_casts.value(),
                   x.roofline().memory_bound(Bytes(4 * grads + 2 * inputs), 8).value());
}

TEST(BlockRecompute, StageStoresRecomputedLayersInputOnly) {
  // GPT-3 175B, tp 8 + SP, pp 8 (12 layers a stage), 1F1B, 64 micro-batches, full recompute of
  // the first 4 layers of each stage (Megatron --recompute-method block --recompute-num-layers 4).
  // sbh = 2048 x 12288 = 25,165,824. A recomputed layer keeps its 16-bit input split over the TP
  // group, 2 sbh / 8 = 6,291,456 bytes; the other 8 keep Korthikanti's sbh (34/t + 5as/(ht)) =
  // 14.25 sbh = 358,612,992. Per micro-batch 4 x 6,291,456 + 8 x 358,612,992 = 2,894,069,760;
  // stage 0 holds 8 micro-batches: 23,152,558,080; the last stage one.
  const ModelSpec m = gpt3_175b();
  PlanSpec p = plan_with(8, true, Recompute::full);
  p.pp = 8;
  p.recompute_layers = 4;
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 0).value(), 23152558080.0);
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 7).value(), 2894069760.0);
  // Interleaved with 2 chunks of 6 layers and N = 2: per chunk 2 recomputed + 4 kept; a unit (one
  // micro-batch of one chunk) is 2 x 6,291,456 + 4 x 358,612,992 = 1,447,034,880.
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 2;
  p.recompute_layers = 2;
  EXPECT_DOUBLE_EQ(layer_activation_bytes_per_unit(exec(tr, p), m, p, 0).value(), 1447034880.0);
}

TEST(MicrobatchRecompute, InFlightPartialAndWholeMicrobatches) {
  // As BlockRecompute's stage, with K = 3 partial micro-batches per window: stage 0 holds 8
  // consecutive micro-batches, 3 partial (2,894,069,760 bytes each, above) and 5 recomputing all
  // 12 layers (12 x 6,291,456 = 75,497,472): 9,059,696,640; stage 5 holds 3, all partial; the
  // last stage 1.
  const ModelSpec m = gpt3_175b();
  PlanSpec p = plan_with(8, true, Recompute::full);
  p.pp = 8;
  p.recompute_layers = 4;
  p.partial_recompute_microbatches = 3;  // (the memory model does not check the framework's rules)
  const TrainingSpec tr{.global_batch = 64, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 0).value(), 9059696640.0);
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 5).value(), 3 * 2894069760.0);
  EXPECT_DOUBLE_EQ(stashed_layer_activation_bytes(exec(tr, p), m, tr, p, 7).value(), 2894069760.0);
}


TEST(CompiledLoss, KeepsOnlyTheSixteenBitLogitsAndTheirGradient) {
  // torchtitan on one GPU, Llama-3-like vocabulary 128,256, micro-batch 2 x 8192 tokens. Eager
  // cross_entropy on .float() logits holds 12 bytes per logit at its peak (log_softmax's fp32
  // output, nll's dense fp32 gradient, the fp32 input gradient); compiled (pytorch/torchtitan#1033)
  // the bf16 logits it saved and the bf16 gradient it writes: 4. Both add the final norm's and the
  // LM head's inputs: (residual 2 + activation 2) x s x b x h under torchtitan's bf16 recipe.
  ModelSpec m{.name = "llama-like", .layers = 2, .hidden = 4096, .heads = 32, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 14336, .kv_heads = 8, .moe = std::nullopt};
  PlanSpec p;
  p.framework = Framework::torchtitan;
  p.zero = 3;
  p.compile = true;
  const double sb = 2.0 * 8192, inputs = (2.0 + 2.0) * sb * 4096;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 2, 8192).value(), inputs + 12.0 * sb * 128256);
  p.compile_loss = true;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 2, 8192).value(), inputs + 4.0 * sb * 128256);
  // 16.8 GB less: the gap between the trainy H200 rows' measured 48 GiB and the 66 GB predicted
  // before the loss was compiled.
}

TEST(FusedCrossEntropy, TransformerEngineKeepsOnlyTheSixteenBitLogits) {
  // Megatron-Core at TP 2, vocabulary 128,256, micro-batch 1 x 8192 tokens: the unfused loss and
  // the native fusion keep the fp32 softmax for the backward (4 bytes per local logit);
  // Transformer Engine's kernels write the gradient over the bf16 logits and keep nothing else (2).
  ModelSpec m{.name = "llama-like", .layers = 2, .hidden = 4096, .heads = 32, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 14336, .kv_heads = 8, .moe = std::nullopt};
  PlanSpec p = plan_with(2, true, Recompute::none);
  p.framework = Framework::megatron_core;
  const double sb = 8192, inputs = (2.0 + 2.0) * sb * 4096 / 2, logits = sb * 128256 / 2;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 1, 8192).value(), inputs + 4.0 * logits);
  p.cross_entropy_fusion = CrossEntropyFusion::native;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 1, 8192).value(), inputs + 4.0 * logits);
  p.cross_entropy_fusion = CrossEntropyFusion::te;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 1, 8192).value(), inputs + 2.0 * logits);
}

TEST(LossParallel, DecomposedBackwardHoldsFourFp32CopiesOfTheLocalLogits) {
  // torchtitan at TP 8 (sequence parallel), vocabulary 128,256, micro-batch 2 x 8192 tokens, the
  // loss eager. PyTorch's loss_parallel backward, (grad_input + exp(x)) * grad_output, holds the
  // saved fp32 log-softmax x, the fp32 one-hot grad_input, exp(x) and the sum at once: 16 bytes per
  // local logit, where the unsharded eager path's fused kernels hold 12. The final norm's and the
  // head's inputs sit on the sequence shard: (2 + 2) x s x b x h / 8.
  ModelSpec m{.name = "llama-like", .layers = 2, .hidden = 4096, .heads = 32, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 14336, .kv_heads = 8, .moe = std::nullopt};
  PlanSpec p = plan_with(8, true, Recompute::full);
  p.framework = Framework::torchtitan;
  p.zero = 3;
  p.compile = true;
  const double sb = 2.0 * 8192, inputs = (2.0 + 2.0) * sb * 4096 / 8, local_logits = sb * 128256 / 8;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 2, 8192).value(), inputs + 16.0 * local_logits);
  // Without TP there is nothing to shard: the eager 12 bytes per logit.
  p.tp = 1;
  p.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 2, 8192).value(),
                   (2.0 + 2.0) * sb * 4096 + 12.0 * sb * 128256);
  // A compiled loss keeps the 16-bit logits and gradient whatever the sharding (4 bytes).
  p.tp = 8;
  p.sequence_parallel = true;
  p.compile_loss = true;
  EXPECT_DOUBLE_EQ(output_layer_activation_bytes(exec(p), m, p, 2, 8192).value(), inputs + 4.0 * local_logits);
}

TEST(PipelineStageOutputs, LastStageKeepsEveryMicroBatchsLogitsUntilTheStepEnds) {
  // torchtitan 405B-like at TP 8 x PP 8, micro-batch 4 x 8192 tokens, 8 micro-batches a step.
  // torch.distributed.pipelining's last stage appends each micro-batch's output (bf16 logits,
  // vocabulary-sharded: 128,256 / 8 a token) to output_chunks: at the last backward all eight,
  // 8 x 4 x 8192 x 16,032 x 2 bytes = 8,405,385,216 more than a stage that frees them. The first
  // stage holds no logits.
  ModelSpec m{.name = "llama-like", .layers = 16, .hidden = 16384, .heads = 128, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 53248, .kv_heads = 8, .moe = std::nullopt};
  PlanSpec p = plan_with(8, true, Recompute::full);
  p.framework = Framework::torchtitan;
  p.zero = 3;
  p.pp = 8;
  p.dp = 1;
  p.micro_batch = 4;
  p.compile = true;
  const TrainingSpec tr{.global_batch = 32, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  ExecutionModel x = exec(tr, p);
  const Bytes keeps = stage_activation_bytes(x, m, tr, p, 7);
  const Bytes first = stage_activation_bytes(x, m, tr, p, 0);
  FrameworkTraits frees = *x.framework;
  frees.pp_keeps_stage_outputs = false;
  x.framework = &frees;
  EXPECT_DOUBLE_EQ(keeps.value() - stage_activation_bytes(x, m, tr, p, 7).value(), 8.0 * 4 * 8192 * 16032 * 2);
  EXPECT_DOUBLE_EQ(first.value(), stage_activation_bytes(x, m, tr, p, 0).value());
}

TEST(DeferredHeadWeightGradients, LastStageKeepsEachDeferredMicroBatchsLogitGradientAndInput) {
  // Megatron-Core at TP 4 (sequence parallel) x PP 4, micro-batch 1 x 8192 tokens, 16 micro-batches
  // a step, vocabulary 128,256, hidden 8192. Each deferred micro-batch keeps the logits' bf16
  // gradient (8192 x 128,256 / 4 x 2 bytes) and the head's sequence-parallel input (8192 / 4 x
  // 8192 x 2) until the flush: 525,336,576 + 33,554,432 = 558,891,008 bytes each; all 16 by
  // default, 10 with wgrad_deferral_limit 10. Other stages keep nothing more.
  ModelSpec m{.name = "llama-like", .layers = 16, .hidden = 8192, .heads = 64, .seq_len = 8192, .vocab = 128256,
              .ffn_hidden = 28672, .kv_heads = 8, .moe = std::nullopt};
  PlanSpec p = plan_with(4, true, Recompute::none);
  p.framework = Framework::megatron_core;
  p.pp = 4;
  p.dp = 1;
  const TrainingSpec tr{.global_batch = 16, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  const Bytes plain = stage_activation_bytes(exec(tr, p), m, tr, p, 3);
  const Bytes first = stage_activation_bytes(exec(tr, p), m, tr, p, 0);
  p.defer_embedding_wgrad = true;
  EXPECT_DOUBLE_EQ(stage_activation_bytes(exec(tr, p), m, tr, p, 3).value() - plain.value(), 16 * 558891008.0);
  EXPECT_DOUBLE_EQ(stage_activation_bytes(exec(tr, p), m, tr, p, 0).value(), first.value());
  p.wgrad_deferral_limit = 10;
  EXPECT_DOUBLE_EQ(stage_activation_bytes(exec(tr, p), m, tr, p, 3).value() - plain.value(), 10 * 558891008.0);
}

}  // namespace
}  // namespace foresight::cost_models

namespace foresight::cost_models {

TEST(ActivationBytesPerLayer, RecomputedModulesAndFp8LinearInputsStoreLess) {
  // The GQA layer above (h 4096, ffn 11008 ungated, s 2048, b 1, t 1; sbh = 8,388,608).
  const ModelSpec m{.name = "gqa", .layers = 32, .hidden = 4096, .heads = 32, .seq_len = 2048,
                    .vocab = 32000, .ffn_hidden = 11008, .kv_heads = 8, .moe = std::nullopt};
  const double sbh = 2048.0 * 4096;
  PlanSpec p = plan_with(1, false, Recompute::none);
  // Recomputed norms (Megatron-Core --recompute-modules layernorm) keep neither output, the QKV
  // and the FFN inputs: 2 x 2 bytes x sbh fewer than the 887,095,296 above.
  p.recompute_modules.layernorm = true;
  EXPECT_DOUBLE_EQ(layer(m, p, 1, 2048).value(), 887095296.0 - 4.0 * sbh);
  // FP8-cached Linear inputs (DeepSeek-V3 sec. 3.3.3; the idealised framework): the same plan on
  // it in bf16 and in FP8; FP8 stores the projection input in 1.5 bytes instead of 2 and the FC1
  // and FC2 inputs in 1 (2 x 11008 / 4096 x sbh elements): 0.5 + 2 x 2.6875 = 5.875 sbh fewer.
  p.framework = Framework::generic;
  const Bytes bf16 = activation_bytes_per_layer(exec(p, Dtype::bf16), m, p, 1, 2048);
  const Bytes fp8 = activation_bytes_per_layer(exec(p, Dtype::fp8), m, p, 1, 2048);
  EXPECT_DOUBLE_EQ(bf16.value() - fp8.value(), 5.875 * sbh);
  // With the norms' outputs stored again, their FP8 copies save 2 x 1 byte more.
  p.recompute_modules.layernorm = false;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p, Dtype::bf16), m, p, 1, 2048).value() -
                       activation_bytes_per_layer(exec(p, Dtype::fp8), m, p, 1, 2048).value(),
                   7.875 * sbh);
}

TEST(ActivationBytesPerLayer, TransformerEngineFp8LayerOfLlama3By70bHand) {
  // Llama 3 70B's layer (h 8192, 64 heads, 8 KV heads of 128, SwiGLU ffn 28672) under Megatron-Core
  // in FP8, one 8192-token sequence, no TP, and the recipe's dropout off (model.dropout false).
  // Per token, in bytes: the two norms' 16-bit inputs (2 x 2h) and FP8 outputs (2 x h); Q in 16
  // bits (2h), K and V (2 x 2 x 1024); the attention's 16-bit output (2h) and the projection's FP8
  // copy (h); the fused SwiGLU's 16-bit gate and up inputs (2 x 2 x 28672) and FC2's FP8 input
  // (28672); fp32 softmax statistics per head (4 x 64). 4h + 2h + 2h + 4096 + 3h + 114688 + 28672
  // + 256 = 11h + 147712 = 237,824 bytes.
  ModelSpec m = llama3_70b();
  PlanSpec p = plan_with(1, false, Recompute::none);
  p.framework = Framework::megatron_core;
  const double tokens = 8192;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p, Dtype::fp8), m, p, 1, 8192).value(), tokens * 237824.0);
  // Unset, the framework's GPT recipe stores both residual sites' 1-byte dropout masks: 2h more.
  m.dropout.reset();
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p, Dtype::fp8), m, p, 1, 8192).value(),
                   tokens * (237824.0 + 2 * 8192));
}

TEST(StageActivations, WindowedOffloadStagesOneReloadOnlyBeyondTheLossBuffers) {
  // Transformer Engine's windowed offload (Megatron-Core): half of 80 layers offloaded keeps the
  // other 40 on the device; every offloaded layer's copy is freed as its window ends, so nothing
  // is staged when the forward ends, and the backward's first reload (one layer) is allocated
  // after the loss's buffers are freed: the stage holds 40 layers plus the larger of the two.
  ModelSpec m = llama3_70b();
  PlanSpec p = plan_with(1, false, Recompute::none);
  p.dp = 64;
  p.micro_batch = 2;
  p.framework = Framework::megatron_core;
  p.offload.activations = 0.5;
  const TrainingSpec t{.global_batch = 128, .dtype = Dtype::fp8, .optimizer = Optimizer::adam};
  const ExecutionModel x = exec(t, p);
  const double layer = activation_bytes_per_layer(x, m, p, 2, 8192).value();
  const double loss = output_layer_activation_bytes(x, m, p, 2, 8192).value();
  ASSERT_GT(loss, layer);  // 128k-entry vocabulary: the logits outweigh a layer
  EXPECT_NEAR(stage_activation_bytes(x, m, t, p, 0).value(), 40 * layer + loss, 1.0);
  // A small vocabulary: the reload outweighs the loss's buffers and counts in full.
  m.vocab = 1024;
  const double small_loss = output_layer_activation_bytes(x, m, p, 2, 8192).value();
  ASSERT_LT(small_loss, layer);
  EXPECT_NEAR(stage_activation_bytes(x, m, t, p, 0).value(), 40 * layer + layer, 1.0);
}

TEST(MemoryPerGpu, MegatronFsdpHoldsTwoUnitsEachWayTheEdgesAndFp8Shards) {
  // Llama 3 70B's layers on 64 GPUs, Megatron-Core ZeRO-3 (Megatron-FSDP) in FP8 with FP8
  // parameter gather, bf16 gradient reduction. Per layer 12h^2-style counting does not apply
  // (GQA, SwiGLU): QKV 8192 x (8192 + 2 x 1024), projection 8192^2, FC1 8192 x 2 x 28672, FC2
  // 28672 x 8192, two RMSNorms of 8192: 855,638,016 linear + 16,384 norm parameters.
  ModelSpec m = llama3_70b();
  PlanSpec p = plan_with(1, false, Recompute::none);
  p.dp = 64;
  p.zero = 3;
  p.framework = Framework::megatron_core;
  p.fp8_param_gather = true;
  p.reduce_dtype = Dtype::bf16;
  const TrainingSpec t{.global_batch = 64, .dtype = Dtype::fp8, .optimizer = Optimizer::adam};
  const ExecutionModel x = exec(t, p);
  const double linear = 8192.0 * (8192 + 2048) + 8192.0 * 8192 + 8192.0 * 2 * 28672 + 28672.0 * 8192;
  const double norms = 2 * 8192.0, layer = linear + norms;
  const double edges = 2 * 128256.0 * 8192 + 8192;  // embedding, untied head, final norm
  // Buffers: two gathered units (the GEMM weights in 1 byte, the norms in 2), two unsharded bf16
  // gradient units (the double-buffered reduce-scatter buckets), and the embedding, head and
  // final norm gathered in 2 bytes for the whole step.
  const MemoryBreakdown mem = memory_per_gpu(x, m, t, p, 0);
  EXPECT_NEAR(mem.buffers.value(), 2 * (linear + 2 * norms) + 2 * 2 * layer + 2 * edges, 1.0);
  // Weights: each rank's 1/64 shard, the layers' GEMM weights in FP8 (Megatron-FSDP's uint8
  // model-weight buffer), the norms and edges in 2 bytes.
  EXPECT_NEAR(mem.weights.value(), (80 * (linear + 2 * norms) + 2 * edges) / 64, 1.0);
}

// One pipeline stage of 8 GPUs sharded ZeRO-3 by `framework`, one micro-batch of one sequence.
PlanSpec one_stage_of_8(Framework framework) {
  PlanSpec p = plan_with(1, false, Recompute::none);
  p.dp = 8;
  p.zero = 3;
  p.framework = framework;
  return p;
}
const TrainingSpec kBatch8{.global_batch = 8, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};

TEST(MemoryPerGpu, OneStageFsdpHoldsItsUntiedHeadGatheredBesideTheEmbedding) {
  // Llama 3 70B on one stage of 8 GPUs under torchtitan's FSDP2 (zero 3): the root unit holds the
  // embedding, the final norm and the untied output layer; at the logits' peak all three are
  // gathered in bf16. The same model with tied embeddings has no head matrix of its own, so the
  // difference in buffers is the head alone: 128256 x 8192 parameters x 2 bytes.
  ModelSpec m = llama3_70b();
  const PlanSpec p = one_stage_of_8(Framework::torchtitan);
  const double untied = buffer_bytes(exec(kBatch8, p), m, p, 0).value();
  m.tie_embeddings = true;
  const double tied = buffer_bytes(exec(kBatch8, p), m, p, 0).value();
  EXPECT_DOUBLE_EQ(untied - tied, 128256.0 * 8192 * 2);
}

TEST(MemoryPerGpu, UnitsKeptGatheredAfterTheForwardLeaveNoneToPrefetch) {
  // Llama 3 70B's 80 layers on one stage of 8 GPUs under FSDP2. Resharding after the forward, two
  // units are gathered at a time (the one computing and the one prefetched); kept gathered
  // (reshard_after_forward false) all 80 are there at the end of the forward and none is left to
  // prefetch: 78 more layers of 855,654,400 parameters in bf16 (QKV 8192 x 10240, projection
  // 8192^2, FC1 8192 x 2 x 28672, FC2 28672 x 8192: 855,638,016; two RMSNorms: 16,384).
  const ModelSpec m = llama3_70b();
  PlanSpec p = one_stage_of_8(Framework::torchtitan);
  const double resharded = buffer_bytes(exec(kBatch8, p), m, p, 0).value();
  p.reshard_after_forward = false;
  const double kept = buffer_bytes(exec(kBatch8, p), m, p, 0).value();
  EXPECT_DOUBLE_EQ(kept - resharded, 78 * 855654400.0 * 2);
}

TEST(MemoryPerGpu, ExpertsKeptWholeAreNotGatheredAgain) {
  // A Llama-3-70B-shaped MoE (8 experts of the dense FFN's width, top 2, every layer) under
  // Megatron-FSDP (zero 3) on 8 GPUs with ep 8: the experts' data-parallel group is one rank, so
  // each GPU holds its expert whole (weights and gradients with the stage's state) and gathers only
  // the dense part of a layer. Buffers by hand, bf16 throughout (reduce_dtype bf16): two gathered
  // units and two unsharded gradient units of the dense part (attention, the router, two norms),
  // the embedding, untied head and final norm for the whole step, and the dispatched rows
  // 2 x top_k x 2 bytes x sbh.
  ModelSpec m = llama3_70b();
  m.moe = MoeSpec{.experts = 8, .top_k = 2, .capacity_factor = 1.0};
  m.moe->dropless = true;
  PlanSpec p = one_stage_of_8(Framework::megatron_core);
  p.ep = 8;
  p.reduce_dtype = Dtype::bf16;
  ASSERT_EQ(p.expert_dp(), 1);
  const double h = 8192;
  const double attention = 8192.0 * (8192 + 2048) + 8192.0 * 8192;
  const double dense = attention + h * 8 + 2 * h;  // attention, router, two RMSNorms
  const double edges = 2 * 128256.0 * h + h;
  const double sbh = 8192.0 * h;
  EXPECT_NEAR(buffer_bytes(exec(kBatch8, p), m, p, 0).value(), 2 * 2 * dense + 2 * 2 * dense + 2 * edges + 2 * 2 * 2 * sbh,
              1.0);
}

TEST(RecomputeWorkingBytes, PerOpPolicyRebuildsOnlyWhatItDidNotSave) {
  // torchtitan's per-op selective recompute saves some of a block's outputs; the re-run before
  // the backward rebuilds the rest: the layer stored whole less what the policy stored.
  const ModelSpec m = llama3_70b();
  PlanSpec none = plan_with(1, false, Recompute::none);
  none.framework = Framework::torchtitan;
  PlanSpec op = none;
  op.recompute = Recompute::selective_op;
  const ExecutionModel x = exec(op);
  const double whole = activation_bytes_per_layer(x, m, none, 1, 8192).value();
  const double saved = activation_bytes_per_layer(x, m, op, 1, 8192).value();
  ASSERT_GT(saved, 0.0);
  EXPECT_DOUBLE_EQ(recompute_working_bytes(x, m, op, 1, 8192).value(), whole - saved);
}

TEST(ActivationBytesPerLayer, CheckpointedSubmodulesKeepOnlyTheirInputs) {
  // The GQA layer above (h 4096, ffn 11008 ungated, s 2048, b 1, t 1; sbh = 8,388,608; 2-byte
  // activations): 887,095,296 bytes stored.
  ModelSpec m{.name = "gqa", .layers = 32, .hidden = 4096, .heads = 32, .seq_len = 2048,
              .vocab = 32000, .ffn_hidden = 11008, .kv_heads = 8, .moe = std::nullopt};
  const double sbh = 2048.0 * 4096, ffn = 11008.0 / 4096;
  PlanSpec p = plan_with(1, false, Recompute::none);
  // A checkpointed MLP (Megatron-Core --recompute-modules mlp) keeps the residual it starts from,
  // which the layer stores anyway, and nothing of its own: not its fused norm's output (the FFN
  // input, 2 sbh) nor the GeLU input and FC2 input (2 + 2 bytes x 11008 / 4096 sbh).
  p.recompute_modules.mlp = true;
  EXPECT_DOUBLE_EQ(layer(m, p, 1, 2048).value(), 887095296.0 - (2.0 + 4.0 * ffn) * sbh);
  // The same layer as MoE (8 experts of the same width, top 2, one shared expert, t 1 so every
  // routed copy is on this GPU): a checkpointed MoE block keeps only its input, the norm's output
  // outside it. What remains is the dense layer less its FFN's inner tensors, whatever the experts.
  m.moe = MoeSpec{.experts = 8, .top_k = 2, .capacity_factor = 1.0};
  m.moe->shared_experts = 1;
  p.recompute_modules = {.moe = true};
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(exec(p), m, p, 1, 2048, true).value(), 887095296.0 - 4.0 * ffn * sbh);
  // The shared expert alone: its GeLU input and FC2 input (4 bytes x 11008 / 4096 sbh) fewer than
  // the block that keeps them; moe_act drops the routed experts' FC2 inputs (2 routed copies of
  // 2 bytes x 11008 / 4096 sbh), not the shared expert's (moe/experts.py; shared_experts.py has
  // its own module).
  p.recompute_modules = {};
  const double all = activation_bytes_per_layer(exec(p), m, p, 1, 2048, true).value();
  p.recompute_modules = {.shared_experts = true};
  EXPECT_DOUBLE_EQ(all - activation_bytes_per_layer(exec(p), m, p, 1, 2048, true).value(), 4.0 * ffn * sbh);
  p.recompute_modules = {.moe_act = true};
  EXPECT_DOUBLE_EQ(all - activation_bytes_per_layer(exec(p), m, p, 1, 2048, true).value(), 2.0 * 2.0 * ffn * sbh);
}

TEST(MicrobatchesInFlight, ZeroBubbleKeepsOneFOneBsAndDualPipeHoldsOneMore) {
  // deepseek-ai/DualPipe README, "Activation Per Device": 1F1B and ZB1P PP, DualPipe PP + 1 (model
  // chunks of one micro-batch each).
  PlanSpec p;
  p.pp = 8;
  p.schedule = Schedule::one_f_one_b;
  EXPECT_EQ(microbatches_in_flight(p, 64, 0), 8);
  p.schedule = Schedule::zb_h1;
  EXPECT_EQ(microbatches_in_flight(p, 64, 0), 8);
  EXPECT_EQ(microbatches_in_flight(p, 64, 7), 8);  // the deferred weight passes hold theirs
  p.schedule = Schedule::dualpipe;
  for (int s = 0; s < 8; ++s) EXPECT_EQ(microbatches_in_flight(p, 64, s), 9) << "stage " << s;
}

}  // namespace foresight::cost_models

namespace foresight::cost_models {

TEST(Zero3Memory, DeepSpeedKeepsWhatItsTraceReusesWithinTheDistance) {
  // GPT-3 1.3B on one stage under DeepSpeed's ZeRO-3 with a complete trace (plan.zero3_prefetch):
  // a layer of 50,358,272 parameters, the tied embedding, positions and final norm 109,056,000
  // walked once each way. A layer stays gathered from its forward to its backward when its next use
  // comes within 1e9 elements of the walk: 2 x 109.06M + 3 x (later layers) x 50.36M under full
  // recompute (the last 6 layers), 2 x 109.06M + 2 x (later layers) x 50.36M without (the last 8).
  const ModelSpec m = load_model(resolve_scenario("models", "gpt3-1.3b"));
  const FrameworkTraits& fw = framework_traits(Framework::deepspeed);
  PlanSpec p;
  p.dp = 16;
  p.zero = 3;
  p.framework = Framework::deepspeed;
  p.recompute = Recompute::full;
  p.zero3_prefetch = true;
  const double layer = 50358272.0;
  EXPECT_DOUBLE_EQ(zero3_reused_parameters(fw, m, p, 0), 6 * layer);
  p.recompute = Recompute::none;
  EXPECT_DOUBLE_EQ(zero3_reused_parameters(fw, m, p, 0), 8 * layer);
  // The release without a complete trace keeps nothing; nor does a framework without the distance.
  p.zero3_prefetch.reset();
  EXPECT_DOUBLE_EQ(zero3_reused_parameters(fw, m, p, 0), 0.0);
  p.framework = Framework::torchtitan;
  EXPECT_DOUBLE_EQ(zero3_reused_parameters(framework_traits(Framework::torchtitan), m, p, 0), 0.0);
}

}  // namespace foresight::cost_models
