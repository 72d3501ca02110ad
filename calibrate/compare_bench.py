#!/usr/bin/env python3
"""The short table gpu-test.sh prints last: each benchmark row of ours, PyTorch's rate on the same
row when measured, the ratio, and the issue's target (GEMM >= 0.95x torch.matmul, attention >= 0.9x
SDPA, memory-bound kernels >= 80% of the device-to-device copy bandwidth)."""
import json
import os
import sys

ours = json.load(open(sys.argv[1]))["rows"] if os.path.exists(sys.argv[1]) else []
torch_rows = {}
if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
    torch_rows = {r["name"]: r for r in json.load(open(sys.argv[2]))["rows"]}
copy = next((r["rate"] for r in ours if r["name"] == "copy d2d"), None)
print(f"{'kernel':34s} {'ours':>10s} {'torch':>10s} {'ratio':>7s}  target")
for r in ours:
    # Variants of a kernel (e.g. "attention fwd+bwd causal cp.async") compare with the same torch row.
    t = torch_rows.get(r["name"]) or torch_rows.get(r["name"].removesuffix(" cp.async"))
    if r["unit"] == "GB/s" and r["name"] != "copy d2d":
        ratio, target = (r["rate"] / copy if copy else float("nan")), ">= 0.80 of copy"
    elif r["name"].startswith("gemm"):
        ratio, target = (r["rate"] / t["rate"] if t else float("nan")), ">= 0.95 of torch.matmul"
    elif r["name"].startswith("attention"):
        ratio, target = (r["rate"] / t["rate"] if t else float("nan")), ">= 0.90 of SDPA"
    else:
        ratio, target = float("nan"), ""
    ok = "" if ratio != ratio else ("  ok" if ratio >= float(target.split()[1]) else "  MISSED")
    tr = f"{t['rate']:10.1f}" if t else f"{'-':>10s}"
    print(f"{r['name']:34s} {r['rate']:10.1f} {tr} {ratio:7.2f}  {target}{ok}")
if not ours:
    print("(no benchmark results: bench_kernels did not run)")
