#!/usr/bin/env python3
"""GGUF files of 'lmtrain export --format gguf' read by the gguf package and run by llama.cpp.

Stages (tests/gguf/gguf_check.sh runs both):
  texts  --work W --root R   writes W/texts.json: the texts whose ids and logits lmforge records
  check  --work W --root R   compares; prints one line per check and 'N passed, M failed'

The gguf package (gguf-py, llama.cpp's own reader) checks the container: metadata, tensor names,
shapes, types and values against the fp32 HF export of the same checkpoint (f32 equal, f16 equal
to numpy's round-to-nearest-even halves, q8_0 equal byte for byte to gguf-py's quantizer).
llama-cpp-python checks the model: logits on lmforge's ids, greedy continuations equal to
'lmeval sample', and llama.cpp's tokenizer against lmforge's ids.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np

# Max abs logit difference allowed per file type (logits of the tiny trained model span ~±15).
# f32: same weights; llama.cpp sums in another order (ggml's SIMD dot products, its own softmax and
# exp), f32 KV cache asked for: rounding only, ~1e-5 seen, 1e-3 allows other CPUs' kernels.
# f16: weights rounded to 11 significant bits (relative 2^-12 ≈ 2.4e-4 each), and ggml rounds the
# activations to f16 for f16 matmuls too: the error grows through 2 layers; 0.05 allowed.
# q8_0: weights and (in ggml's q8_0 matmul) activations quantised to 8 bits per 32-value block
# (relative step up to 1/254 of the block's max): 0.25 allowed.
TOLERANCE = {"f32": 1e-3, "f16": 0.05, "q8_0": 0.25}
# The negative control (no q/k permutation) must be at least this far off, else the check is blind.
NEGATIVE_MIN = 0.05
GREEDY_TOKENS = 30
PROMPTS = ["বাংলা ভাষা", "The city of"]  # the prompts gguf_check.sh gives 'lmeval sample', in order


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(info["shape"])
    return out


def stage_texts(work, root):
    def lines(path, n):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out = []
            for line in f:
                line = " ".join(line.split())[:400]  # whole lines can be long; 400 chars is plenty
                if line:
                    out.append(line)
                if len(out) == n:
                    return out
        return out

    bn = lines(os.path.join(root, "data/sample/bn_heldout.txt.gz"), 20)
    en = lines(os.path.join(root, "data/sample/en_heldout.txt.gz"), 20)
    tokenize = PROMPTS + bn + en + [
        "বাংলা ভাষা আমার মাতৃভাষা।",
        "আমি ২০২৪ সালে ঢাকায় গিয়েছিলাম, সেখানে বৃষ্টি হচ্ছিল!",
        "The quick brown fox jumps over 13 lazy dogs.",
        "ইংরেজিতে বলে \"language model\" (ভাষা মডেল)।",
    ]
    parallel = "/work/shared/data/parallel/bn_en_parallel.jsonl.gz"
    if os.path.exists(parallel):
        with gzip.open(parallel, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i == 25:
                    break
                row = json.loads(line)
                tokenize += [row["bn"], row["en"]]
    with open(os.path.join(work, "texts.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenize": tokenize, "logits": [bn[0], en[0]]}, f, ensure_ascii=False)


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def isolated(c, what, fn):
    """Runs fn(Checks) in a child process: llama.cpp aborts the process on a malformed model
    (GGML_ABORT), which must read as one failed check, not end the run."""
    sys.stdout.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        cc = Checks()
        try:
            fn(cc)
        except Exception as e:  # noqa: BLE001 - any failure of the child is a failed check
            cc.check(False, f"{what}: {e!r}")
        sys.stdout.flush()
        os.write(w, f"{cc.passed} {cc.failed}".encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 64)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if data:
        p, f = map(int, data.split())
        c.passed += p
        c.failed += f
    else:
        c.check(False, f"{what}: llama.cpp ended the process (wait status {status}, signal {os.WTERMSIG(status) if os.WIFSIGNALED(status) else '-'})")


def permute(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute: rotate_half rows -> interleaved pairs
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    parts = hf.split(".")
    layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}[".".join(parts[3:-1])]
    return f"blk.{parts[2]}.{layer}.weight"


def framing_bos(tok_dir):
    """tokenizer.json's framing.bos; a file without "framing" is the old text + eos (tokenizer/tokenizer.h)."""
    meta = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    return bool(meta.get("framing", {}).get("bos", False))


