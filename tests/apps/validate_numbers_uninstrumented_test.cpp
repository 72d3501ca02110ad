// foresight validate --json's numbers: the shared PyTorch bench rows within 10%, every source's
// error within its regression bound, and the same JSON whatever thread runs it; calibrate
// --published reproducing the bundled file, and simulate giving a TeraPipe experiment the slices
// validate gives it. Numbers only: the sanitizer pass leaves this binary out (a validation run
// takes about 290 s instrumented on CI's machine, the calibration fit 100 s, TeraPipe's slicing
// 36 s), while validate_cli_test (the whole library's validation) and calibration_fit_test take
// the same code through the sanitizers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "apps/cli/cli.hpp"
#include "core/scenario.hpp"
#include "planner/validation.hpp"
#include "sim/simgrid_engine.hpp"

namespace {
std::string run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli(args, out, err), 0) << err.str();
  return out.str();
}
}  // namespace

TEST(ValidateCli, PyTorchRowsOfTheSharedBenchWithinTenPercent) {
  // ../shared/bench/README.md, one H100 80GB HBM3, PyTorch 2.11 eager: 124M 329k, 350M 135.5k,
  // 1.3B 53.8k, 2.7B 25.8k tokens/s; torch.compile: 350M 169.9k, 1.3B 60.5k; the 1.3B eager run's
  // peak allocated memory 53.6 GiB, and the 350M eager run's 27.53 GiB (the same script on an H200,
  // reports/gpu-2026-11-28/run2-torch-baseline.jsonl). Each within 10% (the execution-model issue's
  // acceptance), as their own source.
  const auto j = nlohmann::json::parse(run({"validate", "--json"}));
  std::map<std::string, double> published = {{"gpt2-124m-local-h100", 329000}, {"gpt-350m-local-h100", 135500},
                                             {"gpt3-1.3b-local-h100", 53800},  {"gpt-2.7b-local-h100", 25800},
                                             {"gpt-350m-local-h100-compile", 169900},
                                             {"gpt3-1.3b-local-h100-compile", 60500}};
  int rows = 0, memory = 0;
  for (const auto& c : j["cases"]) {
    const std::string name = c["experiment"];
    if (!published.count(name)) continue;
    EXPECT_EQ(c["group"], "PyTorch on one H100 (shared/bench)");
    if (c["quantity"] == "tokens_per_s") {
      ++rows;
      EXPECT_EQ(c["published"].get<double>(), published[name]);
      EXPECT_NEAR(c["predicted"].get<double>() / published[name], 1.0, 0.10) << name;
    } else if (c["quantity"] == "peak_memory_GiB (allocated)") {
      ++memory;
      const std::map<std::string, double> peak = {{"gpt3-1.3b-local-h100", 53.6}, {"gpt-350m-local-h100", 27.53}};
      ASSERT_TRUE(peak.count(name)) << name << ": a memory row this test does not know";
      EXPECT_EQ(c["published"].get<double>(), peak.at(name)) << name;
      EXPECT_NEAR(c["predicted"].get<double>() / peak.at(name), 1.0, 0.10) << name;
    }
  }
  EXPECT_EQ(rows, 6);
  EXPECT_EQ(memory, 2);
}

