#!/usr/bin/env python3
"""Writes domain texts the training corpus lacks, for `lmtrain tokenizer --eval-text` (issue 31.4).

  bench/tokenizer_eval_texts.py ../shared/data OUT_DIR

OUT_DIR/bn_science.txt, en_science.txt: BEnQA school-exam science and maths questions, the Bangla
and English side of the same rows (question and its four options on one line; rows with LaTeX
kept, they are part of the domain). Technical text is the closest to UI/technical Bangla in the
shared data; the informal web comments are read directly from bn/bn_social_sentiment.txt.gz.

OUT_DIR/bn_pardev.txt, en_pardev.txt: the parallel dev splits (SUPara-benchmark dev, SIPC dev and
devtest; 2,321 pairs), one sentence per line: news-like text held out from training and apart from
the test splits the report's --parallel measures, so a recipe choice can be checked off the test.
"""
import csv
import glob
import gzip
import json
import os
import sys
import unicodedata

DEV_SPLITS = {("SUPara-benchmark", "dev"), ("SIPC", "dev"), ("SIPC", "devtest")}


def write_parallel_dev(data, out):
    path = os.path.join(data, "parallel", "bn_en_parallel.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        pairs = [p for p in map(json.loads, f) if (p["corpus"], p["split"]) in DEV_SPLITS]
    for lang in ("bn", "en"):
        with open(os.path.join(out, f"{lang}_pardev.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(p[lang] for p in pairs) + "\n")
    print(f"{out}/bn_pardev.txt, en_pardev.txt: {len(pairs)} parallel dev pairs")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data, out = sys.argv[1], sys.argv[2]
    files = sorted(glob.glob(os.path.join(data, "bench", "benqa", "*.csv")))
    if not files:
        sys.exit(f"{data}/bench/benqa/*.csv: no file (is {data} the shared data folder?)")
    os.makedirs(out, exist_ok=True)
    rows = {"bn": [], "en": []}
    for path in files:
        with open(path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                bn = " ".join([r["Bengali Question"]] + [r[k + " Bn"] for k in "ABCD"])
                en = " ".join([r["English Question"]] + [r[k] for k in "ABCD"])
                for lang, text in (("bn", bn), ("en", en)):
                    text = unicodedata.normalize("NFC", " ".join(text.split()))  # BEnQA is not NFC
                    if text:
                        rows[lang].append(text)
    for lang, lines in rows.items():
        with open(os.path.join(out, f"{lang}_science.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{out}/{lang}_science.txt: {len(lines)} lines, {sum(map(len, lines))} characters")
    write_parallel_dev(data, out)


if __name__ == "__main__":
    main()
