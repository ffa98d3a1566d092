#!/usr/bin/env python3
"""Export back of runs continued from HF checkpoints (issue 37 part 5), checked with the real
clients: transformers loads `lmtrain export --format hf`, llama.cpp (llama-cpp-python) loads
`lmtrain export --format gguf`.

usage: cpt_export_check.py --lmtrain BIN --lmeval BIN --work DIR [--case NAME ...] [--perturb]

Cases (tiny random checkpoints from transformers' configs + save_pretrained, the real vocabularies
of ~/.cache/lmforge/vocabs, each imported, prepared on data/sample and fitted a few steps):
  llama3      Llama-3.2-shaped: tied, GQA, explicit head_dim 32 (hidden 64 / 4 heads = 16), llama3
              rope scaling; Llama 3's 128,256-token vocabulary.
  qwen2       Qwen2-shaped: q/k/v biases, untied, GQA; Qwen2's vocabulary (151,665 ids in 151,936 rows).
  llama3-ext  llama3 with an extended tokenizer: GPT-4o's split (\\p{M} inside words) and merges +
              tokens for frequent Bangla words appended from id 128256 (rows grown to match).
  llama2      Llama-2-shaped (untied, default rope) with Llama 2's SentencePiece tokenizer.model.
  llama2-ext  llama2 extended the way a user does it: `lmtrain tokenizer --extend` (2,000 new pieces
              learned on data/sample, scored after Llama 2's own), `lmtrain extend-model`, then fitted.
  marks       llama3-ext's tokenizer with Llama 3's split plus \\p{M} (the contract's llama3-marks):
              the HF export works, the GGUF export must refuse and name the fix.
Checks per case:
  hf    AutoTokenizer gives lmforge's ids on every Bangla/English line; AutoModelForCausalLM (fp32)
        per-token NLL equals `lmeval nll`'s within 1e-4 nats; greedy generate equals `lmeval sample`.
  gguf  (f32, f32 KV cache) llama.cpp tokenizes every line to lmforge's ids, adds BOS as the run's
        framing does, its NLL per token on lmforge's windows equals `lmeval nll`'s within 1e-4, and
        its greedy decode from 3 prompts equals `lmeval sample` token for token.
--perturb checks a broken copy of each GGUF instead (perturb_gguf: llama3 without rope_freqs,
qwen2 with zero biases, llama3-ext with llama.cpp's own "gpt-4o" pre-tokenizer): checks must go red.
Exit 0: all pass; 1: a check failed; 77: skipped (no transformers / llama_cpp / vocabularies).
"""
import argparse
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCABS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lmforge", "vocabs")
LINES = 150          # lines per language for the tokenizer checks
GREEDY = 20          # new tokens per prompt
PROMPTS = ["বাংলা ভাষা", "The city of", "ঢাকা বিশ্ববিদ্যালয়ের"]
LLAMA3_MARKS = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{M}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def need_modules():
    for mod in ("torch", "transformers", "tokenizers", "llama_cpp", "gguf"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: {sys.executable} has no {mod} ({e})")
            sys.exit(77)
    for v in ("llama3", "qwen2", "llama2", "llama3-gpt4o"):
        if not os.path.exists(os.path.join(VOCABS, v, "tokenizer.json")):
            print(f"SKIP: no {VOCABS}/{v} (tests/tokenizer/make_hf_vocabs.py)")
            sys.exit(77)


def texts():
    """The bundled held-out lines, then ../shared/data/sample/{bn,en}_2000.txt when present."""
    out = {}
    for lang in ("bn", "en"):
        p = os.path.join(REPO, "data", "sample", f"{lang}_heldout.txt.gz")
        rows = [" ".join(l.split())[:300] for l in gzip.open(p, "rt", encoding="utf-8")]
        shared = os.path.join(REPO, "..", "shared", "data", "sample", f"{lang}_2000.txt")
        if os.path.exists(shared):
            rows += [" ".join(l.split())[:300] for l in open(shared, encoding="utf-8")]
        out[lang] = [r for r in rows if r][:LINES]
    return out


def extended_tokenizer(pattern, n_words=24):
    """Llama 3's tokenizer.json with `pattern` as its split and merges + tokens for the most frequent
    Bangla words (chains: the base pieces merged left to right), new ids from 128256."""
    from tokenizers import Tokenizer
    j = json.load(open(os.path.join(VOCABS, "llama3", "tokenizer.json"), encoding="utf-8"))
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    base = Tokenizer.from_str(json.dumps(j))
    counts = collections.Counter()
    p = os.path.join(REPO, "data", "sample", "bn_news.txt.gz")
    for i, line in enumerate(gzip.open(p, "rt", encoding="utf-8")):
        if i == 3000:
            break
        for piece, _ in base.pre_tokenizer.pre_tokenize_str(line.strip()):
            counts[piece] += 1
    vocab, merges = j["model"]["vocab"], j["model"]["merges"]
    next_id = 128256
    added = 0
    for piece, _ in counts.most_common(400):
        toks = [t.value for t in base.model.tokenize(piece)]
        if len(toks) < 3:
            continue
        cur = toks[0]
        for t in toks[1:]:
            merges.append(f"{cur} {t}")
            cur += t
            if cur not in vocab:
                vocab[cur] = next_id
                next_id += 1
        added += 1
        if added == n_words:
            break
    return j, next_id


def make_checkpoint(case, out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    vocab_dir = {"qwen2": "qwen2", "llama2": "llama2", "llama2-ext": "llama2"}.get(case, "llama3")
    os.makedirs(out, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        if os.path.exists(os.path.join(VOCABS, vocab_dir, f)):
            shutil.copy(os.path.join(VOCABS, vocab_dir, f), os.path.join(out, f))
    rows = {"llama3": 128256, "qwen2": 151936, "llama2": 32000, "llama2-ext": 32000}.get(case)
    if case in ("llama3-ext", "marks"):
        pattern = json.load(open(os.path.join(VOCABS, "llama3-gpt4o", "tokenizer.json")))["pre_tokenizer"][
            "pretokenizers"][0]["pattern"]["Regex"] if case == "llama3-ext" else LLAMA3_MARKS
        j, rows = extended_tokenizer(pattern)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
    common = dict(vocab_size=rows, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
    if case == "qwen2":
        cfg = Qwen2Config(**common, tie_word_embeddings=False, rope_theta=1000000.0, bos_token_id=151643,
                          eos_token_id=151643, use_sliding_window=False)
        model = Qwen2ForCausalLM(cfg)
    elif case in ("llama2", "llama2-ext"):
        cfg = LlamaConfig(**common, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, rope_theta=10000.0)
        model = LlamaForCausalLM(cfg)
    else:
        cfg = LlamaConfig(**common, head_dim=32, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
                          rope_theta=500000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
        model = LlamaForCausalLM(cfg)
    model.to(torch.bfloat16).save_pretrained(out, max_shard_size="10MB")
    return rows


def run(cmd, check=True):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0 and check:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def lmforge_docs(a, runp, lines, work, tag):
    """lmforge's framed ids of each line (from `lmeval nll --text --dump-tokens`) and the windows."""
    txt, dump = os.path.join(work, tag + ".txt"), os.path.join(work, tag + ".dump.json")
    with open(txt, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    run([a.lmeval, "nll", "--dtype", "fp32", "--run", runp, "--text", txt, "--dump-tokens", dump, "--out", os.path.join(work, tag + ".nll.json"), "-q"])
    wins = next(iter(json.load(open(dump))["languages"].values()))
    stream = list(wins[0]["tokens"])
    for w in wins[1:]:
        stream += w["tokens"][1:]
    return stream, wins


def split_docs(stream, bos, eos):
    docs, cur = [], []
    for t in stream:
        cur.append(t)
        if t == eos:
            docs.append(cur)
            cur = []
    # the text's ids: without the framing's BOS and EOS
    return [d[1:-1] if bos is not None and d[:1] == [bos] else d[:-1] for d in docs]


class Checks:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def check(self, ok, msg):
        print(("ok   " if ok else "FAIL ") + msg, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def start_ids(s, meta):
    """The token `lmeval sample` put before its prompt (its --json "prefix": bos, eos or none)."""
    return {"bos": [meta["bos_id"]], "eos": [meta["eos_id"]]}.get(s["prefix"], [])


def check_hf(c, a, case, runp, hf, lines, samples, work):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf)
    meta = json.load(open(os.path.join(runp, "tokenizer", "tokenizer.json")))
    bos, eos = (meta["bos_id"] if meta["framing"]["bos"] else None), meta["eos_id"]
    for lang, ls in lines.items():
        stream, _ = lmforge_docs(a, runp, ls, work, f"hf_{lang}")
        ours = split_docs(stream, bos, eos)
        theirs = [tok(x, add_special_tokens=False).input_ids for x in ls]
        framed = tok(ls[0]).input_ids
        same = sum(x == y for x, y in zip(ours, theirs))
        c.check(same == len(ls) and len(ours) == len(ls) and framed[:1] == ([bos] if bos is not None else theirs[0][:1]),
                f"{case} hf: AutoTokenizer ({type(tok).__name__}) ids == lmforge's on {same} of {len(ls)} {lang} lines; "
                f"BOS added as in training: {framed[:1]}")
    m = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    _, wins = lmforge_docs(a, runp, lines["bn"][:6] + lines["en"][:6], work, "hf_nll")
    err, n = 0.0, 0
    with torch.no_grad():
        for w in wins:
            ids = torch.tensor([w["tokens"]])
            lp = torch.log_softmax(m(ids).logits.float()[0, :-1], -1)
            nll = -lp.gather(1, ids[0, 1:, None])[:, 0][w["first_target"] - 1:]
            err = max(err, (nll.double() - torch.tensor(w["nll"], dtype=torch.float64)).abs().max().item())
            n += len(w["nll"])
    # 1e-4: fp32 on both sides (the export is --dtype fp32), only summation order differs.
    c.check(err < 1e-4, f"{case} hf: transformers {transformers.__version__} {type(m).__name__} NLL per token vs "
            f"lmeval nll: max |diff| {err:.2e} nats over {n} tokens (tolerance 1e-4)")
    for p, s in zip(PROMPTS, samples):
        ids = torch.tensor([start_ids(s, meta) + tok(p, add_special_tokens=False).input_ids])
        with torch.no_grad():
            g = m.generate(ids, max_new_tokens=GREEDY, do_sample=False, attention_mask=torch.ones_like(ids),
                           eos_token_id=eos, pad_token_id=eos)
        new = g[0, ids.shape[1]:].tolist()
        c.check(new == s["tokens"] and ids.shape[1] == s["prompt_tokens"],
                f"{case} hf: greedy generate == lmeval sample for {p!r} ({len(new)} tokens)"
                + ("" if new == s["tokens"] else f"\n  hf      {new}\n  lmforge {s['tokens']}"))


def llama(path, vocab_only=False):
    from llama_cpp import Llama
    # f32 KV cache and no flash attention: the cache would otherwise round k and v to f16 (1.2e-4
    # nats seen on the llama3-ext f32 file with the default cache, against lmforge's fp32).
    return Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, logits_all=not vocab_only,
                 vocab_only=vocab_only, verbose=False, type_k=0, type_v=0, flash_attn=False, seed=0)


def check_gguf(c, a, case, runp, gg, lines, samples, work):
    import numpy as np
    meta = json.load(open(os.path.join(runp, "tokenizer", "tokenizer.json")))
    bos, eos = (meta["bos_id"] if meta["framing"]["bos"] else None), meta["eos_id"]
    v = llama(gg, vocab_only=True)
    for lang, ls in lines.items():
        stream, _ = lmforge_docs(a, runp, ls, work, f"gguf_{lang}")
        ours = split_docs(stream, bos, eos)
        theirs = [v.tokenize(x.encode(), add_bos=False, special=False) for x in ls]
        same = sum(x == y for x, y in zip(ours, theirs))
        bad = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), None)
        first_new = {"llama3-ext": 128256, "llama2-ext": 32000}.get(case)
        new = sum(t >= first_new for d in ours for t in d) if first_new and lang == "bn" else None
        c.check(same == len(ls) and len(ours) == len(ls) and new != 0,
                f"{case} gguf: llama.cpp tokenizes {same} of {len(ls)} {lang} lines to lmforge's ids"
                + ("" if new is None else f" ({new} of {sum(map(len, ours))} ids are extension tokens, >= {first_new})")
                + ("" if bad is None else f"\n  first differing line {bad}: llama.cpp {theirs[bad][:16]} lmforge {ours[bad][:16]}"))
    # add_bos_token: llama.cpp's add_special puts BOS first exactly when the run's framing does.
    first = v.tokenize(lines["en"][0].encode(), add_bos=True, special=False)[:1]
    c.check((first == [bos]) == (bos is not None), f"{case} gguf: llama.cpp's add_special starts a prompt with "
            f"{first} (the run's framing: BOS {bos})")
    # NLL per token of llama.cpp on lmforge's own windows (lmeval nll --dump-tokens): the model,
    # the rotary (llama3 factors, head_dim) and the biases all count, not only the argmax.
    _, wins = lmforge_docs(a, runp, lines["bn"][:6] + lines["en"][:6], work, "gguf_nll")
    err, n = 0.0, 0
    for w in wins:
        m = llama(gg)  # a fresh context per window: reset() kept cache cells (llama_decode failed after 256)
        m.eval(w["tokens"])
        z = np.array(m.scores[: len(w["tokens"])], dtype=np.float64)[:-1]
        lp = z - z.max(1, keepdims=True)
        lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
        nll = -lp[np.arange(len(z)), w["tokens"][1:]][w["first_target"] - 1:]
        err = max(err, float(np.abs(nll - np.array(w["nll"])).max()))
        n += len(w["nll"])
    # 1e-4: f32 weights and KV cache on both sides; ggml sums in another order and with its own exp
    # (1.9e-6 seen on llama3-ext, 2.4e-6 on lmforge's own models in docs/export.md). Without
    # rope_freqs.weight (--perturb) the llama3 case was 2.8e-3 off; with an f16 KV cache 1.2e-4.
    c.check(err < 1e-4, f"{case} gguf: llama.cpp NLL per token vs lmeval nll: max |diff| {err:.2e} nats over {n} "
            f"tokens (tolerance 1e-4)")
    for p, s in zip(PROMPTS, samples):
        prompt = start_ids(s, meta) + v.tokenize(p.encode(), add_bos=False, special=False)
        m = llama(gg)
        m.eval(prompt)
        out = []
        for _ in range(GREEDY):
            t = int(np.argmax(m.scores[m.n_tokens - 1]))
            out.append(t)
            if t == eos:
                break
            m.eval([t])
        c.check(out == s["tokens"] and len(prompt) == s["prompt_tokens"],
                f"{case} gguf: llama.cpp greedy decode == lmeval sample for {p!r} ({len(out)} tokens)"
                + ("" if out == s["tokens"] else f"\n  llama.cpp {out}\n  lmforge   {s['tokens']}"))


def perturb_gguf(case, src, dst):
    """A broken copy of a good GGUF (gguf-py, everything else as it is), which the checks must
    catch: llama3: no rope_freqs.weight (plain rope); qwen2: q/k/v biases zeroed; llama3-ext:
    tokenizer.ggml.pre "gpt-4o" (llama.cpp's own, which drops \\p{M} from words)."""
    import gguf
    import numpy as np
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        val = "gpt-4o" if name == "tokenizer.ggml.pre" and case == "llama3-ext" else f.contents()
        vtype = f.types[0]
        w.add_key_value(name, val, vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in r.tensors:
        if case == "llama3" and t.name == "rope_freqs.weight":
            continue
        data = np.zeros_like(t.data) if case == "qwen2" and t.name.endswith(".bias") else t.data
        w.add_tensor(t.name, data, raw_shape=list(reversed([int(x) for x in t.shape])), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_case(c, a, case, lines):
    work = os.path.join(a.work, case)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base, tok, shards, runp = (os.path.join(work, x) for x in ("base", "tok", "shards", "run"))
    rows = make_checkpoint(case, base)
    if case == "llama2-ext":  # the user's flow: extend the tokenizer, grow the checkpoint to it
        run([a.lmtrain, "tokenizer", "--extend", base, "--corpus", os.path.join(REPO, "data", "sample", "corpus.json"),
             "--add", "2000", "--out", tok, "--quiet"])
        run([a.lmtrain, "extend-model", "--hf", base, "--tokenizer", tok, "--out", base + "-ext", "--quiet"])
        base = base + "-ext"
        rows = json.load(open(os.path.join(base, "config.json")))["vocab_size"]
    else:
        run([a.lmtrain, "tokenizer", "--import", base, "--out", tok, "--quiet"])
    run([a.lmtrain, "prepare", "--corpus", os.path.join(REPO, "data", "sample", "corpus.json"), "--tokenizer", tok,
         "--out", shards, "--quiet"])
    run([a.lmtrain, "fit", "--data", shards, "--init-from", base, "--out", runp, "--preset", "tiny", "--steps", a.steps,
         "--micro-batch", "4", "--seq-len", "64", "--lr", "3e-3", "--quiet"])
    print(f"{case}: checkpoint with {rows} rows imported and fitted {a.steps} steps", flush=True)
    samples = [json.loads(run([a.lmeval, "sample", "--run", runp, "--prompt", p, "--max-new-tokens", GREEDY,
                               "--temperature", "0", "--json", "-q"]).stdout.strip().splitlines()[-1]) for p in PROMPTS]
    hf, gg = os.path.join(work, "hf"), os.path.join(work, "model.f32.gguf")
    run([a.lmtrain, "export", "--run", runp, "--out", hf, "--dtype", "fp32", "-q"])
    if not a.perturb:  # --perturb breaks the GGUF only
        check_hf(c, a, case, runp, hf, lines, samples, work)
    r = run([a.lmtrain, "export", "--run", runp, "--format", "gguf", "--gguf-type", "f32", "--out", gg, "-q"],
            check=False)
    if case == "marks":
        msg = r.stderr + r.stdout
        c.check(r.returncode != 0 and not os.path.exists(gg) and "--split gpt-4o" in msg and "llama.cpp" in msg,
                f"marks gguf: refused (exit {r.returncode}, no file written): {msg.strip().splitlines()[-1] if msg.strip() else ''}")
        return
    if r.returncode != 0:
        c.check(False, f"{case} gguf: export failed: {r.stderr.strip()[-1500:]}")
        return
    if a.perturb and case in ("llama3", "qwen2", "llama3-ext"):
        bad = os.path.join(work, "perturbed.gguf")
        perturb_gguf(case, gg, bad)
        gg = bad
    check_gguf(c, a, case, runp, gg, lines, samples, work)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lmtrain", required=True)
    ap.add_argument("--lmeval", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--case", action="append", choices=["llama3", "qwen2", "llama3-ext", "llama2", "llama2-ext", "marks"])
    ap.add_argument("--steps", default="6")
    ap.add_argument("--perturb", action="store_true")
    a = ap.parse_args()
    need_modules()
    c = Checks()
    lines = texts()
    for case in a.case or ["llama3", "qwen2", "llama3-ext", "marks", "llama2", "llama2-ext"]:
        try:
            run_case(c, a, case, lines)
        except Exception as e:  # one case's crash is a failure, the others still run
            c.check(False, f"{case}: {type(e).__name__}: {e}")
    print(f"{c.passed} passed, {c.failed} failed")
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