// Regression guard for the validation issue. Its targets: MT-NLG each within 3%, SC21 Table 1
// MAPE <= 5% with none above 10%, TeraPipe latencies and speedups within 15%, DeepSpeed-MoE within
// 15%. Where a target is met the test holds it; where it is not yet met (reports/validation.md
// says which and why) the bound is the current error plus a small margin, so the errors cannot
// silently grow while the causes are worked on. Tighten a bound whenever a change improves it.
TEST(ValidateCli, ErrorsDoNotRegressPastTheirBounds) {
  const auto j = nlohmann::json::parse(run({"validate", "--json"}));
  struct Bound {
    double mape, max_abs;
  };
  const std::map<std::string, Bound> bounds = {
      // Its 8-GPU rows wait for the slowest of 8 GPUs since the device spread (+1.1..1.5 points).
      // Session 18: the A100 GEMMs' sweep-fitted ceiling, K term and tile choice put the forward
      // within 1.1% and the backward within 6.6% (the backward was +3..+10%).
      {"Korthikanti 2022 Table 4", {2.5, 7.0}},
      // Session 23: three fp16 rows of Megatron-LM's 2020-21 A100 stack (SC21 1.7B and 18B, the
      // 2020 table's 8B tp8) pin its GEMM and tensor-parallel all-reduce rates
      // (scenarios/calibration.yaml): 4.9% / 10.2% -> 1.4% / 4.2% over the other eight.
      // Session 41: NCCL rings of 2 and 4 GPUs at the bus bandwidth nccl-tests measures (0.79 /
      // 0.95 of the 8-GPU ring on A100): the 3.6B (tp 2) and 7.5B (tp 4) rows 0.5-1.7 points slower.
      {"Megatron-LM SC21 Table 1", {1.8, 4.7}},  // target 5 / 10 (met)
      // The two prediction points; the 280-node run and BLOOM pin the DeepSpeed pipeline engine's
      // slot overhead (scenarios/calibration.yaml). Target 5 / 5 (issue 22).
      // Session 44: Jean Zay's Omni-Path adapters at the rate NCCL measured on them (40.5 Gb/s) refit
      // the slot overhead 0.053 -> 0.049 s, with BLOOM and the 280-node run agreeing (fit rms 5.6% ->
      // 1.1%): 1.4% / 1.4% -> 2.1% / 3.5%.
      // Session 45: the tied embedding's first-to-last-stage all-reduce priced (fp32 under BLOOM's
      // BF16_Optimizer, 1.4 s of its step): BLOOM lends the slot overhead less, 0.0485 -> 0.0476 s
      // (fit rms 1.1% -> 0.16%): 2.4% / 3.8%.
      // Session 46: BLOOM's BF16_Optimizer fills its fp32 gradient buffer every micro-batch (18
      // bytes per parameter where DeepSpeed v0.5's bf16 ZeRO optimizer, MT-NLG's, adds in place: 6),
      // and its tied embedding's all-reduce alone runs in fp32: the slot overhead 0.0476 -> 0.0458 s
      // (fit rms 0.16% -> 2.1%, BLOOM +2.8%, MT-NLG-280 -0.8%): 3.3% / 4.6%.
      // Session 47: DeepSpeed's pipeline gradients sent as 1/t partitions (is_grad_partitioned, v0.5.4+)
      // instead of whole from every TP rank: the slot overhead 0.0458 -> 0.0509 s (fit rms 2.1% ->
      // 0.75%; MT-NLG-280 left out -10.5% -> +3.8%): 2.2% / 3.6%.
      {"MT-NLG (Smith et al. 2022)", {2.3, 3.7}},
      // Session 24: the 13B GPipe baseline (calibration) pins one GPU's socket share on the p3's
      // 25 Gb/s Ethernet (scenarios/calibration.yaml): 6.0% / 9.3% -> 4.4% / 8.3% over the other eight.
      // Session 40: 26 more rows from the paper's appendix tables (settings (6), (8), (10), the 13B
      // model at sequence 4096-8192, the uniform-slicing ablation of settings (8) and (9)) and the
      // settings (5) and (9) runs at the slicing TeraPipe printed: 4.4% / 8.3% -> 7.1% / 20.6%. The
      // ablation shows per-slice costs the model lacks under ~256 tokens (-14..-21% at 32-128
      // slices of 175B, -13/-21% at 8/16 slices of 44B); notes/status.md, session 40.
      // Session 41: TeraPipe's own kernels priced from its code (the in-place mask add,
      // half-to-float softmax and cast back over the scores, 34 bytes per score element where
      // Megatron-LM's fused softmax and dropout move 20; bias adds, cache copies, no dropout); the
      // socket share refits 0.86 -> 0.90: 6.7% / 19.1%.
      {"TeraPipe (Li et al. 2021)", {6.8, 19.2}},  // target 15 / 15
      // Since the 6.7B dense row runs micro-batch 2 (the ramp-up divisibility its script needs at 128 GPUs).
      // Session 18: the A100 GEMM figures make its TP8 GEMMs 1-2% faster (+42 -> +44%).
      // Session 24: Megatron-DeepSpeed runs Megatron-LM's fp16 TP all-reduces, so the 2020-21
      // stack's calibrated rates reach its A100 fp16 runs: 43.2% / 44.1% -> 37.3% / 41.4%.
      // Session 44: the slot overhead refitted on Jean Zay's measured network: 38.6% / 42.1%.
      // Session 45: the slot overhead 0.0485 -> 0.0476 s (the tied-embedding all-reduce): 38.8% / 42.2%.
      // Session 46: the slot overhead 0.0476 -> 0.0458 s (BLOOM's BF16_Optimizer accumulation
      // priced, which the slot term had carried): 39.3% / 42.5%.
      // Session 47: the slot overhead 0.0458 -> 0.0509 s (partitioned pipeline gradients): 38.0% / 41.7%.
      {"DeepSpeed-MoE (Rajbhandari et al. 2022)", {38.0, 41.8}},  // target 15 / 15
      // 23 prediction rows after the calibrated Triton-attention scale (three rows pin it).
      // Session 18: Transformer Engine's split-accumulation FP8 gradient GEMMs (1.15x) move its
      // FP8 rows 2-3 points slower (5.5 -> 5.6%).
      // Session 19: Hopper's persistent GEMMs run at half speed beside FSDP's gathers and
      // reduce-scatters (GPU figure persistent_gemm_grid; the rest of the compute at the SM share,
      // weighted by the layers' GEMM share): 5.6 -> 5.04%, the 512-GPU 1B/3B/7B and 8-GPU 13B rows
      // 4-6 points slower; the largest is the 30B seq-8192 row (+18.2%).
      // Session 25: three more 30B rows from the same table (outside ../shared/published): H100
      // seq 4096 -9%, A100-80GB seq 4096 -2%, A100-80GB seq 8192 +42% (the table's 30B seq-8192
      // rows are slow on both GPUs, not its attention: notes/research-llm-foundry.md). 5.0 -> 6.3%.
      // Session 30: FSDP1 gathers bf16 parameters, so no autocast weight cast forward, and casts
      // gradients only to a wider reduce dtype (the eager table's 6 + 6 bytes per parameter were
      // charged under FSDP as under DDP): the large H100 rows 1-5 points closer, the small rows
      // and the A100 rows 0.3-5 points further (the 30B seq-8192 A100 row +45%): 6.5%.
      // Then (an audit of what each framework is charged, session 30): MPT's own elementwise
      // traffic (bf16 LPLayerNorm and residual stream, no attention re-layout, flash-attn's fused
      // cross-entropy plus Composer's two training metrics), FSDP1's flat-gradient copy, the
      // gradient accumulation on the 1/k shard, and FlashAttention's Triton kernel at its own A100
      // figure (68 vs FlashAttention-2's 155 TFLOP/s at 2k): the A100 rows within -3..+6% but the
      // 70B 40GB row (+11%), the 30B seq-8192 A100 row +29%, the H100 small-model rows +9..+22%
      // (760M, a calibration case): 6.3%.
      {"llm-foundry MPT benchmarks (MosaicML, FSDP)", {6.4, 30.0}},
      // Session 49: IBM's fms-fsdp README benchmarks (foundation-model-stack/fms-fsdp @ 5e522b4 and
      // 3b1ce15, 2024; outside ../shared/published): Llama 2 7B-70B under FSDP1 on 128 A100 80GB
      // (400 Gb/s a node) and 96 H100 (800 Gb/s), eager, and the two compiled 7B rows, with the
      // fms-fsdp entry (FSDP1's flat parameters, bf16 reduction, the ibm-fms RoPE and loss),
      // predicted as added: 4.9% / 10.4% over 10 (the eager 7B rows +9..+10%, the 70B rows -5..-8%);
      // the log-softmax backward recounted (12 -> 10 bytes a logit): 4.9% / 10.5%.
      // Session 50: the A100's eager RMSNorm chain at its measured rate (eager_norm_efficiency
      // 0.70, Liger-Kernel's LlamaRMSNorm timings) and pow's backward recounted (three passes, 92
      // bytes a norm element backward, not 76): the A100 eager rows 1.7-3.2 points slower, the
      // H100 ones 0.4-1.2: 4.4% / 8.1% (the 70B H100 row -8.1% is the largest).
      // Session 51: eager PyTorch's passes with a broadcast or strided operand (the RoPE's product
      // and pair sum, the transpose and GQA copies) at the GPU file's eager_strided_efficiency
      // (A100 0.43, H100 SXM 0.54, Liger-Kernel's RoPE timings): 7B +7.3/+7.8 -> +4.0/+5.4%, 13B
      // +3.4/+0.9 -> +0.5/-1.1%, 34B and 70B 0.9-1.6 points slower: 4.07% / 9.0% (70B H100).
      // Session 65: FSDP1's predivide pass over each unsharded gradient before its reduce-scatter
      // (FrameworkTraits::fsdp1_reduce_passes): the rows 0.2-0.5 points slower, 4.14% / 9.35%.
      // Session 66: its torch.optim.AdamW with neither fused nor foreach set runs the foreach path
      // (80 bytes a parameter, not 28): the 7B HSDP rows 1-1.6 points slower, the 70B 0.1: 4.0% / 9.5%.
      {"IBM fms-fsdp Llama 2 benchmarks (FSDP1, 2024)", {4.1, 9.6}},
      // 27 prediction rows (four rows pin the Grand Teton clock and the rowwise FP8 GEMM speed); the
      // largest after session 18: the 128k/256k context-parallel rows (+30, +36%), the 8B TP8
      // rowwise FP8 rows (+15, +26%), the 70B TP8 tensorwise rows (-8, -10%) and the H200 rows
      // (+7, +8%). Session 16 loosened it from {13.5, 47} (GH100 ceiling 0.803 -> 0.72); session 17
      // tightened it (GEMM K term, re-layout copies, FP8 gathers, FlashAttention-2 for torchtitan's
      // SDPA). Session 18: FSDP2's copies on the compute stream (8.8 -> 8.2%, the Grand Teton clock
      // refitting 0.751 -> 0.769 moved the attention-bound CP rows to +31/+36%), GH100 GEMMs tiled
      // the fastest of three ways (8.6%), FP8 gradient GEMMs with split accumulation (8.4%).
      // Session 19: the persistent-GEMM overlap cost refits the Grand Teton clock 0.772 -> 0.781,
      // which moves the attention-bound CP rows to +32/+37% (MAPE 8.4%).
      // Session 20: the Dec 2024 405B tables join (pp 8 at torchtitan's defaults, 4D with CP);
      // PyTorch's SDPA context parallelism (repeated K/V, fp32 dK/dV ring, eager fp32 merges) moves
      // the 8B CP rows to +26/+31% and puts the 405B CP rows at +13/+14/+23%: 8.2% over 33.
      // Session 28: FSDP's float8 all-gather (plan.fp8_param_gather), which the two H200 rows
      // state, makes them faster still (+5.4 -> +7.8%, +6.6 -> +9.0%): 8.38% over 33.
      // Session 29: torchao's rowwise FP8 Linear priced from torchao's rowwise benchmark table
      // (gradient-GEMM rescaling and per-input traffic; the rowwise GEMM scale refits 0.647 ->
      // 0.847): the 8B TP8 rowwise rows +15.6 -> +6.2%, +24.6 -> +12.3%; 7.7% over 33. Then async
      // TP under rowwise hides only its reduce-scatters (pytorch#149990; the scale refits 0.916):
      // both 8B rowwise rows +8%, 7.66% over 33. The float8 TP plan's inputs cast on their sequence
      // shard before the FP8 gather: the 70B tensorwise rows 2 points closer, the 8B TP8 tensorwise
      // rows 3-4 points further (+7.4, +10.2%): 7.77%.
      // Session 30: FSDP2's copies were priced twice (the eager and compiled traffic tables' weight
      // entries and fsdp2_unit_copies); priced once, the Grand Teton clock refits 0.781 -> 0.758 and
      // the A100 rows move +3..+7 -> +6..+10%, the H200 rows +7.8/+9.0 -> +10.4/+11.6%: 8.0%.
      // Session 50: the A100's eager RMSNorm chain at its measured rate (eager_norm_efficiency
      // 0.70) and pow's backward recounted: the five April 2024 A100 rows +6..+10 -> +5..+7%; the
      // Grand Teton clock refits 0.759 -> 0.764: 7.4% over 33.
      // Session 51: the A100's eager strided passes (RoPE's complex multiply, the transpose and
      // repeat_kv copies) at eager_strided_efficiency 0.43: the April 2024 A100 rows +4.6..+6.9 ->
      // +3.8..+5.7%: 7.2% over 33 (the Grand Teton part has no such figure).
      // Session 65: the final norm on the rank's T / tp rows under sequence parallelism (the TP 8
      // rows a few hundredths of a point faster): 7.21%.
      // Session 66: the 2024 tables' foreach AdamW (80 bytes a parameter, not the fused 28;
      // torchtitan 157a12c and 9dec370): the t1 calibration rows 1-1.5 points slower, so the Grand
      // Teton clock refits 0.764 -> 0.774 and the other 2024-12 rows move faster (the CP rows
      // further fast): 7.46% / 29.5%.
      {"torchtitan (Meta, FSDP2)", {7.5, 29.6}},
      // Session 20: NeMo 24.07's DGX H100 FP8 table (Megatron-Core with gradient accumulation
      // fusion); the largest are the small models (GPT-3 5B +16%, 20B +10%, Llama 3 8B +9%).
      // Session 30: the rows now hold the numbers of the commit they cite (8e3d65dc, the table's
      // final version; they held its first, 4c73f776): GPT-3 5B +14.5 -> +10.2%, 4.6%.
      // Then Transformer Engine's FP8 sequence-parallel gathers (both ways, one byte) and its
      // LayerNormLinear's own FP8 output (no cast pass for QKV's and FC1's inputs): the large rows
      // 2-4 points faster (175B/128 +3.1%, Llama 2 70B -4.7%), GPT-3 5B +10.8%: 4.4%.
      // Then the H100's sustained clock under a long run (GPU file sustained_clock_scale, the
      // profile's own 30 s soak, 0.937): GPT-3 5B +10.8 -> +5.0%, the large rows 3-5 points
      // slower (Llama 2 70B -9.6%): 4.6%.
      // Session 34: FP8 GEMMs priced from the measured bf16 time at their shape times the FP8
      // roofline's speedup there (anchor_to_bf16_profile; before, the FP8 roofline alone, whose
      // waves and tiles the bf16 sweep does not bear out at split shapes): the large rows 2-4
      // points faster (175B/512 -6.2 -> -2.0%), the small ones 1-2 slower (Llama 2 13B -9.7%): 3.5%.
      // Session 35: the table's Nemotron-8B and 22B rows (squared ReLU; launcher yaml settings,
      // scenarios/tools/nemo_experiments.py) and Megatron-Core's fused cross-entropy (native where
      // the launcher yaml sets cross_entropy_loss_fusion: the Llama 3 and Nemotron rows): +2.7% and
      // -5.2%; 3.4% / 9.7% over 11. Nemotron-340B stays out (no committed config of its shape).
      // Session 39: the overlapped interleaved sends (the launcher yamls' overlap_p2p_comm true):
      // Llama 2 13B -9.7 -> -3.1%, Nemotron 22B -5.2 -> +0.9%: 1.8% / 4.5%.
      // Session 65: the embedding's backward zero-fill and its add into the main gradient: the
      // largest row (Llama 2 7B) -4.54 -> -4.68%.
      {"NeMo 24.07 on DGX H100 (Megatron-Core, FP8)", {1.5, 4.7}},
      // Session 21: Megatron-Bridge's Qwen3 MoE rows (Megatron-Core's folded EP, all-to-all
      // dispatcher, EP overlap, TE current scaling); the two 25.09 token-dropping rows pin NCCL's
      // all-to-all efficiency on H100, the two dropless EP-overlap rows predict (-6.5%, -12.1%).
      // Session 32: DeepSeek-V3 on 1024 H100s (25.09: MLA, MTP, DeepEP, EP overlap, the 'mL' last
      // chunk) added as a prediction at +13.6%: 7.6% / 10.5% -> 9.6% / 13.6%; then the 26.04.01
      // dense rows (Llama 3 70B on 64, 405B on 1024 H100s, FP8 current scaling, userbuffers TP
      // overlap) at -11.5% / -9.4%, the source renamed from "Megatron-Bridge MoE ...", and the MTP
      // projection's TP collectives (DeepSeek-V3 +13.4%): 9.9% / 13.4%.
      // Session 33: cuDNN's MLA attention speed on Hopper (cudnn_mla_attention_factor, cuDNN's own
      // H200 benchmark): DeepSeek-V3 +13.4 -> +11.6%: 9.6% / 11.6%.
      // Session 34: FP8 GEMMs anchored to the bf16 sweep (above): Llama 3.1 405B -9.4 -> -4.5%,
      // Llama 3 70B -10.9%, DeepSeek-V3 +12.1%: 8.8% / 12.1%.
      // Session 35: Transformer Engine's fused cross-entropy (cross_entropy_fusion_impl te, every
      // Megatron-Bridge perf run): DeepSeek-V3 +12.1 -> +17.2% (its two losses, MTP's and the
      // model's, leave the last stage), Llama 3 70B -10.9 -> -8.9%: 9.4% / 17.2%.
      // Session 38: its 25.09 and 25.11 Llama 3 8B rows on 8 H100s under Megatron-FSDP, predicted
      // as added at -3.5% / -11.5% (the 25.11 row recomputes 5 layers yet runs 2.6% faster): 8.8% /
      // 17.2% over 7.
      // Session 39: Megatron-Core's overlapped interleaved sends (overlap_p2p_comm, every recipe
      // here): the 26.04 rows -8.9 / -4.5 / -10.9 -> -5.6 / -1.9 / -13.8%, DeepSeek-V3 FP8 +17.2 ->
      // +20.1% (with the all-to-all efficiency refit 0.753 -> 0.708): 9.2% / 20.1%.
      // Session 47: GPT-OSS-120B (26.04.01, 64 H100, BF16, TP 1 PP 4 EP 8; from outside
      // ../shared/published) added with its FC2 bias loop priced: +38.9% (tokens/s), unexplained
      // beyond that (notes/research-gpt-oss.md): 12.9% / 38.9% over 8.
      // Session 64: MLA's latent down-projections on the rank's own tokens under sequence
      // parallelism (they had been priced on every token of the micro-batch, a bug): DeepSeek-V3
      // FP8 +18.9 -> +20.0%: 13.0% (13.0006) / 38.9%.
      // Session 65: the GEMM launch per expert of TE's grouped linear no longer added on top of the
      // H100 profile's times, which carry it (a double count; on the roofline it stays), and the
      // all-to-all efficiency refit 0.723 -> 0.707: GPT-OSS +38.9 -> +43.0%, DeepSeek-V3 FP8
      // +20.0 -> +20.5%: 13.9% / 43.0%.
      // Then Megatron-Core's DeepEP dispatch in bf16 under FP8 (FrameworkTraits::
      // deepep_fp8_dispatch; fused_a2a.py through core_v0.17): DeepSeek-V3 FP8 +20.5 -> +17.5%,
      // 13.3% / 43.0%.
      // Session 66: Transformer Engine's fused MoE permute (plan.moe_permute_fusion, on in every
      // bundled recipe but Grok-1) and the shared experts' blocking TP collectives (DeepSeek-V3 FP8:
      // moe_shared_expert_overlap off) with the all-to-all efficiency refit 0.708 -> 0.691:
      // DeepSeek-V3 FP8 +17.5 -> +16.4%, the Qwen3 235B rows -8.8 / -14.3 -> -10.2 / -15.7%,
      // GPT-OSS +43.0 -> +43.6%: 13.6% / 43.6%.
      {"Megatron-Bridge on DGX H100 (Megatron-Core)", {13.7, 43.7}},
      // Session 37: the same tables' Blackwell rows (25.09, 25.11; FP8 current scaling). The two
      // DGX B200 Llama 3 8B rows pin blackwell_tensor_core_scale (0.707: the GPU files' burst,
      // best-shape figures were 32-35% fast); the Llama 3.1 405B rows (TP 4, PP 8, CP 2, VP 8 on
      // 128 B200s) predict at -1.9% / -1.5%, the GB200 Llama 3 8B rows at +1.7% / +1.2%.
      // Session 38: the Megatron-FSDP rows on GB200 NVL72 with activations offloaded to the Grace
      // CPUs (Transformer Engine's windowed handler over NVLink-C2C): Llama 3 70B on 64 (40 of 80
      // layers offloaded) 25.09 +6.9%, 25.11 -2.1%; Llama 3.1 405B at TP 2 on 128 (95 of 126)
      // 25.09 +9.0%, predicted as added: 3.5% / 9.0% over 7.
      // Session 39: Transformer Engine's MXFP8 recipe. The MXFP8 twins of the 8B B200 rows pin
      // mxfp8_gemm_scale (0.922); as added, the twins of the GB200 8B rows +3.6% / +4.1%, of the
      // B200 405B rows -1.9% / -4.2%; 26.04's GB200 rows (v0.4.1 recipes) Llama 3 70B MXFP8 at TP 2
      // PP 4 VP 5 -6.7%, Llama 3.1 405B at TP 4 PP 16 in FP8 (VP 4) -9.9% and MXFP8 (VP 8, the
      // embedding and the loss alone in the first and last chunks) -10.7%; 25.09's GB200 MXFP8 rows
      // 70B -1.2% and 405B (the B200 row's plan, measured 7% slower than on B200) +15.9%: 5.2% /
      // 15.9% over 16.
      // Then the overlapped interleaved sends: 4.8% / 17.7% (the 25.09 GB200 405B MXFP8 row).
      // Session 40: GB300 NVL72 (scenarios/gpus/gb300.yaml: GB200's figures with the GEMM and
      // attention speed ratios aiconfigurator's sweeps measure, 1.117 and 1.167; its 25.11 8B FP8 and
      // MXFP8 rows pin blackwell_ultra_tensor_core_scale, 0.76 against B200/GB200's 0.71, and co-pin
      // MXFP8's GEMM speed, 0.922 -> 0.913). Predicted as added: 25.11 70B Megatron-FSDP +9.8%
      // (26.04's same plan, measured 16% faster, -5.3%), 26.04 70B MXFP8 at TP 1 PP 4 VP 5 -7.0%,
      // 405B at PP 8 in FP8 -14.5% and MXFP8 (CP 2) -10.9%: 6.0% / 17.2% over 21.
      // Session 41: 2- and 4-GPU NVLink groups at their measured share of the 8-GPU rate (B200/B300
      // nccl-tests 0.69 / 0.91; GB200 NVL72's 2- and 4-GPU rings measure the same): 6.1% / 16.7%.
      // Session 65: the final norm on the rank's T / tp rows under sequence parallelism: the
      // largest (405B MXFP8 on GB200) +16.80 -> +16.81%; then the embedding's backward zero-fill
      // and its add into the main gradient (the refit Blackwell scale): +16.92%.
      {"Megatron-Bridge on Blackwell (DGX B200, GB200 and GB300 NVL72)", {6.2, 17.0}},
      // Session 33: NVIDIA's DGX Cloud benchmarking recipes (dgxc-benchmarking v25.05.05, NeMo
      // 25.04.01): DeepSeek-V3 in BF16 on 512 and 1024 H100s (alltoall dispatcher, token dropping at
      // capacity 1.0, MTP, uneven pipeline, no EP overlap), predicted as they were added at +10.3% and
      // +13.2%: DeepSeek-V3 on H100 is as fast in BF16 without DeepEP as in FP8 with it. Then
      // cuDNN's MLA attention speed: +9.3% / +12.4%. Then the same tag's Llama 3.1 405B (BF16, FP8
      // delayed scaling; TP 8, PP 8, CP 2, VP 8 on 512) and Llama 4 Maverick (BF16; TP 4, EP 128,
      // ETP 4, token dropping) rows, predicted as added at -0.9%, -4.9%, +3.5%: 6.2% / 12.4% over 5.
      // Then Grok-1 314B as NeMo builds it (Mixtral-style, 8 experts of 32768, top 2; TP 4, PP 8,
      // CP 2, EP 8, VP 8), predicted as added at -8.4%: 6.6% / 12.4% over 6.
      // Session 34: FP8 GEMMs anchored to the bf16 sweep (above): Llama 3.1 405B FP8 -4.9 -> +0.2%;
      // 5.7% / 11.9%.
      // Session 35: the same tag's Nemotron-4 15B (TP 2, 16 GPUs) and 340B (TP 8, PP 8, VP 12, 256
      // GPUs) in BF16 and FP8, predicted as added at -0.0 / +1.5% and -2.7 / -3.5%; its Grok-1 FP8
      // row at +9.3%; v25.08.02's DeepSeek-V3 BF16 on 1024 H100s (NeMo 25.07: DeepEP, dropless,
      // TP 1, PP 8, VP 2, mla_up_proj/mlp/moe recomputed; one logged example run) at +0.1%:
      // 4.3% / 11.9% over 12.
      // Then the NeMo 2.0 performance scripts' fused cross-entropy (te): DeepSeek-V3 BF16 +8.8 /
      // +11.9 -> +9.7 / +15.5%, Grok-1 FP8 +11.4%: 5.1% / 15.5%.
      // Session 39: the overlapped interleaved sends (NeMo 2.0's MegatronCommOverlapCallback sets
      // overlap_p2p_comm for VP > 1): DeepSeek-V3 +15.5 / +9.7 -> +12.0 / +6.2%, Nemotron-4 340B
      // -2.0 / -2.6 -> -0.4 / -0.1%, Grok-1 FP8 +11.4 -> +15.9%: 4.5% / 15.9%.
      // Session 41: delayed scaling's per-chunk amax all-reduce over tp x cp x dp (TE v1.11):
      // the FP8 rows at scale 0.3-2 points slower (GPT-3 175B on 2048 GPUs +11.1 -> +9.1%).
      {"DGX Cloud benchmarking recipes on H100 (NeMo 2.0)", {4.2, 14.9}},
      // Session 34: the same repository's tag v24.11.1 (NeMo 24.09, NeMo 1.0 with Megatron-Core):
      // Nemotron-4 15B (TP 4, 16 and 1024 GPUs) and 340B (TP 8, PP 8, VP 12, selective recompute on
      // FlashAttention-2, 128 and 1024 GPUs), BF16 and FP8, once squared ReLU could be written down,
      // predicted as added at -1.1 / -0.2 / +0.5 / +0.5% (15B) and -4.3 / -4.2 / -11.1 / -8.1% (340B):
      // 3.8% / 11.1%. Then FP8 GEMMs anchored to the bf16 sweep (above): 340B FP8 -5.0 / -1.9%: 2.2% / 5.0%.
      // Then the 340B recipe's bf16 optimizer state (training.optimizer_state_dtype; without it the
      // memory model called the run out of memory): 2.1% / 4.6%. Then the same tag's Llama 3.1 8B
      // (TP 1, CP 2, 8 GPUs) and 70B (TP 4, PP 4, CP 2, VP 5, 64 GPUs) rows, predicted as added at
      // +2.2 / +3.7% (8B BF16 / FP8) and +3.7 / +10.0% (70B; +5.0% for its FP8 row without the FP8
      // anchor, so that change does not help every row): 3.0% / 10.0% over 12.
      // Session 35: the same tag's GPT-3 175B (NeMo 24.05: TP 4, PP 8, VP 12, FlashAttention-2,
      // dropout 0.1) on 128 and 2048 GPUs and Llama 3.1 405B as its recipe builds it (16 KV groups,
      // GPT-2 vocabulary; TP 8, PP 9, CP 2, VP 7) on 576 and 2304, BF16 and FP8, predicted as added
      // at +1.4 / +0.6 / +1.4 / +4.9% (175B) and -4.1 / -3.9 / -2.3 / +4.9% (405B): 3.0% / 10.0% over 20.
      // Then the NeMo 1.0 yamls' cross_entropy_loss_fusion (native; not in NeMo 24.05's Megatron-Core
      // 0.7, so not the GPT-3 rows): 3.2% / 10.6%.
      // Session 39: the overlapped interleaved sends (every yaml here sets overlap_p2p_comm; the
      // Nemotron-4 340B rows through configure.sh): GPT-3 175B +1.4 / +0.6 / +1.4 / +4.9 -> +5.6 /
      // +6.9 / +5.6 / +11.4%, Llama 3.1 70B FP8 +10.6 -> +12.8%, Nemotron-4 340B -3.9 .. -1.4 ->
      // -2.3 .. +0.9%: 4.0% / 12.8%.
      {"DGX Cloud benchmarking recipes on H100 (NeMo 24.05 and 24.09, 2024)", {3.7, 12.3}},
      // Session 21: Korthikanti's Table 5 (whole iterations, Selene; +8.1% the 1T row at 1F1B with
      // pp 64) and the Megatron-LM repository's 2020 scaling table (V100 within 4.4%; the A100 rows
      // of the first A100 software 4-11% slower than predicted).
      {"Korthikanti 2022 Table 5 (end-to-end)", {3.9, 8.4}},
      // Session 23: the 2020-21 stack's calibrated TP all-reduce rate: 6.6% / 11.4% -> 3.8% / 7.9%
      // (the dp 128 rows of tp 1-4 remain 5-8% fast).
      {"Megatron-LM repository scaling table (2020)", {3.2, 6.1}},
      // Session 23: the README's GPT-3 175B example (1024 A100s, 2021): -0.6% (predicted before
      // the calibration above at -6%).
      {"Megatron-LM README GPT-3 175B example (2021)", {2.0, 2.0}},
      // Session 24: Megatron-Core r0.8.0's weak-scaling table (NVIDIA/Megatron-LM README, 2024-07,
      // H100, 1.7B-462B), predicted as it was added: the 1.7B and 7.1B rows run 23% and 15% slower
      // than predicted (with the loss priced pass by pass), the 32B row 34% faster (its data-parallel
      // reduce-scatter, which the model leaves 0.3 s exposed at micro-batch 1), the pipelined rows
      // within -11..0%.
      // Session 25: the PP1 rows at micro-batch 4, as NVIDIA's gpt3_15b_8t_release config of that
      // release runs (changed after the errors were seen): 9.1%, largest the 1.7B row (-26%).
      {"Megatron-Core r0.8 README weak scaling (H100, 2024)", {9.2, 26.0}},
      // Session 21: the Azure + DeepSpeed ZeRO-3 runs (2022, DeepSpeed 0.6.2, up to 1024 A100s):
      // predicted 13-31% fast with DeepSpeed's module-by-module gathers, bucketed reduce-scatters,
      // copies, reuse and persistent re-gathers priced; the rest unexplained (notes/status.md).
      // Session 22: v0.6.2's communication is not overlapped (FrameworkTraits::zero3_prefetch, from
      // the blog's micro-batch sweep): 5-15% fast, 9.0%.
      // Session 24: Megatron-LM's fp32 cross-entropy priced pass by pass puts the 2020-21 stack's
      // fitted GEMM rate at 1, so these fp16 DeepSpeed runs keep their 9.0%.
      // Session 30: ZeRO-3 adds micro-batch gradients into the rank's partition only (DeepSpeed
      // stage3 __partition_grads), none at one micro-batch: the five rows 0.6-0.9 points faster.
      // Session 65: a weight gradient bigger than reduce_bucket_size (9e7 here) reduce-scattered
      // alone and whole, as stage3.py does, not in bucket-sized pieces each paying 1024 ranks' ring
      // latency (FrameworkTraits::zero3_large_gradients_alone): 1.3-6.8 points faster, 14.7% /
      // 22.7%. The agreement had rested on that over-charge; what the runs spend beyond the model
      // is unexplained (notes/status.md, session 65).
      {"DeepSpeed ZeRO-3 on Azure A100 (2022)", {14.8, 22.8}},
      // Session 48: the ZeRO++ blog's ZeRO-3 baselines (microsoft/DeepSpeed blogs/zeropp, 2023; 18B
      // on 384 V100s of 24 DGX-2 nodes at 1, 2, 4 and 8 x 100 Gb/s a node, 1K and 2K tokens a GPU)
      // and the ZeRO++ tutorial's 64-GPU log, with DeepSpeed 2023's complete prefetch trace
      // (plan.zero3_prefetch), predicted as added (in time): the tutorial row +4.5%, the 384-GPU rows
      // too slow on one link (+14..+16%) and too fast on four and eight links (-8..-19%). Then the
      // reuse distance walked as DeepSpeed walks it (the rest of the forward, then the backward up
      // to the layer, a recomputed layer twice): the 18B keeps one layer gathered, not two; the
      // tutorial row +5.2%, 12.2% / 18.5%.
      // Session 65: whole weight gradients reduced alone (FrameworkTraits::zero3_large_gradients_
      // alone) and a lone weight gathered in place under the complete trace (zero3_lone_gathers_
      // in_place): the one-link rows +16.8/+14.6 -> +0.5/-0.6%, the tutorial +5.2 -> -2.7% (its
      // logged backward, 6.46 s, is now met), the 2-8 link rows -14..-34% (a cost of about 2 s a
      // step that the communication-bound rows hide is missing): 16.6% / 34.4%.
      {"DeepSpeed ZeRO-3 on DGX-2 V100 (ZeRO++ baselines, 2023)", {16.7, 34.5}},
      // Session 26: GPT-NeoX-20B (Black et al. 2022; outside ../shared/published), 96 A100-40GB,
      // DeepSpeed's pipeline engine at TP 2 x PP 4 x DP 12, fp16, ZeRO-1: predicted as it was added
      // at -9.4% (its 117 TFLOP/s restated as 43.84 s with GPT-NeoX's own FLOP count). Session 41:
      // its tp 2 all-reduces at the 2-GPU ring's measured bus bandwidth, -8.9%.
      // Session 44: the slot overhead refitted on Jean Zay's measured network: -9.3%.
      // Session 45: the slot overhead 0.0485 -> 0.0476 s (the tied-embedding all-reduce): -9.4%.
      // Session 46: the slot overhead 0.0476 -> 0.0458 s (BLOOM's BF16_Optimizer accumulation
      // priced): -9.5%. Session 47: the slot overhead 0.0509 s (DeepSpeed's partitioned pipeline
      // gradients priced), and its own DeeperSpeed (eb7f5cff, before PR #1407) written down as sending
      // the whole gradient from both TP ranks (plan.partitioned_pipe_grads false): -9.1%.
      {"GPT-NeoX-20B (Black et al. 2022)", {9.2, 9.2}},
      // Session 44: GLM-130B (Zeng et al. 2022; THUDM/GLM-130B's training notes; outside
      // ../shared/published), 96 DGX-A100 40GB, DeepSpeed 0.6.1's pipeline engine at TP 4 x PP 8 x
      // DP 24, micro-batch 1, fp16, full recompute, the embeddings counted as layers in the
      // partition: the notes' speed tests at 176 and 256 micro-batches a pipeline (88.5 and 122.5 s)
      // predicted as added at -8.4% and -5.0%; with the slot overhead refitted on Jean Zay's measured
      // network (same session) -9.4% and -6.0%. Session 45: the slot overhead 0.0485 -> 0.0476 s
      // (the tied-embedding all-reduce): -9.5% / -6.2%. Session 46: the slot overhead 0.0476 ->
      // 0.0458 s (BLOOM's BF16_Optimizer accumulation priced): -9.9% / -6.5%. Session 47: its
      // pipeline gradients sent as 1/t partitions, the slot overhead 0.0509 s: -9.1% / -5.8%.
      {"GLM-130B (Zeng et al. 2022)", {7.5, 9.2}},
      // Session 46: BigScience's topology benchmarks for BLOOM's 176B on the same 48 Jean Zay nodes
      // (bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md; outside
      // ../shared/published): 34 plans from 02-25 on (TP 1-8, PP 2-48, DP 4-24, micro-batch 1-6,
      // fp16 and bf16, 64 heads), single 2nd-iteration readings, predicted as added at 6.4% /
      // 17.8%. The shallow pipelines run slower and the deep ones faster than the slot overhead
      // (calibrated per micro-batch and stage on BLOOM and MT-NLG) lets them: PP 2 -12/-13%,
      // PP 24-48 +5..+16%. Then the fork's softmax as it ran (plan.fused_softmax false where its
      // kernel check of that month failed: TP 8 at micro-batch 1, 2, 6): 5.7% / 17.8%. Then the
      // 02-26 and 02-28 head-count rows with 16-byte head widths (96-128 heads; 104 heads at TP 4 is
      // the same fallback, -3.2%): 5.2% / 17.8% over 44. Then BLOOM's BF16_Optimizer accumulation
      // (plan.bf16_optimizer on the 16 bf16 rows, 2-4 points slower) and the slot overhead it
      // refits (0.0458 s): 4.9% / 17.9%.
      // Session 47: pipeline gradients sent as 1/t partitions, as DeepSpeed has since v0.5.4 (the TP 8
      // PP 12 rows +9 -> +1..+3%), the slot overhead 0.0509 s: 4.5% / 21.4% (the largest, the
      // inconsistent GBS-1568 TP 8 PP 6 reading, -17.9 -> -21.4%).
      {"BigScience 176B topology benchmarks on Jean Zay (2022)", {4.6, 21.5}},
      // Session 31: DeepSeek-V3's pretraining on 2,048 H800s (../shared/published/modern.yaml; a
      // whole-run average of GPU hours per trillion tokens), written down once DualPipe, DeepEP-style
      // dispatch with node-limited routing, recomputed modules and FP8-cached Linear inputs were
      // modelled: predicted as it was added at +9.7%.
      // Session 42: its fine-grained FP8 written down as such (fp8_scaling blockwise: split
      // accumulation in every GEMM, the cast passes its report describes, weights quantized once
      // per step) instead of the tensorwise stand-in, whose torchao-style casts of a dense layer's
      // weights every micro-batch had been most of the difference: +8.9 -> +14.9%.
      {"DeepSeek-V3 report (H800, DualPipe, FP8)", {15.0, 15.0}},
  };
  int seen = 0;
  for (const auto& g : j["groups"]) {
    const auto it = bounds.find(g["group"].get<std::string>());
    if (it == bounds.end()) continue;
    ++seen;
    EXPECT_LE(g["mape_pct"].get<double>(), it->second.mape) << it->first;
    EXPECT_LE(g["max_abs_pct"].get<double>(), it->second.max_abs) << it->first;
  }
  EXPECT_EQ(seen, int(bounds.size()));
  // The headline counts prediction cases only; calibration cases are reported apart, with their
  // leave-one-out errors.
  int calibration = 0;
  for (const auto& c : j["cases"])
    if (c["role"] == "calibration" && !c["quantity"].get<std::string>().starts_with("peak_memory") &&
        !c["quantity"].get<std::string>().starts_with("tflops")) {
      ++calibration;
      EXPECT_TRUE(c.contains("left_out_error_pct")) << c["experiment"];
    }
  EXPECT_EQ(j["calibration"]["cases"].get<int>(), calibration);
  EXPECT_EQ(j["leave_one_out"]["cases"].get<int>(), calibration);
  // The refits repeat the bundled fit, which the analytic engine made (calibration.yaml fitted_with).
  EXPECT_EQ(j["leave_one_out"]["refit_engine"], "analytic");
  // Issue 22's leave-one-out target (met; a parameter pinned by one case, as the socket share by
  // TeraPipe's 13B baseline, leaves that case at the uncalibrated model when it is left out).
  EXPECT_LE(j["leave_one_out"]["mape_pct"].get<double>(), 7.0);
  int predictions = 0;
  for (const auto& g : j["groups"])
    if (g["group"] != "overall") predictions += g["cases"].get<int>();
  EXPECT_EQ(j["groups"].back()["cases"].get<int>(), predictions);
  // The TeraPipe 13B, 44B and 175B runs at the slicing TeraPipe printed, and their baselines, meet
  // the 15% target; hold them to it. Not yet met: the uniform-slicing ablation (fine slices cost
  // more than modelled) and the runs whose slices Foresight's planner chooses (it slices finer than
  // TeraPipe did, for the same reason; the 13B sequence-8192 run -15.2%): held to 21%.
  const std::set<std::string> planner_sliced = {"terapipe-gpt3-13b-s4096-p3-terapipe", "terapipe-gpt3-13b-s6144-p3-terapipe",
                                                "terapipe-gpt3-13b-s8192-p3-terapipe", "terapipe-gpt3-175b-p3-s10-terapipe",
                                                "terapipe-gpt3-44b-p3-s6-terapipe"};
  int terapipe_rows = 0;
  for (const auto& c : j["cases"]) {
    const std::string name = c["experiment"].get<std::string>();
    if (name.starts_with("terapipe-gpt3-13b") || name.starts_with("terapipe-gpt3-44b") || name.starts_with("terapipe-gpt3-175b")) {
      ++terapipe_rows;
      const bool open = name.find("-uniform") != std::string::npos || planner_sliced.contains(name);
      EXPECT_LE(std::abs(c["error_pct"].get<double>()), open ? 21.0 : 15.0) << c["experiment"] << " " << c["quantity"];
    }
  }
  EXPECT_EQ(terapipe_rows, 33);
}

