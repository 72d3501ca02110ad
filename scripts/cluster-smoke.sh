#!/usr/bin/env bash
# For a machine with two or more GPUs: runs the trainer's multi-rank layouts on the GPUs over NCCL
# (one rank per GPU, bf16) and compares each run's per-step losses with a single-rank bf16 run of
# the same model on the CPU backend, the reference CI checks every layout against.
#   scripts/cluster-smoke.sh [OUT_DIR]          (default out/cluster-smoke)
# Environment:
#   BUILD_DIR      the build with foresight-train and the test tools (default build)
#   GPUS           ranks available (default: the GPUs nvidia-smi lists); layouts needing more are
#                  skipped and listed as such
#   SMOKE_LAYOUTS  names to run (default: all of the list below)
#   SMOKE_BACKEND  cuda (default) or cpu: cpu runs the same layouts on the CPU backend over the
#                  NCCL communicator's MPI stand-in, which is how CI checks this script
#   SMOKE_REL      largest relative loss difference per step (default 2e-3, see below)
#   SMOKE_STEPS    steps per run (default 20)
# Exit code: 0 when every layout that ran agreed, 1 when one did not, 2 for bad input.
#
# Why 2e-3:
#   - On one GPU, bf16 runs stay within 1e-3 per step of the CPU's bf16 mode
#     (tests/gpu/trainer_backend_bf16_gpu_test.cpp, TrainingRunsMatchTheCpuBackend).
#   - On the CPU, bf16 layouts stay within 1e-4 of the single rank over 20 steps
#     (tests/trainer/bf16.cmake).
#   - NCCL rounds each bf16 partial sum of a reduction, where the CPU sums floats and rounds once.
#   - A broken layout (a gradient lost or doubled, a wrong pipeline message) moves the loss by more
#     than 1e-2 within a few steps.
# The lent single-GPU machine cannot run this: NCCL refuses two ranks on one GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/cluster-smoke}
BUILD_DIR=${BUILD_DIR:-build}
BACKEND=${SMOKE_BACKEND:-cuda}
REL=${SMOKE_REL:-2e-3}
STEPS=${SMOKE_STEPS:-20}
TRAIN=$BUILD_DIR/trainer/foresight-train
MAKE_PLAN=$BUILD_DIR/tests/trainer/trainer_make_plan
COMPARE=$BUILD_DIR/tests/trainer/trainer_compare_summaries
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

die() {
  echo "cluster-smoke.sh: $*" >&2
  exit 2
}
for t in "$TRAIN" "$MAKE_PLAN" "$COMPARE"; do
  [ -x "$t" ] || die "$t not found: build first (scripts/build.sh, tests on), or set BUILD_DIR"
done
command -v mpirun >/dev/null || die "mpirun not found (OpenMPI: apt-get install openmpi-bin)"
case "$BACKEND" in cuda | cpu) ;; *) die "SMOKE_BACKEND = $BACKEND: must be cuda or cpu" ;; esac
if [ -z "${GPUS:-}" ]; then
  if [ "$BACKEND" = cpu ]; then
    GPUS=$(nproc)
  else
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  fi
fi
[[ "$GPUS" =~ ^[0-9]+$ ]] || die "GPUS = $GPUS: must be a whole number"
[ "$BACKEND" = cpu ] || [ "$GPUS" -ge 2 ] || die "$GPUS GPU(s) visible: the multi-rank layouts need 2 or more"
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "SMOKE_STEPS = $STEPS: must be a positive whole number"

# name tp pp dp placement schedule recompute zero extra: the layouts of tests/trainer/CMakeLists.txt
# that use every parallel dimension and feature on 2, 4 and 8 ranks.
LAYOUTS=(
  "tp2 2 1 1 tp-dp-pp 1f1b none 0 -"
  "pp2 1 2 1 tp-dp-pp 1f1b full 0 -"
  "dp2 1 1 2 tp-dp-pp 1f1b none 0 -"
  "dp2_zero1 1 1 2 tp-dp-pp 1f1b none 1 -"
  "pp2_vs2 1 2 1 tp-dp-pp interleaved none 0 vs2"
  "tp2_sp 2 1 1 tp-dp-pp 1f1b none 0 sp"
  "pp2_terapipe_selective 1 2 1 tp-dp-pp terapipe selective 0 sl4,4,8"
  "moe_dp2_ep2 1 1 2 tp-dp-pp 1f1b none 0 moe+ep2"
  "pp2_dp2_gpipe 1 2 2 tp-dp-pp gpipe none 0 -"
  "tp2_pp2_dp2_zero1 2 2 2 tp-dp-pp 1f1b full 1 -"
  "tp2_pp2_dp2_vs2_zero1 2 2 2 tp-dp-pp interleaved none 1 vs2"
  "tp2_pp2_dp2_offload_half 2 2 2 tp-dp-pp 1f1b full 0 off0.5"
  "moe_tp2_pp2_dp2_ep2_sp_selective 2 2 2 tp-dp-pp 1f1b selective 0 moe+ep2+sp"
)

