#!/usr/bin/env bash
# The one command to run on a lent GPU machine (H100 or H200): time-boxed phases, each writing
# into RESULTS_DIR and never stopping the next, then summary.md and results.json there.
#   scripts/gpu-run.sh RESULTS_DIR        (default: $OUT, else out/)
# Uses gpu-bundle/ (scripts/gpu-bundle.sh, built on a machine without a GPU) when its binaries
# run here; otherwise builds on the spot into build-gpu/ (minutes of the GPU machine's time).
# PHASES="a b" runs only those (a second call for what the budget left out).
# Phases in this order, sized for a 15-minute device lease (one call of at most 600 s, the machine's
# start included in the lease), limits in seconds, override with PHASE_<NAME>_S:
#   probe 20;
#   correctness 140: the GPU tests; compute-sanitizer reruns of a failing one, at most
#     SANITIZER_S=40 s each;
#   train 200: foresight-train --backend cuda --precision bf16 on the local 350M and 1.3B plans
#     (TRAIN_STEPS=8), then a profiled 350M run (GPU time per op), a 350M run with
#     FORESIGHT_ATTENTION=pipelined (the attention kernels' cp.async form) and one with
#     FORESIGHT_GEMM=cublas (cublasGemmEx, the GEMMs before kernels::gemm served the trainer);
#   baseline 70: PyTorch eager on the same two models through scripts/torch-baseline-subset.py,
#     then the 124M and 2.7B rows for their peak memory (issue 19; BASELINE_EAGER overrides the
#     list, BASELINE_COMPILE=gpt-1.3b adds torch.compile rows);
#   kernels 90: bench_kernels vs PyTorch on the same shapes, and PyTorch SDPA per backend at 16k
#     and 32k;
#   eager 75: fms-fsdp's 2024 Llama 2 7B block in eager PyTorch, op by op and whole, eager and
#     compiled, beside the execution model's op table for it (calibrate/bench_eager_block.py and
#     compare_eager_block.py; issue 22: the eager fms-fsdp 7B rows predicted ~10% fast);
#   loop 110: foresight validate --local --backend cuda (the trainer's CUDA backend calibrated op
#     by op, the one-rank plans predicted, run and compared: closed-loop-cuda.md / .json);
#   calibrate 120: foresight calibrate --quick.
# ARCHIVE leaves out loop-cuda/ (the loop's run directories, ~18 MB; its tables are kept).
# The device tool brings back at most 8 files from $OUT: ARCHIVE=path.tar.gz packs RESULTS_DIR there.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-${OUT:-out}}
mkdir -p "$RESULTS"
BUNDLE=${BUNDLE:-gpu-bundle}
[ ! -d "$BUNDLE" ] && [ -f "$BUNDLE.tar.xz" ] && tar -xJf "$BUNDLE.tar.xz"
declare -A phase_rc phase_s
log() { echo "[gpu-run $(date +%H:%M:%S)] $*" | tee -a "$RESULTS/gpu-run.log"; }

# Runs "$@" for at most $1 seconds with stdout+stderr into RESULTS/<name>.log; records rc and time.
# The device tool gives one command at most 600 s: GPU_RUN_BUDGET_S (default 530) bounds the whole
# script, each phase getting at most what is left (less 20 s for the summary); a phase with under
# 15 s left is skipped and says so.
GPU_RUN_BUDGET_S=${GPU_RUN_BUDGET_S:-530}
phase() {
  local name=$1 limit=$2
  shift 2
  if [ -n "${PHASES:-}" ] && [[ " $PHASES " != *" $name "* ]]; then
    log "phase $name: not in PHASES ($PHASES)"
    return
  fi
  local var="PHASE_${name^^}_S"
  limit=${!var:-$limit}
  local left=$((GPU_RUN_BUDGET_S - SECONDS - 20))
  if [ "$left" -lt 15 ]; then
    log "phase $name: skipped, ${left} s of the budget left"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "phase $name (limit ${limit} s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" bash -c "$*" >"$RESULTS/$name.log" 2>&1
  phase_rc[$name]=$?
  phase_s[$name]=$((SECONDS - t0))
  log "phase $name: exit ${phase_rc[$name]} after ${phase_s[$name]} s"
}

