#!/usr/bin/env bash
# Kill soak: the restart loop of a preemptible machine. One command, `lmtrain fit ... --resume
# auto`, is started again after every kill -9: first at t = 0 (before the run folder exists),
# as soon as the tokenizer copy appears (before or while config.json is written), as soon as the
# first checkpoint's folder appears; then KILLS times at random moments (also during checkpoint
# writes: every 7 steps and every 0.18 s of wall clock, in rank 0's background writer). The final
# weights, optimizer state and loss sequence must be bit-identical to an uninterrupted run.
# Then SIGTERM: the run must finish its step, checkpoint and exit 143 within a bounded time.
#   tests/soak/kill_soak.sh BUILD_DIR [KILLS=20] [STEPS=300]
set -euo pipefail
BUILD=${1:?build dir}; KILLS=${2:-20}; STEPS=${3:-300}
LMTRAIN="$BUILD/app/lmtrain"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/lm_soak.XXXXXX)
trap 'rm -rf "$W"' EXIT
export CI=true
Q="--threads 1 -q"
"$LMTRAIN" tokenizer --corpus "$ROOT/data/sample/corpus.json" --vocab-size 512 --out "$W/tok" $Q >/dev/null
"$LMTRAIN" prepare --corpus "$ROOT/data/sample/corpus.json" --tokenizer "$W/tok" --out "$W/shards" $Q >/dev/null
# The first quarter of the steps trains only the embeddings and the head (train.param_groups, issue
# 37): kills land on both sides of the stage boundary, whose resume must be as exact.
cat > "$W/run.json" <<JSON
{"train": {"steps": $STEPS, "batch": {"micro_batch": 4, "seq_len": 64}, "schedule": {"warmup_steps": 10},
           "param_groups": {"embeddings_only_steps": $((STEPS / 4)), "embeddings_lr_scale": 2},
           "logging": {"interval": 1}, "checkpoint": {"interval": 7, "minutes": 0.003, "keep_last": 2},
           "eval": {"interval": 0}}}
JSON
FIT=("$LMTRAIN" fit --data "$W/shards" --preset tiny --config "$W/run.json" $Q)

