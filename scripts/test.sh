#!/usr/bin/env bash
# Install, build and run every CPU test (GPU tests skip themselves and say so without a GPU), then
# the same tests again under AddressSanitizer + UBSan (scripts/sanitize.sh; SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
if [ "${SANITIZE:-1}" != 0 ]; then
  scripts/sanitize.sh
fi
