#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/.

Each input starts with the target's mode byte (see the comment at the top of each
tests/fuzz/fuzz_*.cpp), except fuzz_safetensors, whose input is the file itself. Seeds are small
valid files plus a few invalid ones next to each check; inputs the fuzzer found and kept
(scripts/fuzz.sh with KEEP=1) sit in the same folders under their SHA-1 names.
  python3 tests/fuzz/make_seeds.py
"""
import gzip
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def shard(tokens, offsets, vocab, width=2, tok_hash=b"0123456789abcdef"):
    """The layout of docs/data.md, "Token shard format"."""
    payload = b"".join(struct.pack("<H" if width == 2 else "<I", t) for t in tokens)
    body = payload + b"\0" * (-(128 + len(payload)) % 8)
    index = b"".join(struct.pack("<Q", o) for o in offsets)
    h = bytearray(128)
    h[0:8] = b"LMTOKSH\0"
    struct.pack_into("<IIIIQQII", h, 8, 1, width, vocab, 128, len(tokens), len(offsets) - 1,
                     zlib.crc32(payload), zlib.crc32(index))
    h[48:48 + len(tok_hash)] = tok_hash
    struct.pack_into("<I", h, 124, zlib.crc32(bytes(h[:124])))
    return bytes(h) + body + index


def shards():
    good = shard([1, 2, 3, 0, 4, 5, 0], [0, 4, 7], vocab=8)
    for mode in (0, 1, 2):
        put("fuzz_shard", f"two-docs-w2-m{mode}", bytes([mode]) + good)
    put("fuzz_shard", "w4", b"\0" + shard([70000, 1, 0], [0, 3], vocab=70001, width=4))
    put("fuzz_shard", "empty", b"\0" + shard([], [0], vocab=1))
    # An empty read of a 4-byte shard: copy(0, 0, nullptr) once called memcpy(nullptr, ..., 0)
    # (UBSan: "null pointer passed as argument 1"), found by the fuzzer (issue 38).
    put("fuzz_shard", "empty-w4", b"\0" + shard([], [0], vocab=1, width=4))
    put("fuzz_shard", "odd-payload", b"\1" + shard([1, 2, 3], [0, 1, 3], vocab=4))
    put("fuzz_shard", "truncated", b"\0" + good[:-5])
    put("fuzz_shard", "bad-magic", b"\0" + b"LMTOKSX\0" + good[8:])
    put("fuzz_shard", "id-too-big", b"\0" + shard([9], [0, 1], vocab=8))
    put("fuzz_shard", "short", b"\0LMTOKSH\0\1\0")


def configs():
    run = {"model": {"preset": "custom", "vocab_size": 512, "d_model": 64, "n_layers": 2,
                     "n_heads": 4, "n_kv_heads": 2, "d_ff": 192, "max_seq_len": 128,
                     "rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": True,
                     "init_std": 0.02, "attention": "fused"},
           "train": {"steps": 60, "seed": 7,
                     "batch": {"micro_batch": 4, "seq_len": 64, "batch_tokens": 512},
                     "optimizer": {"lr": 3e-3}, "schedule": {"kind": "wsd", "warmup_steps": 10},
                     "logging": {"interval": 1}, "checkpoint": {"interval": 7, "keep_last": 2},
                     "eval": {"interval": 0}, "hardware": {"dtype": "bf16", "threads": 1}}}
    put("fuzz_config", "run", b"\0" + json.dumps(run).encode())
    put("fuzz_config", "run-tokens", b"\0" + b'{"train": {"tokens": 2e6, "batch": {"grad_accum": 3}}}')
    # A flat config from before the sections: refused with where each key moved.
    put("fuzz_config", "run-flat", b"\0" + b'{"train": {"lr": 1e-3, "schedule": "wsd", "micro_batch": 2}}')
    put("fuzz_config", "run-unknown-key", b"\0" + b'{"train": {"stepz": 1}}')
    put("fuzz_config", "run-wrong-type", b"\0" + b'{"model": {"d_model": "64"}}')
    corpus = {"sources": [
        {"paths": ["a.txt"], "format": "lines", "lang": "bn", "weight": 2.0},
        {"paths": ["*.jsonl"], "format": "jsonl", "text_field": "text", "lang": "en"}]}
    put("fuzz_config", "corpus", b"\1" + json.dumps(corpus).encode())
    put("fuzz_config", "corpus-no-lang", b"\1" + b'{"sources": [{"paths": ["x"]}]}')
    manifest = {"format": "lmforge.shards", "version": 1,
                "tokenizer": {"hash": "0123456789abcdef", "vocab_size": 512, "eos_id": 2,
                              "bos_id": 1, "dir": "tok"},
                "weights": {"bn": 0.6, "en": 0.4},
                "shards": [{"path": "bn.train.0000.lmtok", "lang": "bn", "split": "train",
                            "tokens": 1000, "docs": 10}],
                "languages": {"bn": {"docs": 10, "chars": 5000, "bytes": 12000,
                                     "train_tokens": 1000, "val_tokens": 100, "train_docs": 9,
                                     "val_docs": 1, "weight": 4.0, "token_share": 0.6,
                                     "natural_share": 0.5}},
                "prepare": {"threads": 2}}
    put("fuzz_config", "manifest", b"\2" + json.dumps(manifest).encode())
    # Version 2 (issue 21): the framing is required, sources are per-source reports.
    v2 = dict(manifest, version=2, framing={"bos": True, "eos": True},
              shards=[dict(manifest["shards"][0], source="news")],
              sources=[{"id": "news", "lang": "bn", "weight": 4.0, "docs": 10, "chars": 5000,
                        "train_tokens": 1000, "val_tokens": 100, "share": 1.0, "natural_share": 1.0}])
    put("fuzz_config", "manifest-v2", b"\2" + json.dumps(v2).encode())
    put("fuzz_config", "manifest-v2-no-framing", b"\2" + json.dumps(dict(v2, framing=None)).encode())
    put("fuzz_config", "not-json", b"\0{\"model\": ")


def corpora():
    text = "প্রথম লাইন\nsecond line\n\n  \nতৃতীয়\r\nlast without newline".encode()
    put("fuzz_corpus", "lines", b"\0" + text)
    put("fuzz_corpus", "paragraphs", b"\1" + text)
    put("fuzz_corpus", "lines-gz-dedup", bytes([4 | 16]) + text + b"\nsecond line\n")
    jl = b'{"text": "ami \\u09ac\\u09be"}\n\n{"text": "e\\u0301"}\n{"body": "x"}\n'
    put("fuzz_corpus", "jsonl", b"\2" + jl)
    put("fuzz_corpus", "jsonl-body", b"\3" + jl)
    put("fuzz_corpus", "jsonl-gz", bytes([2 | 4]) + jl)
    put("fuzz_corpus", "invalid-utf8", b"\0ok\n\xc3\x28 bad\n\xed\xa0\x80\n")
    put("fuzz_corpus", "invalid-utf8-skip", bytes([8]) + b"ok\n\xc3\x28 bad\n\xf4\x90\x80\x80\n")
    put("fuzz_corpus", "raw-gzip", b"\0" + gzip.compress(b"inside a gzip file\nline 2\n"))
    put("fuzz_corpus", "truncated-gzip", b"\0" + gzip.compress(b"x" * 200 + b"\n")[:20])


def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensor_seeds():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put("fuzz_safetensors", "f32", safetensors({"w": ("F32", [2, 3], f32)}, {"format": "pt"}))
    put("fuzz_safetensors", "mixed", safetensors({
        "a.bf16": ("BF16", [2], b"\x80\x3f\x00\x40"), "b.i64": ("I64", [1], struct.pack("<q", -5)),
        "c.empty": ("F32", [0, 4], b""), "d.scalar": ("F16", [], b"\x00\x3c"),
        "e.i32": ("I32", [1, 1], struct.pack("<i", 7))}))
    put("fuzz_safetensors", "empty", safetensors({}))
    put("fuzz_safetensors", "hole", struct.pack("<Q", 60) +
        b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}    ' + b"\0" * 8)
    put("fuzz_safetensors", "bad-dtype", safetensors({"w": ("Q7", [1], b"\0")}))
    put("fuzz_safetensors", "short", b"\x10\0\0")


if __name__ == "__main__":
    shards()
    configs()
    corpora()
    safetensor_seeds()
