#!/usr/bin/env bash
# Configures (once) and builds Foresight in ./build (Release, Ninja). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DFORESIGHT_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja "$@"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
