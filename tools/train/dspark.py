#!/usr/bin/python3
"""A parallel draft head for deltacoder (DSpark-style): K draft tokens in one forward.

  dspark.py train  --target models/deltacoder --data WORK --out-dir CKPT --minutes 35
  dspark.py export --target models/deltacoder --ckpt CKPT/latest.pt --data WORK --out models/deltacoder-dspark
  dspark.py golden --model models/deltacoder-dspark --target models/deltacoder --out tests/data/golden/deltacoder-dspark.json

The drafter reads the frozen target. Method (our reading of DFlash, Chen et al. 2026, and
DSpark, Cheng et al. 2026; this code is our own):
- Context features: the target's residual stream after the layers `target_layer_ids`
  (0-based), concatenated per position and fused: c_p = rmsnorm(fc(concat(taps_p))).
- A round for a sequence whose target has computed positions [0, n) and holds the next token
  x_n: a block of K slots at positions n .. n+K-1, slot 0 the embedding of x_n, slots 1.. the
  learned mask embedding. Each draft layer is pre-norm attention + SwiGLU; its attention's
  queries are the block's slots, its keys and values are the layer's k/v projections of the
  context features of the last `context_window` positions (n-W .. n-1; "KV injection") and of
  the block's own slots, all visible (bidirectional inside the block), with rotate-half RoPE at
  the absolute positions. Slot j's final hidden z_j gives base logits through the target's LM
  head (shared, as is the embedding).
- Markov term (semi-autoregressive): slot j's logits add w2 . w1[prev_j], prev_j the token
  before the one slot j predicts (x_n for j = 0, then the previous slot's draft token), rank r.
  Drafting is sequential only in this cheap term.
- Confidence head: sigmoid(w . [z_j ; w1[prev_j]] + b), the chance that slot j's greedy token
  agrees with the target's given an agreeing prefix; the product over slots is the chance a
  prefix survives verification.
Why a window rather than the whole context: the target's KDA layers already carry the long
history into every feature; a window bounds the drafter's memory and work per round whatever
the context length, and a prefix-cache hit (whose tokens never pass through the target again)
costs the drafter only the features it would not see anyway.

Training: random windows of train.bin through the target (exact chunked KDA, no grad); per
window A random anchors; loss per slot 0.5 CE(data) + 0.5 KL(target || draft), the target's
distribution at the slot's position; confidence BCE against agreement of argmaxes.
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
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import kimi_linear as kl  # noqa: E402
import safetensors_io as st  # noqa: E402

torch.set_num_threads(2)
torch.set_flush_denormal(True)

MODEL_TYPE = "deltaserve_dspark"
DEFAULT = dict(target_layer_ids=[0, 2, 3], num_hidden_layers=1, num_attention_heads=3, head_dim=64,
               intermediate_size=512, block_size=8, markov_rank=32, context_window=32,
               rope_theta=10000.0, rms_norm_eps=1e-6)


def rope(x, pos, theta):
    """Rotate-half RoPE. x [..., T, h, hd]; pos [..., T] absolute positions (long)."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = pos.to(torch.float64).unsqueeze(-1) * inv                                # [..., T, hd/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype).unsqueeze(-2)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype).unsqueeze(-2)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class DraftLayer(nn.Module):
    def __init__(self, H, nh, hd, inter, eps):
        super().__init__()
        self.nh, self.hd, self.eps = nh, hd, eps
        self.input_layernorm = kl.RMSNorm(H, eps)
        self.post_attention_layernorm = kl.RMSNorm(H, eps)
        self.self_attn = nn.Module()
        for n, o, i in (("q_proj", nh * hd, H), ("k_proj", nh * hd, H), ("v_proj", nh * hd, H),
                        ("o_proj", H, nh * hd)):
            setattr(self.self_attn, n, nn.Linear(i, o, bias=False))
        self.mlp = kl.MLP(H, inter)


