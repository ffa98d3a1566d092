#!/usr/bin/env python3
"""Aggregates a chrome trace written by `train_step_bench --profile FILE` (LibTorch's legacy
autograd profiler) into self time per op name, so docs/performance.md can say what dominates a
step. Self time = an event's duration minus its direct children's (events nested on one thread).

    python3 bench/profile_summary.py trace.json [--steps N] [--top 30]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="divide totals by this many steps")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--shapes", action="store_true", help="group by op and input shapes")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = [e for e in json.load(f) if e.get("ph") == "X"]
    by_tid = collections.defaultdict(list)
    for e in events:
        by_tid[e.get("tid")].append(e)
    self_us = collections.Counter()
    calls = collections.Counter()
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # (end, name, index)
        child = [0.0] * len(evs)
        for i, e in enumerate(evs):
            while stack and stack[-1][0] <= e["ts"]:
                stack.pop()
            if stack:
                child[stack[-1][2]] += e["dur"]
            stack.append((e["ts"] + e["dur"], e["name"], i))
        for i, e in enumerate(evs):
            key = e["name"]
            if a.shapes:
                key += " " + json.dumps(e.get("args", {}).get("shapes", [])).replace(" ", "")
            self_us[key] += e["dur"] - child[i]
            calls[key] += 1
    total = sum(self_us.values())
    print(f"total self time {total / 1e3 / a.steps:.1f} ms per step ({a.steps} steps)")
    w = 90 if a.shapes else 48
    print(f"{'op':<{w}} {'ms/step':>9} {'share':>7} {'calls/step':>10}")
    for name, us in self_us.most_common(a.top):
        print(f"{name[:w]:<{w}} {us / 1e3 / a.steps:9.2f} {us / total:7.1%} {calls[name] / a.steps:10.1f}")


if __name__ == "__main__":
    main()
