"""A.X-K1 (axk1), A.X-K2 (axk2), Ling's KDA/MLA hybrid (bailing_hybrid), ZAYA (zaya) and Doge (doge), transformers
5.25's: every parameter tensor the matching ``transformers`` class creates (checked against it on the meta device:
tests/golden/test_hf_families_v5_b.py); defaults are those of the config class, recorded in ``assumed`` where they
shape the weights. What the time model has no block for is mapped to the closest one it has and said in
``assumed``; ``V5B_BUILDERS`` registers them all."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie, windows
from gpuplan.catalog.families_hybrid import listed_types, scan_note, vector
from gpuplan.catalog.families_mla import _Family, _mla, _sparse_layers
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["V5B_BUILDERS", "axk1", "axk2", "bailing_hybrid", "doge", "zaya"]


# ---- MLA + MoE decoders: A.X-K1, A.X-K2, Ling hybrid ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Mla:
    """The sizes an MLA + MoE config gives (its config class's defaults where absent)."""
    h: int
    L: int
    nh: int
    V: int
    ffn: int
    moe_ffn: int
    E: int
    k: int
    shared: int   # n_shared_experts x moe_intermediate_size
    kvr: int
    qr: int
    nope: int
    rope: int
    vd: int


# the config classes' defaults (transformers 5.25): hidden, layers, heads, vocab, intermediate, moe_intermediate,
# routed experts, top-k, shared experts, kv_lora_rank, q_lora_rank (0: none), qk_nope, qk_rope, v_head_dim
_MLA_DEFAULTS = {"axk1": (7168, 61, 64, 163840, 18432, 2048, 192, 8, 1, 512, 1536, 128, 64, 128),
                 "axk2": (2048, 48, 32, 163840, 5120, 512, 128, 8, 1, 128, 384, 64, 32, 64),
                 "bailing_hybrid": (2560, 42, 32, 157184, 6144, 768, 512, 8, 1, 512, 0, 128, 64, 128)}
# each size's keys: the config class's own name, then its attribute_map aliases (Ling's: num_experts, ...)
_MLA_KEYS = (("hidden_size",), ("num_hidden_layers",), ("num_attention_heads",), ("vocab_size",),
             ("intermediate_size",), ("moe_intermediate_size",), ("n_routed_experts", "num_local_experts"),
             ("num_experts_per_tok",), ("n_shared_experts",), ("kv_lora_rank",), ("q_lora_rank",),
             ("qk_nope_head_dim",), ("qk_rope_head_dim",), ("v_head_dim",))
_LING_KEYS = {6: ("num_experts", "num_local_experts"), 7: ("num_experts_per_token", "num_experts_per_tok"),
              8: ("num_shared_experts", "n_shared_experts")}


def _mla_dims(c: Cfg) -> _Mla:
    """The sizes, read as the config class reads them (its defaults noted in assumed where taken)."""
    keys = [(_LING_KEYS.get(i, k) if c.mt == "bailing_hybrid" else k) for i, k in enumerate(_MLA_KEYS)]
    vals = [c.int(*k, default=d, minimum=0 if i in (8, 10) else 1, note=d != 0)
            for i, (k, d) in enumerate(zip(keys, _MLA_DEFAULTS[c.mt], strict=True))]
    vals[8] *= vals[5]
    return _Mla(*vals)


def _routed(c: Cfg, L: int, first: int, freq: bool = True) -> list[bool]:
    """Which layers route ("sparse" in mlp_layer_types): as listed, else from first_k_dense_replace on — every
    moe_layer_freq-th where the config class converts that legacy key (A.X-K1/K2), else all (Ling)."""
    if freq or c.raw("mlp_layer_types") is not None:
        return _sparse_layers(c, _Family(first_dense=first), L)
    first = c.int("first_k_dense_replace", default=first, minimum=0)
    return [i >= first for i in range(L)]


def _moe(d: _Mla) -> list[Weight]:
    """DeepseekV3MoE: the sigmoid top-k router (its score-correction bias a buffer), the routed experts, the shared
    experts' SwiGLU (n_shared_experts x moe_intermediate_size wide)."""
    return (lin("mlp.gate", d.E, d.h, "router") + gated("mlp.experts", d.h, d.moe_ffn, "expert", count=d.E)
            + (gated("mlp.shared_experts", d.h, d.shared, "shared_expert") if d.shared else []))


def _mla_spec(c: Cfg, name: str, d: _Mla, layers: list[tuple[list[Weight], bool]], tied: bool, max_positions: int,
              mixers: list[tuple[str, bool]] | None = None, ssm: SsmDims | None = None) -> ModelSpec:
    """The ModelSpec of an MLA + MoE decoder (the final RMSNorm, the LM head unless tied)."""
    sparse = [s for _, s in layers]
    return spec(c, name, n_layers=d.L, hidden=d.h, n_heads=d.nh, n_kv_heads=d.nh, head_dim=d.nope + d.rope,
                v_head_dim=d.vd, ffn=0 if all(sparse) else d.ffn, vocab=d.V, gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", d.V, d.h)), layers=groups(layers, mixers),
                head=tuple(nrm("norm", d.h) + ([] if tied else emb("lm_head", d.V, d.h, "head"))),
                n_experts=d.E if any(sparse) else 0, top_k=d.k if any(sparse) else 0,
                moe_ffn=d.moe_ffn if any(sparse) else 0, shared_ffn=d.shared if any(sparse) else 0,
                q_lora_rank=d.qr, kv_lora_rank=d.kvr, qk_rope_dim=d.rope, max_positions=max_positions, ssm=ssm)


def axk1(c: Cfg, name: str) -> ModelSpec:
    """AXK1ForCausalLM (SK Telecom A.X-K1): DeepSeek-V3's block — MLA with a query LoRA always, a SwiGLU of
    intermediate_size on the "dense" mlp_layer_types layers (by default the first), a routed + shared-expert MoE on
    the "sparse" ones — with an RMSNorm (post_mlp_layernorm) over the MoE's output."""
    d = _mla_dims(c)
    if not d.qr:
        raise GpuplanError(f"{c.source}: axk1 needs a positive q_lora_rank (its attention always has a query LoRA)")
    attn = _mla(c, d.h, d.nh, d.nope, d.rope, d.vd, d.qr, d.kvr) + nrm("input_layernorm", d.h) \
        + nrm("post_attention_layernorm", d.h)
    moe = _moe(d) + nrm("mlp.post_mlp_layernorm", d.h)
    layers = [(attn + (moe if s else gated("mlp", d.h, d.ffn, "mlp")), s) for s in _routed(c, d.L, 1)]
    return _mla_spec(c, name, d, layers, tie(c, False), c.int("max_position_embeddings", default=32768))


def _axk2_attention(c: Cfg, d: _Mla) -> list[Weight]:
    """AXK2Attention: MLA whose q_b_proj is q_gate_proj (the query and a per-channel output gate, from the normed and
    the raw query latent side by side), with DeepSeek-V3.2's lightning indexer (AXK2Indexer: index_n_heads query
    heads of index_head_dim from the query latent, one key head with a LayerNorm, a weight per head)."""
    base = [w for w in _mla(c, d.h, d.nh, d.nope, d.rope, d.vd, d.qr, d.kvr) if not w.name.endswith("q_b_proj")]
    n, hd = c.int("index_n_heads", default=16), c.int("index_head_dim", default=128)
    return (base + lin("self_attn.q_gate_proj", d.nh * (d.nope + d.rope + d.vd), 2 * d.qr, "attention")
            + lin("self_attn.indexer.wq_b", n * hd, d.qr, "attention") + lin("self_attn.indexer.wk", hd, d.h,
                                                                              "attention")
            + nrm("self_attn.indexer.k_norm", hd, bias=True) + lin("self_attn.indexer.weights_proj", n, d.h,
                                                                     "attention"))


def _gated_norm(at: str, h: int, rank: int) -> list[Weight]:
    """AXK2GatedRMSNorm: the RMSNorm, then a sigmoid gate from a rank-``rank`` SiLU MLP over its output (small
    replicated matrices: timed as a router's)."""
    return nrm(f"{at}.norm", h) + lin(f"{at}.mlp.fc1", rank, h, "router") + lin(f"{at}.mlp.fc2", h, rank, "router")


def axk2(c: Cfg, name: str) -> ModelSpec:
    """AXK2ForCausalLM (SK Telecom A.X-K2): DeepSeek-V3.2's block (MLA with the sparse-attention indexer on every
    layer; a SwiGLU on the "dense" mlp_layer_types layers, by default the first, a routed + shared-expert MoE on the
    others) with an output-gated query projection and low-rank gated RMSNorms (before attention on every layer,
    before the MoE on the sparse ones)."""
    d = _mla_dims(c)
    if not d.qr:
        raise GpuplanError(f"{c.source}: axk2 needs a positive q_lora_rank (its indexer and output gate read the "
                           "query latent)")
    r = c.int("gated_norm_rank", default=16)
    attn = _axk2_attention(c, d) + _gated_norm("input_layernorm", d.h, r)
    sparse = _routed(c, d.L, 1)
    layers = [(attn + (_gated_norm("post_attention_layernorm", d.h, r) + _moe(d) if s else
                       nrm("post_attention_layernorm", d.h) + gated("mlp", d.h, d.ffn, "mlp")), s) for s in sparse]
    c.assumed.append(f"axk2: attention timed as dense MLA over the whole sequence (DeepSeek Sparse Attention's top-"
                     f"{c.int('index_topk', default=2048):,} keys per query and its indexer's scores are not "
                     "modelled); the output gate (q_gate_proj's last v_head_dim per head) is costed with q")
    return _mla_spec(c, name, d, layers, tie(c, False), c.int("max_position_embeddings", default=131072))


def _kda(h: int, d: SsmDims) -> list[Weight]:
    """BailingHybridDeltaAttention (Kimi Delta Attention): q, k, v projections, a depthwise causal conv1d over them
    (no bias), the forget gate (f_proj, per-channel dt_bias, per-head A_log), β (b_proj), the output gate (g_proj),
    the gated RMSNorm over one head's width, o_proj."""
    qkv = d.inner
    return (lin("self_attn.q_proj", qkv, h, "attention") + lin("self_attn.k_proj", qkv, h, "attention")
            + lin("self_attn.v_proj", qkv, h, "attention")
            + [Weight(name="self_attn.conv1d", shape=(3 * qkv, 1, d.conv_kernel), group="attention")]
            + vector("self_attn.forget_gate.A_log", d.heads) + vector("self_attn.forget_gate.dt_bias", qkv)
            + lin("self_attn.forget_gate.f_proj", qkv, h, "attention") + lin("self_attn.b_proj", d.heads, h,
                                                                             "attention")
            + nrm("self_attn.o_norm", d.head_dim) + lin("self_attn.o_proj", h, qkv, "attention")
            + lin("self_attn.g_proj", qkv, h, "attention"))


def bailing_hybrid(c: Cfg, name: str) -> ModelSpec:
    """BailingHybridForCausalLM (inclusionAI Ling 3.0 hybrid): Kimi Delta Attention blocks (num_attention_heads heads
    of head_dim) with an MLA block (no query LoRA unless q_lora_rank; a sigmoid gate per head, g_proj) closing each
    layer_group_size layers (or as layer_types lists them); a SwiGLU of intermediate_size on the first
    first_k_dense_replace layers, a routed + shared-expert MoE after (or as mlp_layer_types lists them)."""
    d = _mla_dims(c)
    # a config transformers wrote holds the KDA heads as linear_head_dim / linear_num_heads, its head_dim overwritten
    # with qk_rope_head_dim (BailingHybridConfig.__post_init__); a hub config gives them as head_dim and the heads
    hd = c.int("linear_head_dim", "head_dim", default=128)
    nh = c.int("linear_num_heads", default=d.nh, note=False)
    ssm = SsmDims(heads=nh, head_dim=hd, groups=nh, state=hd,
                  conv_kernel=c.int("short_conv_kernel_size", default=4), chunk=64)
    types = listed_types(c, ("full_attention", "linear_attention"), d.L)
    if types is None:
        every = c.int("layer_group_size", default=6)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(d.L)]
    mixers = {"full_attention": (_mla(c, d.h, d.nh, d.nope, d.rope, d.vd, d.qr, d.kvr)
                                 + lin("self_attn.g_proj", d.nh, d.h, "attention"), "attention"),
              "linear_attention": (_kda(d.h, ssm), "gdn")}
    norms = nrm("input_layernorm", d.h) + nrm("post_attention_layernorm", d.h)
    sparse = _routed(c, d.L, 2, freq=False)
    layers = [(mixers[t][0] + norms + (_moe(d) if s else gated("mlp", d.h, d.ffn, "mlp")), s)
              for t, s in zip(types, sparse, strict=True)]
    if c.flag("tie_word_embeddings", default=False):  # BailingHybridForCausalLM._tied_weights_keys is empty
        c.assumed.append("tie_word_embeddings true: transformers' BailingHybrid keeps its own lm_head (counted)")
    c.assumed.append("bailing_hybrid: Kimi Delta Attention is costed as the gated delta rule (its decay is per "
                     "channel, not per head); the MLA layers' sigmoid gate per head with o_proj")
    mtp = c.int("num_nextn_predict_layers", "num_mtp_layers", default=1, minimum=0, note=False)
    if mtp:
        c.assumed.append(f"bailing_hybrid: the checkpoint's {mtp} multi-token-prediction layer(s) are not counted "
                         "(transformers does not build them)")
    scan_note(c)
    return _mla_spec(c, name, d, layers, False, c.int("max_position_embeddings", "model_max_length", default=262144),
                     [(mixers[t][1], True) for t in types], ssm)


