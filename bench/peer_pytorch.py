#!/usr/bin/env python3
"""Python PyTorch peer of lmforge's training step, written plainly in nanoGPT's style.

Same architecture as model/transformer.cpp (Llama: RMSNorm in fp32, rotate_half RoPE, causal
attention with an fp32 softmax, SwiGLU, no biases, tied embeddings per preset), same init
(N(0, 0.02), o_proj/down_proj scaled by 1/sqrt(2L), norms 1), same AdamW (torch.optim.AdamW,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices but not the embedding or norms), same
LR schedule (warmup then cosine to 0.1 lr), same grad clip (1.0), same batch and dtype.
Prints one JSON line in train_step_bench's format. Train mode times the same window as
train_step_bench: --warmup untimed steps, then --steps timed ones, the loss (and gradient norm) read
to the host only every --read-every steps (lmforge reads at its log steps, never per step), the rate
from the read at step --warmup to the read at step --warmup + --steps. --compile wraps the model in torch.compile
(Inductor; the first steps compile and are excluded from the rate like every warm-up). Run with
the pinned interpreter of scripts/setup.sh (the same torch as the C++ build):

    ~/.cache/lmforge/venv-torch-2.11.0/bin/python bench/peer_pytorch.py --preset small --batch 8 --seq 256 --dtype bf16 --threads 2
"""
import argparse
import contextlib
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Mirror of model/config.cpp presets (bench/check_peer_presets.sh tests that they agree).
PRESETS = {
    "tiny": dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=192,
                 max_seq_len=128, tie_embeddings=True),
    "small": dict(vocab_size=8192, d_model=256, n_layers=6, n_heads=8, n_kv_heads=8, d_ff=768,
                  max_seq_len=256, tie_embeddings=True),
    "124m": dict(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_ff=2048,
                 max_seq_len=1024, tie_embeddings=True),
    "400m": dict(vocab_size=32000, d_model=1024, n_layers=24, n_heads=16, n_kv_heads=16, d_ff=3072,
                 max_seq_len=2048, tie_embeddings=False),
    "1b": dict(vocab_size=32000, d_model=2048, n_layers=22, n_heads=32, n_kv_heads=8, d_ff=5632,
               max_seq_len=2048, tie_embeddings=True),
}
ROPE_THETA, NORM_EPS, INIT_STD = 10000.0, 1e-5, 0.02


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return y.to(x.dtype) * self.weight.to(x.dtype)


def rotary_tables(T, D, device):
    inv_freq = ROPE_THETA ** (-torch.arange(0, D, 2, dtype=torch.float32, device=device) / D)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32, device=device), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, D]
    return emb.cos(), emb.sin()


