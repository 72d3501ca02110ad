#!/usr/bin/python3
"""Renders Foresight's report (HTML and markdown, figures by matplotlib) from the data file that
`foresight report` writes.

Usage: make_report.py REPORT_DATA.json OUT_DIR   (the trace it names is read from beside it)
Writes OUT_DIR/report.html, OUT_DIR/report.md and OUT_DIR/figures/report-*.png. The HTML refers to
the figures by relative path and carries no script, so it renders offline in any browser.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import html
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_gantt  # noqa: E402
import validation_plot  # noqa: E402

BREAKDOWN = [  # key in breakdown_s, label, colour (the Gantt tool's palette where they overlap)
    ("compute", "compute", "#4C72B0"), ("recompute", "recompute", "#8172B2"),
    ("host_wait", "host wait", "#B07AA1"),
    ("tp_comm", "TP comm", "#C44E52"), ("ep_comm", "EP all-to-all", "#DD8452"),
    ("cp_comm", "CP K/V exchange", "#937860"),
    ("pp_comm_exposed", "PP exposed", "#CCB974"), ("dp_comm_exposed", "DP exposed", "#64B5CD"),
    ("optimizer", "optimizer", "#222222"), ("offload_stall", "offload stall", "#A0A0A0"),
    ("bubble", "bubble", "#E0E0E0"),
]


def fig_breakdown(search: dict, out: str) -> None:
    ranked = search["ranked"]
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(ranked) + 1.8))
    left = [0.0] * len(ranked)
    for key, label, colour in BREAKDOWN:
        vals = [r["breakdown_s"][key] for r in ranked]
        if any(v > 0 for v in vals):
            ax.barh(range(len(ranked)), vals, left=left, color=colour, label=label, edgecolor="none")
            left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(ranked)))
    ax.set_yticklabels([f"#{r['rank']} {r['plan_text']}" for r in ranked], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("iteration time on the critical stage (s)")
    ax.set_title(f"Where the time goes: the {len(ranked)} best plans for {search['model']} on "
                 f"{search['gpus']} GPUs ({search['cluster']})", fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def fig_pareto(search: dict, out: str) -> None:
    tokens = search["global_batch"] * search["seq_len"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    pts = search["fitting"]
    ax.scatter([p["memory_GB"] for p in pts], [tokens / p["iteration_s"] for p in pts], s=8, color="#9DB4D3",
               label=f"every plan that fits ({len(pts)})")
    front = search["pareto"]
    ax.plot([p["memory_GB"] for p in front], [p["tokens_per_s"] for p in front], "-o", color="#C44E52", ms=4,
            label=f"Pareto front ({len(front)})")
    ax.axvline(search["device_memory_GB"], color="black", lw=0.8, ls="--", label="device memory")
    ax.set_xlabel("memory of the most loaded GPU (GB)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_title(f"Throughput against memory per GPU: {search['model']} on {search['gpus']} GPUs", fontsize=10)
    ax.grid(True, lw=0.3, alpha=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def fig_closed_loop(loop: dict, out: str) -> None:
    cases = [c for c in loop["cases"] if c.get("measured_step_s") is not None]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for ax, (key, unit) in zip(axes, [("step_s", "step time (s)"), ("mem_GB", "peak memory per rank (GB)")]):
        pairs = [(c["measured_" + key], c["predicted_" + key]) for c in cases if c.get("measured_" + key) is not None]
        if not pairs:
            continue
        xs = [p[0] for p in pairs]
        ys = [p[1] for p in pairs]
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = min(xs + ys) / 1.2, max(xs + ys) * 1.2
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="grey", alpha=0.2,
                        label="+-5%")
        ax.scatter(xs, ys, s=20)
        ax.set_xlabel("measured " + unit)
        ax.set_ylabel("predicted " + unit)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.grid(True, lw=0.3, alpha=0.5)
        ax.legend(fontsize=8)
    host = loop.get("host", {})
    fig.suptitle(f"Closed loop: the simulator against the bundled trainer ({loop.get('backend', '?')} backend on "
                 f"{host.get('hostname', 'this machine')})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


class Doc:
    """One document written twice: as HTML and as markdown."""

    def __init__(self) -> None:
        self.html: list[str] = []
        self.md: list[str] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")
        self.md.append("#" * level + " " + text + "\n")

    def para(self, text: str) -> None:
        self.html.append(f"<p>{html.escape(text)}</p>")
        self.md.append(text + "\n")

    def figure(self, path: str, caption: str) -> None:
        self.html.append(f'<figure><img src="{html.escape(path)}" alt="{html.escape(caption)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        self.md.append(f"![{caption}]({path})\n")

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        self.html.append(f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>")
        self.md.append("| " + " | ".join(header) + " |\n| " + " | ".join("---" for _ in header) + " |\n" +
                       "".join("| " + " | ".join(r) + " |\n" for r in rows))


STYLE = """body{font-family:sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}figure{margin:1em 0}img{max-width:100%}
figcaption{font-size:13px;color:#555}"""


def build(data: dict, data_dir: str, out_dir: str) -> None:
    figs = os.path.join(out_dir, "figures")
    os.makedirs(figs, exist_ok=True)
    doc = Doc()
    doc.heading("Foresight report", 1)
    doc.para(f"Generated by `{data['command']}` (Foresight {data['version']}). Every figure is drawn from "
             "the data file report-data.json beside this page.")

    val = data["validation"]
    doc.heading("Predicted against published")
    validation_plot.draw(val, os.path.join(figs, "report-validation.png"))
    doc.figure("figures/report-validation.png", f"Predicted against published, {val['engine']} engine; the band is +-10%.")
    summaries = [[g["group"], str(g["cases"]), f"{g['mape_pct']:.1f}", f"{g['max_abs_pct']:.1f}"] for g in val["groups"]]
    for key, label in (("calibration", "calibration cases (in-sample)"), ("leave_one_out", "calibration cases (leave-one-out)")):
        g = val.get(key)
        if g and g["cases"]:
            summaries.append([label, str(g["cases"]), f"{g['mape_pct']:.1f}", f"{g['max_abs_pct']:.1f}"])
    doc.para("Prediction cases per source, then overall (the headline); calibration cases (measured.role: "
             "calibration) pin the parameters of scenarios/calibration.yaml and are reported apart, in-sample and "
             "each predicted by a fit made without it.")
    doc.table(["source", "cases", "MAPE (%)", "largest error (%)"], summaries)
    bars = val.get("error_bars")
    if bars and bars["cases"]:
        doc.para(f"Error bars: {bars['inside']} of {bars['cases']} prediction cases "
                 f"({100 * bars['inside'] / bars['cases']:.0f}%) fall inside the band their prediction carries "
                 "(measured over predicted time, 10th-90th percentile of the prediction cases of the same framework "
                 "and GPU generation).")

    def band_text(c):
        if "band" not in c:
            return "-"
        lo, hi = c["band"]
        return f"{lo:.3g}-{hi:.3g} ({'in' if c['inside_band'] else 'out'})"

    def error_text(c):
        text = f"{c['error_pct']:+.1f}"
        if "left_out_error_pct" in c:
            text += f" (left out {c['left_out_error_pct']:+.1f})"
        return text

    doc.table(["experiment", "quantity", "role", "published", "predicted", "error (%)", "measured/predicted time, band"],
              [[c["experiment"], c["quantity"], c.get("role", "prediction"), f"{c['published']:.4g}",
                f"{c['predicted']:.4g}", error_text(c),
                (f"{c['time_ratio']:.3f}; " if "time_ratio" in c else "") + band_text(c)] for c in val["cases"]])

    doc.heading("Predicted against measured on local GPUs (closed loop)")
    loop = data.get("closed_loop")
    if loop and loop.get("cases"):
        fig_closed_loop(loop, os.path.join(figs, "report-closed-loop.png"))
        doc.figure("figures/report-closed-loop.png", "Each plan predicted from the host profile, then run by the bundled "
                   "trainer; the band is +-5%.")

        def num(v, f):
            return "n/a" if v is None else format(v, f)
        doc.table(["plan", "ranks", "predicted step (s)", "measured step (s)", "error (%)",
                   "predicted peak (MB/rank)", "measured peak (MB/rank)", "memory error (%)"],
                  [[c["plan"], str(c["ranks"]), num(c["predicted_step_s"], ".4g"), num(c.get("measured_step_s"), ".4g"),
                    num(c.get("error_pct"), "+.1f"), num(c["predicted_mem_GB"] * 1e3, ".2f"),
                    num(None if c.get("measured_mem_GB") is None else c["measured_mem_GB"] * 1e3, ".2f"),
                    num(c.get("mem_error_pct"), "+.1f")] for c in loop["cases"]])
        doc.para(f"Step time: median |error| {loop['median_abs_pct']:.1f}%, largest {loop['max_abs_pct']:.1f}%; "
                 f"peak memory per rank: largest |error| {loop['mem_max_abs_pct']:.1f}% "
                 f"(`foresight validate --local --backend {loop.get('backend', 'cpu')}`).")
    else:
        doc.para("No closed-loop measurements yet: they come from `foresight validate --local`, which writes "
                 "reports/closed-loop.json.")

    tl = data["timeline"]
    doc.heading("Timeline of one iteration")
    with open(os.path.join(data_dir, tl["trace_file"])) as f:
        trace = json.load(f)
    trace_gantt.draw(trace, os.path.join(figs, "report-timeline.png"),
                     f"{tl['experiment']}: one iteration, {tl['engine']} engine, {tl['iteration_s']:.2f} s")
    doc.figure("figures/report-timeline.png", f"Per-stage timeline of {tl['experiment']} (stage compute streams and "
               "data-parallel streams; first 40 rows).")

    s = data["plan_search"]
    doc.heading("Plan search")
    doc.para(f"{s['model']} on {s['gpus']} GPUs of {s['cluster']}, global batch {s['global_batch']}, as "
             f"{s['framework']} runs it: {s['enumerated']} plans enumerated, {s['pruned_memory']} do not fit, "
             f"{s['evaluated']} simulated.")
    fig_breakdown(s, os.path.join(figs, "report-breakdown.png"))
    doc.figure("figures/report-breakdown.png", "Breakdown of the iteration time of the best plans (analytic engine).")
    def range_text(r):
        band = r.get("iteration_s_range")
        return f"{band[0]:.3f}-{band[1]:.3f}" if isinstance(band, list) else "-"

    doc.table(["rank", "plan", "iteration (s)", "range (s)", "SimGrid (s)", "tokens/s", "TFLOP/s per GPU", "MFU",
               "memory (GB)"],
              [[str(r["rank"]), r["plan_text"], f"{r['iteration_s']:.3f}", range_text(r),
                f"{r['simgrid_iteration_s']:.3f}" if r.get("simgrid_iteration_s") is not None else "-",
                f"{r['tokens_per_s']:.0f}", f"{r['tflops_per_gpu']:.1f}", f"{r['mfu']:.3f}", f"{r['memory_GB']:.1f}"]
               for r in s["ranked"]])
    fig_pareto(s, os.path.join(figs, "report-pareto.png"))
    doc.figure("figures/report-pareto.png", "Every plan that fits, and the plans no other beats on both throughput "
               "and memory per GPU.")
    pub = s.get("published_plan")
    if pub:
        where = f"rank {pub['rank']} of {pub['of']}" if pub.get("rank") else "does not fit by the memory model"
        doc.para(f"The published plan ({pub['plan_text']}) simulates at {pub['iteration_s']:.3f} s per iteration: {where}.")
    doc.para("TFLOP/s per GPU and MFU count model FLOPs (no recompute).")

    with open(os.path.join(out_dir, "report.html.partial"), "w") as f:
        f.write('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Foresight report</title>'
                f"<style>{STYLE}</style></head><body>\n" + "\n".join(doc.html) + "\n</body></html>\n")
    with open(os.path.join(out_dir, "report.md.partial"), "w") as f:
        f.write("\n".join(doc.md))
    os.replace(os.path.join(out_dir, "report.html.partial"), os.path.join(out_dir, "report.html"))
    os.replace(os.path.join(out_dir, "report.md.partial"), os.path.join(out_dir, "report.md"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("out_dir")
    a = ap.parse_args()
    with open(a.data) as f:
        build(json.load(f), os.path.dirname(os.path.abspath(a.data)), a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
