#!/usr/bin/env python3
"""Runs a subset of ../shared/bench/torch_gpt_baseline.py: its GEMM and SDPA timings and the named
GPT rows, eager and (optionally) compiled, printing the same JSON lines. The shared script runs every
row at import; a 15-minute GPU window affords only the rows the trainer is compared with.
  torch-baseline-subset.py BASELINE_PY --eager gpt-350m,gpt-1.3b [--compile gpt-1.3b]"""
import argparse, sys

ap = argparse.ArgumentParser()
ap.add_argument("baseline")
ap.add_argument("--eager", default="gpt-350m,gpt-1.3b")
ap.add_argument("--compile", default="")
a = ap.parse_args()
src = open(a.baseline).read()
head, sep, _ = src.partition("gemm(); sdpa()")
if not sep:
    sys.exit(f"{a.baseline}: no 'gemm(); sdpa()' line to split at; run the script whole instead")
# The shared script's config table follows the timings; keep it, drop its loops.
tail = src[len(head):]
cfg_src = tail[tail.index("cfgs ="):tail.index("for c in cfgs")]
ns = {"__name__": "baseline"}
exec(compile(head + cfg_src, a.baseline, "exec"), ns)
cfgs = {c[0]: c for c in ns["cfgs"]}
ns["gemm"](); ns["sdpa"]()
for names, comp in ((a.eager, False), (a.compile, True)):
    for n in filter(None, names.split(",")):
        if n not in cfgs:
            sys.exit(f"--{'compile' if comp else 'eager'}: unknown row '{n}' (rows: {', '.join(cfgs)})")
        ns["run"](*cfgs[n], compile_=comp)
