#!/usr/bin/env bash
# Issue 31's measurements on the shared Bangla + English text (data/shared-corpus.json: weights
# ask bn:en = 64:36 by characters), default recipe: the vocabulary sweep (its vocab-32000 folder is
# the default 32k tokenizer), fertility per held-out domain, on the parallel dev splits (held-out
# news-like text apart from the test) and on the domain texts the corpus lacks (science exam
# questions, informal web comments), and the joint allocation at 32k beside the default per-language one.
# Writes bench/results/<date>-tokenizer-*.{log,json}; the tokenizers go to $OUT (default /tmp).
#
#   bench/tokenizer_shared.sh [--build build] [--out /tmp/tok31] [--sizes 16000,32000,48000,64000] [--threads 2]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="$root/build" out=/tmp/lmforge-tokenizer-shared sizes=16000,32000,48000,64000 threads=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2;;
    --out) out="$2"; shift 2;;
    --sizes) sizes="$2"; shift 2;;
    --threads) threads="$2"; shift 2;;
    -h|--help) sed -n '2,8p' "$0"; exit 0;;
    *) echo "tokenizer_shared.sh: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
shared="$root/../shared/data"
[[ -d "$shared/bn" ]] || { echo "tokenizer_shared.sh: $shared: no shared data" >&2; exit 2; }
lmtrain="$build/app/lmtrain"
[[ -x "$lmtrain" ]] || { echo "tokenizer_shared.sh: $lmtrain not built" >&2; exit 2; }
source "$root/scripts/env.sh"
stamp="$(date -u +%Y%m%d-%H%M)"
res="$root/bench/results/$stamp-tokenizer"
mkdir -p "$out"
"$LM_PYTHON" "$here/tokenizer_eval_texts.py" "$shared" "$out/evaltexts"
common=(--corpus "$root/data/shared-corpus.json" --threads "$threads"
        --parallel "$shared/parallel/bn_en_parallel.jsonl.gz" --parallel-corpora SUPara-benchmark:test2018,SIPC:test
        --eval-text "bn=$out/evaltexts/bn_pardev.txt" --eval-text "en=$out/evaltexts/en_pardev.txt"
        --eval-text "bn=$out/evaltexts/bn_science.txt" --eval-text "en=$out/evaltexts/en_science.txt"
        --eval-text "bn=$shared/bn/bn_social_sentiment.txt.gz")
rm -rf "$out/sweep" "$out/joint-32k"
/usr/bin/time -f "sweep: %e s wall, %M KB peak" "$lmtrain" tokenizer "${common[@]}" --out "$out/sweep" \
  --sweep "$sizes" 2>&1 | tee "$res-sweep.log"
cp "$out/sweep/sweep.json" "$res-sweep.json"
cp "$out/sweep/vocab-32000/fertility.json" "$res-32k-fertility.json" 2>/dev/null || true
/usr/bin/time -f "joint: %e s wall, %M KB peak" "$lmtrain" tokenizer "${common[@]}" --vocab-size 32000 \
  --vocab-allocation joint --out "$out/joint-32k" 2>&1 | tee "$res-32k-joint.log"
cp "$out/joint-32k/fertility.json" "$res-32k-joint-fertility.json"
echo "results: $res-*"
