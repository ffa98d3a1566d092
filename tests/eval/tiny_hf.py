"""Tiny random HF checkpoints with real vocabularies, for the checks that score an HF folder with
lmeval and with transformers (hf_nll_check.py, bangla_harness_check.py).

The vocabularies are tests/tokenizer/make_hf_vocabs.py's (~/.cache/lmforge/vocabs): Llama 3's
128,256-token byte-level BPE (BOS added by its template) and Qwen2's 151,936 (no BOS). The weights
are transformers' own seeded init, stored fp32 so that both sides compute the same fp32 forward.
"""
import os
import shutil
import sys

VOCABS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lmforge", "vocabs")


def skip_unless_ready(mods=("torch", "transformers")):
    for mod in mods:
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: needs the Python module '{mod}' ({e}); {sys.executable} has none (scripts/setup.sh)")
            sys.exit(77)
    for v in ("llama3", "qwen2"):
        if not os.path.isfile(os.path.join(VOCABS, v, "tokenizer.json")):
            print(f"SKIP: no {v} vocabulary under {VOCABS} (tests/tokenizer/make_hf_vocabs.py)")
            sys.exit(77)


def make_llama3(out, seed=0, max_pos=512, init_range=0.5):
    """Llama-3.2-shaped: tied embeddings, GQA, explicit head_dim, llama3 rope scaling."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=max_pos,
                      tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001, rms_norm_eps=1e-5,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                      rope_theta=500000.0, initializer_range=init_range)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(VOCABS, "llama3", f), os.path.join(out, f))
    return out


def make_qwen2(out, seed=1, max_pos=512, init_range=0.5):
    """Qwen2-shaped: q/k/v bias, untied head, no BOS."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151643, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, initializer_range=init_range)
    Qwen2ForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(VOCABS, "qwen2", f), os.path.join(out, f))
    return out
