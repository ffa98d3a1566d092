#!/usr/bin/env bash
# Continued pretraining end to end (issue 37), on the programs as a user runs them: a tiny
# Llama-3.2-shaped checkpoint (tied, GQA, llama3 rope) with Llama 3's real 128,256-token vocabulary
# -> `lmtrain tokenizer --import` -> `lmtrain prepare` of the bundled sample (32-bit shards framed
# with BOS 128000 / EOS 128001) -> `lmtrain fit --init-from` (the checkpoint's model, its weights)
# -> `lmeval nll` (bits per byte). Checks the shards' width and framing, that fit builds the
# checkpoint's model (its config, not a preset's) and learns, and that nll scores the run in bits
# per byte. That the weights are the checkpoint's is HfImportPython.*'s job (logits vs transformers).
#   cpt_flow.sh LMTRAIN LMEVAL PYTHON SOURCE_DIR    (exit 77: skipped, no transformers or vocabulary)
set -euo pipefail
lmtrain=$1 lmeval=$2 py=$3 src=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/lm_cpt_flow.XXXXXX")
trap 'rm -rf "$work"' EXIT
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lmforge/vocabs
if [ ! -f "$cache/llama3/tokenizer.json" ]; then
  "$py" "$src/tests/tokenizer/make_hf_vocabs.py" --cache "$cache" > "$work/vocabs.log" 2>&1 || true
fi
[ -f "$cache/llama3/tokenizer.json" ] || { echo "skip: no Llama 3 vocabulary (tests/tokenizer/make_hf_vocabs.py)"; exit 77; }

# The checkpoint: transformers' own save_pretrained, bf16, two shards; a base "pretrained" by
# nothing but its init, which is enough: what matters is that lmforge continues from these weights.
"$py" - "$work/base" "$cache/llama3" <<'EOF' || exit $?
import shutil, sys
try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("skip: no transformers"); sys.exit(77)
out, vocab = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                  tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001, rms_norm_eps=1e-5,
                  rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                  rope_theta=500000.0)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, max_shard_size="10MB")
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{vocab}/{f}", f"{out}/{f}")
EOF

"$lmtrain" tokenizer --import "$work/base" --out "$work/tok" --quiet
"$lmtrain" prepare --corpus "$src/data/sample/corpus.json" --tokenizer "$work/tok" --out "$work/shards" --quiet
"$py" - "$work/shards" <<'EOF'
import glob, json, struct, sys
man = json.load(open(sys.argv[1] + "/manifest.json"))
shards = sorted(glob.glob(sys.argv[1] + "/**/*.lmtok", recursive=True))
assert shards, "no shards"
with open(shards[0], "rb") as f:
    head = f.read(128)
# header: magic(8) version(4) token width(4) vocab(4) ... (data/shard.h)
width, vocab = struct.unpack_from("<II", head, 12)
assert (width, vocab) == (4, 128256), f"{shards[0]}: token width {width}, vocab {vocab}: want 32-bit ids of 128,256"
with open(shards[0], "rb") as f:
    f.seek(128)
    first = struct.unpack("<I", f.read(4))[0]
assert first == 128000, f"{shards[0]}: the first token is {first}, not Llama 3's BOS 128000"
print(f"shards ok: {len(shards)} files, 32-bit ids, vocab {vocab}, documents start with BOS 128000")
EOF
"$lmtrain" fit --data "$work/shards" --init-from "$work/base" --out "$work/run" --preset tiny --steps 8 \
  --micro-batch 4 --seq-len 64 --lr 3e-3 --set logging.interval=1 --quiet
"$py" - "$work/run" <<'EOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
cfg = json.load(open(sys.argv[1] + "/config.json"))["model"]
assert cfg["vocab_size"] == 128256 and cfg["d_model"] == 64 and cfg["n_kv_heads"] == 2, cfg
first, last = rows[0]["loss"], rows[-1]["loss"]
assert last < first, f"the loss did not fall: {first} -> {last}"
print(f"fit ok: model from the checkpoint's config ({cfg['architecture'] if 'architecture' in cfg else 'llama'}), loss {first:.3f} -> {last:.3f}")
EOF
"$lmeval" nll --run "$work/run" --data "$work/shards" --out "$work/nll.json" --quiet
"$py" - "$work/nll.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
langs = r["languages"]
for lang in ("bn", "en"):
    m = langs[lang]["model"]
    assert m["tokens"] > 0 and m["bits_per_byte"] > 0, (lang, m)
    print(f"nll ok: {lang} {m['nats_per_token']:.3f} nats/token, {m['bits_per_byte']:.3f} bits/byte on {m['tokens']} tokens")
EOF
echo "cpt flow ok"
