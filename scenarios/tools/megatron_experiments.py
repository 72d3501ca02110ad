#!/usr/bin/env python3
"""Writes the scenario files of two Megatron-LM whole-iteration tables from outside
../shared/published (notes/research-classic-runs.md has the reading, with sources):

1. Korthikanti et al. 2022 (arXiv:2205.05198) Table 5: end-to-end iteration time of the 22B, 175B,
   530B and 1T models on Selene (Table 3's configurations: TP 8, no data parallelism, sequence 2048,
   vocab 51200), with full recomputation (the baseline, no sequence parallelism) and with the
   paper's sequence parallelism + selective recomputation; plus sec. 6.3's 530B run with 8-way
   data parallelism (2240 GPUs, gradients all-reduced after the backward). 175B and 530B run the
   interleaved schedule with three stages per GPU (sec. 6.3); 22B has no pipeline; the 1T run's
   schedule is not stated: 1F1B (Megatron-LM's default without --num-layers-per-virtual-pipeline-stage).
   Precision: "mixed precision" unstated beyond that; bf16 as the Table 4 scenarios take it (the A100's
   bf16 and fp16 peaks are equal).
2. The Megatron-LM repository's scaling table (NVIDIA/Megatron-LM @ 5281919420ac, 2020-09-11,
   images/tables.tex, the source of its README's figures): measured iteration times of four GPT
   models (1B..8B) at sequence 1024 with activation checkpointing, tensor (model) parallelism over
   1, 2, 4 and 8 GPUs at batch 8 on a DGX-2 (V100 32GB) and batch 16 on a DGX A100, and with 128-way
   data parallelism on DGX A100s (global batch 2048). The code of that date ran fp16 with dynamic
   loss scaling, uniform full activation checkpointing, Megatron's local DDP (all-reduce after the
   backward, --DDP-impl local default; the README's distributed examples pass --DDP-impl torch, which
   the data-parallel rows take) and no pipeline parallelism (its README). DGX A100 of 2020: 40GB.

Usage: python3 scenarios/tools/megatron_experiments.py
"""
import os

from experiment_file import ROOT, write_experiment

K22 = ("Korthikanti et al. 2022 (arXiv:2205.05198) Table 5 (end-to-end iteration time) with Table 3's "
       "configuration")
K22_DP = ("Korthikanti et al. 2022 (arXiv:2205.05198) sec. 6.3: the 530B model with 8-way data parallelism on 2240 GPUs, "
          "'the time per iteration increases slightly from 37.83 seconds to 39.15 seconds'")
REPO = ("github NVIDIA/Megatron-LM @ 5281919420ac4eb649e6aee9652ff39bb94d462a (2020-09-11): images/tables.tex, "
        "measured iteration time")

# name suffix, model file, layers-per-stage schedule (pp, v), GPUs, global batch, micro-batch,
# full-recompute time, present-work time
KORTHIKANTI = [
    ("22b", "korthikanti-22b", 1, 1, 8, 4, 4, 1.42, 1.10),
    ("175b", "gpt3-175b", 8, 3, 64, 64, 1, 18.13, 13.75),
    ("530b", "sc21-530b", 35, 3, 280, 280, 1, 49.05, 37.83),
    ("1t", "sc21-1t", 64, 1, 512, 512, 1, 94.42, 71.49),
]

# The repository's GPT models (hidden, heads, layers); sequence 1024, vocab 51200.
REPO_MODELS = {
    "megatron2020-1b": (1920, 15, 24),
    "megatron2020-2b": (2304, 18, 30),
    "megatron2020-4b": (3072, 24, 36),
    "megatron2020-8b": (4096, 32, 42),
}
# model, tp, DGX-2 V100 ms (batch 8), DGX A100 ms (batch 16), DGX A100 128-way data parallel ms (batch 2048)
REPO_ROWS = [
    ("megatron2020-1b", 1, 1121, 1076, 1153),
    ("megatron2020-2b", 2, 1093, 1026, 1101),
    ("megatron2020-4b", 4, 1238, 1162, 1242),
    ("megatron2020-8b", 8, 1407, 1343, 1380),
]


def write_repo_models():
    for name, (h, heads, layers) in REPO_MODELS.items():
        text = f"""model:
  name: {name}
  layers: {layers}
  hidden: {h}
  heads: {heads}
  seq_len: 1024
  vocab: 51200
  source: "NVIDIA/Megatron-LM @ 5281919420ac (2020-09-11) images/tables.tex (hidden size, attention heads, layers of its scaling table; sequence 1024 and vocab 51200 as its README states)"
  notes: "GPT-2 architecture as Megatron-LM builds it (LayerNorm, GeLU, learned positions, tied embeddings, ffn 4h); the GPT-2 BPE vocabulary 50257 padded to 51200."
"""
        with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
            f.write(text)


