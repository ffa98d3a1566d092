#!/usr/bin/env python3
"""HF tokenizers' ids for each line: hf_encode.py TOKENIZER_JSON IN_JSONL OUT_IDS.

IN_JSONL holds one JSON string per line (the text, so a line may hold line breaks); OUT_IDS gets one
line of space-separated ids per text, without the template's special tokens. The extension test
(tests/tokenizer/extend_test.cpp) compares them with lmforge's on the extended hf-tokenizer.json.
Exit 77 when the tokenizers package is missing (the test skips)."""
import json
import sys

try:
    from tokenizers import Tokenizer
except ImportError:
    sys.exit(77)

tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    texts = [json.loads(line) for line in f]
with open(sys.argv[3], "w") as out:
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.write(" ".join(map(str, enc.ids)) + "\n")
