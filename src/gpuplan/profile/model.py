"""A compact decoder-only transformer built from a ``ModelSpec`` (Llama/Mistral/Qwen family).

Used by the trial runs: RMSNorm, rotary embeddings, grouped-query attention through
``scaled_dot_product_attention``, SwiGLU MLP, tied or untied LM head — the same weight shapes
as the Hugging Face checkpoints, so the parameter count equals ``ModelSpec.params``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpuplan.errors import GpuplanError
from gpuplan.modelspec import ModelSpec

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding on (batch, heads, seq, head_dim)."""
    d = x.shape[-1]
    pos = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
    inv = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = torch.outer(pos, inv)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, m: ModelSpec, qkv_bias: bool, qk_norm: bool) -> None:
        super().__init__()
        h, a, kv, d = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim
        self.a, self.kv, self.d = a, kv, d
        self.input_layernorm = RMSNorm(h)
        self.q_proj = nn.Linear(h, a * d, bias=qkv_bias)
        self.k_proj = nn.Linear(h, kv * d, bias=qkv_bias)
        self.v_proj = nn.Linear(h, kv * d, bias=qkv_bias)
        self.o_proj = nn.Linear(a * d, h, bias=False)
        self.q_norm = RMSNorm(d) if qk_norm else None
        self.k_norm = RMSNorm(d) if qk_norm else None
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj = nn.Linear(h, m.ffn, bias=False)
        self.up_proj = nn.Linear(h, m.ffn, bias=False)
        self.down_proj = nn.Linear(m.ffn, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k_proj(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.kv, self.d).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.a)
        x = x + self.o_proj(o.transpose(1, 2).reshape(b, s, self.a * self.d))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class DecoderLM(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        if m.model_type not in SUPPORTED or m.moe or m.kv_lora_rank:
            raise GpuplanError(f"trial runs support dense {', '.join(SUPPORTED)} models; {m.name} is "
                               f"{m.model_type}: profile a supported model, or use `gpuplan evaluate`")
        names = {w.name.rsplit(".", 1)[-1] for lg in m.layers for w in lg.weights if w.bias}
        qkv_bias = bool(names & {"q_proj", "k_proj", "v_proj"})
        qk_norm = any(w.name.endswith("q_norm") for lg in m.layers for w in lg.weights)
        self.embed_tokens = nn.Embedding(m.vocab, m.hidden)
        self.layers = nn.ModuleList(Block(m, qkv_bias, qk_norm) for _ in range(m.n_layers))
        self.norm = RMSNorm(m.hidden)
        self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)
        if m.tied_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
