#!/usr/bin/env python3
"""Reads `deltaserve serve --request-log` for one agent's two-turn session and checks turn 2.

    request_log.py LOG CLIENT TURN2_FIRST_LINE [MIN_SHARE]

LOG has one JSON object a line per finished generation request ({"api", "model", "session",
"prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "total_ms", "finish",
"status"}). Lines before TURN2_FIRST_LINE (1-based) came during the first invocation of the
client, the rest during the second. A client may send side requests (a session title, a
summary) besides its main one, so:
  - turn 1's main request is its first request whose prompt is at least half of the largest
    prompt turn 1 sent (the title request of opencode is a few hundred tokens; the main one
    thousands): its prompt is "the first prompt", its TTFT turn 1's;
  - turn 2's main request is the largest prompt the second invocation sent: the whole
    conversation so far plus the new message, which must have come from the prefix cache for at
    least MIN_SHARE (default 0.9) of its tokens.
Prints one summary line (the figures issue 41 asks for) and exits 0, or explains and exits 1.
"""
import json
import sys


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e}): {line[:200]}")
    return rows


def ok(row):
    status = row.get("status", 200)
    return (status in (200, "ok", None)) and isinstance(row.get("prompt_tokens"), int)


def ms(row):
    v = row.get("ttft_ms")
    return f"{v:.0f}" if isinstance(v, (int, float)) else "?"


def describe(rows):
    return "\n".join(
        f"  line {n}: api={r.get('api')} prompt={r.get('prompt_tokens')} cached={r.get('cached_tokens')} "
        f"out={r.get('completion_tokens')} ttft_ms={r.get('ttft_ms')} finish={r.get('finish')} "
        f"status={r.get('status')} session={r.get('session')}"
        for n, r in rows)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, client, turn2_first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    min_share = float(sys.argv[4]) if len(sys.argv) > 4 else 0.9
    rows = load(path)
    turn1 = [(n, r) for n, r in rows if n < turn2_first]
    turn2 = [(n, r) for n, r in rows if n >= turn2_first]
    fail = []
    good1 = [r for _, r in turn1 if ok(r)]
    good2 = [r for _, r in turn2 if ok(r)]
    if not good1:
        fail.append("turn 1 finished no generation request")
    if not good2:
        fail.append("turn 2 finished no generation request")
    if fail:
        print(f"{client}: " + "; ".join(fail) + f"\nrequest log ({path}):\n" + describe(rows))
        return 1
    largest1 = max(r["prompt_tokens"] for r in good1)
    main1 = next(r for r in good1 if r["prompt_tokens"] * 2 >= largest1)
    main2 = max(good2, key=lambda r: r["prompt_tokens"])
    cached2 = int(main2.get("cached_tokens") or 0)
    share = cached2 / main2["prompt_tokens"] if main2["prompt_tokens"] else 0.0
    apis = sorted({str(r.get("api")) for _, r in rows})
    print(f"{client}: api {','.join(apis)}; first prompt {main1['prompt_tokens']} tokens, "
          f"TTFT turn 1 {ms(main1)} ms, turn 2 {ms(main2)} ms; "
          f"turn 2 prompt {main2['prompt_tokens']} tokens, {cached2} cached ({share:.1%}); "
          f"requests {len(turn1)} + {len(turn2)}")
    if share < min_share:
        print(f"{client}: turn 2 read {share:.1%} of its prompt from the prefix cache, "
              f"below {min_share:.0%}\nrequest log ({path}):\n" + describe(rows))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
