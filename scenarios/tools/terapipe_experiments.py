#!/usr/bin/env python3
"""Writes the scenario files of TeraPipe's (Li et al., ICML 2021, arXiv:2102.07988) runs beyond the
three settings ../shared/published/datapoints.yaml carries (settings (1), (5) and (9), written by
hand as terapipe-gpt3-{1b,13b,175b}-p3-{gpipe,terapipe}.yaml):

- setting (6): GPT3-44B, op 1 x pipe 96 x data 4, batch 8 (main results table);
- setting (8): GPT3-44B, op 8 x pipe 48 x data 1, batch 8, without TeraPipe, with the slicing its
  dynamic program chose ([(1, [384, 384, 368, 320, 296, 296])] * 8) and with 4, 8 and 16 uniform
  slices per sequence (the appendix table behind Figure 6(a));
- setting (9): GPT3-175B, op 4 x pipe 96, batch 2, with 4 ... 128 uniform slices per sequence
  (Figure 6(b)'s table; 1 slice is the GPipe baseline and the dynamic program's slicing is
  terapipe-gpt3-175b-p3-terapipe);
- setting (10): GPT3-175B, op 8 x pipe 48, batch 2: 5.822 s without, 1.160 s with TeraPipe, as the
  authors' own flop_model.py (zhuohan123/terapipe @ bc3e290, 2021-03-23) states them; 16 slices per
  sequence ("n_slices=32" over the batch of 2), their lengths not printed;
- GPT3-13B at sequence 4096, 6144 and 8192 (setting (5)'s op 8 x pipe 40, batches 8, 4 and 2 as
  latency_model.py's inputs and transformer_models.py BATCH_CONFIGS give them; the appendix table
  behind Figure 7).

Latencies: the appendix tables as a public figure-by-figure catalog of the paper's MinerU
conversion (arXiv 2102.07988v2) transcribes them (code index id 69711335459), the same kind of
secondary transcription datapoints.yaml used for settings (1), (5) and (9). Settings (2), (3), (4)
and (7) are only read off Figure 5's bars there (approximate) and are not written.

Every run: 8 V100-16GB per p3.16xlarge, NCCL 2.7 over TCP sockets on the 25 Gb/s ENA, fp16 layers
with fp32 masters, no recompute (dp_slices_evaluation.py defaults), ranks ordered op-pipe-data
(mpu/initialize.py), batch slices of one sequence (the printed schemes are '[(1, [...])] * B').

Usage: python3 scenarios/tools/terapipe_experiments.py
"""
import os

from experiment_file import ROOT, write_experiment

PAPER = "Li et al. ICML 2021 (arXiv:2102.07988v2)"
CATALOG = ("as transcribed from the paper's appendix table by a public figure-by-figure catalog of its MinerU "
           "conversion (code index id 69711335459; secondary)")
FLOP_MODEL = ("github zhuohan123/terapipe @ bc3e290 (2021-03-23) flop_model.py: "
              "efficiency_stats('gpt3-175b', 2, 384, 1.160, n_slices=32, n_stages=48, 'w/ TeraPipe') and "
              "(..., 5.822, n_slices=2, n_stages=48, 'w/o TeraPipe')")
COMMON = ("p3.16xlarge nodes (8 V100-SXM2-16GB on NVLink, one 25 Gb/s ENA, NCCL over TCP sockets); fp16 layers "
          "with fp32 master weights (--mixed-precision); no recompute (--checkpoint-gradients defaults to False); "
          "no ZeRO; ranks ordered op (tensor) - pipe - data as mpu/initialize.py builds the groups.")

MODELS = {  # name: (layers, hidden, seq), heads of 128, ffn 4h, vocab 51200 (transformer_models.py)
    "terapipe-gpt3-44b": (96, 6144, 2048),
    "terapipe-gpt3-13b-s4096": (40, 5120, 4096),
    "terapipe-gpt3-13b-s6144": (40, 5120, 6144),
    "terapipe-gpt3-13b-s8192": (40, 5120, 8192),
}


def write_model(name, layers, hidden, seq):
    base = "gpt3-44b" if "44b" in name else f"gpt3-13b-{seq}"
    text = f"""model:
  name: {name}
  layers: {layers}
  hidden: {hidden}
  heads: {hidden // 128}
  seq_len: {seq}
  vocab: 51200
  ffn_hidden: {4 * hidden}
  source: "Li et al. 2021, 'TeraPipe', ICML 2021 (arXiv:2102.07988), Table 1; zhuohan123/terapipe transformer_models.py MODEL_CONFIGS '{base}' = ({layers}, {hidden}, {seq}, {hidden} // 128) and EMBEDDING_VOCAB_SIZE = 51200"
  notes: "{hidden // 128} heads of 128; ffn 4h = {4 * hidden}. Written by scenarios/tools/terapipe_experiments.py."
"""
    with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
        f.write(text)
    print("wrote model", name)