def check_container(c, path, kind, hf_dir, spm_path):
    import gguf
    import sentencepiece as spm
    r = gguf.GGUFReader(path)
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    want = {
        "general.architecture": "llama", "general.alignment": 32,
        "general.file_type": {"f32": 0, "f16": 1, "q8_0": 7}[kind],
        "llama.context_length": cfg["max_position_embeddings"], "llama.embedding_length": cfg["hidden_size"],
        "llama.block_count": cfg["num_hidden_layers"], "llama.feed_forward_length": cfg["intermediate_size"],
        "llama.attention.head_count": cfg["num_attention_heads"],
        "llama.attention.head_count_kv": cfg["num_key_value_heads"],
        "llama.rope.dimension_count": cfg["head_dim"], "llama.vocab_size": cfg["vocab_size"],
        "tokenizer.ggml.model": "t5",
        # lmforge's recipe (tokenizer/train.cpp): add_dummy_prefix true, remove_extra_whitespaces false
        "tokenizer.ggml.add_space_prefix": True, "tokenizer.ggml.remove_extra_whitespaces": False, "tokenizer.ggml.bos_token_id": cfg["bos_token_id"],
        "tokenizer.ggml.eos_token_id": cfg["eos_token_id"], "tokenizer.ggml.padding_token_id": cfg["pad_token_id"],
        "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": framing_bos(os.path.dirname(spm_path)),
        "tokenizer.ggml.add_eos_token": False,
    }
    bad = [f"{k}={f.get(k)!r} (want {v!r})" for k, v in want.items() if f.get(k) != v]
    charsmap = bytes(f.get("tokenizer.ggml.precompiled_charsmap") or [])
    try:  # protobuf is optional here: with it, the charsmap must equal spm.model's byte for byte
        from sentencepiece import sentencepiece_model_pb2
        m = sentencepiece_model_pb2.ModelProto()
        m.ParseFromString(open(spm_path, "rb").read())
        if charsmap != m.normalizer_spec.precompiled_charsmap:
            bad.append(f"tokenizer.ggml.precompiled_charsmap: {len(charsmap)} bytes differ from spm.model's")
    except ImportError:
        if len(charsmap) < 1000:  # the NFC + Bengali rules compile to ~100 kB
            bad.append("tokenizer.ggml.precompiled_charsmap missing or short")
    for k, v in {"llama.rope.freq_base": cfg["rope_theta"], "llama.attention.layer_norm_rms_epsilon": cfg["rms_norm_eps"]}.items():
        if f.get(k) is None or abs(f[k] - v) > 1e-6 * abs(v):
            bad.append(f"{k}={f.get(k)} (want {v})")
    c.check(not bad, f"{kind}: metadata (gguf-py): {len(want) + 3} keys" + (": " + "; ".join(bad) if bad else ""))
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    scores = np.array([sp.get_score(i) for i in range(n)], dtype=np.float32)
    def piece_type(i):  # sentencepiece_model.proto Type: NORMAL 1, UNKNOWN 2, CONTROL 3, UNUSED 5, BYTE 6
        return 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1
    types = [piece_type(i) for i in range(n)]
    c.check(f["tokenizer.ggml.tokens"] == pieces and np.array_equal(np.array(f["tokenizer.ggml.scores"], np.float32), scores)
            and f["tokenizer.ggml.token_type"] == types,
            f"{kind}: {n} tokens, scores and token types equal SentencePiece's (Python sentencepiece on spm.model)")

    ref = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    tensors = {t.name: t for t in r.tensors}
    want_names = {gguf_name(k) for k in ref}
    c.check(set(tensors) == want_names, f"{kind}: tensor names {sorted(tensors) if set(tensors) != want_names else len(tensors)}")
    worst, bad = 0.0, []
    for hf_name, w in ref.items():
        t = tensors.get(gguf_name(hf_name))
        if t is None:
            continue
        if "q_proj" in hf_name:
            w = permute(w, cfg["num_attention_heads"])
        if "k_proj" in hf_name:
            w = permute(w, cfg["num_key_value_heads"])
        want_type = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
                     "q8_0": gguf.GGMLQuantizationType.Q8_0}[kind] if w.ndim == 2 else gguf.GGMLQuantizationType.F32
        if t.tensor_type != want_type or list(t.shape) != list(reversed(w.shape)):
            bad.append(f"{t.name}: {t.tensor_type.name} {list(t.shape)}, want {want_type.name} {list(reversed(w.shape))}")
            continue
        if want_type == gguf.GGMLQuantizationType.F32:
            same = np.array_equal(np.asarray(t.data).reshape(w.shape), w)
        elif want_type == gguf.GGMLQuantizationType.F16:
            same = np.array_equal(np.asarray(t.data).reshape(w.shape), w.astype(np.float16))
        else:
            same = np.array_equal(np.asarray(t.data).reshape(-1), gguf.quants.quantize(w, want_type).reshape(-1))
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(w.shape)
        worst = max(worst, float(np.abs(deq - w).max()))
        if not same:
            bad.append(f"{t.name}: values differ from gguf-py's own {want_type.name} encoding")
    c.check(not bad, f"{kind}: {len(ref)} tensors' types, shapes and values (max |dequantised - fp32| {worst:.2e})"
            + (": " + "; ".join(bad) if bad else ""))


