#!/usr/bin/env bash
# Evaluation against training speed on one machine (issue 41 item 5): `lmeval nll` and `lmeval mc`,
# as whole commands (start-up, tokenizing, scoring, writing), in tokens through the model per second
# of wall time, against the training tokens/s of the same model, rounds alternating so that a load
# change hits both. Each dtype's scores are compared with fp32's: NLL's relative change and every MC
# prediction (acc and acc_norm) that moves.
#
#   bench/eval_speed.sh [RUN]          RUN: a run folder of `lmtrain demo` (default: made here once)
#   env: ROUNDS=2  THREADS=2  LINES=600 (Bangla news lines: ~105k tokens at the demo's vocabulary)
#        MC_TASKS=hellaswag,arc_easy  MC_LIMIT=300  VARIANTS="fp32 bf16 auto"  WORK=/tmp/lm-eval-speed
#        BUILD=build  LM_BENCH_DIR=../shared/data/bench  BN_TEXT=../shared/data/bn/bn_news_punct.txt.gz
# Writes bench/results/<date>-eval-speed.{jsonl,md} (STAMP overrides the date).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} WORK=${WORK:-/tmp/lm-eval-speed} ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-2}
LINES=${LINES:-600} MC_TASKS=${MC_TASKS:-hellaswag,arc_easy} MC_LIMIT=${MC_LIMIT:-300}
VARIANTS=${VARIANTS:-"fp32 bf16 auto"}
BENCH=${LM_BENCH_DIR:-../shared/data/bench} BN_TEXT=${BN_TEXT:-../shared/data/bn/bn_news_punct.txt.gz}
PY=${LM_PYTHON:-$HOME/.cache/lmforge/venv-torch-2.11.0/bin/python}
STAMP=${STAMP:-$(date -u +%Y%m%d-%H%M)}
OUT=bench/results/$STAMP-eval-speed
lmtrain=$BUILD/app/lmtrain lmeval=$BUILD/app/lmeval
for f in "$lmtrain" "$lmeval"; do [ -x "$f" ] || { echo "eval_speed: $f not built (bash scripts/build.sh)" >&2; exit 2; }; done
[ -f "$BN_TEXT" ] || { echo "eval_speed: $BN_TEXT not found (BN_TEXT=...)" >&2; exit 2; }
[ -d "$BENCH" ] || { echo "eval_speed: $BENCH not found (LM_BENCH_DIR=...)" >&2; exit 2; }
mkdir -p "$WORK" bench/results

run=${1:-}
if [ -z "$run" ]; then
  run=$WORK/demo/runs/small
  [ -f "$run/latest" ] || "$lmtrain" demo --out "$WORK/demo" --threads "$THREADS" >"$WORK/demo.log" 2>&1
fi
shards=$(dirname "$(dirname "$run")")/shards
{ zcat "$BN_TEXT" || true; } | head -n "$LINES" >"$WORK/bn.txt"  # zcat stops on SIGPIPE
: >"$OUT.jsonl"

now() { date +%s.%N; }
# record KIND VARIANT ROUND SECONDS TOKENS [EXTRA_JSON]
record() {
  printf '{"kind":"%s","variant":"%s","round":%d,"wall_s":%.3f,"tokens":%d,"tokens_per_s":%.1f%s}\n' \
    "$1" "$2" "$3" "$4" "$5" "$(echo "$5 / $4" | bc -l)" "${6:-}" >>"$OUT.jsonl"
}

train() {  # fit at the demo's shape; the median tokens/s of its logged steps after the first
  local r=$1 dir=$WORK/train-$1
  rm -rf "$dir"
  "$lmtrain" fit --data "$shards" --preset small --out "$dir" --steps 60 --micro-batch 16 --seq-len 256 \
    --lr 2e-3 --dtype bf16 --threads "$THREADS" -q >"$WORK/train-$r.log" 2>&1
  local tps
  tps=$("$PY" - "$dir/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(statistics.median(r["tokens_per_s"] for r in rows[1:] if r.get("tokens_per_s")))
EOF
)
  printf '{"kind":"train","variant":"bf16","round":%d,"tokens_per_s":%.1f}\n' "$r" "$tps" >>"$OUT.jsonl"
}

chosen() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1])).get('dtype', '?'))" "$1"; }

nll() {  # nll VARIANT ROUND
  local v=$1 r=$2 dtype=$1 j=$WORK/nll-$1-$2.json t0 t1
  t0=$(now)
  "$lmeval" nll --run "$run" --text "$WORK/bn.txt" --dtype "$dtype" \
    --threads "$THREADS" --out "$j" -q
  t1=$(now)
  local toks nats
  read -r toks nats < <("$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); m=list(j['languages'].values())[0]['model']; print(m['tokens'], m['sum_nats'])" "$j")
  record nll "$v" "$r" "$(echo "$t1 - $t0" | bc -l)" "$toks" ",\"sum_nats\":$nats,\"dtype\":\"$(chosen "$j")\""
}

mc() {  # mc VARIANT ROUND: tokens through the model = the scored requests' input tokens
  local v=$1 r=$2 dtype=$1 j=$WORK/mc-$1-$2.json t0 t1
  t0=$(now)
  "$lmeval" mc --run "$run" --data-dir "$BENCH" --tasks "$MC_TASKS" \
    --limit "$MC_LIMIT" --dtype "$dtype" --threads "$THREADS" --out "$j" --log-samples "$WORK/mc-$v-$r.jsonl" -q
  t1=$(now)
  local toks
  toks=$("$PY" -c "
import json,sys
n=0
for l in open(sys.argv[1]):
    s=json.loads(l)
    for c in s['choices']: n += min(c['context_tokens'] + len(c['continuation_ids']) - 1, 256)
print(n)" "$WORK/mc-$v-$r.jsonl")
  record mc "$v" "$r" "$(echo "$t1 - $t0" | bc -l)" "$toks" ",\"dtype\":\"$(chosen "$j")\""
}

for r in $(seq 1 "$ROUNDS"); do
  echo "eval_speed: round $r/$ROUNDS: train" >&2; train "$r"
  for v in $VARIANTS; do echo "eval_speed: round $r: nll $v, mc $v" >&2; nll "$v" "$r"; mc "$v" "$r"; done
done
"$PY" bench/eval_speed_table.py "$OUT.jsonl" "$WORK" >"$OUT.md"
cat "$OUT.md"
