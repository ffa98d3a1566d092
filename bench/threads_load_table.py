"""The table of bench/threads_load.sh: per workload, the median of each thread setting's rounds,
the count the default chose, and whether the default is at least as fast as the best fixed count
(within 5 %: two runs of the same count differ by that much on a loaded machine).

    python bench/threads_load_table.py bench/results/<date>-threads-load.jsonl
"""
import json
import statistics
import sys


def main(path):
    rows, meta = [], {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if j.get("meta"):
                meta.update({k: v for k, v in j.items() if k != "meta"})
            else:
                rows.append(j)
    print(f"# Threads under load ({meta.get('date', '?')})\n")
    print(f"{meta.get('cores')} cores ({meta.get('cpu', '?')}), {meta.get('busy')} busy-loop process(es) "
          f"beside; {meta.get('rounds')} rounds, alternating; medians.\n")
    print(f"- before: {meta.get('before', '?')}\n- after: {meta.get('after', '?')}\n")
    print("| workload | unit | default (chosen) | " + " | ".join(
        f"--threads {n}" for n in sorted({r["threads"] for r in rows if r["threads"] > 0})) + " | default vs best fixed |")
    fixed_counts = sorted({r["threads"] for r in rows if r["threads"] > 0})
    print("|" + "---|" * (4 + len(fixed_counts)))
    for w in dict.fromkeys(r["workload"] for r in rows):
        rs = [r for r in rows if r["workload"] == w]
        unit = rs[0]["unit"]
        higher_better = unit.endswith("/s")
        med = {n: statistics.median(r["value"] for r in rs if r["threads"] == n) for n in [0] + fixed_counts}
        chosen = sorted({r["chosen"] for r in rs if r["threads"] == 0 and r["chosen"] is not None})
        best = max(med[n] for n in fixed_counts) if higher_better else min(med[n] for n in fixed_counts)
        ratio = med[0] / best if higher_better else best / med[0]
        verdict = "as fast" if ratio >= 0.95 else "slower"
        print(f"| {w} | {unit} | {med[0]:.1f} ({'/'.join(map(str, chosen)) or '?'}) | "
              + " | ".join(f"{med[n]:.1f}" for n in fixed_counts) + f" | {ratio:.2f} ({verdict}) |")


if __name__ == "__main__":
    main(sys.argv[1])
