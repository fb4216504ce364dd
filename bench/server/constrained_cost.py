#!/usr/bin/env python3
"""What grammar-constrained decoding costs per token, against the decode step it rides on.

Starts `deltaserve serve` on a model, then runs three phases of sequential chat requests (one
at a time, so each step is one sequence's decode): free text, response_format json_schema, and
a forced tool call (tool_choice "required" over three tools), then the two constrained phases
again with other seeds (the grammars' states learnt). For each phase it reads the
server's counters before and after: step seconds, logits-processing seconds (penalties, bias and
the token mask), constrained tokens and generated tokens; and prints the per-token cost of the
constraint and its share of the step.

  python3 bench/server/constrained_cost.py [--model models/deltacoder] [--requests 10]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCHEMA = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "maxLength": 40},
        "line": {"type": "integer"},
        "edits": {"type": "array", "maxItems": 3,
                  "items": {"type": "object",
                            "properties": {"old": {"type": "string", "maxLength": 60},
                                           "new": {"type": "string", "maxLength": 60}},
                            "required": ["old", "new"], "additionalProperties": False}},
        "done": {"type": "boolean"},
    },
    "required": ["file", "line", "edits", "done"],
    "additionalProperties": False,
}

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string", "maxLength": 60}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "parameters": {
        "type": "object", "properties": {"filter": {"type": "string", "maxLength": 30},
                                         "verbose": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "edit_file", "parameters": SCHEMA}},
]

COUNTERS = ["deltaserve:step_seconds_total", "deltaserve:logits_processing_seconds_total",
            "deltaserve:constrained_tokens_total", "deltaserve:generation_tokens_total"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(port, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read().decode()


def counters(port):
    text = http(port, "/metrics")
    out = {}
    for name in COUNTERS:
        total = 0.0
        for m in re.finditer(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M):
            total += float(m.group(2))
        out[name] = total
    return out


def phase(port, name, extra, n, max_tokens, seed0=0):
    before = counters(port)
    t0 = time.time()
    for i in range(n):
        body = {"messages": [{"role": "user", "content": f"Fix the failing test number {i} in src/main.py."}],
                "max_tokens": max_tokens, "temperature": 0.8, "seed": seed0 + i}
        body.update(extra)
        json.loads(http(port, "/v1/chat/completions", body))
    wall = time.time() - t0
    after = counters(port)
    d = {k: after[k] - before[k] for k in COUNTERS}
    gen = d["deltaserve:generation_tokens_total"]
    con = d["deltaserve:constrained_tokens_total"]
    step = d["deltaserve:step_seconds_total"]
    lp = d["deltaserve:logits_processing_seconds_total"]
    row = {"phase": name, "generated": int(gen), "constrained": int(con), "wall_s": round(wall, 2),
           "step_ms_per_token": round(1e3 * step / max(gen, 1), 3),
           "logits_processing_us_per_token": round(1e6 * lp / max(gen, 1), 1),
           "share_of_step": round(lp / step, 4) if step > 0 else 0.0}
    print(json.dumps(row))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/deltacoder"))
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/deltaserve"))
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    port = free_port()
    srv = subprocess.Popen([a.cli, "serve", "--model", a.model, "--port", str(port), "--threads", str(a.threads)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                http(port, "/health")
                break
            except Exception:
                time.sleep(0.1)
        # Warm-up: the first constrained requests compile their grammars and fill the mask caches.
        phase(port, "warmup", {"response_format": {"type": "json_schema", "json_schema": {"name": "e", "schema": SCHEMA}}},
              1, 32)
        rows = [phase(port, "free", {}, a.requests, a.max_tokens),
                phase(port, "json_schema", {"response_format": {"type": "json_schema",
                                                                 "json_schema": {"name": "e", "schema": SCHEMA}}},
                      a.requests, a.max_tokens),
                phase(port, "required_tool", {"tools": TOOLS, "tool_choice": "required"}, a.requests, a.max_tokens)]
        # The same grammars again with other seeds (other outputs): what a grammar costs once its
        # states are learnt, as for an agent that sends the same tools every turn.
        rows += [phase(port, "json_schema_again", {"response_format": {"type": "json_schema",
                                                                       "json_schema": {"name": "e", "schema": SCHEMA}}},
                       a.requests, a.max_tokens, 1000),
                 phase(port, "required_tool_again", {"tools": TOOLS, "tool_choice": "required"}, a.requests,
                       a.max_tokens, 1000)]
        free = rows[0]["step_ms_per_token"]
        for r in rows[1:]:
            print(f"{r['phase']}: {r['logits_processing_us_per_token']} us/token of logits processing, "
                  f"{100 * r['share_of_step']:.2f}% of its step time; step {r['step_ms_per_token']} ms/token "
                  f"vs free {free} ms/token ({r['step_ms_per_token'] / free:.3f}x)")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    sys.exit(main())
