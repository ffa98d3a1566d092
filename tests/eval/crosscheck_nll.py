#!/usr/bin/env python3
"""Independent cross-check of `lmeval nll` with Python PyTorch (the pinned torch of scripts/setup.sh).

Reads the run's model.safetensors itself (JSON header + torch.frombuffer), runs the reference
Llama forward of tests/llama_ref.py in float64 (RMSNorm, rotate_half RoPE, causal attention with
grouped-query repeat_kv, SwiGLU, tied or untied head; shared with tests/export) and compares the
per-token NLL with the JSON that `lmeval nll --dump-tokens` writes. Tolerance 1e-4 nats: lmeval
runs in fp32 (~1e-6 relative per op over a few layers); a wrong convention (RoPE halves vs
interleaved, missing norm, GQA order) moves NLLs by 1e-2 or more.

With --eval-test and --lmeval it first builds the test run folder (eval_test's RunFolder
tests) and runs lmeval itself, so ctest needs no other set-up. Exit 77 (ctest SKIP) when
the interpreter has no torch. `--break rope` perturbs this reference to show the check fails.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/llama_ref.py

try:
    import torch
except ImportError:
    print("SKIP: this Python has no torch (scripts/setup.sh makes the pinned environment)")
    sys.exit(77)

import llama_ref  # noqa: E402


def forward(w, cfg, tokens, broken=""):
    """tokens: list of ids -> logits [T, V] in float64 (tests/llama_ref.py, shared with the export check)."""
    ids = torch.tensor(tokens, dtype=torch.int64)[None]
    return llama_ref.forward(w, cfg, ids, rope="interleaved" if broken == "rope" else "half")[0]


def checkpoint_path(run, step):
    name = open(os.path.join(run, "latest")).read().strip() if step < 0 else "step-%08d" % step
    return os.path.join(run, "checkpoints", name, "model.safetensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="run folder (default: <work>/runs/tiny)")
    ap.add_argument("--dump", help="lmeval nll --dump-tokens JSON (default: made here)")
    ap.add_argument("--work", help="test run folder built by eval_test")
    ap.add_argument("--eval-test", help="eval_test binary: builds the run folder")
    ap.add_argument("--lmeval", help="lmeval binary: writes the dump")
    ap.add_argument("--step", type=int, default=-1)
    ap.add_argument("--max-windows", type=int, default=8, help="windows per language to check")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--break", dest="broken", default="", help="perturb the reference (rope) to see it fail")
    a = ap.parse_args()

    run, dump = a.run, a.dump
    if a.work:
        run = run or os.path.join(a.work, "runs", "tiny")
        if a.eval_test:
            subprocess.run([a.eval_test, "--gtest_filter=RunFolder.LoadsLatestAndNamedStep"], check=True,
                           stdout=subprocess.DEVNULL)
        if a.lmeval and not dump:
            dump = os.path.join(a.work, "crosscheck_dump.json")
            subprocess.run([a.lmeval, "nll", "--dtype", "fp32", "--run", run, "--data", os.path.join(a.work, "shards"),
                            "--max-tokens", "600", "--dump-tokens", dump,
                            "--out", os.path.join(a.work, "crosscheck_nll.json"), "-q"], check=True)
    if not run or not dump:
        ap.error("give --run and --dump, or --work with --eval-test and --lmeval")

    cfg = json.load(open(os.path.join(run, "config.json")))["model"]
    weights = {k: v.to(torch.float64) for k, v in llama_ref.load_safetensors(checkpoint_path(run, a.step)).items()}
    d = json.load(open(dump))
    worst, n = 0.0, 0
    with torch.no_grad():
        for lang, windows in d["languages"].items():
            for win in windows[:a.max_windows]:
                toks, first = win["tokens"], win["first_target"]
                logp = torch.log_softmax(forward(weights, cfg, toks[:-1], a.broken), dim=-1)
                for j, got in enumerate(win["nll"]):
                    pos = first - 1 + j  # position pos predicts token pos + 1
                    ref = -logp[pos, toks[pos + 1]].item()
                    worst = max(worst, abs(ref - got))
                    n += 1
    print(f"crosscheck: {n} tokens, max |NLL(python) - NLL(lmeval)| = {worst:.3g} nats (tolerance {a.tol:g})")
    if n == 0:
        print("FAIL: no tokens in the dump")
        return 1
    if worst > a.tol:
        print("FAIL: lmeval's per-token NLL differs from the independent PyTorch forward")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
