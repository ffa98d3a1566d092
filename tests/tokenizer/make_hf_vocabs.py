#!/usr/bin/env python3
"""Real vocabularies for the foreign-tokenizer tests, and HF tokenizers' ids as the oracle.

llama.cpp ships the vocabularies of Llama 3 (llama-bpe), Qwen2 and Llama 2 (llama-spm) as GGUF
files, with reference tokenizations (.inp/.out), in llama-cpp-python's source package. This script
(idempotent; a finished vocabulary is not redone):
  1. gets that package with pip (pip download, no build) unless --sdist names it, and extracts
     the three vocabularies into CACHE/src/;
  2. turns each into an HF tokenizer folder with transformers (AutoTokenizer.from_pretrained(dir,
     gguf_file=...).save_pretrained): CACHE/<name>/tokenizer.json, tokenizer_config.json, and for
     Llama 2 also tokenizer.model (the SentencePiece ModelProto written from the GGUF's pieces,
     scores and types with Llama 2's own trainer/normalizer settings), plus a config.json with the
     checkpoint's vocab_size, bos/eos ids;
  3. writes the oracle: for every text FILE given with --text NAME=FILE (one text per line, or
     .jsonl with --field), CACHE/<name>/expected/<NAME>.ids holds one line per text with the ids of
     HF tokenizers (tokenizers.Tokenizer.from_file(tokenizer.json).encode(text,
     add_special_tokens=False)).

Usage: make_hf_vocabs.py [--cache DIR] [--sdist FILE] [--text NAME=FILE[:FIELD]]...
Needs transformers, tokenizers and gguf (the project venv); exits 2 with a message without them.
"""
import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

VOCABS = {"llama-bpe": "llama3", "qwen2": "qwen2", "llama-spm": "llama2"}
LCP = "llama-cpp-python==0.3.36"


def sdist_path(cache, given):
    if given:
        return given
    d = os.path.join(cache, "src")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("llama_cpp_python-") and f.endswith(".tar.gz"):
            return os.path.join(d, f)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", LCP,
                    "-d", d], check=True)
    return sdist_path(cache, None)


def extract(cache, sdist):
    out = os.path.join(cache, "src")
    want = [f"ggml-vocab-{v}.gguf{ext}" for v in VOCABS for ext in ("", ".inp", ".out")]
    if all(os.path.exists(os.path.join(out, w)) for w in want):
        return out
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            base = os.path.basename(m.name)
            if base in want and "/vendor/llama.cpp/models/" in m.name:
                data = tf.extractfile(m).read()
                tmp = os.path.join(out, base + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(out, base))
    return out


# --- a minimal protobuf writer for SentencePiece's ModelProto (sentencepiece_model.proto) ---
def varint(n):
    n &= (1 << 64) - 1
    b = bytearray()
    while True:
        x = n & 0x7F
        n >>= 7
        b.append(x | (0x80 if n else 0))
        if not n:
            return bytes(b)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    return key + varint(len(payload)) + payload


def sentencepiece_model(tokens, scores, types):
    """Llama 2's tokenizer.model settings: BPE, byte fallback, identity normalizer, dummy prefix."""
    out = bytearray()
    for t, s, ty in zip(tokens, scores, types):
        out += field(1, 2, field(1, 2, t.encode("utf-8")) + field(2, 5, float(s)) + field(3, 0, int(ty)))
    trainer = (field(3, 0, 2) + field(4, 0, len(tokens)) + field(25, 0, 1) + field(35, 0, 1) + field(40, 0, 0)
               + field(41, 0, 1) + field(42, 0, 2) + field(43, 0, -1))
    normalizer = field(1, 2, b"identity") + field(3, 0, 1) + field(4, 0, 0) + field(5, 0, 1)
    out += field(2, 2, trainer) + field(3, 2, normalizer)
    return bytes(out)


def write_spm_model(gguf_file, dest):
    from gguf import GGUFReader
    r = GGUFReader(gguf_file)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    with open(dest + ".tmp", "wb") as fh:
        fh.write(sentencepiece_model(tokens, scores, types))
    os.replace(dest + ".tmp", dest)


