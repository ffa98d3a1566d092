#!/usr/bin/env python3
"""Turns bench/run.sh's JSON lines into results/<date>-<label>.json and a Markdown table.

MFU = tokens/s x FLOPs per token / the matmul ceiling measured at the start of the same run
(train: 6N + 12·L·T·d; forward and nll: a third of it, 2N + 4·L·T·d). Medians over the rounds.
"""
import json
import statistics
import sys


def main(lines_path, out_json, out_md):
    rows = [json.loads(l) for l in open(lines_path) if l.strip().startswith("{")]
    meta = {}
    for r in rows:
        if r.get("meta"):
            meta.update({k: v for k, v in r.items() if k != "meta"})
    peak = next(r for r in rows if r.get("mode") == "peak")
    impls = ("lmforge", "peer", "peer-compile")
    runs = [r for r in rows if r.get("impl") in impls and r.get("mode") in ("train", "forward", "nll")]
    extras = [r for r in rows if not r.get("meta") and r not in runs and r is not peak]
    ceil = {"fp32": peak["fp32_flops"], "bf16": peak["bf16_flops"]}
    table = []
    for dtype in ("fp32", "bf16"):
        for mode in ("train", "forward", "nll"):
            got = {}
            for impl in impls:
                rs = [r for r in runs if r["impl"] == impl and r["dtype"] == dtype and r["mode"] == mode]
                if not rs:
                    continue
                tps = [r["tokens_per_s"] for r in rs]
                fpt = rs[0]["flops_per_token"] / (1.0 if mode == "train" else 3.0)
                med = statistics.median(tps)
                got[impl] = dict(tokens_per_s=med, all=tps, spread=(max(tps) - min(tps)) / med if med else 0,
                                 gflops=med * fpt / 1e9, mfu=med * fpt / ceil[dtype],
                                 peak_rss_mb=max(r["peak_rss_mb"] for r in rs),
                                 final_loss=rs[-1]["final_loss"], first_loss=rs[-1]["first_loss"])
            if got:
                ratio = lambda peer: (got["lmforge"]["tokens_per_s"] / got[peer]["tokens_per_s"]
                                      if "lmforge" in got and peer in got else None)
                table.append(dict(dtype=dtype, mode=mode, ratio=ratio("peer"),
                                  ratio_compiled=ratio("peer-compile"), **got))
    shape = runs[0] if runs else {}
    result = dict(meta=meta, peak=peak, shape={k: shape.get(k) for k in ("preset", "batch", "seq", "steps", "threads",
                                                                          "params", "flops_per_token")},
                  table=table, extras=extras, raw=runs)
    with open(out_json, "w") as f:
        json.dump(result, f, indent=1)

    md = [f"### bench/run.sh: {meta.get('label')} ({shape.get('preset')}, {shape.get('params', 0) / 1e6:.2f}M params, "
          f"B×T = {shape.get('batch')}×{shape.get('seq')}, {shape.get('threads')} threads) — {meta.get('date')}",
          "",
          f"Matmul ceiling measured at start ({peak['n']}³): fp32 {peak['fp32_flops'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peak['bf16_flops'] / 1e9:.0f} GFLOP/s. Load average before/after: {meta.get('load_before')} / "
          f"{meta.get('load_after')}. Medians of the rounds; spread = (max-min)/median.",
          "",
          "| dtype | step | lmforge tok/s | eager peer tok/s | compiled peer tok/s | lmforge / eager | lmforge / compiled "
          "| lmforge MFU | eager MFU | compiled MFU | RSS MB l/e/c | spread l/e/c |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        l, p, c = t.get("lmforge"), t.get("peer"), t.get("peer-compile")
        f = lambda d, k, fmt: (fmt % d[k]) if d else "–"
        mfu = lambda d: ("%.1f%%" % (100 * d["mfu"])) if d else "–"
        spread = lambda d: ("%.0f%%" % (100 * d["spread"])) if d else "–"
        rt = lambda r: ("%.2f×" % r) if r else "–"
        md.append(f"| {t['dtype']} | {t['mode']} | {f(l, 'tokens_per_s', '%.0f')} | {f(p, 'tokens_per_s', '%.0f')} | "
                  f"{f(c, 'tokens_per_s', '%.0f')} | {rt(t['ratio'])} | {rt(t['ratio_compiled'])} | "
                  f"{mfu(l)} | {mfu(p)} | {mfu(c)} | "
                  f"{f(l, 'peak_rss_mb', '%.0f')}/{f(p, 'peak_rss_mb', '%.0f')}/{f(c, 'peak_rss_mb', '%.0f')} | "
                  f"{spread(l)} / {spread(p)} / {spread(c)} |")
    by = {(t["dtype"], t["mode"]): t.get("lmforge") for t in table}
    if by.get(("fp32", "nll")) and by.get(("fp32", "train")):
        n, tr = by[("fp32", "nll")]["tokens_per_s"], by[("fp32", "train")]["tokens_per_s"]
        md.append("")
        md.append(f"- evaluation vs training (fp32, the dtype lmeval runs on a CPU): `lmeval nll`'s scorer "
                  f"{n:.0f} tok/s, the training step {tr:.0f} tok/s: {n / tr:.2f}× per token.")
    for e in extras:
        md.append("")
        md.append(f"- {e.get('bench', e.get('impl', 'extra'))}: " + ", ".join(f"{k} {v}" for k, v in e.items()))
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
