#!/usr/bin/env python3
"""The Bangla task fixtures of bangla_harness_check.py, written twice from the same rows: as JSONL
(OUT/jsonl/<task>/<split>.jsonl, the layout `lmeval mc --data-dir` has read so far) and as Parquet
the way the Hugging Face hub ships a split (OUT/parquet/<task>/...), for tests/eval/tasks_bn_test.cpp
and run_test.cpp (issue 41 item 1: items and log-likelihoods equal from either).

The Parquet copies vary what the reader must handle: row groups of 3 rows; <split>.parquet for most
tasks, two hub shards for arc_bn's test (test-00000-of-00002.parquet, ...), three with the hash
suffix of older uploads for global_mmlu_bn's dev, and boolqa_bn's validation as the hub's automatic
conversion writes it (validation/0000.parquet, validation/0001.parquet); piqa_bn's label as int8, hellaswag_bn's endings
as large_list<large_string>, belebele's question_number as uint16 (integers of every width must
come out as the same integers as from JSON).

OUT/bad/<case>/<task>/... hold inputs that must be refused with a clear error:
  label_string: piqa_bn labels stored as strings "0"/"1" (the harness reads no index from them);
  goal_binary: piqa_bn's goal as bytes, not text.

bangla_mmlu's answer is a letter in some rows and an index in others in the harness check's
fixtures; a Parquet column has one type, so here every answer is its index (an int64 column).
Exit 0 written, 77 without pyarrow.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bangla_harness_check as bhc  # noqa: E402


def uniform(task, docs):
    if task == "bangla_mmlu":
        return [dict(d, answer="ABCD".index(d["answer"]) if isinstance(d["answer"], str) else d["answer"])
                for d in docs]
    return docs


def table(pa, task, docs):
    t = pa.Table.from_pylist(docs)
    casts = {"piqa_bn": ("label", pa.int8()), "hellaswag_bn": ("endings", pa.large_list(pa.large_string())),
             "belebele_ben_Beng": ("question_number", pa.uint16())}
    if task in casts:
        name, typ = casts[task]
        t = t.set_column(t.schema.get_field_index(name), name, t.column(name).cast(typ))
    return t


def write_parquet(pq, t, folder, split, shards, suffix=""):
    if shards == 1:
        pq.write_table(t, os.path.join(folder, split + ".parquet"), row_group_size=3)
        return
    if suffix == "/":  # the hub's automatic conversion: <split>/0000.parquet, <split>/0001.parquet
        os.makedirs(os.path.join(folder, split), exist_ok=True)
        step = (t.num_rows + shards - 1) // shards
        for i in range(shards):
            pq.write_table(t.slice(i * step, step), os.path.join(folder, split, f"{i:04d}.parquet"), row_group_size=3)
        return
    step = (t.num_rows + shards - 1) // shards
    for i in range(shards):
        name = f"{split}-{i:05d}-of-{shards:05d}{suffix}.parquet"
        pq.write_table(t.slice(i * step, step), os.path.join(folder, name), row_group_size=3)


def write_bad(pa, pq, out, docs):
    rows = [dict(d, label=str(d["label"])) for d in docs]
    for case, t in (("label_string", pa.Table.from_pylist(rows)),
                    ("goal_binary", pa.Table.from_pylist([dict(d, goal=d["goal"].encode()) for d in docs]))):
        folder = os.path.join(out, "bad", case, "piqa_bn")
        os.makedirs(folder, exist_ok=True)
        pq.write_table(t, os.path.join(folder, "validation.parquet"))


def main():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("no pyarrow: skipped")
        return 77
    out = sys.argv[1]
    n_test = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    w = bhc.Words(41)
    for task, (test, fewshot) in bhc.SPLITS.items():
        for split in [s for s in (test, fewshot) if s]:
            n = n_test if split == test else (36 if task == "global_mmlu_bn" else 6)
            docs = uniform(task, bhc.make_docs(task, w, n, split))
            folder = os.path.join(out, "jsonl", task)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, split + ".jsonl"), "w", encoding="utf-8") as f:
                for d in docs:
                    f.write(json.dumps(d, ensure_ascii=False) + "\n")
            folder = os.path.join(out, "parquet", task)
            os.makedirs(folder, exist_ok=True)
            shards = {("arc_bn", "test"): (2, ""), ("global_mmlu_bn", "dev"): (3, "-5a8f4c6e2bd3b6d0"),
                      ("boolqa_bn", "validation"): (2, "/")}
            write_parquet(pq, table(pa, task, docs), folder, split, *shards.get((task, split), (1, "")))
            if task == "piqa_bn" and split == test:
                write_bad(pa, pq, out, docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
