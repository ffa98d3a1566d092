#!/usr/bin/env python3
"""Loads lmforge exports with the real Hugging Face / SentencePiece libraries and compares them
with lmforge's own numbers (written by export_test's DISABLED_WriteTransformersFixture).

usage: hf_transformers_check.py --part model|tokenizer|spm (--fixture DIR | --work DIR --export-test BIN)

  model      transformers.LlamaForCausalLM.from_pretrained (fp32, eager attention) on a tied and an
             untied export: logits equal lmforge's within 1e-4; greedy model.generate (with the
             exported generation_config: eos) equals lmforge's greedy tokens with the KV cache.
  tokenizer  transformers.LlamaTokenizer.from_pretrained (slow, tokenizer.model) and AutoTokenizer
             (whatever transformers picks) encode Bangla/English sentences to lmforge's ids.
  spm        Python SentencePiece on the exported tokenizer.model: same ids as lmforge (+ bos).

Exit 0: match; 1: mismatch; 77: skipped (ctest SKIP_RETURN_CODE) when the library the part needs
is not importable (this machine: no transformers, no python3-sentencepiece by default).
--work/--export-test run the fixture writer first, so ctest needs no set-up.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/llama_ref.py

# LlamaTokenizer with legacy false edits the model proto (google.protobuf) before loading it.
NEEDS = {"model": ["torch", "transformers"], "tokenizer": ["transformers", "sentencepiece", "google.protobuf"],
         "spm": ["sentencepiece"]}


def skip_unless_importable(part):
    for mod in NEEDS[part]:
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: part '{part}' needs the Python module '{mod}' ({e}); {sys.executable} has none")
            sys.exit(77)


def check_model(fx):
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    import llama_ref
    ok = True
    for name in ("hf_tied", "hf_untied"):
        exp = llama_ref.load_safetensors(os.path.join(fx, name + "_expected.safetensors"))
        ids, want = exp["input_ids"], exp["logits"]
        m = LlamaForCausalLM.from_pretrained(os.path.join(fx, name), torch_dtype=torch.float32,
                                             attn_implementation="eager")
        m.eval()
        with torch.no_grad():
            got = m(ids).logits
        err = (got - want).abs().max().item()
        # 1e-4: fp32 on both sides, only summation order differs (the reference forward: ~2e-7).
        print(f"{name}: transformers {transformers.__version__} LlamaForCausalLM vs lmforge: "
              f"max |logit diff| = {err:.3e} (tolerance 1e-4)")
        tied = m.config.tie_word_embeddings
        shared = m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
        if tied != shared:
            print(f"{name}: FAIL tie_word_embeddings={tied} but lm_head shares embed_tokens: {shared}")
            ok = False
        ok = ok and err < 1e-4
    g = json.load(open(os.path.join(fx, "hf_gen_expected.json")))
    m = LlamaForCausalLM.from_pretrained(os.path.join(fx, "hf_gen"), torch_dtype=torch.float32,
                                         attn_implementation="eager")
    m.eval()
    prompt = torch.tensor([g["prompt"]], dtype=torch.int64)
    with torch.no_grad():  # generation_config.json gives eos/pad and do_sample false
        out = m.generate(prompt, max_new_tokens=g["max_new_tokens"], attention_mask=torch.ones_like(prompt))
    new = out[0, prompt.shape[1]:].tolist()
    same = new == g["tokens"]
    print(f"hf_gen: greedy generate {len(new)} tokens, lmforge {len(g['tokens'])}: "
          f"{'identical' if same else 'DIFFERENT'}\n  hf      {new}\n  lmforge {g['tokens']}")
    return ok and same


def cases(fx):
    return json.load(open(os.path.join(fx, "hf_tok_expected.json")))


def check_tokenizer(fx):
    from transformers import AutoTokenizer, LlamaTokenizer
    folder = os.path.join(fx, "hf_tok")
    ok = True
    for label, tok in (("LlamaTokenizer", LlamaTokenizer.from_pretrained(folder)),
                       ("AutoTokenizer", AutoTokenizer.from_pretrained(folder))):
        for c in cases(fx):
            got = tok(c["text"]).input_ids
            same = got == c["ids"]
            ok = ok and same
            print(f"{label} ({type(tok).__name__}) {'==' if same else '!='} lmforge: {c['text']}"
                  + ("" if same else f"\n  hf      {got}\n  lmforge {c['ids']}"))
        if tok.decode(cases(fx)[0]["ids"], skip_special_tokens=True) != cases(fx)[0]["text"]:
            print(f"{label}: decode does not give the text back")
            ok = False
    return ok


def check_spm(fx):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(fx, "hf_tok", "tokenizer.model"))
    cfg = json.load(open(os.path.join(fx, "hf_tok", "config.json")))
    ok = True
    for c in cases(fx):
        got = [cfg["bos_token_id"]] + sp.encode(c["text"])
        same = got == c["ids"]
        ok = ok and same
        print(f"sentencepiece {spm.__version__} {'==' if same else '!='} lmforge: {c['text']}"
              + ("" if same else f"\n  spm     {got}\n  lmforge {c['ids']}"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=sorted(NEEDS), required=True)
    ap.add_argument("--fixture", help="folder the fixture writer filled")
    ap.add_argument("--work", help="folder for the fixture (written with --export-test)")
    ap.add_argument("--export-test", help="export_test binary: writes the fixture into --work")
    a = ap.parse_args()
    skip_unless_importable(a.part)  # before any work, so a skip costs nothing
    fx = a.fixture or a.work
    if not fx:
        ap.error("give --fixture, or --work with --export-test")
    if a.export_test:
        env = dict(os.environ, LM_EXPORT_FIXTURE_DIR=fx)
        subprocess.run([a.export_test, "--gtest_filter=ExportTest.DISABLED_WriteTransformersFixture",
                        "--gtest_also_run_disabled_tests"], check=True, env=env, stdout=subprocess.DEVNULL)
    ok = {"model": check_model, "tokenizer": check_tokenizer, "spm": check_spm}[a.part](fx)
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
