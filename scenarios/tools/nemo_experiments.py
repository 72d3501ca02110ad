#!/usr/bin/env python3
"""Writes the scenario files of NVIDIA NeMo's published pretraining table for the NeMo 24.07
container on DGX H100 at FP8 (NVIDIA/NeMo docs/source/performance/performance_summary.md, first
published in 4c73f776 on 2024-08-14, revised in 3a8081fe ("24.07 vboost numbers") and fe98ad77 /
8e3d65dc on 2024-09-09, whose final numbers these are; until session 30 the rows held the first
version's while citing 8e3d65dc): runs from outside
../shared/published, each a prediction case of the source "NeMo 24.07 (Megatron-Core, DGX H100)".

The table gives GPUs, GBS, MBS, sequence, TP, PP, CP, VP and tokens/s per GPU. What it leaves out
comes from the configurations its author committed to NVIDIA/NeMo-Framework-Launcher around it
(tag 24.07 = 8325688d, 2024-08-01, and the clean-up merge 20ab57b3, 2024-08-13; the VP column says
which one each row used): launcher_scripts/conf/training/{gpt3,llama}/*.yaml and
examples/training/{gpt,llama}/h100/*_fp8.sh:
  - FP8 'hybrid' (Transformer Engine delayed scaling, E4M3 forward / E5M2 backward) on the TE
    linears, bf16 weights with fp32 main weights and gradients (megatron_amp_O2, no fp8_params);
  - no activation recompute (granularity null) in any of these rows;
  - Apex's distributed fused Adam (optimizer state sharded over data parallelism = zero 1) with
    overlap_grad_sync and overlap_param_sync, gradients reduced in bf16 (grad_sync_dtype bf16);
  - gradient_accumulation_fusion true (Megatron-Core's default here);
  - sequence parallelism and userbuffers TP overlap (ub_tp_comm_overlap) where each row's config
    sets them (the 128-GPU GPT-3 175B row has ub_tp_comm_overlap False);
  - attention: the launcher's NVTE_FUSED_ATTN=0 selects Transformer Engine's FlashAttention-2
    backend (flash2 here) except for GPT-3 175B, whose configs set NVTE_FUSED_ATTN=1 (cuDNN).
  - Model shapes: the Llama configs (rmsnorm, no bias, SwiGLU, RoPE, untied) and NeMo's GPT-3
    defaults (LayerNorm, bias, GELU, learned positions, tied embeddings, GPT-2 BPE padded to a
    multiple of 128 x TP: 50304 / 50432 / 50688 at TP 1 / 2 / 4).
  - the loss: Megatron-Core's fused cross-entropy (cross_entropy_fusion native) where the row's
    yaml sets cross_entropy_loss_fusion: true (Llama 3 and Nemotron at the tag; the Llama 2
    yamls only after the clean-up, GPT-3 never).
Dropout (0.1 in the GPT-3 rows, 0 in the Llama rows) is priced as the framework's: megatron-core
keeps dropout masks. Nemotron-8B and 22B (session 35, once squared ReLU could be written down):
the table's GBS and MBS over their yamls' (nemotron_{8b,22b}.yaml at the tag: TP 2, squared ReLU,
layernorm1p, half-rotary RoPE, no grad_sync_dtype, so apex syncs gradients in fp32); models
nemotron3-8b/22b. Left out: Nemotron-340B, its committed config (PP 12, VP 8, 768 nodes) differs
from the row's (PP 8, VP 12, 128 GPUs), as decided before it could be predicted; written down
with that yaml's settings anyway in session 35 it came out -13.2% (-5.9% with the userbuffers TP
overlap of dgxc-benchmarking's recipe of the same shape).

Usage: python3 scenarios/tools/nemo_experiments.py
"""
import os

from experiment_file import write_experiment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SOURCE = ("github NVIDIA/NeMo: docs/source/performance/performance_summary.md @ 8e3d65dc (2024-09-09), "
          "Pretraining table, container NeMo24.07, system DGX-H100, FP8")
