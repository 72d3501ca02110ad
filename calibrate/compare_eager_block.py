#!/usr/bin/env python3
"""The execution model's op table for fms-fsdp's Llama 2 7B block beside what
calibrate/bench_eager_block.py measured on a GPU (issue 22, notes/status.md session 49/50).

    compare_eager_block.py BENCH.json --foresight BIN [--scenarios DIR] [--gpu h200-sxm]
    compare_eager_block.py BENCH.json --model-eager OPS.json [--model-compiled OPS.json]
    compare_eager_block.py - --foresight BIN        (the model's side alone)

With --foresight, the tables come from `BIN simulate EXPERIMENT --ops --json` of fms-fsdp's 7B
plan (HSDP over 96 GPUs, as the README's H100 row, batch 2 x 4096) on a DGX of --gpu, eager and
compiled, at burst clocks as a short benchmark runs; the experiment files and the tables are
written next to BENCH.json (or to the working directory for -). The op table is one micro-batch
on one GPU, communication excluded. Needs no PyTorch."""
import argparse
import json
import os
import subprocess
import sys


def model_tables(foresight, scenarios, gpu, out):
    """Writes the plan as an experiment file (absolute paths into the library) and keeps the
    model's --ops --json for the eager and the compiled plan beside OUT."""
    cluster = {"h200-sxm": "dgx-h200-superpod.yaml", "h100-sxm": "dgx-h100-superpod.yaml"}.get(gpu)
    if cluster is None:
        sys.exit(f"bench_eager_block.py: --gpu {gpu}: not h200-sxm or h100-sxm")
    lib = os.path.abspath(scenarios)
    paths = []
    for compiled in ("false", "true"):
        exp = f"{out}.fms-7b-{gpu}-compile-{compiled}.yaml"
        with open(exp, "w") as f:
            f.write("experiment:\n"
                    f"  model: {lib}/models/llama2-7b.yaml\n"
                    f"  cluster: {lib}/clusters/{cluster}\n"
                    "  gpus: 96\n"
                    "  training: {global_batch: 192, dtype: bf16, optimizer: adam, burst_clocks: true}\n"
                    "  plan: {tp: 1, pp: 1, dp: 96, micro_batch: 2, schedule: 1f1b, recompute: none, "
                    f"recompute_layers: 0, zero: 3, shard_group: 8, compile: {compiled}, framework: fms-fsdp}}\n")
        ops = exp.replace(".yaml", ".ops.json")
        with open(ops, "w") as f:
            subprocess.run([foresight, "simulate", exp, "--ops", "--json"], stdout=f, check=True)
        paths.append(ops)
    return paths


PACED = ("qkv", "projection", "fc1", "fc2", "attention_core")


def model_ops(path):
    """The layer's op table (fwd + bwd per class, ms) and its total, on one GPU: the model paces
    GEMMs and attention by the slowest of the plan's GPUs (slowest_device.compute_factor), which
    a single-GPU benchmark does not see, so that factor is taken out again."""
    d = json.load(open(path))
    cf = d.get("slowest_device", {}).get("compute_factor", 1.0)
    kinds = d["ops"]["layer_kinds"][0]
    ops = {k: kinds["forward_ms"][k] + kinds["backward_ms"][k] for k in kinds["forward_ms"]}
    paced = sum(ops[k] for k in PACED)
    for k in PACED:
        ops[k] /= cf
    layer = kinds["layer_forward_ms"] + kinds["layer_backward_ms"] - paced * (1 - 1 / cf)
    return ops, layer, cf


def compare(rows, eager_path, compiled_path):
    m, m_layer, cf = model_ops(eager_path)
    meas = {r["class"]: r["median_ms"] for r in rows if r.get("class")}
    nan = float("nan")
    # The model's classes: norms = both norms; residual = both residual adds, RoPE, output layout.
    pairs = [("norms (2 RMSNorms)", 2 * meas.get("norms_x1", nan), m["norms"]),
             ("residual group (2 adds, RoPE, layout)",
              2 * meas.get("residual_x1", nan) + meas.get("rope", nan) + meas.get("layout", nan), m["residual"]),
             ("activation (SiLU * up)", meas.get("activation", nan), m["activation"]),
             ("attention core", meas.get("attention_core", nan), m["attention_core"])]
    for c in ("qkv", "projection", "fc1", "fc2"):
        pairs.append((f"GEMM {c}", meas.get(c, nan), m[c]))
    pairs.append(("block eager", meas.get("block_eager", nan), m_layer))
    if compiled_path:
        pairs.append(("block compiled", meas.get("block_compiled", nan), model_ops(compiled_path)[1]))
    print(f"\nThe model's GEMM and attention times divided by its slowest-device pace {cf:.4f} (one GPU here).")
    print("\n| op class (fwd+bwd, one micro-batch) | measured ms | model ms | model / measured |")
    print("| --- | --- | --- | --- |")
    for name, got, want in pairs:
        print(f"| {name} | {got:.3f} | {want:.3f} | {want / got:.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", help="bench_eager_block.py's OUT.json, or - for none")
    ap.add_argument("--foresight", help="the foresight binary: make the model's op tables")
    ap.add_argument("--scenarios", default="scenarios", help="the scenario library (with --foresight)")
    ap.add_argument("--gpu", default="h200-sxm", help="h200-sxm (DGX H200) or h100-sxm (DGX H100)")
    ap.add_argument("--model-eager", help="foresight simulate --ops --json of the eager plan")
    ap.add_argument("--model-compiled", help="the same for the compiled plan")
    a = ap.parse_args()
    if a.foresight:
        stem = a.bench if a.bench != "-" else "eager-block"
        a.model_eager, a.model_compiled = model_tables(a.foresight, a.scenarios, a.gpu, stem)
    if not a.model_eager:
        sys.exit("compare_eager_block.py: give --foresight BIN or --model-eager OPS.json")
    rows = json.load(open(a.bench))["rows"] if a.bench != "-" else []
    compare(rows, a.model_eager, a.model_compiled)


if __name__ == "__main__":
    main()
