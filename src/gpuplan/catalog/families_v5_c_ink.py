"""Inkling (inkling_text) and Inkling 2 (inkling2_text), transformers 5.25's Thinking Machines decoders, and their
multimodal wrappers (inkling_mm_model, inkling2: the towers counted apart): every parameter tensor the matching
``transformers`` class creates (checked against it on the meta device: tests/golden/test_hf_families_v5_c.py)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, moe_layers, nrm, spec
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.catalog.families_vlm import _checked, text_config, vision_note
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["inkling2", "inkling2_text", "inkling_mm_model", "inkling_text"]


def conv(name: str, channels: int, kernel: int) -> list[Weight]:
    """A bias-free depthwise causal Conv1d over ``channels`` (Inkling's short convolutions)."""
    return [Weight(name=f"{name}.conv1d", shape=(channels, 1, kernel), group="attention")]


def scalar(name: str) -> list[Weight]:
    """A one-element learned scale (replicated)."""
    return [Weight(name=name, shape=(1,), group="norm", bias=True)]


def _attention_types(c: Cfg, L: int, local_ids: bool) -> list[str]:
    """layer_types (hybrid: full attention; hybrid_sliding: windowed), by default windowed on all but each 6th layer
    (Inkling: on local_ids when ``local_ids`` and the config gives local_layer_ids)."""
    types = c.raw("layer_types")
    if types is None:
        local = c.raw("local_layer_ids") if local_ids else None
        if local is not None and (not isinstance(local, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                                                     for i in local)):
            raise GpuplanError(f"{c.source}: local_layer_ids must list layer indices")
        local = set(local) if local is not None else {i for i in range(L) if (i + 1) % 6}
        types = ["hybrid_sliding" if i in local else "hybrid" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("hybrid", "hybrid_sliding") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list hybrid or hybrid_sliding for each of the {L} layers: "
                           "fix the list")
    return types


def _sparse(c: Cfg, L: int) -> list[bool]:
    """InklingTextConfig's mlp_layer_types: dense on the first dense_mlp_idx layers, sparse after."""
    listed = c.raw("mlp_layer_types") is not None
    return moe_layers(c, L, 0 if listed else c.int("dense_mlp_idx", default=0, minimum=0, note=False))


def _heads(c: Cfg, types: list[str], heads: dict[str, tuple[int, int, int]]) -> tuple[int, int, int]:
    """The (heads, key/value heads, head size) attention is costed with: the sliding layers' where there are any;
    an assumption noted when the full layers' differ."""
    nh, nkv, hd = heads["hybrid_sliding" if "hybrid_sliding" in types else "hybrid"]
    if len(set(heads.values())) > 1:
        full = heads["hybrid"]
        c.assumed.append(f"{c.mt}: attention costed with the sliding layers' {nh} heads ({nkv} key/value) of {hd}; "
                         f"the full layers' own ({full[0]} heads, {full[1]} key/value, of {full[2]}) only in the "
                         "weights")
    return nh, nkv, hd


def _windows(c: Cfg, types: list[str], default: int) -> dict[str, Any]:
    if "hybrid_sliding" not in types:
        return {}
    return {"sliding_window": c.int("sliding_window_size", "sliding_window", default=default),
            "window_layers": tuple(t == "hybrid_sliding" for t in types)}


def _inkling_attention(c: Cfg, h: int, sliding: bool, kernel: int) -> tuple[list[Weight], tuple[int, int, int]]:
    """InklingAttention: q/k/v/o (the swa_* heads on sliding layers), r_proj to d_rel relative states per head,
    short convolutions over k and v, q/k RMSNorms over the head, the d_rel x extent bank of relative-bias profiles
    (extent: the window on sliding layers, rel_extent on full ones); its (heads, key/value heads, head size)."""
    pre = "swa_" if sliding else ""
    nh = c.int(f"{pre}num_attention_heads", default=64)
    nkv = c.kv_heads(nh, f"{pre}num_key_value_heads", default=16 if sliding else 8)
    hd, d_rel = c.int(f"{pre}head_dim", default=128), c.int("d_rel", default=16)
    extent = c.int("sliding_window_size", "sliding_window", default=512) if sliding else \
        c.int("rel_extent", default=1024)
    at = "self_attn."
    return (lin(f"{at}q_proj", nh * hd, h, "attention") + lin(f"{at}k_proj", nkv * hd, h, "attention")
            + lin(f"{at}v_proj", nkv * hd, h, "attention") + lin(f"{at}r_proj", nh * d_rel, h, "attention")
            + lin(f"{at}o_proj", h, nh * hd, "attention") + conv(f"{at}k_sconv", nkv * hd, kernel)
            + conv(f"{at}v_sconv", nkv * hd, kernel) + nrm(f"{at}q_norm", hd) + nrm(f"{at}k_norm", hd)
            + [Weight(name=f"{at}rel_logits_proj.proj", shape=(d_rel, extent), group="attention")]), (nh, nkv, hd)


def inkling_text(c: Cfg, name: str) -> ModelSpec:
    """InklingForCausalLM (Thinking Machines Inkling): a normed token embedding; attention blocks without RoPE
    (a learned relative-position bias mixed per token), full on each 6th layer and windowed on the others with their
    own head counts (swa_*); a short causal convolution after the attention and after the MLP; the MLP a SwiGLU of
    intermediate_size with a learned scale on the dense mlp_layer_types layers, elsewhere a sigmoid router over the
    routed and n_shared_experts shared experts (a scale of its own), fused routed experts and batched shared ones,
    all of moe_intermediate_size; an untied head."""
    h, L, V = (c.int(k, default=v) for k, v in (("hidden_size", 6144), ("num_hidden_layers", 66),
                                               ("vocab_size", 201024)))
    kernel = c.int("conv_kernel_size", "sconv_kernel_size", default=4)
    E, k = c.int("n_routed_experts", "num_local_experts", default=256), c.int("num_experts_per_tok", default=6)
    S = c.int("n_shared_experts", default=2)
    ffn = c.int("intermediate_size", default=24576)
    moe_ffn = c.int("moe_intermediate_size", default=3072)
    if c.raw("dense_intermediate_size") is not None:  # checkpoints: intermediate_size is then the experts' width
        ffn, moe_ffn = c.int("dense_intermediate_size"), ffn
    types, sparse = _attention_types(c, L, local_ids=True), _sparse(c, L)
    attention = {t: _inkling_attention(c, h, t == "hybrid_sliding", kernel) for t in set(types)}
    moe = (lin("mlp.gate", E + S, h, "router") + scalar("mlp.gate.global_scale")
           + fused_experts("mlp.experts", h, moe_ffn, E) + gated("mlp.shared_experts", h, moe_ffn, "shared_expert",
                                                                count=S))
    dense = scalar("mlp.global_scale") + gated("mlp", h, ffn, "mlp")
    rest = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h) + conv("attn_sconv", h, kernel) \
        + conv("mlp_sconv", h, kernel)
    layers = [(attention[t][0] + (moe if s else dense) + rest, s) for t, s in zip(types, sparse, strict=True)]
    nh, nkv, hd = _heads(c, types, {t: a[1] for t, a in attention.items()})
    c.assumed.append(f"{c.mt}: the learned relative-position bias and the short convolutions are not costed as "
                     "FLOPs (their weights are counted); no RoPE")
    if c.raw("num_mtp_layers") is not None:
        c.assumed.append(f"{c.mt}: the multi-token-prediction layers are not built by transformers and not counted")
    win = _windows(c, types, 512)
    c.assumed[:] = dict.fromkeys(c.assumed)  # a default read for each attention kind, noted once
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                ffn=0 if all(sparse) else ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", "model_max_length", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=False,
                embedding=tuple(emb("embed_tokens", V, h) + nrm("embed_tokens.embed_norm", h)),
                layers=groups(layers), head=tuple(nrm("norm", h) + emb("lm_head", V, h, "head")),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0,
                moe_ffn=moe_ffn if any(sparse) else 0, shared_ffn=moe_ffn * S if any(sparse) else 0,
                position="none", **win)


