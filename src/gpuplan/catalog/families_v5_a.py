"""Decoders new in transformers 5.25: LongCat-Flash (longcat_flash), MiMo-V2-Flash (mimo_v2_flash), MiniCPM5 MoE
(minicpm5_moe), Laguna (laguna) and Ergo (ergo). Each builder lists every parameter tensor the matching
``transformers`` 5.25 class creates (checked against it on the meta device: tests/golden/test_hf_families_v5_a.py);
what the time model has no block for (zero-computation experts, attention sinks, per-layer head counts, residual
gates) is mapped to the closest block it has and said in ``assumed``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import MAX_HIDDEN, Cfg, emb, gated, groups, lin, moe_layers, nrm, spec, tie
from gpuplan.catalog.families_hybrid import listed_types
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_mla import _mla
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["V5A_BUILDERS", "ergo", "laguna", "longcat_flash", "mimo_v2_flash", "minicpm5_moe"]

_ATTN_TYPES = ("full_attention", "sliding_attention")


# ---- shared readings ---------------------------------------------------------------------------------
def _windows(c: Cfg, types: list[str], default: int, *keys: str) -> dict[str, Any]:
    """The window of the sliding_attention layers of ``types`` (``sliding_window`` or the family's other ``keys``,
    else the class default)."""
    if "sliding_attention" not in types or ("sliding_window" in c.d and c.d["sliding_window"] is None):
        return {}
    return {"sliding_window": c.int("sliding_window", *keys, default=default),
            "window_layers": tuple(t == "sliding_attention" for t in types)}


def _rotary(c: Cfg, default: float) -> float:
    """partial_rotary_factor of rope_parameters (flat, or keyed by layer type: the full-attention layers'), else the
    config class's default for the full-attention layers."""
    rope = c.raw("rope_parameters", default={})
    if isinstance(rope, Mapping) and isinstance(rope.get("full_attention"), Mapping):
        rope = rope["full_attention"]
    v = rope.get("partial_rotary_factor", default) if isinstance(rope, Mapping) else default
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
        raise GpuplanError(f"{c.source}: rope_parameters' partial_rotary_factor = {c.shown(v)} must be a number in "
                           "(0, 1]: fix the value")
    return float(v)


def _routing(sparse: list[bool], ffn: int, E: int, k: int, moe_ffn: int, shared: int = 0) -> dict[str, int]:
    """ModelSpec's MLP sizes: the dense width where some layer is dense, the experts' where some layer routes."""
    moe = any(sparse)
    return {"ffn": 0 if all(sparse) else ffn, "n_experts": E if moe else 0, "top_k": k if moe else 0,
            "moe_ffn": moe_ffn if moe else 0, "shared_ffn": shared if moe else 0}


def _moe(E: int, h: int, ffn: int) -> list[Weight]:
    """The router's weight (mlp.gate: E x hidden) and E fused gate/up + down experts of width ``ffn``."""
    return lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)


# ---- LongCat-Flash -----------------------------------------------------------------------------------
def longcat_flash(c: Cfg, name: str) -> ModelSpec:
    """LongcatFlashForCausalLM (LongCat-Flash): num_layers decoder layers of two sublayers each (num_hidden_layers =
    2 x num_layers), each sublayer MLA attention (low-rank q and joint key/value latent) and a dense SwiGLU of
    ffn_hidden_size; a shortcut MoE (n_routed_experts of expert_ffn_hidden_size plus zero_expert_num identity experts,
    top moe_topk) reads the first sublayer's MLP input and is added after the second. Mapped as 2 x num_layers
    blocks: the first of each pair an MoE block whose dense MLP is its shared expert, the second a dense block."""
    h, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 6144), ("num_attention_heads", 64),
                                                  ("vocab_size", 131072)))
    if c.raw("num_hidden_layers") is not None:  # the config class's setter: num_layers = num_hidden_layers // 2
        n = c.int("num_hidden_layers", minimum=2) // 2
    else:
        n = c.int("num_layers", default=28)
    ffn = c.int("ffn_hidden_size", "intermediate_size", default=12288)
    moe_ffn = c.int("expert_ffn_hidden_size", "moe_intermediate_size", default=2048)
    E = c.int("n_routed_experts", "num_local_experts", default=512)
    k = c.int("moe_topk", "num_experts_per_tok", default=12)
    Z = c.int("zero_expert_num", default=256, minimum=0)
    qr, kvr = c.int("q_lora_rank", default=1536), c.int("kv_lora_rank", default=512)
    nope, rope, vd = (c.int(k, default=v) for k, v in (("qk_nope_head_dim", 128), ("qk_rope_head_dim", 64),
                                                        ("v_head_dim", 128)))
    if c.raw("qk_head_dim") is not None and c.int("qk_head_dim") != nope + rope:
        raise GpuplanError(f"{c.source}: qk_head_dim = {c.int('qk_head_dim')} is not qk_nope_head_dim + "
                           f"qk_rope_head_dim = {nope + rope}: fix the sizes")
    attn = _mla(c, h, nh, nope, rope, vd, qr, kvr) + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    router_bias = c.flag("router_bias", default=False)
    moe = (lin("mlp.router.classifier", E + Z, h, "router", router_bias)
           + fused_experts("mlp.experts", h, moe_ffn, E) + gated("mlps", h, ffn, "shared_expert"))
    layers = [(attn + moe, True), (attn + gated("mlps", h, ffn, "mlp"), False)] * n
    tied = tie(c, False)
    c.assumed.append(f"{c.mt}: each decoder layer counted as two blocks (its two attention sublayers); the shortcut "
                     "MoE, which reads the first sublayer's MLP input and is added after the second, is costed as the "
                     "first block's MoE with that block's dense MLP as its shared expert")
    if Z:
        c.assumed.append(f"{c.mt}: the router also scores {Z} zero-computation (identity) experts; each token's "
                         f"top-{k} picks are costed as routed experts (an upper bound on the expert compute)")
    return spec(c, name, n_layers=2 * n, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=ffn, vocab=V, max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=min(k, E), moe_ffn=moe_ffn, shared_ffn=ffn, q_lora_rank=qr, kv_lora_rank=kvr,
                qk_rope_dim=rope)


