#!/usr/bin/env python3
"""What hostile requests cost the server and the clients beside them (issue 40's measure).

Starts `deltaserve serve` on a model, streams one unrelated request (greedy, ignore_eos) and,
while it runs, sends the hostile classes: 64 concurrent requests with distinct ~400 KB enum
schemas, then each crash class of the hostile review (left recursion, nullable loops, nested
quantifiers, 100,000 nested groups, a schema without a finite value, huge bounds, a long chain
of definitions, a deeply nested body) several times over. It samples the server's resident
memory every 20 ms and prints, as JSON lines:
  - each class's HTTP statuses and its slowest answer;
  - the unrelated stream's inter-token gaps: median before the load, and the largest during it;
  - resident memory idle, at peak, and a few seconds after the load.

  python3 bench/server/hostile_load.py [--model models/deltacoder] [--cli build/deltaserve]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, body, timeout=600):
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, time.time() - t0
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, time.time() - t0
    except Exception:
        return 0, time.time() - t0  # connection refused or reset: the server died


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def schema_body(schema, max_tokens=8):
    return {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": max_tokens, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}


def classes():
    chain = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(14000)}, "$ref": "#/$defs/d0"}
    chain["$defs"]["d14000"] = {"type": "integer"}
    return {
        "left_recursion": schema_body({"$defs": {"expr": {"anyOf": [
            {"type": "object", "properties": {"l": {"$ref": "#/$defs/expr"}}}, {"$ref": "#/$defs/expr"},
            {"type": "integer"}]}}, "$ref": "#/$defs/expr"}),
        "nullable_loops": schema_body({"type": "string", "pattern": "(a*)*(a?)*(|a)+"}),
        "nested_quantifiers": schema_body({"type": "string", "pattern": "((a{1,20}){1,20}){1,20}"}),
        "nested_groups_100k": schema_body({"type": "string", "pattern": "(" * 100000 + "a" + ")" * 100000}),
        "no_finite_value": schema_body({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                                                        "required": ["x"]}}, "$ref": "#/$defs/a"}),
        "huge_bounds": schema_body({"type": "array", "minItems": 1000000000, "items": {"type": "string",
                                                                                        "maxLength": 1000000000}}),
        "defs_chain_14k": schema_body(chain),
        "enum_50k": schema_body({"enum": [f"value-{i}" for i in range(50000)]}),
        "non_object_tool": {"messages": [{"role": "user", "content": "call"}], "max_tokens": 8,
                            "tool_choice": "required",
                            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer"}}}]},
        # json.dumps recurses per level: this body is written as text (post() sends a str as is).
        "body_nested_100k": '{"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "metadata": ' +
                            "[" * 100000 + '"x"' + "]" * 100000 + "}",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/deltacoder"))
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/deltaserve"))
    ap.add_argument("--enum-requests", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=4, help="sends of each crash class")
    a = ap.parse_args()
    port = free_port()
    srv = subprocess.Popen([a.cli, "serve", "--model", a.model, "--port", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
                break
            except Exception:
                time.sleep(0.1)
        idle = rss_mb(srv.pid)
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.time(), rss_mb(srv.pid)))
                time.sleep(0.02)

        # The unrelated client: one greedy stream after another until the load is over; each
        # stream's token arrival times (gaps are taken within a stream, not across two).
        streams = []

        def unrelated():
            while not stop.is_set():
                body = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
                        "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                             data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
                arrivals = []
                streams.append(arrivals)
                with urllib.request.urlopen(req, timeout=900) as r:
                    for line in r:
                        if line.startswith(b"data: ") and b"[DONE]" not in line:
                            arrivals.append(time.time())

        threading.Thread(target=sample, daemon=True).start()
        stream = threading.Thread(target=unrelated, daemon=True)
        stream.start()
        time.sleep(3)  # the stream's quiet pace first
        load_start = time.time()
        results = {}

        def run(name, body):
            status, secs = post(port, body)
            results.setdefault(name, []).append((status, secs))

        enum_threads = []
        for k in range(a.enum_requests):
            body = schema_body({"enum": [f"r{k}-choice-{i:06d}" for i in range(25000)]})  # ~400 KB each
            enum_threads.append(threading.Thread(target=run, args=("enum_400kb_x64", body)))
        for t in enum_threads:
            t.start()
        for t in enum_threads:
            t.join()
        for name, body in classes().items():
            ts = [threading.Thread(target=run, args=(name, body)) for _ in range(a.repeats)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        load_end = time.time()
        stop.set()
        time.sleep(5)
        after = rss_mb(srv.pid)
        alive = srv.poll() is None
        for name, rs in results.items():
            statuses = sorted({s for s, _ in rs})
            print(json.dumps({"class": name, "requests": len(rs), "statuses": statuses,
                              "slowest_answer_s": round(max(t for _, t in rs), 3)}))
        gaps_before, gaps_during = [], []
        for arrivals in streams:
            gaps_before += [b - a for a, b in zip(arrivals, arrivals[1:]) if b < load_start]
            gaps_during += [b - a for a, b in zip(arrivals, arrivals[1:]) if a >= load_start and b <= load_end]
        gaps_before.sort()
        peak = max(m for _, m in samples) if samples else 0.0
        print(json.dumps({
            "server_alive": alive,
            "unrelated_streams": len(streams), "unrelated_tokens": sum(len(a) for a in streams),
            "unrelated_tokens_during_load": len(gaps_during),
            "gap_median_before_ms": round(1e3 * gaps_before[len(gaps_before) // 2], 2) if gaps_before else None,
            "gap_max_during_load_ms": round(1e3 * max(gaps_during), 1) if gaps_during else None,
            "load_seconds": round(load_end - load_start, 1),
            "rss_idle_mb": round(idle, 1), "rss_peak_mb": round(peak, 1), "rss_after_mb": round(after, 1),
            "rss_peak_over_idle_mb": round(peak - idle, 1)}))
        return 0 if alive else 1
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    sys.exit(main())
