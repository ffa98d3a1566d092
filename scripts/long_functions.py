#!/usr/bin/env python3
"""Lists the product's functions longer than a limit (default 80 lines), longest first.

A function is a definition that starts at column 0 or inside a class body, ends its signature with
"{" and closes with the "}" at the same indentation (the layout every file here uses). Lambdas and
local classes count toward the function that holds them. Tests, benchmarks and fuzzers are not the
product and are left out unless named. Exit status 1 when a function is over the limit and not in
ALLOWED (the reasons are there), so CI can run it.

  scripts/long_functions.py            # core corpus tokenizer data model train eval report runtime app
  scripts/long_functions.py --limit 60 tests
"""
import argparse
import os
import re
import sys

PRODUCT = ["core", "corpus", "tokenizer", "data", "model", "train", "eval", "report", "runtime", "app"]
# file:function -> why it stays longer than the limit.
ALLOWED = {
}

NOT_FUNCTION = re.compile(r"^\s*(namespace|class|struct|enum|union|extern|template\s*<[^>]*>\s*(class|struct))\b")
HEAD = re.compile(r"^(\s*)(?!if\b|for\b|while\b|switch\b|else\b|do\b|return\b|case\b)[A-Za-z_~].*\)\s*(const)?\s*"
                  r"(noexcept)?\s*(override)?\s*(->\s*[\w:<>, ]+)?\s*(:\s*.*)?\{\s*$")


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = HEAD.match(line)
        if m and not NOT_FUNCTION.match(line) and len(m.group(1)) <= 2:
            indent = m.group(1)
            # the signature may start on earlier lines: walk back over continuation lines
            start = i
            while start > 0 and lines[start - 1].startswith(indent + " ") is False and \
                    re.search(r"[,(]\s*$", lines[start - 1]):
                start -= 1
            end = i + 1
            while end < len(lines) and not re.match(r"^" + indent + r"\}", lines[end]):
                end += 1
            name = re.search(r"([\w:~]+)\s*\(", lines[start])
            out.append((end - start + 1, name.group(1) if name else "?", start + 1))
            i = end + 1
            continue
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", default=PRODUCT)
    ap.add_argument("--limit", type=int, default=80)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for folder in a.folders:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if f.endswith((".cpp", ".h", ".cu")):
                    p = os.path.join(dirpath, f)
                    rel = os.path.relpath(p, root)
                    rows += [(n, rel, name, line) for n, name, line in functions(p) if n > a.limit]
    bad = 0
    for n, rel, name, line in sorted(rows, reverse=True):
        why = ALLOWED.get(f"{rel}:{name}")
        bad += why is None
        print(f"{n:4d} lines  {rel}:{line}  {name}" + (f"  (allowed: {why})" if why else ""))
    print(f"{len(rows)} function(s) over {a.limit} lines, {bad} not allowed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
