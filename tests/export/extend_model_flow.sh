#!/usr/bin/env bash
# The vocabulary extension's model side end to end (issue 37), as a user runs it, for a tiny
# Llama-3-shaped checkpoint (untied, bf16, two shards, Llama 3's real 128,256-token vocabulary) and
# a tiny Qwen2-shaped one (tied, fp32, 151,936 rows):
#   extend_model_check.py make -> `lmtrain extend-model` -> extend_model_check.py check (transformers:
#   rows, bit-identical base-column logits, the tokenizer) -> refusals (existing --out, a tokenizer of
#   another checkpoint, an already-extended checkpoint).
# Then, on the Llama 3 one: `lmtrain tokenizer --import` of the extended folder -> `prepare` ->
# `fit --init-from BASE` refused naming both sizes and `lmtrain extend-model` -> `fit --init-from
# BASE_EXT` with an embeddings-only first stage of 2 steps.
#   extend_model_flow.sh LMTRAIN PYTHON SOURCE_DIR    (exit 77: skipped, no transformers or vocabulary)
set -euo pipefail
lmtrain=$1 py=$2 src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/lm_extend_flow.XXXXXX")
trap 'rm -rf "$work"' EXIT
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lmforge/vocabs
check="$src/tests/export/extend_model_check.py"
bn=$work/bn.txt  # Bangla lines the new tokens come from: the bundled sample's held-out text
gzip -dc "$src/data/sample/bn_heldout.txt.gz" | head -n 400 > "$bn"
for v in llama3 qwen2; do
  [ -f "$cache/$v/tokenizer.json" ] || { echo "skip: no $v vocabulary (tests/tokenizer/make_hf_vocabs.py)"; exit 77; }
done

refused() {  # refused WANT CMD...: the command fails and says WANT
  local want=$1; shift
  if "$@" > "$work/out.log" 2>&1; then echo "FAIL: accepted: $*"; exit 1; fi
  grep -qF -- "$want" "$work/out.log" || { echo "FAIL: '$want' not in:"; cat "$work/out.log"; exit 1; }
  echo "refused ok: $want"
}

for shape in llama3 qwen2; do
  d=$work/$shape
  "$py" "$check" make "$d" "$shape" "$cache/$shape" "$bn"
  "$lmtrain" extend-model --hf "$d/base" --tokenizer "$d/tok-ext" --out "$d/ext"
  "$py" "$check" check "$d" "$bn"
  refused "--force" "$lmtrain" extend-model --hf "$d/base" --tokenizer "$d/tok-ext" --out "$d/ext"
  refused "already extended" "$lmtrain" extend-model --hf "$d/ext" --tokenizer "$d/tok-ext" --out "$d/ext2"
done
refused "base_vocab_size is 128256 but" \
  "$lmtrain" extend-model --hf "$work/qwen2/base" --tokenizer "$work/llama3/tok-ext" --out "$work/mixed"
[ ! -e "$work/mixed" ] || { echo "FAIL: a refused extend-model left $work/mixed"; exit 1; }

# Shards of the extended vocabulary, and fit on them.
d=$work/llama3
"$lmtrain" tokenizer --import "$d/ext" --out "$d/tok" --quiet
"$lmtrain" prepare --corpus "$src/data/sample/corpus.json" --tokenizer "$d/tok" --out "$d/shards" --quiet
refused "lmtrain extend-model" "$lmtrain" fit --data "$d/shards" --init-from "$d/base" --out "$d/run-base" \
  --steps 2 --micro-batch 2 --seq-len 32 --quiet
grep -qF "128297 ids but --init-from $d/base/config.json has vocab_size 128256" "$work/out.log" ||
  { echo "FAIL: both sizes not named:"; cat "$work/out.log"; exit 1; }
"$lmtrain" fit --data "$d/shards" --init-from "$d/ext" --out "$d/run" --steps 4 --micro-batch 2 --seq-len 32 \
  --lr 1e-3 --set param_groups.embeddings_only_steps=2 --set logging.interval=1 --set checkpoint.interval=1 --set checkpoint.keep_last=10 \
  2> "$d/fit.log"
grep -F "train only the embeddings and the head" "$d/fit.log"
! grep -F "hold no English" "$d/fit.log" || { echo "FAIL: replay warning with English in the mix"; exit 1; }
"$py" - "$d/run" <<'EOF'
import sys
from safetensors.torch import load_file
run = sys.argv[1]
w = {s: load_file(f"{run}/checkpoints/step-{s:08d}/model.safetensors") for s in (1, 2, 3)}
for name, t in w[1].items():
    frozen = name not in ("model.embed_tokens.weight", "lm_head.weight")
    assert frozen == bool((w[2][name] == t).all()), f"{name}: stage 1 {'moved' if frozen else 'froze'} it"
    assert not (w[3][name] == w[2][name]).all(), f"{name}: did not move at step 3 (whole model)"
print("fit ok: steps 1-2 moved only the embedding and the head, step 3 moved every tensor")
EOF
echo "extend-model flow ok"