LAUNCHER = ("settings not in the table from NVIDIA/NeMo-Framework-Launcher @ {rev}: {files}")
TAG, CLEANUP = "8325688d (tag 24.07)", "20ab57b3 (2024-08-13 clean-up merge)"

# NeMo's GPT-3 shapes at its own vocabulary padding (GPT-2 BPE 50257 to a multiple of 128 x tp).
GPT3 = {
    "nemo-gpt3-5b": dict(layers=24, hidden=4096, heads=32, vocab=50304),
    "nemo-gpt3-20b": dict(layers=44, hidden=6144, heads=48, vocab=50432),
    "nemo-gpt3-175b": dict(layers=96, hidden=12288, heads=96, vocab=50688),
}

# row, model file, GPUs, GBS, MBS, TP, PP, CP, VP, tokens/s/GPU, sequence parallel, TP overlap,
# attention, launcher revision and files, fused loss, gradient sync dtype.
ROWS = [
    ("gpt3-5b-64xh100", "nemo-gpt3-5b", 64, 2048, 4, 1, 1, 1, 1, 23406, False, False, "flash2", CLEANUP,
     "conf/training/gpt3/5b.yaml, examples/training/gpt/h100/5b_fp8_8node.sh", None, "bf16"),
    ("gpt3-20b-64xh100", "nemo-gpt3-20b", 64, 256, 2, 2, 1, 1, 1, 5851, True, True, "flash2", CLEANUP,
     "conf/training/gpt3/20b.yaml (ub_cfg_h100_h6144_tp2_mbs2_seqlen2048)", None, "bf16"),
    ("gpt3-175b-128xh100", "nemo-gpt3-175b", 128, 256, 1, 4, 8, 1, 6, 716, True, False, "cudnn", CLEANUP,
     "conf/training/gpt3/175b.yaml (VP 6, ub_tp_comm_overlap False), examples/training/gpt/h100/175b_fp8_16node.sh "
     "(NVTE_FUSED_ATTN=1)", None, "bf16"),
    ("gpt3-175b-512xh100", "nemo-gpt3-175b", 512, 2048, 2, 4, 8, 1, 6, 825, True, True, "cudnn", CLEANUP,
     "conf/training/gpt3/175b_mlperf.yaml (64 nodes, dropout 0, layernorm1p)", None, "bf16"),
    ("llama2-7b-8xh100", "llama2-7b", 8, 128, 1, 1, 1, 1, 1, 16934, False, False, "flash2", TAG,
     "conf/training/llama/llama2_7b.yaml, examples/training/llama/h100/llama2_7b_fp8.sh", None, "bf16"),
    ("llama2-13b-16xh100", "llama2-13b", 16, 128, 1, 1, 4, 1, 10, 8715, False, False, "flash2", TAG,
     "conf/training/llama/llama2_13b.yaml (PP 4, VP 10)", None, "bf16"),
    ("llama2-70b-64xh100", "llama2-70b", 64, 128, 1, 4, 4, 1, 20, 1728, True, True, "flash2", TAG,
     "conf/training/llama/llama2_70b.yaml (VP 20 at the tag; 5 after the clean-up)", None, "bf16"),
    ("llama3-8b-8xh100", "llama3.1-8b", 8, 128, 1, 1, 1, 2, 1, 12273, False, False, "flash2", TAG,
     "conf/training/llama/llama3_8b.yaml (CP 2)", "native", "bf16"),
    ("llama3-70b-64xh100", "llama3.1-70b", 64, 128, 1, 4, 4, 2, 5, 1524, True, True, "flash2", CLEANUP,
     "conf/training/llama/llama3_70b.yaml (VP 5 after the clean-up), examples/training/llama/h100/llama3_70b_fp8.sh "
     "(ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192)", "native", "bf16"),
    ("nemotron-8b-64xh100", "nemotron3-8b", 64, 256, 4, 2, 1, 1, 1, 12507, True, True, "flash2", TAG,
     "conf/training/nemotron/nemotron_8b.yaml (the table's micro-batch 4 and global batch 256 over the yaml's 2 and 32; no "
     "grad_sync_dtype or dtype: fp32 state, and apex syncs gradients in the state dtype, NeMo r2.0.0rc0 megatron_base_model.py)",
     "native", "fp32"),
    ("nemotron-22b-64xh100", "nemotron3-22b", 64, 256, 2, 2, 4, 1, 10, 4312, True, True, "flash2", TAG,
     "conf/training/nemotron/nemotron_22b.yaml (overlapped pipeline p2p; the table's micro-batch 2 and global batch 256 "
     "over the yaml's 1 and 32; no grad_sync_dtype or dtype: fp32 state, and apex syncs gradients in the state dtype, NeMo "
     "r2.0.0rc0 megatron_base_model.py)", "native", "fp32"),
]


