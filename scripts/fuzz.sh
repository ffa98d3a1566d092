#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + ASan + UBSan) in BUILD_DIR (default
# build-fuzz) and runs each for SECONDS (default 600) on its seed corpus tests/fuzz/corpus/<t>/.
# Fails on any crash, leak, timeout or sanitizer report; the reproducer is left in
# $BUILD_DIR/fuzz-artifacts/. docs/reliability.md, "Fuzzing".
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   JOBS=2      targets run at the same time (each on one core)
#   KEEP=1      merge inputs that add coverage back into tests/fuzz/corpus/<t>/ (minimised)
#   FUZZ_CXX=clang++-19   the compiler (default: the newest clang++ / clang++-N with libFuzzer)
# Exit 77 (ctest: skipped) when no clang with libFuzzer is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-600}
shift || true
TARGETS=("$@")
[ "${#TARGETS[@]}" -eq 0 ] && TARGETS=(fuzz_shard fuzz_config fuzz_corpus fuzz_safetensors)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}
has_libfuzzer() {
  command -v "$1" >/dev/null && [ -f "$("$1" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]
}
CXX=${FUZZ_CXX:-}
if [ -z "$CXX" ]; then
  for c in clang++ clang++-{21..14}; do has_libfuzzer "$c" && { CXX=$c; break; }; done
fi
if [ -z "$CXX" ] || ! has_libfuzzer "$CXX"; then
  echo "fuzz: no clang++ with libFuzzer found (apt-get install clang libclang-rt-dev, or clang-14 libclang-rt-14-dev); skipped"
  exit 77
fi
source scripts/env.sh

export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# -O1 -g with assertions on (no NDEBUG): nlohmann's and our asserts are checks too.
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  mkdir -p "$BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DLM_FUZZ=ON -DLM_PYTHON="$LM_PYTHON" \
    -DLM_BUILD_TESTS=OFF -DLM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" > "$BUILD_DIR.cmake.log" 2>&1 ||
    { cat "$BUILD_DIR.cmake.log"; exit 1; }
fi
nice -n 19 ninja -C "$BUILD_DIR" -j "$JOBS" "${TARGETS[@]}"

# detect_leaks=0: LibTorch's and ICU's process-lifetime allocations (made on the first input)
#   would be reported as leaks by libFuzzer's per-input leak check.
# UBSan aborts already (-fno-sanitize-recover); print_stacktrace says where.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ART="$BUILD_DIR/fuzz-artifacts"
WORK=$(mktemp -d /tmp/lm_fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$ART"

run_one() {
  local t=$1 seeds="tests/fuzz/corpus/$1" dict=() log="$ART/$1.log"
  mkdir -p "$WORK/$t" "$seeds"
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  # New inputs go to the first folder (scratch); the seed folder is only read.
  if TMPDIR="$WORK" nice -n 19 "$BUILD_DIR/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" \
       -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 "${dict[@]}" \
       -artifact_prefix="$ART/$t-" "$WORK/$t" "$seeds" > "$log" 2>&1; then
    local execs cov
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $t OK: ${SECONDS_EACH} s, $execs executions, $cov, corpus $(find "$WORK/$t" "$seeds" -type f | wc -l) inputs"
    if [ "${KEEP:-0}" = 1 ]; then
      TMPDIR="$WORK" nice -n 19 "$BUILD_DIR/tests/fuzz/$t" -merge=1 "$seeds" "$WORK/$t" > "$log.merge" 2>&1
      echo "fuzz: $t corpus kept: $(find "$seeds" -type f | wc -l) inputs in $seeds"
    fi
  else
    echo "fuzz: $t FAILED (log $log, reproducer $ART/$t-*):"
    grep -E 'ERROR|SUMMARY|runtime error|deadly signal|Test unit written' "$log" | head -20
    return 1
  fi
}

pids=(); failed=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$JOBS" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed
