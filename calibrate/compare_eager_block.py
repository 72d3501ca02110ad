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


def peak_GBps(scenarios, gpu):
    """The GPU file's hbm_bandwidth_GBps (read by hand: the lent machine may lack PyYAML)."""
    with open(os.path.join(scenarios, "gpus", f"{gpu}.yaml")) as f:
        for line in f:
            if line.strip().startswith("hbm_bandwidth_GBps:"):
                return float(line.split(":")[1])
    sys.exit(f"compare_eager_block.py: no hbm_bandwidth_GBps in {gpu}.yaml")


def derived_figures(rows, peak):
    """The GPU-file figures these rows measure, derived as the A100 and H100 SXM files derive theirs
    (scenarios/gpus/*.yaml): eager_norm_efficiency from the fms RMSNorm chain (36 bytes an element
    forward, 92 backward: core/framework.cpp), eager_strided_efficiency from the complex RoPE (of
    its 20 bytes an element each way the casts' 12 stream at the copy row's rate, the multiply's 8
    read a broadcast operand), and two checks of the assumption that fms's pair sums run at that
    rate too (its RoPE forward: 12 streaming, 24 strided; the sum alone). Launches are not taken
    out (a few tens of microseconds against milliseconds here)."""
    by = {r["name"]: r for r in rows}
    n_act = None
    if "fms RoPE fwd (q and k)" in by:
        n_act = by["fms RoPE fwd (q and k)"]["bytes"] / 72.0
    copy = by.get("copy bf16 (reference)", {}).get("GBps")
    if not n_act or not copy:
        print("\nNo derived figures: the copy or RoPE rows are missing.")
        return
    out = [("memory_efficiency (copy, for reference)", copy / peak)]
    norm = by.get("fms RMSNorm fwd+bwd (one norm)")
    if norm:
        out.append(("eager_norm_efficiency (fms chain, 128 B/elem)", 128 * n_act / (norm["median_ms"] * 1e-3) / 1e9 / peak))

    def strided(row, streaming, slow):
        r = by.get(row)
        if not r:
            return float("nan")
        t = r["median_ms"] * 1e-3 - streaming * n_act / (copy * 1e9)
        return slow * n_act / t / 1e9 / peak if t > 0 else float("nan")
    out.append(("eager_strided_efficiency (complex RoPE fwd+bwd)", strided("complex RoPE fwd+bwd (torchtitan 2024, q and k)", 48, 32)))
    out.append(("  check: fms RoPE fwd, pair sum included", strided("fms RoPE fwd (q and k)", 24, 48)))
    sum5 = by.get("fms RoPE's sum(5) alone (fp32, inner size 2)")
    if sum5:
        out.append(("  check: the size-2 sum alone", sum5["GBps"] / peak))
    print(f"\nDerived GPU-file figures (of {peak:.0f} GB/s peak):")
    print("\n| figure | value |\n| --- | --- |")
    for name, v in out:
        print(f"| {name} | {v:.3f} |")


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
    if rows:
        derived_figures(rows, peak_GBps(a.scenarios, a.gpu))


if __name__ == "__main__":
    main()
