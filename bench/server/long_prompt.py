#!/usr/bin/env python3
"""Long prompts against a running `deltaserve serve` (issue 41's measure): TTFT, the engine's
forward time and its attention-over-KV share, for a ~40,000-token chat prompt, its second turn
(the first turn, its answer and ~300 new tokens: cached_tokens shows what the prefix cache gave),
and a 131,000-token /v1/completions prompt of token ids; max_tokens 8, greedy, streamed. The
text is the Python standard library's source. Resident memory after each.

  build/deltaserve serve --model models/deltacoder --port 8000 &
  python3 bench/server/long_prompt.py 8000 $!          # ONLY_LONG=1: the 131,000-token prompt only
"""
import glob, json, os, sys, time, urllib.request

PORT, PID = int(sys.argv[1]), int(sys.argv[2])
BASE = f"http://127.0.0.1:{PORT}"

def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())

def stream(path, body):
    """Returns (ttft_s, total_s, text, usage) of a streamed request."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.monotonic(); ttft = None; text = ""; usage = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                if piece is not None and piece != "" or ch.get("finish_reason"):
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text += piece or ""
    return ttft, time.monotonic() - t0, text, usage

def forward_s():
    """The engine's forward time so far and its attention-over-KV share, from /metrics."""
    txt = urllib.request.urlopen(BASE + "/metrics", timeout=60).read().decode()
    f = a = 0.0
    for l in txt.splitlines():
        if l.startswith('deltaserve:step_phase_seconds_sum{phase="forward"}'): f = float(l.split()[-1])
        if l.startswith('deltaserve:forward_part_seconds_sum{part="kv_attention"}'): a = float(l.split()[-1])
    return f, a

class Prefill:
    def __enter__(self): self.f0, self.a0 = forward_s(); return self
    def __exit__(self, *e):
        f, a = forward_s(); self.s = f - self.f0; self.att = a - self.a0
    def __str__(self): return f"forward {self.s:.2f} s (attention over the KV {self.att:.2f} s)"

def rss():
    d = {}
    for l in open(f"/proc/{PID}/status"):
        if l.startswith(("VmRSS", "VmHWM")):
            k, v = l.split(":"); d[k] = int(v.split()[0]) // 1024
    return f"RSS {d['VmRSS']} MiB (peak {d['VmHWM']} MiB)"

# Python source as the long text: the standard library, sorted (what the model was trained on,
# so the tokenizer's rate is the usual ~3.5 bytes/token).
files = sorted(glob.glob("/usr/lib/python3.11/**/*.py", recursive=True))
buf = []; n = 0
for f in files:
    if "site-packages" in f or "dist-packages" in f: continue
    try: s = open(f, encoding="utf-8").read()
    except Exception: continue
    buf.append(f"# file: {f}\n{s}\n"); n += len(s)
    if n > 600_000: break
corpus = "".join(buf)
ids = post("/tokenize", {"prompt": corpus})["tokens"]
print(f"corpus: {len(corpus)} bytes, {len(ids)} tokens; max_model_len {post('/tokenize', {'prompt': 'x'})['max_model_len']}; {rss()}", flush=True)

ONLY_LONG = os.environ.get("ONLY_LONG") == "1"
# 1. a ~40,000-token chat prompt (one user message), streamed, max_tokens 8.
if not ONLY_LONG:
  text40 = post("/detokenize", {"tokens": ids[:39_980]})["prompt"]
  msgs1 = [{"role": "user", "content": "Read this code and say what it does.\n\n" + text40}]
  n1 = post("/tokenize", {"messages": msgs1})["count"]
  with Prefill() as pf:
      ttft, tot, out1, u = stream("/v1/chat/completions", {"messages": msgs1, "max_tokens": 8, "temperature": 0})
  print(f"chat 40k: prompt {n1} tokens, TTFT {ttft:.2f} s ({n1/ttft:.0f} tok/s), total {tot:.2f} s, {pf}, usage {u}; {rss()}", flush=True)

  # 2. the second turn: the first turn, its answer, and a few hundred new tokens.
  follow = post("/detokenize", {"tokens": ids[60_000:60_300]})["prompt"]
  msgs2 = msgs1 + [{"role": "assistant", "content": out1}, {"role": "user", "content": "Now this part:\n" + follow}]
  n2 = post("/tokenize", {"messages": msgs2})["count"]
  with Prefill() as pf:
      ttft, tot, out2, u = stream("/v1/chat/completions", {"messages": msgs2, "max_tokens": 8, "temperature": 0})
  c = u["prompt_tokens_details"]["cached_tokens"]
  print(f"chat turn 2: prompt {n2} tokens, cached {c} ({100*c/n2:.1f}%), TTFT {ttft:.2f} s, total {tot:.2f} s, {pf}; {rss()}", flush=True)

# 3. a 131,000-token completion prompt as token ids, max_tokens 8.
p3 = ids[:131_000] if len(ids) >= 131_000 else (ids * 2)[:131_000]
with Prefill() as pf:
    ttft, tot, _, u = stream("/v1/completions", {"prompt": p3, "max_tokens": 8, "temperature": 0})
print(f"completion 131k: prompt {u['prompt_tokens']} tokens, TTFT {ttft:.2f} s ({u['prompt_tokens']/ttft:.0f} tok/s), total {tot:.2f} s, {pf}, usage {u}; {rss()}", flush=True)
