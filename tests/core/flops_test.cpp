// Parameter and FLOP counts against Narayanan et al. 2021 (SC21) and hand computations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/flops.hpp"
#include "core/scenario.hpp"

using namespace foresight;

namespace {
ModelSpec gpt(int layers, int hidden, int heads, int vocab = 51200, int seq = 2048) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.seq_len = seq;
  m.vocab = vocab;
  m.ffn_hidden = 4 * hidden;
  m.kv_heads = heads;
  return m;
}
}  // namespace

TEST(Parameters, MegatronLayerIs12hSquaredPlus13h) {
  // Narayanan 2021 sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)); one layer = 12h^2 + 13h.
  const ModelSpec m = gpt(1, 1024, 16);
  EXPECT_DOUBLE_EQ(dense_layer_parameters(m), 12.0 * 1024 * 1024 + 13.0 * 1024);
}

TEST(Parameters, TotalMatchesNarayananClosedForm) {
  const ModelSpec m = gpt(105, 20480, 128);
  const double l = 105, h = 20480, V = 51200, s = 2048;
  const double closed = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  // Closed form omits the final layernorm (2h): tiny.
  EXPECT_NEAR(parameter_count(m), closed + 2 * h, 1.0);
}

TEST(Parameters, Gpt2SmallIs124M) {
  // GPT-2 small: 12 layers, 768 hidden, vocab 50257, 1024 positions: 124.4M parameters (tied).
  const ModelSpec m = gpt(12, 768, 12, 50257, 1024);
  EXPECT_NEAR(parameter_count(m) / 1e6, 124.44, 0.01);
}

TEST(Parameters, Sc21TableModelsWithinTwoPercentOfPublishedSizes) {
  // Narayanan et al. 2021, Table 1 (published parameter counts, billions), bundled model files.
  // The table prints sizes rounded (1.7, 3.6, ...): a printed value stands for anything within
  // half its last digit, so the tolerance is 2% or that rounding, whichever is larger. (1.7B is
  // 1.652B by the paper's own formula, sec. 5.1; it rounds to 1.7.)
  struct Row { const char* model; double published_b; double last_digit; };
  const Row rows[] = {{"sc21-1.7b", 1.7, 0.1},   {"sc21-3.6b", 3.6, 0.1},   {"sc21-7.5b", 7.5, 0.1},
                      {"sc21-18b", 18.4, 0.1},   {"sc21-39b", 39.1, 0.1},   {"sc21-76b", 76.1, 0.1},
                      {"sc21-145b", 145.6, 0.1}, {"sc21-310b", 310.1, 0.1}, {"sc21-530b", 529.6, 0.1},
                      {"sc21-1t", 1008.0, 1.0}};
  for (const auto& r : rows) {
    const ModelSpec m = load_model(resolve_scenario("models", r.model));
    const double b = parameter_count(m) / 1e9;
    const double tolerance = std::max(0.02 * r.published_b, 0.5 * r.last_digit);
    EXPECT_NEAR(b, r.published_b, tolerance) << r.model << ": " << b << " B vs published " << r.published_b << " B";
    EXPECT_NEAR(b / r.published_b, 1.0, 0.03) << r.model;
  }
}

TEST(Flops, HardwareFlopsWithFullRecomputeIsNarayananEq3) {
  const ModelSpec m = gpt(96, 12288, 96);
  const Flops ours = hardware_flops_per_iteration(m, 1536, Recompute::full);
  const Flops eq3 = narayanan_eq3_flops(1536, 2048, 96, 12288, 51200);
  EXPECT_NEAR(ours / eq3, 1.0, 1e-12);
}

TEST(Flops, ModelFlopsIsKorthikantiFormula) {
  // Korthikanti 2022 sec. 6.3: model FLOPs = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
  const ModelSpec m = gpt(105, 20480, 128);
  const double B = 1920, s = 2048, l = 105, h = 20480, V = 51200;
  const double expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_NEAR(model_flops_per_iteration(m, B).value() / expected, 1.0, 1e-12);
}

