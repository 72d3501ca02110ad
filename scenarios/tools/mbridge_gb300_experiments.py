#!/usr/bin/env python3
"""Writes the scenario files of Megatron-Bridge's published GB300 NVL72 pretraining rows for the
dense Llama models (runs from outside ../shared/published; source "Megatron-Bridge on Blackwell").

Table: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @ 51885cf (tag v0.6.0),
sections '25.11 NeMo Container' (System: DGX-GB300) and '26.04 NeMo Container' (Model: LLAMA3_70B,
LLAMA3.1_405B, rows DGX-GB300). Each row gives GPUs, precision, GBS, MBS, sequence, FSDP, TP, PP,
CP, VP and tokens/s per GPU.

Recipes, read at the release's tag (what the table leaves out):
- 25.11 = tag v0.2.0: scripts/performance/configs/llama3/workload_base_configs.py
  LLAMA3_8B_GB300_FP8_CS_BASE_CONFIG (the FP8_MX one is the same object; full-iteration CUDA
  graphs; micro_batch_size 4, where the table prints MBS 2 with GA 8 = 128 / (8 x 2): the table's
  is taken, as the measured run's) and LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG (micro-batch 2,
  use_megatron_fsdp, cpu_offloading_num_layers 20, where GB200's preset offloads 40);
  llama3_llm_pretrain.py llama3_8b_gb300_config and llama3_70b_gb300_config are GB200's
  (fsdp_double_buffer, gradient-accumulation fusion off, suggested_communication_unit_size 800M).
  The 25.11 405B GB300 row (TP 2, PP 8, CP 2, VP 4 on 256 GPUs) matches no preset at v0.2.0-v0.2.2
  (LLAMA31_405B_GB300_FP8_CS_BASE_CONFIG is Megatron-FSDP at TP 2 on 128 GPUs): not written.
- 26.04 = tag v0.4.1: scripts/performance/configs/llama/llama3_workload_base_configs.py
  LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2 (GBS 256, micro-batch 2, Megatron-FSDP, 20 layers'
  activations offloaded) and _FP8_MX_V2 (GBS 256, PP 4, VP 5, TP 1); llama31_workload_base_configs.py
  LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2 (TP 4, PP 8, CP 1, VP 4, 256 GPUs, GBS 1536, no
  Megatron-FSDP, no offload) and _FP8_MX_V2 (TP 2, PP 8, CP 2, VP 4); llama3_llm_pretrain.py
  llama3_70b_pretrain_config_gb300 and llama31_llm_pretrain.py llama31_405b_pretrain_config_gb300
  are the GB200 functions (userbuffers TP overlap configs of B200, the FSDP settings above).
Everything else is the GB200 twin's (scenarios/experiments/mbridge2511-llama3-*-xgb200-*.yaml and
mbridge2604-*-xgb200-*.yaml, whose notes give the recipe reading): distributed optimizer with
overlapped bf16 gradient reduce and parameter gather, FP8 parameter gather, TE cross-entropy fusion,
cuDNN attention, no recompute, sequence parallelism where TP > 1, the 405B's embedding and loss
counted as pipeline layers (126 + 2 over 32 chunks: [3, 4 x 30, 3]).

The 25.11 8B rows (FP8 current scaling and MXFP8, one plan) are calibration cases: they pin blackwell_ultra_tensor_core_scale
(scenarios/calibration.yaml), as the DGX B200 8B rows pin B200 and GB200's; the others are predictions.

Usage: python3 scenarios/tools/mbridge_gb300_experiments.py
"""
from experiment_file import write_experiment

TABLE = ("github NVIDIA-NeMo/Megatron-Bridge: docs/performance-summary-archive.md @ 51885cf (tag v0.6.0), "
         "section '{rel} NeMo Container', Pre-Training Performance, {where}")
CLUSTER_NOTE = ("Cluster gb300-nvl72 (one 72-GPU NVLink domain per rack, one 800 Gb/s ConnectX-8 per GPU; "
                "{span}).")
CALIBRATION = {"mbridge2511-llama3-8b-8xgb300-fp8", "mbridge2511-llama3-8b-8xgb300-mxfp8"}

COMMON_TAIL = ["zero: 1", "dp_overlap: true", "param_gather_overlap: true", "fp8_param_gather: true",
               "framework: megatron-core", "cross_entropy_fusion: te", "attention: cudnn", "reduce_dtype: bf16"]
