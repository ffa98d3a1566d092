"""lm-evaluation-harness task helpers for the local benchmark files that `lmeval mc` reads.

The harness's own task definitions load their data from the Hugging Face hub; these machines
have none. The YAMLs next to this file are the harness's task YAMLs with only the data source
replaced: `custom_dataset` reads the original files under $LM_BENCH_DIR (the `--data-dir` of
`lmeval mc`, formats in docs/eval.md) into the harness's field names, and every prompt function
is the harness's own, imported from the installed lm_eval package (not copied):

    lm_eval --model hf --model_args pretrained=hf/NAME,dtype=float32 \
            --include_path eval/harness --tasks lmforge_piqa,lmforge_copa ...   (LM_BENCH_DIR=...)

tests/eval/harness_check.py checks that the YAML fields equal the installed harness's and that
the harness's acc/acc_norm equal lmeval mc's item for item.
"""
import bz2
import glob
import json
import os
import re
import xml.etree.ElementTree as ET

import datasets

# The harness's own functions (lm_eval/tasks/...), re-exported for the YAMLs' !function tags.
from lm_eval.tasks.hellaswag.utils import preprocess as hellaswag_preprocess  # noqa: F401
from lm_eval.tasks.hellaswag.utils import process_docs as hellaswag_process_docs  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_choice as copa_doc_to_choice  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_target as copa_doc_to_target  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_text as copa_doc_to_text  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_choice as winogrande_doc_to_choice  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_target as winogrande_doc_to_target  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_text as winogrande_doc_to_text  # noqa: F401


def bench_dir():
    d = os.environ.get("LM_BENCH_DIR")
    if not d:
        raise RuntimeError("set LM_BENCH_DIR to the folder lmeval mc reads (--data-dir), e.g. ../shared/data/bench")
    return d


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _split(docs):
    return {"validation": datasets.Dataset.from_list(docs), "test": datasets.Dataset.from_list(docs)}


def hellaswag_split_export_line(line):
    """The text export's query line -> (activity_label, ctx_a, ctx_b); eval/tasks.h says why."""
    label, sep, ctx = line.partition(": ")
    if not sep:
        return "", line, ""
    ends = [m.end() for m in re.finditer(r"[.!?] ", ctx)]
    start = ends[-1] if ends else 0
    if 0 < start < len(ctx) and "a" <= ctx[start] <= "z":
        return label, ctx[: start - 1], ctx[start:]
    return label, ctx, ""


def load_hellaswag(**kwargs):
    d = os.path.join(bench_dir(), "hellaswag")
    orig = os.path.join(d, "hellaswag_val.jsonl")
    if os.path.exists(orig):
        return _split(_jsonl(orig))
    path = (sorted(glob.glob(os.path.join(d, "*.txt.bz2"))) + sorted(glob.glob(os.path.join(d, "*.txt"))))[0]
    raw = bz2.open(path, "rt", encoding="utf-8").read() if path.endswith(".bz2") else open(path, encoding="utf-8").read()
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    docs = []
    for i in range(0, len(lines), 6):
        a, b, c = hellaswag_split_export_line(lines[i])
        docs.append({"ind": i // 6, "activity_label": a, "ctx_a": b, "ctx_b": c, "ctx": b + " " + c,
                     "endings": lines[i + 2: i + 6], "label": lines[i + 1]})
    return _split(docs)


def load_piqa(**kwargs):
    d = os.path.join(bench_dir(), "piqa")
    labels = [int(x) for x in open(os.path.join(d, "valid-labels.lst")).read().split()]
    docs = _jsonl(os.path.join(d, "valid.jsonl"))
    return _split([{"goal": x["goal"], "sol1": x["sol1"], "sol2": x["sol2"], "label": y} for x, y in zip(docs, labels)])


def _ai2(path, stem_key):
    out = []
    for x in _jsonl(path):
        q = x["question"]
        out.append({"id": x["id"], stem_key: q["stem"], "answerKey": x["answerKey"],
                    "choices": {"text": [c["text"] for c in q["choices"]], "label": [c["label"] for c in q["choices"]]}})
    return out


def _arc(name):
    d = os.path.join(bench_dir(), name)
    stem = "ARC-Easy" if name == "arc_easy" else "ARC-Challenge"
    path = next(p for p in (os.path.join(d, stem + "-Test.jsonl"), os.path.join(d, stem + "-Dev.jsonl")) if os.path.exists(p))
    return _split(_ai2(path, "question"))


def load_arc_easy(**kwargs):
    return _arc("arc_easy")


def load_arc_challenge(**kwargs):
    return _arc("arc_challenge")


def load_openbookqa(**kwargs):
    return _split(_ai2(os.path.join(bench_dir(), "openbookqa", "test.jsonl"), "question_stem"))


def load_copa(**kwargs):
    d = os.path.join(bench_dir(), "copa")
    if os.path.exists(os.path.join(d, "val.jsonl")):
        return _split(_jsonl(os.path.join(d, "val.jsonl")))
    path = sorted(glob.glob(os.path.join(d, "*.xml")))[0]
    docs = []
    for item in ET.parse(path).getroot().iter("item"):
        i = int(item.get("id"))
        if 401 <= i <= 500:  # SuperGLUE COPA validation (docs/eval.md)
            docs.append({"idx": i, "premise": item.find("p").text.strip(), "choice1": item.find("a1").text.strip(),
                         "choice2": item.find("a2").text.strip(), "question": item.get("asks-for"),
                         "label": int(item.get("most-plausible-alternative")) - 1})
    return _split(docs)


def load_winogrande(**kwargs):
    return _split(_jsonl(os.path.join(bench_dir(), "winogrande", "dev.jsonl")))
