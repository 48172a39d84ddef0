"""Rotary decoders with LayerNorm: Nemotron (LayerNorm1P, squared-ReLU MLP), StarCoder2 (GeLU MLP with
biases, sliding window) and Cohere / Cohere 2 (one weight-only LayerNorm feeding attention and MLP in
parallel). Each lists every parameter tensor the matching ``transformers`` class creates (see
``families``); defaults are those of the family's config class, recorded in ``assumed`` where they shape
the weights."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie, windows
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["cohere", "nemotron", "starcoder2"]


def _shape(c: Cfg) -> tuple[int, int, int, int, int]:
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    return (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
            c.int("intermediate_size"), c.int("vocab_size"))


def _qkvo(h: int, nh: int, nkv: int, d: int, bias: bool) -> list[Weight]:
    return (lin("self_attn.q_proj", nh * d, h, "attention", bias)
            + lin("self_attn.k_proj", nkv * d, h, "attention", bias)
            + lin("self_attn.v_proj", nkv * d, h, "attention", bias)
            + lin("self_attn.o_proj", h, nh * d, "attention", bias))


def _head(c: Cfg, V: int, h: int, tied: bool, norm_bias: bool) -> tuple[Weight, ...]:
    return tuple(nrm("norm", h, norm_bias) + ([] if tied else emb("lm_head", V, h, "head")))


def nemotron(c: Cfg, name: str) -> ModelSpec:
    """NemotronForCausalLM: LayerNorm1P (a LayerNorm with weight and bias whose weight is stored as w − 1),
    q/k/v/o, and a two-matrix MLP up_proj → relu² → down_proj (NemotronConfig: hidden_act relu2, 50 % of the
    head dimension rotated, untied, no biases)."""
    h, L, nh, ffn, V = _shape(c)
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh)
    mb = c.flag("mlp_bias", default=False)
    block = (nrm("input_layernorm", h, True) + _qkvo(h, nh, nkv, d, c.flag("attention_bias", default=False))
             + nrm("post_attention_layernorm", h, True)
             + lin("mlp.up_proj", ffn, h, "mlp", mb) + lin("mlp.down_proj", h, ffn, "mlp", mb))
    tied = tie(c, False)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096), gated_mlp=False, norm="layernorm",
                norm_zero_centered=True, tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(block, False)] * L), head=_head(c, V, h, tied, True), activation="relu2",
                rotary_percent=0.5)


def starcoder2(c: Cfg, name: str) -> ModelSpec:
    """Starcoder2ForCausalLM: LayerNorms with bias, q/k/v/o and c_fc → GeLU (tanh) → c_proj, all with biases
    (use_bias), tied embeddings; every layer attends within sliding_window when the config sets one."""
    h, L, nh, ffn, V = _shape(c)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=2)  # Starcoder2Config num_key_value_heads=2
    d = c.head_dim(h, nh)
    b = c.flag("use_bias", default=True)
    block = (nrm("input_layernorm", h, True) + _qkvo(h, nh, nkv, d, b) + nrm("post_attention_layernorm", h, True)
             + lin("mlp.c_fc", ffn, h, "mlp", b) + lin("mlp.c_proj", h, ffn, "mlp", b))
    tied = tie(c, True)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096), gated_mlp=False, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=_head(c, V, h, tied, True), activation="gelu_pytorch_tanh", **windows(c, L, None))


def cohere(c: Cfg, name: str) -> ModelSpec:
    """CohereForCausalLM / Cohere2ForCausalLM: one weight-only LayerNorm (CohereLayerNorm, no bias) whose output
    feeds attention and the SwiGLU MLP in parallel (x + attn(n) + mlp(n)); q/k LayerNorms over (heads, head_dim)
    with use_qk_norm (Command R+); tied embeddings, logits scaled by logit_scale (no shape). Cohere 2: three of
    four layers attend within sliding_window (Cohere2Config sliding_window 4096, sliding_window_pattern 4)."""
    h, L, nh, ffn, V = _shape(c)
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh)
    attn = _qkvo(h, nh, nkv, d, c.flag("attention_bias", default=False))
    if c.mt == "cohere" and c.flag("use_qk_norm", default=False):
        attn += nrm("self_attn.q_norm", nh * d) + nrm("self_attn.k_norm", nkv * d)
    block = nrm("input_layernorm", h) + attn + gated("mlp", h, ffn, "mlp")
    tied = tie(c, True)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=8192), gated_mlp=True, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=_head(c, V, h, tied, False), activation="silu", parallel_block=True,
                **(windows(c, L, 4096, every=4) if c.mt == "cohere2" else {}))