# ---- ZAYA (Zyphra) -------------------------------------------------------------------------------------------
def _scaling(at: str, h: int) -> list[Weight]:
    """ZayaResidualScaling: a per-channel scale and bias of the branch's output and of the residual."""
    return nrm(f"{at}.hidden_states_scale", h, True) + nrm(f"{at}.residual_scale", h, True)


def _zaya_attention(c: Cfg, h: int, nh: int, nkv: int, hd: int) -> list[Weight]:
    """ZayaAttention with its CCA projection (ZayaCCAProjection): q and k, the value halved into a current and a
    delayed projection, a depthwise and a per-head grouped causal conv1d (with biases) over q and k, o_proj, the
    learned key scale per key/value head of the L2 q/k norm."""
    ab, at, ch = c.flag("attention_bias", default=False), "self_attn.qkv_proj.", (nh + nkv) * hd
    t0, t1 = c.int("cca_time0", default=2), c.int("cca_time1", default=2)
    return (lin(f"{at}q_proj", nh * hd, h, "attention", ab) + lin(f"{at}k_proj", nkv * hd, h, "attention", ab)
            + lin(f"{at}v_proj_current", nkv * hd // 2, h, "attention", ab)
            + lin(f"{at}v_proj_delayed", nkv * hd // 2, h, "attention", ab)
            + [Weight(name=f"{at}conv_qk_depthwise", shape=(ch, 1, t0), group="attention")]
            + vector(f"{at}conv_qk_depthwise.bias", ch)
            + [Weight(name=f"{at}conv_qk_grouped", shape=(ch, hd, t1), group="attention")]
            + vector(f"{at}conv_qk_grouped.bias", ch)
            + lin("self_attn.o_proj", h, nh * hd, "attention", ab) + vector("self_attn.qk_norm.temp", nkv))


def _zaya_router(h: int, r: int, E: int, first: bool) -> list[Weight]:
    """ZayaRouter: down_proj to router_hidden_size (the previous layer's router state mixed in, scaled, from the
    second layer on), an RMSNorm and two biased GELU layers, logits over the experts and the skip class."""
    at = "mlp.gate."
    return (lin(f"{at}down_proj", r, h, "router", True)
            + ([] if first else [Weight(name=f"{at}router_states_scale", shape=(r,), group="router", bias=True)])
            + nrm(f"{at}router_mlp.norm", r) + lin(f"{at}router_mlp.fc1", r, r, "router", True)
            + lin(f"{at}router_mlp.fc2", r, r, "router", True) + lin(f"{at}router_mlp.out_proj", E + 1, r, "router"))


def zaya(c: Cfg, name: str) -> ModelSpec:
    """ZayaForCausalLM (Zyphra ZAYA1): every block Compressed Convolutional Attention (GQA whose q and k pass
    through short causal convolutions, within sliding_window on the "hybrid_sliding" layer_types) and a top-1 MoE of
    num_experts SwiGLU experts behind an MLP router (with a skip class), learned residual scalings after each."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 40),
                                                       ("num_attention_heads", 8), ("vocab_size", 262272)))
    nkv, hd = c.kv_heads(nh, "num_key_value_heads", default=2), c.int("head_dim", default=128)
    E, f = c.int("num_experts", default=16), c.int("moe_intermediate_size", default=2048)
    if c.int("num_experts_per_tok", default=1, note=False) != 1:
        raise GpuplanError(f"{c.source}: zaya routes each token to one expert: num_experts_per_tok must be 1")
    types = c.raw("layer_types", default=["hybrid"] * L)
    if not isinstance(types, list) or len(types) != L or any(t not in ("hybrid", "hybrid_sliding") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list hybrid or hybrid_sliding for each of the {L} layers: "
                           "fix the list")
    win: dict[str, Any] = {}
    if "hybrid_sliding" in types:
        c.require("sliding_window")
        win = {"sliding_window": c.int("sliding_window"), "window_layers": tuple(t == "hybrid_sliding" for t in types)}
    block = (_zaya_attention(c, h, nh, nkv, hd) + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
             + _scaling("post_attention_residual_scale", h) + _scaling("post_mlp_residual_scale", h)
             + gated("mlp.experts", h, f, "expert", count=E))
    r = c.int("router_hidden_size", default=256)
    tied = tie(c, True)
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    if c.flag("lm_head_bias", default=False):
        head.append(Weight(name="lm_head", shape=(V,), group="head", bias=True))
    rope = c.raw("rope_parameters", default={})
    hybrid = rope.get("hybrid") if isinstance(rope, Mapping) else None
    rotary = Cfg(hybrid if isinstance(hybrid, Mapping) else {}, f"{c.source} rope_parameters.hybrid", c.mt,
                 c.quote).number("partial_rotary_factor", default=0.5)
    c.assumed.append("zaya: CCA's q/k convolutions, delayed value and L2 q/k norms are costed as plain GQA attention "
                     "(their weights counted); the MLP router is timed as router matmuls; the skip class as a routed "
                     f"expert (every token top-1 of num_experts); RoPE on {rotary:g} of each head (rope_parameters' "
                     "hybrid entry) on every layer")
    embedding = emb("embed_tokens", V, h) + nrm("input_hidden_states_scale", h, True)  # ZayaModel's input scaling
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(embedding),
                layers=groups([(block + _zaya_router(h, r, E, i == 0), True) for i in range(L)]), head=tuple(head),
                n_experts=E, top_k=1, moe_ffn=f, rotary_percent=rotary, **win)


# ---- Doge (SmallDoge) --------------------------------------------------------------------------------------------
def _doge_mlp(c: Cfg, h: int, ffn: int) -> tuple[list[Weight], dict[str, int]]:
    """DogeMLP (a SwiGLU of intermediate_size), or with is_moe DogeCDMoE: that SwiGLU as a shared expert beside
    num_experts single-neuron experts (a row of down_embed in, a row of up_embed out) picked by product-key routing
    (router_gate: two halves of floor(sqrt(num_experts)) keys); the ModelSpec's MoE sizes with it."""
    mb = c.flag("mlp_bias", default=False)
    if not c.flag("is_moe", default=False):
        return gated("mlp", h, ffn, "mlp", mb), {"ffn": ffn}
    E, k = c.int("num_experts", default=16384), c.int("num_experts_per_tok", default=64)
    c.assumed.append("doge: the cross-domain MoE's experts (one row each of the down_embed and up_embed embeddings, "
                     "chosen by product keys) are costed as num_experts ungated experts of intermediate size 1 (a "
                     "LoRA on all linear layers counts adapters on them; PEFT's all-linear skips embeddings)")
    return (gated("mlp", h, ffn, "shared_expert", mb) + lin("mlp.router_gate", 2 * math.isqrt(E), h, "router")
            + [Weight(name="mlp.down_embed", shape=(1, h), group="expert", count=E),
               Weight(name="mlp.up_embed", shape=(h, 1), group="expert", count=E)],
            {"ffn": 0, "n_experts": E, "top_k": k, "moe_ffn": 1, "shared_ffn": ffn})


def doge(c: Cfg, name: str) -> ModelSpec:
    """DogeForCausalLM (SmallDoge): GQA with q/k RMSNorms whose mask is learned (Dynamic Mask Attention: dt_proj and
    A per key/value head score the keys), a learned per-channel scale on each residual (input_residual,
    post_attention_residual), and a SwiGLU MLP or (is_moe) the cross-domain MoE; untied by default."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 1024), ("num_hidden_layers", 32),
                                                       ("num_attention_heads", 8), ("vocab_size", 32768)))
    nkv, hd = c.kv_heads(nh, "num_key_value_heads"), c.head_dim(h, nh)
    ffn, ab = c.int("intermediate_size", default=2048), c.flag("attention_bias", default=False)
    mlp, moe = _doge_mlp(c, h, ffn)
    block = (nrm("input_layernorm", h) + nrm("input_residual", h) + nrm("post_attention_layernorm", h)
             + nrm("post_attention_residual", h) + lin("self_attn.q_proj", nh * hd, h, "attention", ab)
             + lin("self_attn.k_proj", nkv * hd, h, "attention", ab)
             + lin("self_attn.v_proj", nkv * hd, h, "attention", ab) + vector("self_attn.A", nkv)
             + lin("self_attn.dt_proj", nkv, nkv * hd, "attention", ab)
             + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
             + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd) + mlp)
    tied = tie(c, False)
    c.assumed.append(f"doge: Dynamic Mask Attention (each query keeps the {c.int('keep_window_size', default=2048):,}"
                     " keys its learned mask scores highest) is costed as full causal attention")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(block, "n_experts" in moe)] * L),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                **moe, **windows(c, L, None))


V5B_BUILDERS: dict[str, Callable[[Cfg, str], ModelSpec]] = {
    "axk1": axk1, "axk2": axk2, "bailing_hybrid": bailing_hybrid, "zaya": zaya, "doge": doge,
}