def write(name, model, nodes, batch, tp, pp, dp, schedule, slices, measured, notes):
    plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}", "micro_batch: 1", f"schedule: {schedule}", "virtual_stages: 1",
            "sequence_parallel: false", "recompute: none", "zero: 0", "offload: {optimizer: false, activations: 0.0}",
            "ep: 1", "token_slices: [" + ", ".join(str(s) for s in slices) + "]", "framework: terapipe",
            "placement: tp-pp-dp"]
    write_experiment(name, model, "aws-p3-16xlarge", nodes * 8, f"{{global_batch: {batch}, dtype: fp16, optimizer: adam}}",
                     plan, measured, f"{notes} {COMMON} Written by scenarios/tools/terapipe_experiments.py.")


def pair(prefix, model, nodes, batch, tp, pp, dp, setting, without, with_, slices, with_source, slices_note):
    """A setting's GPipe baseline and its TeraPipe run (speedup against the baseline)."""
    shape = f"op {tp} x pipe {pp} x data {dp}, batch {batch} ({batch // dp} per pipeline)"
    write(f"{prefix}-gpipe", model, nodes, batch, tp, pp, dp, "gpipe", [],
          ["role: prediction", f"iteration_s: {without}",
           f"source: \"{PAPER} {setting} without TeraPipe: {without} s per iteration, {with_source}\""],
          f"Baseline 'w/o TeraPipe': TeraPipe's own code pipelining whole sequences, GPipe order, micro-batch 1 "
          f"(the printed schemes slice the batch into single sequences). {setting}: {shape}.")
    speedup = round(without / with_, 3)
    write(f"{prefix}-terapipe", model, nodes, batch, tp, pp, dp, "terapipe", slices,
          ["role: prediction", f"iteration_s: {with_}", f"speedup: {speedup}", f"baseline: \"{prefix}-gpipe\"",
           f"source: \"{PAPER} {setting} with TeraPipe: {with_} s per iteration, {with_source}\""],
          f"With TeraPipe: token-level pipelining within each sequence. {slices_note} speedup = {without} / {with_} "
          f"= {speedup} against {prefix}-gpipe. {setting}: {shape}.")


def uniform(name, model, nodes, batch, tp, pp, dp, setting, k, seq, latency):
    write(name, model, nodes, batch, tp, pp, dp, "terapipe", [seq // k] * k,
          ["role: prediction", f"iteration_s: {latency}",
           f"source: \"{PAPER} {setting}, {k} uniform slices per sequence: {latency} s per iteration, {CATALOG}\""],
          f"TeraPipe with {k} uniform token slices of {seq // k} per sequence (the slicing ablation of Figure 6; "
          f"the paper's dynamic program beats the best uniform slicing by 1.12x for GPT3-44B and 1.04x for "
          f"GPT3-175B, sec. 4.2). {setting}.")


def main():
    for name, shape in MODELS.items():
        write_model(name, *shape)
    dp_note = "token_slices is left [] on purpose: the lengths TeraPipe's dynamic program chose are not printed; Foresight's planner runs the same kind of program and fills them."
    pair("terapipe-gpt3-44b-p3-s6", "terapipe-gpt3-44b", 48, 8, 1, 96, 4, "Table 1 setting (6)", 13.319, 7.103, [],
         CATALOG, dp_note)
    pair("terapipe-gpt3-44b-p3-s8", "terapipe-gpt3-44b", 48, 8, 8, 48, 1, "Table 1 setting (8)", 2.662, 1.111,
         [384, 384, 368, 320, 296, 296], CATALOG,
         "token_slices are the dynamic program's, printed in the appendix table: [(1, [384, 384, 368, 320, 296, 296])] * 8.")
    for k, t in [(4, 1.241), (8, 1.255), (16, 1.241)]:
        uniform(f"terapipe-gpt3-44b-p3-s8-uniform{k}", "terapipe-gpt3-44b", 48, 8, 8, 48, 1, "Table 1 setting (8)",
                k, 2048, t)
    for k, t in [(4, 2.902), (8, 1.892), (16, 1.547), (32, 1.593), (64, 2.227), (128, 3.252)]:
        uniform(f"terapipe-gpt3-175b-p3-uniform{k}", "terapipe-gpt3-175b", 48, 2, 4, 96, 1, "Table 1 setting (9)",
                k, 2048, t)
    pair("terapipe-gpt3-175b-p3-s10", "terapipe-gpt3-175b", 48, 2, 8, 48, 1, "Table 1 setting (10)", 5.822, 1.160,
         [], FLOP_MODEL, dp_note + " flop_model.py counts 32 slices over the batch of 2: 16 per sequence.")
    for seq, batch, without, with_ in [(4096, 8, 2.526, 0.913), (6144, 4, 3.754, 0.756), (8192, 2, 4.978, 0.636)]:
        pair(f"terapipe-gpt3-13b-s{seq}-p3", f"terapipe-gpt3-13b-s{seq}", 40, batch, 8, 40, 1,
             f"Figure 7 (sequence length {seq}, setting (5)'s layout)", without, with_, [], CATALOG, dp_note)


if __name__ == "__main__":
    main()