# ---- MiMo-V2-Flash -----------------------------------------------------------------------------------
def _mimo_attention(h: int, nh: int, kv: int, hd: int, vd: int, bias: bool, sinks: bool = False) -> list[Weight]:
    """MiMoV2FlashAttention: q/k of head_dim, v of v_head_dim (attention_bias on the three), o without bias; a
    learned sink logit per head on the sliding-window layers."""
    return (lin("self_attn.q_proj", nh * hd, h, "attention", bias)
            + lin("self_attn.k_proj", kv * hd, h, "attention", bias)
            + lin("self_attn.v_proj", kv * vd, h, "attention", bias) + lin("self_attn.o_proj", h, nh * vd, "attention")
            + ([Weight(name="self_attn.sinks", shape=(nh,), group="attention", bias=True)] if sinks else []))


def mimo_v2_flash(c: Cfg, name: str) -> ModelSpec:
    """MiMoV2FlashForCausalLM (MiMo-V2-Flash): GQA attention with query/key heads of head_dim and value heads of
    v_head_dim, full on the first and each 6th layer and within sliding_window on the others (layer_types), the
    sliding layers with twice num_key_value_heads and a learned sink per head; a dense SwiGLU on the first layer, on
    the others (mlp_layer_types) n_routed_experts of moe_intermediate_size routed top num_experts_per_tok (no shared
    expert)."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 4096), ("num_hidden_layers", 48),
                                                       ("num_attention_heads", 64), ("vocab_size", 152576)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=4)
    hd, vd = c.int("head_dim", default=192), c.int("v_head_dim", default=128)
    ffn, moe_ffn = c.int("intermediate_size", default=16384), c.int("moe_intermediate_size", default=2048)
    E, k = c.int("n_routed_experts", "num_local_experts", default=256), c.int("num_experts_per_tok", default=8)
    types = listed_types(c, _ATTN_TYPES, L) or \
        ["full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)]
    if "sliding_attention" in types and nh % (2 * nkv):
        raise GpuplanError(f"{c.source}: the sliding-window layers' 2 x {nkv} key/value heads do not divide the {nh} "
                           "attention heads: fix num_key_value_heads")
    ab = c.flag("attention_bias", default=False)
    attn = {"full_attention": _mimo_attention(h, nh, nkv, hd, vd, ab),
            "sliding_attention": _mimo_attention(h, nh, 2 * nkv, hd, vd, ab, sinks=True)}
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    sparse = moe_layers(c, L, 1)
    layers = [(attn[t] + norms + (_moe(E, h, moe_ffn) if s else gated("mlp", h, ffn, "mlp")), s)
              for t, s in zip(types, sparse, strict=True)]
    tied = tie(c, False)
    win = _windows(c, types, 129)
    if win and c.raw("sliding_window_size") is not None:  # the config class: sliding_window_size + the query
        win["sliding_window"] = c.int("sliding_window_size") + 1
    c.assumed.append(f"{c.mt}: the sliding-window layers' doubled key/value heads and attention sinks are in the "
                     f"weights; their attention is costed with num_key_value_heads = {nkv}")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, v_head_dim=vd,
                vocab=V, max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                rotary_percent=_rotary(c, 0.334), **_routing(sparse, ffn, E, k, moe_ffn), **win)


# ---- MiniCPM5 MoE ------------------------------------------------------------------------------------
def minicpm5_moe(c: Cfg, name: str) -> ModelSpec:
    """MiniCPM5MoeForCausalLM (MiniCPM5 MoE): GQA attention whose q_gate_proj gives the query and a sigmoid output
    gate (twice the query's width), a dense SwiGLU on the first first_k_dense_replace layers (mlp_layer_types), on
    the others n_routed_experts of moe_intermediate_size routed top num_experts_per_tok and an always-active shared
    expert of n_shared_experts x moe_intermediate_size."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 28),
                                                       ("num_attention_heads", 32), ("vocab_size", 130560)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=2)
    hd = c.int("head_dim", default=128)
    ffn, moe_ffn = c.int("intermediate_size", default=8192), c.int("moe_intermediate_size", default=512)
    E, k = c.int("n_routed_experts", "num_local_experts", default=160), c.int("num_experts_per_tok", default=16)
    shared = c.int("n_shared_experts", default=1, minimum=0) * moe_ffn
    if c.raw("use_gated_attention") is False:
        raise GpuplanError(f"{c.source}: use_gated_attention = false: transformers' MiniCPM5 MoE supports only gated "
                           "attention: remove the key")
    ab = c.flag("attention_bias", default=False)
    attn = (lin("self_attn.q_gate_proj", 2 * nh * hd, h, "attention", ab)
            + lin("self_attn.k_proj", nkv * hd, h, "attention", ab) + lin("self_attn.v_proj", nkv * hd, h,
                                                                          "attention", ab)
            + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
            + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h))
    moe = _moe(E, h, moe_ffn) + (gated("mlp.shared_experts", h, shared, "shared_expert") if shared else [])
    sparse = moe_layers(c, L, c.int("first_k_dense_replace", default=1, minimum=0, note=False))
    layers = [(attn + (moe if s else gated("mlp", h, ffn, "mlp")), s) for s in sparse]
    tied = tie(c, False)
    c.assumed.append(f"{c.mt}: the attention output's sigmoid gate (q_gate_proj's second half) is costed with the "
                     "query projection")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                vocab=V, max_positions=c.int("max_position_embeddings", default=524288), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                **_routing(sparse, ffn, E, k, moe_ffn, shared))