def load_llama(path):
    from llama_cpp import Llama
    # f32 KV cache and no flash attention: the cache would otherwise round k and v to f16.
    return Llama(model_path=path, n_ctx=128, n_batch=128, n_ubatch=128, n_threads=2, logits_all=True,
                 verbose=False, type_k=0, type_v=0, flash_attn=False, seed=0)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def greedy(llm, prompt):
    # llama.cpp's own greedy sampler (temp 0), stopping at eos as lmforge's generate does (eos kept)
    got = []
    for t in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        got.append(int(t))
        if t == llm.token_eos() or len(got) == GREEDY_TOKENS:
            break
    return got


def check_model(c, work, kind, expected_ids, expected_logits, samples):
    llm = load_llama(os.path.join(work, f"model.{kind}.gguf"))
    diffs, argmax_same, argmax_n = [], 0, 0
    for i, ids in enumerate(expected_ids["logits"]):
        got = llama_logits(llm, ids)
        want = expected_logits[f"logits_{i}"]
        diffs.append(float(np.abs(got - want).max()))
        argmax_same += int((got.argmax(-1) == want.argmax(-1)).sum())
        argmax_n += len(ids)
    d = max(diffs)
    c.check(d <= TOLERANCE[kind], f"{kind}: llama.cpp logits vs lmforge on {argmax_n} positions (bn, en): max abs diff "
            f"{d:.2e} (tolerance {TOLERANCE[kind]:g}), argmax equal at {argmax_same}/{argmax_n}")
    if kind == "q8_0":
        return d
    for s in samples:
        got = greedy(llm, s["ids"])
        c.check(got == s["tokens"], f"{kind}: greedy llama.cpp == lmeval sample ({s['name']}, {len(s['tokens'])} tokens)"
                + ("" if got == s["tokens"] else f": {got} vs {s['tokens']}"))
    return d


def check_negative(c, work, expected_ids, expected_logits, samples):
    llm = load_llama(os.path.join(work, "noperm.f32.gguf"))
    d = max(float(np.abs(llama_logits(llm, ids) - expected_logits[f"logits_{i}"]).max())
            for i, ids in enumerate(expected_ids["logits"]))
    differ = sum(greedy(llm, s["ids"]) != s["tokens"] for s in samples)
    c.check(d > NEGATIVE_MIN, f"negative control: f32 without the q/k permutation is {d:.2e} off (must exceed "
            f"{NEGATIVE_MIN}); its greedy continuation differs from lmeval sample's in {differ}/{len(samples)} prompts")


def bytes_as_unk(ids, is_byte, unk):
    # llama.cpp's Unigram tokenizer has no byte fallback: a character outside the vocabulary, which
    # lmforge's SentencePiece spells as <0xNN> pieces, becomes one <unk> (runs of them merge into one).
    out = []
    for t in ids:
        if is_byte(t):
            if not out or out[-1] != unk:
                out.append(unk)
        else:
            out.append(t)
    return out


