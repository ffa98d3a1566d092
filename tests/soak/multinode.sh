#!/usr/bin/env bash
# Multi-node as a tested path (issue 39), on localhost with Gloo, through `lmtrain fit` as a user
# starts it. Ranks are started the way a launcher starts them (RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT), each with its own command line, as two nodes would be:
#   1. an --out that is not one shared folder (each rank its own) is refused by every rank, before
#      anything trains or is written;
#   2. a killed rank (kill -9) makes the other exit, nonzero, within --dist-timeout instead of hanging;
#   3. a 2-rank run stopped at step 3 resumes on 1 rank (fit turns micro-batch 2 x 2 ranks into
#      micro-batch 2 x grad-accum 2): the same rows per step, losses within 1e-5 of the unbroken run;
#   4. two torchrun agents (--nnodes 2 --rdzv-backend c10d, one rank each) train as one process with
#      the same global batch: losses within 1e-5 and the same gradient norms (skipped without
#      torch.distributed.run in PYTHON).
#   tests/soak/multinode.sh BUILD_DIR [PYTHON]
set -euo pipefail
BUILD=${1:?build dir}; PY=${2:-}
LMTRAIN="$BUILD/app/lmtrain"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/lm_multinode.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
export CI=true
Q="--threads 1 -q"
"$LMTRAIN" tokenizer --corpus "$ROOT/data/sample/corpus.json" --vocab-size 512 --out "$W/tok" $Q >/dev/null
"$LMTRAIN" prepare --corpus "$ROOT/data/sample/corpus.json" --tokenizer "$W/tok" --out "$W/shards" $Q >/dev/null
FIT=("$LMTRAIN" fit --data "$W/shards" --preset tiny --seq-len 64 --set logging.interval=1 --set eval.interval=0
     --set schedule.warmup_steps=2 $Q)
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
              echo $((20000 + RANDOM % 20000)); }
