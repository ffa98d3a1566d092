#!/usr/bin/env python3
"""`lmtrain extend-model` against transformers, with the real Llama 3 and Qwen2 vocabularies
(issue 37). Two steps, driven by tests/export/extend_model_flow.sh:

  extend_model_check.py make OUT SHAPE VOCAB_DIR BN_TEXT
      OUT/base: a tiny random checkpoint of SHAPE (llama3: LlamaForCausalLM, untied, bf16, two
      shards; qwen2: Qwen2ForCausalLM, tied, fp32, one file) with the real tokenizer.json.
      OUT/tok-ext: extension.json + hf-tokenizer.json as `lmtrain tokenizer --extend` writes them:
      40 new tokens, each the concatenation of two base tokens that follow each other inside a word
      of the Bangla text (base_pieces: what the base BPE gives for the bytes as one piece, a merge
      appended for each), and one added token without pieces (the fallback row).
  extend_model_check.py check OUT BN_TEXT
      OUT/ext (written by lmtrain extend-model) loaded by transformers: old rows bit-identical in
      the stored dtype, new rows the fp32 mean of their pieces' rows stored in that dtype (within
      one rounding of it: lmforge's fp32 sum may differ from torch.mean's in the last bit), the row
      without pieces near the old rows' mean (1e-9 x covariance: within 1e-3), every other tensor
      byte-equal; logits on base ids, base columns, bit-identical to the base's (fp32 eager); the
      extended tokenizer loads and gives new ids on Bangla text.
Exit 77: skipped (no transformers / tokenizers / safetensors in this Python).
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

ADDED, FALLBACK = 40, "<|bn_extra|>"


def fnv1a64(data: bytes) -> str:  # core/file.h fnv1a64 + hex64: tokenizer::model_hash
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def make_base(out, shape, vocab_dir):
    rows = json.load(open(f"{vocab_dir}/config.json"))["vocab_size"]
    torch.manual_seed(1)
    common = dict(vocab_size=rows, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.1)
    if shape == "llama3":
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
                                             rope_theta=500000.0, **common)).to(torch.bfloat16)
        model.save_pretrained(out, max_shard_size="20MB")
    else:
        model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, rope_theta=1e6, bos_token_id=151643,
                                             eos_token_id=151643, **common))
        model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(f"{vocab_dir}/{f}"):
            with open(f"{vocab_dir}/{f}", "rb") as src, open(f"{out}/{f}", "wb") as dst:
                dst.write(src.read())
    return rows


def new_tokens(tok_path, bn_text):
    tok = Tokenizer.from_file(tok_path)
    vocab = tok.get_vocab()
    pairs = []
    for line in open(bn_text, encoding="utf-8"):
        enc = tok.encode(line.strip(), add_special_tokens=False)
        for a, b in zip(enc.tokens, enc.tokens[1:]):
            if b.startswith("Ġ") or a + b in vocab or (a, b) in pairs:
                continue
            pairs.append((a, b))
            if len(pairs) == ADDED:
                return tok, pairs
    raise SystemExit("not enough token pairs in the Bangla text")


def make_tokenizer(out, base, rows, bn_text):
    tok, pairs = new_tokens(f"{base}/tokenizer.json", bn_text)
    j = json.load(open(f"{base}/tokenizer.json", encoding="utf-8"))
    string_merges = bool(j["model"]["merges"]) and isinstance(j["model"]["merges"][0], str)
    toks = []
    for i, (a, b) in enumerate(pairs):
        piece = a + b
        j["model"]["vocab"][piece] = rows + i
        j["model"]["merges"].append(f"{a} {b}" if string_merges else [a, b])
        toks.append({"id": rows + i, "token": piece, "bytes_hex": "",
                     "base_pieces": [t.id for t in tok.model.tokenize(piece)]})
    j["added_tokens"].append({"id": rows + ADDED, "content": FALLBACK, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    toks.append({"id": rows + ADDED, "token": FALLBACK, "bytes_hex": FALLBACK.encode().hex(), "base_pieces": []})
    os.makedirs(out, exist_ok=True)
    with open(f"{out}/hf-tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    ext = {"format": "lmforge-vocab-extension/1",
           "base_tokenizer_hash": fnv1a64(open(f"{base}/tokenizer.json", "rb").read()),
           "base_vocab_size": rows, "vocab_size": rows + ADDED + 1, "split": "test", "new_tokens": toks}
    json.dump(ext, open(f"{out}/extension.json", "w"), indent=1)
    print(f"made {base} ({rows} rows) and {out} ({ADDED} new tokens from pairs, 1 without pieces)")


def tensors(folder):
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            out.update(load_file(f"{folder}/{f}"))
    return out


def check_rows(base, ext, ext_json):
    a, b = tensors(base), tensors(ext)
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    rows = ext_json["base_vocab_size"]
    for name, old in a.items():
        new = b[name]
        assert new.dtype == old.dtype, (name, new.dtype, old.dtype)
        if name not in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(new, old), name
            continue
        assert new.shape[0] == ext_json["vocab_size"] and torch.equal(new[:rows], old), f"{name}: old rows changed"
        rel = torch.finfo(old.dtype).eps  # one rounding of the stored dtype
        worst = 0.0
        for t in ext_json["new_tokens"]:
            if not t["base_pieces"]:
                mean = old.float().mean(0)
                assert (new[t["id"]].float() - mean).abs().max() < 1e-3, f"{name}: fallback row far from the mean"
                continue
            want = old[t["base_pieces"]].float().mean(0)
            err = ((new[t["id"]].float() - want.to(old.dtype).float()).abs() / (want.abs() + 1e-30)).max().item()
            worst = max(worst, err)
        assert worst <= rel, f"{name}: a new row is not its pieces' mean (relative error {worst:.2e} > {rel:.1e})"
        print(f"rows ok: {name} {old.dtype}: {rows} old rows bit-identical, {len(ext_json['new_tokens'])} new "
              f"(pieces' mean within {worst:.1e} relative)")


def check_logits(base, ext, rows):
    torch.manual_seed(2)
    ids = torch.randint(0, rows, (2, 32))
    out = []
    for folder in (base, ext):
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            out.append(m(ids).logits)
    diff = (out[1][..., :rows] - out[0]).abs().max().item()
    assert torch.equal(out[1][..., :rows], out[0]), f"base-column logits changed (max diff {diff:.3e})"
    print(f"logits ok: base columns bit-identical in transformers (fp32, {tuple(ids.shape)} base ids)")


def check(out, bn_text):
    base, ext = f"{out}/base", f"{out}/ext"
    ext_json = json.load(open(f"{out}/tok-ext/extension.json"))
    cfg = json.load(open(f"{ext}/config.json"))
    assert cfg["vocab_size"] == ext_json["vocab_size"], cfg["vocab_size"]
    check_rows(base, ext, ext_json)
    check_logits(base, ext, ext_json["base_vocab_size"])
    tok = AutoTokenizer.from_pretrained(ext)
    lines = [l.strip() for l, _ in zip(open(bn_text, encoding="utf-8"), range(20)) if l.strip()]
    ids = [i for l in lines for i in tok(l, add_special_tokens=False)["input_ids"]]
    fresh = sum(i >= ext_json["base_vocab_size"] for i in ids)
    assert fresh > 0, "the extended tokenizer gives no new id on the Bangla lines its tokens came from"
    print(f"tokenizer ok: transformers loads it; {fresh} of {len(ids)} ids on 20 Bangla lines are new")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        out, shape, vocab_dir, bn = sys.argv[2:6]
        rows = make_base(f"{out}/base", shape, vocab_dir)
        make_tokenizer(f"{out}/tok-ext", f"{out}/base", rows, bn)
    else:
        check(sys.argv[2], sys.argv[3])
