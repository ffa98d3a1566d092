#!/bin/sh
# Regenerates data/sample/ (the bundled demo corpus, licensed for redistribution) from the
# shared data folder beside the repository (../shared/data; override with SHARED=...).
# Only redistributable sources: bn_news_punct (CC-BY-4.0), bn_wikisource_cltk (CC-BY-SA-3.0),
# bn_literature_bnarchive (public domain / CC0), en_wikipedia (CC-BY-SA-3.0). Deterministic:
# fixed slices, gzip -n (no timestamps). See data/sample/SOURCES.md.
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${SHARED:-$ROOT/../shared/data}"
OUT="$ROOT/data/sample"
mkdir -p "$OUT"
cd "$SHARED"
python3 - "$OUT" <<'PY'
import gzip, json, sys
out = sys.argv[1]

def lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]

def write(name, rows):
    data = ("\n".join(rows) + "\n").encode("utf-8")
    with open(f"{out}/{name}", "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as g:
            g.write(data)
    print(f"{name}: {len(rows)} docs, {len(data)/1e6:.2f} MB")

def take(rows, budget, size=lambda r: len(r.encode("utf-8"))):
    kept, n = [], 0
    for r in rows:
        if n >= budget:
            break
        kept.append(r); n += size(r)
    return kept

# Bangla news (one ~1500-char chunk per line): the first 1.45 MB for training, the last 40 lines
# held out for the fertility report and tests.
news = lines("bn/bn_news_punct.txt.gz")
write("bn_news.txt.gz", take(news, 1_450_000))
write("bn_heldout.txt.gz", news[-40:])
# Classic literature from Wikisource, all of it (76 KB).
write("bn_wikisource.txt.gz", lines("bn/bn_wikisource_cltk.txt.gz"))
# Public-domain literature: whole chapters (many longer than SentencePiece's default 4192-byte
# sentence limit), first 1.0 MB.
lit = lines("bn/bn_literature_bnarchive.jsonl.gz")
write("bn_literature.jsonl.gz",
      take(lit, 1_000_000, lambda r: len(json.loads(r)["text"].encode("utf-8"))))
# English Wikipedia articles: first 1.0 MB of text; 60 paragraphs of later articles held out.
wiki = lines("en/en_wikipedia.jsonl.gz")
train = take(wiki, 1_000_000, lambda r: len(json.loads(r)["text"].encode("utf-8")))
write("en_wikipedia.jsonl.gz", train)
held = []
for r in wiki[len(train) + 100:]:
    held += [p for p in json.loads(r)["text"].split("\n") if len(p) >= 80]
    if len(held) >= 60:
        break
write("en_heldout.txt.gz", held[:60])
PY
du -sh "$OUT"
