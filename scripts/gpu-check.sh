#!/usr/bin/env bash
# The prepared GPU check: one run of under 8 minutes on the device machine (one H100/H200, torch
# 2.11+cu130, nvcc, CMake, ninja, Python 3.12; no network, no Debian development packages).
# Stages, most valuable first (docs/gpu.md, "The prepared GPU check"):
#   1. build (or use --build DIR), against the machine's own torch, with the carried .debs; the
#      cudart/cuBLAS/NCCL each binary loads (ldd) and the std-bindings check
#   2. the chip's matmul ceiling, measured (>= 1 s, best of 5 windows) beside its data sheet
#   3. the headline: our 400m bf16 step at the preset's defaults, the compiled Python peer at the
#      same shape and window, our step again (lmforge, peer, lmforge: clock drift shows as two
#      lmforge figures, not inside the ratio); kept whenever our rate is > 0, crash or not
#   4. ctest -L gpu, each test under a 60 s timeout (straight after the headline: they must run)
#   5. our step with each fast path, each verified at its start: own CUDA kernels (alone, then in
#      the step), SDPA's flash and cuDNN kernels, CUDA graphs; then activation recompute's cost
#      (our step with it, then without, alternating) and the 1b step's peak memory beside the plan's
#   6. the rest: 2 processes over NCCL when two GPUs exist, the small preset eager and graphed,
#      the eager peer, the Hugging Face export read by transformers
# Every step runs under `timeout -k 5` (SIGKILL 5 s after its cap) and "start STAGE" is logged
# before each stage, so a hung call costs one stage and a killed run names the stage in flight.
# Every step stage times the same window on both sides: --warmup 5 --steps 40 --read-every 5.
# Writes $OUT/results.json (rewritten after every stage; a stage that would not fit --budget is
# no-time), $OUT/gpu-check.log and $OUT/stages.log (each stage's command, exit code, stderr).
# Tests only: LM_GPU_CHECK_PLANT="stage=throw|crash|hang,..." plants a failure in a step stage.
#
#   bash scripts/gpu-check.sh --prepare                  # here (network): fetch and check .gpu-deps
#   bash scripts/gpu-check.sh --check-deps               # is everything to carry there? (< 1 s)
#   bash scripts/gpu-check.sh                            # device machine: --device cuda, builds build-gpu
#   bash scripts/gpu-check.sh --device cpu --build build # dry run here: same stages, small shapes
#   bash scripts/gpu-check.sh --budget 300               # a shorter run: the later stages no-time
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/gpu_check_lib.sh
DEVICE=cuda; BUILD=""; DEPS=.gpu-deps; OUT=${OUT:-gpu-out}; BUDGET=""; ACTION=run
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --deps) DEPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --prepare) ACTION=prepare; shift ;;
    --check-deps) ACTION=check; shift ;;
    --fetch-deps) DEPS=$2; ACTION=prepare; shift 2 ;;
    -h|--help) sed -n "2,/^[^#]/p" "$0" | grep "^#" | cut -c3-; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (--help)"; exit 2 ;;
  esac
done
if [ "$ACTION" = prepare ]; then  # here, with the network: everything the device call carries
  mkdir -p "$DEPS" && (cd "$DEPS" && apt-get download $DEBS) || { echo "gpu-check: apt-get download into $DEPS failed"; exit 1; }
  git check-ignore -q "$DEPS/x.deb" || echo "gpu-check: warning: $DEPS is not ignored by git; carry only travels ignored paths"
  check_deps "$DEPS" || exit 1
  echo "device call: run(command=\"bash scripts/gpu-check.sh\", carry=[\"$DEPS\"], timeout_s=540)"
  exit 0