# ---- Laguna ------------------------------------------------------------------------------------------
def _laguna_heads(c: Cfg, L: int, nh: int, nkv: int) -> list[int]:
    """num_attention_heads_per_layer (each a multiple of the key/value heads), else num_attention_heads on each."""
    heads = c.raw("num_attention_heads_per_layer")
    if heads is None:
        return [nh] * L
    if not isinstance(heads, list) or len(heads) != L or \
            any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_HIDDEN or n % nkv for n in heads):
        raise GpuplanError(f"{c.source}: num_attention_heads_per_layer must list, for each of the {L} layers, a head "
                           f"count that is a multiple of the {nkv} key/value heads: fix the list")
    if len(set(heads)) > 1:
        c.assumed.append(f"{c.mt}: the layers' own head counts ({min(heads)} to {max(heads)}) are in the weights; "
                         f"attention is costed with num_attention_heads = {nh} on each")
    return heads


def laguna(c: Cfg, name: str) -> ModelSpec:
    """LagunaForCausalLM (Laguna): GQA attention with q/k RMSNorms over the head and a softplus output gate from the
    block input (g_proj: one per head, or per channel with gating "per-element"), its head count per layer
    (num_attention_heads_per_layer), full or within sliding_window (layer_types); a dense SwiGLU on the first layer,
    on the others (mlp_layer_types) num_experts of moe_intermediate_size routed top num_experts_per_tok (the
    router's score-correction bias a parameter) and a shared expert of shared_expert_intermediate_size."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 40),
                                                       ("num_attention_heads", 48), ("vocab_size", 100352)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    hd = c.int("head_dim", default=128)
    ffn, moe_ffn = c.int("intermediate_size", default=8192), c.int("moe_intermediate_size", default=512)
    shared = c.int("shared_expert_intermediate_size", default=512)
    E, k = c.int("num_experts", default=256), c.int("num_experts_per_tok", default=8)
    gating = c.raw("gating", default=True)
    if not isinstance(gating, bool) and gating not in ("per-head", "per-element"):
        raise GpuplanError(f"{c.source}: gating = {c.shown(gating)} must be true, per-head or per-element")
    types = listed_types(c, _ATTN_TYPES, L) or ["full_attention"] * L
    heads = _laguna_heads(c, L, nh, nkv)
    ab = c.flag("attention_bias", default=False)

    def attention(n: int) -> list[Weight]:
        return (qkvo(h, n, nkv, hd, ab) + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd)
                + lin("self_attn.g_proj", n if gating in (True, "per-head") else n * hd, h, "attention")
                + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h))
    moe = (_moe(E, h, moe_ffn) + gated("mlp.shared_experts", h, shared, "shared_expert")
           + [Weight(name="mlp.gate.e_score_correction_bias", shape=(E,), group="router", bias=True)])
    sparse = moe_layers(c, L, 1)
    layers = [(attention(n) + (moe if s else gated("mlp", h, ffn, "mlp")), s)
              for n, s in zip(heads, sparse, strict=True)]
    tied = tie(c, False)
    c.assumed.append(f"{c.mt}: the attention output's softplus gate (g_proj) is costed with the attention projections")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                vocab=V, max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                rotary_percent=_rotary(c, 0.5), **_routing(sparse, ffn, E, k, moe_ffn, shared),
                **_windows(c, types, 512))


# ---- Ergo --------------------------------------------------------------------------------------------
def ergo(c: Cfg, name: str) -> ModelSpec:
    """ErgoForCausalLM (Ergo): GQA attention (one fused qkv_proj, heads of hidden_size / num_attention_heads, q/k
    RMSNorms), full without position embeddings on each global_attention_every_n_layers-th layer and RoPE within
    sliding_window on the others (layer_types); pre- and post-norms around attention and the MLP, each branch added
    through a learned per-channel residual gate; relu² MLPs (up, down): a dense one of first_dense_intermediate_size
    on the first num_dense_blocks layers, on the others num_experts of moe_intermediate_size (each with its own
    output RMSNorm) routed top num_experts_per_tok and a shared expert of shared_intermediate_size with its norm."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 8192), ("num_hidden_layers", 64),
                                                       ("num_attention_heads", 64), ("vocab_size", 262144)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    if h % nh:  # ErgoAttention's head size is always hidden_size // num_attention_heads (no head_dim key)
        raise GpuplanError(f"{c.source}: hidden_size {h} is not divisible by {nh} attention heads: fix the sizes")
    hd = h // nh
    ffn, moe_ffn = c.int("first_dense_intermediate_size", default=32768), c.int("moe_intermediate_size", default=4096)
    shared = c.int("shared_intermediate_size", default=8192)
    E, k = c.int("num_experts", default=256), c.int("num_experts_per_tok", default=8)
    every = c.int("global_attention_every_n_layers", default=4)
    types = listed_types(c, _ATTN_TYPES, L) or \
        ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(L)]
    block = (lin("self_attn.qkv_proj", (nh + 2 * nkv) * hd, h, "attention")
             + lin("self_attn.o_proj", h, nh * hd, "attention")
             + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd)
             + [w for n in ("input", "post_attention", "pre_feedforward", "post_feedforward")
                for w in nrm(f"{n}_layernorm", h)]
             + [Weight(name=f"{n}_residual_gate", shape=(h,), group="norm") for n in ("attention", "feedforward")])
    dense = lin("mlp.up_proj", ffn, h, "mlp") + lin("mlp.down_proj", h, ffn, "mlp")
    moe = (lin("mlp.gate.linear", E, h, "router")
           + lin("mlp.experts.up_proj", moe_ffn, h, "expert", count=E)
           + lin("mlp.experts.down_proj", h, moe_ffn, "expert", count=E)
           + [Weight(name="mlp.experts.post_expert_norm", shape=(h,), group="expert", count=E, bias=True)]
           + lin("mlp.shared_experts.up_proj", shared, h, "shared_expert")
           + lin("mlp.shared_experts.down_proj", h, shared, "shared_expert") + nrm("mlp.shared_experts.norm", h))
    sparse = moe_layers(c, L, c.int("num_dense_blocks", default=1, minimum=0, note=False))
    layers = [(block + (moe if s else dense), s) for s in sparse]
    if c.raw("tie_word_embeddings") is True:  # ErgoForCausalLM ties nothing (its _tied_weights_keys raise)
        c.assumed.append("tie_word_embeddings true: transformers' Ergo keeps its own lm_head (counted)")
    c.assumed.append(f"{c.mt}: the full-attention layers' missing RoPE and the learned residual gates (two per block) "
                     "are not timed; each expert's output RMSNorm is held with its expert")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, vocab=V,
                max_positions=c.int("max_position_embeddings", default=524288), gated_mlp=False, norm="rmsnorm",
                tied_embeddings=False, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + emb("lm_head", V, h, "head")), activation="relu2", post_norms=True,
                **_routing(sparse, ffn, E, k, moe_ffn, shared), **_windows(c, types, 512, "local_attention_window"))


V5A_BUILDERS = {"longcat_flash": longcat_flash, "mimo_v2_flash": mimo_v2_flash, "minicpm5_moe": minicpm5_moe,
                "laguna": laguna, "ergo": ergo}