# ---- Inkling 2 -----------------------------------------------------------------------------------------------
def _scale(name: str, rows: int, cols: int) -> list[Weight]:
    """A learned per-head scale (heads x size), split with its heads."""
    return [Weight(name=name, shape=(rows, cols), group="attention", bias=True)]


def _inkling2_kv(c: Cfg, at: str, h: int, nkv: int, hd: int, full: bool) -> list[Weight]:
    """Inkling2KeyValueProjection: the projection and its short convolution (a full layer's dynamic: static taps
    per channel plus taps per key/value head projected from the block input)."""
    kernel = c.int("conv_kernel_size", "sconv_kernel_size", default=4)
    ws = lin(f"{at}.linear", nkv * hd, h, "attention")
    if full:
        return ws + _scale(f"{at}.sconv.static_weight", kernel, nkv * hd) + \
            lin(f"{at}.sconv.weight_proj", nkv * kernel, h, "attention")
    return ws + conv(f"{at}.sconv", nkv * hd, kernel)


def _inkling2_attention(c: Cfg, h: int, full: bool) -> tuple[list[Weight], tuple[int, int, int]]:
    """Inkling2SlidingAttention / Inkling2FullAttention: q (a learned scale per head before its L2 clip), k and v
    with their short convolutions, a sigmoid-gated o_proj (gate_proj from the block input), a sink logit per head
    (sink_proj), the relative-position bias (linear to d_rel states per head, their scale, the d_rel x extent bank);
    a full layer adds q/k/v input norms; its (heads, key/value heads, head size)."""
    pre = "" if full else "swa_"
    nh = c.int(f"{pre}num_attention_heads", default=48)
    nkv = c.kv_heads(nh, f"{pre}num_key_value_heads", default=8)
    hd, d_rel = c.int(f"{pre}head_dim", default=128), c.int("d_rel", default=16)
    extent = c.int("rel_extent", default=1024) if full else c.int("sliding_window_size", "sliding_window", default=1024)
    at = "self_attn."
    return (lin(f"{at}q_proj.linear", nh * hd, h, "attention") + _scale(f"{at}q_proj.norm.scale", nh, hd)
            + _inkling2_kv(c, f"{at}k_proj", h, nkv, hd, full) + _inkling2_kv(c, f"{at}v_proj", h, nkv, hd, full)
            + lin(f"{at}o_proj.gate_proj", nh * hd, h, "attention") + lin(f"{at}o_proj.linear", h, nh * hd, "attention")
            + lin(f"{at}sink_proj", nh, h, "attention")
            + [Weight(name=f"{at}relative_position_bias.proj", shape=(d_rel, extent), group="attention")]
            + lin(f"{at}relative_position_bias.linear", nh * d_rel, h, "attention")
            + _scale(f"{at}relative_position_bias.norm.scale", nh, d_rel)
            + [w for n in (("q", "k", "v") if full else ()) for w in nrm(f"{n}_input_layernorm", h)]), (nh, nkv, hd)