TEST(Flops, MtNlgHardwareFlopsMatchPublishedThroughput) {
  // Smith et al. 2022 sec. 2.4: 126 TFLOP/s per GPU x 2240 GPUs x 60.1 s per iteration.
  const Experiment e = load_experiment(resolve_scenario("experiments", "mt-nlg-530b-selene-280"));
  const double published = 126e12 * 2240 * 60.1;
  const double ours = hardware_flops_per_iteration(e.model, e.training.global_batch, e.plan.recompute).value();
  EXPECT_NEAR(ours / published, 1.0, 0.03);
  EXPECT_NEAR(parameter_count(e.model) / 530e9, 1.0, 0.01);
}

TEST(Flops, SelectiveRecomputeAddsOnlyTheAttentionCore) {
  const ModelSpec m = gpt(2, 256, 4, 1000, 128);
  const double B = 2, s = 128, h = 256, l = 2;
  const Flops diff = hardware_flops_per_iteration(m, B, Recompute::selective) - model_flops_per_iteration(m, B);
  EXPECT_DOUBLE_EQ(diff.value(), 4 * B * s * s * h * l);  // QK^T and AV once more per layer
}

TEST(Flops, MtpModulesAsMegatronCoreCountsThem) {
  // Megatron-Core's num_floating_point_operations (megatron/training/training.py, with
  // --mtp-num-layers D): D more layers of the last layer's kind, per module 2 h^2 of projection
  // (its "2 * hidden_size * hidden_size" with the expansion factors 3 x 2) and one more logit
  // pass; model FLOPs 3 x 2 x tokens x weights. Here by hand for a GPT layer (12 h^2 weights,
  // attention 4 T s h) at B = 2, s = 128, h = 256, V = 1000, D = 2.
  ModelSpec m = gpt(2, 256, 4, 1000, 128);
  const double base = model_flops_per_iteration(m, 2).value();
  m.mtp_layers = 2;
  const double T = 2 * 128, h = 256, s = 128, V = 1000;
  const double layer = 2 * T * 12 * h * h + 4 * T * s * h;
  const double module = layer + 2 * T * 2 * h * h + 2 * T * h * V;
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(m, 2).value() - base, 3 * 2 * module);
  // The modules' layers are of the last layer's kind.
  m.moe = MoeSpec{.experts = 8, .top_k = 2, .capacity_factor = 1.0, .every = 2};
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_TRUE(m.is_moe_layer(2));
  EXPECT_TRUE(m.is_moe_layer(3));
  m.moe->every = 3;  // layer 1 (the last) dense: so are the modules' layers
  EXPECT_FALSE(m.is_moe_layer(2));
}

TEST(Flops, MoeCountsTopKExperts) {
  ModelSpec m = gpt(2, 256, 4, 1000, 128);
  const double dense = model_flops_per_iteration(m, 1).value();
  m.moe = MoeSpec{.experts = 8, .top_k = 2, .capacity_factor = 1.0, .every = 2};
  // Layer 2 of 2 is MoE: its FFN runs twice (top-2) plus the router (h x experts GEMM).
  const double tokens = 128, h = 256, ffn = 1024;
  const double extra = 3 * (2 * tokens * (2 * h * ffn) + 2 * tokens * h * 8);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(m, 1).value(), dense + extra);
  EXPECT_DOUBLE_EQ(parameter_count(m) - parameter_count(gpt(2, 256, 4, 1000, 128)),
                   7 * (2 * h * ffn + ffn + h) + h * 8);
}

// ---- Today's architectures: gated MLPs, RMSNorm, no biases, RoPE, untied heads, head_dim -----

