#!/usr/bin/env bash
# Builds, on a machine without a GPU, the bundle scripts/gpu-run.sh runs on a lent GPU machine, so
# that the machine's 30 minutes go to measuring: Release binaries for sm_80 and sm_90 (foresight,
# foresight-train, the GPU tests, the kernel benchmark), the shared libraries they need beyond
# glibc, libstdc++ and the CUDA toolkit (the GPU machine has CUDA, cuDNN, NCCL, OpenMPI, Boost and
# Eigen but no SimGrid), and the PyTorch baseline script. Output: gpu-bundle/ and gpu-bundle.tar.xz
# (git-ignored; carry the archive: `run` with carry ["gpu-bundle.tar.xz"]; the limit is 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
BUNDLE=${BUNDLE:-gpu-bundle}
SHARED=${SHARED:-../shared}

# SKIP_BUILD=1 bundles what $BUILD_DIR already holds (it must have been built for sm_80 and sm_90).
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=80;90" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target foresight foresight-train foresight-commbench bench_kernels \
    gpu_gemm_attention_gpu_test gpu_kernels_gpu_test gpu_trainer_backend_gpu_test gpu_trainer_backend_bf16_gpu_test
fi

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
bins=("$BUILD_DIR/apps/foresight" "$BUILD_DIR/trainer/foresight-train" "$BUILD_DIR/trainer/foresight-commbench"
      "$BUILD_DIR/calibrate/bench_kernels")
for t in "$BUILD_DIR"/tests/gpu/gpu_*_test; do [ -x "$t" ] && bins+=("$t"); done
for b in "${bins[@]}"; do
  cp "$b" "$BUNDLE/bin/"
  strip --strip-unneeded "$BUNDLE/bin/$(basename "$b")" 2>/dev/null || true
done
# Libraries beyond the C/C++ runtime and the CUDA toolkit: gpu-run.sh puts on the library path only
# those the GPU machine lacks (ldd says "not found" there), so its own MPI and CUDA stay in charge.
for b in "$BUNDLE"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*) continue ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) continue ;;
  esac
  cp -L "$lib" "$BUNDLE/lib/"
done
if [ -f "$SHARED/bench/torch_gpt_baseline.py" ]; then
  mkdir -p "$BUNDLE/shared-bench"
  cp "$SHARED/bench/torch_gpt_baseline.py" "$BUNDLE/shared-bench/"
fi
git rev-parse HEAD >"$BUNDLE/commit"
# Compressed for the trip (the carry limit is 64 MiB for everything carried); gpu-run.sh unpacks it.
tar -C "$(dirname "$BUNDLE")" -cJf "$BUNDLE.tar.xz" "$(basename "$BUNDLE")"
du -sh "$BUNDLE" "$BUNDLE.tar.xz"
