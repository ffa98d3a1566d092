#!/usr/bin/env python3
"""The Bangla tasks of lm-evaluation-harness 0.4.13, scored by lm-eval's own YAML and by `lmeval mc`
on the same local fixture items: per item the log-likelihoods agree (1e-4 nats + 1e-6 of the
value) and so do the predictions (issue 41; docs/eval.md "Bangla").

  1. fixture items in each task's schema (the fields its YAML reads; Bangla text of the bundled
     sample, with the awkward cases: Unicode whitespace around fields, "[title]" and bracket spans in
     HellaSwag, an empty fifth ARC option, letter / int / digit-string targets) are written to
     WORK/bench/<task>/<split>.jsonl, the layout `lmeval mc --data-dir` reads (docs/benchmarks.md);
  2. a tiny random Llama-3.2-shaped HF checkpoint with Llama 3's real vocabulary (tiny_hf.py);
  3. the harness: for every task a YAML that only `include`s the INSTALLED task YAML and points
     dataset_path at the local JSONL (nothing else of the task is restated), the `hf` model, fp32;
  4. `lmeval mc --run HF_DIR` (the same folder) with --log-samples; 0-shot for every task and
     --num-fewshot k (MMLU-style and belebele 5, others 2-3), with the harness's samplers: first_n,
     and its default Random(1234).sample (global_mmlu_bn per category, arc_bn, hellaswag_bn).

A family = one ctest (--family). global_mmlu_bn is the union of the harness's six category
subtasks (its group, weighted by size). `--break swap` swaps piqa_bn's solutions in the harness's
copy of the data only (must go red). `--parquet`: lmeval mc reads <split>.parquet (the rows as the
hub ships them) while the harness reads the JSONL of the same rows (issue 41 item 1). Exit 0 equal, 1 different, 77 skipped (no lm_eval /
transformers or no vocabulary).
"""
import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_hf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# family -> [(task, installed YAML(s) relative to lm_eval/tasks, {split: fixture docs}, few-shot k)]
FAMILIES = {
    "titulm": ["bangla_mmlu", "piqa_bn", "boolqa_bn", "openbookqa_bn", "bangla_commonsenseqa"],
    "belebele": ["belebele_ben_Beng"],
    "global_mmlu": ["global_mmlu_bn"],
    "okapi": ["arc_bn", "hellaswag_bn", "m_mmlu_bn"],
}
YAML = {
    "bangla_mmlu": ["bangla/bangla_mmlu.yaml"], "piqa_bn": ["bangla/bangla_piqa.yaml"],
    "boolqa_bn": ["bangla/bangla_boolqa.yaml"], "openbookqa_bn": ["bangla/bangla_openbookqa.yaml"],
    "bangla_commonsenseqa": ["bangla/bangla_commonsenseqa.yaml"],
    "belebele_ben_Beng": ["belebele/belebele_ben_Beng.yaml"],
    "global_mmlu_bn": [f"global_mmlu/default/bn/global_mmlu_bn_{c}.yaml"
                       for c in ("business", "humanities", "medical", "other", "stem", "social_sciences")],
    "arc_bn": ["okapi/arc_multilingual/arc_bn.yaml"], "hellaswag_bn": ["okapi/hellaswag_multilingual/hellaswag_bn.yaml"],
    "m_mmlu_bn": ["okapi/mmlu_multilingual/m_mmlu_bn.yaml"],
}
SPLITS = {  # test split, few-shot split (as the YAMLs name them)
    "bangla_mmlu": ("test", "dev"), "piqa_bn": ("validation", "train"), "boolqa_bn": ("validation", "train"),
    "openbookqa_bn": ("test", "train"), "bangla_commonsenseqa": ("validation", "train"),
    "belebele_ben_Beng": ("test", None), "global_mmlu_bn": ("test", "dev"), "arc_bn": ("test", "train"),
    "hellaswag_bn": ("val", None), "m_mmlu_bn": ("test", "train"),
}
FEWSHOT = {"bangla_mmlu": 5, "m_mmlu_bn": 5, "belebele_ben_Beng": 5, "global_mmlu_bn": 5, "piqa_bn": 2,
           "boolqa_bn": 2, "openbookqa_bn": 2, "bangla_commonsenseqa": 2, "arc_bn": 3, "hellaswag_bn": 3}


class Words:
    """Deterministic Bangla snippets from the bundled sample."""

    def __init__(self, seed):
        path = os.path.join(REPO, "..", "shared", "data", "sample", "bn_2000.txt")
        if not os.path.isfile(path):  # a clone without ../shared: the repo's own sample
            path = os.path.join(REPO, "data", "sample", "bn_news.txt.gz")
        opener = gzip.open if path.endswith(".gz") else open
        self.words = [w for line in opener(path, "rt", encoding="utf-8") for w in line.split()][:20000]
        self.rnd = random.Random(seed)

    def __call__(self, n):
        i = self.rnd.randrange(len(self.words) - n)
        return " ".join(self.words[i:i + n])


