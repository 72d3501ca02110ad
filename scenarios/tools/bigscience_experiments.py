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
  - any head count whose head width keeps 16-byte rows for the batched score GEMMs (a multiple of 8
    elements); misaligned widths (e.g. 13824 / 128 heads = 108, 42% slower than 64 heads) are a
    cuBLAS effect the model does not price, and every such row is also before 02-25 or unevenly
    split. A plan read again on a later day (02-26's 64-head repeats of 02-25 plans) is taken once;
  - plans whose layers split evenly over the stages (78 layers over 12 stages are left out: the
    document's own "Re-do" says that split left the last stage one block).
  - BLOOM-176B's own plan (70 layers, 112 heads, TP 4, PP 12, DP 8, MBS 2, bf16) is the calibration
    case bloom-176b-jean-zay-384 and is not repeated here.

Megatron's fused softmax, as these runs had it: the BigScience fork from 2021-10-21 (PR #151, which
synced NVIDIA/Megatron-LM 40becfc9 but not its same-day fix 0d350c8d) to 2022-03-06 (PR #260) called
the kernel's size check with its arguments out of order (megatron/model/fused_softmax.py @ ae6277f5:
is_kernel_available passes (sq, sk, b, np) to get_batch_per_block(b, np, sq, sk), so the CUDA helper
sizes its blocks for a key length of np, the heads per TP rank). The causal kernel then runs only
where micro-batch x heads / TP is a multiple of 128 / min(next_pow2(np), 32) x (2 if next_pow2(np)
<= 128 else 1) (32 at 8 heads per rank), and falls back to PyTorch's fp32 softmax otherwise
(forward_torch_softmax), silently: --abort-on-unmet-fused-kernel-constraints checks only the
multiple of 4. Every row here predates the fix; fork_fuses_softmax() below applies the check and the
rows that fail it say plan.fused_softmax false (here: TP 8 at micro-batch 1, 2 and 6). BLOOM's run
(from 03-11) had the fix. notes/research-deepspeed-pipeline.md sec. 13.

Usage: python3 scenarios/tools/bigscience_experiments.py
"""

from experiment_file import write_experiment, write_model

DOC = ("bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @ 9e64ede, "
       "section '{section}', row dated {date}")

# layers, hidden, heads, dtype, embedding-as-layer partition, DP, TP, PP, MBS, GBS, s/iteration, section, date
ROWS = [
    (72, 14336, 64, "fp16", False, 8, 8, 6, 4, 1568, 113.01, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 8, 6, 4, 2048, 114.11, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 8, 6, 6, 2016, 123.57, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 4, 8, 12, 4, 1568, 92.75, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 4, 8, 12, 4, 2048, 117.07, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 4, 8, 12, 2, 1568, 99.93, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 4, 8, 12, 2, 2048, 128.82, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 6, 8, 8, 4, 2016, 113.16, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 12, 8, 4, 2, 2016, 125.52, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 12, 8, 4, 4, 2016, 114.81, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 24, 8, 2, 1, 2016, 145.45, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 24, 8, 2, 2, 2016, 136.13, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 4, 12, 4, 2048, 111.89, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 4, 12, 2, 2048, 110.48, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 16, 4, 6, 4, 2048, 117.11, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 16, 4, 6, 2, 2048, 111.71, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 16, 2, 12, 2, 2048, 112.50, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 2, 24, 1, 2048, 119.53, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 8, 2, 24, 2, 2048, 122.75, "GBS Variations", "02-25"),
    (72, 14336, 64, "fp16", False, 4, 4, 24, 1, 2048, 130.60, "GBS Variations", "02-25"),
    (96, 12288, 64, "fp16", False, 8, 1, 48, 1, 2048, 142.17, "GBS Variations", "02-25"),
    (84, 13312, 64, "fp16", False, 8, 4, 12, 2, 2048, 103.82, "Another round of NHEADS", "02-26"),
    (84, 13312, 64, "fp16", False, 8, 4, 12, 4, 2048, 113.21, "Another round of NHEADS", "02-26"),
    (84, 13312, 64, "fp16", False, 8, 8, 6, 2, 2048, 129.61, "Another round of NHEADS", "02-26"),
    (106, 12288, 64, "fp16", True, 8, 4, 12, 2, 2048, 110.96, "Re-do", "02-27"),
    (106, 12288, 64, "bf16", True, 8, 4, 12, 2, 2048, 116.54, "Rebalancing layers", "02-28"),
    (100, 12288, 64, "bf16", True, 8, 8, 6, 2, 2048, 139.72, "Rebalancing layers", "02-28"),
    (100, 12288, 64, "bf16", True, 8, 8, 6, 4, 2048, 120.96, "Rebalancing layers", "02-28"),
    (82, 13312, 64, "bf16", True, 4, 8, 12, 4, 2048, 111.79, "Rebalancing layers", "02-28"),
    (82, 13312, 64, "bf16", True, 8, 4, 12, 2, 2048, 104.45, "Rebalancing layers", "02-28"),
    (82, 13312, 64, "bf16", True, 8, 4, 12, 4, 2048, 104.82, "Rebalancing layers", "02-28"),
    (70, 14336, 64, "bf16", True, 4, 8, 12, 2, 2048, 121.63, "Rebalancing layers", "02-28"),
    (70, 14336, 64, "bf16", True, 8, 4, 12, 2, 2048, 102.03, "Rebalancing layers", "02-28"),
    (70, 14336, 64, "bf16", True, 8, 4, 12, 4, 2048, 102.27, "Rebalancing layers", "02-28"),
    # The head-count rows of 02-26 and 02-28 (even splits, 16-byte head widths; 02-25 plans read again at 64
    # heads on 02-26 are repeats and left out).
    (72, 14336, 128, "fp16", False, 8, 4, 12, 2, 2048, 114.02, "Another round of NHEADS", "02-26"),
    (72, 14336, 128, "fp16", False, 8, 4, 12, 4, 2048, 137.53, "Another round of NHEADS", "02-26"),
    (72, 14336, 128, "fp16", False, 8, 8, 6, 4, 2048, 116.06, "Another round of NHEADS", "02-26"),
    (106, 12288, 96, "bf16", True, 8, 4, 12, 2, 2048, 118.79, "Rebalancing layers", "02-28"),
    (106, 12288, 128, "bf16", True, 8, 4, 12, 2, 2048, 121.42, "Rebalancing layers", "02-28"),
    (106, 12288, 96, "bf16", True, 8, 4, 12, 4, 2048, 120.34, "Rebalancing layers", "02-28"),
    (82, 13312, 104, "bf16", True, 8, 4, 12, 2, 2048, 123.71, "Rebalancing layers", "02-28"),
    (82, 13312, 128, "bf16", True, 8, 4, 12, 2, 2048, 108.78, "Rebalancing layers", "02-28"),
    (94, 13312, 128, "bf16", True, 8, 4, 12, 2, 2048, 124.10, "Rebalancing layers", "02-28"),
    (70, 14336, 128, "bf16", True, 8, 4, 12, 2, 2048, 105.89, "Rebalancing layers", "02-28"),
]


def fork_fuses_softmax(tp, heads, micro_batch):
    """The BigScience fork's fused-softmax check before 2022-03-06, as the module docstring says:
    (micro-batch x heads per rank) % batches_per_block == 0, with batches_per_block computed by the
    CUDA helper (fused_kernels/scaled_masked_softmax.h get_batch_per_block) for key length np."""
    np_ = heads // tp
    attn_batches = micro_batch * np_
    if attn_batches % 4:
        return False
    pow2 = 1
    while pow2 < np_:
        pow2 *= 2
    warp = min(pow2, 32)
    per_block = (128 // warp) * (2 if pow2 <= 128 else 1)
    return attn_batches % per_block == 0


def model_name(layers, hidden, heads):
    return f"bigscience-jz-{layers}x{hidden}-a{heads}"


def write_shape_model(layers, hidden, heads):
    assert hidden % heads == 0 and (hidden // heads) % 8 == 0, (hidden, heads)  # 16-byte head rows
    write_model(model_name(layers, hidden, heads),
                [("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", 2048), ("vocab", 250880),
                 ("ffn_hidden", 4 * hidden)],
                f"bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @ 9e64ede: NLAYERS={layers}, "
                f"NHIDDEN={hidden}, NHEADS={heads}, SEQ_LEN=2048, VOCAB_LENGTH=250k (the BLOOM tokenizer's 250,680 tokens "
                "padded by Megatron-DeepSpeed to 250,880)",
                "A candidate shape of BLOOM's 176B search: Megatron-DeepSpeed's GPT (LayerNorm, GeLU, ffn 4h, tied "
                "embeddings); BLOOM's ALiBi and embedding LayerNorm not priced, as in bloom-176b.yaml.")


def main():
    for layers, hidden, heads in sorted({(r[0], r[1], r[2]) for r in ROWS}):
        write_shape_model(layers, hidden, heads)
    seen = set()
    for (layers, hidden, heads, dtype, embed_layer, dp, tp, pp, mbs, gbs, secs, section, date) in ROWS:
        name = f"bigscience-jz-{layers}x{hidden}-a{heads}-{dtype}-tp{tp}-pp{pp}-dp{dp}-mbs{mbs}-gbs{gbs}"
        assert name not in seen, name
        seen.add(name)
        assert dp * tp * pp == 384 or dp * tp * pp == 48 * 8, name
        assert (layers + (2 if embed_layer else 0)) % pp == 0, name
        plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}", f"micro_batch: {mbs}", "schedule: 1f1b", "dp_overlap: false",
                "recompute: full", "zero: 1"]
        if embed_layer:
            plan.append('partition_method: "type:transformer|embedding"')
        fused = fork_fuses_softmax(tp, heads, mbs)
        if not fused:
            plan.append("fused_softmax: false")
        if dtype == "bf16":
            plan.append("bf16_optimizer: true")
        plan += ["framework: deepspeed", "placement: tp-dp-pp"]
        optimizer = ("DeepSpeed's BF16_Optimizer (plan.bf16_optimizer: fp32 gradient accumulation, its own ZeRO-1: zero 1), as BLOOM ran"
                     if dtype == "bf16" else "DeepSpeed's fp16 optimizer with ZeRO stage 1")
        partition = ("the embedding counted as a pipeline layer (--pp-partition-method 'type:transformer|embedding')"
                     if embed_layer else "transformer layers split evenly over the stages")
        measured = ["role: prediction", f"iteration_s: {secs}",
                    "source: \"" + DOC.format(section=section, date=date) +
                    f": {48} nodes, DP {dp}, TP {tp}, PP {pp}, MBS {mbs}, GBS {gbs}, {secs} s per iteration (2nd iteration)\""]
        notes = (f"One of BigScience's topology benchmarks for BLOOM's 176B training ({layers} layers x {hidden}, {heads} heads), "
                 f"on the 48 Jean Zay gpu_p5 nodes BLOOM trained on: {dtype}, {optimizer}, full recompute "
                 f"(--checkpoint-activations), {partition}, the pipeline engine (no DP overlap), ranks ordered "
                 "TP-DP-PP as Megatron-DeepSpeed builds its groups. " +
                 ("" if fused else f"Megatron's softmax ran unfused: the fork's kernel check of that month "
                  f"(see the script) fails at {heads // tp} heads per rank x micro-batch {mbs}. ") +
                 "A single 2nd-iteration reading. "
                 "Written by scenarios/tools/bigscience_experiments.py.")
        write_experiment(name, model_name(layers, hidden, heads), "jean-zay-a100", dp * tp * pp,
                         f"{{global_batch: {gbs}, dtype: {dtype}, optimizer: adam}}", plan, measured, notes)


if __name__ == "__main__":
    main()