t0=$(date +%s.%N)
"${FIT[@]}" --out "$W/ref" >/dev/null
ref_s=$(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{printf "%.3f", b-a}')
# Kill moments in training spread over up to the uninterrupted run's time / (2 KILLS) (at most 1.5 s),
# so that on a fast machine too all KILLS land before the run can finish (a soak that kills less
# than asked is refused below, not passed).
window=$(awk -v r=$ref_s -v k=$KILLS 'BEGIN{w=r/(2*k); if (w>1.5) w=1.5; if (w<0.05) w=0.05; printf "%.3f", w}')
AUTO=("${FIT[@]}" --out "$W/soak" --resume auto)
# The first moments of a run, each killed once: what the folder held at the kill is reported.
# until_there PATH PID: waits (2 ms polls) until PATH exists or the process ended.
until_there() { while [ ! -e "$1" ] && kill -0 "$2" 2>/dev/null; do sleep 0.002; done; }
early=()
"${AUTO[@]}" >/dev/null 2>&1 & pid=$!
sleep 0.02; kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
early+=("t=0: run folder $([ -e "$W/soak" ] && echo there || echo absent)")
"${AUTO[@]}" >/dev/null 2>&1 & pid=$!
until_there "$W/soak/tokenizer/tokenizer.json" "$pid"; kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
tmp=$(ls "$W/soak" | grep -c '^config.json.tmp' || true)
early+=("tokenizer copied: config.json $([ -e "$W/soak/config.json" ] && echo written || echo "absent ($tmp temp file(s))")")
"${AUTO[@]}" >/dev/null 2>&1 & pid=$!
until_there "$W/soak/checkpoints" "$pid"; kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
early+=("first checkpoint: latest $([ -e "$W/soak/latest" ] && echo "written ($(cat "$W/soak/latest"))" || echo absent)")
kills=0; startup_kills=0; attempts=3
while :; do
  logged=$(wc -l < "$W/soak/metrics.jsonl" 2>/dev/null || echo 0)
  "${AUTO[@]}" >/dev/null 2>&1 &
  pid=$!
  if [ "$kills" -lt "$KILLS" ]; then
    # Every third kill lands in start-up (checks, resume); the others once this start has trained
    # past what the run had logged (so each start makes progress), then mid-step or inside a
    # checkpoint write.
    if [ $((kills % 3)) -eq 0 ]; then
      sleep "$(awk -v s=$RANDOM 'BEGIN{srand(s); printf "%.3f", rand()*0.3}')"
      where=startup
    else
      for _ in $(seq 1000); do
        [ "$(wc -l < "$W/soak/metrics.jsonl" 2>/dev/null || echo 0)" -gt "$logged" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
      done
      sleep "$(awk -v s=$RANDOM -v w=$window 'BEGIN{srand(s); printf "%.3f", rand()*w}')"
      where=training
    fi
    if kill -9 "$pid" 2>/dev/null; then
      kills=$((kills+1))
      [ "$where" = startup ] && startup_kills=$((startup_kills+1))
    fi
    wait "$pid" 2>/dev/null || true
  else
    wait "$pid"
  fi
  attempts=$((attempts+1))
  [ -f "$W/soak/latest" ] && grep -q "step-$(printf %08d "$STEPS")" "$W/soak/latest" && break
  [ "$attempts" -gt $((KILLS * 4 + 10)) ] && { echo "soak: no progress after $attempts starts"; exit 1; }
done
[ "$kills" -eq "$KILLS" ] || { echo "soak: only $kills of $KILLS kills landed before the run finished (uninterrupted run ${ref_s} s)"; exit 1; }
ref_ck="$W/ref/checkpoints/$(cat "$W/ref/latest")"; soak_ck="$W/soak/checkpoints/$(cat "$W/soak/latest")"
cmp "$ref_ck/model.safetensors" "$soak_ck/model.safetensors" || { echo "soak: final weights differ"; exit 1; }
cmp "$ref_ck/optimizer.safetensors" "$soak_ck/optimizer.safetensors" || { echo "soak: optimizer state differs"; exit 1; }
extract() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); print(d["step"], d["loss"].hex())' "$1"; }
diff <(extract "$W/ref/metrics.jsonl") <(extract "$W/soak/metrics.jsonl") >/dev/null || { echo "soak: loss sequences differ"; exit 1; }
echo "soak: early kills of 'fit --resume auto': $(IFS=';'; echo "${early[*]}")"
echo "soak: then $kills kills (kill -9 at random moments: $startup_kills in start-up, the others within ${window} s of training; uninterrupted run ${ref_s} s), $attempts starts of the same command: final weights, optimizer state and $STEPS losses bit-identical"

# SIGTERM: finish the step, checkpoint, exit 143.
"${FIT[@]}" --out "$W/term" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$W/term/metrics.jsonl" ] && break; sleep 0.1; done  # training has begun
t0=$(date +%s.%N); kill -TERM "$pid"; set +e; wait "$pid"; rc=$?; set -e; t1=$(date +%s.%N)
[ "$rc" = 143 ] || { echo "sigterm: exit code $rc, expected 143"; exit 1; }
step=$(sed 's/step-0*//' "$W/term/latest")
echo "sigterm: exit 143 after $(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}') s with a checkpoint at step $step"
"${FIT[@]}" --out "$W/term" --resume >/dev/null
cmp "$ref_ck/model.safetensors" "$W/term/checkpoints/$(cat "$W/term/latest")/model.safetensors" || { echo "sigterm: resumed weights differ"; exit 1; }
echo "sigterm: resumed run bit-identical to the uninterrupted one"
echo "1 passed, 0 failed"
