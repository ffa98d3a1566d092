"""The table of bench/eval_speed.sh: tokens/s per round and their ratio to the training round's,
and each variant's scores against fp32's (NLL relative change; MC predictions that move).
    python bench/eval_speed_table.py RESULTS.jsonl WORK_DIR
"""
import json
import statistics
import sys
from collections import defaultdict


def mc_samples(path):
    out = {}
    for line in open(path):
        s = json.loads(line)
        out[(s["task"], s["id"])] = s
    return out


def compare_mc(a, b):
    """Predictions (acc, acc_norm) that differ and the largest |log-prob| difference, a against b."""
    moved, worst, items = 0, 0.0, 0
    for key, sa in a.items():
        sb = b[key]
        items += 1
        moved += (sa["pred"] != sb["pred"]) + (sa["pred_norm"] != sb["pred_norm"])
        for ca, cb in zip(sa["choices"], sb["choices"]):
            worst = max(worst, abs(ca["logprob"] - cb["logprob"]))
    return items, moved, worst


def main():
    rows = [json.loads(l) for l in open(sys.argv[1])]
    work = sys.argv[2]
    train = {r["round"]: r["tokens_per_s"] for r in rows if r["kind"] == "train"}
    print("| round | command | --dtype (scored in) | tokens | wall s | tokens/s | training tokens/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = defaultdict(list)
    for r in rows:
        if r["kind"] == "train":
            continue
        t = train[r["round"]]
        ratio = r["tokens_per_s"] / t
        ratios[(r["kind"], r["variant"])].append(ratio)
        print(f"| {r['round']} | {r['kind']} | {r['variant']} ({r.get('dtype', '?')}) | {r['tokens']:,} | {r['wall_s']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {t:,.0f} | {ratio:.2f}x |")
    print()
    print("| command | dtype | median ratio to training |")
    print("|---|---|---|")
    for (k, v), xs in sorted(ratios.items()):
        print(f"| {k} | {v} | {statistics.median(xs):.2f}x |")
    print()
    base = {r["round"]: r for r in rows if r["kind"] == "nll" and r["variant"] == "fp32"}
    for r in rows:
        if r["kind"] == "nll" and r["variant"] != "fp32" and r["round"] in base:
            b = base[r["round"]]
            rel = (r["sum_nats"] - b["sum_nats"]) / b["sum_nats"]
            print(f"- nll {r['variant']} round {r['round']}: sum of nats {r['sum_nats']:.3f} vs fp32 "
                  f"{b['sum_nats']:.3f}: {rel * 100:+.4f}% (limit 0.1%)")
    for r in rows:
        if r["kind"] == "mc" and r["variant"] != "fp32":
            a = mc_samples(f"{work}/mc-{r['variant']}-{r['round']}.jsonl")
            b = mc_samples(f"{work}/mc-fp32-{r['round']}.jsonl")
            items, moved, worst = compare_mc(a, b)
            print(f"- mc {r['variant']} round {r['round']}: {moved} of {2 * items} predictions (acc, acc_norm "
                  f"of {items} items) differ from fp32; largest |log-prob difference| {worst:.4f}")


if __name__ == "__main__":
    main()
