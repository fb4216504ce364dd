#!/usr/bin/env python3
"""Held-out Python prompts for `deltaserve spec calibrate`: JSON lines {"prompt": text}.

The bundled deltacoder models were trained on the Python standard library of this machine
(tools/train/corpus.json) with 15 files held out; this cuts prompts from those held-out files
only, so acceptance is measured on text neither model saw. Deterministic: each file gives
--per-file prompts of --chars characters, starting at evenly spaced line boundaries.
"""
import argparse
import json
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default=os.path.join(here, "..", "train", "corpus.json"))
    ap.add_argument("--per-file", type=int, default=2)
    ap.add_argument("--chars", type=int, default=1200)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    recipe = json.load(open(a.corpus))
    root = recipe["root"]
    n = 0
    with open(a.out, "w") as out:
        for rel in recipe["heldout_paths"]:
            path = os.path.join(root, rel)
            if not os.path.exists(path):
                print(f"heldout_prompts: {path} is missing, skipped", file=sys.stderr)
                continue
            text = open(path, encoding="utf-8", errors="replace").read()
            if len(text) < a.chars:
                starts = [0]
            else:
                span = len(text) - a.chars
                starts = [span * i // max(1, a.per_file) for i in range(a.per_file)]
            for s in starts:
                s = text.rfind("\n", 0, s) + 1 if s > 0 else 0  # begin at a line
                out.write(json.dumps({"prompt": text[s:s + a.chars], "source": rel}) + "\n")
                n += 1
    print(f"heldout_prompts: wrote {n} prompts to {a.out}", file=sys.stderr)
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
