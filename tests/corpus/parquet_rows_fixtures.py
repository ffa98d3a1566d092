#!/usr/bin/env python3
"""Parquet files for corpus/parquet_rows.h's tests (tests/corpus/parquet_test.cpp), written with
pyarrow, and what `datasets` would hand Python for each row (pyarrow's to_pylist, one JSON line per
row) as the expected values:

  OUT/types.parquet + OUT/types.jsonl: every supported type, nested (list<struct<..., list>>,
    struct<list, list>), nulls at every level, integer extremes, a float32 (widened exactly),
    dictionary-encoded strings, in row groups of 2 rows;
  OUT/binary.parquet: a bytes column 'blob' (refused, naming the column and 'binary');
  OUT/nested_binary.parquet: bytes inside a struct's list, 'meta.raw[]' (refused);
  OUT/timestamp.parquet: a timestamp column 'when' (refused: no JSON value; Parquet stores seconds as ms).
Exit 0 written, 77 without pyarrow.
"""
import json
import os
import sys


def types_table(pa):
    n = 5
    cols = {
        "nothing": pa.array([None] * n, pa.null()),
        "flag": pa.array([True, False, None, True, False]),
        "i8": pa.array([-128, 127, 0, None, 1], pa.int8()),
        "i16": pa.array([-32768, 32767, 0, 1, None], pa.int16()),
        "i32": pa.array([-2**31, 2**31 - 1, 0, 1, 2], pa.int32()),
        "i64": pa.array([-2**63, 2**63 - 1, 0, -1, None], pa.int64()),
        "u8": pa.array([0, 255, 1, 2, 3], pa.uint8()),
        "u16": pa.array([0, 65535, None, 2, 3], pa.uint16()),
        "u32": pa.array([0, 2**32 - 1, 1, 2, 3], pa.uint32()),
        "u64": pa.array([0, 2**64 - 1, 1, None, 3], pa.uint64()),
        "f32": pa.array([0.1, -1.5, None, 3.0e38, 0.0], pa.float32()),
        "f64": pa.array([0.1, 1e300, -0.0, 2.0, None], pa.float64()),
        "text": pa.array(["প্রশ্ন", "", None, "a\"b\\c\n", "1"], pa.string()),
        "big_text": pa.array(["x", None, "উত্তর", "", "0"], pa.large_string()),
        "options": pa.array([["ক", "খ"], [], None, ["a", None], ["0"]], pa.list_(pa.string())),
        "scores": pa.array([[1, 2], None, [], [-3], [0]], pa.large_list(pa.int64())),
        "pair": pa.array([[0.5, 1.0], [2.0, None], None, [0.0, -0.0], [1.0, 2.0]], pa.list_(pa.float64(), 2)),
        "choices": pa.array([{"text": ["x", "y"], "label": ["A", "B"]}, None, {"text": [], "label": None},
                             {"text": ["z"], "label": ["C"]}, {"text": None, "label": ["D"]}],
                            pa.struct([("text", pa.list_(pa.string())), ("label", pa.list_(pa.string()))])),
        "turns": pa.array([[{"k": 1, "w": ["a"]}, {"k": None, "w": []}], [], None, [None], [{"k": 2, "w": None}]],
                          pa.list_(pa.struct([("k", pa.int32()), ("w", pa.list_(pa.string()))]))),
        "category": pa.array(["STEM", "Other", "STEM", None, "Other"]).dictionary_encode(),
    }
    return pa.table(cols)


def main():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("no pyarrow: skipped")
        return 77
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t = types_table(pa)
    pq.write_table(t, os.path.join(out, "types.parquet"), row_group_size=2)
    with open(os.path.join(out, "types.jsonl"), "w", encoding="utf-8") as f:
        for row in t.to_pylist():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    pq.write_table(pa.table({"id": [1, 2], "blob": pa.array([b"\xff", b"a"], pa.binary())}),
                   os.path.join(out, "binary.parquet"))
    meta = pa.array([{"raw": [b"x"]}], pa.struct([("raw", pa.list_(pa.binary()))]))
    pq.write_table(pa.table({"meta": meta}), os.path.join(out, "nested_binary.parquet"))
    pq.write_table(pa.table({"when": pa.array([0], pa.timestamp("s"))}), os.path.join(out, "timestamp.parquet"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
