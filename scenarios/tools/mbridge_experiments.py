#!/usr/bin/env python3
"""Writes the scenario files of NVIDIA Megatron-Bridge's published DGX-H100 pretraining rows for
Mixture-of-Experts models (Megatron-Core with Transformer Engine, token all-to-all dispatcher):
runs from outside ../shared/published, cases of the source "Megatron-Bridge on DGX H100
(Megatron-Core)": the two 25.09 rows calibration cases (CALIBRATION below), the others predictions. notes/research-megatron-bridge-h100.md lists every row and the
recipe files read; notes/research-mcore-moe.md what the Megatron-Core versions run.

Tables: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ fa0315ae2 (25.09, 2025-10-10)
and docs/performance-summary-archive.md @ 067f987 (25.11 and 26.04.01). Each gives GPUs, GBS, MBS,
sequence, TP/PP/CP/VP/EP and tokens/s per GPU. Recipe settings the tables leave out, common to
all rows (Megatron-Bridge perf scripts, set_common_perf_overrides): distributed optimizer with
overlapped gradient reduce and parameter gather, gradients reduced in bf16 (grad_reduce_in_fp32
False), Transformer Engine layers, fused RoPE and TE cross-entropy, no activation recompute for
these models, no CUDA graphs; the Qwen3 MoE providers: grouped GEMM, fused permute and router,
aux-loss 1e-3, forced load balancing (moe_router_force_load_balancing), expert tensor parallelism
1 (Qwen3-235B's TP 2 folded into ep 32), and the embedding and loss counted as pipeline layers
(94 + 2 = 96 layers in 32 virtual stages of 3).

Per release:
  - 25.09 (MB v0.1.0rc3, Megatron-Core 0.14, TE 2.7): token dropping with capacity factor 1.0,
    padded to capacity (apply_moe_token_drop); no EP all-to-all overlap; TP-communication overlap
    on (userbuffers). FP8 is inferred (the table has no precision column; its footnote gives FP8
    block-scaling figures in parentheses, and the same Llama rows read FP8-CS in 25.11): current
    scaling, as every H100 FP8 preset of Megatron-Bridge.
  - 25.11 (MB v0.2.0, Megatron-Core 0.15, TE 2.9) and 26.04.01 (MB v0.4.x, Megatron-Core 0.17, TE
    2.14): dropless routing, EP all-to-all overlap with delayed weight gradients
    (overlap_moe_expert_parallel_comm, delay_wgrad_compute), TP-communication overlap off, FP8
    current scaling (bf16_with_fp8_current_scaling_mixed).
Rows left out: Qwen3-30B-A3B 25.11 and 26.02 (table and recipe disagree on VP, MBS or EP),
Qwen3-30B-A3B 26.x (HybridEP dispatcher), GPT-OSS-120B (selective recompute of the layer norms
and the MoE activation, not modelled then; attention sinks and sliding windows), Nemotron-3-Nano
(Mamba layers). Written by hand, not by this script (session 32): the 25.09 DeepSeek-V3 row
(DeepEP, multi-token prediction, its 'mL' layout) and the 26.04.01 dense Llama 3 70B and 405B
rows (scenarios/experiments/mbridge2509-deepseek-v3-*.yaml, mbridge2604-llama3*.yaml).

Usage: python3 scenarios/tools/mbridge_experiments.py
"""
import os

from experiment_file import write_experiment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

S_2509 = ("github NVIDIA-NeMo/Megatron-Bridge: docs/performance-summary.md @ fa0315ae2 (2025-10-10), "
          "release 25.09, DGX-H100 table")
S_ARCHIVE = ("github NVIDIA-NeMo/Megatron-Bridge: docs/performance-summary-archive.md @ 067f987, "
             "release {rel}, DGX-H100 table")

# The token-dropping variants (capacity factor 1.0, padded) as model files of their own.
CF1_MODELS = {
    "qwen3-30b-a3b": "qwen3-30b-a3b-cf1",
    "qwen3-235b-a22b": "qwen3-235b-a22b-cf1",
}

# name, model, GPUs, GBS, MBS, TP, PP, VP, EP, tokens/s/GPU, release, token drop, EP overlap, TP overlap, source
ROWS = [
    ("mbridge2509-qwen3-30b-a3b-16xh100-fp8", "qwen3-30b-a3b", 16, 512, 2, 1, 2, 24, 8, 10494, "25.09", True, False,
     False, S_2509),
    ("mbridge2509-qwen3-235b-a22b-256xh100-fp8", "qwen3-235b-a22b", 256, 2048, 1, 2, 8, 4, 32, 1204, "25.09", True, False,
     True, S_2509),
    ("mbridge2511-qwen3-235b-a22b-256xh100-fp8", "qwen3-235b-a22b", 256, 2048, 1, 2, 8, 4, 32, 1575, "25.11", False, True,
     False, S_ARCHIVE.format(rel="25.11")),
    ("mbridge2604-qwen3-235b-a22b-256xh100-fp8", "qwen3-235b-a22b", 256, 8192, 1, 2, 8, 4, 32, 1712, "26.04.01", False,
     True, False, S_ARCHIVE.format(rel="26.04.01")),
]