TEST(ParameterCount, LlamaFamilyMatchesTheReleasedCheckpoints) {
  // Parameter counts of the released safetensors (Hugging Face model cards of
  // meta-llama/Llama-3.1-8B, -70B, -405B: 8,030,261,248; 70,553,706,496; 405,853,388,800).
  const std::pair<const char*, double> models[] = {
      {"llama3.1-8b", 8030261248.0}, {"llama3.1-70b", 70553706496.0}, {"llama3.1-405b", 405853388800.0},
      // meta-llama/Llama-2-13b-hf and -70b-hf: 13,015,864,320 and 68,976,648,192.
      {"llama2-13b", 13015864320.0}, {"llama2-70b", 68976648192.0}};
  for (const auto& [name, published] : models) {
    const ModelSpec m = load_model(resolve_scenario("models", name));
    EXPECT_NEAR(parameter_count(m), published, published * 0.005) << name;  // the 0.5%
    EXPECT_DOUBLE_EQ(parameter_count(m), published) << name;                 // in fact exact
  }
}

TEST(ParameterCount, GatedMlpHasThreeMatricesAndNoBiases) {
  // Llama 3.1 8B by hand: attention 4096 x (4096 + 2 x 8 x 128) + 4096 x 4096 = 41,943,040;
  // SwiGLU 3 x 4096 x 14336 = 176,160,768; two RMSNorm gains 8,192.
  const ModelSpec m = load_model(resolve_scenario("models", "llama3.1-8b"));
  EXPECT_DOUBLE_EQ(dense_layer_parameters(m), 41943040.0 + 176160768.0 + 8192.0);
  // Untied: input and output embeddings 2 x 128256 x 4096; no position table (RoPE).
  EXPECT_DOUBLE_EQ(embedding_parameters(m), 2.0 * 128256 * 4096);
}

TEST(ParameterCount, HeadDimDifferentFromHiddenOverHeads) {
  // A Qwen3-30B-A3B-like attention: 32 query heads of 128 on h = 2048 (q = 4096), 4 kv heads:
  // Q 2048 x 4096, K and V 2048 x 512 each, O 4096 x 2048.
  ModelSpec m{.name = "q", .layers = 1, .hidden = 2048, .heads = 32, .seq_len = 4096, .vocab = 1000,
              .ffn_hidden = 6144, .kv_heads = 4, .moe = std::nullopt};
  m.attention_head_dim = 128;
  m.activation = Activation::swiglu;
  m.bias = false;
  m.norm = Norm::rmsnorm;
  const double attention = 2048.0 * 4096 + 2 * 2048.0 * 512 + 4096.0 * 2048;
  EXPECT_DOUBLE_EQ(dense_layer_parameters(m), attention + 3 * 2048.0 * 6144 + 2 * 2048.0);
  // Attention-core FLOPs scale with q = 4096, not h: 4 x T x s x 4096.
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(m, 10, 4096).value(), 4.0 * 10 * 4096 * 4096);
}

TEST(LayerFlops, GatedMlpByHand) {
  // One Llama 3.1 8B layer, 8192 tokens at context 8192: 2T x (attention weights + 3hf) for the
  // GEMMs plus 4 T s q for QK^T and AV.
  const ModelSpec m = load_model(resolve_scenario("models", "llama3.1-8b"));
  const double T = 8192, s = 8192;
  const double gemm = 2 * T * (41943040.0 + 3 * 4096.0 * 14336);
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, T, s, false).value(), gemm + 4 * T * s * 4096);
}

TEST(ParameterCount, MptKeepsTheGptConventions) {
  // llm-foundry's benchmark table prints NumParams 64,862,437,376 for MPT-70B at sequence 2048
  // (GeLU, biases, learned positions, tied embedding): modern.yaml llmfoundry_mpt-70b rows.
  ModelSpec m{.name = "mpt-70b", .layers = 80, .hidden = 8192, .heads = 64, .seq_len = 2048, .vocab = 50368,
              .ffn_hidden = 32768, .kv_heads = 64, .moe = std::nullopt};
  EXPECT_DOUBLE_EQ(parameter_count(m), 64862437376.0);
}

