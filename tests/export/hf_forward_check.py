#!/usr/bin/env python3
"""Reference forward of an exported lmforge folder from Hugging Face's LlamaForCausalLM math
(tests/llama_ref.py), reading only the exported files.

usage: hf_forward_check.py HF_DIR EXPECTED.safetensors
EXPECTED holds input_ids [B, T] (int64) and logits [B, T, V] (fp32) computed by lmforge.
Exit 0: match; 1: mismatch; 77: skipped (no torch).
Also checks the negative control: with Meta's interleaved-pair rotary (what the q/k permutation
in transformers' convert_llama_weights_to_hf.py undoes) the logits must NOT match.
transformers' own LlamaForCausalLM is checked by hf_transformers_check.py (ctest
export_transformers_model, skipped where transformers is not importable).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/llama_ref.py

try:
    import torch
except ImportError:
    print("SKIP: this Python has no torch (scripts/setup.sh installs the pinned one)")
    sys.exit(77)

import llama_ref  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    folder, expected_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
    w = {k: v.float() for k, v in llama_ref.load_safetensors(os.path.join(folder, "model.safetensors")).items()}
    if cfg["tie_word_embeddings"]:
        assert "lm_head.weight" not in w, "tied export must not carry lm_head.weight"
    exp = llama_ref.load_safetensors(expected_path)
    ids, want = exp["input_ids"], exp["logits"]
    with torch.no_grad():
        got = llama_ref.forward(w, cfg, ids)
        bad = llama_ref.forward(w, cfg, ids, rope="interleaved")
    err = (got - want).abs().max().item()
    err_bad = (bad - want).abs().max().item()
    # 1e-4: fp32 throughout; only summation order differs (observed ~2e-7 on the tiny model).
    print(f"reference Llama forward vs lmforge: max |diff| = {err:.3e} (tolerance 1e-4)")
    print(f"negative control (interleaved rotary) max |diff| = {err_bad:.3e} (must exceed 1e-3)")
    return 0 if err < 1e-4 and err_bad > 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