fi
[ "$ACTION" = check ] && { check_deps "$DEPS"; exit $?; }
case $DEVICE in cuda|cpu) ;; *) echo "gpu-check: --device cuda or cpu, got '$DEVICE'"; exit 2 ;; esac
# The whole run's time, in seconds (default 450 on cuda: the device call's limit is 600 and a
# machine's 15 minutes include its start). Stages run in the order of what the issue must show;
# one that would not finish inside the budget is recorded as no-time, not started.
BUDGET=${BUDGET:-$([ "$DEVICE" = cuda ] && echo 450 || echo 3600)}
CAP_SCALE=$([ "$DEVICE" = cuda ] && echo 1 || echo 5)  # the dry run's caps: a loaded 2-core CPU
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget takes seconds, got '$BUDGET'"; exit 2; }
# Preflight, in the first second: the tools, and the carried .debs whenever $DEPS holds any (an
# image with absl and SentencePiece but without CLI11, ICU or gtest failed to configure when they
# were unpacked only for missing absl/SentencePiece headers), or when this machine lacks the two.
for tool in cmake ninja; do
  [ -n "$BUILD" ] || command -v $tool >/dev/null || { echo "gpu-check: no $tool on this machine"; exit 1; }
done
[ "$DEVICE" = cpu ] || command -v nvidia-smi >/dev/null || { echo "gpu-check: --device cuda but no nvidia-smi (no GPU driver here?)"; exit 1; }
NEED_DEPS=0
[ -z "$BUILD" ] && need_deps "$DEPS" && NEED_DEPS=1
[ "$NEED_DEPS" = 1 ] && { check_deps "$DEPS" || exit 1; }
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/lm_gpu_check.XXXXXX)  # logs and runs; results.json, the log and stages.log go to $OUT
RES="$WORK/results.jsonl"; LOG="$OUT/gpu-check.log"; : > "$LOG"; : > "$OUT/stages.log"
T0=$(date +%s)
PY=$(command -v python3)
[ "$DEVICE" = cpu ] && [ -z "${LM_PYTHON:-}" ] && [ -f scripts/env.sh ] && source scripts/env.sh >/dev/null 2>&1
PY=${LM_PYTHON:-$PY}

# ---- 1. build ---------------------------------------------------------------------------------
# The machine has no Debian dev packages: the carried .debs unpacked into a prefix (use_deps,
# scripts/gpu_check_lib.sh); what points at them reaches cmake and ninja only ("${DEPS_ENV[@]}").
TARGETS="lmtrain train_step_bench gpu_test export_test"
start build
if [ -z "$BUILD" ]; then
  BUILD=build-gpu
  [ "$NEED_DEPS" = 0 ] || use_deps "$DEPS" /tmp/lmforge-deps || { result build failed; exit 1; }
  log "configure $BUILD against $(tmo 60 "$PY" -c 'import torch; print(torch.__version__)')"
  # Parquet off: no stage reads Parquet, and pyarrow on that machine's Python would turn it on untested.
  "${DEPS_ENV[@]}" timeout -k 5 "$(cap 180)" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLM_PYTHON="$PY" -DLM_REQUIRE_CUDA=ON -DLM_WITH_PARQUET=OFF -DLM_BUILD_BENCH=ON > "$WORK/cmake.log" 2>&1 \
    || { tail_log "$WORK/cmake.log" 40; result build failed "{\"step\": \"configure\"}"; exit 1; }
  grep -E "lmforge: (LibTorch|CUDA runtime|Parquet)" "$WORK/cmake.log" | tee -a "$LOG"
fi
t=$(date +%s)
"${DEPS_ENV[@]}" timeout -k 5 "$(cap 330)" ninja -C "$BUILD" $TARGETS > "$WORK/build.log" 2>&1 \
  || { tail_log "$WORK/build.log" 40; result build failed "{\"seconds\": $(( $(date +%s) - t ))}"; exit 1; }
