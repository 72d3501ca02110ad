#!/usr/bin/env bash
# Fuzzes every input format with libFuzzer (clang, ASan + UBSan): scenario YAML, plan.json and
# calibration profiles. Builds ./build-fuzz, seeds each corpus from scenarios/, tests/data and
# tests/fuzz/seeds, and runs each target for RUNS executions (default 1,000,000), MAX_TIME seconds
# at most as a hang guard, and PER_INPUT_TIMEOUT seconds per input. A crash, a leak, an escaped
# exception or a slow input stops that target; its input is minimized into
# tests/data/fuzz-regressions/<target>/ (fix the code, then commit it: fuzz_regressions_test
# replays it in every build). Exit status 1 when a target found something or fell short of RUNS.
#   scripts/fuzz.sh [target...]      targets: scenario_yaml plan_json profile_json
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000}
MAX_TIME=${MAX_TIME:-3600}
PER_INPUT_TIMEOUT=${PER_INPUT_TIMEOUT:-10}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(scenario_yaml plan_json profile_json)

# clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev).
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends clang libclang-rt-dev
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DFORESIGHT_FUZZ=ON -DFORESIGHT_CUDA=OFF \
    -DFORESIGHT_SIMGRID=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]/%/_fuzzer}"

seeds() {
  case "$1" in
    scenario_yaml) ls scenarios/{experiments,models,clusters,gpus}/*.yaml tests/data/good/*.yaml tests/data/bad/*.yaml ;;
    *) ls tests/fuzz/seeds/"$1"/* ;;
  esac
  ls tests/data/fuzz-regressions/"$1"/* 2>/dev/null | grep -v README.md || true
}
dict() { case "$1" in scenario_yaml) echo tests/fuzz/scenario_yaml.dict ;; *) echo tests/fuzz/json.dict ;; esac; }

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus="$BUILD_DIR/corpus/$t" artifacts="$BUILD_DIR/artifacts/$t/" log="$BUILD_DIR/fuzz-$t.log"
  mkdir -p "$corpus" "$artifacts"
  seeds "$t" | xargs -r cp -t "$corpus"
  echo "fuzz: $t: $RUNS runs (at most ${MAX_TIME}s), log in $log"
  start=$(date +%s)
  set +e
  "$BUILD_DIR/tests/fuzz/${t}_fuzzer" -runs="$RUNS" -max_total_time="$MAX_TIME" -timeout="$PER_INPUT_TIMEOUT" \
    -rss_limit_mb=2048 -max_len=4096 -dict="$(dict "$t")" -artifact_prefix="$artifacts" -print_final_stats=1 \
    "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  line="$t: ${execs:-?} executions in $(( $(date +%s) - start ))s, exit $rc"
  if [ $rc -ne 0 ]; then
    failed=1
    for a in "$artifacts"*; do
      [ -f "$a" ] || continue
      dest="tests/data/fuzz-regressions/$t/$(basename "$a")"
      mkdir -p "$(dirname "$dest")"
      "$BUILD_DIR/tests/fuzz/${t}_fuzzer" -minimize_crash=1 -runs=20000 -timeout="$PER_INPUT_TIMEOUT" \
        -exact_artifact_path="$dest" "$a" >>"$log" 2>&1 || true
      [ -f "$dest" ] || cp "$a" "$dest"
      line+="; finding minimized into $dest"
    done
    grep -m1 -E "ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|terminate called|deadly signal" "$log" |
      sed 's/^/    /' || true
  elif [ "${execs:-0}" -lt "$RUNS" ]; then
    failed=1
    line+=" (fewer than $RUNS: raise MAX_TIME)"
  fi
  summary+=("$line")
done
printf 'fuzz: %s\n' "${summary[@]}"
exit $failed
