#!/usr/bin/env bash
# Install, build and run every CPU test (GPU tests skip themselves and say so without a GPU), then
# the same tests again under AddressSanitizer + UBSan (scripts/sanitize.sh; SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
scripts/install-deps.sh
echo "test.sh: dependencies ready after ${SECONDS} s"
# Without a GPU the CUDA code is only compiled, never run: one architecture (sm_90) proves that it
# compiles at half the nvcc time of the default pair (CI has 2 cores and a 20-minute budget).
# A configured build directory keeps its own choice; with a GPU the default (sm_80 + sm_90) stays.
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -f "${BUILD_DIR:-build}/build.ninja" ]; then
  scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90
else
  scripts/build.sh
fi
echo "test.sh: built after ${SECONDS} s"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
if [ "${SANITIZE:-1}" != 0 ]; then
  echo "test.sh: tests passed after ${SECONDS} s; sanitizer pass next"
  scripts/sanitize.sh
fi
echo "test.sh: all passed in ${SECONDS} s"
