#!/usr/bin/env python3
"""Writes the scenario files of the torchtitan rows of ../shared/published/modern.yaml that the
schema can express: bf16 (FSDP2 param bfloat16 / reduce float32) or torchao Float8 linears
(training.dtype fp8 with fp8_scaling tensorwise or rowwise), with or without torch.compile,
per-op selective, full or no activation checkpointing, FSDP2 alone or with TP (vanilla or async,
sequence-parallel norms) or context parallelism (all-gather of K/V, torchtitan's default rotate
method). Rows with pipelines take torchtitan's defaults where the table is silent, from the
torchtitan commit the table names (PIPELINE_DEFAULTS): as many micro-batches as pipeline ranks and
generate_split_points' layer split, FSDP keeping parameters gathered after forward. Rows that do not
say whether torch.compile was on, and rows whose GPU kind is not stated, are left out;
scenarios/README.md lists them with what they lack.

Usage: python3 scenarios/tools/torchtitan_experiments.py ../shared/published/modern.yaml
"""
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Model in the row (name, sequence length) -> model file.
MODELS = {
    ("Llama 3.1 8B", 8192): "llama3.1-8b",
    ("Llama 3.1 8B", 32768): "llama3.1-8b-s32768",
    ("Llama 3.1 8B", 65536): "llama3.1-8b-s65536",
    ("Llama 3.1 8B", 131072): "llama3.1-8b-s131072",
    ("Llama 3.1 8B", 262144): "llama3.1-8b-s262144",
    ("Llama 3 8B", 8192): "llama3.1-8b",
    ("Llama 3.1 70B", 8192): "llama3.1-70b",
    ("Llama 3 70B", 8192): "llama3.1-70b",
    ("Llama 3.1 405B", 8192): "llama3.1-405b",
    ("Llama 3.1 405B", 32768): "llama3.1-405b-s32768",
    ("Llama 3.1 405B", 65536): "llama3.1-405b-s65536",
    ("Llama 3.1 405B", 131072): "llama3.1-405b-s131072",
    ("Llama 3.1 405B", 262144): "llama3.1-405b-s262144",
    ("Llama 2 13B", 4096): "llama2-13b",
    ("Llama 2 70B", 4096): "llama2-70b",
}


# Rows declared as calibration cases (DESIGN.md, Fidelity rules): two pin the Grand Teton H100's
# sustained clock under its 500 W limit (scenarios/calibration.yaml, h100_500w_clock_scale); every
# other row is a prediction.
CALIBRATION = {"torchtitan_202412_t1_llama3.1_8b_8xh100_fsdp", "torchtitan_202412_t1_llama3.1_8b_8xh100_fsdp_compile",
               # and the speed of rowwise-scaled FP8 GEMMs (fp8_rowwise_gemm_scale): both 70B rowwise rows,
               # so that leaving one out still leaves a case that pins the parameter
               "torchtitan_202506_asynctp_llama3.1_70b_256xh100_fsdp32_tp8_float8rowwise_asynctp",
               "torchtitan_202506_asynctp_llama3.1_70b_256xh100_fsdp32_tp8_float8rowwise_vanillatp"}


def cluster_of(e):
    gpu = e["hardware"]["gpu"]
    if "Grand Teton" in gpu or "lower TDP SXM H100" in gpu:
        return "grand-teton-h100"
    if gpu.startswith("NVIDIA H200"):
        return "dgx-h200-superpod"  # 8 H200 on NVLink, 400 Gb/s per GPU (ConnectX-7): as the row states
    if "A100 80GB" in gpu:
        return "selene"  # the April 2024 doc states no network: Selene's A100 nodes (8 x 200 Gb/s) assumed
    return None  # H100 of unstated kind, H200 without stated memory: not written


def recompute_of(text):
    t = str(text)
    if t.startswith("selective per-op"):
        return "selective-op"
    if t.startswith("full"):
        return "full"
    if t == "none":
        return "none"
    return None


# torchtitan compiles the loss with --training.compile since pytorch/torchtitan#1033 (commit
# bbb1b616e, 2025-04-02); the 2024 runs' train.py left it eager. The torchtitan commit of each
# table, by row prefix (the sources' read_from).
LOSS_COMPILED = {"torchtitan_202404_": False,  # 157a12c56228, 2024-04-24
                 "torchtitan_202408_": False,
                 "torchtitan_202412_": False,  # 9dec370ad26b, 2024-12-26
                 "torchtitan_202506_": True}   # 820504e20d11 / e7c0cae934df, June 2025


