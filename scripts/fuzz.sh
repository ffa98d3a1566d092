#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + ASan + UBSan) in BUILD_DIR (default
# build-fuzz) and runs each on its seed corpus tests/fuzz/corpus/<t>/. Fails on any crash, leak,
# timeout or sanitizer report; the reproducer is left in $BUILD_DIR/fuzz-artifacts/.
# docs/reliability.md, "Fuzzing". Two modes:
#   scripts/fuzz.sh --quick [TARGET...]   ctest's fuzz_quick: reproducible. Every corpus input once,
#       then QUICK_RUNS (default 20000) mutations from each fixed seed (QUICK_SEEDS, default "1 2");
#       the same inputs on every run, so a red suite is the code's doing, not the dice's.
#   scripts/fuzz.sh [SECONDS] [TARGET...] the longer search (default 600 s each, a random seed,
#       printed): reports the new inputs it found (those that added coverage), copied to
#       $BUILD_DIR/fuzz-artifacts/<t>-new/ for review
#   JOBS=2      targets run at the same time (each on one core)
#   KEEP=1      long run: merge the new inputs into tests/fuzz/corpus/<t>/ (minimised)
#   FUZZ_CXX=clang++-19   the compiler (default: the newest clang++ / clang++-N with libFuzzer)
# Exit 77 (ctest: skipped) when no clang with libFuzzer is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = --quick ] && { QUICK=1; shift; }
SECONDS_EACH=600
if [ "$QUICK" = 0 ] && [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_EACH=$1; shift; fi
QUICK_RUNS=${QUICK_RUNS:-20000}
QUICK_SEEDS=${QUICK_SEEDS:-1 2}
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

# fuzz T LOG ARGS...: the target under the common limits; new inputs go to the first folder
# given (scratch), the seed folder is only read.
fuzz() {
  local t=$1 log=$2 dict=(); shift 2
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  TMPDIR="$WORK" nice -n 19 "${NOASLR[@]}" "$BUILD_DIR/tests/fuzz/$t" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 "${dict[@]}" -artifact_prefix="$ART/$t-" "$@" > "$log" 2>&1
}
failed_report() {
  echo "fuzz: $1 FAILED (log $2, reproducer $ART/$1-*):"
  grep -E 'ERROR|SUMMARY|runtime error|deadly signal|Test unit written' "$2" | head -20
}
stats() { echo "$(sed -n 's/^stat::number_of_executed_units: *//p' "$1") executions, $(grep -o 'cov: [0-9]*' "$1" | tail -1)"; }

# Quick: the corpus replayed (-runs=0 runs every input once), then fixed-seed mutations. A fixed seed
# alone still drifted between runs (fuzz_corpus: cov 1436 vs 1441): the comparison operands libFuzzer
# feeds back into mutations (-use_cmp) include addresses, which address-space randomisation moves;
# both off (setarch -R, -use_cmp=0; -reduce_inputs=0), two runs give the same inputs and figures.
NOASLR=()
[ "$QUICK" = 1 ] && setarch "$(uname -m)" -R true 2>/dev/null && NOASLR=(setarch "$(uname -m)" -R)
run_quick() {
  local t=$1 seeds="tests/fuzz/corpus/$1" log="$ART/$1.log" seed
  mkdir -p "$WORK/$t"
  fuzz "$t" "$log" -runs=0 "$seeds" || { failed_report "$t" "$log"; return 1; }
  local report="corpus $(find "$seeds" -type f | wc -l) inputs replayed"
  for seed in $QUICK_SEEDS; do
    rm -rf "$WORK/$t"; mkdir -p "$WORK/$t"
    fuzz "$t" "$log" -seed="$seed" -runs="$QUICK_RUNS" -use_cmp=0 -reduce_inputs=0 "$WORK/$t" "$seeds" \
      || { failed_report "$t" "$log"; return 1; }
    report+="; seed $seed: $(stats "$log")"
  done
  echo "fuzz: $t OK (quick, reproducible): $report"
}

# Long: a random seed for SECONDS; what it found that adds coverage is reported and kept aside.
run_long() {
  local t=$1 seeds="tests/fuzz/corpus/$1" log="$ART/$1.log"
  mkdir -p "$WORK/$t" "$seeds"
  fuzz "$t" "$log" -max_total_time="$SECONDS_EACH" "$WORK/$t" "$seeds" || { failed_report "$t" "$log"; return 1; }
  local n; n=$(find "$WORK/$t" -type f | wc -l)
  rm -rf "$ART/$t-new"; mkdir -p "$ART/$t-new"
  [ "$n" = 0 ] || cp "$WORK/$t"/* "$ART/$t-new/"
  echo "fuzz: $t OK: ${SECONDS_EACH} s, seed $(sed -n 's/^INFO: Seed: *//p' "$log" | head -1), $(stats "$log");" \
    "$n new inputs (added coverage)$([ "$n" = 0 ] || echo " in $ART/$t-new/")"
  if [ "${KEEP:-0}" = 1 ] && [ "$n" != 0 ]; then
    TMPDIR="$WORK" nice -n 19 "$BUILD_DIR/tests/fuzz/$t" -merge=1 "$seeds" "$WORK/$t" > "$log.merge" 2>&1
    echo "fuzz: $t corpus kept: $(find "$seeds" -type f | wc -l) inputs in $seeds"
  fi
}
run_one() { if [ "$QUICK" = 1 ]; then run_quick "$1"; else run_long "$1"; fi; }

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