# ---- binaries: the bundle where it runs here, else a build on the spot
BIN=""
if [ -x "$BUNDLE/bin/foresight" ]; then
  # Only the libraries this machine lacks come from the bundle.
  mkdir -p "$RESULTS/.libs"
  # A bundle library goes on the path when the machine has no library of that name (its loader
  # cache, or the usual directories): the lent machines have neither ldd nor SimGrid and Boost's
  # context library, but their own MPI and CUDA must stay in charge.
  for f in "$BUNDLE"/lib/*; do
    lib=$(basename "$f")
    if ldconfig -p 2>/dev/null | grep -q " $lib "; then continue; fi
    found=0
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/local/lib /usr/lib /usr/local/cuda/lib64; do
      [ -e "$d/$lib" ] && found=1 && break
    done
    [ "$found" = 1 ] || ln -sf "$(realpath "$f")" "$RESULTS/.libs/$lib"
  done
  log "bundle libraries on the path: $(ls "$RESULTS/.libs" | tr '\n' ' ')"
  export LD_LIBRARY_PATH="$(realpath "$RESULTS/.libs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if "$BUNDLE/bin/foresight" --version >/dev/null 2>&1 && "$BUNDLE/bin/foresight-train" --help >/dev/null 2>&1; then
    BIN=$(realpath "$BUNDLE/bin")
    log "using the bundle built at $(cat "$BUNDLE/commit" 2>/dev/null)"
  else
    log "bundle binaries do not run here: $("$BUNDLE/bin/foresight" --version 2>&1 | head -2)"
  fi
fi
if [ -z "$BIN" ]; then
  phase build 900 "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && \
    cmake --build build-gpu -j \$(nproc) --target foresight foresight-train foresight-commbench bench_kernels gpu_gemm_attention_gpu_test \
    gpu_kernels_gpu_test gpu_trainer_backend_gpu_test gpu_trainer_backend_bf16_gpu_test && mkdir -p build-gpu/bin && \
    cp build-gpu/apps/foresight build-gpu/trainer/foresight-train build-gpu/trainer/foresight-commbench build-gpu/calibrate/bench_kernels \
       build-gpu/tests/gpu/gpu_*_test build-gpu/bin/"
  BIN=$(realpath build-gpu/bin 2>/dev/null || echo build-gpu/bin)
fi
export FORESIGHT_SCENARIOS=$(realpath scenarios) FORESIGHT_PROGRESS=lines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- phases
phase probe 20 "nvidia-smi; nvidia-smi -q -d CLOCK,POWER | head -60; nvcc --version; \
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'; \
  ls /usr/local/cuda/lib64 | grep -E 'cudnn|nccl|cublas' | head -20; \
  echo 'cuBLAS as the binaries open it on first use (soname via the loader cache; kernels/cublas_loader.cpp):'; \
  ldconfig -p | grep -E 'libcublas(Lt)?\.so\.' || echo 'no libcublas in the loader cache: LD_LIBRARY_PATH or the build-time path must serve it'"

SANITIZER_S=${SANITIZER_S:-40}
phase correctness 140 "rc=0; for t in $BIN/gpu_*_test; do n=\$(basename \$t); \
  \$t --gtest_output=json:$RESULTS/\$n.json > $RESULTS/\$n.txt 2>&1 || { rc=1; \
    if command -v compute-sanitizer >/dev/null; then CUBLASLT_LOG_LEVEL=2 CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr \
      timeout $SANITIZER_S compute-sanitizer --print-limit 20 \$t > $RESULTS/\$n.sanitizer.txt 2>&1; fi; }; \
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' $RESULTS/\$n.txt; done; exit \$rc"

# The trainer on the GPU: one rank, the local experiments' models as plans, bf16 (Megatron's recipe),
# then a short run of the 350M plan with FORESIGHT_PROFILE_OPS=1 (GPU time per op; the events cost
# a little, so its step times are not the headline).
TRAIN_STEPS=${TRAIN_STEPS:-8}
phase train 200 "for e in gpt-350m-local-h100 gpt3-1.3b-local-h100; do \
  mkdir -p $RESULTS/train-\$e && $BIN/foresight plan --experiment \$e --no-simgrid --top 1 --out $RESULTS/train-\$e \
    > $RESULTS/train-\$e/plan.txt && \
  timeout 80 $BIN/foresight-train --plan $RESULTS/train-\$e/plan.json --backend cuda --precision bf16 --steps $TRAIN_STEPS \
    --summary $RESULTS/train-\$e/summary.json \
    > $RESULTS/train-\$e/train.txt 2>&1; echo \"\$e: exit \$?\"; tail -5 $RESULTS/train-\$e/train.txt; done; \
  FORESIGHT_PROFILE_OPS=1 timeout 40 $BIN/foresight-train --plan $RESULTS/train-gpt-350m-local-h100/plan.json --backend cuda \
    --precision bf16 --steps 3 > $RESULTS/train-profile-350m.txt 2>&1; echo \"profile: exit \$?\"; \
  head -40 $RESULTS/train-profile-350m.txt | grep -v '^step'; \
  FORESIGHT_ATTENTION=pipelined timeout 40 $BIN/foresight-train --plan $RESULTS/train-gpt-350m-local-h100/plan.json \
    --backend cuda --precision bf16 --steps 6 > $RESULTS/train-pipelined-350m.txt 2>&1; echo \"pipelined: exit \$?\"; \
  tail -3 $RESULTS/train-pipelined-350m.txt; \
  FORESIGHT_GEMM=cublas timeout 30 $BIN/foresight-train --plan $RESULTS/train-gpt-350m-local-h100/plan.json \
    --backend cuda --precision bf16 --steps 6 > $RESULTS/train-cublas-350m.txt 2>&1; echo \"cublas gemm: exit \$?\"; \
  tail -3 $RESULTS/train-cublas-350m.txt"

baseline=$BUNDLE/shared-bench/torch_gpt_baseline.py
[ -f "$baseline" ] || baseline=../shared/bench/torch_gpt_baseline.py
phase baseline 70 "PYTHONUNBUFFERED=1 python3 scripts/torch-baseline-subset.py $baseline \
  --eager '${BASELINE_EAGER:-gpt-350m,gpt-1.3b,gpt2-124m,gpt-2.7b}' --compile '${BASELINE_COMPILE:-}' \
  | tee $RESULTS/torch_baseline.jsonl"

phase kernels 90 "$BIN/bench_kernels $RESULTS/bench_kernels.json && \
  python3 calibrate/bench_torch.py $RESULTS/bench_torch.json && \
  python3 calibrate/compare_bench.py $RESULTS/bench_kernels.json $RESULTS/bench_torch.json"

# fms-fsdp's eager block against the model (issue 22); the model's tables for this GPU's DGX.
phase eager 75 "gpu=\$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && echo h100-sxm || echo h200-sxm); \
  PYTHONUNBUFFERED=1 python3 calibrate/bench_eager_block.py $RESULTS/eager_block.json; \
  python3 calibrate/compare_eager_block.py $RESULTS/eager_block.json --foresight $BIN/foresight --gpu \$gpu"

# The closed loop (issue 24) on this GPU: calibrate the trainer's CUDA backend, predict, run, compare.
phase loop 110 "$BIN/foresight validate --local --backend cuda --work-dir $RESULTS/loop-cuda \
  --results $RESULTS/closed-loop-cuda.json --markdown $RESULTS/closed-loop-cuda.md"

phase calibrate 120 "$BIN/foresight calibrate --quick --out $RESULTS/profile-quick.json"

# ---- summary
{
  echo "# GPU run $(date -u +%Y-%m-%dT%H:%MZ) at $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  echo "| phase | exit | seconds | log |"
  echo "| --- | --- | --- | --- |"
  for p in build probe correctness train baseline kernels eager loop calibrate; do
    [ -n "${phase_rc[$p]+x}" ] && echo "| $p | ${phase_rc[$p]} | ${phase_s[$p]} | $p.log |"
  done
  echo
  echo "## GPU tests"
  grep -hE '^\[  (PASSED|FAILED|SKIPPED) ' "$RESULTS"/gpu_*_test.txt 2>/dev/null
  echo
  echo "## Closed loop on the GPU"
  grep -E '^\| [a-z]|^Step' "$RESULTS/closed-loop-cuda.md" 2>/dev/null
  echo
  echo "## foresight-train --backend cuda --precision bf16"
  for f in "$RESULTS"/train-*/train.txt "$RESULTS"/train-pipelined-350m.txt "$RESULTS"/train-cublas-350m.txt; do [ -f "$f" ] && { echo "$f:"; tail -4 "$f"; }; done
  [ -f "$RESULTS/train-profile-350m.txt" ] && { echo; echo "GPU time per op, 350M, 3 steps:"; grep -A25 'GPU time per op' "$RESULTS/train-profile-350m.txt"; }
  echo
  echo "## fms-fsdp's eager 7B block: measured vs the model (ms, one micro-batch fwd+bwd)"
  grep -E '^\| ' "$RESULTS/eager.log" 2>/dev/null
  echo
  echo "## PyTorch baseline (tokens/s, peak memory GiB)"
  grep -h '"name"' "$RESULTS/torch_baseline.jsonl" 2>/dev/null
} >"$RESULTS/summary.md"
python3 - "$RESULTS" <<'EOF'
import json, os, sys
d = sys.argv[1]
out = {"phases": {}, "torch_baseline": []}
for line in open(os.path.join(d, "gpu-run.log")):
    if ": exit " in line and "phase " in line:
        name = line.split("phase ")[1].split(":")[0]
        rc = int(line.split(": exit ")[1].split()[0])
        out["phases"][name] = rc
try:
    for line in open(os.path.join(d, "torch_baseline.jsonl")):
        line = line.strip()
        if line.startswith("{"):
            out["torch_baseline"].append(json.loads(line))
except OSError:
    pass
json.dump(out, open(os.path.join(d, "results.json"), "w"), indent=1)
EOF
log "done: $RESULTS/summary.md, $RESULTS/results.json"
if [ -n "${ARCHIVE:-}" ]; then
  tar -C "$(dirname "$(realpath "$RESULTS")")" --exclude=.libs --exclude=loop-cuda -czf "$ARCHIVE" "$(basename "$(realpath "$RESULTS")")" &&
    echo "packed into $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
fi