def loss_compiled(rid):
    for prefix, v in LOSS_COMPILED.items():
        if rid.startswith(prefix):
            return v
    raise SystemExit(f"{rid}: torchtitan version unknown: add its prefix to LOSS_COMPILED")


# Whether the table's torchtitan stepped AdamW with torch.optim's foreach ops (plan.optimizer_impl):
# 157a12c56228's train.py passes foreach=True; 9dec370ad26b's build_optimizers passes
# foreach = not --optimizer.fused, which is off by default (config_manager.py, store_true) and set
# in none of train_configs/*.toml; June 2025's OptimizerConfig.implementation defaults to "fused".
FOREACH_OPTIMIZER = {"torchtitan_202404_": True,
                     "torchtitan_202408_": True,
                     "torchtitan_202412_": True,
                     "torchtitan_202506_": False}


def foreach_optimizer(rid):
    for prefix, v in FOREACH_OPTIMIZER.items():
        if rid.startswith(prefix):
            return v
    raise SystemExit(f"{rid}: torchtitan version unknown: add its prefix to FOREACH_OPTIMIZER")


# torchtitan versions whose pipeline defaults were read (row prefix -> commit): with no
# pipeline_parallel_microbatches, as many micro-batches as pipeline ranks (build_pipeline_schedule);
# with no pipeline_parallel_split_points, generate_split_points (torchtitan/parallelisms/
# pipelining_utils.py); with PP, apply_fsdp sets reshard_after_forward False.
PIPELINE_DEFAULTS = {"torchtitan_202412_": "9dec370ad26b"}


def pipeline_defaults(rid):
    for prefix, commit in PIPELINE_DEFAULTS.items():
        if rid.startswith(prefix):
            return commit
    return None


def default_split(layers, pp, looped):
    """Layers per stage, in stage order, as generate_split_points places the boundaries: stages
    per rank 1 (single-stage schedules) or 2 (looped), every stage layers // stages, the remainder
    one each to the stages after the first, the last taking what is left."""
    stages = pp * (2 if looped else 1)
    base, extra = divmod(layers, stages)
    counts = []
    for i in range(stages - 1):
        if i > 0 and extra > 0:
            counts.append(base + 1)
            extra -= 1
        else:
            counts.append(base)
    counts.append(layers - sum(counts))
    return counts


def compiled(p):
    c = p.get("compile")
    if c is True or c is False:
        return c
    return None  # "not stated"