def write_cf1_models():
    for base, name in CF1_MODELS.items():
        with open(os.path.join(ROOT, "models", base + ".yaml")) as f:
            text = f.read()
        assert "dropless: true" in text, base
        text = text.replace(f"name: {base}", f"name: {name}", 1)
        text = text.replace("dropless: true", "capacity_factor: 1.0")
        text = text.replace("  notes: \"", "  notes: \"Token-dropping variant: expert capacity 1.0 x tokens x top_k / "
                            "experts, every expert padded to it (Megatron-Core moe_expert_capacity_factor 1.0 with "
                            "moe_pad_expert_input_to_capacity). ", 1)
        with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
            f.write(text)


def stage_layers(layers, pp, vp):
    """Transformer layers per virtual stage in stage order with the embedding and the loss counted
    as one layer each (account_for_embedding/loss_in_pipeline_split): the first chunk and the last
    hold one layer less than the others."""
    chunks = pp * vp
    per, rest = divmod(layers + 2, chunks)
    assert rest == 0, (layers, pp, vp)
    counts = [per] * chunks
    counts[0] -= 1
    counts[-1] -= 1
    return counts


LAYERS = {"qwen3-30b-a3b": 48, "qwen3-235b-a22b": 94}

# Declared calibration cases (DESIGN.md, Fidelity rules): the two token-dropping 25.09 rows, whose
# all-to-alls no overlap hides (Qwen3-235B's across 4 nodes, Qwen3-30B's inside one), pin
# nccl_all_to_all_h100_efficiency (scenarios/calibration.yaml); the dropless EP-overlap rows predict.
CALIBRATION = {"mbridge2509-qwen3-235b-a22b-256xh100-fp8", "mbridge2509-qwen3-30b-a3b-16xh100-fp8"}


def main():
    write_cf1_models()
    for (name, model, gpus, gbs, mbs, tp, pp, vp, ep, tps, rel, drop, ep_overlap, tp_overlap, source) in ROWS:
        dp = gpus // (tp * pp)
        assert dp * tp * pp == gpus and gbs % (dp * mbs) == 0, name
        model_file = CF1_MODELS[model] if drop else model
        plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}", f"ep: {ep}"]
        if tp > 1:
            plan.append("expert_tp: 1")
        plan += [f"micro_batch: {mbs}", "schedule: interleaved", f"virtual_stages: {vp}"]
        layers = LAYERS[model]
        if layers % (pp * vp) != 0:
            plan.append("stage_layers: [" + ", ".join(str(c) for c in stage_layers(layers, pp, vp)) + "]")
        plan += ["recompute: none", f"sequence_parallel: {'true' if tp > 1 else 'false'}"]
        if tp > 1:
            plan.append(f"tp_overlap: {'true' if tp_overlap else 'false'}")
        if ep_overlap:
            plan.append("ep_overlap: true")
        plan += ["zero: 1", "dp_overlap: true", "param_gather_overlap: true", "framework: megatron-core",
                 "reduce_dtype: bf16"]
        routing = ("token dropping at capacity factor 1.0, padded (apply_moe_token_drop), no EP all-to-all overlap"
                   if drop else "dropless routing, EP all-to-all overlap with delayed weight gradients")
        notes = (f"{tps} tokens/s per GPU x {gpus} GPUs (release {rel}). Recipe settings from Megatron-Bridge "
                 "(notes/research-megatron-bridge-h100.md, notes/research-mcore-moe.md): FP8 current scaling"
                 f"{' (inferred for 25.09)' if rel == '25.09' else ''}, {routing}, "
                 f"{'TP-communication overlap, ' if tp_overlap else ''}"
                 "all-to-all dispatcher with grouped GEMM and fused permute, forced load balancing, expert tensor "
                 "parallelism 1, no recompute, distributed optimizer with overlapped bf16 gradient reduce and "
                 "parameter gather; attention backend left to Transformer Engine (cuDNN on H100). "
                 "Cluster dgx-h100-superpod (DGX H100, 8 x 400 Gb/s InfiniBand per node).")
        measured = (["role: calibration"] if name in CALIBRATION else []) + [
            f"tokens_per_s: {tps * gpus}", f"source: \"{source}, row {model} {gpus} GPUs\""]
        write_experiment(name, model_file, "dgx-h100-superpod", gpus,
                         f"{{global_batch: {gbs}, dtype: fp8, fp8_scaling: tensorwise, optimizer: adam}}", plan, measured, notes)


if __name__ == "__main__":
    main()