def write_gpt3_models():
    for name, s in GPT3.items():
        text = f"""model:
  name: {name}
  layers: {s['layers']}
  hidden: {s['hidden']}
  heads: {s['heads']}
  seq_len: 2048
  vocab: {s['vocab']}
  source: "NeMo's GPT-3 configurations (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/, 2024): layers, hidden size and heads; ffn 4 x hidden, GELU, LayerNorm, biases, learned absolute positions and tied embeddings from NeMo's model defaults (megatron_base_model.py, megatron_gpt_model.py, r2.0.0rc1); the GPT-2 BPE vocabulary of 50257 padded to a multiple of 128 x tp (_vocab_size_with_padding)"
  notes: "Shapes of Brown et al. 2020 (arXiv:2005.14165, Table 2.1) at NeMo's vocabulary padding for the tensor-parallel degree of its published run."
"""
        with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
            f.write(text)


def main():
    write_gpt3_models()
    for row, model, gpus, gbs, mbs, tp, pp, cp, vp, tps, sp, ub, attention, rev, files, ce, reduce in ROWS:
        dp = gpus // (tp * pp * cp)
        assert dp * tp * pp * cp == gpus and gbs % (dp * mbs) == 0, row
        plan = [f"tp: {tp}", f"pp: {pp}", f"dp: {dp}"]
        if cp > 1:
            plan += [f"cp: {cp}", "cp_comm: ring"]  # Transformer Engine's p2p ring, Megatron-Core's default cp_comm_type
        plan += [f"micro_batch: {mbs}", "schedule: " + ("interleaved" if vp > 1 else "1f1b")]
        if vp > 1:
            plan.append(f"virtual_stages: {vp}")
        plan += ["recompute: none", f"sequence_parallel: {'true' if sp else 'false'}",
                 f"tp_overlap: {'true' if ub else 'false'}", "zero: 1", "dp_overlap: true", "param_gather_overlap: true",
                 "framework: megatron-core"]
        if ce:
            plan.append(f"cross_entropy_fusion: {ce}")
        plan += [f"attention: {attention}", f"reduce_dtype: {reduce}"]
        name = f"nemo2407-{row}-fp8"
        notes = (f"{tps} tokens/s per GPU x {gpus} GPUs. " + LAUNCHER.format(rev=rev, files=files) +
                 ": FP8 hybrid (delayed scaling), no recompute, distributed fused Adam with overlapped gradient and parameter "
                 f"sync in {reduce}, gradient accumulation fusion, sequence parallelism and userbuffers TP overlap as set, "
                 + ("Megatron-Core's fused cross-entropy (cross_entropy_loss_fusion), " if ce else "") +
                 f"attention backend {'cuDNN (NVTE_FUSED_ATTN=1)' if attention == 'cudnn' else 'FlashAttention-2 (NVTE_FUSED_ATTN=0)'}. "
                 "Cluster dgx-h100-superpod (DGX H100, 8 x 400 Gb/s InfiniBand per node), as the table's DGX-H100.")
        write_experiment(name, model, "dgx-h100-superpod", gpus, f"{{global_batch: {gbs}, dtype: fp8, optimizer: adam}}", plan,
                         [f"tokens_per_s: {tps * gpus}", f"source: \"{SOURCE}, row {row}\""], notes)


if __name__ == "__main__":
    main()
