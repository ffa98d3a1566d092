"""Reference Llama forward in plain PyTorch, shared by the Python cross-checks:

  tests/export/hf_forward_check.py      exported HF folder vs lmforge logits (fp32)
  tests/export/hf_transformers_check.py transformers' own LlamaForCausalLM (uses load_safetensors)
  tests/eval/crosscheck_nll.py          lmeval's per-token NLL (float64)

Written from Hugging Face's LlamaForCausalLM math (transformers/models/llama/modeling_llama.py:
LlamaRMSNorm, LlamaRotaryEmbedding + rotate_half, repeat_kv, eager softmax attention, LlamaMLP,
tied or untied head), not from lmforge's C++; it reads only safetensors files and a config.
Needs only torch (the pinned venv of scripts/setup.sh); callers import it with
sys.path.insert(0, <tests folder>).
"""
import json
import struct

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "I32": torch.int32}


def load_safetensors(path):
    """{name: tensor} from a .safetensors file (8-byte header length, JSON header, raw data)."""
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
        dt = DTYPES[info["dtype"]]
        t = torch.frombuffer(bytearray(data[base + a:base + b]), dtype=dt) if b > a else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def dims(cfg):
    """(layers, heads, kv heads, head dim, eps, rope theta, tied) from an HF config.json or an
    lmforge run config's "model" object."""
    if "hidden_size" in cfg:  # HF LlamaConfig
        H = cfg["num_attention_heads"]
        Hkv = cfg.get("num_key_value_heads", H)
        D = cfg.get("head_dim", cfg["hidden_size"] // H)
        return (cfg["num_hidden_layers"], H, Hkv, D, cfg["rms_norm_eps"], cfg["rope_theta"],
                cfg["tie_word_embeddings"])
    H = cfg["n_heads"]
    return (cfg["n_layers"], H, cfg.get("n_kv_heads", H), cfg["d_model"] // H, cfg["norm_eps"],
            cfg["rope_theta"], cfg["tie_embeddings"])


def rms_norm(x, w, eps):
    # LlamaRMSNorm: normalise in fp32 (or the input's precision when wider), scale after.
    xf = x if x.dtype == torch.float64 else x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x, cos, sin):
    # Meta's original layout: rotation pairs (2i, 2i+1) instead of HF's (i, i + D/2). Used as the
    # negative control (what the q/k permutation in convert_llama_weights_to_hf.py undoes).
    d = x.shape[-1]
    c, s = cos[..., : d // 2], sin[..., : d // 2]
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return out


def forward(w, cfg, ids, rope="half"):
    """Logits [B, T, V] for ids [B, T] (int64), computed in the dtype of the weights `w`
    (HF names). rope: "half" (HF, lmforge) or "interleaved" (Meta; must not match)."""
    L, H, Hkv, D, eps, theta, tied = dims(cfg)
    dt = w["model.embed_tokens.weight"].dtype
    B, T = ids.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(dt) / D))
    freqs = torch.outer(torch.arange(T, dtype=dt), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # LlamaRotaryEmbedding
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((T, T), float("-inf"), dtype=dt).triu(1)
    for layer in range(L):
        p = f"model.layers.{layer}."
        # x: [B, T, C] -> q: [B, H, T, D], k, v: [B, Hkv, T, D]
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        if rope == "interleaved":
            q, k = rotate_interleaved(q, cos, sin), rotate_interleaved(k, cos, sin)
        else:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = H // Hkv  # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
        k = k[:, :, None].expand(B, Hkv, rep, T, D).reshape(B, H, T, D)
        v = v[:, :, None].expand(B, Hkv, rep, T, D).reshape(B, H, T, D)
        att = (q @ k.transpose(2, 3)) / (D ** 0.5) + mask
        att = torch.softmax(att if dt == torch.float64 else att.float(), dim=-1).to(dt)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.T
