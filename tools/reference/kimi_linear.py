"""Reference PyTorch implementation of the `kimi_linear` architecture.

Follows docs/model-format.md (Numerics) exactly; the C++ engine is tested
against this file (tests/data/golden/*). Read top to bottom, llama2.c style:

  RMSNorm, SwiGLU MLP, MoE (sigmoid router), KDA (recurrent + chunked), MLA (nope),
  decoder layer, model, config/weights I/O.

Everything computes in the dtype of the weights (f32 for training, f64 for golden logits);
RMSNorm and softmax are taken in at least f32.
"""
import json
import math
import os
from dataclasses import dataclass, field, asdict
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from . import safetensors_io as st
except ImportError:  # run as a script / imported with tools/reference on sys.path
    import safetensors_io as st


# ----------------------------------------------------------------------------- config

@dataclass
class KimiLinearConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    num_hidden_layers: int = 4
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    hidden_act: str = "silu"
    intermediate_size: int = 704
    bos_token_id: Optional[int] = None
    eos_token_id: object = None
    pad_token_id: Optional[int] = None
    # KDA
    kda_layers: List[int] = field(default_factory=lambda: [1, 2, 3])
    full_attn_layers: List[int] = field(default_factory=lambda: [4])
    kda_num_heads: int = 4
    kda_head_dim: int = 64
    short_conv_kernel_size: int = 4
    # MLA
    num_attention_heads: int = 4
    q_lora_rank: Optional[int] = None
    kv_lora_rank: int = 128
    qk_nope_head_dim: int = 64
    qk_rope_head_dim: int = 32
    v_head_dim: int = 64
    mla_use_nope: bool = True
    # FFN / MoE
    first_k_dense_replace: int = 1
    moe_layer_freq: int = 1
    num_experts: int = 8
    num_experts_per_token: int = 2
    num_shared_experts: int = 1
    moe_intermediate_size: int = 128
    moe_renormalize: bool = True
    moe_router_activation_func: str = "sigmoid"
    routed_scaling_factor: float = 1.0
    use_grouped_topk: bool = False
    num_expert_group: int = 1
    topk_group: int = 1
    max_position_embeddings: int = 4096

    def is_kda(self, i):  # i is 0-based
        return (i + 1) in self.kda_layers

    def is_moe(self, i):
        return self.num_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0

    @staticmethod
    def from_dict(d):
        c = KimiLinearConfig()
        lac = d.get("linear_attn_config") or {}
        for k, v in d.items():
            if k in ("linear_attn_config",):
                continue
            if hasattr(c, k):
                setattr(c, k, v)
        if lac:
            c.kda_layers = list(lac.get("kda_layers", []))
            c.full_attn_layers = list(lac.get("full_attn_layers", []))
            c.kda_num_heads = lac["num_heads"]
            c.kda_head_dim = lac["head_dim"]
            c.short_conv_kernel_size = lac.get("short_conv_kernel_size", 4)
        # real configs sometimes name these differently
        if "num_experts_per_token" not in d and "num_experts_per_tok" in d:
            c.num_experts_per_token = d["num_experts_per_tok"]
        if "moe_renormalize" not in d and "norm_topk_prob" in d:
            c.moe_renormalize = d["norm_topk_prob"]
        return c

    def to_dict(self):
        d = asdict(self)
        lac = {
            "kda_layers": d.pop("kda_layers"),
            "full_attn_layers": d.pop("full_attn_layers"),
            "num_heads": d.pop("kda_num_heads"),
            "head_dim": d.pop("kda_head_dim"),
            "short_conv_kernel_size": d.pop("short_conv_kernel_size"),
        }
        out = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear"}
        out.update(d)
        out["linear_attn_config"] = lac
        out["torch_dtype"] = "bfloat16"
        return out


# ----------------------------------------------------------------------------- basics

def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2) + eps) * w, computed in (at least) f32."""
    dt = x.dtype
    xf = x.float() if dt in (torch.bfloat16, torch.float16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(y.dtype)).to(dt)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def l2_norm(x, eps=1e-6):
    """x * rsqrt(sum(x^2) + 1e-6) over the last dim."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate x) * up x)."""

    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """One routed expert; HF names w1 (gate), w3 (up), w2 (down)."""

    def __init__(self, hidden, inter):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)
        self.w2 = nn.Linear(inter, hidden, bias=False)
        self.w3 = nn.Linear(hidden, inter, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Router(nn.Module):
    def __init__(self, hidden, n_experts):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, hidden))
        # selection-only bias; not trained by gradient (aux-loss-free balancing updates it)
        self.register_buffer("e_score_correction_bias", torch.zeros(n_experts))