TEST(ParameterCount, MixtureOfExpertsModels) {
  // Mixtral 8x7B: 46,702,792,704 parameters (mistralai/Mixtral-8x7B-v0.1 safetensors); 8 experts
  // of 3 x 4096 x 14336 and a 4096 x 8 router per layer.
  const ModelSpec mixtral = load_model(resolve_scenario("models", "mixtral-8x7b"));
  EXPECT_NEAR(parameter_count(mixtral), 46702792704.0, 46702792704.0 * 0.005);
  // Active: 2 of 8 experts (Mixtral paper: 13B active parameters).
  EXPECT_NEAR(active_parameter_count(mixtral), 12.88e9, 0.01e9);
  // Qwen3-30B-A3B: 30.5B in total (the Qwen3 model card), 128 experts of 3 x 2048 x 768.
  const ModelSpec qwen = load_model(resolve_scenario("models", "qwen3-30b-a3b"));
  EXPECT_NEAR(parameter_count(qwen), 30.5e9, 30.5e9 * 0.005);
  // FLOPs of one MoE layer by hand: 8 routed experts per token (no capacity padding in model FLOPs).
  const double T = 1000, s = 4096;
  const double attention_weights = 2048.0 * (4096 + 2 * 512) + 4096.0 * 2048;
  const double ffn = 8 * 3 * 2048.0 * 768;
  EXPECT_DOUBLE_EQ(layer_forward_flops(qwen, T, s, true).value(),
                   2 * T * (attention_weights + ffn + 2048.0 * 128) + 4 * T * s * 4096);
}

TEST(ParameterCount, SharedExpertsAndLeadingDenseLayers) {
  // A DeepSeekMoE-style layout: 4 layers, the first dense, then MoE layers of 16 routed experts
  // (width 512) and 2 shared ones: per MoE layer 18 expert FFNs and a router.
  ModelSpec m{.name = "ds", .layers = 4, .hidden = 1024, .heads = 8, .seq_len = 1024, .vocab = 1000,
              .ffn_hidden = 4096, .kv_heads = 8,
              .moe = MoeSpec{.experts = 16, .top_k = 2, .capacity_factor = 1.0, .every = 1, .dropless = true,
                             .imbalance = 1.0, .expert_ffn_hidden = 512, .shared_experts = 2, .first_dense = 1}};
  m.activation = Activation::swiglu;
  m.bias = false;
  m.norm = Norm::rmsnorm;
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_EQ(m.moe_layers(), 3);
  const double attention = 4.0 * 1024 * 1024, norms = 2 * 1024.0;
  const double dense_layer = attention + 3 * 1024.0 * 4096 + norms;
  const double moe_layer = attention + 18 * 3 * 1024.0 * 512 + 1024.0 * 16 + norms;
  // Tied embedding and learned positions (the defaults): 1000 x 1024 + 1024 x 1024.
  EXPECT_DOUBLE_EQ(parameter_count(m), dense_layer + 3 * moe_layer + 1000.0 * 1024 + 1024.0 * 1024 + 1024);
}

