#!/usr/bin/env bash
# scripts/gpu-check.sh's stage machinery on fake stages (issue 29 items 5 and 10, issue 38), no GPU:
#  - a stage whose command prints its JSON line and then exits non-zero keeps the line (its
#    tokens/s, both MFUs) with the exit code, and its stderr is kept in $OUT/stages.log;
#  - a crash after the JSON line of the headline's stage still builds the headline, with the exit
#    code; the samples alternate (lmforge, peer, lmforge) and both lmforge runs are reported;
#  - a planted hang (a command that ignores SIGTERM) is killed, recorded, and the next stage starts;
#  - a stage whose fast path fell back at start-up is "fell-back", not ok; tokens/s of 0, a graphs
#    stage without a graph and skipped non-finite steps are not ok either;
#  - every timeout of the check has -k; the .debs are unpacked whenever they are carried, and what
#    points at them is not exported;
#  - the carried .debs are checked in well under a second, naming what is missing.
#   gpu_check_stages.sh PYTHON
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
PY=$1 DEVICE=cpu BUDGET=100 T0=$(date +%s)
WORK=$(mktemp -d /tmp/lm_gpu_check_test.XXXXXX); trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out; mkdir -p "$OUT"; RES=$WORK/results.jsonl LOG=$OUT/gpu-check.log; : > "$RES"; : > "$OUT/stages.log"
PEAK_SPEC=1e12 PEAK_MEASURED=8e11 GPU_NAME="NVIDIA H100 80GB HBM3"
source "$here/scripts/gpu_check_lib.sh"
fail=0
say() { if [ "$1" = 0 ]; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }
check() { if "$PY" -c "import json,sys; d=json.load(open('$OUT/results.json')); h=d.get('headline', {}); sys.exit(0 if ($2) else 1)"; then echo "ok: $1"; else echo "FAIL: $1"; cat "$OUT/results.json"; fail=1; fi; }

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
step_stage other-sdpa 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"sdpa_backend\": \"cudnn\", \"sdpa_backend_used\": \"flash\"}"' > /dev/null
check "item 3: a stage whose SDPA backend gave way to another is fell-back, naming both" \
  'd["stages"]["other-sdpa"]["status"] == "fell-back" and "cudnn asked, flash used" in d["stages"]["other-sdpa"]["why"]'

# The headline: our step crashed after its JSON line, the peer, our step again (issue 38 items 1,
# 10, 11). The peak stage's judgement and the GPU's name go into it.
result peak ok '{"bf16_flops": 8e11, "bf16_judgement": "plausible"}'
step_stage step-lmforge 1 30 bash -c 'echo "{\"tokens_per_s\": 1000.0, \"flops_per_token\": 6e8, \"nan_skipped\": 0, \"first_loss\": 10.4, \"final_loss\": 7.1, \"fast_path_fallback\": \"\"}"; kill -SEGV $$' > /dev/null
step_stage step-peer-compile 1 30 bash -c 'echo "{\"tokens_per_s\": 500.0, \"flops_per_token\": 6e8, \"first_loss\": 10.4, \"final_loss\": 7.0}"' > /dev/null
step_stage step-lmforge-2 1 30 bash -c 'echo "{\"tokens_per_s\": 1100.0, \"flops_per_token\": 6e8, \"nan_skipped\": 0, \"fast_path_fallback\": \"\"}"' > /dev/null
check "1: a crash after the JSON line still builds the headline, with the exit code and status" \
  'd["headline"]["tokens_per_s"] == 1000.0 and d["headline"]["exit_code"] == 139 and d["headline"]["status"] == "failed"'
check "10: the headline has the peer's MFU, the GPU, the ceiling's judgement, nan_skipped, first and last loss" \
  'h["peer_compile"]["mfu"] == 0.3 and h["gpu"].startswith("NVIDIA H100") and h["peak_judgement"] == "plausible" and h["nan_skipped"] == 0 and h["first_loss"] == 10.4 and h["final_loss"] == 7.1'
check "11: both lmforge samples, the ratio of their mean to the peer" \
  '[s["tokens_per_s"] for s in h["lmforge_samples"]] == [1000.0, 1100.0] and h["ratio_to_peer_compile"] == 2.1 and h["ratio_to_peer_compile_per_sample"] == [2.0, 2.2]'

# Issue 39: recompute's step time against the lmforge samples around it (1000, 1100 and 1200 tok/s
# against 825: 1.333x) and each step's peak allocation against the plan.
step_stage step-lmforge-recompute 1 30 bash -c 'echo "{\"tokens_per_s\": 825.0, \"flops_per_token\": 6e8, \"fast_path_fallback\": \"\", \"peak_vs_plan\": 0.93}"' > /dev/null
step_stage step-lmforge-3 1 30 bash -c 'echo "{\"tokens_per_s\": 1200.0, \"flops_per_token\": 6e8, \"fast_path_fallback\": \"\"}"' > /dev/null
check "issue 39: recompute's step time from the alternating samples, and the peak against the plan" \
  'd["scale"]["recompute_step_time_x"] == 1.333 and d["scale"]["peak_vs_plan"] == {"step-lmforge-recompute": 0.93}'

