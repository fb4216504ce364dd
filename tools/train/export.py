#!/usr/bin/python3
"""Exports the latest training checkpoint to models/deltacoder and models/deltacoder-draft
and (re)computes their metrics.json.

  export.py --ckpt CKPT/latest.pt --data WORK --tokenizer WORK/tokenizer.json --out-root models
            [--eval-tokens N]   (0 = the whole held-out split)

Metrics are measured on the exported (bf16-rounded) weights with the reference forward
(tools/reference/kimi_linear.py, exact chunked form), in windows of --seq tokens:
  bits_per_byte = sum(-log2 p(token)) / sum(bytes of token), over held-out tokens other than
  <|endoftext|>; the unigram baseline uses add-one-smoothed token frequencies of train.bin.
  draft_target_top1_agreement = share of held-out positions where both argmaxes agree.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)
import kimi_linear as kl  # noqa: E402
import bpe  # noqa: E402
import train as tr  # noqa: E402

torch.set_num_threads(2)
torch.set_flush_denormal(True)

PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n\n\ndef main():",
           "class Stack:\n    def __init__(self):", "    for i in range(len(items)):"]

# The context a default `deltaserve serve` takes (config.json max_position_embeddings).
SERVED_CONTEXT = 131072

CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
                 "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def model_from_ckpt(state, cfg_dict):
    m = kl.KimiLinearForCausalLM(tr.make_config(cfg_dict))
    m.load_state_dict(state)
    return m


def bf16_round(m):
    """The model as the engine sees it: bf16 weights except the F32 tensors."""
    sd = m.hf_state_dict(torch.bfloat16)
    r = kl.KimiLinearForCausalLM(m.config)
    r.load_hf_state_dict(sd, torch.float32)
    r.eval()
    return r


@torch.no_grad()
def score(models, ids, seq, token_bytes, eot):
    """Returns per model total bits, total bytes, and agreement of models[1] with models[0]."""
    n = (len(ids) - 1) // seq
    bits = [0.0 for _ in models]
    nbytes = 0
    agree = total = 0
    for m in models:
        m.set_kda_mode("chunked", 64)
    for w in range(0, n, 8):
        ws = range(w, min(n, w + 8))
        x = torch.from_numpy(np.stack([ids[i * seq:(i + 1) * seq] for i in ws]).astype(np.int64))
        y = torch.from_numpy(np.stack([ids[i * seq + 1:(i + 1) * seq + 1] for i in ws]).astype(np.int64))
        keep = y != eot
        nbytes += int(token_bytes[y[keep]].sum())
        argmaxes = []
        for j, m in enumerate(models):
            logits, _ = m(x)
            lp = F.log_softmax(logits.float(), -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
            bits[j] += float(-(lp[keep]).sum()) / math.log(2)
            argmaxes.append(logits.argmax(-1))
        if len(models) > 1:
            agree += int((argmaxes[0] == argmaxes[1]).sum())
            total += argmaxes[0].numel()
    return bits, nbytes, (agree / total if total else None)


@torch.no_grad()
def greedy(m, tok, prompt, n_new=48, eos=()):
    ids = tok.encode(prompt)
    m.set_kda_mode("chunked", 64)
    logits, states = m(torch.tensor([ids]))
    m.set_kda_mode("recurrent")
    out = []
    for _ in range(n_new):
        nxt = int(logits[0, -1].argmax())
        if nxt in eos:
            break
        out.append(nxt)
        logits, states = m(torch.tensor([[nxt]]), states)
    return tok.decode(out)


def training_summary(ck):
    """Steps, tokens and minutes of the whole history: a run continued from exported models
    (train.py --init-from) adds the earlier run's figures, which it kept in its checkpoint."""
    init = ck.get("init")
    prior = init or {"tokens": 0, "steps": 0, "minutes": 0.0}
    out = {"steps": ck["step"] + prior["steps"], "tokens_seen": ck["tokens"] + prior["tokens"],
           "minutes": round(ck["elapsed"] / 60 + prior["minutes"], 1),
           "final": ck.get("final", False), "args": ck["args"]}
    if init:
        out["continued_from"] = init
        out["this_run"] = {"steps": ck["step"], "tokens_seen": ck["tokens"],
                           "minutes": round(ck["elapsed"] / 60, 1)}
    return out