def main(path):
    data = yaml.safe_load(open(path))
    written, skipped = [], []
    for e in data["datapoints"]:
        rid = e["id"]
        if not rid.startswith("torchtitan_"):
            continue
        p, m, h, meas = e["parallel"], e["model"], e["hardware"], e["measured"]
        why = None
        if int(p.get("pp", 1)) > 1 and pipeline_defaults(rid) is None:
            why = "pipeline split points and micro-batch count not stated, and this torchtitan version's defaults not read"
        elif compiled(p) is None:
            why = "whether torch.compile was on is not stated"
        elif recompute_of(p.get("recompute")) is None:
            why = "activation checkpointing not stated"
        elif cluster_of(e) is None:
            why = "GPU kind not stated"
        elif (m["name"], int(m["seq_len"])) not in MODELS:
            why = "model not in the library"
        if why:
            skipped.append((rid, why))
            continue
        gpus = int(h["num_gpus"])
        tp, dp, cp, pp = int(p["tp"]), int(p["dp"]), int(p.get("cp", 1)), int(p.get("pp", 1))
        assert tp * dp * cp * pp == gpus, rid
        gb = int(p["global_batch"])
        split, looped = None, False
        if pp > 1:
            # torchtitan's defaults (PIPELINE_DEFAULTS): the local batch in pp micro-batches.
            local = int(p["local_batch_per_dp_rank"])
            assert local % pp == 0 and local * dp == gb, rid
            mb = local // pp
            looped = "interleaved" in str(p.get("schedule", "")).lower()
            split = default_split(int(m["layers"]), pp, looped)
        else:
            mb = int(p["micro_batch"])
            assert mb * dp == gb, rid  # one micro-batch per step (grad_accum 1)
        tps = float(meas["tokens_per_s_per_gpu"]) * gpus
        model_file = MODELS[(m["name"], int(m["seq_len"]))]
        if not os.path.exists(os.path.join(ROOT, "models", model_file + ".yaml")):
            base_file = model_file.rsplit("-s", 1)[0]  # llama3.1-8b, llama3.1-405b
            base = open(os.path.join(ROOT, "models", base_file + ".yaml")).read()
            text = base.replace(f"name: {base_file}", f"name: {model_file}").replace(
                "seq_len: 8192", f"seq_len: {int(m['seq_len'])}")
            size = "8B" if base_file.endswith("8b") else "405B"
            table = "context-parallel table" if size == "8B" else "4D table, Dec 2024"
            text = text.replace('  notes: "', f'  notes: "Llama 3.1 {size} trained at {int(m["seq_len"])} tokens (torchtitan\'s '
                                f'{table}); shapes as {base_file}. ', 1)
            with open(os.path.join(ROOT, "models", model_file + ".yaml"), "w") as f:
                f.write(text)
        float8 = str(p.get("float8")) if p.get("float8") else None
        dtype = "fp8" if float8 else "bf16"
        scaling = ("rowwise" if "rowwise" in float8 else "tensorwise") if float8 else None
        name = rid.replace("_", "-")
        plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}"]
        if cp > 1:
            plan += [f"cp: {cp}", "cp_comm: all-gather"]
        plan += [f"micro_batch: {mb}", "schedule: " + ("interleaved" if looped else "1f1b")]
        if looped:
            plan.append("virtual_stages: 2")
        if split:
            plan.append("stage_layers: [" + ", ".join(str(n) for n in split) + "]")
        plan += [f"recompute: {recompute_of(p['recompute'])}", "zero: 3"]
        if float8 and "with FSDP float8 all-gather" in float8:
            plan.append("fp8_param_gather: true")  # stated by the row (not: 'not stated for this row')
        if pp > 1:
            plan.append("reshard_after_forward: false")
        if tp > 1:
            plan.append("sequence_parallel: true")  # torchtitan's TP plan: sequence-parallel norms
        if p.get("async_tp") is True:
            plan.append("tp_overlap: true")
        if compiled(p):
            plan.append("compile: true")
            if loss_compiled(rid):
                plan.append("compile_loss: true")
        if foreach_optimizer(rid):
            plan.append("optimizer_impl: foreach")
        plan.append("framework: torchtitan")
        lines = ["experiment:",
                 f"  model: ../models/{model_file}.yaml",
                 f"  cluster: ../clusters/{cluster_of(e)}.yaml",
                 f"  gpus: {gpus}",
                 f"  training: {{global_batch: {gb}, dtype: {dtype}, "
                 + (f"fp8_scaling: {scaling}, " if scaling else "") + "optimizer: adam}",
                 "  plan:"] + [f"    {x}" for x in plan]
        lines += ["  measured:", f"    tokens_per_s: {tps:g}"]
        if rid in CALIBRATION:
            lines.append("    role: calibration")
        mem = meas.get("peak_memory_gib")
        if isinstance(mem, (int, float)):
            lines += [f"    peak_memory_GiB: {mem}", "    memory_kind: reserved"]
        src = e["source"]
        lines.append(f"    source: \"{src['read_from'].replace(chr(34), chr(39))}; {src['table'].replace(chr(34), chr(39))}\"")
        lines.append(f"    datapoint: {rid}")
        notes = (f"{meas['tokens_per_s_per_gpu']} tokens/s per GPU x {gpus} GPUs. "
                 f"FSDP2 ({p.get('fsdp_mixed_precision', 'param bfloat16, reduce float32')}) = framework torchtitan with zero 3; "
                 f"recompute: {p['recompute']}. " + (f"Float8: {float8}. " if float8 else "") + f"Hardware: {h['gpu']}; intra-node: {h.get('intra_node')}; "
                 f"inter-node: {h.get('inter_node')}.")
        if split:
            notes += (f" Pipeline, where the table is silent, as torchtitan {pipeline_defaults(rid)} defaults: "
                      f"{pp} micro-batches of {mb} sequences (the local batch of {mb * pp} over pipeline_parallel_degree), "
                      f"layers per stage {split} in stage order" + (" (2 stages per rank, stage k on rank k mod pp)" if looped else "")
                      + " (generate_split_points), parameters kept gathered after forward (apply_fsdp with PP).")
        if mem is not None and isinstance(mem, (int, float)):
            notes += " Memory: torchtitan's logged peak reserved GiB (max over GPUs)."
        lines.append(f"  notes: \"{notes.replace(chr(34), chr(39))}\"")
        with open(os.path.join(ROOT, "experiments", name + ".yaml"), "w") as f:
            f.write("\n".join(lines) + "\n")
        written.append(name)
    for w in written:
        print("wrote", w)
    for rid, why in skipped:
        print("left out", rid, "-", why)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "..", "shared", "published", "modern.yaml"))
