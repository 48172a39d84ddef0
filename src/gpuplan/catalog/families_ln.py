"""Rotary decoders with LayerNorm: Nemotron (LayerNorm1P, squared-ReLU MLP), StarCoder2 (GeLU MLP with
biases, sliding window), Cohere / Cohere 2 (one weight-only LayerNorm feeding attention and MLP in
parallel), Phi-1/1.5/2 (parallel block, biases everywhere), StableLM (SwiGLU, partial rotary) and DBRX
(bias-free LayerNorms, a fused Wqkv, 16 SwiGLU experts). Each
lists every parameter tensor the matching ``transformers`` class creates (see ``families``); defaults are
those of the family's config class, recorded in ``assumed`` where they shape the weights."""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie, windows
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["cohere", "dbrx", "nemotron", "phi", "stablelm", "starcoder2"]


def _shape(c: Cfg) -> tuple[int, int, int, int, int]:
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    return (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
            c.int("intermediate_size"), c.int("vocab_size"))


def qkvo(h: int, nh: int, nkv: int, d: int, bias: bool) -> list[Weight]:
    """Grouped-query attention's q/k/v/o_proj (nkv key-value heads of head dimension d), with or without bias."""
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
    block = (nrm("input_layernorm", h, True) + qkvo(h, nh, nkv, d, c.flag("attention_bias", default=False))
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
    block = (nrm("input_layernorm", h, True) + qkvo(h, nh, nkv, d, b) + nrm("post_attention_layernorm", h, True)
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
    attn = qkvo(h, nh, nkv, d, c.flag("attention_bias", default=False))
    if c.mt == "cohere" and c.flag("use_qk_norm", default=False):
        attn += nrm("self_attn.q_norm", nh * d) + nrm("self_attn.k_norm", nkv * d)
    block = nrm("input_layernorm", h) + attn + gated("mlp", h, ffn, "mlp")
    tied = tie(c, True)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=8192), gated_mlp=True, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=_head(c, V, h, tied, False), activation="silu", parallel_block=True,
                **(windows(c, L, 4096, every=4) if c.mt == "cohere2" else {}))


def phi(c: Cfg, name: str) -> ModelSpec:
    """PhiForCausalLM (Phi-1, Phi-1.5, Phi-2): one LayerNorm feeding attention and the MLP in parallel, q/k/v and
    dense with biases, fc1 → gelu_new → fc2 with biases, per-head q/k LayerNorms with ``qk_layernorm``, an
    untied LM head with a bias (PhiConfig: partial_rotary_factor 0.5)."""
    h, L, nh, ffn, V = _shape(c)
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh)
    attn = (lin("self_attn.q_proj", nh * d, h, "attention", True)
            + lin("self_attn.k_proj", nkv * d, h, "attention", True)
            + lin("self_attn.v_proj", nkv * d, h, "attention", True)
            + lin("self_attn.dense", h, nh * d, "attention", True))
    if c.flag("qk_layernorm", default=False):
        attn += nrm("self_attn.q_layernorm", d, True) + nrm("self_attn.k_layernorm", d, True)
    block = (nrm("input_layernorm", h, True) + attn
             + lin("mlp.fc1", ffn, h, "mlp", True) + lin("mlp.fc2", h, ffn, "mlp", True))
    tied = tie(c, False)
    head = nrm("final_layernorm", h, True) + ([] if tied else lin("lm_head", V, h, "head", True))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=False, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=tuple(head), activation="gelu_new", parallel_block=True, rotary_percent=0.5)


def stablelm(c: Cfg, name: str) -> ModelSpec:
    """StableLmForCausalLM (StableLM-3B-4E1T, StableLM 2): LayerNorms with bias, q/k/v (biases with
    use_qkv_bias), o, a SwiGLU MLP, per-head q/k LayerNorms without bias (qk_layernorm), one norm feeding both
    with use_parallel_residual (StableLmConfig: partial_rotary_factor 0.25, untied)."""
    h, L, nh, ffn, V = _shape(c)
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh)
    qkv_bias = c.flag("use_qkv_bias", default=False)
    attn = (lin("self_attn.q_proj", nh * d, h, "attention", qkv_bias)
            + lin("self_attn.k_proj", nkv * d, h, "attention", qkv_bias)
            + lin("self_attn.v_proj", nkv * d, h, "attention", qkv_bias)
            + lin("self_attn.o_proj", h, nh * d, "attention"))
    if c.flag("qk_layernorm", default=False):
        attn += nrm("self_attn.q_layernorm", nh * d) + nrm("self_attn.k_layernorm", nkv * d)
    parallel = c.flag("use_parallel_residual", default=False)
    block = (nrm("input_layernorm", h, True) + attn + ([] if parallel else nrm("post_attention_layernorm", h, True))
             + gated("mlp", h, ffn, "mlp"))
    tied = tie(c, False)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096), gated_mlp=True, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=_head(c, V, h, tied, True), activation="silu", parallel_block=parallel, rotary_percent=0.25)


def _sub(c: Cfg, key: str) -> Cfg:
    """A nested config mapping (DBRX's attn_config, ffn_config) read with the same checks; {} when absent."""
    v = c.raw(key, default={})
    if not isinstance(v, Mapping):
        raise GpuplanError(f"{c.source}: {key} must be a mapping of its config keys")
    sub = Cfg(v, f"{c.source} {key}", c.mt, c.quote)
    sub.assumed = c.assumed  # what the nested defaults assume is the model's
    return sub


def dbrx(c: Cfg, name: str) -> ModelSpec:
    """DbrxForCausalLM: bias-free LayerNorms before attention and the MoE, a fused Wqkv with kv_n_heads
    key/value heads, out_proj, a router and ``moe_num_experts`` SwiGLU experts (w1, v1, w2) of
    ffn_hidden_size, top ``moe_top_k`` (DbrxConfig: the attn_config / ffn_config defaults kv_n_heads 1,
    3584, 4 experts, top 1), untied."""
    c.require("d_model", "n_heads", "n_layers", "vocab_size")
    h, nh, L, V = c.int("d_model"), c.int("n_heads"), c.int("n_layers"), c.int("vocab_size")
    d = c.head_dim(h, nh)
    attn, ffn_cfg = _sub(c, "attn_config"), _sub(c, "ffn_config")
    nkv = attn.kv_heads(nh, "kv_n_heads", default=1)
    ffn = ffn_cfg.int("ffn_hidden_size", default=3584)
    E, k = ffn_cfg.int("moe_num_experts", default=4), ffn_cfg.int("moe_top_k", default=1)
    if k > E:
        raise GpuplanError(f"{c.source}: ffn_config moe_top_k = {k} is more than the {E} experts: give at most {E}")
    block = (nrm("norm_attn_norm.norm_1", h) + lin("norm_attn_norm.attn.Wqkv", (nh + 2 * nkv) * d, h, "attention")
             + lin("norm_attn_norm.attn.out_proj", h, h, "attention") + nrm("norm_attn_norm.norm_2", h)
             + lin("ffn.router.layer", E, h, "router")
             + gated("ffn.experts.mlp", h, ffn, "expert", count=E, names=("w1", "v1", "w2")))
    tied = tie(c, False)
    head = nrm("norm_f", h) + ([] if tied else emb("lm_head", V, h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=0, vocab=V,
                max_positions=c.int("max_seq_len", default=2048), gated_mlp=True, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("wte", V, h)), layers=groups([(block, True)] * L),
                head=tuple(head), activation="silu", n_experts=E, top_k=k, moe_ffn=ffn)
