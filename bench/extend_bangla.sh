#!/usr/bin/env bash
# Vocabulary extension measured (issue 37): Llama 3 extended by up to ADD (default 32,000) tokens
# learned on the shared Bangla corpus (../shared/data/bn/*.gz) with the llama3-marks split, and
# Qwen2 with qwen35, and Llama 2's SentencePiece tokenizer.model (its own whitespace words: no
# split); characters per token, base beside extended, on the parallel test sentences
# (SUPara test2018 + SIPC test + SIPC devtest: 2,408 pairs, none in the training text).
#   bench/extend_bangla.sh [OUT_DIR] [ADD] [GUARD]      (build/app/lmtrain must be built)
#   BASES="llama2" bench/extend_bangla.sh ...            (a subset of llama3 qwen2 llama2)
# Writes OUT_DIR/{llama3,qwen2,llama2}-ext/ (the tokenizer folders with fertility.json) and a log
# bench/results/<date>-extend-bangla-<guard>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/lmforge-extend-bench}
add=${2:-32000}
guard=${3:-marks+bengali}
shared=$(cd ../shared/data && pwd)
vocabs=${LM_VOCAB_CACHE:-$HOME/.cache/lmforge/vocabs}
lmtrain=build/app/lmtrain
bases=${BASES:-llama3 qwen2 llama2}
log=bench/results/$(date -u +%Y%m%d-%H%M)-extend-bangla-${guard/+/-}${BASES:+-${BASES// /-}}-$add.log
mkdir -p "$out" bench/results
cat > "$out/bn.json" <<JSON
{"sources": [
  {"paths": ["$shared/bn/bn_news_punct.txt.gz", "$shared/bn/bn_social_sentiment.txt.gz", "$shared/bn/bn_wikisource_cltk.txt.gz"], "format": "lines", "lang": "bn", "weight": 1},
  {"paths": ["$shared/bn/bn_bdnews_articles.jsonl.gz", "$shared/bn/bn_literature_bnarchive.jsonl.gz", "$shared/bn/bn_poems.jsonl.gz"], "format": "jsonl", "text_field": "text", "lang": "bn", "weight": 1}
]}
JSON
par=(--parallel "$shared/parallel/bn_en_parallel.jsonl.gz"
     --parallel-corpora SUPara-benchmark:test2018,SIPC:test,SIPC:devtest
     --eval-text "en=$shared/sample/en_2000.txt")
{
  echo "# $(date -u) extend-bangla add=$add guard=$guard host=$(hostname) nproc=$(nproc)"
  for base in $bases; do
    case $base in
      llama3) split=(--split llama3-marks) ;;
      qwen2) split=(--split qwen35) ;;
      *) split=() ;;  # SentencePiece: its own whitespace words
    esac
    rm -rf "$out/$base-tok" "$out/$base-ext"
    $lmtrain tokenizer --import "$vocabs/$base" --out "$out/$base-tok"
    /usr/bin/time -v $lmtrain tokenizer --extend "$out/$base-tok" --corpus "$out/bn.json" --add "$add" \
      "${split[@]}" --guard "$guard" --sample-chars 100000000 --out "$out/$base-ext" "${par[@]}" 2>&1 |
      grep -v "^\s*\(Average\|Exit\|Page\|Swaps\|File\|Socket\|Signals\|Percent\|Volun\|Invol\|Minor\|Major\|Command\|System time\|User time\)"
  done
} 2>&1 | tee "$log"
echo "log: $log"
