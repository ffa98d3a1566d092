#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints for lmforge's import test (tests/export/hf_import_test.cpp),
each with transformers' own logits and NLL on fixed ids.

usage: hf_import_fixture.py OUT_DIR
Writes OUT_DIR/<case>/ (save_pretrained: config.json, model.safetensors or shards with
model.safetensors.index.json), OUT_DIR/<case>.expected.safetensors (input_ids [2, T] int64,
logits [2, T, V] fp32, nll [] fp64: mean next-token cross-entropy in nats) and OUT_DIR/manifest.json
(paths in it relative to OUT_DIR, so the folder may be renamed).
Exit 0: written; 77: skipped (no transformers in this Python).

Shapes:
  llama2   LlamaForCausalLM, untied, multi-head (kv heads = heads), rope_theta 10000
  llama32  LlamaForCausalLM, tied, GQA, rope_scaling llama3, head_dim 32 != hidden/heads = 16
  qwen2    Qwen2ForCausalLM, tied, GQA, q/k/v biases, rope_theta 1e6
each stored as fp32, bf16 and fp16, in one file and in shards. The reference logits come from the
stored weights upcast to fp32 (from_pretrained(dtype=float32)), eager attention, as lmforge imports
them. llama32_fp16_hub has its config.json rewritten to the Hub's older form (top-level rope_theta
and rope_scaling instead of transformers 5's rope_parameters).
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
except ImportError as e:
    print(f"SKIP: no transformers here ({e})")
    sys.exit(77)

VOCAB, T = 384, 48
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make(shape):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5,
                  initializer_range=0.15)  # sharp: logits of order 1-10, so a wrong rope or bias shows
    if shape == "llama2":
        cfg = LlamaConfig(num_key_value_heads=4, tie_word_embeddings=False, rope_theta=10000.0, **common)
        return LlamaForCausalLM, cfg
    if shape == "llama32":
        # original context 64: wavelengths above 64 are divided by the factor and 16..64 smoothed,
        # so positions 0..47 see all three branches of the llama3 formula.
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        cfg = LlamaConfig(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, rope_parameters=rope, **common)
        return LlamaForCausalLM, cfg
    if shape == "qwen2":
        cfg = Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0, **common)
        return Qwen2ForCausalLM, cfg
    raise ValueError(shape)


def build(shape, seed):
    cls, cfg = make(shape)
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():  # norms away from 1 and biases away from 0, so their layout matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.5)
    return cls, model


def to_hub_format(folder):
    """The Hub's (transformers 4) spelling of rope: rope_theta + rope_scaling at the top level."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def reference(cls, folder, ids):
    model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        logits = model(ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1].double(), -1)
    nll = -logp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()
    return logits, nll


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from safetensors.torch import save_file
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (2, T), generator=gen)
    cases = []
    for si, shape in enumerate(["llama2", "llama32", "qwen2"]):
        cls, model = build(shape, 100 + si)
        for dname, dt in DTYPES.items():
            for layout in ["single", "sharded"]:
                name = f"{shape}_{dname}_{layout}"
                folder = os.path.join(out, name)
                shard = "100KB" if layout == "sharded" else "1GB"
                model.to(dt).save_pretrained(folder, max_shard_size=shard, safe_serialization=True)
                model.to(torch.float32)
                logits, nll = reference(cls, folder, ids)
                exp = os.path.join(out, name + ".expected.safetensors")
                save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous(), "nll": nll.reshape(())}, exp)
                cases.append({"name": name, "dir": name, "expected": name + ".expected.safetensors", "shape": shape, "dtype": dname,
                              "sharded": layout == "sharded"})
        if shape == "llama32":  # the Hub's older rope spelling, read by transformers too
            name = "llama32_fp16_hub"
            folder = os.path.join(out, name)
            model.to(torch.float16).save_pretrained(folder, safe_serialization=True)
            model.to(torch.float32)
            to_hub_format(folder)
            logits, nll = reference(cls, folder, ids)
            exp = os.path.join(out, name + ".expected.safetensors")
            save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous(), "nll": nll.reshape(())}, exp)
            cases.append({"name": name, "dir": name, "expected": name + ".expected.safetensors", "shape": shape, "dtype": "fp16",
                          "sharded": False})
    for c in cases:
        if c["sharded"] and not os.path.exists(os.path.join(out, c["dir"], "model.safetensors.index.json")):
            print(f"{c['name']}: save_pretrained wrote one file; the sharded case would test nothing")
            return 1
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
    print(f"wrote {len(cases)} checkpoints with transformers {transformers.__version__} under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
