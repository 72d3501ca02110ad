#!/usr/bin/env python3
"""Writes the scenario files of BigScience's topology benchmarks for the 176B model on Jean Zay
(bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @ 9e64ede): runs from
outside ../shared/published, each a prediction case of the source "BigScience 176B topology
benchmarks on Jean Zay (2022)". notes/research-deepspeed-pipeline.md secs. 10-11 has the reading.

What the document states: 48 gpu_p5 nodes of 8 A100 80GB (4 Omni-Path adapters a node), Megatron-
DeepSpeed with DeepSpeed's pipeline engine, sequence 2048, vocabulary "250k" (250,680 tokens padded to
250,880, a multiple of 128 x TP at TP 1-8 but TP 1, where it is 250,752: one row, 0.05% of its
logits), full activation recompute, ZeRO stage 1; each reading is the 2nd iteration's
"elapsed time per iteration", which the author says "can fluctuate a bit" (the same plan read on
two days: 110.48 / 113.54 s, 114.11 / 113.95 s). Taken here (one reading per plan, the first):

  - "GBS Variations" onwards, from 02-25 on: the document says that day's PCIe/NUMA fix changed
    every figure by 1-5%, so earlier tables are left out;
  - fp16 (DeepSpeed's fp16 optimizer) up to 02-27, bf16 (DeepSpeed's BF16_Optimizer, fp32 gradient
    accumulation, as BLOOM ran) from 02-28 ("Rebalancing layers");
  - the embedding counted as a pipeline layer (--pp-partition-method 'type:transformer|embedding')
    where the document says so: from 02-27's 106-layer rows on;
  - 64 attention heads only. The head-count tables were made to probe two effects this model does
    not price (whether Megatron's fused masked softmax applies, and head widths whose rows are not
    16-byte aligned for the batched score GEMMs: e.g. 13824 / 128 heads = 108 runs 42% slower than
    64 heads); 64 heads is the document's default ("all NHEADS=64");
  - plans whose layers split evenly over the stages (78 layers over 12 stages are left out: the
    document's own "Re-do" says that split left the last stage one block).
  - BLOOM-176B's own plan (70 layers, 112 heads, TP 4, PP 12, DP 8, MBS 2, bf16) is the calibration
    case bloom-176b-jean-zay-384 and is not repeated here.

Usage: python3 scenarios/tools/bigscience_experiments.py
"""
import os

from experiment_file import ROOT, write_experiment

DOC = ("bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @ 9e64ede, "
       "section '{section}', row dated {date}")

# layers, hidden, dtype, embedding-as-layer partition, DP, TP, PP, MBS, GBS, s/iteration, section, date
ROWS = [
    (72, 14336, "fp16", False, 8, 8, 6, 4, 1568, 113.01, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 8, 6, 4, 2048, 114.11, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 8, 6, 6, 2016, 123.57, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 4, 8, 12, 4, 1568, 92.75, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 4, 8, 12, 4, 2048, 117.07, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 4, 8, 12, 2, 1568, 99.93, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 4, 8, 12, 2, 2048, 128.82, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 6, 8, 8, 4, 2016, 113.16, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 12, 8, 4, 2, 2016, 125.52, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 12, 8, 4, 4, 2016, 114.81, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 24, 8, 2, 1, 2016, 145.45, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 24, 8, 2, 2, 2016, 136.13, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 4, 12, 4, 2048, 111.89, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 4, 12, 2, 2048, 110.48, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 16, 4, 6, 4, 2048, 117.11, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 16, 4, 6, 2, 2048, 111.71, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 16, 2, 12, 2, 2048, 112.50, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 2, 24, 1, 2048, 119.53, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 8, 2, 24, 2, 2048, 122.75, "GBS Variations", "02-25"),
    (72, 14336, "fp16", False, 4, 4, 24, 1, 2048, 130.60, "GBS Variations", "02-25"),
    (96, 12288, "fp16", False, 8, 1, 48, 1, 2048, 142.17, "GBS Variations", "02-25"),
    (84, 13312, "fp16", False, 8, 4, 12, 2, 2048, 103.82, "Another round of NHEADS", "02-26"),
    (84, 13312, "fp16", False, 8, 4, 12, 4, 2048, 113.21, "Another round of NHEADS", "02-26"),
    (84, 13312, "fp16", False, 8, 8, 6, 2, 2048, 129.61, "Another round of NHEADS", "02-26"),
    (106, 12288, "fp16", True, 8, 4, 12, 2, 2048, 110.96, "Re-do", "02-27"),
    (106, 12288, "bf16", True, 8, 4, 12, 2, 2048, 116.54, "Rebalancing layers", "02-28"),
    (100, 12288, "bf16", True, 8, 8, 6, 2, 2048, 139.72, "Rebalancing layers", "02-28"),
    (100, 12288, "bf16", True, 8, 8, 6, 4, 2048, 120.96, "Rebalancing layers", "02-28"),
    (82, 13312, "bf16", True, 4, 8, 12, 4, 2048, 111.79, "Rebalancing layers", "02-28"),
    (82, 13312, "bf16", True, 8, 4, 12, 2, 2048, 104.45, "Rebalancing layers", "02-28"),
    (82, 13312, "bf16", True, 8, 4, 12, 4, 2048, 104.82, "Rebalancing layers", "02-28"),
    (70, 14336, "bf16", True, 4, 8, 12, 2, 2048, 121.63, "Rebalancing layers", "02-28"),
    (70, 14336, "bf16", True, 8, 4, 12, 2, 2048, 102.03, "Rebalancing layers", "02-28"),
    (70, 14336, "bf16", True, 8, 4, 12, 4, 2048, 102.27, "Rebalancing layers", "02-28"),
]