fail() { echo "FAIL: $*"; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# rank R WORLD PORT OUT LOG ARGS...: one rank as a launcher starts it, in the background.
rank() {
  local r=$1 world=$2 port=$3 out=$4 log=$5; shift 5
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "${FIT[@]}" --out "$out" "$@" > "$log" 2>&1 &
  pids+=($!)
}

# 1. Each rank with its own --out.
port=$(free_port); t0=$(date +%s.%N)
rank 0 2 "$port" "$W/node0" "$W/ns0.log" --steps 4 --micro-batch 2
rank 1 2 "$port" "$W/node1" "$W/ns1.log" --steps 4 --micro-batch 2
rc0=0; rc1=0; wait "${pids[0]}" || rc0=$?; wait "${pids[1]}" || rc1=$?; pids=()
[ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || fail "not-shared --out: exit codes $rc0, $rc1 (want both nonzero); $(cat "$W/ns0.log")"
grep -q "is not one folder shared by every rank: 1 of 2 ranks (rank 1 among them" "$W/ns0.log" ||
  fail "rank 0 does not name the unshared folder: $(cat "$W/ns0.log")"
[ ! -e "$W/node0/config.json" ] && [ ! -e "$W/node1/config.json" ] || fail "a refused start wrote config.json"
ls -A "$W/node0" 2>/dev/null | grep -q rank-check && fail "the check file was left in $W/node0"
echo "ok: an --out that is not shared is refused by both ranks in $(elapsed "$t0") s: $(grep -o 'is not one folder[^:]*' "$W/ns0.log")"

# 2. A killed rank: the other exits within the distributed timeout.
port=$(free_port); timeout_s=20
rank 0 2 "$port" "$W/kill" "$W/k0.log" --steps 100000 --micro-batch 2 --dist-timeout $timeout_s
rank 1 2 "$port" "$W/kill" "$W/k1.log" --steps 100000 --micro-batch 2 --dist-timeout $timeout_s
for _ in $(seq 1 600); do
  [ "$(cat "$W/kill/metrics.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "rank 0 ended before training: $(cat "$W/k0.log")"
  sleep 0.1
done
[ "$(wc -l < "$W/kill/metrics.jsonl")" -ge 3 ] || fail "no training steps within 60 s: $(cat "$W/k0.log")"
kill -9 "${pids[1]}"; t0=$(date +%s.%N)
rc0=0
for _ in $(seq 1 $(( (timeout_s + 15) * 10 ))); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
kill -0 "${pids[0]}" 2>/dev/null && fail "rank 0 still running $(elapsed "$t0") s after rank 1 was killed (--dist-timeout $timeout_s)"
wait "${pids[0]}" || rc0=$?; pids=()
[ "$rc0" -ne 0 ] || fail "rank 0 exited 0 after its peer was killed"
echo "ok: rank 1 killed at step $(wc -l < "$W/kill/metrics.jsonl"); rank 0 exited $rc0 after $(elapsed "$t0") s (--dist-timeout $timeout_s): $(grep -m1 -i 'error\|fail' "$W/k0.log" | cut -c1-200)"

# 3. A 2-rank run resumed on 1 rank: the rows per step kept, the data cursor re-dealt.
port=$(free_port)
rank 0 2 "$port" "$W/full2" "$W/f0.log" --steps 6 --micro-batch 2
rank 1 2 "$port" "$W/full2" "$W/f1.log" --steps 6 --micro-batch 2
for p in "${pids[@]}"; do wait "$p" || fail "the 2-rank run failed: $(tail -5 "$W/f0.log")"; done; pids=()
port=$(free_port)
rank 0 2 "$port" "$W/rs" "$W/r0.log" --steps 6 --micro-batch 2 --set stop_at_step=3
rank 1 2 "$port" "$W/rs" "$W/r1.log" --steps 6 --micro-batch 2 --set stop_at_step=3
for p in "${pids[@]}"; do wait "$p" || fail "the stopped 2-rank run failed: $(tail -5 "$W/r0.log")"; done; pids=()
"${FIT[@]}" --out "$W/rs" --resume auto > "$W/r1rank.log" 2>&1 || fail "the 1-rank resume failed: $(tail -5 "$W/r1rank.log")"
grep -q "written by 2 ranks x micro_batch 2 x grad_accum 1, resumed as 1 x 2 x 2: the same 4 rows" "$W/r1rank.log" ||
  fail "the resume did not re-deal the batch: $(head -20 "$W/r1rank.log")"
python_cmp=$(cat <<'PYEOF'
import json, sys
full, rs = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
assert len(full) == len(rs) == 6, (len(full), len(rs))
for a, b in zip(full, rs):
    assert abs(a["loss"] - b["loss"]) <= 1e-5, ("loss", a["step"], a["loss"], b["loss"])
print(f"ok: a 2-rank run stopped at step 3 and resumed on 1 rank (micro-batch 2 x grad-accum 2) equals the unbroken "
      f"run within 1e-5: step 6 loss {full[-1]['loss']:.6f} vs {rs[-1]['loss']:.6f}")
PYEOF
)
if [ -n "$PY" ]; then "$PY" -c "$python_cmp" "$W/full2/metrics.jsonl" "$W/rs/metrics.jsonl" || fail "the resumed run differs"; fi

# 4. Two torchrun agents on localhost, one rank each, against one process with the same global batch.
if [ -z "$PY" ] || ! "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
  echo "skip: two-agent torchrun (no torch.distributed.run in '${PY:-no python}')"; exit 0
fi
"${FIT[@]}" --out "$W/one" --steps 6 --micro-batch 4 >/dev/null
port=$(free_port)
for node in 0 1; do
  "$PY" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id lmforge-test --no-python \
    "${FIT[@]}" --out "$W/two" --steps 6 --micro-batch 2 > "$W/agent$node.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a torchrun agent failed: $(cat "$W"/agent*.log | tail -30)"; done; pids=()
"$PY" - "$W/one/metrics.jsonl" "$W/two/metrics.jsonl" <<'EOF' || fail "two agents differ from one process"
import json, sys
one, two = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
assert len(one) == len(two) == 6, (len(one), len(two))
for a, b in zip(one, two):
    assert abs(a["loss"] - b["loss"]) <= 1e-5, ("loss", a["step"], a["loss"], b["loss"])
    assert abs(a["grad_norm"] / b["grad_norm"] - 1) <= 1e-5, ("grad_norm", a["step"], a["grad_norm"], b["grad_norm"])
print(f"ok: two torchrun agents (--nnodes 2, c10d) equal one process over 6 steps: "
      f"loss {one[-1]['loss']:.6f} vs {two[-1]['loss']:.6f}")
EOF
echo "multinode ok"