LM="$BUILD/app/lmtrain"
result build ok "{\"seconds\": $(( $(date +%s) - t )), \"dir\": \"$BUILD\"}"
# The first CUDA call (--version names the device): a hung driver shows here, within 60 s.
start version
tmo 60 "$LM" --version 2>&1 | tee -a "$LOG"
GPU_NAME=""
if [ "$DEVICE" = cuda ]; then
  tmo 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$LOG"
  GPU_NAME=$(tmo 30 nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
# Which CUDA runtime, cuBLAS and NCCL the binaries load: the torch wheel's (CMakeLists.txt binds
# CUDA::cudart to it), never a system toolkit's that torch was not built with.
for prog in "$LM" "$BUILD/bench/train_step_bench"; do
  log "ldd $(basename "$prog"):"; tmo 30 ldd "$prog" | grep -E 'cudart|cublas|nccl' | sed 's/^\s*/    /' | tee -a "$LOG"
done
# Which library each standard-library call binds to (the torch wheel exports its own copies; a
# remove_all bound to them crashed here once, docs/gpu.md): say it before anything trains.
for prog in "$LM" "$BUILD/bench/train_step_bench"; do
  start "std-bindings-$(basename "$prog")"
  if out=$(tmo 60 bash tests/app/check_std_bindings.sh "$prog" --help 2>&1); then result "std-bindings-$(basename "$prog")" ok
  else result "std-bindings-$(basename "$prog")" failed; fi
  printf '%s\n' "$out" | tee -a "$LOG"
done

# ---- 2. the matmul ceiling, measured, beside the data sheet -------------------------------------
# Every step stage times the same window, on both sides (train_step_bench and peer_pytorch.py).
WIN="--warmup 5 --steps 40 --read-every 5"
if [ "$DEVICE" = cuda ]; then
  PRESET=400m; SB=16; ST=256
  GPU=$(echo "$GPU_NAME" | tr 'A-Z' 'a-z' | grep -oE 'h200|h100|a100|l40s|4090|a10' | head -1)
  shape=$(tmo 30 "$LM" plan --preset $PRESET --gpu "${GPU:-h100}" | sed -n 's/^batch: \([0-9]*\) x \([0-9]*\) x.*/\1 \2/p')
  set -- $shape; B=${1:-16}; T=${2:-2048}; PEAK_N=8192
  # The 1b step whose peak memory is set against the plan: the plan's micro-batch for it.
  MEM_PRESET=1b; B1=$(tmo 30 "$LM" plan --preset 1b --gpu "${GPU:-h100}" | sed -n 's/^batch: \([0-9]*\) x .*/\1/p'); B1=${B1:-8}
else
  # Dry run: the same stages at shapes a shared 2-core CPU does in seconds (the small preset's
  # bf16 step at 4 x 64 took 5.6 s there under load: 2 x 32).
  PRESET=tiny; B=4; T=64; SB=2; ST=32; PEAK_N=512; MEM_PRESET=tiny; B1=4
fi
BENCH="$BUILD/bench/train_step_bench"
# The bench's peak mode: >= 1 s of n^3 bf16 products as the best of 5 windows (the first GPU run's
# 10 products in ~15 ms were noise), the data sheet's figure beside it (the CPU has none: there the
# measured ceiling is both), and whether the ceiling can be believed.
start peak
peak_line=$(tmo 60 "$BENCH" --mode peak --device "$DEVICE" --peak-n $PEAK_N 2>"$WORK/peak.err" | grep '^{' | tail -1)
read -r PEAK_MEASURED PEAK_SPEC PEAK_JUDGEMENT < <("$PY" -c 'import json,sys
d = json.loads(sys.argv[1] or "{}"); print(d.get("bf16_flops", 0), d.get("bf16_spec_flops", 0), d.get("bf16_judgement", "none"))' "$peak_line")
if [ -n "$peak_line" ] && [ "${PEAK_MEASURED%.*}" != 0 ]; then result peak ok "$peak_line"; else tail_log "$WORK/peak.err"; result peak failed "${peak_line:-null}"; fi
[ "$PEAK_JUDGEMENT" = plausible ] || log "peak: $PEAK_JUDGEMENT"

# ---- 3. the headline: lmforge, the compiled peer, lmforge again ---------------------------------
LR_ARGS=$(tmo 30 "$BENCH" --mode config --preset $PRESET --seq $T | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("--lr", d["lr"], "--lr-warmup", d["lr_warmup"])')
STEP="--preset $PRESET --batch $B --seq $T --dtype bf16 --device $DEVICE"
log "train step: $PRESET bf16, micro-batch $B x $T, $WIN on $DEVICE; $(left) s of $BUDGET left"
# NEED is each stage's expected seconds on an H200 (the run of 2026-12-04: 400m step ~30 s,
# torch.compile peer ~85 s, export ~45 s).
step_stage step-lmforge 30 240 "$BENCH" $STEP $WIN
step_stage step-peer-compile 90 240 "$PY" bench/peer_pytorch.py $STEP $WIN $LR_ARGS --compile
step_stage step-lmforge-2 30 240 "$BENCH" $STEP $WIN

# ---- 4. the gpu test label, each test under a timeout -------------------------------------------
# Straight after the headline (~160 s of other step stages before them left them no-time).
if fits gpu-tests 60; then
  start gpu-tests
  tmo 240 ctest --test-dir "$BUILD" -L gpu --timeout 60 --output-on-failure > "$WORK/ctest.log" 2>&1; rc=$?
  keep_stage_log gpu-tests "$rc" "-" ctest -L gpu --timeout 60 < /dev/null; cat "$WORK/ctest.log" >> "$OUT/stages.log"
  # Counted on the per-test result lines only ("3/8 Test #197: Name ....***Skipped 0.31 sec"): the
  # summary names skipped tests a second time. A failure is never reported as "none-ran".
  count() { grep -cE "^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*$1" "$WORK/ctest.log"; }
  passed=$(count " Passed"); skipped=$(count "\*\*\*Skipped")
  failed=$(count "(\*\*\*(Failed|Exception|Timeout)|Not Run)")
  status=ok
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status=timed-out
  elif [ "$rc" != 0 ] || [ "$failed" != 0 ]; then status=failed
  elif [ "$passed" = 0 ]; then status=none-ran
  elif [ "$skipped" != 0 ]; then status=some-skipped; fi
  # Each test by name and result, so the file that comes back says which ran.
  tests=$(grep -oE "Test +#[0-9]+: [A-Za-z0-9_./-]+ \.*[ *]*[A-Za-z]+( Run)?" "$WORK/ctest.log" | "$PY" -c 'import json,re,sys
print(json.dumps({m.group(1): m.group(2) for m in (re.match(r"Test +#\d+: (\S+) [. *]*(.*)", l) for l in sys.stdin) if m}))')
  result gpu-tests "$status" "{\"passed\": $passed, \"skipped\": $skipped, \"failed\": $failed, \"exit_code\": $rc, \"per_test_timeout_s\": 60, \"tests\": ${tests:-null}}"
  [ "$status" = ok ] || tail_log "$WORK/ctest.log" 30
fi

# ---- 5. each fast path, verified at its start -------------------------------------------------
# Each own kernel alone, forward + backward against the ops it replaces, at the step's shapes: the
# time, the speed-up, the GB/s it reaches (against the chip's memory bandwidth) and its largest
# relative difference, so each kernel's default can be decided on its own. A difference over the
# bf16 tolerance (2e-2), or a kernel that did not run on a GPU, fails the stage.
if fits kernels 20; then
  start kernels
  kernels_line=$(tmo 90 "$BENCH" --mode kernels $STEP --steps 20 2> "$WORK/kernels.err" | grep '^{' | tail -1)
  if [ -z "$kernels_line" ]; then tail_log "$WORK/kernels.err" 15; result kernels failed
  else
    result kernels "$("$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); ops=d["ops"]
gpu = sys.argv[2] == "cuda"
bad = [o["op"] for o in ops if (gpu and o["fast_ms"] is None) or (o["max_rel_err"] or 0) > 2e-2]
print("failed" if bad else "ok")' "$kernels_line" "$DEVICE")" "$kernels_line"
  fi
fi
# The whole step with lmforge's own CUDA kernels (SwiGLU, rotary q/k, add + RMSNorm; off by default
# until this measures them), then SDPA's kernel named instead of ATen's choice, then the step
# replayed as a CUDA graph. The bench verifies every fast path at start-up in each (a wrong kernel
# falls back to its reference and the stage is "fell-back", never a clean fast figure). A backend
# that fails here gives way to the next one that passes its checks (model/sdpa_recovery.cpp): the
# stage is then "fell-back", naming both; when none passes and the reference attention would not
# fit at 400m x 2048, the bench stops at start-up with that error (the stage "failed").
step_stage step-lmforge-kernels 30 240 "$BENCH" $STEP $WIN --cuda-kernels
for backend in flash cudnn; do
  step_stage "step-lmforge-sdpa-$backend" 30 120 "$BENCH" $STEP $WIN --sdpa-backend $backend
done
step_stage step-lmforge-graphs 30 120 "$BENCH" $STEP $WIN --cuda-graphs
# Issue 39: activation recompute's step-time cost (against the headline's two lmforge figures,
# measured before and after it), then our step once more so the runs alternate; and the 1b step,
# whose peak allocation each line reports beside what `lmtrain plan` counts (peak_vs_plan).
step_stage step-lmforge-recompute 30 120 "$BENCH" $STEP $WIN --recompute
step_stage step-lmforge-3 30 120 "$BENCH" $STEP $WIN
step_stage step-$MEM_PRESET-memory 40 150 "$BENCH" --preset $MEM_PRESET --batch $B1 --seq $T --dtype bf16 --device $DEVICE --warmup 5 --steps 10 --read-every 5

# ---- 6. two processes (NCCL on cuda, Gloo in the dry run) equal one ----------------------------
NGPU=$([ "$DEVICE" = cuda ] && tmo 30 nvidia-smi -L | wc -l || echo 2)
if [ "$NGPU" -lt 2 ]; then
  result two-process skipped "{\"gpus\": $NGPU}"
elif fits two-process 60; then
  start two-process
  tmo 60 "$LM" tokenizer --corpus data/sample/corpus.json --vocab-size 512 --out "$WORK/tok" -q >/dev/null 2>&1 &&
  tmo 60 "$LM" prepare --corpus data/sample/corpus.json --tokenizer "$WORK/tok" --out "$WORK/shards" -q >/dev/null 2>&1
  # The same global batch of 8 rows: one rank of 8, or two of 4 (the sampler splits the rows by rank).
  echo '{"train": {"logging": {"interval": 1}, "eval": {"interval": 0}}}' > "$WORK/dp.json"
  fit() { "$@" --data "$WORK/shards" --preset tiny --config "$WORK/dp.json" --steps 8 --seq-len 64 --device $DEVICE --dtype fp32 -q; }
  TORCHRUN=$(dirname "$PY")/torchrun
  if fit tmo 120 "$LM" fit --out "$WORK/dp1" --micro-batch 8 >/dev/null 2>"$WORK/dp1.err" \
     && fit tmo 120 "$TORCHRUN" --standalone --nproc-per-node 2 --no-python "$LM" fit --out "$WORK/dp2" --micro-batch 4 >/dev/null 2>"$WORK/dp2.err"; then
    cmp_out=$(tmo 30 "$PY" - "$WORK/dp1/metrics.jsonl" "$WORK/dp2/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]; b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
d = max(abs(x - y) for x, y in zip(a, b)); print(json.dumps({"steps": len(a), "max_loss_diff": d, "equal": len(a) == len(b) and d < 1e-4}))
PY
)
    result two-process "$(echo "$cmp_out" | grep -q '"equal": true' && echo ok || echo differs)" "$cmp_out"
  else
    tail_log "$WORK/dp2.err" 20; result two-process failed
  fi
fi

# ---- 6. the rest: small model eager and graphed, the eager peer -----------------------------
# A small model, where launches weigh more: whether CUDA graphs help there.
for g in eager graphs; do
  step_stage "step-small-$g" 15 60 "$BENCH" --preset small --batch $SB --seq $ST $WIN \
    --dtype bf16 --device $DEVICE $([ $g = graphs ] && echo --cuda-graphs)
done
step_stage step-peer-eager 30 240 "$PY" bench/peer_pytorch.py $STEP $WIN $LR_ARGS

# ---- 6. the export loaded by transformers ------------------------------------------------------
if ! fits hf-export 45; then :
elif start hf-export && tmo 150 env OUT="$WORK/hf" BUILD="$BUILD" PYTHON="$PY" bash scripts/gpu-export-check.sh > "$WORK/hf.log" 2>&1; then
  result hf-export ok "{\"parts\": \"$(grep -oE 'hf [a-z]+: [a-zA-Z]+' "$WORK/hf/gpu-check.log" | tr '\n' ';')\"}"
else
  tail_log "$WORK/hf.log" 20; result hf-export failed
fi

# ---- the results file (written after every stage; the summary line) ---------------------------
write_results
log "done in $(( $(date +%s) - T0 )) s; $OUT/results.json"
rm -rf "$WORK"
