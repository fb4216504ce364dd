#!/usr/bin/python3
"""Drafters side by side on the bundled deltacoder (issue: the parallel drafter against the
autoregressive one): none, deltacoder-draft (one forward per draft token) and
deltacoder-dspark (one forward per round; optionally with its confidence cut), held-out Python
prompts, real acceptance. Prints figures; asserts nothing.

Every figure comes from `deltaserve spec calibrate` runs taken in turn, `--repeats` times:
drafter A, drafter B, ... then again. Each run measures its own no-speculation pass (K 0)
first; the speedup of a (drafter, K) is its median tok/s over the median of *all* the K 0
passes of the session, so every drafter is divided by the same base. (This machine's speed
drifts by tens of percent within minutes: a speedup against each run's own base compared two
drafters through two different bases.)

  bench/spec_decode/drafters.py [--k 1,2,4,7] [--concurrency 1,4] [--modes greedy,probabilistic]
                         [--thresholds 0.3] [--repeats 3] [--max-tokens 96] [--threads 2]
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def calibrate(ds, draft, ks, mode, conc, threads, max_tokens, prompts, threshold):
    args = [ds, "spec", "calibrate", "--model", os.path.join(ROOT, "models/deltacoder"),
            "--draft-model", os.path.join(ROOT, "models", draft), "--k", ks, "--prompts", prompts,
            "--max-tokens", str(max_tokens), "--concurrency", str(conc), "--threads", str(threads),
            "--out", "/dev/null"]
    if mode == "greedy":
        args += ["--temperature", "0", "--spec-method", "greedy", "--draft-sample", "greedy"]
    else:
        args += ["--temperature", "0.7", "--spec-method", "block", "--draft-sample", "probabilistic"]
    if threshold:
        args += ["--draft-confidence-threshold", str(threshold)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        k = int(f[0])
        if k == 0:
            rows[0] = {"tok_s": float(f[4])}
        else:
            rows[k] = {"al": float(f[1]), "tok_s": float(f[4]), "draft_ms": float(f[6]), "drafted": float(f[7])}
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", default="1,2,4,7")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--modes", default="greedy,probabilistic")
    ap.add_argument("--thresholds", default="0.3", help="confidence cuts of the parallel drafter also run (comma list; empty: none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    ds = os.path.join(ROOT, "build/deltaserve")
    prompts = os.path.join(ROOT, "out/heldout_prompts.jsonl")
    os.makedirs(os.path.dirname(prompts), exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/spec_decode/heldout_prompts.py"), "--out", prompts],
                   check=True, capture_output=True)
    ks = [int(k) for k in a.k.split(",")]
    drafters = [("deltacoder-draft", 0.0), ("deltacoder-dspark", 0.0)]
    drafters += [("deltacoder-dspark", float(t)) for t in a.thresholds.split(",") if t]
    with open("/proc/loadavg") as f:
        print(f"machine: {os.cpu_count()} cores, load {' '.join(f.read().split()[:3])}; "
              f"{a.repeats} runs per drafter in turn; speedup = median tok/s / median of every K 0 pass")
    for conc in [int(c) for c in a.concurrency.split(",")]:
        for mode in a.modes.split(","):
            runs = {d: [] for d in drafters}
            base = []
            for _ in range(a.repeats):
                for d in drafters:
                    r = calibrate(ds, d[0], a.k, mode, conc, a.threads, a.max_tokens, prompts, d[1])
                    base.append(r[0]["tok_s"])
                    runs[d].append(r)
            b = statistics.median(base)
            print(f"\n=== {mode}, concurrency {conc}: no speculation {b:.0f} tok/s "
                  f"(median of {len(base)} passes, {min(base):.0f} .. {max(base):.0f})")
            print(f"{'drafter':<28}" + "".join(f"{'K ' + str(k) + ' AL / speedup / drafted / draft ms':>42}" for k in ks))
            for d in drafters:
                name = d[0] + (f" cut {d[1]:g}" if d[1] else "")
                cells = []
                for k in ks:
                    al = statistics.median(r[k]["al"] for r in runs[d])
                    tok = statistics.median(r[k]["tok_s"] for r in runs[d])
                    drafted = statistics.median(r[k]["drafted"] for r in runs[d])
                    ms = statistics.median(r[k]["draft_ms"] for r in runs[d])
                    cells.append(f"{al:.2f} / {tok / b:.2f} / {drafted:.2f} / {ms:.3f}")
                print(f"{name:<28}" + "".join(f"{c:>42}" for c in cells))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