TEST(Determinism, ValidateJsonIsByteIdenticalInAnyThread) {
  // validate runs single-threaded, but the fast engine keeps per-thread scratch between plans: a run
  // in a fresh thread (fresh scratch) must match a run in this thread after a simulation has left
  // its scratch here.
  std::string fresh;
  std::thread([&] { fresh = run({"validate", "--json"}); }).join();
  run({"simulate", "sc21-table1-145b", "--json"});  // leave this thread's scratch in use
  EXPECT_EQ(fresh, run({"validate", "--json"}));
}

TEST(SimulateCli, TeraPipeExperimentGetsTheSlicesValidateUses) {
  // terapipe-gpt3-13b-s4096-p3-terapipe leaves token_slices empty: simulate must run it with the
  // planner's slicing, as validate does, not as one whole-sequence slice (the GPipe baseline).
  const auto sim = nlohmann::json::parse(run({"simulate", "terapipe-gpt3-13b-s4096-p3-terapipe", "--json"}));
  const auto baseline = nlohmann::json::parse(run({"simulate", "terapipe-gpt3-13b-s4096-p3-gpipe", "--json"}));
  // What validate predicts for it, from a scenario folder holding that experiment alone (the whole
  // library's validation takes most of a minute under the sanitizers).
  namespace fs = std::filesystem;
  const fs::path src = foresight::scenarios_dir();
  const fs::path root = fs::path(::testing::TempDir()) / "terapipe-only";
  for (const char* d : {"experiments", "models", "clusters"}) fs::create_directories(root / d);
  for (const char* f : {"experiments/terapipe-gpt3-13b-s4096-p3-terapipe.yaml", "models/terapipe-gpt3-13b-s4096.yaml",
                        "clusters/aws-p3-16xlarge.yaml"})
    fs::copy_file(src / f, root / f, fs::copy_options::overwrite_existing);
  const auto report = foresight::planner::validate_all(root.string(), foresight::sim::EngineKind::analytic, {}, nullptr, false);
  const auto val = foresight::planner::validation_json(report, foresight::sim::EngineKind::analytic);
  double validated = 0;
  for (const auto& c : val["cases"])
    if (c["experiment"] == "terapipe-gpt3-13b-s4096-p3-terapipe" && c["quantity"] == "iteration_s") validated = c["predicted"];
  ASSERT_GT(validated, 0.0);
  EXPECT_DOUBLE_EQ(sim["iteration_s"].get<double>(), validated);
  EXPECT_LT(sim["iteration_s"].get<double>(), baseline["iteration_s"].get<double>());
  const std::string text = run({"simulate", "terapipe-gpt3-13b-s4096-p3-terapipe"});
  EXPECT_NE(text.find("token slices:"), std::string::npos) << text;
}

TEST(CalibrateCli, PublishedFitReproducesTheBundledFileByteForByte) {
  // scenarios/calibration.yaml is the fit's output: fitting again from its declarations on the
  // calibration cases writes the same bytes.
  const std::string tmp = (std::filesystem::temp_directory_path() / ("foresight_calibration_refit_" + std::to_string(::getpid()) + ".yaml")).string();
  const std::string printed = run({"calibrate", "--published", "--out", tmp});
  EXPECT_NE(printed.find("deepspeed_v05_slot_overhead"), std::string::npos);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  EXPECT_EQ(slurp(tmp), slurp(foresight::scenarios_dir() + "/calibration.yaml"));
  std::filesystem::remove(tmp);
}
