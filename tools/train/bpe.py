#!/usr/bin/python3
"""Tiny deterministic byte-level BPE (GPT-2 style) trainer and encoder.

Writes the Hugging Face tokenizer.json schema that src/tokenizer/ loads:
  pre_tokenizer = Sequence[Split(GPT-2 regex, Isolated), ByteLevel(use_regex=false)]
  model         = BPE {vocab, merges}
  decoder       = ByteLevel
  added_tokens  = specials with special=true

Ids: 0..255 are the 256 single bytes (in byte order), then one id per merge in
merge order, then the special tokens.

Usage:
  bpe.py train --files-from LIST --vocab-size 4096 --out tokenizer.json
  bpe.py encode --tokenizer tokenizer.json --text "def f(x):"
"""
import argparse
import collections
import json
import re
import sys

# GPT-2 pre-tokenizer regex as written in tokenizer.json (PCRE / Oniguruma syntax).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same with Python's `re` (no \p classes): \p{L} ~ [^\W\d_], \p{N} ~ \d.
# Identical on ASCII; may differ on exotic Unicode numerics/letters.
PY_PATTERN = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode char map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE2CHAR = bytes_to_unicode()
CHAR2BYTE = {c: b for b, c in BYTE2CHAR.items()}


def pretokenize(text):
    return PY_PATTERN.findall(text)


def train(texts, vocab_size, specials=SPECIALS, log=sys.stderr):
    n_merges = vocab_size - 256 - len(specials)
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    # words as lists of ids, sorted for determinism
    items = sorted(counts.items())
    words = [list(w.encode("utf-8")) for w, _ in items]
    freqs = [c for _, c in items]
    pair_counts = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        f = freqs[wi]
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += f
            where[(a, b)].add(wi)
    merges = []  # list of (a, b) id pairs
    strs = [bytes([b]) for b in range(256)]  # byte string of each id
    str2id = {s: i for i, s in enumerate(strs)}
    m = 0
    while len(strs) < 256 + n_merges:
        m += 1
        if not pair_counts:
            break
        # highest count; ties broken by the smallest pair of ids (deterministic)
        best = max(pair_counts.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        if pair_counts[best] < 2:
            break
        a, b = best
        s = strs[a] + strs[b]
        if s in str2id:  # same string reached by another split: reuse its id
            new_id = str2id[s]
        else:
            new_id = len(strs)
            strs.append(s)
            str2id[s] = new_id
        merges.append(best)
        for wi in sorted(where.pop(best)):
            w = words[wi]
            f = freqs[wi]
            for p in zip(w, w[1:]):
                pair_counts[p] -= f
                if pair_counts[p] <= 0:
                    del pair_counts[p]
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_counts[p] += f
                where[p].add(wi)
        pair_counts.pop(best, None)
        if m % 500 == 0:
            print(f"merge {m}/{n_merges}", file=log, flush=True)
    return merges


def id_strings(merges):
    strs = [BYTE2CHAR[b] for b in range(256)]
    seen = set(strs)
    pairs = []
    for a, b in merges:  # merges refer to ids; ids are assigned in first-seen order
        pairs.append((a, b))
        s = strs[a] + strs[b]
        if s not in seen:
            seen.add(s)
            strs.append(s)
    return strs


def to_json(merges, specials=SPECIALS):
    strs = id_strings(merges)
    vocab = {s: i for i, s in enumerate(strs)}
    assert len(vocab) == len(strs), "duplicate token string"
    n = len(strs)
    added = []
    for k, s in enumerate(specials):
        added.append({"id": n + k, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        vocab[s] = n + k
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": GPT2_PATTERN},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": False},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False,
            "vocab": vocab,
            "merges": [strs[a] + " " + strs[b] for a, b in merges],
        },
    }


class Tokenizer:
    """Encoder/decoder for the tokenizer.json this file writes."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.vocab = j["model"]["vocab"]
        self.id2str = {i: s for s, i in self.vocab.items()}
        self.ranks = {}
        for r, m in enumerate(j["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = r
        self.specials = {t["content"]: t["id"] for t in j["added_tokens"]}
        self.special_re = re.compile("(" + "|".join(re.escape(s) for s in self.specials) + ")")
        self.cache = {}

    @property
    def vocab_size(self):
        return len(self.vocab)

    def _bpe(self, word):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        parts = [BYTE2CHAR[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text, allow_special=True):
        out = []
        chunks = self.special_re.split(text) if allow_special and self.specials else [text]
        for c in chunks:
            if not c:
                continue
            if allow_special and c in self.specials:
                out.append(self.specials[c])
                continue
            for w in pretokenize(c):
                out.extend(self._bpe(w))
        return out

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            s = self.id2str[int(i)]
            if s in self.specials:
                bs.extend(s.encode("utf-8"))
            else:
                bs.extend(CHAR2BYTE[c] for c in s)
        return bs.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--files-from", required=True, help="file with one path per line")
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--text", required=True)
    a = ap.parse_args()
    if a.cmd == "train":
        paths = [p for p in open(a.files_from).read().split("\n") if p]
        texts = [open(p, "rb").read().decode("utf-8", errors="replace") for p in paths]
        merges = train(texts, a.vocab_size)
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(to_json(merges), f, ensure_ascii=False, indent=1)
    else:
        tok = Tokenizer(a.tokenizer)
        ids = tok.encode(a.text)
        print(ids)
        print(repr(tok.decode(ids)))


if __name__ == "__main__":
    main()