def _query(name: str, h: int, n: int = 1) -> list[Weight]:
    """Inkling2BlockAttentionResidual's learned queries (``n`` of hidden size) over the block states."""
    return [Weight(name=f"{name}.query", shape=(n, h) if n > 1 else (h,), group="norm", bias=True)]


def inkling2_text(c: Cfg, name: str) -> ModelSpec:
    """Inkling2ForCausalLM (Thinking Machines Inkling 2): a normed token embedding; attention blocks without RoPE
    (learned relative-position bias, per-head sinks, a gated output), full on each 6th layer (dynamic short
    convolutions over k and v, q/k/v input norms) and windowed on the others (swa_* heads); short convolutions after
    the attention and the MoE; every MLP a sigmoid-routed top-k MoE of fused softcapped-SwiGLU experts; block
    attention residuals (a learned query over the sums of each n_layers_per_attn_res_block layers) feeding each
    sublayer and the final norm; an untied head of unpadded_vocab_size rows."""
    h, L, V = (c.int(k, default=v) for k, v in (("hidden_size", 4608), ("num_hidden_layers", 48),
                                               ("vocab_size", 201024)))
    kernel = c.int("conv_kernel_size", "sconv_kernel_size", default=4)
    E, k = c.int("n_routed_experts", "num_local_experts", default=384), c.int("num_experts_per_tok", default=8)
    ffn = c.int("moe_intermediate_size", "intermediate_size", default=2304)
    out = c.int("unpadded_vocab_size", default=200058)
    types = _attention_types(c, L, local_ids=False)
    attention = {t: _inkling2_attention(c, h, t == "hybrid") for t in set(types)}
    moe = fused_experts("mlp.experts", h, ffn, E) + lin("mlp.gate", E, h, "router")
    rest = nrm("post_attention_layernorm", h) + conv("post_attention_convolution", h, kernel) \
        + conv("post_mlp_convolution", h, kernel) + _query("mlp_input", h)

    def block(i: int, t: str) -> list[Weight]:
        inputs = [] if i == 0 else _query("attention_input", h, 1 if t == "hybrid_sliding" else 3)
        own = nrm("input_layernorm", h) if t == "hybrid_sliding" else []
        return inputs + attention[t][0] + moe + own + rest

    nh, nkv, hd = _heads(c, types, {t: a[1] for t, a in attention.items()})
    c.assumed.append(f"{c.mt}: the relative-position bias, sinks, short convolutions and block attention residuals "
                     "are not costed as FLOPs (their weights are counted); no RoPE; the experts' softcapped SwiGLU "
                     f"costed as SwiGLU; logits over the head's {out:,} rows (the embedding holds {V:,})")
    win = _windows(c, types, 1024)
    c.assumed[:] = dict.fromkeys(c.assumed)  # a default read for each attention kind, noted once
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=out,
                max_positions=c.int("max_position_embeddings", "model_max_length", default=1048576), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=False,
                embedding=tuple(emb("embed_tokens", V, h) + nrm("embed_tokens.embed_norm", h)),
                layers=groups([(block(i, t), True) for i, t in enumerate(types)]),
                head=tuple(nrm("norm", h) + _query("final_input", h) + emb("lm_head", out, h, "head")),
                n_experts=E, top_k=k, moe_ffn=ffn, position="none", **win)