def make_docs(task, w, n, split):
    r = w.rnd
    docs = []
    for i in range(n):
        ws = "\u00a0" if i % 3 == 0 else " "  # Python's strip() removes U+00A0 too
        if task == "bangla_mmlu":
            docs.append({"question": ws + w(8) + "?\n", "options": [w(2) for _ in range(4)],
                         "answer": r.choice(["A", "B", "C", "D"]) if i % 2 else r.randrange(4), "subject": "x"})
        elif task == "piqa_bn":
            docs.append({"goal": w(6) + ws, "sol1": " " + w(5), "sol2": w(7) + "\n", "label": r.randrange(2)})
        elif task == "boolqa_bn":
            docs.append({"passage": ws + w(20), "question": w(6) + " ?", "answer": r.choice(["yes", "no"])})
        elif task in ("openbookqa_bn", "bangla_commonsenseqa"):
            k = 4 if task == "openbookqa_bn" else 5
            labels = ["A", "B", "C", "D", "E"][:k]
            docs.append({"id": f"{split}-{i}", "question_stem": w(7) + ws,
                         "choices": {"text": [w(2) for _ in labels], "label": labels}, "answerKey": r.choice(labels)})
        elif task == "belebele_ben_Beng":
            docs.append({"link": "x", "question_number": i, "flores_passage": w(15), "question": " " + w(6),
                         "mc_answer1": w(2), "mc_answer2": w(2), "mc_answer3": w(3), "mc_answer4": w(2),
                         "correct_answer_num": str(r.randrange(1, 5)), "dialect": "ben_Beng", "ds": "x"})
        elif task == "global_mmlu_bn":
            docs.append({"sample_id": f"{split}-{i}", "subject": "x",
                         "subject_category": ["Business", "Humanities", "Medical", "Other", "STEM",
                                              "Social Sciences"][i % 6],
                         "question": w(8) + ws, "option_a": w(2), "option_b": w(2), "option_c": w(3),
                         "option_d": w(2), "answer": r.choice("ABCD")})
        elif task == "arc_bn":
            docs.append({"id": f"{split}-{i}", "instruction": ws + w(8) + " [title] " + w(2),
                         "option_a": w(2), "option_b": w(3) + " [x]", "option_c": w(2), "option_d": w(2),
                         "option_e": w(2) if i % 2 else "", "answer": r.choice("ABCD")})
        elif task == "hellaswag_bn":
            docs.append({"ind": i, "activity_label": w(2), "ctx_a": w(8) + " [header]", "ctx_b": "ctx " + w(3),
                         "endings": [w(4) + "  " + w(2) for _ in range(4)], "label": " " + str(r.randrange(4))})
        elif task == "m_mmlu_bn":
            docs.append({"id": f"{split}-{i}", "instruction": w(8) + "\n", "option_a": w(2), "option_b": w(2),
                         "option_c": w(2), "option_d": w(3), "answer": r.choice("ABCD")})
    return docs


def one_type(t, docs):
    """A Parquet column has one type: bangla_mmlu's answers (letters and indices here) become indices."""
    if t != "bangla_mmlu":
        return docs
    return [dict(d, answer="ABCD".index(d["answer"]) if isinstance(d["answer"], str) else d["answer"]) for d in docs]


def write_fixtures(bench, tasks, n_test, broken, parquet=False):
    """Returns {task: {split: docs}}; the harness's copy differs only with --break swap. With
    `parquet` lmeval's copy is <split>.parquet (pyarrow, row groups of 3) and the harness's JSONL."""
    w = Words(41)
    fixtures = {}
    for t in tasks:
        test, fs = SPLITS[t]
        fixtures[t] = {test: make_docs(t, w, n_test, test)}
        if fs:
            fixtures[t][fs] = make_docs(t, w, 36 if t == "global_mmlu_bn" else 6, fs)  # 6 per category
        for split, docs in fixtures[t].items():
            if parquet:
                docs = fixtures[t][split] = one_type(t, docs)
            for root, swap in ((bench, False), (bench + "-harness", broken == "swap")):
                os.makedirs(os.path.join(root, t), exist_ok=True)
                rows = [dict(d, sol1=d["sol2"], sol2=d["sol1"]) if swap and t == "piqa_bn" else d for d in docs]
                if parquet and root == bench:
                    import pyarrow as pa
                    import pyarrow.parquet as pq
                    pq.write_table(pa.Table.from_pylist(rows), os.path.join(root, t, split + ".parquet"), row_group_size=3)
                    continue
                with open(os.path.join(root, t, split + ".jsonl"), "w", encoding="utf-8") as f:
                    for d in rows:
                        f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return fixtures


def write_yamls(ydir, bench, tasks):
    """One YAML per harness task: include the installed one, data from the local JSONL."""
    import lm_eval
    root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    names = {}
    os.makedirs(ydir, exist_ok=True)
    for t in tasks:
        names[t] = []
        for y in YAML[t]:
            name = "lmforge_" + os.path.basename(y)[:-5]
            files = {s: os.path.join(bench, t, s + ".jsonl") for s in SPLITS[t] if s}
            body = {"include": os.path.join(root, y), "task": name, "dataset_path": "json", "dataset_name": None,
                    "dataset_kwargs": {"data_files": files}}
            with open(os.path.join(ydir, name + ".yaml"), "w") as f:
                json.dump(body, f, indent=1)  # JSON is YAML
            names[t].append(name)
    return names


