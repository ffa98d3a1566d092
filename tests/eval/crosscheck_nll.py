#!/usr/bin/python3
"""Independent cross-check of `lmeval nll` with Python PyTorch (Debian's python3-torch).

Reads the run's model.safetensors itself (JSON header + torch.frombuffer), reimplements the
Llama forward pass in float64 (RMSNorm, rotate_half RoPE as model/transformer.cpp, causal
attention with grouped-query repeat_interleave, SwiGLU, tied or untied head) and compares the
per-token NLL with the JSON that `lmeval nll --dump-tokens` writes. Tolerance 1e-4 nats: lmeval
runs in fp32 (~1e-6 relative per op over a few layers); a wrong convention (RoPE halves vs
interleaved, missing norm, GQA order) moves NLLs by 1e-2 or more.

With --eval-test and --lmeval it first builds the test run folder (eval_test's RunFolder
tests) and runs lmeval itself, so ctest needs no other set-up. Exit 77 (ctest SKIP) when
/usr/bin/python3 has no torch. `--break rope` perturbs this reference to show the check fails.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

try:
    import torch
except ImportError:
    print("SKIP: /usr/bin/python3 has no torch (apt install python3-torch)")
    sys.exit(77)

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = bytearray(data[base + start:base + end])
        t = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]) if end > start else torch.zeros(0)
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def forward(w, cfg, tokens, broken=""):
    """tokens: list of ids -> logits [T, V] (float64)."""
    T = len(tokens)
    H, Hkv = cfg["n_heads"], cfg["n_kv_heads"]
    D = cfg["d_model"] // H
    eps = cfg["norm_eps"]
    inv = cfg["rope_theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    if broken == "rope":  # interleaved pairs instead of halves
        emb = freqs.repeat_interleave(2, dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    for layer in range(cfg["n_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // Hkv, dim=0)
        v = v.repeat_interleave(H // Hkv, dim=0)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, H * D)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


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
            subprocess.run([a.lmeval, "nll", "--run", run, "--data", os.path.join(a.work, "shards"),
                            "--max-tokens", "600", "--dump-tokens", dump,
                            "--out", os.path.join(a.work, "crosscheck_nll.json"), "-q"], check=True)
    if not run or not dump:
        ap.error("give --run and --dump, or --work with --eval-test and --lmeval")

    cfg = json.load(open(os.path.join(run, "config.json")))["model"]
    weights = load_safetensors(checkpoint_path(run, a.step))
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
