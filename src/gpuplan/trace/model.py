"""A Llama-family decoder built from a ``ModelSpec`` (torch only; no ``transformers``, no hub).

Covers the dense Llama-like families of the catalogue — llama, mistral, qwen2 (q/k/v bias),
qwen3 (q/k RMSNorm) — with the exact parameter shapes of ``model_families.llama_like``, so
``sum(p.numel())`` equals ``ModelSpec.params_formula``. It is written the way production
trainers run these models on a GPU (torchtitan; Hugging Face with ``attn_implementation="sdpa"``):

* RMSNorm as one fused kernel that keeps its input and the fp32 reciprocal RMS for backward
  (CUDA's ``_fused_rms_norm``, Apex/TE/Liger fused norms). ``FusedRMSNorm`` is that kernel as an
  autograd function: a naive eager RMSNorm would also keep an fp32 copy of its input (4 B/element).
* Attention through ``scaled_dot_product_attention`` (flash: keeps q, k, v, output and the fp32
  log-sum-exp), GQA via ``enable_gqa`` (K/V are not expanded), or an eager causal softmax
  (``training.attention: eager``) that keeps the a·s² probabilities.
* SwiGLU MLP, RoPE, untied or tied LM head; the loss is an fp32 log-softmax + NLL.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec

TRACEABLE_TYPES = ("llama", "mistral", "qwen2", "qwen3")


class FusedRMSNorm(torch.autograd.Function):
    """y = x · rsqrt(mean(x²) + eps) · w, computed in fp32; keeps (x, w, rstd) for backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        y = (x32 * rstd * weight.float()).to(x.dtype)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):  # noqa: ANN205
        x, weight, rstd = ctx.saved_tensors
        x32, g32 = x.float(), grad_y.float()
        xhat = x32 * rstd
        gw = g32 * weight.float()
        dim = x.shape[-1]
        grad_x = rstd * (gw - xhat * (gw * xhat).sum(-1, keepdim=True) / dim)
        grad_w = (g32 * xhat).reshape(-1, dim).sum(0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


class RMSNorm(nn.Module):
    """Fused (``FusedRMSNorm``), or ``hf_eager``: Hugging Face's LlamaRMSNorm.forward op by op — an fp32 copy
    of the input, its mean square, rsqrt, the product, cast back, times the weight — whose saved tensors
    are the fp32 copy and the normalized 16-bit tensor (the stack frameworks.json ``memory.norm_fp32_copy``
    names)."""

    def __init__(self, size: int, eps: float = 1e-5, hf_eager: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.hf_eager = hf_eager

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hf_eager:
            x32 = x.to(torch.float32)
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x32.to(x.dtype)
        return FusedRMSNorm.apply(x, self.weight, self.eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, m: ModelSpec, qkv_bias: bool, qk_norm: bool, eager: bool) -> None:
        super().__init__()
        h, a, kv, d = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim
        self.a, self.kv, self.d, self.eager = a, kv, d, eager
        if eager:
            self.checkpoint_core = False  # recompute selective: recompute the softmax core
        self.q_proj = nn.Linear(h, a * d, bias=qkv_bias)
        self.k_proj = nn.Linear(h, kv * d, bias=qkv_bias)
        self.v_proj = nn.Linear(h, kv * d, bias=qkv_bias)
        self.o_proj = nn.Linear(a * d, h, bias=False)
        self.q_norm = RMSNorm(d) if qk_norm else None
        self.k_norm = RMSNorm(d) if qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, -1, self.d)
        k = self.k_proj(x).view(b, s, -1, self.d)
        v = self.v_proj(x).view(b, s, -1, self.d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if self.eager and self.checkpoint_core:
            from torch.utils.checkpoint import checkpoint

            out = checkpoint(_eager_attention, q, k, v, self.a // k.shape[1], use_reentrant=False)
        elif self.eager:
            out = _eager_attention(q, k, v, self.a // k.shape[1])
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


def _eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    """softmax(q·kᵀ/√d + causal mask)·v in the compute dtype; K/V heads repeated for GQA."""
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return torch.matmul(probs, v)


class _FusedSwiGLU(torch.autograd.Function):
    """silu(gate) * up keeping only its inputs and recomputing the activation in backward — Megatron-Core's
    bias-SwiGLU fusion (fused_bias_swiglu.py: ctx.save_for_backward(input)), Liger's SiLU-mul."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        return grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig


class MLP(nn.Module):
    def __init__(self, h: int, f: int, fused: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return self.down_proj(_FusedSwiGLU.apply(self.gate_proj(x), self.up_proj(x)))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, m: ModelSpec, qkv_bias: bool, qk_norm: bool, eager: bool, hf_norm: bool = False,
                 fused_glu: bool = False) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(m.hidden, hf_eager=hf_norm)
        self.self_attn = Attention(m, qkv_bias, qk_norm, eager)
        self.post_attention_layernorm = RMSNorm(m.hidden, hf_eager=hf_norm)
        self.mlp = MLP(m.hidden, m.ffn, fused_glu)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def block_options(m: ModelSpec) -> tuple[bool, bool]:
    """(q/k/v bias, q/k RMSNorm) of the blocks ``m`` describes, or a GpuplanError for what trace cannot build."""
    if m.model_type not in TRACEABLE_TYPES or m.moe:
        raise GpuplanError(
            f"trace builds {', '.join(TRACEABLE_TYPES)} (dense) models itself; {m.name} is "
            f"{m.model_type}{' with experts' if m.moe else ''}: pass your own model as "
            "--module package.module:factory")
    names = {w.name for lg in m.layers for w in lg.weights if w.bias}
    if "self_attn.o_proj" in names or "mlp.gate_proj" in names:
        raise GpuplanError(f"{m.name}: o_proj/MLP biases are not built by trace; use --module")
    return "self_attn.q_proj" in names, any(w.name == "self_attn.q_norm" for lg in m.layers for w in lg.weights)


def inv_freq(m: ModelSpec) -> torch.Tensor:
    half = m.head_dim // 2
    return 1.0 / 10000 ** (torch.arange(0, half, dtype=torch.float32) / half)


def rope_tables(freq: torch.Tensor, s: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.arange(s, device=freq.device, dtype=torch.float32)
    emb = torch.outer(t, freq)
    emb = torch.cat((emb, emb), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class CausalLM(nn.Module):
    """``forward(ids)`` → logits; ``loss(logits, labels)`` → mean token cross-entropy (fp32)."""

    def __init__(self, m: ModelSpec, eager: bool = False, hf_norm: bool = False, fused_glu: bool = False) -> None:
        super().__init__()
        qkv_bias, qk_norm = block_options(m)
        self.spec_name = m.name
        self.embed_tokens = nn.Embedding(m.vocab, m.hidden)
        self.layers = nn.ModuleList(Block(m, qkv_bias, qk_norm, eager, hf_norm, fused_glu) for _ in range(m.n_layers))
        self.norm = RMSNorm(m.hidden, hf_eager=hf_norm)
        self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)
        if m.tied_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.register_buffer("inv_freq", inv_freq(m), persistent=False)

    def rope(self, s: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(self.inv_freq, s, dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        cos, sin = self.rope(ids.shape[1], x.dtype)
        for block in self.layers:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy with the logits upcast to fp32 (Hugging Face, torchtitan)."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))
