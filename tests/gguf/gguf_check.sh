#!/usr/bin/env bash
# llama.cpp and the gguf package against 'lmtrain export --format gguf' (ctest gguf_llama_cpp):
# trains the tiny preset briefly on data/sample, exports f32/f16/q8_0 GGUF files (and, as a
# negative control, an f32 file without the q/k row permutation), records lmforge's ids, logits
# and greedy 'lmeval sample' continuations, then tests/gguf/gguf_check.py compares.
#   tests/gguf/gguf_check.sh BUILD_DIR [PYTHON]     LM_GGUF_KEEP=DIR keeps the work folder there
# Exit 77 (ctest: Skipped) when PYTHON lacks gguf or llama_cpp (scripts/requirements-gguf.txt).
set -euo pipefail
BUILD=$(cd "${1:?build dir}" && pwd); PY=${2:-python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! "$PY" -c 'import gguf, llama_cpp, numpy, sentencepiece' 2>/dev/null; then
  echo "SKIPPED: $PY lacks gguf / llama_cpp / numpy / sentencepiece (bash scripts/setup.sh installs scripts/requirements-gguf.txt)"
  exit 77
fi
if [ -n "${LM_GGUF_KEEP:-}" ]; then W=$LM_GGUF_KEEP; rm -rf "$W"; mkdir -p "$W"; else
  W=$(mktemp -d /tmp/lm_gguf.XXXXXX); trap 'rm -rf "$W"' EXIT; fi
LMTRAIN="$BUILD/app/lmtrain"; LMEVAL="$BUILD/app/lmeval"
export CI=true
Q="--threads 2 -q"
STEPS=${LM_GGUF_STEPS:-120}
t0=$SECONDS
phase() { echo "gguf_check: $1 done at $((SECONDS - t0)) s"; }

"$LMTRAIN" tokenizer --corpus "$ROOT/data/sample/corpus.json" --vocab-size 512 --sample-chars 400000 --out "$W/tok" $Q >/dev/null
"$LMTRAIN" prepare --corpus "$ROOT/data/sample/corpus.json" --tokenizer "$W/tok" --out "$W/shards" $Q >/dev/null
cat > "$W/run.json" <<JSON
{"train": {"steps": $STEPS, "batch": {"micro_batch": 8, "seq_len": 64}, "schedule": {"warmup_steps": 10},
           "optimizer": {"lr": 0.003}, "logging": {"interval": 50}, "checkpoint": {"interval": $STEPS, "keep_last": 1},
           "eval": {"interval": 0}}}
JSON
phase "tokenizer + prepare"
"$LMTRAIN" fit --data "$W/shards" --preset tiny --config "$W/run.json" --out "$W/run" $Q >/dev/null
phase "fit ($STEPS steps)"

for t in f32 f16 q8_0; do
  "$LMTRAIN" export --run "$W/run" --format gguf --gguf-type "$t" --out "$W/model.$t.gguf" -q >/dev/null
done
"$LMTRAIN" export --run "$W/run" --format gguf --gguf-type f32 --gguf-skip-rope-permutation --out "$W/noperm.f32.gguf" -q >/dev/null
"$LMTRAIN" export --run "$W/run" --out "$W/hf" --dtype fp32 -q >/dev/null

# Greedy continuations as 'lmeval sample' prints them, with and without its default bos.
i=0
while IFS= read -r prompt; do
  "$LMEVAL" sample --run "$W/run" --prompt "$prompt" --max-new-tokens 30 --temperature 0 --json -q > "$W/sample_bos_$i.json"
  "$LMEVAL" sample --run "$W/run" --prompt "$prompt" --max-new-tokens 30 --temperature 0 --json --no-bos -q > "$W/sample_nobos_$i.json"
  i=$((i + 1))
done < <(printf '%s\n' "বাংলা ভাষা" "The city of")

phase "exports + lmeval sample"
# Texts (data/sample held-out, the parallel set of /work/shared/data when present), then lmforge's
# ids for them and its logits on the first tokens of each.
"$PY" "$ROOT/tests/gguf/gguf_check.py" texts --work "$W" --root "$ROOT"
LM_GGUF_RUN="$W/run" LM_GGUF_TEXTS="$W/texts.json" LM_GGUF_OUT="$W" LM_GGUF_TOKENIZER="$W/tok" \
  "$BUILD/tests/gguf/gguf_test" --gtest_also_run_disabled_tests \
  --gtest_filter='GgufExport.DISABLED_WriteExpected:GgufExport.ReadsSpmVocab*' >"$W/gtest.log" 2>&1 ||
  { cat "$W/gtest.log"; exit 1; }
phase "lmforge ids and logits"
"$PY" "$ROOT/tests/gguf/gguf_check.py" check --work "$W" --root "$ROOT"
