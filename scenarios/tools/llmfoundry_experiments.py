#!/usr/bin/env python3
"""Writes the scenario files of llm-foundry's MPT benchmark rows (../shared/published/modern.yaml)
that the schema can express: bf16 autocast (amp_bf16), Composer's pure bf16 (FSDP MixedPrecision
PURE: gradients reduced in bf16, plan.reduce_dtype) or Transformer Engine FP8 (amp_fp8) on H100
80GB, A100 80GB or A100 40GB, FSDP FULL_SHARD (plan.zero 3), with or without full activation
checkpointing. One model file per (size, sequence length), one experiment per row with its
measured throughput.

Usage: python3 scenarios/tools/llmfoundry_experiments.py ../shared/published/modern.yaml
"""
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CLUSTERS = {  # GPU in the row -> cluster file (the rows do not state the H100 network)
    "h100": "dgx-h100-superpod",
    "a100-80gb": "selene",
    "a100-40gb": "mosaicml-a100-40gb",
}


def main(path):
    data = yaml.safe_load(open(path))
    written, models = [], set()
    for e in data["datapoints"]:
        rid = e["id"]
        if not rid.startswith("llmfoundry_"):
            continue
        pure = e["precision"].startswith("bf16")  # Composer pure bf16: FSDP MixedPrecision PURE
        if not (pure or e["precision"].startswith(("amp_bf16", "amp_fp8"))):
            continue
        dtype = "fp8" if e["precision"].startswith("amp_fp8") else "bf16"
        size, gpu = rid.split("_")[1], rid.split("_")[2]
        m, p, meas = e["model"], e["parallel"], e["measured"]
        seq = int(m["seq_len"])
        model_name = f"{size}-s{seq}"
        # One file per shape, written by its first row (rows of other GPUs share it).
        models_seen = model_name in models
        models.add(model_name)
        with open(os.devnull if models_seen else os.path.join(ROOT, "models", model_name + ".yaml"), "w") as f:
            f.write("model:\n")
            f.write(f"  name: {model_name}\n")
            for k in ("layers", "hidden", "heads", "kv_heads"):
                f.write(f"  {k}: {int(m[k])}\n")
            f.write(f"  ffn_hidden: {int(m['ffn'])}\n  seq_len: {seq}\n  vocab: {int(m['vocab'])}\n")
            f.write("  activation: gelu\n  position_embedding: learned\n  norm: layernorm\n  bias: true\n"
                    "  tie_embeddings: true\n")
            f.write(f"  source: \"{e['source']['read_from']}\"\n")
            f.write(f"  notes: \"{m['arch']}; NumParams printed by llm-foundry: {m.get('num_params_printed')}\"\n")
        recompute = "full" if p["recompute"].startswith("full") else "none"
        gpus = int(e["hardware"]["num_gpus"])
        exp_name = rid.replace("_", "-")
        exp_path = os.path.join(ROOT, "experiments", exp_name + ".yaml")
        # A row declared a calibration case (DESIGN.md, Fidelity rules) stays one.
        calibration = os.path.exists(exp_path) and "role: calibration" in open(exp_path).read()
        with open(os.path.join(ROOT, "experiments", exp_name + ".yaml"), "w") as f:
            f.write("experiment:\n")
            f.write(f"  model: ../models/{model_name}.yaml\n")
            f.write(f"  cluster: ../clusters/{CLUSTERS[gpu]}.yaml\n")
            f.write(f"  gpus: {gpus}\n")
            f.write(f"  training: {{global_batch: {int(p['global_batch'])}, dtype: {dtype}, optimizer: adam}}\n")
            f.write("  plan:\n")
            f.write(f"    tp: 1\n    pp: 1\n    dp: {gpus}\n    micro_batch: {int(p['micro_batch'])}\n")
            f.write(f"    schedule: 1f1b\n    recompute: {recompute}\n    zero: 3\n    optimizer_impl: for-loop\n    framework: llm-foundry\n")
            if pure:
                f.write("    reduce_dtype: bf16\n")
            f.write("  measured:\n")
            if calibration:
                f.write("    role: calibration\n")
            f.write(f"    tokens_per_s: {meas['tokens_per_s_aggregate']}\n")
            src = f"{e['source']['paper']}, {e['source']['table']}"
            f.write(f"    source: \"{src}\"\n")
            f.write(f"    datapoint: {rid}\n")
            f.write("  notes: \"PyTorch FSDP (Composer, FULL_SHARD) under torch.autocast(bf16) over fp32 parameters: "
                    "framework llm-foundry with zero 3 (each MPT block an FSDP unit, gathered in bf16, gradients "
                    "reduced in fp32). The H100 rows do not state the network; the DGX H100 SuperPOD's 8 x 400 Gb/s "
                    "per node is assumed. The A100 80GB rows (1,600 Gb/s per node) run on Selene's nodes. "
                    "Optimizer: Composer's DecoupledAdamW (scripts/train/yamls/pretrain/mpt-*.yaml, decoupled_adamw), Adam's state stepped tensor by tensor in a Python loop of torch ops (composer/optim/decoupled_weight_decay.py adamw, 2023-24): optimizer_impl for-loop, 88 bytes a parameter. "
                    "Attention: MPT's triton flash kernel, priced as the GPU's flash figure. FP8 rows (amp_fp8): "
                    "Transformer Engine FP8 linears, attention and the LM head in bf16." +
                    (" Pure bf16 (Composer FSDP mixed_precision PURE): parameters gathered and gradients reduced in "
                     "bf16 (plan.reduce_dtype), the sharded fp32 parameters and optimizer state as amp_bf16; "
                     "the A100 40GB rows run on a MosaicML node assumed DGX-A100-like (clusters/mosaicml-a100-40gb)."
                     if pure else "") + "\"\n")
        written.append(exp_name)
    print("\n".join(written))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "..", "shared", "published", "modern.yaml"))