def _inkling2_vision_params(c: Cfg, text_hidden: int) -> int:
    """Inkling2VisionModel (a bias-free patch embedding, a learned position grid, a class token with its position,
    a pre-LayerNorm, ViT blocks with biased attention and GELU MLP, two LayerNorms and two layer scales each) and its
    merger (spatial_merge_size² patches concatenated, two projections into the text width); the config class's
    defaults where vision_config leaves a key out."""
    raw = c.raw("vision_config", default={})
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{c.source}: vision_config must be a mapping of the vision tower's config keys")
    v = Cfg(raw, f"{c.source} vision_config", "inkling2_vision", c.quote)
    vh, vL = v.int("hidden_size", default=1024, note=False), v.int("num_hidden_layers", default=23, note=False)
    ratio = v.number("mlp_ratio", default=4.0) or 4.0
    ffn = v.int("intermediate_size", default=int(vh * ratio), note=False)
    p = v.int("patch_size", "native_patch_size", default=20, note=False)
    ch = v.int("num_channels", default=3, note=False)
    grid = v.int("posemb_grid_size", default=32, note=False)
    merge = v.int("spatial_merge_size", "adapter_merge_size", default=2, note=False)
    proj = v.int("projection_hidden_dim", default=4096, note=False)
    bias = v.flag("projector_bias", default=False)
    block = 4 * (vh * vh + vh) + 2 * vh * ffn + ffn + vh + 6 * vh
    merger = merge * merge * vh * proj + proj * text_hidden + (proj + text_hidden if bias else 0)
    return ch * p * p * vh + grid * grid * vh + 2 * vh + 2 * vh + vL * block + merger