def check_tokenizer(c, work, texts, expected_ids):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "tok/spm.model"))
    llm = load_llama(os.path.join(work, "model.f32.gguf"))
    start = [sp.bos_id()] if framing_bos(os.path.join(work, "tok")) else []
    same = same_unk = same_special = round_trip = with_bytes = 0
    first_bad = None
    for text, want in zip(texts["tokenize"], expected_ids["tokenize"]):
        got = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        got_default = llm.tokenize(text.encode("utf-8"), add_bos=True)  # add_special: the GGUF's add_bos_token
        same += got == want
        has_bytes = any(sp.is_byte(t) for t in want)
        with_bytes += has_bytes
        explained = got == want or (has_bytes and got == bytes_as_unk(want, sp.is_byte, sp.unk_id()))
        same_unk += explained
        same_special += got_default == start + got
        round_trip += llm.detokenize(want).decode("utf-8", errors="replace").strip() == text.strip()
        if not explained and first_bad is None:
            first_bad = f"{text[:60]!r}: llama.cpp {got[:20]} vs lmforge {want[:20]}"
    n = len(texts["tokenize"])
    c.check(same_unk == n, f"tokenizer: llama.cpp ids == lmforge ids on {same}/{n} texts (Bangla, English, parallel); "
            f"{same_unk}/{n} once lmforge's byte-fallback pieces read as <unk> ({with_bytes} texts have some)"
            + (f"; first difference {first_bad}" if first_bad else ""))
    c.check(same_special == n, f"tokenizer: add_special (llama.cpp's default) adds {'bos' if start else 'no bos'} "
            f"(the tokenizer's framing) and no eos: {same_special}/{n}")
    c.check(round_trip == n, f"tokenizer: llama.cpp detokenizes lmforge's ids back to the text: {round_trip}/{n}")


def stage_check(work, root):
    c = Checks()
    hf_dir = os.path.join(work, "hf")
    for kind in ("f32", "f16", "q8_0"):
        check_container(c, os.path.join(work, f"model.{kind}.gguf"), kind, hf_dir, os.path.join(work, "tok/spm.model"))
    texts = json.load(open(os.path.join(work, "texts.json"), encoding="utf-8"))
    expected_ids = json.load(open(os.path.join(work, "expected_ids.json")))
    expected_logits = read_safetensors(os.path.join(work, "expected_logits.safetensors"))
    samples = []
    for i in range(2):
        for mode in ("bos", "nobos"):
            s = json.load(open(os.path.join(work, f"sample_{mode}_{i}.json"), encoding="utf-8"))
            # lmeval sample's prompt: [bos] (the framing bos + text + eos of the tokenizer the check trains)
            # + lmforge's encode(prompt) (the prompts head the tokenize list)
            assert s["prompt"] == PROMPTS[i] == texts["tokenize"][i]
            assert s["prefix"] == ("bos" if mode == "bos" else "none"), s["prefix"]  # default: the framing's
            ids = ([1] if mode == "bos" else []) + expected_ids["tokenize"][i]
            assert len(ids) == s["prompt_tokens"], (ids, s["prompt_tokens"])
            samples.append({"name": f"{s['prompt']!r}, {mode}", "ids": ids, "tokens": s["tokens"]})
    for kind in ("f32", "f16", "q8_0"):
        isolated(c, f"{kind}: llama.cpp", lambda cc, kind=kind: check_model(cc, work, kind, expected_ids, expected_logits, samples))
    isolated(c, "negative control", lambda cc: check_negative(cc, work, expected_ids, expected_logits, samples))
    isolated(c, "tokenizer", lambda cc: check_tokenizer(cc, work, texts, expected_ids))
    print(f"{c.passed} passed, {c.failed} failed")
    return 0 if c.failed == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", choices=["texts", "check"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    if a.stage == "texts":
        stage_texts(a.work, a.root)
        return 0
    return stage_check(a.work, a.root)


if __name__ == "__main__":
    sys.exit(main())
