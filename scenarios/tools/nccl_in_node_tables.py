#!/usr/bin/env python3
"""Writes scenarios/collectives/<gpu>.yaml: NCCL collective times inside one NVSwitch node as
nccl-tests measured them, from the tables of ai-dynamo/aiconfigurator (a git mirror of it; tables
under aic-core/src/aiconfigurator_core/systems/data/<system>/comm/nccl/<version>/nccl_perf.parquet,
collected by collector/network/collect_nccl.py: all_gather_perf, reduce_scatter_perf,
all_reduce_perf and alltoall_perf with -b = -e = size, fp16, 40 warm-up and 60-100 timed iterations,
the out-of-place time; message_size there in elements). The cost model (cost_models/in_node_nccl.hpp)
prices a collective inside one node at these times.

Sizes follow nccl-tests' convention, which is CommModel's: all-gather the output, reduce-scatter
the input, all-to-all the bytes each rank sends, all-reduce the buffer. Where a GPU has tables of
several NCCL releases, each point is the median over them; then each time is lifted to the largest
at any smaller size (a few small-message points of the sweeps fall below their neighbours).

Usage: python3 scenarios/tools/nccl_in_node_tables.py MIRROR [WORKDIR]
  MIRROR: the aiconfigurator git directory (e.g. /work/.mirror/ai-dynamo+aiconfigurator/repo)
  WORKDIR: where the tables are dumped (default /tmp/nccl_in_node); needs node and
           `npm install hyparquet hyparquet-compressors` run there first (the reader,
           scenarios/tools/parquet_to_tsv.mjs, is copied in and run from there).
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kernel_ratios import mirror_and_work, table  # noqa: E402  (aiconfigurator's tables as rows)
OUT = os.path.join(HERE, "..", "collectives")
# aiconfigurator system -> NCCL releases measured there, and the scenario GPU files that take the
# table (the same NVSwitch generation and NVLink count: Grand Teton's H100s sit on the same
# 4th-generation NVSwitch as a DGX H100's). Hopper and the 8-GPU Blackwell boards: the NCCL
# releases measured (2.23-2.29, 2024-26) are those of the runs the model predicts on them. The one A100 table (a100_sxm, NCCL
# 2.27.3 of 2025) is not used: the A100 runs on record are of NCCL 2.7-2.12 (2020-22), and where
# they time in-node collectives alone, Korthikanti et al.'s 2022 per-layer times on Selene
# (tensor-parallel 8, sequence-parallel all-gathers and reduce-scatters of 50-100 MB) run as fast as
# NCCL's tuner formula, while the 2.27.3 table is 1.2-1.45x slower there (all-gather 16-64 MiB);
# with it the ten Table 4 layer times move 2.1% -> 4.0% MAPE. GB200's and GB300's tables (gb200,
# gb300) time groups of 2 and 4 GPUs only, while an NVL72 rack's tensor, expert and data-parallel
# groups span 8 to 72 GPUs over the NVLink switch trays: not used either.
SYSTEMS = {
    "h100_sxm": (["2.23", "2.27.3", "2.29.2"], ["h100-sxm", "h100-grand-teton"]),
    "h200_sxm": (["2.23", "2.26.2", "2.29.2"], ["h200-sxm"]),
    "b200_sxm": (["2.27.3", "2.27.5", "2.28.9", "2.29.2"], ["b200-sxm"]),
    "b300_sxm": (["2.27", "2.29.2"], ["b300-sxm"]),
}
OPS = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce",
       "alltoall": "all-to-all"}


def main():
    mirror, work = mirror_and_work(__doc__, "/tmp/nccl_in_node")
    commit = subprocess.run(["git", "-C", mirror, "rev-parse", "--short", "HEAD"], capture_output=True, check=True,
                            text=True).stdout.strip()
    for system, (versions, gpus) in SYSTEMS.items():
        points = {}  # (op, ranks, bytes) -> [us per version]
        device = ""
        for v in versions:
            for r in table(mirror, work, system, "comm", f"nccl/{v}", "nccl_perf.parquet"):
                if r["nccl_dtype"] != "half" or r["op_name"] not in OPS:
                    continue
                device = r.get("device", device) or device
                key = (OPS[r["op_name"]], int(r["num_gpus"]), int(r["message_size"]) * 2)
                points.setdefault(key, []).append(float(r["latency"]) * 1e3)
        sizes = sorted({k[2] for k in points})
        curves = sorted({(k[0], k[1]) for k in points}, key=lambda c: (list(OPS.values()).index(c[0]), c[1]))
        for gpu in gpus:
            lines = [
                f"# Written by scenarios/tools/nccl_in_node_tables.py from ai-dynamo/aiconfigurator @ {commit}; do not edit.",
                "nccl_in_node:",
                f"  gpu: {gpu}",
                f"  measured: \"{device or system}, nccl-tests fp16 in one 8-GPU NVSwitch node, NCCL "
                f"{' / '.join(versions)}{' (median)' if len(versions) > 1 else ''}\"",
                f"  source: \"ai-dynamo/aiconfigurator @ {commit}: aic-core/src/aiconfigurator_core/systems/data/{system}/"
                f"comm/nccl/<version>/nccl_perf.parquet (collector/network/collect_nccl.py)\"",
                f"  bytes: [{', '.join(str(s) for s in sizes)}]",
                "  curves:",
            ]
            for op, n in curves:
                us, floor = [], 0.0
                for s in sizes:
                    vals = points.get((op, n, s))
                    if not vals:
                        sys.exit(f"{system}: no {op} x{n} at {s} B")
                    # A sweep's noise times some small messages faster than smaller ones (H100
                    # all-to-all x8: 11.9 us at 2 KiB, 8.6 at 4 KiB): the running maximum keeps cost
                    # from falling with size, as the loader requires.
                    floor = max(floor, float(f"{statistics.median(vals):.4g}"))
                    us.append(f"{floor:.4g}")
                lines.append(f"    - {{collective: {op}, ranks: {n}, us: [{', '.join(us)}]}}")
            path = os.path.join(OUT, f"{gpu}.yaml")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            print(f"{path}: {len(curves)} curves x {len(sizes)} sizes")


if __name__ == "__main__":
    main()
