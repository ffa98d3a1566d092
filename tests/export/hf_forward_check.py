#!/usr/bin/env python3
"""Reference forward of an exported lmforge folder, written from Hugging Face's LlamaForCausalLM
math (transformers/models/llama/modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
rotate_half, repeat_kv, eager attention, LlamaMLP), reading only the exported files.

usage: hf_forward_check.py HF_DIR EXPECTED.safetensors
EXPECTED holds input_ids [B, T] (int64) and logits [B, T, V] (fp32) computed by lmforge.
Exit 0: match; 1: mismatch; 77: skipped (no torch).
Also checks the negative control: with Meta's interleaved-pair rotary (what the q/k permutation
in transformers' convert_llama_weights_to_hf.py undoes) the logits must NOT match.
When `transformers` is importable, LlamaForCausalLM.from_pretrained must match to 1e-4 as well.
"""
import json
import os
import struct
import sys

try:
    import torch
except ImportError:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64,
          "I32": torch.int32}


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
        a, b = info["data_offsets"]
        buf = bytearray(data[base + a:base + b])
        t = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]) if b > a else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def rms_norm(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x, cos, sin):
    # Meta's original layout: rotation pairs (2i, 2i+1) instead of (i, i + D/2).
    d = x.shape[-1]
    c, s = cos[..., : d // 2], sin[..., : d // 2]
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return out


def forward(w, cfg, ids, interleaved=False):
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    C = cfg["hidden_size"]
    D = cfg.get("head_dim", C // H)
    eps = cfg["rms_norm_eps"]
    B, T = ids.shape
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    pos = torch.arange(T).float()
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        if interleaved:
            q, k = rotate_interleaved(q, cos, sin), rotate_interleaved(k, cos, sin)
        else:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = H // Hkv  # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
        k = k[:, :, None].expand(B, Hkv, rep, T, D).reshape(B, H, T, D)
        v = v[:, :, None].expand(B, Hkv, rep, T, D).reshape(B, H, T, D)
        att = (q @ k.transpose(2, 3)) / (D ** 0.5) + mask
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    folder, expected_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
    w = {k: v.float() for k, v in load_safetensors(os.path.join(folder, "model.safetensors")).items()}
    if cfg["tie_word_embeddings"]:
        assert "lm_head.weight" not in w, "tied export must not carry lm_head.weight"
    exp = load_safetensors(expected_path)
    ids, want = exp["input_ids"], exp["logits"]
    with torch.no_grad():
        got = forward(w, cfg, ids)
        bad = forward(w, cfg, ids, interleaved=True)
    err = (got - want).abs().max().item()
    err_bad = (bad - want).abs().max().item()
    # 1e-4: fp32 throughout; only summation order differs (observed ~1e-6 on the tiny model).
    print(f"reference Llama forward vs lmforge: max |diff| = {err:.3e} (tolerance 1e-4)")
    print(f"negative control (interleaved rotary) max |diff| = {err_bad:.3e} (must exceed 1e-3)")
    ok = err < 1e-4 and err_bad > 1e-3
    try:
        import transformers  # noqa: F401
        from transformers import LlamaForCausalLM
    except ImportError:
        print("transformers not importable: LlamaForCausalLM.from_pretrained check skipped")
    else:
        m = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
        m.eval()
        with torch.no_grad():
            hf = m(ids).logits
        e2 = (hf - want).abs().max().item()
        print(f"transformers {transformers.__version__} LlamaForCausalLM vs lmforge: max |diff| = {e2:.3e} (tolerance 1e-4)")
        ok = ok and e2 < 1e-4
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