class MoE(nn.Module):
    """Sigmoid router, top-k over (score + correction bias), renormalised chosen scores
    times routed_scaling_factor, plus shared experts."""

    def __init__(self, c: KimiLinearConfig):
        super().__init__()
        self.c = c
        self.gate = Router(c.hidden_size, c.num_experts)
        self.experts = nn.ModuleList(Expert(c.hidden_size, c.moe_intermediate_size)
                                     for _ in range(c.num_experts))
        self.shared_experts = (MLP(c.hidden_size, c.moe_intermediate_size * c.num_shared_experts)
                               if c.num_shared_experts > 0 else None)
        self.last_load = None  # tokens per expert of the last forward (for bias balancing)

    def route(self, x):
        """x [N, H] -> (topk_idx [N, k], topk_w [N, k])."""
        c = self.c
        logits = F.linear(x, self.gate.weight)
        scores = torch.sigmoid(logits.float())
        biased = scores + self.gate.e_score_correction_bias.float()
        if c.use_grouped_topk and c.num_expert_group > 1:
            n = biased.shape[0]
            g = biased.view(n, c.num_expert_group, -1)
            group_scores = g.topk(2, dim=-1).values.sum(-1)           # [N, groups]
            keep = group_scores.topk(c.topk_group, dim=-1).indices     # [N, topk_group]
            mask = torch.zeros_like(group_scores).scatter_(1, keep, 1.0)
            mask = mask.unsqueeze(-1).expand_as(g).reshape(n, -1)
            biased = biased.masked_fill(mask == 0, float("-inf"))
        idx = biased.topk(c.num_experts_per_token, dim=-1).indices
        w = scores.gather(1, idx)
        if c.moe_renormalize:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        return idx, w.to(x.dtype)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        idx, w = self.route(x)
        k = idx.shape[1]
        flat = idx.flatten()
        load = torch.bincount(flat, minlength=self.c.num_experts)
        self.last_load = load.detach()
        order = torch.argsort(flat, stable=True)        # rows grouped by expert
        tok = order // k
        xs = x[tok]
        ys = []
        start = 0
        for e, n in enumerate(load.tolist()):
            if n:
                ys.append(self.experts[e](xs[start:start + n]))
            start += n
        ys = torch.cat(ys, 0) * w.flatten()[order].unsqueeze(-1)
        out = torch.zeros_like(x).index_add(0, tok, ys)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out.reshape(shape)


# ----------------------------------------------------------------------------- KDA

def causal_conv_silu(x, weight, conv_state=None):
    """Depthwise causal conv over time then SiLU.
    x [B, T, D]; weight [D, 1, K]; conv_state [B, K-1, D] = previous inputs (zeros at start).
    Returns (y [B, T, D], new conv_state [B, K-1, D])."""
    B, T, D = x.shape
    K = weight.shape[-1]
    if conv_state is None:
        conv_state = x.new_zeros(B, K - 1, D)
    xp = torch.cat([conv_state.to(x.dtype), x], dim=1)             # [B, K-1+T, D]
    y = F.conv1d(xp.transpose(1, 2), weight.to(x.dtype), groups=D)  # [B, D, T]
    return F.silu(y.transpose(1, 2)), xp[:, T:, :] if K > 1 else conv_state


def kda_recurrent(q, k, v, g, beta, S=None):
    """The reference recurrence, token by token.
    q, k [B, T, nh, dk] (q already scaled), v [B, T, nh, dv], g [B, T, nh, dk] (log decay),
    beta [B, T, nh]. S [B, nh, dk, dv] or None. Returns (o [B, T, nh, dv], S)."""
    B, T, nh, dk = q.shape
    dv = v.shape[-1]
    if S is None:
        S = q.new_zeros(B, nh, dk, dv)
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)                                  # diag(exp g) S
        kt, vt, bt = k[:, t], v[:, t], beta[:, t]
        pred = torch.einsum("bhk,bhkv->bhv", kt, S)                               # S^T k
        S = S + bt[..., None, None] * kt.unsqueeze(-1) * (vt - pred).unsqueeze(-2)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))                     # S^T q
    return torch.stack(out, dim=1), S


