#!/usr/bin/python3
"""Corpus recipe: the Python standard library Debian ships, split by path hash.

  data.py split  --root /usr/lib/python3.11 --out-dir WORK --recipe tools/train/corpus.json
  data.py encode --tokenizer tokenizer.json --out-dir WORK

split: lists ROOT/**/*.py (sorted, skipping dist-packages/site-packages/__pycache__),
holds out a file when int(sha256(relative path)[:8], 16) % 50 == 0 (~2%), writes
WORK/train_files.txt, WORK/heldout_files.txt and the recipe json (counts, bytes, sha256 of
the concatenation of all files in sorted path order).
encode: tokenizes each file, joins documents with <|endoftext|>, writes WORK/{train,heldout}.bin
(uint16 little-endian token ids) and WORK/encode.json (token and byte counts).
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

SKIP_DIRS = {"dist-packages", "site-packages", "__pycache__"}
HOLDOUT_MOD = 50


def list_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                out.append(os.path.join(d, f))
    return sorted(out)


def is_heldout(rel):
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % HOLDOUT_MOD == 0


def split(root, out_dir, recipe_path):
    os.makedirs(out_dir, exist_ok=True)
    files = list_files(root)
    h = hashlib.sha256()
    tr, ho = [], []
    tb = hb = 0
    for p in files:
        data = open(p, "rb").read()
        h.update(data)
        rel = os.path.relpath(p, root)
        if is_heldout(rel):
            ho.append(p)
            hb += len(data)
        else:
            tr.append(p)
            tb += len(data)
    open(os.path.join(out_dir, "train_files.txt"), "w").write("\n".join(tr) + "\n")
    open(os.path.join(out_dir, "heldout_files.txt"), "w").write("\n".join(ho) + "\n")
    recipe = {
        "root": root,
        "glob": "**/*.py",
        "skip_dirs": sorted(SKIP_DIRS),
        "split": f"held out iff int(sha256(path relative to root)[:8], 16) % {HOLDOUT_MOD} == 0",
        "files": len(files), "train_files": len(tr), "heldout_files": len(ho),
        "bytes": tb + hb, "train_bytes": tb, "heldout_bytes": hb,
        "sha256_concat_sorted": h.hexdigest(),
        "heldout_paths": [os.path.relpath(p, root) for p in ho],
        "document_separator": "<|endoftext|>",
    }
    if recipe_path:
        with open(recipe_path, "w") as f:
            json.dump(recipe, f, indent=1)
    print(json.dumps({k: v for k, v in recipe.items() if k != "heldout_paths"}))
    return recipe


def encode(tokenizer, out_dir):
    tok = bpe.Tokenizer(tokenizer)
    eot = tok.specials["<|endoftext|>"]
    info = {}
    for name in ("train", "heldout"):
        paths = [p for p in open(os.path.join(out_dir, f"{name}_files.txt")).read().split("\n") if p]
        ids = []
        nbytes = 0
        for p in paths:
            data = open(p, "rb").read()
            nbytes += len(data)
            ids.extend(tok.encode(data.decode("utf-8", errors="replace"), allow_special=False))
            ids.append(eot)
        arr = np.array(ids, dtype=np.uint16)
        arr.tofile(os.path.join(out_dir, f"{name}.bin"))
        info[name] = {"files": len(paths), "bytes": nbytes, "tokens": len(ids),
                      "bytes_per_token": nbytes / max(1, len(ids) - len(paths))}
        print(name, info[name], flush=True)
    with open(os.path.join(out_dir, "encode.json"), "w") as f:
        json.dump(info, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("--root", default="/usr/lib/python3.11")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--recipe", default="")
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    if a.cmd == "split":
        split(a.root, a.out_dir, a.recipe)
    else:
        encode(a.tokenizer, a.out_dir)


if __name__ == "__main__":
    main()
