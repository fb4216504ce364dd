"""Reference PyTorch implementation of Hugging Face Llama (docs/model-format.md, `llama`).

GQA attention with rotate-half RoPE (pairs i, i + hd/2, theta = rope_theta), dense SwiGLU,
RMSNorm in f32, tied or untied LM head. HF config keys and weight names.
"""
import json
import math
import os
from dataclasses import dataclass, asdict
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from . import safetensors_io as st
    from .kimi_linear import RMSNorm, MLP
except ImportError:
    import safetensors_io as st
    from kimi_linear import RMSNorm, MLP


@dataclass
class LlamaConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 688
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    num_hidden_layers: int = 2
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 4096
    head_dim: Optional[int] = None
    hidden_act: str = "silu"
    bos_token_id: Optional[int] = None
    eos_token_id: object = None

    @property
    def hd(self):
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @staticmethod
    def from_dict(d):
        c = LlamaConfig()
        for k, v in d.items():
            if hasattr(c, k) and k != "hd":
                setattr(c, k, v)
        if c.num_key_value_heads is None:
            c.num_key_value_heads = c.num_attention_heads
        return c

    def to_dict(self):
        d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
        d.update(asdict(self))
        if d["head_dim"] is None:
            d.pop("head_dim")
        return d


def rope(x, pos, theta):
    """Rotate-half RoPE. x [B, T, h, hd]; pos [T] absolute positions."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))    # [hd/2]
    ang = pos.to(torch.float64)[:, None] * inv[None, :]                          # [T, hd/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[None, :, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.nh, self.nkv, self.hd, self.theta = c.num_attention_heads, c.num_key_value_heads, c.hd, c.rope_theta
        H = c.hidden_size
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)

    def forward(self, x, cache=None):
        """cache = (k [B, Tp, nkv, hd] already rotated, v) or None."""
        B, T, _ = x.shape
        past = 0 if cache is None else cache[0].shape[1]
        pos = torch.arange(past, past + T)
        q = rope(self.q_proj(x).view(B, T, self.nh, self.hd), pos, self.theta)
        k = rope(self.k_proj(x).view(B, T, self.nkv, self.hd), pos, self.theta)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        if cache is not None:
            k = torch.cat([cache[0], k], 1)
            v = torch.cat([cache[1], v], 1)
        rep = self.nh // self.nkv                       # query head h uses kv head h // rep
        kk = k.repeat_interleave(rep, dim=2)
        vv = v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(self.hd)
        mask = torch.ones(T, past + T, dtype=torch.bool).tril(past)
        p = torch.softmax(s.masked_fill(~mask, float("-inf")).float(), -1).to(x.dtype)
        o = torch.einsum("bhqk,bkhd->bqhd", p, vv).reshape(B, T, -1)
        return self.o_proj(o), (k, v)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x, cache=None):
        h, cache = self.self_attn(self.input_layernorm(x), cache)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, ids, caches=None):
        x = self.model.embed_tokens(ids)
        caches = caches or [None] * len(self.model.layers)
        new = []
        for layer, cache in zip(self.model.layers, caches):
            x, cache = layer(x, cache)
            new.append(cache)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w), new

    @torch.no_grad()
    def init_weights(self, seed=0, std=0.02):
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        return self

    def save_pretrained(self, out_dir, dtype=torch.bfloat16):
        os.makedirs(out_dir, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["torch_dtype"] = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[dtype]
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        sd = {k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}
        st.save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    @staticmethod
    def from_pretrained(model_dir, dtype=torch.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = LlamaConfig.from_dict(json.load(f))
        m = LlamaForCausalLM(c)
        sd = {k: v.to(dtype) for k, v in st.load_dir(model_dir).items()}
        m.load_state_dict(sd)
        return m.to(dtype)