def write_model(m, out_dir, tokenizer, eos_ids, bos_id):
    if os.path.isdir(out_dir):
        for f in ("model.safetensors", "config.json"):
            if os.path.exists(os.path.join(out_dir, f)):
                os.remove(os.path.join(out_dir, f))
    m.save_pretrained(out_dir, dtype=torch.bfloat16)
    # The served default context (131072 tokens: coding agents' prompts and the recorded traces),
    # whatever an older checkpoint's config says; the models have no positions to outgrow.
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["max_position_embeddings"] = SERVED_CONTEXT
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copyfile(tokenizer, os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                   "unk_token": None, "model_max_length": SERVED_CONTEXT,
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos_id, "eos_token_id": eos_ids, "pad_token_id": bos_id,
                   "do_sample": False, "max_new_tokens": 256}, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out-root", default=os.path.join(HERE, "..", "..", "models"))
    ap.add_argument("--eval-tokens", type=int, default=0)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--samples", type=int, default=48, help="new tokens per greedy sample")
    a = ap.parse_args()
    t0 = time.time()
    ck = torch.load(a.ckpt)
    tok = bpe.Tokenizer(a.tokenizer)
    eot, im_end = tok.specials["<|endoftext|>"], tok.specials["<|im_end|>"]
    target = bf16_round(model_from_ckpt(ck["target"], ck["target_config"]))
    draft = bf16_round(model_from_ckpt(ck["draft"], ck["draft_config"]))

    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    if a.eval_tokens:
        held = held[:a.eval_tokens + 1]
    train = np.fromfile(os.path.join(a.data, "train.bin"), dtype=np.uint16)
    V = target.config.vocab_size
    token_bytes = np.zeros(V, dtype=np.int64)
    for i in range(V):
        s = tok.id2str.get(i)
        if s is not None and s not in tok.specials:
            token_bytes[i] = len(bytes(bpe.CHAR2BYTE[c] for c in s))
    token_bytes = torch.from_numpy(token_bytes)
    (bt, bd), nbytes, agree = score([target, draft], held, a.seq, token_bytes, eot)
    # unigram baseline over the same scored tokens
    counts = np.bincount(train, minlength=V).astype(np.float64) + 1.0
    logp = np.log2(counts / counts.sum())
    n = (len(held) - 1) // a.seq
    ys = np.concatenate([held[i * a.seq + 1:(i + 1) * a.seq + 1] for i in range(n)])
    ys = ys[ys != eot]
    uni = float(-logp[ys].sum())

    common = {
        "heldout_tokens_scored": int(len(ys)), "heldout_bytes_scored": int(nbytes),
        "eval_window": a.seq,
        "bits_per_byte": {"target": bt / nbytes, "draft": bd / nbytes, "unigram": uni / nbytes},
        "draft_target_top1_agreement": agree,
        "training": training_summary(ck),
        "corpus": "tools/train/corpus.json",
        "reproduce": "tools/train/train.sh (see tools/train/README.md)",
        "export": f"/usr/bin/python3 tools/train/export.py --ckpt {a.ckpt} --data {a.data} "
                  f"--tokenizer {a.tokenizer}",
    }
    bt_m, ht_m = kl.flops_per_token(target.config, a.seq)
    bd_m, hd_m = kl.flops_per_token(draft.config, a.seq)
    root = os.path.abspath(a.out_root)
    for name, m, role in (("deltacoder", target, "target"), ("deltacoder-draft", draft, "draft")):
        out_dir = os.path.join(root, name)
        write_model(m, out_dir, a.tokenizer, [eot, im_end], eot)
        samples = [{"prompt": p, "greedy": greedy(m, tok, p, a.samples, (eot,))} for p in PROMPTS]
        metrics = dict(common)
        metrics.update({
            "model": name, "role": role,
            "params": sum(p.numel() for p in m.parameters()),
            "macs_per_token_body": bt_m if role == "target" else bd_m,
            "macs_per_token_lm_head": ht_m if role == "target" else hd_m,
            "draft_over_target_body_macs": bd_m / bt_m,
            "draft_over_target_total_macs": (bd_m + hd_m) / (bt_m + ht_m),
            "greedy_samples": samples,
            "size_bytes": os.path.getsize(os.path.join(out_dir, "model.safetensors")),
        })
        with open(os.path.join(out_dir, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)
        print(json.dumps({k: metrics[k] for k in ("model", "params", "bits_per_byte",
                                                   "draft_target_top1_agreement")}))
        for s in samples:
            print(repr(s["prompt"]), "->", repr(s["greedy"]))
    print(f"export took {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
