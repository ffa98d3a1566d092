#!/usr/bin/env python3
"""lm-evaluation-harness scores lmforge's export on the same items as `lmeval mc`; per task, acc and
acc_norm must equal ours item for item (docs/eval.md "Checked against lm-evaluation-harness").

  1. the test run folder (eval_test's RunFolder: tiny model, vocab 512, context 64, 80 AdamW steps)
     is exported with `lmtrain export --dtype fp32`;
  2. `lmeval mc` (default prefix: the framing's start token, bos) scores --tasks on --bench with --log-samples;
  3. the harness's `hf` model loads the export (HF_HUB_OFFLINE=1) and runs the local task YAMLs of
     eval/harness/ (the harness's own YAML fields and prompt functions; data from --bench);
  4. per item: harness acc == (our pred == gold), acc_norm == (our pred_norm == gold); per choice the
     log-likelihoods agree within 1e-4 nats + 1e-6 of their value (fp32 forward on both sides; the
     harness sums in fp32, lmeval in fp64).

The YAML fields are also compared with the installed harness's own task YAMLs, so a change in a
new lm-eval release shows here. `--break swap` swaps PIQA's two options in a copy of the YAMLs (the
check must go red). Exit 0 equal, 1 different, 77 skipped (no lm_eval/transformers, or no --bench).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TASKS = ["hellaswag", "piqa", "arc_easy", "arc_challenge", "openbookqa", "copa", "winogrande"]
# Fields of the harness's own YAML that ours must repeat (prompt, target, choices, metrics).
SAME_FIELDS = ["output_type", "doc_to_text", "doc_to_target", "doc_to_choice", "process_docs"]
HARNESS_YAML = {"hellaswag": "hellaswag/hellaswag.yaml", "piqa": "piqa/piqa.yaml", "arc_easy": "arc/arc_easy.yaml",
                "arc_challenge": "arc/arc_easy.yaml", "openbookqa": "openbookqa/openbookqa.yaml",
                "copa": "super_glue/copa/default.yaml", "winogrande": "winogrande/default.yaml"}


def skip_unless_importable():
    for mod in ("torch", "transformers", "lm_eval", "yaml"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: needs the Python module '{mod}' ({e}); {sys.executable} has none (scripts/setup.sh)")
            sys.exit(77)


def load_yaml(path):
    import yaml

    class Loader(yaml.SafeLoader):
        pass
    # !function tags compare by the function's name (the module differs: utils vs lmforge_bench).
    Loader.add_constructor("!function", lambda ld, node: "!function " + ld.construct_scalar(node).split(".")[-1])
    return yaml.load(open(path), Loader=Loader)


def yaml_drift(include):
    import lm_eval
    root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    bad = []
    for t in TASKS:
        ours, theirs = load_yaml(os.path.join(include, t + ".yaml")), load_yaml(os.path.join(root, HARNESS_YAML[t]))
        for f in SAME_FIELDS:
            a, b = ours.get(f), theirs.get(f)
            if f == "process_docs" and a:
                a = "!function " + a.split()[-1].replace("hellaswag_", "")
            if isinstance(a, str) and a.startswith("!function"):
                a = "!function " + a.split()[-1].replace(t + "_", "")
            if a != b:
                bad.append(f"{t}.{f}: ours {a!r}, harness {b!r}")
        if [m["metric"] for m in ours["metric_list"]] != [m["metric"] for m in theirs["metric_list"]]:
            bad.append(f"{t}.metric_list differs")
    return bad


def run(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def export_scores_as_run(lmeval, run_dir, export, out):
    """lmeval scores the run folder and its HF export (read as an HF checkpoint folder, its own
    tokenizer files) identically: `nll --compare` on raw sample text differs by exactly 0."""
    text = os.path.join(out, "nll_text.txt")
    lines = []
    for name in ("bn_2000.txt", "en_2000.txt"):
        path = os.path.join(REPO, "..", "shared", "data", "sample", name)
        if os.path.isfile(path):
            lines += [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()][:5]
    if not lines:
        lines = ["The history of Bengal is long.", "বাংলা ভাষা"]
    open(text, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    res = os.path.join(out, "nll_run_vs_export.json")
    run([lmeval, "nll", "--dtype", "fp32", "--run", run_dir, "--compare", export, "--text", text, "--docs", "harness", "--out", res, "-q"],
        stdout=subprocess.DEVNULL)
    lang = json.load(open(res))["languages"]["text"]
    m, c = lang["model"], lang["compare"]
    same = m["tokens"] == c["tokens"] and abs(m["sum_nats"] - c["sum_nats"]) <= 1e-6 * abs(m["sum_nats"])
    print(f"lmeval nll, run vs its HF export (--compare): {m['sum_nats']:.6f} vs {c['sum_nats']:.6f} nats over "
          f"{m['tokens']} / {c['tokens']} tokens {'ok' if same else 'DIFFERENT'}")
    return same


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="eval_test's run folder (LM_BINARY_DIR/eval_test_run)")
    ap.add_argument("--eval-test", help="eval_test binary: builds --work")
    ap.add_argument("--lmeval", required=True)
    ap.add_argument("--lmtrain", required=True)
    ap.add_argument("--bench", default=os.path.join(REPO, "..", "shared", "data", "sample", "bench"))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--context", type=int, default=256, help="max_seq_len to score at (0: the run's own)")
    ap.add_argument("--run", help="run folder to score (default: WORK/runs/tiny)")
    ap.add_argument("--out", help="folder for the export and results (default: WORK/harness)")
    ap.add_argument("--break", dest="broken", default="", choices=["", "swap"])
    ap.add_argument("--prefix", default="", help="lmeval mc --prefix (default: lmeval's own, from the tokenizer framing: bos)")
    a = ap.parse_args()
    skip_unless_importable()
    tasks = [t for t in a.tasks.split(",") if t]
    bench = os.path.abspath(a.bench)
    present = [t for t in tasks if os.path.isdir(os.path.join(bench, t))]
    if not present:
        print(f"SKIP: no benchmark folder of {tasks} under {bench}")
        return 77
    if len(present) < len(tasks):
        print(f"not in {bench} (skipped): {sorted(set(tasks) - set(present))}")
    tasks = present
    run_dir = a.run or os.path.join(a.work, "runs", "tiny")
    out = os.path.abspath(a.out or os.path.join(a.work, "harness"))
    if a.eval_test and not a.run:
        run([a.eval_test, "--gtest_filter=RunFolder.LoadsLatestAndNamedStep"], stdout=subprocess.DEVNULL)
    os.makedirs(out, exist_ok=True)
    if a.context:
        # The test run trained at context 64, shorter than some continuations (HellaSwag endings reach
        # 74 tokens with its 512-piece vocabulary; lmeval and the harness both refuse those). RoPE has
        # no learned positions, so the same weights are scored at a longer context: a copy of the run
        # folder whose config.json says max_seq_len = --context (requests beyond it are still cut).
        wide = os.path.join(out, "run")
        shutil.rmtree(wide, ignore_errors=True)
        os.makedirs(wide)
        for f in os.listdir(run_dir):
            if f not in ("config.json", "eval"):
                os.symlink(os.path.abspath(os.path.join(run_dir, f)), os.path.join(wide, f))
        cfg = json.load(open(os.path.join(run_dir, "config.json")))
        cfg["model"]["max_seq_len"] = a.context
        json.dump(cfg, open(os.path.join(wide, "config.json"), "w"), indent=1)
        run_dir = wide
    export = os.path.join(out, "hf")
    run([a.lmtrain, "export", "--run", run_dir, "--out", export, "--dtype", "fp32", "--force", "-q"], stdout=subprocess.DEVNULL)
    samples = os.path.join(out, "mc_samples.jsonl")
    run([a.lmeval, "mc", "--run", run_dir, "--data-dir", bench, "--tasks", ",".join(tasks), "--limit", str(a.limit),
         "--log-samples", samples, "--out", os.path.join(out, "mc.json"), "-q"]
        + (["--prefix", a.prefix] if a.prefix else []), stdout=subprocess.DEVNULL)
    mc = json.load(open(os.path.join(out, "mc.json")))
    ours = {}
    for line in open(samples):
        s = json.loads(line)
        ours.setdefault(s["task"], []).append(s)

    include = os.path.join(REPO, "eval", "harness")
    drift = yaml_drift(include)
    if a.broken == "swap":  # a copy of the YAMLs with PIQA's options swapped
        broken = os.path.join(out, "harness_broken")
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(include, broken)
        p = os.path.join(broken, "piqa.yaml")
        text = open(p).read()
        open(p, "w").write(text.replace("{{[sol1, sol2]}}", "{{[sol2, sol1]}}"))
        include = broken

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LM_BENCH_DIR=bench)
    import lm_eval
    from lm_eval.tasks import TaskManager
    sys.path.insert(0, include)
    res = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": export, "dtype": "float32", "device": "cpu"},
                                  tasks=["lmforge_" + t for t in tasks], limit=a.limit, log_samples=True,
                                  batch_size=16, task_manager=TaskManager(include_path=include),
                                  verbosity="ERROR")
    ok = not drift
    for d in drift:
        print("YAML drift from the installed harness:", d)
    print(f"lm_eval {lm_eval.__version__ if hasattr(lm_eval, '__version__') else ''} hf model on {export}; "
          f"lmeval mc prefix {mc['prefix']}; limit {a.limit}")
    print(f"{'task':14s} {'n':>4s} {'acc ours':>9s} {'harness':>8s} {'acc_norm ours':>14s} {'harness':>8s} "
          f"{'items equal':>12s} {'max |dlogp|':>12s}")
    for t in tasks:
        hs = sorted(res["samples"]["lmforge_" + t], key=lambda s: s["doc_id"])
        us = ours.get(t, [])
        norm = "acc_norm" in res["results"]["lmforge_" + t] or any(k.startswith("acc_norm") for k in res["results"]["lmforge_" + t])
        eq, maxd, maxr = 0, 0.0, 0.0
        for h, u in zip(hs, us):
            same = h["acc"] == float(u["pred"] == u["gold"])
            if norm:
                same = same and h["acc_norm"] == float(u["pred_norm"] == u["gold"])
            lls = [r[0] for r in h["filtered_resps"]]
            if len(lls) == len(u["choices"]):
                maxd = max(maxd, max(abs(float(x) - c["logprob"]) for x, c in zip(lls, u["choices"])))
                maxr = max(maxr, max(abs(float(x) - c["logprob"]) / (1e-4 + 1e-6 * abs(c["logprob"]))
                                     for x, c in zip(lls, u["choices"])))
            else:
                maxd = maxr = float("inf")
            eq += same
        r, tj = res["results"]["lmforge_" + t], mc["tasks"][t]
        hn = r.get("acc_norm,none")
        print(f"{t:14s} {len(us):4d} {tj['acc']:9.4f} {r['acc,none']:8.4f} "
              f"{tj.get('acc_norm', float('nan')):14.4f} {hn if hn is not None else float('nan'):8.4f} "
              f"{eq:5d} of {len(hs):<4d} {maxd:12.2e}")
        if "acc_norm" in tj and not norm:
            print(f"  {t}: lmeval reports acc_norm, the harness does not")
            ok = False
        # Log-likelihoods: 1e-4 nats plus 1e-6 of the value. The harness sums a choice's per-token
        # log-probs in fp32 (lmeval in fp64): a 333-token PIQA solution sums to ~2,000 nats, where
        # one fp32 ulp is 1.2e-4, so a fixed 1e-4 fails on rounding alone (seen: 1.20e-4 on PIQA
        # at 100 items with every item equal).
        if maxr > 1:
            print(f"  {t}: a log-likelihood differs by more than 1e-4 + 1e-6 |log p| ({maxr:.2f} of it)")
        ok = ok and eq == len(hs) == len(us) and maxr <= 1
    ok = export_scores_as_run(a.lmeval, run_dir, export, out) and ok
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