class DSpark(nn.Module):
    def __init__(self, cfg, hidden, vocab):
        super().__init__()
        self.cfg = dict(cfg)
        H = hidden
        self.H, self.V = H, vocab
        nt = len(cfg["target_layer_ids"])
        self.fc = nn.Linear(nt * H, H, bias=False)
        self.hidden_norm = kl.RMSNorm(H, cfg["rms_norm_eps"])
        self.mask_embedding = nn.Parameter(torch.zeros(H))
        self.layers = nn.ModuleList(DraftLayer(H, cfg["num_attention_heads"], cfg["head_dim"],
                                               cfg["intermediate_size"], cfg["rms_norm_eps"])
                                    for _ in range(cfg["num_hidden_layers"]))
        self.norm = kl.RMSNorm(H, cfg["rms_norm_eps"])
        r = cfg["markov_rank"]
        self.markov_w1 = nn.Embedding(vocab, r)
        self.markov_w2 = nn.Linear(r, vocab, bias=False)
        self.confidence = nn.Linear(H + r, 1, bias=True)

    @torch.no_grad()
    def init_weights(self, seed=0, std=0.02):
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight") or "markov_w2" in name:
                p.copy_(torch.randn(p.shape, generator=g) * std * 0.5)
            elif name.endswith("confidence.bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        return self

    def context(self, taps):
        """taps [..., nt*H] -> fused context features [..., H]."""
        return self.hidden_norm(self.fc(taps))

    def block(self, ctx, ctx_pos, ctx_valid, x0_emb, n):
        """One round per row of the batch.
        ctx [B, W, H] context features, ctx_pos [B, W] their positions, ctx_valid [B, W] bool;
        x0_emb [B, H] the embedding of the known token x_n; n [B] its position.
        Returns z [B, K, H] (final-normed slot hiddens)."""
        B, W, H = ctx.shape
        K = self.cfg["block_size"]
        x = self.mask_embedding.expand(B, K, H).clone()
        x[:, 0] = x0_emb
        slot_pos = n.unsqueeze(1) + torch.arange(K).unsqueeze(0)                    # [B, K]
        key_pos = torch.cat([ctx_pos, slot_pos], 1)                                   # [B, W+K]
        valid = torch.cat([ctx_valid, torch.ones(B, K, dtype=torch.bool)], 1)        # [B, W+K]
        theta = self.cfg["rope_theta"]
        for L in self.layers:
            nh, hd = L.nh, L.hd
            hx = L.input_layernorm(x)
            a = L.self_attn
            q = rope(a.q_proj(hx).view(B, K, nh, hd), slot_pos, theta)
            kc = a.k_proj(ctx).view(B, W, nh, hd)
            vc = a.v_proj(ctx).view(B, W, nh, hd)
            kb = a.k_proj(hx).view(B, K, nh, hd)
            vb = a.v_proj(hx).view(B, K, nh, hd)
            k = rope(torch.cat([kc, kb], 1), key_pos, theta)
            v = torch.cat([vc, vb], 1)
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) * hd ** -0.5
            s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
            p = torch.softmax(s.float(), -1).to(x.dtype)
            o = torch.einsum("bhqk,bkhd->bqhd", p, v).reshape(B, K, nh * hd)
            x = x + a.o_proj(o)
            x = x + L.mlp(L.post_attention_layernorm(x))
        return self.norm(x)

    def heads(self, z, prev, lm_weight):
        """z [B, K, H], prev [B, K] previous tokens -> (logits [B, K, V], confidence logits [B, K])."""
        m = self.markov_w1(prev)
        logits = F.linear(z, lm_weight) + self.markov_w2(m)
        conf = self.confidence(torch.cat([z, m], -1)).squeeze(-1)
        return logits, conf

    # ------------------------------------------------------------ I/O
    def hf_state_dict(self, dtype=torch.bfloat16):
        out = {}
        for name, t in self.state_dict().items():
            keep_f32 = name.startswith("confidence.") or name.endswith("norm.weight") or "layernorm" in name
            out[name] = t.detach().to(torch.float32 if keep_f32 else dtype).contiguous()
        return out

    def load_hf_state_dict(self, sd):
        mine = self.state_dict()
        extra = set(sd) - set(mine)
        missing = set(mine) - set(sd)
        if extra or missing:
            raise KeyError(f"tensors: unexpected {sorted(extra)[:5]} missing {sorted(missing)[:5]}")
        self.load_state_dict({k: v.to(torch.float32).reshape(mine[k].shape) for k, v in sd.items()})
        return self

    def config_json(self, target_cfg):
        c = {"architectures": ["DSparkDrafter"], "model_type": MODEL_TYPE,
             "hidden_size": self.H, "vocab_size": self.V,
             "target_model_type": target_cfg["model_type"],
             "target_num_hidden_layers": target_cfg["num_hidden_layers"],
             "torch_dtype": "bfloat16"}
        c.update(self.cfg)
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if k in target_cfg:
                c[k] = target_cfg[k]
        return c