def apply_rotary(x, cos, sin):  # x: [B, H, T, D], Hugging Face rotate_half
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat([-x2, x1], dim=-1) * sin.to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_kv = c["n_heads"], c["n_kv_heads"]
        self.hd = c["d_model"] // self.n_head
        self.q_proj = nn.Linear(c["d_model"], self.n_head * self.hd, bias=False)
        self.k_proj = nn.Linear(c["d_model"], self.n_kv * self.hd, bias=False)
        self.v_proj = nn.Linear(c["d_model"], self.n_kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.hd, c["d_model"], bias=False)
        self.flash = hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0

    def forward(self, x, cos, sin):
        B, T, C = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv != self.n_head:
            k = k.repeat_interleave(self.n_head // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_head // self.n_kv, dim=1)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
            att = F.softmax(att.float(), dim=-1).to(q.dtype)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.up_proj = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.down_proj = nn.Linear(c["d_ff"], c["d_model"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["d_model"])
        self.self_attn = CausalSelfAttention(c)
        self.post_attention_layernorm = RMSNorm(c["d_model"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["d_model"])
        self.layers = nn.ModuleList([Block(c) for _ in range(c["n_layers"])])
        self.norm = RMSNorm(c["d_model"])
        self.lm_head = None if c["tie_embeddings"] else nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        resid_std = INIT_STD / math.sqrt(2 * c["n_layers"])
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                std = resid_std if ("o_proj" in name or "down_proj" in name) else INIT_STD
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        cos, sin = rotary_tables(T, self.c["d_model"] // self.c["n_heads"], idx.device)
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, cos, sin)
        x = self.norm(x)
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, w.to(x.dtype))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss

    def configure_optimizers(self, lr, weight_decay, betas, eps, fused=False):
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
        no_decay = [p for n, p in self.named_parameters() if not (p.dim() >= 2 and "embed_tokens" not in n)]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def get_lr(step, lr, warmup, steps, min_ratio=0.1):  # train/config.cpp lr_at, cosine
    if step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, steps - warmup - 1)
    frac = min(1.0, (step - warmup) / span)
    return lr * min_ratio + 0.5 * (lr - lr * min_ratio) * (1.0 + math.cos(math.pi * frac))


def train_flops_per_token(c, T):  # model/config.cpp: 6N + 12·L·T·d, N = matmul parameters
    hd = c["d_model"] // c["n_heads"]
    attn = c["d_model"] * hd * (2 * c["n_heads"] + 2 * c["n_kv_heads"])
    per_layer = attn + 3 * c["d_model"] * c["d_ff"] + 2 * c["d_model"]
    emb = c["vocab_size"] * c["d_model"]
    n_total = emb + (0 if c["tie_embeddings"] else emb) + c["n_layers"] * per_layer + c["d_model"]
    n_matmul = n_total if c["tie_embeddings"] else n_total - emb
    return n_total, 6.0 * n_matmul + 12.0 * c["n_layers"] * T * c["d_model"]


def write_profile(prof, path, steps):
    """Self CPU time per op and step, largest first: {"op", "ms_per_step", "calls_per_step"} lines."""
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    with open(path, "w") as f:
        for e in rows:
            if e.self_cpu_time_total > 0:
                f.write(json.dumps({"op": e.key, "ms_per_step": round(e.self_cpu_time_total / 1e3 / steps, 3),
                                    "calls_per_step": round(e.count / steps, 2)}) + "\n")


def train(a, c, model, fwd, dev, gen, ctx, marks, losses):
    """The train-mode loop over --warmup + --steps steps. Losses and gradient norms stay on the device
    and are read every --read-every steps (one copy, as lmforge's read_steps); `marks` gets
    (tokens, elapsed) at the reads of steps --warmup and --warmup + --steps. Returns the reads."""
    B, T, total = a.batch, a.seq, a.warmup + a.steps
    opt = model.configure_optimizers(a.lr, 0.1, (0.9, 0.95), 1e-8, fused=a.device == "cuda")
    model.train()
    prof, pending, reads = None, [], 0
    t0 = time.perf_counter()
    for step in range(total):
        if a.profile and step == a.warmup:  # warm-up (and compilation) outside the profile
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        lr = get_lr(step, a.lr, a.lr_warmup, total)
        for g in opt.param_groups:
            g["lr"] = lr
        win = torch.randint(0, c["vocab_size"], (B, T + 1), generator=gen).to(dev)
        opt.zero_grad(set_to_none=True)
        with ctx:
            _, loss = fwd(win[:, :-1], win[:, 1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        pending.append(torch.stack([loss.detach().double(), norm.detach().double()]))
        if (step + 1) % a.read_every == 0 or step + 1 == total:
            losses.extend(r[0] for r in torch.stack(pending).cpu().tolist())  # the only host read
            pending, reads = [], reads + 1
            if step + 1 in (a.warmup, total):
                marks.append(((step + 1) * B * T, time.perf_counter() - t0))
    if prof is not None:
        prof.__exit__(None, None, None)
        write_profile(prof, a.profile, a.steps)
    return reads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40, help="train mode: timed steps after --warmup; forward: all steps")
    ap.add_argument("--warmup", type=int, default=5, help="train mode: untimed steps first (a multiple of --read-every)")
    ap.add_argument("--read-every", type=int, default=5, help="train mode: read the loss to the host every N steps")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--mode", default="train", choices=["train", "forward", "config"])
    ap.add_argument("--n-layers", type=int, default=0)
    ap.add_argument("--n-heads", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3, help="the preset's lr (train_step_bench --mode config prints it)")
    ap.add_argument("--lr-warmup", type=int, default=2, help="learning-rate warm-up steps (the preset's)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor)")
    ap.add_argument("--profile", default="",
                    help="train mode: torch.profiler over the steps after the first log point; writes the self CPU "
                         "time per op and step as JSON lines to this file (docs/performance.md's per-op table)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: bf16 autocast on the GPU, TF32 on, fused AdamW (as lmtrain fit on cuda)")
    a = ap.parse_args()
    if a.mode == "train" and (a.read_every < 1 or a.warmup < a.read_every or a.steps < a.read_every
                              or a.warmup % a.read_every or a.steps % a.read_every):
        ap.error(f"--warmup {a.warmup} and --steps {a.steps} must be positive multiples of --read-every {a.read_every}")
    c = dict(PRESETS[a.preset])
    if a.n_layers:
        c["n_layers"] = a.n_layers
    if a.n_heads:
        c["n_heads"] = c["n_kv_heads"] = a.n_heads
    c["max_seq_len"] = max(c["max_seq_len"], a.seq)
    n_params, fpt = train_flops_per_token(c, a.seq)
    if a.mode == "config":
        out = dict(c, preset=a.preset, params=n_params, flops_per_token=fpt)
        if n_params < 200e6:  # build it, so the count checks the module too, not just the formula
            out["params_built"] = sum(p.numel() for p in Llama(c).parameters())
        print(json.dumps(out, sort_keys=True))
        return
    torch.set_num_threads(a.threads if a.threads > 0 else torch.get_num_threads())
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model = Llama(c).to(dev)
    if a.compile and a.profile:  # each generated C++ kernel as its own profiler record
        import torch._inductor.config as inductor_config
        inductor_config.cpp.enable_kernel_profile = True
    fwd = torch.compile(model) if a.compile else model
    gen = torch.Generator().manual_seed(42)
    ctx = torch.autocast(a.device, dtype=torch.bfloat16) if a.dtype == "bf16" else contextlib.nullcontext()
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    B, T = a.batch, a.seq
    log_every = max(1, a.steps // 4)  # forward mode
    marks, losses = [], []  # (tokens, elapsed) at every log point, like lmforge's metrics.jsonl
    reads = 0
    t0 = time.perf_counter()
    if a.mode == "forward":
        model.eval()
        with torch.no_grad():
            for step in range(a.steps):
                win = torch.randint(0, c["vocab_size"], (B, T + 1), generator=gen).to(dev)
                with ctx:
                    _, loss = fwd(win[:, :-1], win[:, 1:])
                losses.append(loss.item())
                if (step + 1) % log_every == 0 or step + 1 == a.steps:
                    sync()
                    marks.append(((step + 1) * B * T, time.perf_counter() - t0))
    else:
        reads = train(a, c, model, fwd, dev, gen, ctx, marks, losses)
    # Steady-state rate: train mode from the read at step --warmup to the last read (the window);
    # forward mode from the first log point to the last.
    if len(marks) >= 2:
        rate = (marks[-1][0] - marks[0][0]) / (marks[-1][1] - marks[0][1])
    else:
        rate = marks[-1][0] / marks[-1][1]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"impl": "peer-compile" if a.compile else "peer", "preset": a.preset, "dtype": a.dtype, "mode": a.mode, "batch": B,
                      "seq": T, "steps": a.steps, "threads": torch.get_num_threads(),
                      "tokens_per_s": round(rate, 1), "flops_per_token": fpt, "params": n_params,
                      "peak_rss_mb": round(rss_mb, 1), "final_loss": round(losses[-1], 4),
                      "first_loss": round(losses[0], 4), "torch": torch.__version__, "device": a.device,
                      "peak_cuda_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if a.device == "cuda" else 0,
                      "warmup": a.warmup, "read_every": a.read_every, "host_reads": reads, "lr": a.lr,
                      "lr_warmup": a.lr_warmup, "exit_code": 0}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