def plan_lines(tp, pp, dp, mb, schedule, v, sp, recompute, dp_overlap=False):
    lines = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}", f"micro_batch: {mb}", f"schedule: {schedule}"]
    if v > 1:
        lines.append(f"virtual_stages: {v}")
    lines += [f"sequence_parallel: {'true' if sp else 'false'}", f"recompute: {recompute}", "zero: 0"]
    if dp_overlap:
        lines.append("dp_overlap: true")
    return lines + ["framework: megatron"]


def main():
    write_repo_models()
    for size, model, pp, v, gpus, gbs, mb, full_s, present_s in KORTHIKANTI:
        schedule = "interleaved" if v > 1 else "1f1b"
        for variant, sp, recompute, seconds in (("full-recompute", False, "full", full_s),
                                                ("selective-sp", True, "selective", present_s)):
            notes = (f"No data parallelism (Table 3); {'the baseline: full recomputation, no sequence parallelism' if recompute == 'full' else 'the paper: sequence parallelism with selective recomputation'}; "
                     f"{'interleaved schedule, 3 stages per GPU (sec. 6.3)' if v > 1 else ('1F1B (schedule not stated)' if pp > 1 else 'no pipeline')}; "
                     "bf16 assumed (mixed precision, unstated). Framework megatron (Megatron-LM v3.0, 2022).")
            write_experiment(f"korthikanti-table5-{size}-{variant}", model, "selene", gpus,
                             f"{{global_batch: {gbs}, dtype: bf16, optimizer: adam}}",
                             plan_lines(8, pp, 1, mb, schedule, v, sp, recompute),
                             [f"iteration_s: {seconds}", f"source: \"{K22}, row {size}\""], notes)
    write_experiment("korthikanti-table5-530b-selective-sp-dp8", "sc21-530b", "selene", 2240,
                     "{global_batch: 2240, dtype: bf16, optimizer: adam}",
                     plan_lines(8, 35, 8, 1, "interleaved", 3, True, "selective"),
                     ["iteration_s: 39.15", f"source: \"{K22_DP}\""],
                     "The 530B row of Table 5 with 8-way data parallelism and the batch scaled with it (280 x 8 = 2240); "
                     "the gradient all-reduce is not overlapped with the backward (sec. 6.3). bf16 assumed.")
    for model, tp, v100_ms, a100_ms, dp_ms in REPO_ROWS:
        common = ("Megatron-LM of 2020-09 (framework megatron): fp16 with dynamic loss scaling, full activation "
                  "checkpointing of every layer, tensor (model) parallelism only inside a node")
        write_experiment(f"{model}-dgx2-v100-tp{tp}", model, "dgx2-v100", tp, "{global_batch: 8, dtype: fp16, optimizer: adam}",
                         plan_lines(tp, 1, 1, 8, "1f1b", 1, False, "full"),
                         [f"iteration_s: {v100_ms / 1000}", f"source: \"{REPO}, DGX-2 (V100), batch 8, {tp} GPU(s)\""],
                         common + "; one DGX-2 server (16 V100 32GB on NVSwitch), the model on its first tp GPUs.")
        write_experiment(f"{model}-dgxa100-tp{tp}", model, "dgx-a100-40gb", tp, "{global_batch: 16, dtype: fp16, optimizer: adam}",
                         plan_lines(tp, 1, 1, 16, "1f1b", 1, False, "full"),
                         [f"iteration_s: {a100_ms / 1000}", f"source: \"{REPO}, DGX A100, batch 16, {tp} GPU(s)\""],
                         common + "; one DGX A100 40GB (the DGX A100 of September 2020).")
        write_experiment(f"{model}-dgxa100-tp{tp}-dp128", model, "dgx-a100-40gb", tp * 128,
                         "{global_batch: 2048, dtype: fp16, optimizer: adam}",
                         plan_lines(tp, 1, 128, 16, "1f1b", 1, False, "full", dp_overlap=True),
                         [f"iteration_s: {dp_ms / 1000}", f"source: \"{REPO}, DGX A100, 128-way data parallel, global batch 2048\""],
                         common + "; 128-way data parallelism with Torch's DDP (gradients all-reduced in buckets during "
                         "the backward: the README's distributed examples of that commit pass --DDP-impl torch and credit it "
                         "for the 512-GPU scaling; the argument's default is local); micro-batch 16 per replica as the "
                         "tensor-parallel rows, one micro-batch per step (2048 / 128); DGX A100 40GB nodes.")


if __name__ == "__main__":
    main()