FSDP_PLAN = ["tp: 1", "pp: 1", "dp: 64", "micro_batch: 2", "recompute: none", "zero: 3", "dp_overlap: true",
             "fp8_param_gather: true", "gradient_accumulation_fusion: false",
             "offload: {optimizer: false, activations: 0.25}", "framework: megatron-core",
             "cross_entropy_fusion: te", "attention: cudnn", "reduce_dtype: bf16"]
L405_LAYERS = "stage_layers: [" + ", ".join(["3"] + ["4"] * 30 + ["3"]) + "]"


def training(gbs, scaling):
    return f"{{global_batch: {gbs}, dtype: fp8, fp8_scaling: {scaling}, optimizer: adam}}"


def row(name, model, gpus, gbs, scaling, plan, tps, rel, where, recipe, span):
    role = "calibration" if name in CALIBRATION else "prediction"
    precision = ("FP8 current scaling (Transformer Engine's Float8CurrentScaling, bf16_with_fp8_current_scaling_mixed)"
                 if scaling == "tensorwise" else
                 "MXFP8 (bf16_with_mxfp8_mixed: E4M3 with 32-element block scales, parameters gathered in bf16 "
                 "through the gradient buffer and quantized again on every rank)")
    notes = (f"{tps} tokens/s per GPU x {gpus} GPUs (release {rel}). Precision: {precision}. Recipe: {recipe} "
             "The rest as the GB200 twin of the same table (scenarios/tools/mbridge_gb300_experiments.py names the "
             f"files and the presets read). {CLUSTER_NOTE.format(span=span)} "
             + ("Calibration case: pins blackwell_ultra_tensor_core_scale (scenarios/calibration.yaml)."
                if role == "calibration" else "Prediction case."))
    measured = [f"role: {role}", f"tokens_per_s: {tps * gpus}",
                f"source: \"{TABLE.format(rel=rel, where=where)}, {tps} tokens/s/GPU\""]
    write_experiment(name, model, "gb300-nvl72", gpus, training(gbs, scaling), plan, measured, notes)