def inkling2(c: Cfg, name: str) -> ModelSpec:
    """Inkling2ForConditionalGeneration: the Inkling 2 decoder of ``text_config`` (read as inkling2_text); the vision
    tower and its merger (always built: Inkling2VisionConfig's defaults when vision_config is absent) counted apart,
    in ``extra_params``."""
    t = text_config(c, "inkling2_text", {})
    vision = _checked(c, _inkling2_vision_params(c, t.int("hidden_size", default=4608, note=False)))
    vision_note(t, "inkling2", vision)
    return dataclasses.replace(inkling2_text(t, name), model_type="inkling2", extra_params=vision,
                               frozen_params=vision)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _inkling_vision_scales(v: Cfg, L: int) -> list[tuple[int, int, int, int]]:
    """transformers' plan_out_scales for InklingVisionModel: the (t, h, w, channels) grid after each of the L folding
    layers, the nearest (in log size) of the patch's prime-factor scales to an even log-spaced progression."""
    p, T = v.int("patch_size", default=40, note=False), v.int("temporal_patch_size", default=2, note=False)
    C = v.int("num_channels", default=3, note=False)
    if p < 2 or T < 2:
        raise GpuplanError(f"{v.source}: patch_size and temporal_patch_size ({p}, {T}) must be at least 2 "
                           "(transformers builds no vision tower for 1)")
    h, t = [math.prod(f[:i + 1]) for f in [_prime_factors(p)[::-1]] for i in range(len(f))], \
        [math.prod(f[:i + 1]) for f in [_prime_factors(T)[::-1]] for i in range(len(f))]
    scales = [(1, 1, 1, C)] + [(1, x, x, math.ceil(x * x * C / 64) * 64) for x in h] \
        + [(x, h[-1], h[-1], h[-1] ** 2 * C * x * 64) for x in t]
    if L < len(scales):
        raise GpuplanError(f"{v.source}: num_hidden_layers = {L} is fewer than the {len(scales)} scales of the patch: "
                           "transformers then assigns them by scipy's linear_sum_assignment, not reproduced here; give "
                           f"at least {len(scales)} layers")
    top, sizes = math.log(p * p * T * C), [math.log(a * b * c) for a, b, c, _ in scales]
    picked = [scales[0]]
    for i in range(1, L):
        (c0, j), (c1, _) = sorted((abs(top * i / L - s), j) for j, s in enumerate(sizes))[:2]
        if c1 - c0 < 1e-4:
            raise GpuplanError(f"{v.source}: layer {i}'s width is a tie between two scales that transformers breaks "
                               "by float32 rounding: gpuplan cannot tell which; change num_hidden_layers by one")
        picked.append(scales[j])
    return picked + [scales[-1]]


def _inkling_tower_params(c: Cfg, text_hidden: int) -> int:
    """InklingVisionModel (bias-free folding projections, each but the last followed by an RMSNorm, the last into the
    text width, a final RMSNorm) and InklingAudioModel (one embedding row per mel bin and quantized value, an
    RMSNorm): always built, InklingVisionConfig's and InklingAudioConfig's defaults for the keys left out."""
    towers = []
    for key in ("vision_config", "audio_config"):
        raw = c.raw(key, default={})
        if not isinstance(raw, Mapping):
            raise GpuplanError(f"{c.source}: {key} must be a mapping of the tower's config keys")
        towers.append(Cfg(raw, f"{c.source} {key}", "inkling_" + key[:5], c.quote))
    v, a = towers
    L = v.int("num_hidden_layers", "n_layers", default=24, note=False)
    s = _inkling_vision_scales(v, L)
    vision = text_hidden
    for i in range(L):
        fold = (s[i + 1][0] // s[i][0]) * (s[i + 1][1] // s[i][1]) * (s[i + 1][2] // s[i][2])
        out = text_hidden if i == L - 1 else s[i + 1][3]
        vision += s[i][3] * fold * out + (0 if i == L - 1 else out)
    bins = a.int("n_mel_bins", "num_codebooks", default=80, note=False)
    return vision + bins * a.int("mel_vocab_size", "codebook_size", default=256, note=False) * text_hidden + text_hidden


def inkling_mm_model(c: Cfg, name: str) -> ModelSpec:
    """InklingForConditionalGeneration: the Inkling decoder of ``text_config`` (read as inkling_text); the vision and
    audio towers counted apart, in ``extra_params``."""
    t = text_config(c, "inkling_text", {})
    towers = _checked(c, _inkling_tower_params(c, t.int("hidden_size", default=6144, note=False)))
    t.assumed.append(f"model_type inkling_mm_model (image/audio-text): the language model is costed on text; the "
                     f"vision and audio towers ({towers:,} parameters) are counted apart (extra_params) and held "
                     "frozen: their 16-bit weights on the first pipeline stage, without gradients, optimizer state, "
                     "FLOPs or activations")
    return dataclasses.replace(inkling_text(t, name), model_type="inkling_mm_model", extra_params=towers,
                               frozen_params=towers)