TEST(ParameterCount, DeepSeekV3WithLatentAttention) {
  // 671B total parameters, 37B activated per token (DeepSeek-V3 technical report, abstract; the
  // MTP module's extra 14B are not part of the main model).
  const ModelSpec m = load_model(resolve_scenario("models", "deepseek-v3"));
  ASSERT_EQ(m.mtp_layers, 1);
  ModelSpec main = m;
  main.mtp_layers = 0;
  EXPECT_NEAR(parameter_count(main), 671e9, 671e9 * 0.005);
  EXPECT_NEAR(active_parameter_count(main), 37e9, 37e9 * 0.02);  // "37B": two significant digits
  // The MTP module: "685B, which includes 671B of the Main Model weights and 14B of the
  // Multi-Token Prediction (MTP) Module weights" (deepseek-ai/DeepSeek-V3 README); the checkpoint
  // stores the module with its own copies of the shared embedding and head (2 x 129280 x 7168),
  // so 14B = the module's own parameters + those two matrices: the difference of two totals
  // rounded to the billion, 13-15B, and with the main model's 685B to 0.1%.
  EXPECT_DOUBLE_EQ(parameter_count(m) - parameter_count(main), mtp_parameters(m));
  const double stored = mtp_parameters(m) + 2.0 * 129280 * 7168;
  EXPECT_GT(stored, 13e9);
  EXPECT_LT(stored, 15e9);
  EXPECT_NEAR(parameter_count(main) + stored, 685e9, 685e9 * 0.001);
  // MLA attention weights of one layer by hand: W_DQ 7168 x 1536 (+ its 1536-gain norm), W_UQ
  // 1536 x 128 x 192, W_DKV 7168 x (512 + 64) (+ 512-gain norm), W_UKV 512 x 128 x (128 + 128),
  // W_O 128 x 128 x 7168.
  const double attention = 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 + 512.0 * 128 * 256 +
                           128.0 * 128 * 7168;
  const double dense_ffn = 3 * 7168.0 * 18432;
  EXPECT_DOUBLE_EQ(dense_layer_parameters(m), attention + dense_ffn + 2 * 7168.0);
  // Attention core: QK^T over 192 dims per head, AV over 128: 2 T s 128 (192 + 128).
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(m, 10, 4096).value(), 2.0 * 10 * 4096 * 128 * (192 + 128));
}

TEST(ParameterCount, GptNeoX20BParallelBlockMatchesThePaperExactly) {
  // Black et al. 2022 (arXiv:2204.06745) Table 1: 20,554,567,680 parameters. Parallel attention +
  // MLP with one layernorm per branch, untied embeddings of the padded 50432-token vocabulary.
  const ModelSpec m = load_model(resolve_scenario("models", "gpt-neox-20b"));
  EXPECT_TRUE(m.parallel_block);
  EXPECT_EQ(m.norms_per_layer(), 2);
  EXPECT_DOUBLE_EQ(parameter_count(m), 20554567680.0);
  // One shared norm (GPT-J, PaLM) drops one norm's gain and bias per layer: 2 x 6144 x 44.
  ModelSpec shared = m;
  shared.parallel_block_norms = 1;
  EXPECT_DOUBLE_EQ(parameter_count(m) - parameter_count(shared), 2.0 * 6144 * 44);
}

TEST(ParameterCount, GptOss120BAgainstTheModelCard) {
  // OpenAI gpt-oss model card Table 1: 116.83B total, 5.13B active (without the input embedding);
  // MLP 114.71B, attention 0.96B, embedding + unembedding 1.16B.
  const ModelSpec m = load_model(resolve_scenario("models", "gpt-oss-120b"));
  EXPECT_NEAR(parameter_count(m), 116.83e9, 116.83e9 * 0.005);
  const double input_embedding = 201088.0 * 2880;
  EXPECT_NEAR(active_parameter_count(m) - input_embedding, 5.13e9, 5.13e9 * 0.005);
  EXPECT_NEAR(2 * input_embedding, 1.16e9, 0.01e9);
  // Attention of one layer by hand: Q 2880 x 4096, K and V 2880 x 512 each, O 4096 x 2880, biases
  // 4096 + 2 x 512 + 2880, one sink per head (64); 36 layers = the card's 0.96B.
  const double attention = 2880.0 * (4096 + 1024) + 4096.0 * 2880 + (4096 + 1024 + 2880) + 64;
  EXPECT_NEAR(36 * attention, 0.96e9, 0.005e9);
  // The pattern [1, 0]: even layers (from 0) see 128 tokens, odd layers the whole context.
  EXPECT_EQ(m.window_of(0), 128);
  EXPECT_EQ(m.window_of(1), 0);
  EXPECT_EQ(m.window_of(34), 128);
  EXPECT_EQ(m.window_of(35), 0);
}

