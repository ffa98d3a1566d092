#!/usr/bin/env bash
# Threads under load (issue 30 item 8): the default thread count (--threads 0: measured at start-up,
# runtime/threads.h) against each fixed count (1, 2, ... all cores), in the same run, with a second
# process busy on one core. Workloads: lmtrain fit (the demo's small bf16 shape), lmeval sample,
# lmeval mc (copa), lmeval nll. The runs alternate (0 1 2 2 1 0 ...) so a change of load hits all
# counts alike. Writes bench/results/<date>-threads-load.jsonl and .md and prints the table.
#
#   bench/threads_load.sh [--build build] [--rounds 2] [--steps 6] [--busy 1] [--label NAME]
#     --busy N   N busy-loop processes, the first pinned to core 0 (taskset) when it can be; 0 = none
# Notes: the machine's other load (load average, the busiest processes) is recorded before and after.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="build" rounds=2 steps=6 busy=1 label="threads-load"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2;;
    --rounds) rounds="$2"; shift 2;;
    --steps) steps="$2"; shift 2;;
    --busy) busy="$2"; shift 2;;
    --label) label="$2"; shift 2;;
    -h|--help) sed -n '2,10p' "$0"; exit 0;;
    *) echo "threads_load.sh: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
[[ "$build" = /* ]] || build="$root/$build"
lmtrain="$build/app/lmtrain" lmeval="$build/app/lmeval"
for b in "$lmtrain" "$lmeval"; do [[ -x "$b" ]] || { echo "threads_load.sh: $b not built" >&2; exit 2; }; done
source "$root/scripts/env.sh"; py=$LM_PYTHON
bench_data="$root/../shared/data/bench"
cores=$(nproc)
counts=(0); for ((n = 1; n <= cores; n *= 2)); do counts+=("$n"); done
[[ " ${counts[*]} " == *" $cores "* ]] || counts+=("$cores")

# The workspace (tokenizer, shards, a 2-step run of the small preset for the eval commands), once per build.
ws="$build/bench/threads_ws"
if [[ ! -f "$ws/COMPLETE" ]]; then
  rm -rf "$ws"; mkdir -p "$ws"
  corpus="$root/data/sample/corpus.json"
  "$lmtrain" tokenizer --corpus "$corpus" --vocab-size 8000 --out "$ws/tok" -q > /dev/null
  "$lmtrain" prepare --corpus "$corpus" --tokenizer "$ws/tok" --out "$ws/shards" --val-fraction 0.03 -q > /dev/null
  "$lmtrain" fit --data "$ws/shards" --preset small --out "$ws/run" --steps 2 --micro-batch 2 -q > /dev/null
  touch "$ws/COMPLETE"
fi

mkdir -p "$here/results"
stamp=$(date -u +%Y%m%d-%H%M)
jsonl="$here/results/$stamp-$label.jsonl"; : > "$jsonl"
other_load() {  # the machine's load and its five busiest processes (name, %CPU), as one JSON string
  local top; top=$(ps -eo comm,pcpu --sort=-pcpu --no-headers | head -5 | awk '{printf "%s %s%%; ", $1, $2}')
  echo "load $(cut -d' ' -f1-3 /proc/loadavg); busiest: $top"
}
echo "{\"meta\": true, \"date\": \"$(date -u +%FT%TZ)\", \"cores\": $cores, \"busy\": $busy, \"rounds\": $rounds, \"steps\": $steps, \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\", \"before\": \"$(other_load)\"}" >> "$jsonl"

busy_pids=()
stop_busy() { for p in "${busy_pids[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done; }
trap stop_busy EXIT
for ((i = 0; i < busy; i++)); do
  if [[ $i == 0 ]] && command -v taskset > /dev/null; then taskset -c 0 bash -c 'while :; do :; done' &
  else bash -c 'while :; do :; done' & fi
  busy_pids+=($!)
done
sleep 1

# One measurement: prints {"workload", "threads", "chosen", "value", "unit", "wall_s"}.
measure() {
  local what=$1 n=$2 err="$ws/last.err" out="$ws/last.out" t0 t1 value unit
  t0=$(date +%s.%N)
  case "$what" in
    fit) rm -rf "$ws/fit"
      "$lmtrain" fit --data "$ws/shards" --preset small --out "$ws/fit" --steps "$steps" --micro-batch 16 \
        --seq-len 256 --lr 2e-3 --dtype bf16 --threads "$n" > "$out" 2> "$err"
      value=$(grep -oE 'trained [^:]*: [0-9.]+ tok/s' "$out" | grep -oE '[0-9.]+ tok/s' | cut -d' ' -f1); unit="tok/s";;
    sample)
      "$lmeval" sample --run "$ws/run" --prompt "The history of" --max-new-tokens 48 --json --threads "$n" > "$out" 2> "$err"
      value=$("$py" -c 'import json,sys; print(round(json.loads(sys.stdin.read())["tokens_per_s"], 1))' < "$out"); unit="tok/s";;
    mc)
      "$lmeval" mc --run "$ws/run" --tasks copa --limit 100 --data-dir "$bench_data" --out "$ws/mc.json" \
        --threads "$n" > "$out" 2> "$err"; value=""; unit="s";;
    nll)
      "$lmeval" nll --run "$ws/run" --data "$ws/shards" --max-tokens 8192 --out "$ws/nll.json" \
        --threads "$n" > "$out" 2> "$err"; value=""; unit="s";;
  esac
  t1=$(date +%s.%N)
  local wall; wall=$("$py" -c "print(round($t1 - $t0, 2))")
  [[ -n "$value" ]] || value=$wall
  local chosen; chosen=$(grep -oE '(\]|;) threads: [0-9]+' "$err" | grep -oE '[0-9]+$' | head -1 || true)
  echo "{\"workload\": \"$what\", \"threads\": $n, \"chosen\": ${chosen:-null}, \"value\": $value, \"unit\": \"$unit\", \"wall_s\": $wall}"
}

for what in fit sample mc nll; do
  [[ "$what" == mc && ! -d "$bench_data/copa" ]] && { echo "  mc skipped: no $bench_data/copa" >&2; continue; }
  for ((r = 1; r <= rounds; r++)); do
    order=("${counts[@]}"); (( r % 2 == 0 )) && order=($(printf '%s\n' "${counts[@]}" | tac))
    for n in "${order[@]}"; do
      line=$(measure "$what" "$n")
      echo "  $what round $r: $line" >&2
      echo "$line" >> "$jsonl"
    done
  done
done
stop_busy
echo "{\"meta\": true, \"after\": \"$(other_load)\"}" >> "$jsonl"
"$py" "$here/threads_load_table.py" "$jsonl" | tee "${jsonl%.jsonl}.md"
