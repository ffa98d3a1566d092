#!/usr/bin/env bash
# scripts/gpu-check.sh's stage machinery on fake stages (issue 29 items 5 and 10), no GPU needed:
#  - a stage whose command prints its JSON line and then exits non-zero keeps the line (its
#    tokens/s, both MFUs) with the exit code, and its stderr is kept in $OUT/stages.log;
#  - a stage whose fast path fell back at start-up is "fell-back", not ok;
#  - the carried .debs are checked in well under a second, naming what is missing.
#   gpu_check_stages.sh PYTHON
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
PY=$1 DEVICE=cpu BUDGET=100 T0=$(date +%s)
WORK=$(mktemp -d /tmp/lm_gpu_check_test.XXXXXX); trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out; mkdir -p "$OUT"; RES=$WORK/results.jsonl LOG=$OUT/gpu-check.log; : > "$RES"; : > "$OUT/stages.log"
PEAK_SPEC=1e12 PEAK_MEASURED=8e11
source "$here/scripts/gpu_check_lib.sh"
fail=0
check() { if "$PY" -c "import json,sys; d=json.load(open('$OUT/results.json')); sys.exit(0 if ($2) else 1)"; then echo "ok: $1"; else echo "FAIL: $1"; cat "$OUT/results.json"; fail=1; fi; }

# A figure followed by a crash (the first GPU run: trained, then SIGSEGV on the way out).
step_stage late-crash 1 30 bash -c 'echo "CUDA graphs: step 3 captured (1 micro-batch); later steps replay it" >&2
  echo "{\"tokens_per_s\": 1000.0, \"flops_per_token\": 6e8, \"cuda_graphs\": true}"; echo "Segmentation fault" >&2; exit 139' > /dev/null
check "a non-zero exit keeps the line and its exit code" \
  'd["stages"]["late-crash"]["status"] == "failed" and d["stages"]["late-crash"]["exit_code"] == 139 and d["stages"]["late-crash"]["tokens_per_s"] == 1000.0'
check "both MFUs, by name, against the peak stage's figures" \
  'abs(d["stages"]["late-crash"]["mfu"] - 0.6) < 1e-9 and abs(d["stages"]["late-crash"]["mfu_measured_peak"] - 0.75) < 1e-9'
check "what ran is recorded: the graph captured at step 3" 'd["stages"]["late-crash"]["graph_captured_at_step"] == 3'
if grep -q "==== late-crash: exit 139" "$OUT/stages.log" && grep -q "Segmentation fault" "$OUT/stages.log"; then
  echo "ok: the stage's stderr is kept in \$OUT/stages.log"; else echo "FAIL: stages.log lacks the stage's stderr"; cat "$OUT/stages.log"; fail=1; fi

step_stage fell-back 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"flops_per_token\": 1, \"fast_path_fallback\": \"swiglu.cuda\"}"' > /dev/null
check "a fast path that fell back at start-up is not a clean figure" 'd["stages"]["fell-back"]["status"] == "fell-back"'
step_stage clean 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"flops_per_token\": 1, \"fast_path_fallback\": \"\"}"' > /dev/null
check "a clean stage is ok" 'd["stages"]["clean"]["status"] == "ok" and d["stages"]["clean"]["exit_code"] == 0'

# The preflight of what is carried: empty, then every package but one, then all.
deps=$WORK/deps; mkdir -p "$deps"
t=$(date +%s%N); out=$(check_deps "$deps"); rc=$?; ms=$(( ($(date +%s%N) - t) / 1000000 ))
if [ $rc != 0 ] && grep -q "lacks 18 of the 18 packages" <<<"$out" && grep -q -- "--prepare" <<<"$out" && [ $ms -lt 1000 ]; then
  echo "ok: an empty .gpu-deps fails in ${ms} ms, saying what to run"; else echo "FAIL: empty deps: rc $rc in $ms ms: $out"; fail=1; fi
for p in $DEBS; do
  [ "$p" = libgloo-dev ] && continue
  mkdir -p "$WORK/pkg/DEBIAN"; printf 'Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: t\nDescription: t\n' "$p" > "$WORK/pkg/DEBIAN/control"
  dpkg-deb --build "$WORK/pkg" "$deps/${p}_1_all.deb" > /dev/null 2>&1 || : > "$deps/${p}_1_all.deb"
done
out=$(check_deps "$deps"); rc=$?
if [ $rc != 0 ] && grep -q "lacks 1 of the 18 packages to carry: libgloo-dev" <<<"$out"; then
  echo "ok: one missing package is named"; else echo "FAIL: one missing: rc $rc: $out"; fail=1; fi
cp "$deps/libpkgconf3_1_all.deb" "$deps/libgloo-dev_1_all.deb"
out=$(check_deps "$deps"); rc=$?
if [ $rc = 0 ]; then echo "ok: all packages there: $out"; else echo "FAIL: complete deps refused: $out"; fail=1; fi
exit $fail