TEST(Flops, SlidingWindowLayersAttendToTheWindowOnly) {
  ModelSpec m = gpt(4, 1024, 16, 1000, 4096);
  m.attention_window = AttentionWindowSpec{.size = 512, .pattern = {1, 0}};
  // Per token: QK^T and AV over min(window, s) keys (no causal halving, the full-attention
  // convention): 4 T w h on windowed layers, 4 T s h on the others.
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(m, 10, 4096, 512).value(), 4.0 * 10 * 512 * 1024);
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(m, 10, 256, 512).value(), 4.0 * 10 * 256 * 1024);  // window > s
  const double gemms = 2.0 * 4096 * 12 * 1024.0 * 1024;  // one layer's GEMMs for one sequence
  const double windowed = gemms + 4.0 * 4096 * 512 * 1024, full = gemms + 4.0 * 4096 * 4096 * 1024;
  const double head = 2.0 * 4096 * 1024 * 1000;
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(m, 1).value(), 3.0 * (2 * windowed + 2 * full + head));
  // Selective recompute re-runs each layer's attention core at its own window.
  EXPECT_DOUBLE_EQ((hardware_flops_per_iteration(m, 1, Recompute::selective) - model_flops_per_iteration(m, 1)).value(),
                   2 * 4.0 * 4096 * 512 * 1024 + 2 * 4.0 * 4096 * 4096 * 1024);
  // Block recompute of every layer (pp 2, two layers a stage, both recomputed) re-runs each
  // layer's forward at its own window: one more forward of the layers, 2 windowed + 2 full.
  PlanSpec p;
  p.pp = 2;
  p.recompute = Recompute::full;
  p.recompute_layers = 2;
  EXPECT_DOUBLE_EQ((hardware_flops_per_iteration(m, 1, p) - model_flops_per_iteration(m, 1)).value(),
                   2 * windowed + 2 * full);
}

TEST(Flops, BlockRecomputeAddsTheForwardOfTheRecomputedLayersOnly) {
  // GPT-3 175B (a = 96, h = 12288, s = 2048), batch 1, pp 8 (12 layers a stage), the first 4 of
  // each stage recomputed: 32 layers run their forward again. One layer's forward is
  // 24 s h^2 + 4 s^2 h = 24 x 2048 x 150,994,944 + 4 x 4,194,304 x 12288
  // = 7,421,703,487,488 + 206,158,430,208 = 7,627,861,917,696 FLOPs; x 32 = 244,091,581,366,272.
  const ModelSpec m = gpt(96, 12288, 96);
  PlanSpec p;
  p.pp = 8;
  p.recompute = Recompute::full;
  p.recompute_layers = 4;
  const Flops extra = hardware_flops_per_iteration(m, 1, p) - model_flops_per_iteration(m, 1);
  EXPECT_DOUBLE_EQ(extra.value(), 244091581366272.0);
  // recompute_layers 0 is every layer: Narayanan's eq. 3 again.
  p.recompute_layers = 0;
  EXPECT_NEAR(hardware_flops_per_iteration(m, 1536, p) / narayanan_eq3_flops(1536, 2048, 96, 12288, 51200), 1.0, 1e-12);
}

TEST(Flops, MicrobatchLevelRecomputeAddsTheWholeMicrobatchesShare) {
  // GPT-3 175B, batch 64 on one pipeline of pp 8 (12 layers a stage, 64 micro-batches), block of
  // 4 layers, K = 3 partial micro-batches per window. Stage s's window is 8 - s; k % (8 - s) >= 3
  // recompute all 12 layers: stage 0 40 of 64, stage 1 36, stage 2 31, stage 3 25, stage 4 16,
  // stages 5-7 none. Layer-forwards again: 8 x 4 block layers + 8 x (40+36+31+25+16)/64 = 32 +
  // 18.5 = 50.5, each 64 x 7,627,861,917,696 FLOPs: 24,653,249,717,993,472.
  const ModelSpec m = gpt(96, 12288, 96);
  PlanSpec p;
  p.pp = 8;
  p.recompute = Recompute::full;
  p.recompute_layers = 4;
  p.partial_recompute_microbatches = 3;
  const Flops extra = hardware_flops_per_iteration(m, 64, p) - model_flops_per_iteration(m, 64);
  EXPECT_DOUBLE_EQ(extra.value(), 24653249717993472.0);
}

