#!/usr/bin/env python3
"""`lmeval nll` on HF checkpoint folders equals transformers on the same raw text (issue 37 part 4).

Two tiny random checkpoints with different real vocabularies (tiny_hf.py): a Llama-3.2-shaped one
(128,256 tokens, BOS) and a Qwen2-shaped one (151,936 tokens, no BOS). On the same raw text (Bangla
and English lines of the bundled sample), `lmeval nll --run LLAMA --compare QWEN --docs harness`
scores each model with its own tokenizer. transformers scores the same documents independently:
each line tokenized by the HF tokenizer, the harness's rolling windows (lm_eval.utils) after the
start token (BOS when the tokenizer adds one, else EOS), fp32 forward, per-token log-softmax.

Checked: each model's total nats within 0.1% of transformers' (and tokens equal); bits per raw text
byte = nats / ln 2 / UTF-8 bytes of the lines, the same byte count for both models; compare - model
as printed. Then `lmeval mc --run LLAMA --compare QWEN` on fixture piqa_bn / bangla_mmlu items: the
compare model's metrics equal `lmeval mc --run QWEN` alone, and McNemar's discordant counts equal
those of the two runs' per-item predictions (the per-item equality of each model with the harness
is bangla_harness_check.py's). `--break tokens` scores one token fewer on the transformers side
(must go red).
Exit 0 equal, 1 different, 77 skipped (no transformers / lm_eval or no vocabulary).
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_hf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sample_lines(n_each):
    lines = []
    for name, bundled in (("bn_2000.txt", "bn_heldout.txt.gz"), ("en_2000.txt", "en_heldout.txt.gz")):
        path = os.path.join(REPO, "..", "shared", "data", "sample", name)
        if not os.path.isfile(path):  # a clone without ../shared: the repo's own held-out sample
            path = os.path.join(REPO, "data", "sample", bundled)
        got = 0
        for line in (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8"):
            line = line.rstrip("\n").rstrip("\r")
            if 20 <= len(line) <= 400:
                lines.append(line)
                got += 1
            if got == n_each:
                break
    return lines


def transformers_nll(hf_dir, lines, seq_len, drop_last=False):
    """Sum of -log p over every document's tokens (harness rolling windows), token count."""
    import torch
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with_bos = tok("a")["input_ids"][0] == tok.bos_token_id
    prefix = tok.bos_token_id if with_bos else tok.eos_token_id
    total, tokens = 0.0, 0
    for line in lines:
        ids = tok(line, add_special_tokens=False)["input_ids"]
        for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(ids, prefix, seq_len, 1)):
            if drop_last:
                cont = cont[:-1]
                drop_last = False
            inp = torch.tensor([(ctx + cont)[:-1]])
            with torch.no_grad():
                logp = torch.log_softmax(model(inp).logits[0].float(), -1)
            n = len(cont)
            tgt = torch.tensor(cont)
            total -= logp[-n:].gather(1, tgt[:, None]).sum().item()
            tokens += n
    return total, tokens