def harness_items(res, t, names, fixture):
    """Per fixture test document (in file order): the harness's per-choice lls and acc/acc_norm."""
    test = fixture[SPLITS[t][0]]
    if t != "global_mmlu_bn":
        return [s for s in sorted(res["samples"][names[0]], key=lambda s: s["doc_id"])]
    out = [None] * len(test)
    for name in names:  # each category subtask holds the documents of its category, in file order
        cat = name.split("global_mmlu_bn_")[1].replace("_", " ").lower()
        idx = [i for i, d in enumerate(test) if d["subject_category"].lower() == cat]
        for s in res["samples"].get(name, []):
            out[idx[s["doc_id"]]] = s
    return out


def compare(t, hs, us, acc_norm):
    ok, maxr, eq = True, 0.0, 0
    if len(hs) != len(us) or any(h is None for h in hs):
        return False, float("inf"), 0
    for h, u in zip(hs, us):
        lls = [float(r[0]) for r in h["filtered_resps"]]
        if len(lls) != len(u["choices"]):
            return False, float("inf"), eq
        maxr = max(maxr, max(abs(x - c["logprob"]) / (1e-4 + 1e-6 * abs(c["logprob"])) for x, c in zip(lls, u["choices"])))
        same = h["acc"] == float(u["pred"] == u["gold"])
        if acc_norm:
            same = same and h["acc_norm"] == float(u["pred_norm"] == u["gold"])
        eq += same
    return eq == len(hs) and maxr <= 1, maxr, eq


def run_round(a, hf, bench, ydir, names, fixtures, tasks, k, work):
    import lm_eval
    from lm_eval.tasks import TaskManager
    samples = os.path.join(work, f"mc_{k}shot.jsonl")
    out = os.path.join(work, f"mc_{k}shot.json")
    subprocess.run([a.lmeval, "mc", "--run", hf, "--data-dir", bench, "--tasks", ",".join(tasks), "--num-fewshot",
                    str(k), "--log-samples", samples, "--out", out, "-q"], check=True, stdout=subprocess.DEVNULL)
    ours = {}
    for line in open(samples, encoding="utf-8"):
        s = json.loads(line)
        ours.setdefault(s["task"], []).append(s)
    mc = json.load(open(out))
    res = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": hf, "dtype": "float32", "device": "cpu"},
                                  tasks=[n for t in tasks for n in names[t]], num_fewshot=k, log_samples=True,
                                  batch_size=1, task_manager=TaskManager(include_path=ydir), verbosity="ERROR")
    ok = True
    for t in tasks:
        acc_norm = "acc_norm" in mc["tasks"][t]
        good, maxr, eq = compare(t, harness_items(res, t, names[t], fixtures[t]), ours.get(t, []), acc_norm)
        print(f"{t:22s} {k}-shot  n {len(ours.get(t, [])):3d}  items equal {eq:3d}  max |dll|/(1e-4+1e-6|ll|) "
              f"{maxr:8.3f}  acc ours {mc['tasks'][t]['acc']:.4f}  {'ok' if good else 'DIFFERENT'}")
        ok = ok and good
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lmeval", required=True)
    ap.add_argument("--family", default="all", help="titulm, belebele, global_mmlu, okapi or all")
    ap.add_argument("--items", type=int, default=8, help="test documents per task")
    ap.add_argument("--work", help="folder for fixtures and results (default: a new temporary folder)")
    ap.add_argument("--break", dest="broken", default="", choices=["", "swap"])
    ap.add_argument("--parquet", action="store_true",
                    help="lmeval mc reads the splits as Parquet (the harness still its JSONL of the same rows)")
    a = ap.parse_args()
    tiny_hf.skip_unless_ready(("torch", "transformers", "lm_eval", "datasets") + (("pyarrow",) if a.parquet else ()))
    tasks = [t for f, ts in FAMILIES.items() if a.family in ("all", f) for t in ts]
    if not tasks:
        print(f"unknown --family {a.family}: one of {', '.join(FAMILIES)}, all")
        return 2
    work = a.work or tempfile.mkdtemp(prefix="lm_bangla_harness.")
    os.makedirs(work, exist_ok=True)
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      HF_DATASETS_CACHE=os.path.join(work, "datasets-cache"))
    hf = tiny_hf.make_llama3(os.path.join(work, "hf"), max_pos=2048, init_range=0.2)
    bench = os.path.join(work, "bench")
    fixtures = write_fixtures(bench, tasks, a.items, a.broken, a.parquet)
    names = write_yamls(os.path.join(work, "yaml"), bench + "-harness", tasks)
    ok = run_round(a, hf, bench, os.path.join(work, "yaml"), names, fixtures, tasks, 0, work)
    for k in sorted(set(FEWSHOT[t] for t in tasks if t in FEWSHOT)):
        ts = [t for t in tasks if FEWSHOT.get(t) == k]
        ok = run_round(a, hf, bench, os.path.join(work, "yaml"), names, fixtures, ts, k, work) and ok
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