def model_name(layers, hidden):
    return f"bigscience-jz-{layers}x{hidden}"


def write_model(layers, hidden):
    name = model_name(layers, hidden)
    with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
        f.write(f"""model:
  name: {name}
  layers: {layers}
  hidden: {hidden}
  heads: 64
  seq_len: 2048
  vocab: 250880
  ffn_hidden: {4 * hidden}
  source: "bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @ 9e64ede: NLAYERS={layers}, NHIDDEN={hidden}, NHEADS=64, SEQ_LEN=2048, VOCAB_LENGTH=250k (the BLOOM tokenizer's 250,680 tokens padded by Megatron-DeepSpeed to 250,880)"
  notes: "A candidate shape of BLOOM's 176B search: Megatron-DeepSpeed's GPT (LayerNorm, GeLU, ffn 4h, tied embeddings); BLOOM's ALiBi and embedding LayerNorm not priced, as in bloom-176b.yaml."
""")


def main():
    for layers, hidden in sorted({(r[0], r[1]) for r in ROWS}):
        write_model(layers, hidden)
    seen = set()
    for (layers, hidden, dtype, embed_layer, dp, tp, pp, mbs, gbs, secs, section, date) in ROWS:
        name = f"bigscience-jz-{layers}x{hidden}-{dtype}-tp{tp}-pp{pp}-dp{dp}-mbs{mbs}-gbs{gbs}"
        assert name not in seen, name
        seen.add(name)
        assert dp * tp * pp == 384 or dp * tp * pp == 48 * 8, name
        assert (layers + (2 if embed_layer else 0)) % pp == 0, name
        plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}", f"micro_batch: {mbs}", "schedule: 1f1b", "dp_overlap: false",
                "recompute: full", "zero: 1"]
        if embed_layer:
            plan.append('partition_method: "type:transformer|embedding"')
        plan += ["framework: deepspeed", "placement: tp-dp-pp"]
        optimizer = ("DeepSpeed's BF16_Optimizer (fp32 gradient accumulation, its own ZeRO-1: zero 1), as BLOOM ran"
                     if dtype == "bf16" else "DeepSpeed's fp16 optimizer with ZeRO stage 1")
        partition = ("the embedding counted as a pipeline layer (--pp-partition-method 'type:transformer|embedding')"
                     if embed_layer else "transformer layers split evenly over the stages")
        measured = ["role: prediction", f"iteration_s: {secs}",
                    "source: \"" + DOC.format(section=section, date=date) +
                    f": {48} nodes, DP {dp}, TP {tp}, PP {pp}, MBS {mbs}, GBS {gbs}, {secs} s per iteration (2nd iteration)\""]
        notes = (f"One of BigScience's topology benchmarks for BLOOM's 176B training ({layers} layers x {hidden}, 64 heads), "
                 f"on the 48 Jean Zay gpu_p5 nodes BLOOM trained on: {dtype}, {optimizer}, full recompute "
                 f"(--checkpoint-activations), {partition}, the pipeline engine (no DP overlap), ranks ordered "
                 "TP-DP-PP as Megatron-DeepSpeed builds its groups. A single 2nd-iteration reading. "
                 "Written by scenarios/tools/bigscience_experiments.py.")
        write_experiment(name, model_name(layers, hidden), "jean-zay-a100", dp * tp * pp,
                         f"{{global_batch: {gbs}, dtype: {dtype}, optimizer: adam}}", plan, measured, notes)


if __name__ == "__main__":
    main()
