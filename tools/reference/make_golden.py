#!/usr/bin/python3
"""Golden logits for the C++ engine's forward tests.

  make_golden.py --model DIR --out tests/data/golden/NAME.json [--greedy 8]

Loads DIR (model_type kimi_linear or llama) with the reference in float64 (the stored
weights, bf16 or f32, are exact in f64), runs fixed prompts and writes f32 logits:
  - prompts: token-id lists of lengths 1, 7, 65 (> one 64-token chunk/block) and 140 (> 130,
    three KV blocks), ids drawn from a fixed seed; if DIR has a tokenizer.json also a code
    prompt encoded with tools/train/bpe.py (its ids are stored, so the C++ test need not
    tokenize).
  - vocab <= 1024: logits of every position; else full logits of the last 4 positions plus
    the argmax and max logit of every position.
  - greedy: the next N greedy tokens after each prompt (decode with the recurrence / KV cache),
    and the logits of each of those N decode steps (the step that feeds greedy token i):
    every logit when vocab <= 1024, else the first --decode-logits-n of them, plus each step's
    argmax and max logit either way, so the C++ test compares decode logits, not only tokens.
KDA uses the recurrence (the reference form).
Run from the repository root with the system Python that has torch, e.g.
  /usr/bin/python3 tools/reference/make_golden.py --model models/deltacoder --out tests/data/golden/deltacoder.json
(model_dir in the output is written relative to the current directory).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import kimi_linear as kl  # noqa: E402
import llama  # noqa: E402

torch.set_num_threads(2)

LENGTHS = [1, 7, 65, 140]
CODE_PROMPT = ('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
               '        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\nclass ')


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type")
    if mt == "kimi_linear":
        m = kl.KimiLinearForCausalLM.from_pretrained(model_dir, torch.float64)
        m.set_kda_mode("recurrent")
    elif mt == "llama":
        m = llama.LlamaForCausalLM.from_pretrained(model_dir, torch.float64)
    else:
        raise SystemExit(f"{model_dir}: unsupported model_type {mt!r}")
    m.eval()
    return m, cfg


def prompts_for(cfg, model_dir, seed):
    V = cfg["vocab_size"]
    rng = np.random.default_rng(seed)
    out = [("random_len%d" % n, [int(x) for x in rng.integers(0, V, n)]) for n in LENGTHS]
    tj = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tj):
        try:
            import bpe
            ids = bpe.Tokenizer(tj).encode(CODE_PROMPT)
            if max(ids) < V:
                out.append(("code", ids))
        except Exception as e:  # a tokenizer this encoder cannot read: skip the text prompt
            print("skipping text prompt:", e, file=sys.stderr)
    return out


@torch.no_grad()
def run(m, ids, n_greedy):
    logits, state = m(torch.tensor([ids]))
    logits = logits[0]
    gen, steps = [], []
    last = logits[-1]
    for _ in range(n_greedy):
        nxt = int(last.argmax())
        gen.append(nxt)
        lo, state = m(torch.tensor([[nxt]]), state)
        last = lo[0, -1]
        steps.append(last)
    return logits, gen, torch.stack(steps) if steps else logits[:0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--greedy", type=int, default=8)
    ap.add_argument("--full-vocab-max", type=int, default=1024)
    ap.add_argument("--decode-logits-n", type=int, default=512,
                    help="leading logits stored per decode step when the vocab is above --full-vocab-max")
    a = ap.parse_args()
    m, cfg = load(a.model)
    V = cfg["vocab_size"]
    full = V <= a.full_vocab_max
    entries = []
    for name, ids in prompts_for(cfg, a.model, a.seed):
        logits, gen, steps = run(m, ids, a.greedy)
        lf, sf = logits.float(), steps.float()
        T = len(ids)
        pos = list(range(T)) if full else list(range(max(0, T - 4), T))
        n_dec = V if full else min(V, a.decode_logits_n)
        entries.append({
            "name": name,
            "ids": ids,
            "argmax": [int(x) for x in lf.argmax(-1)],
            "max_logit": [float(x) for x in lf.max(-1).values],
            "logits_positions": pos,
            "logits": [[float(x) for x in lf[p]] for p in pos],
            "greedy_next": gen,
            "decode_argmax": [int(x) for x in sf.argmax(-1)],
            "decode_max_logit": [float(x) for x in sf.max(-1).values],
            "decode_logits": [[float(x) for x in sf[i, :n_dec]] for i in range(len(gen))],
        })
    doc = {
        "model_dir": os.path.relpath(os.path.abspath(a.model), os.getcwd()),
        "model_type": cfg["model_type"],
        "vocab_size": V,
        "dtype": "f32",
        "reference": "tools/reference/" + ("kimi_linear.py (KDA recurrence)" if cfg["model_type"] ==
                                           "kimi_linear" else "llama.py") + ", computed in f64",
        "full_logits": full,
        "decode_logits_n": V if full else min(V, a.decode_logits_n),
        "prompts": entries,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {a.out}: {len(entries)} prompts, vocab {V}, full={full}")


if __name__ == "__main__":
    main()
