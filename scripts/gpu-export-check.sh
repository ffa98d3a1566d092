#!/usr/bin/env bash
# HF export loaded by the real transformers / SentencePiece (tests/export/hf_transformers_check.py),
# for the GPU machine, whose python3 has torch + transformers. Run after scripts/gpu-check.sh has
# configured build-gpu (it builds export_test itself; ~1 minute). Each part prints ok / FAIL, or
# SKIP (exit 77) when its Python module is missing there. Results go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}  # the interpreter with torch (+ transformers)
BUILD=${BUILD:-build-gpu}  # the build folder (scripts/gpu-check.sh passes its own)
log() { echo "[gpu-export-check $(date +%T)] $*" | tee -a "$OUT/gpu-check.log"; }
JOBS=$(nproc) timeout 240 ninja -C "$BUILD" export_test > "$OUT/build-export-test.log" 2>&1 \
  || { log "export_test build failed"; tail -30 "$OUT/build-export-test.log"; exit 1; }
"$PY" -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tee "$OUT/hf-versions.txt"
rc_all=0
for part in model tokenizer spm; do
  timeout 300 "$PY" tests/export/hf_transformers_check.py --part $part --work "$OUT/hf-fixture-$part" \
    --export-test "$BUILD/tests/export/export_test" > "$OUT/hf-$part.txt" 2>&1
  rc=$?
  case $rc in 0) log "hf $part: ok" ;; 77) log "hf $part: SKIPPED ($(head -1 "$OUT/hf-$part.txt"))" ;;
    *) log "hf $part: FAIL (rc $rc)"; tail -20 "$OUT/hf-$part.txt"; rc_all=1 ;; esac
done
exit $rc_all
