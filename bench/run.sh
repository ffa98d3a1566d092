#!/usr/bin/env bash
# Side-by-side benchmark: lmforge's training step vs the Python PyTorch peer in eager mode and
# under torch.compile, alternating (A B C A B C ...) in one run so machine noise hits all alike. Writes bench/results/<date>-<label>.json
# and bench/results/latest.md (Markdown table with the ratio lmforge/peer) and prints the table.
#
#   bench/run.sh [--preset small] [--batch 8] [--seq 256] [--dtype both|fp32|bf16] [--rounds 2]
#                [--steps 12] [--threads N] [--n-layers L --n-heads H] [--label NAME]
#                [--build build-perf] [--no-compile]
# Example (the issue's d256 L4 configuration): bench/run.sh --preset small --n-layers 4 --n-heads 4 --label d256l4
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
preset=small batch=8 seq=256 dtype=both rounds=2 steps=12 threads="$(nproc)" layers=0 heads=0 label="" build="build-perf" compiled=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --preset) preset="$2"; shift 2;;
    --batch) batch="$2"; shift 2;;
    --seq) seq="$2"; shift 2;;
    --dtype) dtype="$2"; shift 2;;
    --rounds) rounds="$2"; shift 2;;
    --steps) steps="$2"; shift 2;;
    --threads) threads="$2"; shift 2;;
    --n-layers) layers="$2"; shift 2;;
    --n-heads) heads="$2"; shift 2;;
    --no-compile) compiled=0; shift;;
    --label) label="$2"; shift 2;;
    --build) build="$2"; shift 2;;
    -h|--help) sed -n '2,10p' "$0"; exit 0;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
[[ -n "$label" ]] || label="$preset"
[[ "$build" = /* ]] || build="$root/$build"
bench="$build/bench/train_step_bench"
[[ -x "$bench" ]] || { echo "run.sh: $bench not built (ninja -C $build train_step_bench)" >&2; exit 2; }
source "$(dirname "$0")/../scripts/env.sh"; py=$LM_PYTHON  # the pinned torch of scripts/setup.sh
peer="$here/peer_pytorch.py"
dtypes=(fp32 bf16); [[ "$dtype" == both ]] || dtypes=("$dtype")
shape=(--preset "$preset" --batch "$batch" --seq "$seq" --threads "$threads")
# Train mode times the same window on both sides: a quarter of --steps untimed, the rest timed,
# the host reading the loss every quarter (train_step_bench and peer_pytorch.py: --warmup,
# --steps, --read-every); forward and nll run --steps in all.
every=$(( steps / 4 > 0 ? steps / 4 : 1 ))
steps_of() { if [[ "$1" == train ]]; then echo --warmup $every --read-every $every --steps $(( (steps / every - 1) * every )); else echo --steps $steps; fi; }
[[ "$layers" == 0 ]] || shape+=(--n-layers "$layers")
[[ "$heads" == 0 ]] || shape+=(--n-heads "$heads")

mkdir -p "$here/results"
# Raw lines go to a partial file first, so an interrupted run keeps what it measured.
lines="$here/results/$(date -u +%Y%m%d-%H%M)-$label.partial.jsonl"; : > "$lines"
echo "{\"meta\": true, \"label\": \"$label\", \"date\": \"$(date -u +%FT%TZ)\", \"host_cores\": $(nproc), \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\"}" >> "$lines"
echo "run.sh: $label (${shape[*]}), dtypes ${dtypes[*]}, $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bench" --mode peak --threads "$threads" >> "$lines"
for dt in "${dtypes[@]}"; do
  for mode in train forward; do
    for ((r = 1; r <= rounds; r++)); do
      echo "  $dt $mode round $r/$rounds" >&2
      "$bench" --mode "$mode" --dtype "$dt" "${shape[@]}" $(steps_of $mode) | tail -1 >> "$lines"
      "$py" "$peer" --mode "$mode" --dtype "$dt" "${shape[@]}" $(steps_of $mode) | tail -1 >> "$lines"
      [[ "$compiled" == 1 ]] && "$py" "$peer" --compile --mode "$mode" --dtype "$dt" "${shape[@]}" $(steps_of $mode) | tail -1 >> "$lines"
    done
  done
  # lmeval nll's own path (windows + batched scorer) at the same shape; lmeval runs fp32 on a CPU.
  if [[ "$dt" == fp32 ]]; then
    for ((r = 1; r <= rounds; r++)); do
      echo "  $dt nll (lmeval's scorer) round $r/$rounds" >&2
      "$bench" --mode nll --dtype "$dt" "${shape[@]}" --steps "$steps" | tail -1 >> "$lines"
    done
  fi
done
# The loader (sampler batches/s and its share of this shape's training step) and the tokenizer
# (encode MB/s and chars/token per language on the bundled sample corpus, with a tokenizer
# trained on it for this run). Skipped when not built.
if [[ -x "$build/bench/loader_bench" ]]; then
  echo "  loader_bench" >&2
  "$build/bench/loader_bench" --preset "$preset" --batch "$batch" --seq "$seq" --threads "$threads" --steps 3 2>/dev/null \
    | grep '^{' | tail -1 >> "$lines" || echo "  loader_bench failed, skipped" >&2
fi
if [[ -x "$build/bench/tokenizer_bench" && -x "$build/app/lmtrain" ]]; then
  echo "  tokenizer_bench" >&2
  tokdir=$(mktemp -d /tmp/lm_bench_tok.XXXXXX)
  if "$build/app/lmtrain" tokenizer --corpus "$root/data/sample/corpus.json" --vocab-size 8192 --out "$tokdir/tok" \
       --threads "$threads" -q >/dev/null 2>&1; then
    "$build/bench/tokenizer_bench" --tokenizer "$tokdir/tok" --corpus "$root/data/sample/corpus.json" --threads "$threads" \
      2>/dev/null | grep '^{' | tail -1 >> "$lines" || echo "  tokenizer_bench failed, skipped" >&2
  else
    echo "  tokenizer training failed, tokenizer_bench skipped" >&2
  fi
  rm -rf "$tokdir"
fi
echo "{\"meta\": true, \"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$lines"
out="$here/results/$(date -u +%Y%m%d-%H%M)-$label.json"
"$py" "$here/summarize.py" "$lines" "$out" "$here/results/latest.md"
rm -f "$lines"
cat "$here/results/latest.md"
echo "wrote $out and $here/results/latest.md" >&2
