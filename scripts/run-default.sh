#!/usr/bin/env bash
# The main job on its built-in default: install what the command line needs, build the command
# line alone (no tests, no benchmarks), then plan MT-NLG 530B on 280 Selene nodes (global batch
# 1920) and print the ranked plans and where the published plan ranks. A build directory that
# scripts/test.sh configured is reused as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
scripts/install-deps.sh cli
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DFORESIGHT_TESTS=OFF
fi
cmake --build "$BUILD_DIR" --target foresight -j "$(nproc)"
echo "run-default: built after ${SECONDS} s" >&2
"./$BUILD_DIR/apps/foresight" plan