# A planted hang: the stage's command ignores SIGTERM; -k kills it 5 s after its cap, the stage is
# recorded, and the next one starts.
t=$(date +%s)
LM_GPU_CHECK_PLANT="hung=hang,other=crash" step_stage hung 1 2 bash -c 'echo "{\"tokens_per_s\": 5.0}"' > /dev/null
secs=$(( $(date +%s) - t ))
LM_GPU_CHECK_PLANT="hung=hang" step_stage after-hang 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"flops_per_token\": 1, \"plant\": \"$LM_BENCH_PLANT\"}"' > /dev/null
check "13: a planted hang is killed (SIGKILL after SIGTERM) and recorded" \
  'd["stages"]["hung"]["status"] == "timed-out" and d["stages"]["hung"]["exit_code"] == 137 and d["stages"]["hung"]["after_s"] == 2'
check "13: the next stage starts and is ok (no plant reaches it)" 'd["stages"]["after-hang"]["status"] == "ok" and d["stages"]["after-hang"]["plant"] == ""'
[ "$secs" -le 12 ]; say $? "13: the hung stage took ${secs} s (cap 2 s + 5 s to SIGKILL)"
grep -q "start hung" "$LOG" && grep -q "start after-hang" "$LOG" && \
  [ "$(grep -n "start after-hang" "$LOG" | cut -d: -f1)" -gt "$(grep -n "hung: timed-out" "$LOG" | cut -d: -f1)" ]
say $? "13: \"start STAGE\" is logged before each stage, the next after the hung one's record"
LM_GPU_CHECK_PLANT="planted=crash" step_stage planted 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"plant\": \"$LM_BENCH_PLANT\"}"' > /dev/null
check "the plant reaches its stage's command as LM_BENCH_PLANT" 'd["stages"]["planted"]["plant"] == "crash"'

# Not ok with exit code 0 (item 5).
step_stage zero-rate 1 30 bash -c 'echo "{\"tokens_per_s\": 0.0, \"flops_per_token\": 1}"' > /dev/null
step_stage no-graph 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"cuda_graphs\": true, \"graph_captured\": false}"' > /dev/null
step_stage nan 1 30 bash -c 'echo "{\"tokens_per_s\": 5.0, \"nan_skipped\": 2}"' > /dev/null
check "5: tokens/s of 0 is failed" 'd["stages"]["zero-rate"]["status"] == "failed" and "tokens_per_s is 0" in d["stages"]["zero-rate"]["why"]'
check "5: a graphs stage without a captured graph is no-graph" 'd["stages"]["no-graph"]["status"] == "no-graph"'
check "5: skipped non-finite steps are nan-skipped" 'd["stages"]["nan"]["status"] == "nan-skipped" and "2 non-finite" in d["stages"]["nan"]["why"]'

# No headline from a zero rate or a fallback (a fresh results file).
: > "$RES"
step_stage step-lmforge 1 30 bash -c 'echo "{\"tokens_per_s\": 0.0}"' > /dev/null
check "1: no headline from tokens/s of 0" '"headline" not in d'
step_stage step-lmforge 1 30 bash -c 'echo "{\"tokens_per_s\": 9.0, \"fast_path_fallback\": \"attention.sdpa\"}"' > /dev/null
check "1: no headline from a stage that fell back" '"headline" not in d'

# Item 6: every timeout in the check has -k (SIGKILL after SIGTERM).
bad=$(grep -nE '(^|[^-])\btimeout +[^-]' "$here/scripts/gpu-check.sh" "$here/scripts/gpu_check_lib.sh" | grep -v '^\S*:\s*#' | grep -v 'timeout -k')
[ -z "$bad" ]; say $? "6: every timeout has -k${bad:+: $bad}"

# Items 7 and 8: .debs carried are unpacked even where absl and SentencePiece are installed, and
# what points at them goes into DEPS_ENV (cmake and ninja), not into this shell's environment.
d7=$WORK/d7; mkdir -p "$d7/pkg/DEBIAN" "$d7/pkg/usr/include/CLI"
printf 'Package: libcli11-dev\nVersion: 1\nArchitecture: all\nMaintainer: t\nDescription: t\n' > "$d7/pkg/DEBIAN/control"
echo "// CLI11" > "$d7/pkg/usr/include/CLI/CLI.hpp"
mkdir -p "$d7/debs"; dpkg-deb --build "$d7/pkg" "$d7/debs/libcli11-dev_1_all.deb" > /dev/null 2>&1
need_deps "$d7/debs"; say $? "7: carried .debs are unpacked whenever they are there"
before="${LD_LIBRARY_PATH:-}|${CPATH:-}|${LIBRARY_PATH:-}|$PATH"
use_deps "$d7/debs" "$d7/root" > /dev/null
[ -f "$d7/root/usr/include/CLI/CLI.hpp" ] && [ "$before" = "${LD_LIBRARY_PATH:-}|${CPATH:-}|${LIBRARY_PATH:-}|$PATH" ] \
  && printf '%s\n' "${DEPS_ENV[@]}" | grep -q "^CPATH=$d7/root/usr/include" \
  && printf '%s\n' "${DEPS_ENV[@]}" | grep -q "^LD_LIBRARY_PATH=$d7/root/usr/lib/x86_64-linux-gnu"
say $? "8: the .debs unpacked; LD_LIBRARY_PATH, CPATH, LIBRARY_PATH, PATH only in DEPS_ENV, not exported"

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
