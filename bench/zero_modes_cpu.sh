#!/usr/bin/env bash
# ZeRO-1 against the distributed optimizer (--master-weights sharded) on this machine's CPU: 2 ranks
# over Gloo on loopback, the `small` preset in bf16, 20 steps of 8 x 256 rows (2 micro-batches a
# step), the two alternating ROUNDS times. Prints one line per run: step time and exposed reduction
# wait (FitSummary, rank 0), the bytes each rank holds (moments, fp32 masters, weights) and each
# rank's peak RSS (/usr/bin/time), and the last loss (equal in both: the paths are bit-identical).
#   bash bench/zero_modes_cpu.sh [ROUNDS]     (needs build/tests/train/ddp_worker)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
W=build/tests/train/ddp_worker
[ -x "$W" ] || { echo "zero_modes_cpu: no $W (build the ddp_worker target)"; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # $1: whole|sharded, $2: run name
  local port=$((29700 + RANDOM % 200))
  for r in 0 1; do
    LM_DDP_PRESET=small LM_DDP_SEQ=256 LM_DDP_LOG_EVERY=5 LM_DDP_BUCKET_MB=25 LM_DDP_ZERO=1 LM_DDP_ACCUM=2 \
    LM_DDP_DTYPE=bf16 LM_DDP_MASTER=$1 LM_DDP_STATS="$OUT/$2.stats" LM_DDP_OPT_BYTES="$OUT/$2.bytes" \
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/time -f %M -o "$OUT/$2.rss.$r" "$W" "$OUT/$2" 20 8 -1 0 "$OUT/$2.losses" > "$OUT/$2.log.$r" 2>&1 &
  done
  wait
  read -r _ _ wait_s step_s _ < "$OUT/$2.stats"
  printf '| %s | %.2f s | %.2f s | %s / %s B | %s / %s B | %s / %s B | %s / %s MB | %s |\n' "$1" "$step_s" "$wait_s" \
    "$(cut -d' ' -f1 "$OUT/$2.bytes.0")" "$(cut -d' ' -f1 "$OUT/$2.bytes.1")" \
    "$(cut -d' ' -f2 "$OUT/$2.bytes.0")" "$(cut -d' ' -f2 "$OUT/$2.bytes.1")" \
    "$(cut -d' ' -f3 "$OUT/$2.bytes.0")" "$(cut -d' ' -f3 "$OUT/$2.bytes.1")" \
    "$(( $(cat "$OUT/$2.rss.0") / 1024 ))" "$(( $(cat "$OUT/$2.rss.1") / 1024 ))" \
    "$(python3 -c 'import sys; print("%.9f" % float.fromhex(open(sys.argv[1]).read().split()[-1]))' "$OUT/$2.losses")"
}
echo "| path | step time (20 steps) | exposed reduction wait | moments r0 / r1 | fp32 masters r0 / r1 | weights r0 / r1 | peak RSS r0 / r1 | last loss |"
echo "|---|---|---|---|---|---|---|---|"
for i in $(seq 1 "$ROUNDS"); do
  run whole "z$i"
  run sharded "d$i"
done