def load_drafter(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    cfg = {k: c[k] for k in DEFAULT}
    d = DSpark(cfg, c["hidden_size"], c["vocab_size"])
    d.load_hf_state_dict(st.load_dir(model_dir))
    return d.eval()


def load_target(model_dir, fast=False):
    """fast: the training form of KDA (chunk 16, g clamped at -5 per step, as the target was
    trained), twice as fast; export and golden use the exact form the engine runs."""
    t = kl.KimiLinearForCausalLM.from_pretrained(model_dir, torch.float32).eval()
    t.set_kda_mode("fast", 16) if fast else t.set_kda_mode("chunked", 64)
    for p in t.parameters():
        p.requires_grad_(False)
    return t


@torch.no_grad()
def target_pass(target, ids, layer_ids):
    """ids [B, T] -> (taps [B, T, nt*H], logits [B, T, V]): the residual stream after each
    listed layer (what the C++ model's hidden taps copy) and the target's logits."""
    x = target.model.embed_tokens(ids)
    taps = {}
    for i, layer in enumerate(target.model.layers):
        x, _ = layer(x, None)
        if i in layer_ids:
            taps[i] = x
    logits = F.linear(target.model.norm(x), target.output_weight())
    return torch.cat([taps[i] for i in layer_ids], -1), logits


def gather_rounds(d, ctx_all, ids, anchors):
    """Per (window b, anchor a): context features of positions a-W .. a-1 (valid where >= 0),
    x_a, and the tokens x_{a..a+K} (prev tokens and targets)."""
    W, K = d.cfg["context_window"], d.cfg["block_size"]
    B, T, H = ctx_all.shape
    A = anchors.shape[1]
    offs = torch.arange(-W, 0)
    cpos = anchors.unsqueeze(-1) + offs                                           # [B, A, W]
    valid = cpos >= 0
    cidx = cpos.clamp(min=0)
    bidx = torch.arange(B).view(B, 1, 1).expand(B, A, W)
    ctx = ctx_all[bidx, cidx]                                                      # [B, A, W, H]
    tpos = anchors.unsqueeze(-1) + torch.arange(K + 1)                             # [B, A, K+1]
    toks = ids[torch.arange(B).view(B, 1, 1).expand(B, A, K + 1), tpos]            # [B, A, K+1]
    return (ctx.reshape(B * A, W, H), cpos.reshape(B * A, W), valid.reshape(B * A, W),
            toks.reshape(B * A, K + 1), tpos.reshape(B * A, K + 1))


def round_outputs(d, target, taps, ids, anchors):
    ctx_all = d.context(taps)
    ctx, cpos, valid, toks, tpos = gather_rounds(d, ctx_all, ids, anchors)
    x0 = target.model.embed_tokens(toks[:, 0])
    z = d.block(ctx, cpos, valid, x0, tpos[:, 0])
    logits, conf = d.heads(z, toks[:, :-1], target.output_weight())
    return logits, conf, toks, tpos


def train(a):
    target = load_target(a.target, fast=True)
    tcfg = kl.load_config(a.target)
    cfg = dict(DEFAULT)
    d = DSpark(cfg, target.config.hidden_size, target.config.vocab_size).init_weights(a.seed)
    opt = torch.optim.AdamW([p for p in d.parameters()], lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    data = np.fromfile(os.path.join(a.data, "train.bin"), dtype=np.uint16)
    os.makedirs(a.out_dir, exist_ok=True)
    ckpt = os.path.join(a.out_dir, "latest.pt")
    step, elapsed = 0, 0.0
    if os.path.exists(ckpt):
        ck = torch.load(ckpt)
        d.load_state_dict(ck["drafter"])
        opt.load_state_dict(ck["opt"])
        step, elapsed = ck["step"], ck["elapsed"]
        print(f"resumed at step {step}", flush=True)
    rng = np.random.default_rng(a.seed + step)
    K = cfg["block_size"]
    budget = a.minutes * 60
    t_start = time.time() - elapsed
    last_ckpt = proc_start = time.time()
    wdecay = torch.tensor([a.pos_decay ** j for j in range(K)])
    while True:
        elapsed = time.time() - t_start
        frac = elapsed / budget
        if frac >= 1.0:
            break
        lr = a.lr * (frac / 0.03 if frac < 0.03 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (frac - 0.03) / 0.97)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        starts = rng.integers(0, len(data) - a.seq - 1, a.batch)
        ids = torch.from_numpy(np.stack([data[s:s + a.seq] for s in starts]).astype(np.int64))
        taps, tlogits = target_pass(target, ids, cfg["target_layer_ids"])
        anchors = torch.from_numpy(np.sort(rng.integers(1, a.seq - K, (a.batch, a.anchors)), 1))
        logits, conf, toks, tpos = round_outputs(d, target, taps, ids, anchors)
        bidx = torch.arange(a.batch).repeat_interleave(a.anchors).view(-1, 1).expand(-1, K)
        tl = tlogits[bidx, tpos[:, :K]]                                              # [R, K, V]
        lp = F.log_softmax(logits, -1)
        ce = -lp.gather(-1, toks[:, 1:].unsqueeze(-1)).squeeze(-1)                   # [R, K]
        kd = (F.softmax(tl, -1) * (F.log_softmax(tl, -1) - lp)).sum(-1)              # [R, K]
        agree = (logits.argmax(-1) == tl.argmax(-1)).float()
        bce = F.binary_cross_entropy_with_logits(conf, agree, reduction="none")
        per_pos = (0.5 * ce + 0.5 * kd).mean(0)
        loss = (per_pos * wdecay).sum() / wdecay.sum() + 0.1 * bce.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"step {step} t {elapsed / 60:.1f}m lr {lr:.2e} loss {loss.item():.4f} "
                  f"kd/pos {' '.join(f'{v:.2f}' for v in kd.mean(0).tolist())} "
                  f"agree/pos {' '.join(f'{v:.2f}' for v in agree.mean(0).tolist())}", flush=True)
        if time.time() - last_ckpt > 300 or (a.exit_after_minutes and time.time() - proc_start > a.exit_after_minutes * 60):
            save(ckpt, d, opt, step, time.time() - t_start, a, tcfg)
            last_ckpt = time.time()
            if a.exit_after_minutes and time.time() - proc_start > a.exit_after_minutes * 60:
                sys.exit(3)
    save(ckpt, d, opt, step, time.time() - t_start, a, tcfg, final=True)
    print("done", flush=True)


def save(path, d, opt, step, elapsed, a, tcfg, final=False):
    tmp = path + ".tmp"
    torch.save({"drafter": d.state_dict(), "opt": opt.state_dict(), "cfg": d.cfg, "step": step,
                "elapsed": elapsed, "args": vars(a), "final": final}, tmp)
    os.replace(tmp, path)
    print(f"checkpoint step {step}", flush=True)


def bf16_round(d):
    r = DSpark(d.cfg, d.H, d.V)
    r.load_hf_state_dict(d.hf_state_dict(torch.bfloat16))
    return r.eval()


@torch.no_grad()
def heldout_metrics(d, target, held, seq=256, anchors=48, seed=7, windows=96):
    """Teacher-forced on held-out text (context and prev tokens are the text's): per slot, the
    share of rounds whose draft argmax equals the target's argmax at that position (top-1
    agreement), the share whose whole prefix up to the slot agrees (acceptance, greedy), AL per
    K = 1 + sum of those shares, and how well the confidence head predicts agreement."""
    K = d.cfg["block_size"]
    rng = np.random.default_rng(seed)
    n = min(windows, (len(held) - 1) // seq)
    agree_sum = torch.zeros(K)
    surv_sum = torch.zeros(K)
    conf_sum = torch.zeros(K)
    rounds = 0
    for w in range(0, n, 8):
        ws = list(range(w, min(n, w + 8)))
        ids = torch.from_numpy(np.stack([held[i * seq:(i + 1) * seq] for i in ws]).astype(np.int64))
        taps, tl_all = target_pass(target, ids, d.cfg["target_layer_ids"])
        B = ids.shape[0]
        anc = torch.from_numpy(np.sort(rng.integers(1, seq - K, (B, anchors)), 1))
        logits, conf, toks, tpos = round_outputs(d, target, taps, ids, anc)
        bidx = torch.arange(B).repeat_interleave(anchors).view(-1, 1).expand(-1, K)
        tl = tl_all[bidx, tpos[:, :K]]
        agree = (logits.argmax(-1) == tl.argmax(-1)).float()
        agree_sum += agree.sum(0)
        surv_sum += agree.cumprod(1).sum(0)
        conf_sum += torch.sigmoid(conf).sum(0)
        rounds += agree.shape[0]
    agree = (agree_sum / rounds).tolist()
    surv = (surv_sum / rounds).tolist()
    return {"rounds": rounds, "top1_agreement_per_position": agree,
            "acceptance_per_position_greedy": surv,
            "al_per_k_greedy_teacher_forced": {str(k): 1 + sum(surv[:k]) for k in range(1, K + 1)},
            "mean_confidence_per_position": (conf_sum / rounds).tolist()}


def export(a):
    ck = torch.load(a.ckpt)
    target = load_target(a.target)
    tcfg = kl.load_config(a.target)
    d = DSpark(ck["cfg"], target.config.hidden_size, target.config.vocab_size)
    d.load_state_dict(ck["drafter"])
    d = bf16_round(d)
    os.makedirs(a.out, exist_ok=True)
    st.save_file(d.hf_state_dict(torch.bfloat16), os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(d.config_json(tcfg), f, indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(a.target, fn), os.path.join(a.out, fn))
    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    m = heldout_metrics(d, target, held)
    m.update({"model": os.path.basename(os.path.normpath(a.out)), "role": "parallel drafter",
              "target": os.path.normpath(a.target),
              "params": sum(p.numel() for p in d.parameters()),
              "size_bytes": os.path.getsize(os.path.join(a.out, "model.safetensors")),
              "training": {"steps": ck["step"], "minutes": round(ck["elapsed"] / 60, 1),
                           "final": ck.get("final", False), "args": ck["args"]},
              "reproduce": "tools/train/train_dspark.sh (see tools/train/README.md)"})
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(m, f, indent=2)
    print(json.dumps({k: m[k] for k in ("top1_agreement_per_position", "al_per_k_greedy_teacher_forced")}))


@torch.no_grad()
def golden(a):
    """Golden rounds for the C++ test: a prompt through the target, then one round at the end
    with the real context window; the slot logits (base + Markov with prev = the drafted greedy
    tokens, as the C++ drafter drafts) and the confidences."""
    d = load_drafter(a.model)
    target = load_target(a.target)
    tok_ids = [int(t) for t in a.prompt_ids.split(",")] if a.prompt_ids else None
    if tok_ids is None:
        g = torch.Generator().manual_seed(3)
        tok_ids = torch.randint(0, target.config.vocab_size, (40,), generator=g).tolist()
    ids = torch.tensor([tok_ids])
    taps, tl = target_pass(target, ids[:, :-1], d.cfg["target_layer_ids"])
    n = len(tok_ids) - 1                # x_n = the last prompt token, positions [0, n) computed
    W, K = d.cfg["context_window"], d.cfg["block_size"]
    ctx_all = d.context(taps)[0]
    lo = max(0, n - W)
    ctx = torch.zeros(1, W, d.H)
    cpos = torch.zeros(1, W, dtype=torch.long)
    valid = torch.zeros(1, W, dtype=torch.bool)
    ctx[0, W - (n - lo):] = ctx_all[lo:n]
    cpos[0, W - (n - lo):] = torch.arange(lo, n)
    valid[0, W - (n - lo):] = True
    x0 = target.model.embed_tokens(ids[:, n])
    z = d.block(ctx, cpos, valid, x0, torch.tensor([n]))
    prev = [tok_ids[n]]
    rows, confs, drafted = [], [], []
    for j in range(K):
        lg, cf = d.heads(z[:, j:j + 1], torch.tensor([[prev[-1]]]), target.output_weight())
        rows.append(lg[0, 0].tolist())
        confs.append(float(torch.sigmoid(cf[0, 0])))
        t = int(lg[0, 0].argmax())
        drafted.append(t)
        prev.append(t)
    out = {"prompt_ids": tok_ids, "drafted_greedy": drafted, "confidence": confs, "slot_logits": rows,
           "target_logits_last": tl[0, -1].tolist()}
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"golden: {len(rows)} slots, drafted {drafted}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--target", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--out-dir", required=True)
    t.add_argument("--minutes", type=float, default=35)
    t.add_argument("--batch", type=int, default=4)
    t.add_argument("--seq", type=int, default=256)
    t.add_argument("--anchors", type=int, default=64)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--pos-decay", type=float, default=0.85, help="loss weight of slot j: decay^j")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--exit-after-minutes", type=float, default=0)
    e = sub.add_parser("export")
    e.add_argument("--target", required=True)
    e.add_argument("--ckpt", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--out", required=True)
    g = sub.add_parser("golden")
    g.add_argument("--model", required=True)
    g.add_argument("--target", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--prompt-ids", default="")
    a = ap.parse_args()
    {"train": train, "export": export, "golden": golden}[a.cmd](a)


if __name__ == "__main__":
    main()