def check_mc_compare(lmeval, llama, qwen, work):
    import bangla_harness_check as bhc
    tasks = ["piqa_bn", "bangla_mmlu"]
    bhc.write_fixtures(os.path.join(work, "bench"), tasks, 12, "")

    def mc(run, extra, name):
        out, samples = os.path.join(work, name + ".json"), os.path.join(work, name + ".jsonl")
        subprocess.run([lmeval, "mc", "--run", run, "--data-dir", os.path.join(work, "bench"), "--tasks",
                        ",".join(tasks), "--out", out, "--log-samples", samples, "-q"] + extra, check=True,
                       stdout=subprocess.DEVNULL)
        preds = {}
        for line in open(samples, encoding="utf-8"):
            s = json.loads(line)
            preds.setdefault(s["task"], []).append(s["pred"] == s["gold"])
        return json.load(open(out)), preds
    both, mine = mc(llama, ["--compare", qwen], "mc_both")
    alone, theirs = mc(qwen, [], "mc_qwen")
    ok = both["compare"]["kind_of_folder"] == "hf"
    for t in tasks:
        tj = both["tasks"][t]
        only_model = sum(a and not b for a, b in zip(mine[t], theirs[t]))
        only_cmp = sum(b and not a for a, b in zip(mine[t], theirs[t]))
        p = tj["paired_compare_acc"]
        good = (tj["compare"]["acc"] == alone["tasks"][t]["acc"] and tj["compare"]["n"] == alone["tasks"][t]["n"]
                and (p["model_only_correct"], p["compare_only_correct"]) == (only_model, only_cmp))
        print(f"mc --compare {t}: model acc {tj['acc']:.4f}, compare acc {tj['compare']['acc']:.4f} (alone "
              f"{alone['tasks'][t]['acc']:.4f}), only model / only compare right {p['model_only_correct']}/{p['compare_only_correct']}, p {p['p_value']:.3g} "
              f"{'ok' if good else 'DIFFERENT'}")
        ok = ok and good
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lmeval", required=True)
    ap.add_argument("--lines", type=int, default=6, help="lines of each language")
    ap.add_argument("--seq-len", type=int, default=64, help="short: long lines take several rolling windows")
    ap.add_argument("--break", dest="broken", default="", choices=["", "tokens"])
    a = ap.parse_args()
    tiny_hf.skip_unless_ready(("torch", "transformers", "lm_eval"))
    work = tempfile.mkdtemp(prefix="lm_hf_nll.")
    llama = tiny_hf.make_llama3(os.path.join(work, "llama3"))
    qwen = tiny_hf.make_qwen2(os.path.join(work, "qwen2"))
    lines = sample_lines(a.lines)
    text = os.path.join(work, "text.txt")
    open(text, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    out = os.path.join(work, "nll.json")
    subprocess.run([a.lmeval, "nll", "--dtype", "fp32", "--run", llama, "--compare", qwen, "--text", text, "--docs", "harness",
                    "--seq-len", str(a.seq_len), "--twin", "--seed", "3", "--out", out, "-q"], check=True)
    r = json.load(open(out))
    lang = r["languages"]["text"]
    raw_bytes = sum(len(l.encode("utf-8")) for l in lines)
    ok = lang.get("text_bytes") == raw_bytes
    print(f"raw text: {len(lines)} lines, {raw_bytes} UTF-8 bytes; lmeval text_bytes {lang.get('text_bytes')}")
    for name, hf, ours in (("llama3", llama, lang["model"]), ("qwen2", qwen, lang["compare"])):
        ref, n = transformers_nll(hf, lines, a.seq_len, drop_last=a.broken == "tokens" and name == "llama3")
        rel = abs(ours["sum_nats"] - ref) / ref
        bpb = ref / math.log(2) / raw_bytes
        good = rel <= 1e-3 and ours["tokens"] == n and abs(ours["bits_per_text_byte"] - bpb) <= 1e-3 * bpb
        print(f"{name}: lmeval {ours['sum_nats']:.4f} nats / {ours['tokens']} tokens, transformers {ref:.4f} / {n}: "
              f"rel diff {rel:.2e}; {ours['nats_per_token']:.4f} nats/token, {ours['bits_per_text_byte']:.4f} "
              f"bits/byte (transformers {bpb:.4f}) {'ok' if good else 'DIFFERENT'}")
        ok = ok and good
    ok = check_mc_compare(a.lmeval, llama, qwen, work) and ok
    d = lang["compare_minus_model"]["bits_per_text_byte"]
    want = lang["compare"]["bits_per_text_byte"] - lang["model"]["bits_per_text_byte"]
    ok = ok and abs(d - want) < 1e-9 and "twin" in lang and r["compare"]["kind_of_folder"] == "hf"
    print(f"compare - model: {d:+.4f} bits/byte; twin (seed 3) {lang['twin']['nats_per_token']:.4f} nats/token")
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
