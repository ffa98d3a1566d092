#!/usr/bin/env python3
"""Plain-PyTorch twin of lmforge's training step, the oracle of the trajectory test
(tests/train/trajectory_test.cpp, TrajectoryTest.*; the check of llm.c's test_gpt2.c).

usage: trajectory_oracle.py DIR [DIR ...]
Each DIR holds what the C++ test wrote:
  config.json          the run config lmforge resolved ({"model": ..., "train": ...})
  init.safetensors     the initial weights (HF names, fp32)
  batches.safetensors  "tokens": int64 [steps, grad_accum, micro_batch, seq_len + 1], every
                       window lmforge trained on, in order
and gets oracle.safetensors: "loss", "grad_norm", "lr" (float64 [steps]) and the final weights
under their own names (fp32).

Every part is PyTorch's own, not a copy of lmforge's C++: the Llama forward of tests/llama_ref.py,
F.cross_entropy, loss / grad_accum per micro-batch, torch.nn.utils.clip_grad_norm_,
torch.optim.AdamW (its default CPU implementation, not the fused kernel lmforge calls) with two
parameter groups (weight decay on matrices, none on norms and the token embedding, as
TrainConfig documents), and the schedule written from TrainConfig's comment. Exit 77 (skipped)
when this Python has no torch.
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/llama_ref.py

try:
    import torch
except ImportError:
    print("SKIP: this Python has no torch (scripts/setup.sh makes the pinned environment)")
    sys.exit(77)

import llama_ref  # noqa: E402

ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}


def save_safetensors(path, tensors):
    """Writes {name: tensor} as safetensors (8-byte header length, JSON header, raw bytes)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist())
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def lr_at(tc, step):
    """TrainConfig's schedule: linear warmup to lr over warmup_steps, then cosine from the end of
    warmup to the last step down to min_lr_ratio * lr (or constant; wsd is not used here)."""
    sched = tc["schedule"]
    lr, min_lr, warm, total = tc["optimizer"]["lr"], tc["optimizer"]["lr"] * sched["min_lr_ratio"], \
        sched["warmup_steps"], tc["steps"]
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    if sched["kind"] == "constant":
        return lr
    assert sched["kind"] == "cosine", "the oracle knows cosine and constant only"
    frac = min(1.0, (step - warm) / max(1, total - warm - 1))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * frac))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for d in sys.argv[1:]:
        print(d)
        run_case(d)
    return 0


def run_case(d):
    run = json.load(open(os.path.join(d, "config.json")))
    cfg, tc = run["model"], run["train"]
    # One thread: the model is tiny, and OpenMP workers spin-waiting on a busy machine (ctest -j)
    # cost several times the work. Thread count changes only the order of sums.
    torch.set_num_threads(1)
    init = llama_ref.load_safetensors(os.path.join(d, "init.safetensors"))
    tokens = llama_ref.load_safetensors(os.path.join(d, "batches.safetensors"))["tokens"]
    steps, accum = tokens.shape[0], tokens.shape[1]
    assert steps == tc["steps"] and accum == tc["batch"]["grad_accum"], (tokens.shape, tc["steps"], tc["batch"])
    opt_cfg = tc["optimizer"]

    params = {k: v.float().clone().requires_grad_(True) for k, v in init.items()}
    # nanoGPT's configure_optimizers split: matrices decay; norms (1-D) and the token embedding
    # (unless train.optimizer.decay_embeddings) do not.
    decay = [p for n, p in params.items()
             if p.dim() >= 2 and ("embed_tokens" not in n or opt_cfg["decay_embeddings"])]
    no_decay = [p for n, p in params.items() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": opt_cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=opt_cfg["lr"], betas=(opt_cfg["beta1"], opt_cfg["beta2"]), eps=opt_cfg["eps"])
    losses, norms, lrs = [], [], []
    for step in range(steps):
        lr = lr_at(tc, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for micro in range(accum):
            window = tokens[step, micro]  # [B, T+1]
            logits = llama_ref.forward(params, cfg, window[:, :-1])  # [B, T, V]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     window[:, 1:].reshape(-1)) / accum
            loss.backward()
            step_loss += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), opt_cfg["grad_clip"]) if opt_cfg["grad_clip"] > 0 \
            else torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params.values()]))
        opt.step()
        losses.append(step_loss)
        norms.append(float(norm))
        lrs.append(lr)
        print(f"oracle step {step + 1}: loss {step_loss:.6f} grad_norm {float(norm):.6f} lr {lr:.3e}")
    out = {"loss": torch.tensor(losses, dtype=torch.float64),
           "grad_norm": torch.tensor(norms, dtype=torch.float64),
           "lr": torch.tensor(lrs, dtype=torch.float64)}
    out.update({n: p.detach() for n, p in params.items()})
    save_safetensors(os.path.join(d, "oracle.safetensors"), out)


if __name__ == "__main__":
    sys.exit(main())
