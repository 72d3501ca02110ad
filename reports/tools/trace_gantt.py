#!/usr/bin/python3
"""Draws a Gantt chart (PNG) of a Chrome/Perfetto trace written by `foresight simulate --trace`.

One row per simulated stream (stage compute, data-parallel communication, offload copies),
one colour per task category. Usage: trace_gantt.py TRACE.json OUT.png [--title TEXT] [--max-rows N]
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B2", "tp_comm": "#C44E52",
    "ep_comm": "#DD8452", "cp_comm": "#937860", "pp_comm": "#CCB974", "dp_comm": "#64B5CD", "optimizer": "#222222",
    "offload": "#A0A0A0", "host": "#B07AA1",
}


def draw(trace: dict, out: str, title: str = "", max_rows: int = 40) -> None:
    """Writes the Gantt chart of a Chrome trace (already parsed) to the PNG file `out`."""
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    rows = sorted({e["tid"] for e in spans})[:max_rows]
    index = {tid: i for i, tid in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(14, 0.35 * len(rows) + 1.5))
    for cat, colour in COLOURS.items():
        bars = [(e["ts"] / 1e6, e["dur"] / 1e6, index[e["tid"]]) for e in spans if e["cat"] == cat and e["tid"] in index]
        for start, dur, row in bars:
            ax.broken_barh([(start, dur)], (row - 0.4, 0.8), facecolors=colour, linewidth=0)
        if bars:
            ax.plot([], [], color=colour, linewidth=8, label=cat)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([names.get(t, str(t)) for t in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=9, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    ap.add_argument("--max-rows", type=int, default=40)
    a = ap.parse_args()
    with open(a.trace) as f:
        draw(json.load(f), a.out, a.title, a.max_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