def main():
    dense_8b = ["tp: 1", "pp: 1", "dp: 8", "micro_batch: 2", "recompute: none"] + COMMON_TAIL
    r8 = ("v0.2.0 LLAMA3_8B_GB300_FP8_CS_BASE_CONFIG (the FP8_MX preset is the same object) and llama3_8b_gb300_config: "
          "no tensor parallelism, full-iteration CUDA graphs (not modelled: launch overhead is far below 1% of a "
          "2 x 8192-token micro-batch); the preset's micro_batch_size is 4, the table's MBS 2 (GA 8 = 128 / (8 x 2)) is "
          "taken as the measured run's.")
    where_8b = ("System: DGX-GB300, row LLAMA3_8B: 8 GPUs, FP8-CS (FP8-MX), GBS 128, MBS 2, sequence 8192, FSDP 0, "
                "TP 1, PP 1, CP 1, GA 8, 37556 (36108) tokens/s/GPU; the parenthesised MXFP8 figure for the MXFP8 row")
    row("mbridge2511-llama3-8b-8xgb300-fp8", "llama3.1-8b", 8, 128, "tensorwise", dense_8b, 37556, "25.11",
        where_8b, r8, "the 8 GPUs span two 4-GPU compute trays of one domain")
    row("mbridge2511-llama3-8b-8xgb300-mxfp8", "llama3.1-8b", 8, 128, "mxfp8", dense_8b, 36108, "25.11",
        where_8b, r8, "the 8 GPUs span two 4-GPU compute trays of one domain")

    r70_fsdp = ("{tag} {preset} (micro-batch 2, use_megatron_fsdp, cpu_offloading_num_layers 20: Transformer Engine's CPU "
                "offload of the first 20 of 80 layers' activations to the Grace CPUs, plan.offload.activations 0.25) and "
                "{fn} (fsdp_double_buffer, suggested_communication_unit_size 800M, gradient-accumulation fusion off): "
                "Megatron-FSDP over all 64 GPUs (plan.zero 3), two micro-batches per step (256 / (64 x 2)), every layer FP8 "
                "with FP8 parameter gather. Llama 3 70B is modelled by the Llama 3.1 70B file.")
    row("mbridge2511-llama3-70b-64xgb300-fsdp-fp8", "llama3.1-70b", 64, 256, "tensorwise", FSDP_PLAN, 4520, "25.11",
        "System: DGX-GB300, row LLAMA3_70B: 64 GPUs, FP8-CS, GBS 256, MBS 2, sequence 8192, FSDP 64, TP 1, PP 1, CP 1, "
        "VP 1, GA 2",
        r70_fsdp.format(tag="v0.2.0", preset="LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG", fn="llama3_70b_gb300_config"),
        "the 64 GPUs inside one domain")
    row("mbridge2604-llama3-70b-64xgb300-fsdp-fp8", "llama3.1-70b", 64, 256, "tensorwise", FSDP_PLAN, 5243, "26.04",
        "Model LLAMA3_70B, row DGX-GB300 FP8: 64 GPUs, GBS 256, MBS 2, sequence 8192, FSDP 64, TP 1, PP 1, CP 1, VP n/a",
        r70_fsdp.format(tag="v0.4.1", preset="LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2",
                        fn="llama3_70b_pretrain_config_gb300") +
        " The same plan as the 25.11 row (4520 tokens/s/GPU): the table moved 16% between releases.",
        "the 64 GPUs inside one domain")
    mx70 = ["tp: 1", "pp: 4", "dp: 16", "micro_batch: 1", "schedule: interleaved", "virtual_stages: 5",
            "recompute: none"] + COMMON_TAIL
    row("mbridge2604-llama3-70b-64xgb300-mxfp8", "llama3.1-70b", 64, 256, "mxfp8", mx70, 4742, "26.04",
        "Model LLAMA3_70B, row DGX-GB300 MXFP8: 64 GPUs, GBS 256, MBS 1, sequence 8192, FSDP 0, TP 1, PP 4, CP 1, VP 5",
        "v0.4.1 LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (GBS 256, micro-batch 1, PP 4, VP 5, no tensor parallelism where "
        "GB200's preset runs TP 2) and llama3_70b_pretrain_config_gb300: an even split, 4 layers a chunk; no TP overlap "
        "to run at TP 1. Llama 3 70B is modelled by the Llama 3.1 70B file.",
        "the 64 GPUs inside one domain")

    def l405(tp, cp):
        return [f"tp: {tp}", "pp: 8"] + ([f"cp: {cp}"] if cp > 1 else []) + [
            f"dp: {256 // (tp * 8 * cp)}", "micro_batch: 1", "schedule: interleaved", "virtual_stages: 4", L405_LAYERS,
            "recompute: none", "sequence_parallel: true", "tp_overlap: true"] + COMMON_TAIL
    r405 = ("v0.4.1 LLAMA31_405B_PRETRAIN_CONFIG_GB300_{p}_V2 ({shape}, 256 GPUs, GBS 1536, no Megatron-FSDP, no "
            "offload; GB200's runs PP 16) and llama31_405b_pretrain_config_gb300 (Transformer Engine userbuffers TP overlap "
            "userbuffers_{u}_b200_h16384_tp4_cp2_mbs1_seqlen8192), recipes/llama/llama3.py llama31_405b_pretrain_config "
            "(the embedding and the loss counted as pipeline layers: 126 + 2 = 128 over 32 chunks, stage_layers).")
    row("mbridge2604-llama3.1-405b-256xgb300-fp8", "llama3.1-405b", 256, 1536, "tensorwise", l405(4, 1),
        1036, "26.04",
        "Model LLAMA3.1_405B, row DGX-GB300 FP8: 256 GPUs, GBS 1536, MBS 1, sequence 8192, FSDP 0, TP 4, PP 8, CP 1, VP 4",
        r405.format(p="FP8_CS", shape="TP 4, PP 8, CP 1, VP 4", u="fp8"), "the 256 GPUs span four domains")
    row("mbridge2604-llama3.1-405b-256xgb300-mxfp8", "llama3.1-405b", 256, 1536, "mxfp8", l405(2, 2),
        968, "26.04",
        "Model LLAMA3.1_405B, row DGX-GB300 MXFP8: 256 GPUs, GBS 1536, MBS 1, sequence 8192, FSDP 0, TP 2, PP 8, CP 2, VP 4",
        r405.format(p="FP8_MX", shape="TP 2, PP 8, CP 2, VP 4", u="fp8"), "the 256 GPUs span four domains")


if __name__ == "__main__":
    main()
