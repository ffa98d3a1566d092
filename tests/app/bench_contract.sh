#!/usr/bin/env bash
# train_step_bench's contract with scripts/gpu-check.sh and the Python peer (issue 29 items 2, 5, 6
# and 7), on the CPU at toy sizes:
#   2. the start-up verification is on in train mode: a fast path broken on purpose is caught and
#      named ("fast_path_fallback"), so no stage times an unverified kernel;
#   5. a failing run still prints (and flushes) its JSON line, with the exit code and the error;
#   6. the preset's learning rate (400m: 3e-4, not the 3e-3 default), and a non-finite step is
#      skipped, not fatal;
#   7. bench and peer time the same window: --warmup, --steps, --read-every, and the host reads the
#      loss on the same steps (3 reads for 6 steps read every 2, on both sides).
# and issue 38 items 1, 2 and 4: an exception inside fit (a c10::Error, planted by LM_BENCH_PLANT=throw)
# still prints the line with "error" and exits non-zero; a crash right after the line
# (LM_BENCH_PLANT=crash, through gpu-check's LM_GPU_CHECK_PLANT) still builds the headline with
# the exit code; the throughput floor is off (no phase-by-phase step inside the timed window).
#   bench_contract.sh TRAIN_STEP_BENCH PYTHON
set -u
bench=$1; py=$2; here=$(cd "$(dirname "$0")/../.." && pwd)
small="--preset tiny --batch 2 --seq 16 --threads 1"
win="--warmup 2 --steps 4 --read-every 2"
fail=0
# expect NAME PYTHON-CONDITION-ON-d JSONLINE
expect() {
  if "$py" -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if ($2) else 1)" "${3:-{\}}"; then echo "ok: $1"
  else echo "FAIL: $1: ${3:-no JSON line}"; fail=1; fi
}
line() { grep '^{' | tail -1; }

out=$("$bench" $small $win --break-fast-path loss.chunked 2>/dev/null | line)
expect "2: the start-up check runs in train mode and catches a broken fast path" \
  'd["verify_at_start"] and d["fast_path_fallback"] == "loss.chunked" and "attention.sdpa" in d["fast_paths_verified"]' "$out"

tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
"$bench" $small $win --inject-nan-step 1 --nan-skip-limit 0 > "$tmp" 2>/dev/null; rc=$?; out=$(line < "$tmp")
expect "5: a failed run prints its line with exit code and error" \
  'd["exit_code"] == 1 and "non-finite" in d["error"]' "$out"
[ "$rc" != 0 ] || { echo "FAIL: 5: the failed run exited 0"; fail=1; }

out=$("$bench" $small $win --inject-nan-step 2 2>/dev/null | line)
expect "6: a non-finite step is skipped, the figure kept" 'd["exit_code"] == 0 and d["nan_skipped"] == 1 and d["tokens_per_s"] > 0' "$out"
out=$("$bench" --preset 400m --n-layers 1 --vocab 512 --batch 1 --seq 16 --threads 1 --warmup 1 --steps 1 --read-every 1 2>/dev/null | line)
expect "6: the preset's own learning rate (400m: 3e-4)" 'd["lr"] == 3e-4 and d["exit_code"] == 0' "$out"

ours=$("$bench" $small $win 2>/dev/null | line)
peer=$("$py" "$here/bench/peer_pytorch.py" $small $win 2>/dev/null | line)
expect "7: lmforge's window" 'd["warmup"] == 2 and d["steps"] == 4 and d["read_every"] == 2 and d["host_reads"] == 3' "$ours"
expect "7: the peer's window, the same reads" 'd["warmup"] == 2 and d["steps"] == 4 and d["read_every"] == 2 and d["host_reads"] == 3' "$peer"
"$bench" $small --warmup 3 --steps 4 --read-every 2 > /dev/null 2>&1 && { echo "FAIL: 7: a window off the read cadence was accepted"; fail=1; }
expect "38.4: the throughput floor is off in the bench" 'd["mfu_floor"] == 0 and d["floor_fired"] is False' "$ours"

LM_BENCH_PLANT=throw "$bench" $small $win > "$tmp" 2>/dev/null; rc=$?; out=$(line < "$tmp")
expect "38.2: an exception inside fit still prints the line, with error" \
  'd["exit_code"] == 1 and "planted failure" in d["error"] and "c10::Error" in d["error"]' "$out"
[ "$rc" != 0 ]; [ $? = 0 ] && echo "ok: 38.2: it exits non-zero ($rc)" || { echo "FAIL: 38.2: exit 0 after an exception"; fail=1; }

# The real bench through gpu-check's stage machinery, a failure planted in each headline stage.
PY=$py DEVICE=cpu BUDGET=300 T0=$(date +%s) PEAK_SPEC=1e11 PEAK_MEASURED=1e11 GPU_NAME=cpu
WORK=$(mktemp -d /tmp/lm_bench_contract.XXXXXX); trap 'rm -rf "$tmp" "$WORK"' EXIT
OUT=$WORK/out; mkdir -p "$OUT"; RES=$WORK/results.jsonl LOG=$OUT/gpu-check.log; : > "$RES"; : > "$OUT/stages.log"
source "$here/scripts/gpu_check_lib.sh"
export LM_GPU_CHECK_PLANT="step-lmforge=crash,step-lmforge-2=throw"
step_stage step-lmforge 1 120 "$bench" $small $win > /dev/null 2>&1
step_stage step-lmforge-2 1 120 "$bench" $small $win > /dev/null 2>&1
unset LM_GPU_CHECK_PLANT
res=$(cat "$OUT/results.json")
expect "38.1: a crash after the line (SIGSEGV) still builds the headline, with the exit code" \
  'd["headline"]["exit_code"] == 139 and d["headline"]["tokens_per_s"] > 0 and d["headline"]["status"] == "failed"' "$res"
expect "38.2: the planted exception's stage keeps its line, with error" \
  'd["stages"]["step-lmforge-2"]["status"] == "failed" and "planted failure" in d["stages"]["step-lmforge-2"]["error"]' "$res"
exit $fail
