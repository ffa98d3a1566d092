#!/usr/bin/python3
"""Turns bench/run.sh's JSON lines into results/<date>-<label>.json and a Markdown table.

MFU = tokens/s x FLOPs per token / the matmul ceiling measured at the start of the same run
(train: 6N + 12·L·T·d; forward: a third of it, 2N + 4·L·T·d). Medians over the rounds.
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
    runs = [r for r in rows if r.get("impl") in ("lmforge", "peer") and r.get("mode") in ("train", "forward")]
    extras = [r for r in rows if not r.get("meta") and r not in runs and r is not peak]
    ceil = {"fp32": peak["fp32_flops"], "bf16": peak["bf16_flops"]}
    table = []
    for dtype in ("fp32", "bf16"):
        for mode in ("train", "forward"):
            got = {}
            for impl in ("lmforge", "peer"):
                rs = [r for r in runs if r["impl"] == impl and r["dtype"] == dtype and r["mode"] == mode]
                if not rs:
                    continue
                tps = [r["tokens_per_s"] for r in rs]
                fpt = rs[0]["flops_per_token"] / (3.0 if mode == "forward" else 1.0)
                med = statistics.median(tps)
                got[impl] = dict(tokens_per_s=med, all=tps, spread=(max(tps) - min(tps)) / med if med else 0,
                                 gflops=med * fpt / 1e9, mfu=med * fpt / ceil[dtype],
                                 peak_rss_mb=max(r["peak_rss_mb"] for r in rs),
                                 final_loss=rs[-1]["final_loss"], first_loss=rs[-1]["first_loss"])
            if got:
                ratio = got["lmforge"]["tokens_per_s"] / got["peer"]["tokens_per_s"] if len(got) == 2 else None
                table.append(dict(dtype=dtype, mode=mode, ratio=ratio, **got))
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
          "| dtype | step | lmforge tok/s | peer tok/s | lmforge / peer | lmforge MFU | peer MFU | lmforge RSS MB | peer RSS MB | spread l/p |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        l, p = t.get("lmforge"), t.get("peer")
        f = lambda d, k, fmt: (fmt % d[k]) if d else "–"
        md.append(f"| {t['dtype']} | {t['mode']} | {f(l, 'tokens_per_s', '%.0f')} | {f(p, 'tokens_per_s', '%.0f')} | "
                  f"{('%.2f×' % t['ratio']) if t['ratio'] else '–'} | "
                  f"{(('%.1f%%' % (100 * l['mfu'])) if l else '–')} | {(('%.1f%%' % (100 * p['mfu'])) if p else '–')} | "
                  f"{f(l, 'peak_rss_mb', '%.0f')} | {f(p, 'peak_rss_mb', '%.0f')} | "
                  f"{(('%.0f%%' % (100 * l['spread'])) if l else '–')} / {(('%.0f%%' % (100 * p['spread'])) if p else '–')} |")
    for e in extras:
        md.append("")
        md.append(f"- {e.get('bench', e.get('impl', 'extra'))}: " + ", ".join(f"{k} {v}" for k, v in e.items()))
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
