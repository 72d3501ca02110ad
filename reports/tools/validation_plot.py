#!/usr/bin/python3
"""Draws predicted against published values (PNG) from `foresight validate --json`.

One panel per kind of quantity (iteration time, one layer's forward/backward, throughput,
speedup), log-log, one marker per source, the diagonal and a +-10% band. TFLOP/s rows are left
out: they restate the iteration time under the source's FLOP definition.
Usage: foresight validate --json | validation_plot.py - OUT.png   (or a JSON file instead of -)
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [
    ("iteration time (s)", ("iteration_s",)),
    ("one layer, A100 (ms)", ("forward_ms", "backward_ms")),
    ("throughput (tokens/s)", ("tokens_per_s",)),
    ("speedup (x)", ("speedup",)),
]
MARKERS = "osD^v<>pX*"


def draw(data: dict, out: str) -> None:
    """Writes the predicted-vs-published figure of `validate --json` output to the PNG `out`."""
    cases = data["cases"]
    groups = sorted({c["group"] for c in cases})
    style = {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(groups)}
    colour = {g: plt.cm.tab10(i % 10) for i, g in enumerate(groups)}

    panels = [(title, keys) for title, keys in PANELS if any(c["quantity"] in keys for c in cases)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        sel = [c for c in cases if c["quantity"] in keys]
        lo = min(min(c["published"], c["predicted"]) for c in sel) / 1.5
        hi = max(max(c["published"], c["predicted"]) for c in sel) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2,
                        label="+-10%")
        for g in groups:
            pts = [c for c in sel if c["group"] == g]
            if pts:
                ax.scatter([c["published"] for c in pts], [c["predicted"] for c in pts], marker=style[g],
                           color=colour[g], s=36, label=g)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("published")
        ax.set_ylabel("predicted")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    handles, labels = {}, []
    for ax in axes[0]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in handles:
                handles[l] = h
                labels.append(l)
    fig.legend([handles[l] for l in labels], labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    fig.suptitle(f"Foresight ({data['engine']} engine) against published measurements: overall MAPE "
                 f"{data['mape_pct']:.1f}%", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("validation", help="validate --json output, or - for standard input")
    ap.add_argument("out")
    a = ap.parse_args()
    draw(json.load(sys.stdin if a.validation == "-" else open(a.validation)), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
