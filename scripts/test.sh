#!/usr/bin/env bash
# Install, build and run every CPU test (GPU tests skip themselves and say so without a GPU), then
# the same tests again under AddressSanitizer + UBSan (scripts/sanitize.sh; SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
scripts/install-deps.sh
echo "test.sh: dependencies ready after ${SECONDS} s"
# The CUDA code compiles for the A100 (sm_80) and the H100/H200 (sm_90) whether or not a GPU is
# here; the tests are built (a build directory made by run-default.sh, without them, is
# reconfigured), and g++'s warnings are errors.
scripts/build.sh -DFORESIGHT_TESTS=ON -DFORESIGHT_WERROR=ON "-DCMAKE_CUDA_ARCHITECTURES=80;90"
echo "test.sh: built after ${SECONDS} s"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
if [ "${SANITIZE:-1}" != 0 ]; then
  echo "test.sh: tests passed after ${SECONDS} s; sanitizer pass next"
  scripts/sanitize.sh
fi
echo "test.sh: all passed in ${SECONDS} s"
