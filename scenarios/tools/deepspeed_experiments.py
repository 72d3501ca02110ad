#!/usr/bin/env python3
"""Writes the scenario files of the Azure + DeepSpeed ZeRO-3 runs (microsoft/DeepSpeed
docs/_posts/2022-07-26-deepspeed-azure.md, the printed TFLOP/s per GPU; recipes in
microsoft/Megatron-DeepSpeed @ 22775707 examples/azure/run-175b.sh and run-1t.sh): runs from
outside ../shared/published, each a prediction case of the source "DeepSpeed ZeRO-3 on Azure A100
(2022)". notes/research-zero3-runs.md has the reading.

What the blog and its recipes state: Azure NDm A100 v4 VMs (8 A100 80GB, one 200 Gb/s HDR NIC per
GPU), PyTorch 1.10.2, DeepSpeed 0.6.2, NCCL 2.12.10; GPT models of Table 2 (175B 96 x 12288 x 96
heads, 530B 105 x 20480 x 128, 1T 128 x 25600 x 160, 2T 160 x 32768 x 128); ZeRO stage 3 alone
(no tensor or pipeline parallelism), fp16, activation checkpointing of every layer, no gradient
accumulation (global batch = micro-batch x GPUs), reduce_bucket_size 9e7, prefetch bucket 5e7,
max live parameters and reuse distance 3e9, persistence threshold 1e5. TFLOP/s are Megatron-DeepSpeed's
throughput_calculator: 96 B s L h^2 (1 + s/6h + V/16Lh) / (time x GPUs) with the recompute counted
(this project's hardware FLOPs), V = 50304 (GPT-2 BPE padded; it reproduces the ZeRO++ tutorial's
logged TFLOP/s exactly). Optimizer offload: run-175b.sh has none, run-1t.sh offloads the optimizer to
the CPU and the blog says "activation and optimizer states are allocated in the main memory" without
saying for which runs: the 175B row keeps its optimizer on the GPU, the 530B, 1T and 2T rows (whose
state does not fit beside their activations in 80 GB) offload it. The reuse distance of 3e9 is not a
plan field and does not enter: these runs' communication is not overlapped with compute (the blog's
micro-batch sweep, reports/deepspeed-zero3-sweep.md), the regime of DeepSpeed's coordinator without a
complete trace, which neither prefetches nor keeps anything for reuse (FrameworkTraits::zero3_prefetch).

Usage: python3 scenarios/tools/deepspeed_experiments.py
"""

from experiment_file import write_experiment, write_model

SOURCE = ("github microsoft/DeepSpeed: docs/_posts/2022-07-26-deepspeed-azure.md (Azure + DeepSpeed, printed "
          "TFLOPs per GPU)")

# name, layers, hidden, heads, seq, GPUs, micro-batch, TFLOP/s per GPU, optimizer offload
ROWS = [
    ("175b", 96, 12288, 96, 512, 256, 32, 204.49, False),
    ("530b", 105, 20480, 128, 1024, 512, 8, 170.42, True),
    ("530b", 105, 20480, 128, 1024, 1024, 8, 171.37, True),
    ("1t", 128, 25600, 160, 1024, 1024, 8, 165.36, True),
    ("2t", 160, 32768, 128, 1024, 1024, 8, 157.0, True),
]


def main():
    for size, layers, hidden, heads, seq, gpus, mb, tflops, offload in ROWS:
        model = f"deepspeed-azure-gpt-{size}-s{seq}"
        write_model(model, [("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq), ("vocab", 50304)],
                    "microsoft/DeepSpeed docs/_posts/2022-07-26-deepspeed-azure.md Table 2 (layers, hidden size, attention "
                    "heads); sequence length of the blog's runs; GPT-2 BPE vocabulary padded to 50304 (Megatron-DeepSpeed "
                    "at tp 1; notes/research-zero3-runs.md)",
                    "Megatron-DeepSpeed's GPT: LayerNorm, GeLU, learned positions, tied embeddings, ffn 4h.")
        plan = ["tp: 1", "pp: 1", f"dp: {gpus}", f"micro_batch: {mb}", "schedule: 1f1b", "recompute: full", "zero: 3",
                "reduce_bucket: 90000000"]
        if offload:
            # The 1T and 2T checkpoints (s b h fp16 per layer: 54 and 86 GB) fill the GPU on their
            # own: kept in host memory ("activation and optimizer states are allocated in the main
            # memory"), the 530B's (35 GB) on the GPU.
            act = 1.0 if size in ("1t", "2t") else 0.0
            plan.append(f"offload: {{optimizer: true, activations: {act}}}")
        plan.append("framework: deepspeed")
        notes = (f"ZeRO-3 alone on {gpus} A100 80GB ({gpus // 8} NDm A100 v4 VMs), micro-batch {mb}, no gradient "
                 "accumulation; fp16, activation checkpointing; reduce_bucket_size 9e7; "
                 + ("optimizer offloaded to the CPU (inferred: the blog puts optimizer states in main memory, run-1t.sh "
                    "offloads, and the state would not fit on the GPU)." if offload else
                    "optimizer on the GPU (run-175b.sh)."))
        # The iteration time the printed TFLOP/s stand for (Megatron-DeepSpeed's formula, above).
        batch, v = gpus * mb, 50304
        flops = 96.0 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + v / (16 * layers * hidden))
        seconds = flops / (tflops * 1e12 * gpus)
        write_experiment(f"deepspeed-azure-{size}-{gpus}xa100-zero3", model, "azure-nda100-v4", gpus,
                         f"{{global_batch: {batch}, dtype: fp16, optimizer: adam}}", plan,
                         [f"iteration_s: {seconds:.4g}", f"tflops_per_gpu: {tflops}", "flops_definition: hardware",
                          f"source: \"{SOURCE}, {size.upper()} on {gpus} GPUs; iteration_s derived = "
                          "96 B s L h^2 (1 + s/6h + V/16Lh) / (GPUs x TFLOP/s)\""], notes)


if __name__ == "__main__":
    main()
