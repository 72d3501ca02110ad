#!/usr/bin/env bash
# Install, build and run every CPU test (GPU tests skip themselves and say so without a GPU), then
# the same tests again under AddressSanitizer + UBSan (scripts/sanitize.sh; SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
scripts/install-deps.sh
echo "test.sh: dependencies ready after ${SECONDS} s"
scripts/build.sh
echo "test.sh: built after ${SECONDS} s"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
if [ "${SANITIZE:-1}" != 0 ]; then
  echo "test.sh: tests passed after ${SECONDS} s; sanitizer pass next"
  scripts/sanitize.sh
fi
echo "test.sh: all passed in ${SECONDS} s"