def kda_chunked(q, k, v, g, beta, S=None, chunk=64):
    """Chunked (WY) form of the same recurrence (docs/model-format.md, Numerics). Same args/returns.
    Within a chunk, G = inclusive cumsum of g;
      A[i,j]  = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (j < i)
      Aqk[i,j]= sum_d q_id k_jd exp(G_id - G_jd)           (j <= i)
      T = (I + A)^-1 diag(beta); W = T (exp(G) * K); U = T V
      V' = U - W S; O = (Q * exp(G)) S + Aqk V'; S <- exp(G_C) S + (K * exp(G_C - G))^T V'
    exp(G_i - G_j) is formed pairwise (exponent <= 0), so no overflow for any decay."""
    B, T, nh, dk = q.shape
    dv = v.shape[-1]
    if S is None:
        S = q.new_zeros(B, nh, dk, dv)
    pad = (-T) % chunk
    if pad:  # zero-padded tail: k = 0, beta = 0, g = 0 leave the state unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // chunk
    C = chunk

    def r(x):  # [B, T, nh, d] -> [B, nh, N, C, d]
        return x.reshape(B, N, C, nh, -1).permute(0, 3, 1, 2, 4)

    q, k, v, g = r(q), r(k), r(v), r(g)
    beta = beta.reshape(B, N, C, nh).permute(0, 3, 1, 2)                 # [B, nh, N, C]
    G = g.cumsum(dim=3)                                                  # [B, nh, N, C, dk]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # j <= i
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    # exp(G_i - G_j) for j <= i; the exponent is clamped at 0 so entries j > i (masked below)
    # never overflow.
    decay = torch.exp((G.unsqueeze(4) - G.unsqueeze(3)).clamp(max=0.0))  # [.., i, j, dk]
    kdec = decay * k.unsqueeze(3)                                        # k_jd exp(G_id - G_jd)
    A = torch.einsum("bhnijd,bhnid->bhnij", kdec, k) * beta.unsqueeze(-1) * strict
    Aqk = torch.einsum("bhnijd,bhnid->bhnij", kdec, q) * causal
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    L = eye + A                                                          # unit lower triangular
    eG = torch.exp(G)
    rhs = torch.cat([eG * k, v], dim=-1) * beta.unsqueeze(-1)            # diag(beta) [eG*K | V]
    WU = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    W, U = WU[..., :dk], WU[..., dk:]
    qg = q * eG
    GC = G[:, :, :, -1:, :]                                              # [B, nh, N, 1, dk]
    kdT = (k * torch.exp(GC - G)).transpose(-1, -2)                      # (K * exp(G_C - G))^T
    eGC = torch.exp(GC).squeeze(3).unsqueeze(-1)                         # [B, nh, N, dk, 1]
    outs = []
    # unbind (not indexing) so autograd does not materialise a full-size zero tensor per chunk
    for Wn, Un, qn, An, kn, en in zip(W.unbind(2), U.unbind(2), qg.unbind(2), Aqk.unbind(2),
                                      kdT.unbind(2), eGC.unbind(2)):
        Vp = Un - Wn @ S                                                 # V' = U - W S
        outs.append(qn @ S + An @ Vp)                                    # O
        S = en * S + kn @ Vp                                             # state update
    o = torch.stack(outs, dim=2)                                         # [B, nh, N, C, dv]
    o = o.permute(0, 2, 3, 1, 4).reshape(B, N * C, nh, dv)[:, :T]
    return o, S


