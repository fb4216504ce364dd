#!/usr/bin/env python3
"""Speculation on the agentic-edit workload: none, draft model, suffix, auto, side by side.

For each configuration it starts `deltaserve serve` on the bundled model, runs
`deltaserve bench --synthetic agentic-edit` (real held-out files, closed-loop chat: acceptance is
what the model really writes, no synthetic AL) at each concurrency, stops the server, and reads
each point's results.json. Prints one table: real acceptance length, output tok/s, p90
interactivity (1 / ITL p90) and the ratios to `none` at the same concurrency.

  python3 bench/spec_decode/agentic_edit_table.py [--concurrency 1,4,16] [--duration 30] [--configs none,suffix,...]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "deltaserve")
MODEL = os.path.join(ROOT, "models", "deltacoder")
DRAFT = os.path.join(ROOT, "models", "deltacoder-draft")

CONFIGS = {
    "none": [],
    "draft": ["--draft-model", DRAFT, "--num-speculative-tokens", "3", "--state-rollback", "replay"],
    "suffix": ["--spec-method", "suffix", "--num-speculative-tokens", "8", "--state-rollback", "replay"],
    "auto": ["--spec-method", "suffix", "--num-speculative-tokens", "auto", "--state-rollback", "replay"],
    "auto-draft": ["--draft-model", DRAFT, "--num-speculative-tokens", "auto", "--state-rollback", "replay"],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, proc, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.25)
    raise RuntimeError("server did not become healthy")


def run_config(name, args, opts, out_root):
    port = free_port()
    log = open(os.path.join(out_root, name + ".server.log"), "w")
    cmd = [CLI, "serve", "--model", MODEL, "--port", str(port), "--max-num-seqs", str(max(opts.concurrency)),
           "--max-model-len", "4096", "--threads", str(opts.threads)] + args
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, proc)
        out = os.path.join(out_root, name)
        bench = [CLI, "bench", "--url", "http://127.0.0.1:%d" % port, "--synthetic", "agentic-edit",
                 "--edit-corpus", os.path.join(ROOT, "tools", "train", "corpus.json"),
                 "--concurrency", ",".join(map(str, opts.concurrency)), "--duration", str(opts.duration),
                 "--edit-turns", str(opts.turns), "--edit-max-tokens", str(opts.max_tokens),
                 "--warmup-requests-per-lane", "1", "--progress-interval", "0", "--min-observations", "4",
                 "--seed", str(opts.seed), "--out", out]
        subprocess.run(bench, check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(out_root, name + ".bench.log"), "w"))
        rows = {}
        for c in opts.concurrency:
            r = json.load(open(os.path.join(out, "c%d" % c, "results.json")))
            m = r["metrics"]
            al = m.get("spec_acceptance_length")
            rows[c] = {
                "al": al["value"] if al else None,
                "tok_s": m["throughput"]["output_tok_s"],
                "inter_p90": m["interactivity_tok_s"]["p90"],
                "completed": m["requests"]["completed"],
                "valid": r["validity"]["valid"],
            }
        return rows
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--configs", default="none,draft,suffix,auto,auto-draft")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "agentic-edit-table"))
    opts = ap.parse_args()
    opts.concurrency = [int(x) for x in opts.concurrency.split(",")]
    os.makedirs(opts.out, exist_ok=True)
    results = {}
    for name in opts.configs.split(","):
        print("running %s ..." % name, file=sys.stderr, flush=True)
        results[name] = run_config(name, CONFIGS[name], opts, opts.out)
    json.dump(results, open(os.path.join(opts.out, "table.json"), "w"), indent=1)
    print("%-11s %5s %6s %10s %8s %12s %8s %6s" % ("config", "conc", "AL", "out tok/s", "x none", "inter. p90", "x none", "valid"))
    for name, rows in results.items():
        for c, r in rows.items():
            base = results.get("none", {}).get(c)
            ratio = r["tok_s"] / base["tok_s"] if base and base["tok_s"] else float("nan")
            iratio = r["inter_p90"] / base["inter_p90"] if base and base["inter_p90"] else float("nan")
            print("%-11s %5d %6s %10.1f %8.2f %12.1f %8.2f %6s" % (
                name, c, "%.2f" % r["al"] if r["al"] else "-", r["tok_s"], ratio, r["inter_p90"] or 0, iratio,
                "yes" if r["valid"] else "NO"))


if __name__ == "__main__":
    main()
