"""Activation memory: what autograd keeps per transformer layer, per micro-batch.

Base: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198), Sec. 4. Their per-layer count for a GPT layer, 16-bit, no
tensor parallelism, with dropout and eager softmax, is (Eq. 1)

    s·b·h·(34 + 5·a·s/h)      bytes,

built from named pieces (attention 11·sbh + 5·a·s²·b, MLP 19·sbh, two LayerNorms 4·sbh).
We keep those pieces and generalise each one (``layer_terms``):

* GQA/MQA: K and V hold ``kv`` heads, not ``a`` (2·s·b·kv·d each instead of 2·sbh).
* Head size ``d`` need not be h/a (Gemma), and V's head size may differ (MLA).
* Gated MLPs (SwiGLU/GeGLU, 3 matrices, intermediate f): gate output, activation output,
  up output and their product (down-projection input) are all saved: 8·s·b·f, as eager
  PyTorch does (torchtitan, Hugging Face); a GeLU MLP keeps 4·s·b·f (= 16·sbh at f = 4h,
  Korthikanti's 8 + 8).
* Dropout: the masks (1 byte/element) and the attention-dropout output exist only when
  ``dropout > 0``; modern LLM pre-training uses none.
* Attention kernel: eager softmax keeps the a·s² scores (2·a·s²·b, plus 3·a·s²·b with
  dropout); flash/SDPA attention (Dao et al. 2022) keeps only the fp32 log-sum-exp, 4·a·s·b.
* MoE: each token is dispatched to ``top_k`` experts, whose inputs and internals are kept
  per routed copy, plus fp32 router logits and probabilities (8·s·b·E).
* MLA (DeepSeek-V2/V3): the latent query/key-value tensors and their norms are kept too.

Tensor parallelism (Korthikanti Eq. 2/4): every term inside the TP region divides by t;
the norm inputs, the inputs of the column-parallel linears and the dropout masks (10·sbh in
their count) divide by t only with sequence parallelism. Context parallelism splits s.

Recompute (Korthikanti Sec. 5): "selective" drops the attention core (the s² terms);
"full" keeps only the layer input (2·sbh, /t with SP), and the backward pass rebuilds one
layer's activations at a time (``recompute_working_set``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.modelspec import ModelSpec

# Bytes per saved activation element for the precisions of spec.Precision.
ACT_BYTES = {"bf16": 2, "fp16": 2, "bf16-pure": 2, "fp8": 2, "fp32": 4}
# fp8 (Transformer Engine style): the inputs of the linear layers are kept in fp8, 1 byte
# (NVIDIA Transformer Engine docs, "Using FP8": the casted input is saved for backward).
FP8_LINEAR_INPUT_BYTES = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ActShape:
    """Local sizes on one rank for one micro-batch."""

    s: int      # sequence length on this rank (seq_len / cp)
    b: int      # micro-batch
    t: int      # tensor-parallel degree
    sp: bool    # sequence parallel
    dropout: bool
    flash: bool
    elem: int   # bytes per element (2 for 16-bit)
    linear_in: float  # bytes per element of a linear layer's saved input (1 for fp8)


def layer_terms(m: ModelSpec, moe_layer: bool, x: ActShape) -> dict[str, float]:
    """Bytes of each activation a layer keeps, without recomputation (see module doc)."""
    s, b, t, e = x.s, x.b, x.t, x.elem
    h, a, d, dv = m.hidden, m.n_heads, m.head_dim, m.v_head_dim
    kv_local = max(m.n_kv_heads / t, 1.0)  # K/V heads on one rank (replicated when t > kv)
    if m.kv_lora_rank:  # MLA: K and V are expanded per query head
        kv_local = a / t
    rep = 1 / t if x.sp else 1.0           # the part outside the TP region
    sbh = s * b * h
    terms = {
        # attention block
        "attn_norm_input": e * sbh * rep,
        "qkv_input": x.linear_in * sbh * rep,
        "q": e * s * b * a * d / t,
        "k": e * s * b * kv_local * d,
        "v": e * s * b * kv_local * dv,
        "out_proj_input": x.linear_in * s * b * a * dv / t,
    }
    if m.kv_lora_rank:
        lat = m.q_lora_rank * 2 + m.kv_lora_rank * 2 + m.qk_rope_dim
        terms["mla_latents"] = e * s * b * lat * rep
    if x.flash:
        terms["attn_core"] = 4 * a * s * b / t  # fp32 log-sum-exp per query row
    else:
        terms["attn_core"] = (e + (3 if x.dropout else 0)) * a * s * s * b / t
    if x.dropout:
        terms["dropout_masks"] = 2 * sbh * rep
    # MLP block
    terms["mlp_norm_input"] = e * sbh * rep
    terms["mlp_input"] = x.linear_in * sbh * rep
    per_f = (3 * e + x.linear_in) if m.gated_mlp else (e + x.linear_in)  # gated: 8 (2+2+2+2), else 4
    if moe_layer:
        k, n_exp = m.top_k, m.n_experts
        terms["router"] = 8 * s * b * n_exp * rep  # fp32 logits + probabilities
        terms["expert_dispatch"] = (x.linear_in + e) * s * b * k * h * rep  # routed copies in and out
        terms["expert_mlp"] = per_f * s * b * k * m.moe_ffn / t
        if m.shared_ffn:
            terms["shared_expert_mlp"] = per_f * s * b * m.shared_ffn / t
    else:
        terms["mlp"] = per_f * s * b * m.ffn / t
    return terms


def layer_bytes(m: ModelSpec, moe_layer: bool, x: ActShape, recompute: str) -> float:
    """Bytes one layer keeps between its forward and backward pass."""
    if recompute == "full":
        return x.elem * x.s * x.b * m.hidden * (1 / x.t if x.sp else 1.0)
    terms = layer_terms(m, moe_layer, x)
    if recompute == "selective" and not x.flash:
        terms.pop("attn_core")
    return sum(terms.values())


def recompute_working_set(m: ModelSpec, moe_layer: bool, x: ActShape) -> float:
    """Full recompute: the backward pass rebuilds one layer's activations at a time."""
    return sum(layer_terms(m, moe_layer, x).values())


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False) -> float:
    """Korthikanti et al. 2022, Eq. 2 (t=1: Eq. 1) and Eq. 4 (sequence parallel): 16-bit GPT layer,
    dropout, eager softmax. s seq len, b micro-batch, h hidden, a heads, t tensor-parallel size."""
    if sp:
        return s * b * h * (34 / t + 5 * a * s / (h * t))
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def logits_bytes(m: ModelSpec, s: int, b: int, t: int) -> float:
    """The LM head's output and the loss's buffers on the last stage.

    Eager PyTorch (Hugging Face, torchtitan) computes bf16 logits (2 B), upcasts them to
    fp32 for cross-entropy (4 B) and keeps the fp32 log-softmax for backward (4 B):
    10 bytes per logit, s·b·V/t logits per rank (vocab-parallel). Korthikanti et al. count
    4·s·b·V/t (fused fp32 loss); chunked/fused losses (e.g. Liger) reach that.
    """
    return 10 * s * b * m.vocab / t