mkdir -p "$OUT" || die "cannot create $OUT"
common=(--quiet --data text --dp-bucket-kB 16 --steps "$STEPS")
gpu=(--backend "$BACKEND" --precision bf16 --comm nccl)

# The single-rank references on the CPU backend, bf16: dense and MoE.
reference() {
  local name=$1 extra=$2
  if [ ! -f "$OUT/ref_$name.summary.json" ]; then
    "$MAKE_PLAN" "$OUT/ref_$name.json" 1 1 1 tp-dp-pp 1f1b none 0 "$extra" "$OUT/ck_ref_$name" >/dev/null ||
      die "trainer_make_plan failed for the $name reference"
    "$TRAIN" --plan "$OUT/ref_$name.json" --summary "$OUT/ref_$name.summary.json" --backend cpu --precision bf16 \
      --checkpoint-dir "$OUT/ck_ref_$name" "${common[@]}" >"$OUT/ref_$name.log" 2>&1 ||
      die "the $name reference run failed: $OUT/ref_$name.log"
  fi
  echo "$OUT/ref_$name.summary.json"
}

declare -a rows
fail=0
for entry in "${LAYOUTS[@]}"; do
  read -r name tp pp dp placement schedule recompute zero extra <<<"$entry"
  if [ -n "${SMOKE_LAYOUTS:-}" ] && [[ " $SMOKE_LAYOUTS " != *" $name "* ]]; then continue; fi
  n=$((tp * pp * dp))
  if [ "$n" -gt "$GPUS" ]; then
    rows+=("| $name | $n | skipped: $GPUS rank(s) available | |")
    continue
  fi
  if [[ "$extra" == *moe* ]]; then ref=$(reference moe moe); else ref=$(reference dense -); fi
  "$MAKE_PLAN" "$OUT/$name.json" "$tp" "$pp" "$dp" "$placement" "$schedule" "$recompute" "$zero" "$extra" \
    "$OUT/ck_$name" >/dev/null || die "trainer_make_plan failed for $name"
  if ! mpirun -np "$n" --oversubscribe "$TRAIN" --plan "$OUT/$name.json" --summary "$OUT/$name.summary.json" \
    "${gpu[@]}" --checkpoint-dir "$OUT/ck_$name" "${common[@]}" >"$OUT/$name.log" 2>&1; then
    rows+=("| $name | $n | FAILED to run: $OUT/$name.log | |")
    fail=1
    continue
  fi
  expect=(--expect-comm nccl)
  [ "$BACKEND" = cpu ] && expect=(--expect-comm nccl-standin)
  if result=$("$COMPARE" "$ref" "$OUT/$name.summary.json" --rel "$REL" --expect-steps "$STEPS" "${expect[@]}" 2>&1); then
    verdict=agrees
  else
    verdict=DIFFERS
    fail=1
  fi
  worst=$(grep -o 'max relative loss difference [0-9.e+-]*' <<<"$result" | awk '{print $5}')
  rows+=("| $name | $n | $verdict | ${worst:-?} |")
  echo "$result" >"$OUT/$name.compare.txt"
done

{
  echo "# Cluster smoke test: multi-rank layouts vs the single rank"
  echo
  echo "\`scripts/cluster-smoke.sh\` on $(hostname), backend $BACKEND (bf16, NCCL), $GPUS rank(s), $STEPS steps,"
  echo "against single-rank CPU bf16 runs; bound $REL relative per step."
  echo
  echo "| layout | ranks | result | largest relative loss difference |"
  echo "| --- | ---: | --- | ---: |"
  printf '%s\n' "${rows[@]}"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $fail
