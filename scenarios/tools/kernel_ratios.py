#!/usr/bin/env python3
"""Reproduces the kernel speed ratios between two GPUs that scenarios/gpus/gb300.yaml (GB300 over
GB200) and b300-sxm.yaml (B300 over B200) take from the measured
tables of ai-dynamo/aiconfigurator (a git mirror of it; tables under
aic-core/src/aiconfigurator_core/systems/data/<system>/{gemm,attention}/<framework>/<version>/).

GEMMs: bf16 (and fp8) F.linear latencies; a ratio per shape both parts hold among training-size
shapes (m, n 4096-32768, K 1024-16384), its median per harness version, then the median over
versions. Attention: causal bf16 context (prefill) attention with a bf16 KV cache, head dim 128,
sequence >= 2048 and >= 8192 tokens per call, likewise.

Usage: python3 scenarios/tools/kernel_ratios.py MIRROR [WORKDIR [BASE NEW]]
  MIRROR: the aiconfigurator git directory (e.g. /work/.mirror/ai-dynamo+aiconfigurator/repo)
  WORKDIR: where the tables are dumped (default /tmp/kernel_ratios); needs node and
           `npm install hyparquet hyparquet-compressors` run there first (the reader,
           scenarios/tools/parquet_to_tsv.mjs, is copied in and run from there).
  BASE NEW: aiconfigurator's system names, the ratio being NEW's speed over BASE's (default gb200 gb300).
"""
import csv
import os
import statistics
import subprocess
import sys

DATA = "aic-core/src/aiconfigurator_core/systems/data"
VERSIONS = ["sglang/0.5.9", "sglang/0.5.10", "sglang/0.5.14", "trtllm/1.3.0rc10", "trtllm/1.3.0rc20",
            "vllm/0.19.0", "vllm/0.24.0"]
HERE = os.path.dirname(os.path.abspath(__file__))


def table(mirror, work, system, kind, version, name):
    out = os.path.join(work, f"{system}_{kind}_{version.replace('/', '_')}.tsv")
    if not os.path.exists(out):
        parquet = out[:-4] + ".parquet"
        blob = subprocess.run(["git", "-C", mirror, "show", f"HEAD:{DATA}/{system}/{kind}/{version}/{name}"],
                              capture_output=True, check=True).stdout
        with open(parquet, "wb") as f:
            f.write(blob)
        # Node resolves the script's imports from its own folder: run a copy inside WORKDIR, where the
        # npm packages are installed.
        script = os.path.join(work, "parquet_to_tsv.mjs")
        if not os.path.exists(script):
            with open(os.path.join(HERE, "parquet_to_tsv.mjs")) as src, open(script, "w") as dst:
                dst.write(src.read())
        subprocess.run(["node", script, parquet, out], cwd=work, check=True, capture_output=True)
    with open(out) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def gemm_times(rows, dtype):
    t = {}
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        if r["gemm_dtype"] == dtype and 4096 <= m <= 32768 and 4096 <= n <= 32768 and 1024 <= k <= 16384:
            t[(m, n, k)] = float(r["latency"])
    return t


def attention_times(rows):
    t = {}
    for r in rows:
        if r["attn_dtype"] != "bfloat16" or r["kv_cache_dtype"] != "bfloat16" or int(r["head_dim"]) != 128:
            continue
        b, s = int(r["batch_size"]), int(r["isl"])
        if s >= 2048 and b * s >= 8192:
            t[(r["kernel_source"], b, s, int(r["num_heads"]), int(r["num_key_value_heads"]))] = float(r["latency"])
    return t


def median_ratio(slow, fast):
    shared = [k for k in slow if k in fast]
    return statistics.median(slow[k] / fast[k] for k in shared), len(shared)


def mirror_and_work(doc, default_work):
    """The MIRROR and WORKDIR arguments of a script reading aiconfigurator's tables (WORKDIR created);
    without MIRROR, the script's usage `doc` and exit status 2."""
    if len(sys.argv) < 2:
        print(doc)
        sys.exit(2)
    work = sys.argv[2] if len(sys.argv) > 2 else default_work
    os.makedirs(work, exist_ok=True)
    return sys.argv[1], work


def main():
    mirror, work = mirror_and_work(__doc__, "/tmp/kernel_ratios")
    base, new = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("gb200", "gb300")
    for label, kind, name, pick in [("GEMM bf16", "gemm", "gemm_perf.parquet", lambda r: gemm_times(r, "bfloat16")),
                                    ("GEMM fp8", "gemm", "gemm_perf.parquet", lambda r: gemm_times(r, "fp8")),
                                    ("attention", "attention", "context_attention_perf.parquet", attention_times)]:
        ratios = []
        for v in VERSIONS:
            try:
                slow, fast = table(mirror, work, base, kind, v, name), table(mirror, work, new, kind, v, name)
            except subprocess.CalledProcessError:
                print(f"{label:10s} {v:18s} not measured on both")
                continue
            r, n = median_ratio(pick(slow), pick(fast))
            ratios.append(r)
            print(f"{label:10s} {v:18s} {n:5d} shapes  {new}/{base} {r:.3f}")
        print(f"{label:10s} median over versions {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