def hub_form(folder, name):
    """The GGUF conversion differs from the checkpoints' own tokenizer.json; make it the hub's form.

    Llama 3 (meta-llama/Llama-3.2-1B): merges as "a b" strings (the conversion writes [a, b] pairs,
    which Qwen2 keeps, so both forms are tested), ignore_merges, the BOS template, and no extra
    <|endoftext|> at id 128256 (the conversion adds it; the checkpoint's vocabulary is 128,256).
    Qwen2 (Qwen/Qwen2-0.5B): the NFC normalizer.
    Llama 2 (meta-llama/Llama-2-7b-hf): the legacy normalizer (Prepend and Replace "\u2581", no
    pre-tokenizer), which gives tokenizer.model's ids; transformers 5 writes a Metaspace pre-tokenizer
    that differs on text starting with a space.
    """
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    if name == "llama3":
        m = j["model"]
        m["merges"] = [a + " " + b if isinstance(a, str) else a for a, b in m["merges"]]
        m["ignore_merges"] = True
        j["added_tokens"] = [t for t in j["added_tokens"] if t["id"] < 128256]
        bos = "<|begin_of_text|>"
        j["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}}}]}
    elif name == "qwen2":
        j["normalizer"] = {"type": "NFC"}
    elif name == "llama2":  # the hub's legacy form, as meta-llama/Llama-2-7b-hf ships it (= tokenizer.model)
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        j["pre_tokenizer"] = None
    else:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)


def make_vocab(src, cache, gguf_name, name):
    dest = os.path.join(cache, name)
    if os.path.exists(os.path.join(dest, ".done")):
        return dest
    from transformers import AutoTokenizer
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        gguf_file = f"ggml-vocab-{gguf_name}.gguf"
        tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
        tok.save_pretrained(tmp)
        for ext in (".inp", ".out"):
            shutil.copy(os.path.join(src, gguf_file + ext), os.path.join(tmp, "reference" + ext))
        hub_form(tmp, name)
        if name == "llama2":
            write_spm_model(os.path.join(src, gguf_file), os.path.join(tmp, "tokenizer.model"))
        vocab_size = {"llama3": 128256, "qwen2": 151936, "llama2": 32000}[name]
        config = {"vocab_size": vocab_size, "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
                  "source": f"{LCP} vendor/llama.cpp/models/{gguf_file}"}
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        open(os.path.join(tmp, ".done"), "w").close()
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(tmp, dest)
        os.makedirs(tmp)  # TemporaryDirectory removes it again
    return dest


GPT4O = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
         "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def make_gpt4o_variant(cache, llama3):
    """Llama 3's vocabulary with GPT-4o's (o200k) Split pattern, which keeps \\p{M} inside words:
    the pattern the vocabulary extension uses, checked against HF like the real ones."""
    dest = os.path.join(cache, "llama3-gpt4o")
    if os.path.exists(os.path.join(dest, ".done")):
        return dest
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(llama3, tmp, ignore=shutil.ignore_patterns("expected", ".done", "reference.*"))
    path = os.path.join(tmp, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = GPT4O
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    open(os.path.join(tmp, ".done"), "w").close()
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return dest


def read_texts(spec):
    name, rest = spec.split("=", 1)
    path, _, fld = rest.partition(":")
    opener = gzip.open if path.endswith(".gz") else open
    texts = []
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        for line in f:
            line = line[:-1] if line.endswith("\n") else line
            if fld:
                texts.append(json.loads(line)[fld])
            else:
                texts.append(line)
    return name, texts


def write_expected(dest, specs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(dest, "tokenizer.json"))
    os.makedirs(os.path.join(dest, "expected"), exist_ok=True)
    for spec in specs:
        name, texts = read_texts(spec)
        out = os.path.join(dest, "expected", name + ".ids")
        # The texts themselves too, one JSON string a line: the C++ test reads exactly these.
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            for text, enc in zip(texts, tok.encode_batch(texts, add_special_tokens=False)):
                f.write(json.dumps(text, ensure_ascii=False) + "\t" + " ".join(map(str, enc.ids)) + "\n")
        os.replace(out + ".tmp", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/lmforge/vocabs"))
    ap.add_argument("--sdist", help="llama-cpp-python source package (default: pip download it)")
    ap.add_argument("--text", action="append", default=[], help="NAME=FILE[:JSONL_FIELD], texts to write ids for")
    a = ap.parse_args()
    try:
        import gguf, tokenizers, transformers  # noqa: F401
    except ImportError as e:
        print(f"make_hf_vocabs: {e}; install the project venv (scripts/setup.sh)", file=sys.stderr)
        return 2
    os.makedirs(a.cache, exist_ok=True)
    src = extract(a.cache, sdist_path(a.cache, a.sdist))
    for gguf_name, name in VOCABS.items():
        dest = make_vocab(src, a.cache, gguf_name, name)
        write_expected(dest, a.text)
        print(f"make_hf_vocabs: {dest}")
        if name == "llama3":
            variant = make_gpt4o_variant(a.cache, dest)
            write_expected(variant, a.text)
            print(f"make_hf_vocabs: {variant}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