def kda_chunked_fast(q, k, v, g, beta, S=None, chunk=32):
    """Training-speed variant of kda_chunked: exp(G_i - G_j) is factorised as
    exp(G_i - M) * exp(M - G_j) with M = G at the chunk's middle, so A and Aqk are plain
    matmuls (no [C, C, dk] tensor). Exact in exact arithmetic; in f32 it needs
    |G_i - G_j| < ~80 across a chunk (masked pairs included), i.e. g >= -80 / chunk per step
    (-5 at chunk 16). KDA.forward clamps
    g to that bound in this mode only (training); the C++ engine and the golden logits use
    the unclamped recurrence, which differs only for channels that keep < 0.7% per step."""
    B, T, nh, dk = q.shape
    dv = v.shape[-1]
    if S is None:
        S = q.new_zeros(B, nh, dk, dv)
    pad = (-T) % chunk
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // chunk
    C = chunk

    def r(x):
        return x.reshape(B, N, C, nh, -1).permute(0, 3, 1, 2, 4)

    q, k, v, g = r(q), r(k), r(v), r(g)
    beta = beta.reshape(B, N, C, nh).permute(0, 3, 1, 2)
    G = g.cumsum(dim=3)
    M = G[:, :, :, C // 2 - 1: C // 2, :]
    kp = k * torch.exp(G - M)                                            # k_i exp(G_i - M)
    qp = q * torch.exp(G - M)
    km = k * torch.exp(M - G)                                            # k_j exp(M - G_j)
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    A = (kp @ km.transpose(-1, -2)) * beta.unsqueeze(-1) * strict
    Aqk = (qp @ km.transpose(-1, -2)) * causal
    L = torch.eye(C, dtype=q.dtype, device=q.device) + A
    eG = torch.exp(G)
    rhs = torch.cat([eG * k, v], dim=-1) * beta.unsqueeze(-1)
    WU = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    W, U = WU[..., :dk], WU[..., dk:]
    qg = q * eG
    GC = G[:, :, :, -1:, :]
    kdT = (k * torch.exp(GC - G)).transpose(-1, -2)
    eGC = torch.exp(GC).squeeze(3).unsqueeze(-1)
    outs = []
    for Wn, Un, qn, An, kn, en in zip(W.unbind(2), U.unbind(2), qg.unbind(2), Aqk.unbind(2),
                                      kdT.unbind(2), eGC.unbind(2)):
        Vp = Un - Wn @ S
        outs.append(qn @ S + An @ Vp)
        S = en * S + kn @ Vp
    o = torch.stack(outs, dim=2)
    o = o.permute(0, 2, 3, 1, 4).reshape(B, N * C, nh, dv)[:, :T]
    return o, S


class KDA(nn.Module):
    def __init__(self, c: KimiLinearConfig):
        super().__init__()
        H, nh, hd, K = c.hidden_size, c.kda_num_heads, c.kda_head_dim, c.short_conv_kernel_size
        self.nh, self.hd, self.eps = nh, hd, c.rms_norm_eps
        D = nh * hd
        self.q_proj = nn.Linear(H, D, bias=False)
        self.k_proj = nn.Linear(H, D, bias=False)
        self.v_proj = nn.Linear(H, D, bias=False)
        self.q_conv1d = nn.Parameter(torch.empty(D, 1, K))  # saved as q_conv1d.weight
        self.k_conv1d = nn.Parameter(torch.empty(D, 1, K))
        self.v_conv1d = nn.Parameter(torch.empty(D, 1, K))
        self.f_a_proj = nn.Linear(H, hd, bias=False)
        self.f_b_proj = nn.Linear(hd, D, bias=False)
        self.dt_bias = nn.Parameter(torch.empty(D))
        self.A_log = nn.Parameter(torch.empty(1, 1, nh, 1))
        self.b_proj = nn.Linear(H, nh, bias=False)
        self.g_a_proj = nn.Linear(H, hd, bias=False)
        self.g_b_proj = nn.Linear(hd, D, bias=False)
        self.o_norm = RMSNorm(hd, c.rms_norm_eps)
        self.o_proj = nn.Linear(D, H, bias=False)
        self.chunk = 64
        self.mode = "chunked"  # or "recurrent", or "fast" (training)

    def forward(self, x, state=None):
        """x [B, T, H]; state = (conv_q, conv_k, conv_v, S) or None. Returns (y, new state)."""
        B, T, _ = x.shape
        nh, hd = self.nh, self.hd
        cq, ck, cv, S = state if state is not None else (None, None, None, None)
        q, cq = causal_conv_silu(self.q_proj(x), self.q_conv1d, cq)
        k, ck = causal_conv_silu(self.k_proj(x), self.k_conv1d, ck)
        v, cv = causal_conv_silu(self.v_proj(x), self.v_conv1d, cv)
        q = l2_norm(q.view(B, T, nh, hd)) * hd ** -0.5
        k = l2_norm(k.view(B, T, nh, hd))
        v = v.view(B, T, nh, hd)
        beta = torch.sigmoid(self.b_proj(x))                                        # [B, T, nh]
        gf = self.f_b_proj(self.f_a_proj(x)) + self.dt_bias.to(x.dtype)
        g = -torch.exp(self.A_log.to(x.dtype).view(nh, 1)) * F.softplus(gf).view(B, T, nh, hd)
        if self.mode == "recurrent":
            o, S = kda_recurrent(q, k, v, g, beta, S)
        elif self.mode == "fast":  # training only, see kda_chunked_fast
            g = g.clamp(min=-80.0 / self.chunk)
            o, S = kda_chunked_fast(q, k, v, g, beta, S, self.chunk)
        else:
            o, S = kda_chunked(q, k, v, g, beta, S, self.chunk)
        o = rms_norm(o, self.o_norm.weight, self.eps)                                # per head
        gate = torch.sigmoid(self.g_b_proj(self.g_a_proj(x))).view(B, T, nh, hd)
        y = self.o_proj((o * gate).reshape(B, T, nh * hd))
        return y, (cq, ck, cv, S)


# ----------------------------------------------------------------------------- MLA

class MLA(nn.Module):
    """Multi-head latent attention without positional encoding (mla_use_nope)."""

    def __init__(self, c: KimiLinearConfig):
        super().__init__()
        assert c.q_lora_rank is None, "q_lora_rank must be null"
        H, nah = c.hidden_size, c.num_attention_heads
        self.nah, self.nope, self.rope, self.vd = nah, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.r = c.kv_lora_rank
        self.q_proj = nn.Linear(H, nah * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, self.r + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.r, c.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.r, nah * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(nah * self.vd, H, bias=False)

    def forward(self, x, cache=None):
        """x [B, T, H]; cache = latent [B, T_past, r + rope] or None. Returns (y, new cache)."""
        B, T, _ = x.shape
        nah, nope, rope, vd, r = self.nah, self.nope, self.rope, self.vd, self.r
        q = self.q_proj(x).view(B, T, nah, nope + rope)
        lat = self.kv_a_proj_with_mqa(x)                                   # [c | k_pe]
        lat = torch.cat([self.kv_a_layernorm(lat[..., :r]), lat[..., r:]], dim=-1)
        if cache is not None:
            lat = torch.cat([cache, lat], dim=1)
        Tk = lat.shape[1]
        kv = self.kv_b_proj(lat[..., :r]).view(B, Tk, nah, nope + vd)
        k_nope, v = kv[..., :nope], kv[..., nope:]
        k_pe = lat[..., r:].unsqueeze(2).expand(B, Tk, nah, rope)
        k = torch.cat([k_nope, k_pe], dim=-1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (nope + rope) ** -0.5
        past = Tk - T
        mask = torch.ones(T, Tk, dtype=torch.bool, device=x.device).tril(past)
        scores = scores.masked_fill(~mask, float("-inf"))
        p = torch.softmax(scores.float(), dim=-1).to(x.dtype)
        o = torch.einsum("bhqk,bkhd->bqhd", p, v).reshape(B, T, nah * vd)
        return self.o_proj(o), lat


# ----------------------------------------------------------------------------- model

class DecoderLayer(nn.Module):
    def __init__(self, c: KimiLinearConfig, i):
        super().__init__()
        self.is_kda = c.is_kda(i)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = KDA(c) if self.is_kda else MLA(c)
        if c.is_moe(i):
            self.block_sparse_moe = MoE(c)
            self.mlp = None
        else:
            self.mlp = MLP(c.hidden_size, c.intermediate_size)
            self.block_sparse_moe = None

    def forward(self, x, state=None):
        h, state = self.self_attn(self.input_layernorm(x), state)
        x = x + h
        y = self.post_attention_layernorm(x)
        y = self.mlp(y) if self.mlp is not None else self.block_sparse_moe(y)
        return x + y, state


class KimiLinearModel(nn.Module):
    def __init__(self, c: KimiLinearConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class KimiLinearForCausalLM(nn.Module):
    def __init__(self, c: KimiLinearConfig):
        super().__init__()
        self.config = c
        self.model = KimiLinearModel(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def set_kda_mode(self, mode, chunk=64):
        for l in self.model.layers:
            if l.is_kda:
                l.self_attn.mode = mode
                l.self_attn.chunk = chunk

    def forward(self, ids, states=None, return_hidden=False):
        """ids [B, T] long; states: list per layer (from a previous call) or None.
        Returns (logits [B, T, V], new states)."""
        x = self.model.embed_tokens(ids)
        states = states or [None] * len(self.model.layers)
        new = []
        for layer, s in zip(self.model.layers, states):
            x, s = layer(x, s)
            new.append(s)
        x = self.model.norm(x)
        if return_hidden:
            return x, new
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w), new

    def output_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    # --------------------------------------------------------------- init
    @torch.no_grad()
    def init_weights(self, seed=0, std=0.02):
        g = torch.Generator().manual_seed(seed)
        c = self.config
        n_layers = c.num_hidden_layers
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            elif name.endswith("conv1d"):
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1]) ** 0.5)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1, 16, generator=g)))
            elif name.endswith("dt_bias"):
                # softplus(dt_bias) = dt ~ logU(1e-3, 1e-1)
                dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight") or name.endswith("w2.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * std / math.sqrt(2 * n_layers))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        return self

    # --------------------------------------------------------------- I/O
    def hf_state_dict(self, dtype=torch.bfloat16):
        """HF names; conv1d / dt_bias / A_log / e_score_correction_bias stay F32."""
        out = {}
        for name, t in self.state_dict().items():
            if name.endswith("_conv1d"):
                name = name + ".weight"
            keep_f32 = (name.endswith("conv1d.weight") or name.endswith("dt_bias")
                        or name.endswith("A_log") or name.endswith("e_score_correction_bias"))
            out[name] = t.detach().to(torch.float32 if keep_f32 else dtype).contiguous()
        return out

    def load_hf_state_dict(self, sd, dtype=torch.float32):
        mine = self.state_dict()
        fixed = {}
        for name, t in sd.items():
            key = name[:-len(".weight")] if name.endswith("conv1d.weight") else name
            if key not in mine:
                raise KeyError(f"unexpected tensor {name}")
            fixed[key] = t.to(dtype).reshape(mine[key].shape)
        missing = set(mine) - set(fixed)
        if missing:
            raise KeyError(f"missing tensors: {sorted(missing)[:5]}")
        self.load_state_dict(fixed)
        return self

    def save_pretrained(self, out_dir, dtype=torch.bfloat16, extra_config=None):
        os.makedirs(out_dir, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["torch_dtype"] = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[dtype]
        if extra_config:
            cfg.update(extra_config)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        st.save_file(self.hf_state_dict(dtype), os.path.join(out_dir, "model.safetensors"),
                     metadata={"format": "pt"})

    @staticmethod
    def from_pretrained(model_dir, dtype=torch.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = KimiLinearConfig.from_dict(json.load(f))
        m = KimiLinearForCausalLM(c)
        m.load_hf_state_dict(st.load_dir(model_dir), dtype)
        return m.to(dtype)


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


# ----------------------------------------------------------------------------- cost

def flops_per_token(c: KimiLinearConfig, ctx=256):
    """Multiply-accumulates per token (forward) excluding embedding and lm_head,
    plus the lm_head separately. KDA state update ~ 4*dk*dv per head; MLA scores ~ ctx/2."""
    H = c.hidden_size
    body = 0
    for i in range(c.num_hidden_layers):
        if c.is_kda(i):
            D = c.kda_num_heads * c.kda_head_dim
            body += 4 * H * D + 2 * (H * c.kda_head_dim + c.kda_head_dim * D) + H * c.kda_num_heads
            body += c.kda_num_heads * 4 * c.kda_head_dim * c.kda_head_dim
        else:
            nah = c.num_attention_heads
            body += H * nah * (c.qk_nope_head_dim + c.qk_rope_head_dim) + H * (c.kv_lora_rank + c.qk_rope_head_dim)
            body += c.kv_lora_rank * nah * (c.qk_nope_head_dim + c.v_head_dim) + nah * c.v_head_dim * H
            body += nah * (ctx // 2) * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)
        if c.is_moe(i):
            body += H * c.num_experts + 3 * H * c.moe_intermediate_size * (c.num_experts_per_token + c.num_shared_experts)
        else:
            body += 3 * H * c.intermediate_size
    return body, H * c.vocab_size