TEST(MlaUpProjections, DeepSeekV3UpProjectionWeights) {
  // DeepSeek-V3 (arXiv:2412.19437 sec. 4.2): h 7168, 128 heads, query latent 1536, key/value latent
  // 512, per-head query/key 128 + 64 (RoPE), value 128. Up: 1536 x 128 x 192 = 37,748,736 and
  // 512 x 128 x (128 + 128) = 16,777,216: 54,525,952.
  ModelSpec m{.name = "dsv3", .layers = 61, .hidden = 7168, .heads = 128, .seq_len = 4096, .vocab = 129280,
              .ffn_hidden = 18432, .kv_heads = 128, .moe = std::nullopt};
  m.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                  .v_head_dim = 128};
  EXPECT_DOUBLE_EQ(mla_up_projection_weights(m), 54525952.0);
}

TEST(RecomputeModules, CheckpointedSubmodulesCountTheirGemmsAsHardwareFlops) {
  // GPT-3 1.3B-like (24 layers, h 2048, ffn 8192 ungated, seq 2048), 4 sequences: a checkpointed
  // MLP re-runs FC1 and FC2, 2 x 2 x 2048 x 8192 FLOPs per token and layer.
  ModelSpec m{.name = "gpt", .layers = 24, .hidden = 2048, .heads = 16, .seq_len = 2048, .vocab = 51200,
              .ffn_hidden = 8192, .kv_heads = 16, .moe = std::nullopt};
  PlanSpec p;
  const double tokens = 4.0 * 2048;
  const Flops plain = hardware_flops_per_iteration(m, 4.0, p);
  p.recompute_modules.mlp = true;
  EXPECT_NEAR((hardware_flops_per_iteration(m, 4.0, p) - plain).value(), 2.0 * tokens * 2.0 * 2048 * 8192 * 24, 1.0);
  // Every other layer MoE (16 experts of 1024, top 2, one shared): the 12 dense layers as above;
  // a checkpointed MoE block re-runs its router (2048 x 16) and 3 experts' FFNs (2 x 2048 x 1024
  // each); its shared expert alone, one FFN.
  m.moe = MoeSpec{.experts = 16, .top_k = 2, .every = 2, .expert_ffn_hidden = 1024};
  m.moe->shared_experts = 1;
  const Flops moe_plain = hardware_flops_per_iteration(m, 4.0, PlanSpec{});
  EXPECT_NEAR((hardware_flops_per_iteration(m, 4.0, p) - moe_plain).value(), 2.0 * tokens * 2.0 * 2048 * 8192 * 12, 1.0);
  p.recompute_modules = {.moe = true};
  EXPECT_NEAR((hardware_flops_per_iteration(m, 4.0, p) - moe_plain).value(),
              2.0 * tokens * (2048.0 * 16 + 3 * 2.0 * 2048 * 1024) * 12, 1.0);
  p.recompute_modules = {.shared_experts = true};
  EXPECT_NEAR((hardware_flops_per_iteration(m, 4.0, p) - moe_plain).value(), 2.0 * tokens * 2.0 * 2048 * 1024 * 12, 1.0);
}

TEST(MlaUpProjections, RecomputedTheyCountAsHardwareFlops) {
  // 2 FLOPs per up-projection weight and token, every layer: 2 x 54,525,952 x 4096 x 61 per sequence.
  ModelSpec m{.name = "dsv3", .layers = 61, .hidden = 7168, .heads = 128, .seq_len = 4096, .vocab = 129280,
              .ffn_hidden = 18432, .kv_heads = 128, .moe = std::nullopt};
  m.mla = MlaSpec{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                  .v_head_dim = 128};
  PlanSpec p;
  const Flops without = hardware_flops_per_iteration(m, 2.0, p);
  p.recompute_modules.mla_up_proj = true;
  EXPECT_NEAR((hardware_flops_per_iteration(m, 2.0, p) - without).value(), 2.0 * 54525952.0 * 4096 * 61 * 2.0, 1.0);
}
