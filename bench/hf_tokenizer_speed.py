#!/usr/bin/env python3
"""One-thread encode speed of the checkpoints' own tokenizers: lmforge's C++ vs HF tokenizers (Rust).

For each vocabulary of tests/tokenizer/make_hf_vocabs.py (Llama 3, Qwen2: byte-level BPE from
tokenizer.json; Llama 2: tokenizer.model through SentencePiece), in the same run and on the same
lines: `lmtrain tokenizer --import` makes the folder, build/bench/tokenizer_bench encodes with one
thread (best of --repeats), and HF tokenizers' encode_batch runs with one thread
(TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1; best of --repeats). Both keep their word cache
between passes. Token counts must agree (the ids are compared in tests/tokenizer, ctest -L hf).

  bench/hf_tokenizer_speed.py [--build build] [--repeats 5] [--text bn=FILE --text en=FILE] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def hf_speed(tokenizer_json, lines, repeats):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    best, n = 1e30, 0
    for _ in range(repeats):
        t = time.perf_counter()
        enc = tok.encode_batch(lines, add_special_tokens=False)
        best = min(best, time.perf_counter() - t)
        n = sum(len(e.ids) for e in enc)
    return n / best, n


def ours(build, tok_dir, texts, repeats):
    cmd = [os.path.join(build, "bench", "tokenizer_bench"), "--tokenizer", tok_dir, "--threads", "1",
           "--repeats", str(repeats)]
    for t in texts:
        cmd += ["--text", t]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/lmforge/vocabs"))
    ap.add_argument("--vocabs", default="llama3,qwen2,llama2")
    ap.add_argument("--text", action="append", help="LANG=FILE, one document per line")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args()
    shared = os.path.join(root, "..", "shared", "data", "sample")
    texts = a.text or [f"bn={shared}/bn_2000.txt", f"en={shared}/en_2000.txt"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in a.vocabs.split(","):
            src = os.path.join(a.cache, v)
            if not os.path.exists(os.path.join(src, ".done")):
                print(f"hf_tokenizer_speed: {src} missing: run tests/tokenizer/make_hf_vocabs.py", file=sys.stderr)
                return 2
            tok_dir = os.path.join(tmp, v)
            subprocess.run([os.path.join(a.build, "app", "lmtrain"), "tokenizer", "--import", src, "--out", tok_dir,
                            "--quiet"], check=True)
            mine = ours(a.build, tok_dir, texts, a.repeats)
            for spec in texts:
                lang, path = spec.split("=", 1)
                with open(path, encoding="utf-8", newline="") as f:
                    lines = [l[:-1] if l.endswith("\n") else l for l in f]
                hf_tps, hf_n = hf_speed(os.path.join(src, "tokenizer.json"), lines, a.repeats)
                row = {"vocab": v, "lang": lang, "lines": len(lines), "tokens": hf_n,
                       "ours_tok_per_s": mine["tok_per_s"][lang], "hf_tok_per_s": hf_tps,
                       "ratio": mine["tok_per_s"][lang] / hf_tps, "type": mine["type"]}
                rows.append(row)
                print(f"{v:7s} {lang:3s} {len(lines):6d} lines {hf_n:9d} tokens  ours {row['ours_tok_per_s']/1e6:6.2f} M tok/s"
                      f"  HF tokenizers {hf_tps/1e6:6.2f} M tok/s  ratio {row['ratio']:.2f}x  (one thread)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
