#!/usr/bin/python3
"""Trains the deltacoder target and its draft together on the same batches (CPU, 2 threads).

  train.py --data WORK --ckpt-dir CKPT --minutes 90 [--resume]

Each step: one batch of random windows of train.bin; the target takes a CE step; the draft
takes a step on 0.5 * CE + 0.5 * KL(target || draft) (target logits detached; distillation
raises draft/target agreement). LR: linear warm-up then cosine to 10%, driven by the fraction
of the time budget spent (so the run ends on time on a shared machine) unless --steps is given.
MoE correction biases are balanced aux-loss-free: b_e += 1e-3 * sign(mean load - load_e).
Checkpoints (CKPT/latest.pt, overwritten atomically) every --ckpt-minutes.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import kimi_linear as kl  # noqa: E402

torch.set_num_threads(2)
torch.set_flush_denormal(True)

TOKENIZER_SPECIALS = {"<|endoftext|>": 4093, "<|im_start|>": 4094, "<|im_end|>": 4095}

# Model sizes (see README.md for why). max_position_embeddings is the context deltaserve serves
# by default, not a trained length: training sees windows of --seq (256) tokens, and the models carry no
# positions (KDA, NoPE MLA), so nothing in them is sized by it (models/*/README.md).
TARGET = dict(vocab_size=4096, hidden_size=192, num_hidden_layers=4, intermediate_size=512,
              kda_layers=[1, 2, 3], full_attn_layers=[4], kda_num_heads=3, kda_head_dim=64,
              num_attention_heads=3, kv_lora_rank=96, qk_nope_head_dim=32, qk_rope_head_dim=16,
              v_head_dim=32, first_k_dense_replace=1, moe_layer_freq=1, num_experts=8,
              num_experts_per_token=2, num_shared_experts=1, moe_intermediate_size=192,
              routed_scaling_factor=1.0, moe_renormalize=True, tie_word_embeddings=True,
              rms_norm_eps=1e-6, max_position_embeddings=131072)
DRAFT = dict(vocab_size=4096, hidden_size=128, num_hidden_layers=1, intermediate_size=320,
             kda_layers=[1], full_attn_layers=[], kda_num_heads=2, kda_head_dim=64,
             num_attention_heads=2, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
             v_head_dim=32, first_k_dense_replace=1, moe_layer_freq=1, num_experts=0,
             num_experts_per_token=1, num_shared_experts=0, moe_intermediate_size=64,
             tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=131072)


def make_config(d):
    c = kl.KimiLinearConfig(**d)
    c.bos_token_id = TOKENIZER_SPECIALS["<|endoftext|>"]
    c.eos_token_id = [TOKENIZER_SPECIALS["<|endoftext|>"], TOKENIZER_SPECIALS["<|im_end|>"]]
    c.pad_token_id = TOKENIZER_SPECIALS["<|endoftext|>"]
    return c


def lr_at(frac, base, warm_frac=0.02, floor=0.1):
    if frac < warm_frac:
        return base * frac / warm_frac
    p = min(1.0, (frac - warm_frac) / (1 - warm_frac))
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def balance_moe(model, rate=1e-3):
    with torch.no_grad():
        for layer in model.model.layers:
            moe = layer.block_sparse_moe
            if moe is not None and moe.last_load is not None:
                load = moe.last_load.float()
                moe.gate.e_score_correction_bias += rate * torch.sign(load.mean() - load)


def param_groups(model, wd):
    decay, no = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 and "conv1d" not in n and "A_log" not in n else no).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}]


@torch.no_grad()
def evaluate(models, data, seq, n_windows=24, seed=1234):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - seq - 1, n_windows)
    x = torch.from_numpy(np.stack([data[s:s + seq] for s in starts]).astype(np.int64))
    y = torch.from_numpy(np.stack([data[s + 1:s + seq + 1] for s in starts]).astype(np.int64))
    out = []
    for m in models:
        m.eval()
        logits, _ = m(x)
        out.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item())
        m.train()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--minutes", type=float, default=90)
    ap.add_argument("--steps", type=int, default=0, help="step-based schedule instead of time")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init-from", default="",
                    help="models root holding deltacoder/ and deltacoder-draft/: start from those "
                         "exported weights (fresh optimizer and schedule) when no checkpoint exists; "
                         "their metrics.json tokens count toward tokens_seen")
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit")
    ap.add_argument("--exit-after-minutes", type=float, default=0,
                    help="checkpoint and exit with status 3 after this much wall time (the caller "
                         "restarts with --resume; bounds allocator growth, see README)")
    a = ap.parse_args()
    os.makedirs(a.ckpt_dir, exist_ok=True)

    train = np.fromfile(os.path.join(a.data, "train.bin"), dtype=np.uint16)
    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    tc, dc = make_config(TARGET), make_config(DRAFT)
    target = kl.KimiLinearForCausalLM(tc).init_weights(seed=a.seed)
    draft = kl.KimiLinearForCausalLM(dc).init_weights(seed=a.seed + 1)
    for m in (target, draft):
        m.set_kda_mode("fast", a.chunk)
    opt_t = torch.optim.AdamW(param_groups(target, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    opt_d = torch.optim.AdamW(param_groups(draft, a.wd), lr=a.draft_lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed, tokens = 0, 0.0, 0
    init = None  # the run this one continues, if any (carried through checkpoints)
    rng = np.random.default_rng(a.seed)
    ckpt_path = os.path.join(a.ckpt_dir, "latest.pt")
    if a.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        assert ck["target_config"] == TARGET and ck["draft_config"] == DRAFT, "config changed"
        target.load_state_dict(ck["target"])
        draft.load_state_dict(ck["draft"])
        opt_t.load_state_dict(ck["opt_t"])
        opt_d.load_state_dict(ck["opt_d"])
        step, elapsed, tokens = ck["step"], ck["elapsed"], ck["tokens"]
        init = ck.get("init")
        rng = np.random.default_rng(a.seed + step)
        print(f"resumed at step {step}, {elapsed / 60:.1f} min", flush=True)
    elif a.init_from:
        # Continue training shipped models (the checkpoint of their run is gone): the bf16 weights
        # they were exported with are the starting point, the LR schedule warms up again.
        for name, m, cfg in (("deltacoder", target, TARGET), ("deltacoder-draft", draft, DRAFT)):
            d = os.path.join(a.init_from, name)
            m.load_hf_state_dict(kl.st.load_dir(d), torch.float32)
        with open(os.path.join(a.init_from, "deltacoder", "metrics.json")) as f:
            prior = json.load(f)["training"]
        init = {"from": a.init_from, "tokens": prior["tokens_seen"], "steps": prior["steps"],
                "minutes": prior["minutes"]}
        print(f"initialised from {init}", flush=True)
    n_t = sum(p.numel() for p in target.parameters())
    n_d = sum(p.numel() for p in draft.parameters())
    bt, ht = kl.flops_per_token(tc, a.seq)
    bd, hd = kl.flops_per_token(dc, a.seq)
    print(json.dumps({"target_params": n_t, "draft_params": n_d, "target_body_macs": bt,
                      "target_head_macs": ht, "draft_body_macs": bd, "draft_head_macs": hd,
                      "body_ratio": bd / bt, "total_ratio": (bd + hd) / (bt + ht),
                      "train_tokens": len(train), "args": vars(a)}), flush=True)
    budget = a.minutes * 60
    last_ckpt = time.time()
    t_start = time.time() - elapsed
    log_every = 10
    proc_start = time.time()
    t_log = time.time()
    while True:
        elapsed = time.time() - t_start
        frac = step / a.steps if a.steps else elapsed / budget
        if frac >= 1.0 or (a.bench and step >= a.bench):
            break
        for o, base in ((opt_t, a.lr), (opt_d, a.draft_lr)):
            for gr in o.param_groups:
                gr["lr"] = lr_at(frac, base)
        starts = rng.integers(0, len(train) - a.seq - 1, a.batch)
        win = np.stack([train[s:s + a.seq + 1] for s in starts]).astype(np.int64)
        x, y = torch.from_numpy(win[:, :-1]), torch.from_numpy(win[:, 1:])
        logits, _ = target(x)
        loss_t = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt_t.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt_t.step()
        balance_moe(target)
        dl, _ = draft(x)
        ce_d = F.cross_entropy(dl.reshape(-1, dl.shape[-1]), y.reshape(-1))
        kd = F.kl_div(F.log_softmax(dl, -1).reshape(-1, dl.shape[-1]),
                      F.log_softmax(logits.detach(), -1).reshape(-1, dl.shape[-1]),
                      log_target=True, reduction="batchmean")
        loss_d = 0.5 * ce_d + 0.5 * kd
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt_d.step()
        step += 1
        tokens += a.batch * a.seq
        if step % log_every == 0:
            now = time.time()
            tps = log_every * a.batch * a.seq / (now - t_log)
            t_log = now
            print(f"step {step} t {elapsed / 60:.1f}m lr {opt_t.param_groups[0]['lr']:.2e} "
                  f"loss_t {loss_t.item():.4f} ce_d {ce_d.item():.4f} kd {kd.item():.4f} "
                  f"tok/s {tps:.0f} tokens {tokens}", flush=True)
        if step % 100 == 0:
            ev = evaluate([target, draft], held, a.seq)
            print(f"eval step {step} heldout_loss target {ev[0]:.4f} draft {ev[1]:.4f}", flush=True)
        if a.exit_after_minutes and time.time() - proc_start > a.exit_after_minutes * 60:
            save(ckpt_path, target, draft, opt_t, opt_d, step, time.time() - t_start, tokens, a, init)
            print("exiting for restart", flush=True)
            sys.exit(3)
        if time.time() - last_ckpt > a.ckpt_minutes * 60:
            save(ckpt_path, target, draft, opt_t, opt_d, step, time.time() - t_start, tokens, a, init)
            last_ckpt = time.time()
    if not a.bench:
        save(ckpt_path, target, draft, opt_t, opt_d, step, time.time() - t_start, tokens, a, init, final=True)
        ev = evaluate([target, draft], held, a.seq)
        print(f"final step {step} heldout_loss target {ev[0]:.4f} draft {ev[1]:.4f}", flush=True)
    print("done", flush=True)


def save(path, target, draft, opt_t, opt_d, step, elapsed, tokens, a, init, final=False):
    tmp = path + ".tmp"
    torch.save({"target": target.state_dict(), "draft": draft.state_dict(),
                "opt_t": opt_t.state_dict(), "opt_d": opt_d.state_dict(),
                "target_config": TARGET, "draft_config": DRAFT,
                "step": step, "elapsed": elapsed, "tokens": tokens, "args": vars(a),
                "init": init, "final": final}, tmp)
    os.replace(tmp, path)
    print(f"checkpoint step {step} -> {path}", flush=True)


if __name__ == "__main__":
    main()
