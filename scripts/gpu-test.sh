#!/usr/bin/env bash
# On a GPU machine: build (Release; sm_90 when nvidia-smi reports an H100/H200), run every GPU test
# (tests/gpu), the kernel benchmarks, PyTorch's numbers on the same shapes when torch imports, and
# a calibration (quick unless CALIBRATE=full); results under ${OUT:-out}/, a short table last.
# SKIP_BUILD=1 uses binaries already in $BUILD_DIR (built elsewhere for sm_90, e.g. carried to a
# lent GPU machine so that its time goes to measuring). Exit code: the GPU tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
BUILD_DIR=${BUILD_DIR:-build-gpu}
mkdir -p "$OUT"

arch_flag=()
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  echo "GPU: $gpu_name"
  case "$gpu_name" in *H100*|*H200*|*GH200*) arch_flag=(-DCMAKE_CUDA_ARCHITECTURES=90) ;; *A100*) arch_flag=(-DCMAKE_CUDA_ARCHITECTURES=80) ;; esac
else
  echo "gpu-test.sh: nvidia-smi not found: the GPU tests will skip themselves" >&2
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${arch_flag[@]}" >"$OUT/configure.log" 2>&1 ||
    { cat "$OUT/configure.log"; exit 2; }
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target foresight foresight-train bench_kernels gpu_gemm_attention_gpu_test gpu_kernels_gpu_test \
    gpu_trainer_backend_gpu_test gpu_trainer_backend_bf16_gpu_test \
    >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 2; }
fi

status=0
summary=()
for t in "$BUILD_DIR"/tests/gpu/gpu_*_test; do
  name=$(basename "$t")
  timeout "${TEST_TIMEOUT:-300}" "$t" --gtest_output="json:$OUT/$name.json" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && status=1
  passed=$(grep -c '^\[       OK \]' "$OUT/$name.log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$OUT/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \].*(' "$OUT/$name.log")
  summary+=("$(printf '%-34s passed %3d  failed %3d  skipped %3d' "$name" "$passed" "$failed" "$skipped")")
done

timeout 300 "$BUILD_DIR"/calibrate/bench_kernels "$OUT/bench_kernels.json" | tee "$OUT/bench_kernels.txt"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  timeout 300 python3 calibrate/bench_torch.py "$OUT/bench_torch.json" | tee "$OUT/bench_torch.txt"
else
  echo "PyTorch with CUDA is not importable: no side-by-side numbers" | tee "$OUT/bench_torch.txt"
fi
calibrate_args=(--quick --out "$OUT/profile-quick.json")
[ "${CALIBRATE:-quick}" = full ] && calibrate_args=(--out "$OUT/profile.json")
timeout "${CALIBRATE_TIMEOUT:-900}" "$BUILD_DIR"/apps/foresight calibrate "${calibrate_args[@]}" 2>"$OUT/calibrate.log" |
  tee "$OUT/calibrate.txt"

echo
echo "== GPU tests =="
printf '%s\n' "${summary[@]}"
echo "== kernels vs PyTorch =="
python3 calibrate/compare_bench.py "$OUT/bench_kernels.json" "$OUT/bench_torch.json" | tee "$OUT/compare.txt"
exit $status
