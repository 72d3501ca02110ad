#!/usr/bin/env bash
# Builds the CPU parts with AddressSanitizer + UndefinedBehaviorSanitizer into ./build-asan and runs
# every CPU test there. Any finding aborts the test that hit it (-fno-sanitize-recover=all, and
# halt_on_error for ASan), so a green run means zero findings. -O1 keeps the build and the run
# affordable on CI's two cores; -g1 (line tables only) still names every frame's function, file and
# line in a report, and compiles about a third faster than -g (planner/search.cpp: 11.7 s vs 18.6 s).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DFORESIGHT_SANITIZE=ON -DFORESIGHT_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
# Left out by the label sanitizer-skip (they ran in the normal pass just before): binaries named
# *_uninstrumented_test (the million-GPU plan search, which repeats the planner's code at a scale
# that takes 25x longer instrumented; the Chromium rendering of the report, whose time goes to
# Python and Chromium, which are not instrumented, while the same report C++ runs here in
# Report.WritesHtmlMarkdownDataAndEveryFigure; the checks on validate's numbers, each a whole
# validation of the library, about 60 s instrumented (130 s before TeraPipe's slicing search read
# its table, 290 s before the fit's refits were scoped), while
# ValidateCli.EveryMeasuredExperimentIsCompared takes the validate code through the sanitizers; the
# calibration fit's byte-for-byte reproduction and TeraPipe's slicing beside validate, 100 s and
# 36 s, whose code calibration_fit_test and that validation take through; a 64-GPU plan search,
# 91 s, plan_search_uninstrumented_test, whose code the smaller searches take), and the trainer
# layouts that repeat code the combined layouts listed in tests/trainer/CMakeLists.txt
# (_sanitize_layouts) already take through the sanitizers.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" -LE sanitizer-skip
