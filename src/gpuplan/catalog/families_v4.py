"""Decoders of transformers 5.24's newest families: Gemma 4 (gemma4_text, and the gemma4 image/audio-text wrapper
whose language model it is), Qwen4-Exp (qwen4_exp_text, qwen4_exp), DeepSeek-V4 (deepseek_v4), HY-V4 (hy_v4),
LFM3 (lfm3) and Cohere 2 MoE (cohere2_moe). Each builder lists every parameter tensor the matching ``transformers``
5.24 class creates (checked against it on the meta device: tests/golden/test_hf_families_v4.py); defaults are
those of the config class, recorded in ``assumed`` where they shape the weights. What the time model has no
representation for is mapped to the closest block it has and said in ``assumed``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import scan_note
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_mla import _mla
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["V4_BUILDERS", "cohere2_moe", "deepseek_v4", "gemma4", "gemma4_text", "hy_v4", "lfm3", "qwen4_exp",
           "qwen4_exp_text"]


# ---- Gemma 4 ------------------------------------------------------------------------------------------
# Gemma4TextConfig defaults (transformers 5.24) that shape the weights
_GEMMA4_TEXT = {"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
                "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}
_GEMMA4_LAYER_KEYS = ("head_dim", "num_key_value_heads")


def _gemma4_layer_types(c: Cfg, L: int) -> list[str]:
    """Gemma4TextConfig.layer_types: as listed, else sliding on all but each 6th layer; the last layer always full."""
    types = c.raw("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("sliding_attention", "full_attention") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list sliding_attention or full_attention for each of the "
                           f"{L} layers: fix the list")
    return [*types[:-1], "full_attention"]


def _gemma4_per_layer(c: Cfg, types: list[str], d: int, nkv: int) -> list[tuple[int, int]]:
    """Each layer's (head size, key/value heads): Gemma4TextConfig's per_layer_config as a saved config.json gives
    it, else built as the config class does (the full-attention layers' global_head_dim, 512 by default, and with
    attention_k_eq_v their num_global_key_value_heads)."""
    per = c.raw("per_layer_config")
    if per is None:
        gd = c.int("global_head_dim", default=512)
        gkv = c.int("num_global_key_value_heads", default=None, note=False) \
            if c.flag("attention_k_eq_v", default=False) else None
        over: dict[int, dict[str, Any]] = {i: {"head_dim": gd, **({"num_key_value_heads": gkv} if gkv else {})}
                                           for i, t in enumerate(types) if t == "full_attention"}
    else:
        if not isinstance(per, Mapping):
            raise GpuplanError(f"{c.source}: per_layer_config must map layer indices to their overrides")
        over = {}
        for k, v in per.items():
            if not str(k).isdigit() or not 0 <= int(k) < len(types) or not isinstance(v, Mapping):
                raise GpuplanError(f"{c.source}: per_layer_config key {k!r} is not a layer index below "
                                   f"{len(types)} mapped to its overrides: fix the key")
            extra = sorted(set(v) - set(_GEMMA4_LAYER_KEYS))
            if extra:
                raise GpuplanError(f"{c.source}: per_layer_config overrides {', '.join(extra)} of layer {k}: gpuplan "
                                   f"reads only {' and '.join(_GEMMA4_LAYER_KEYS)} there; give {{params: N}}")
            over[int(k)] = dict(v)
    out = []
    for i in range(len(types)):
        o = over.get(i, {})
        lc = Cfg({"head_dim": o.get("head_dim", d), "num_key_value_heads": o.get("num_key_value_heads", nkv)},
                 f"{c.source} per_layer_config[{i}]", c.mt, c.quote)
        out.append((lc.int("head_dim"), lc.int("num_key_value_heads")))
    return out


def gemma4_text(c: Cfg, name: str) -> ModelSpec:
    """Gemma4ForCausalLM (Gemma 4's language model): Gemma 3's sandwich-normed GeGLU blocks, sliding-window and full
    attention (the full layers with their own head size, with attention_k_eq_v no v_proj and their own key/value
    heads), q/k RMSNorms (v's has no weight), the last num_kv_shared_layers reusing an earlier layer's keys and
    values (no k/v weights; with use_double_wide_mlp a doubled MLP), per-layer embeddings (PLE: one packed
    vocab_size_per_layer_input table of num_hidden_layers x hidden_size_per_layer_input, its projection from the
    hidden state, and in each block a gate, a projection back and a norm) and, with enable_moe_block, in every
    block a routed MoE beside the dense MLP."""
    h, L, nh, V, ffn = (c.int(key, default=_GEMMA4_TEXT[key]) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=4)
    d = c.int("head_dim", default=256)
    types = _gemma4_layer_types(c, L)
    per = _gemma4_per_layer(c, types, d, nkv)
    for i, (_, kv) in enumerate(per):
        if nh % kv:
            raise GpuplanError(f"{c.source}: {nh} attention heads are not a multiple of layer {i}'s {kv} key/value "
                               f"heads: fix num_key_value_heads")
    shared = c.int("num_kv_shared_layers", default=0, minimum=0, note=False)
    if shared > L:
        raise GpuplanError(f"{c.source}: num_kv_shared_layers = {shared} is more than the {L} layers: fix the value")
    k_eq_v = c.flag("attention_k_eq_v", default=False)
    double = c.flag("use_double_wide_mlp", default=False)
    ab = c.flag("attention_bias", default=False)
    hpl = c.int("hidden_size_per_layer_input", default=256, minimum=0)
    moe = c.flag("enable_moe_block", default=False)
    E = k = moe_ffn = 0
    if moe:
        c.require("num_experts", "top_k_experts", "moe_intermediate_size")
        E, k, moe_ffn = c.int("num_experts"), c.int("top_k_experts"), c.int("moe_intermediate_size")
    layers = []
    for i, (t, (hd, kv)) in enumerate(zip(types, per, strict=True)):
        reuse = i >= L - shared
        ws = lin("self_attn.q_proj", nh * hd, h, "attention", ab) + nrm("self_attn.q_norm", hd)
        if not reuse:
            ws += nrm("self_attn.k_norm", hd) + lin("self_attn.k_proj", kv * hd, h, "attention", ab)
            if not (k_eq_v and t == "full_attention"):
                ws += lin("self_attn.v_proj", kv * hd, h, "attention", ab)
        ws += lin("self_attn.o_proj", h, nh * hd, "attention", ab)
        width = ffn * (2 if double and reuse else 1)
        ws += gated("mlp", h, width, "shared_expert" if moe else "mlp")
        ws += (nrm("input_layernorm", h) + nrm("post_attention_layernorm", h) + nrm("pre_feedforward_layernorm", h)
               + nrm("post_feedforward_layernorm", h))
        if hpl:
            ws += (lin("per_layer_input_gate", hpl, h, "mlp") + lin("per_layer_projection", h, hpl, "mlp")
                   + nrm("post_per_layer_input_norm", h))
        if moe:
            ws += (lin("router.proj", E, h, "router") + nrm("router.scale", h)
                   + [Weight(name="router.per_expert_scale", shape=(E,), group="router", bias=True)]
                   + [Weight(name="experts.gate_up_proj", shape=(2 * moe_ffn, h), group="expert", count=E),
                      Weight(name="experts.down_proj", shape=(h, moe_ffn), group="expert", count=E)]
                   + nrm("post_feedforward_layernorm_1", h) + nrm("post_feedforward_layernorm_2", h)
                   + nrm("pre_feedforward_layernorm_2", h))
        layers.append((ws, moe))
    embedding = emb("embed_tokens", V, h)
    if hpl:
        Vpl = c.int("vocab_size_per_layer_input", default=262144)
        embedding += (emb("embed_tokens_per_layer", Vpl, L * hpl) + lin("per_layer_model_projection", L * hpl, h, "mlp")
                      + nrm("per_layer_projection_norm", hpl))
        c.assumed.append(f"{c.mt}: the per-layer embeddings (PLE: a {Vpl:,} x {L * hpl:,} table and its projection "
                         "from the hidden state) are held with the token embedding; their lookup and projection are "
                         "not timed (the blocks' PLE gate and projection are)")
    tied = tie(c, True)
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    full = [hd for t, (hd, _) in zip(types, per, strict=True) if t == "full_attention"]
    if any(hd != d for hd in full) or any(kv != nkv for _, kv in per):
        c.assumed.append(f"{c.mt}: attention is costed at the sliding layers' head size {d} and {nkv} key/value "
                         f"heads; the full-attention layers' own (head size {max(full)}, "
                         f"{min(kv for _, kv in per)}..{max(kv for _, kv in per)} key/value heads) shape only their "
                         "weights")
    if shared:
        c.assumed.append(f"{c.mt}: the last {shared} layers reuse earlier layers' keys and values "
                         "(num_kv_shared_layers): their attention is costed as the others', their KV cache not "
                         "saved")
    if k_eq_v:
        c.assumed.append(f"{c.mt}: attention_k_eq_v: the full layers' values are their keys (no v_proj); their "
                         "attention is costed as with separate values")
    if moe:
        c.assumed.append(f"{c.mt}: every block runs its dense GeGLU MLP ({ffn}) beside the routed experts: costed as "
                         "an always-active shared expert")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=0 if moe else ffn,
                vocab=V, max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(embedding), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=ffn if moe else 0,
                activation="gelu_pytorch_tanh", post_norms=True, **_gemma4_windows(c, types))


def _gemma4_windows(c: Cfg, types: list[str]) -> dict[str, Any]:
    w = c.int("sliding_window", default=512)
    pattern = tuple(t == "sliding_attention" for t in types)
    return {"sliding_window": w, "window_layers": pattern} if any(pattern) else {}


def _gemma4_vision_params(c: Cfg, text_hidden: int) -> int:
    """Gemma4VisionModel (patch embedder with its 2-D position table, encoder of q/k-normed attention and GeGLU
    blocks with four norms; the pooler holds no weights) and the embedding projection into the text width."""
    v = c.raw("vision_config")
    if v is None:
        return 0
    if not isinstance(v, Mapping):
        raise GpuplanError(f"{c.source}: vision_config must be a mapping of the vision tower's config keys")
    vc = Cfg(v, f"{c.source} vision_config", "gemma4_vision", c.quote)
    vh, vL = vc.int("hidden_size", default=768, note=False), vc.int("num_hidden_layers", default=16, note=False)
    nh = vc.int("num_attention_heads", default=12, note=False)
    nkv = vc.int("num_key_value_heads", default=12, note=False)
    d, ffn = vc.int("head_dim", default=64, note=False), vc.int("intermediate_size", default=3072, note=False)
    p, pos = vc.int("patch_size", default=16, note=False), vc.int("position_embedding_size", default=10240, note=False)
    block = 2 * nh * d * vh + 2 * nkv * d * vh + 2 * d + 3 * ffn * vh + 4 * vh
    return 3 * p * p * vh + 2 * pos * vh + vL * block + vh * text_hidden


def _gemma4_audio_params(c: Cfg, text_hidden: int) -> int:
    """Gemma4AudioModel (a two-layer subsampling convolution, conformer blocks: two feed-forwards, chunked attention
    with a relative-position key projection, a light convolution; the output projection with its bias) and the
    embedding projection into the text width."""
    a = c.raw("audio_config")
    if a is None:
        return 0
    if not isinstance(a, Mapping):
        raise GpuplanError(f"{c.source}: audio_config must be a mapping of the audio tower's config keys")
    ac = Cfg(a, f"{c.source} audio_config", "gemma4_audio", c.quote)
    ah, aL = ac.int("hidden_size", default=1024, note=False), ac.int("num_hidden_layers", default=12, note=False)
    nh = ac.int("num_attention_heads", default=8, note=False)
    ch = ac.raw("subsampling_conv_channels", default=[128, 32])
    if not isinstance(ch, list | tuple) or len(ch) != 2 or not all(isinstance(x, int) and x > 0 for x in ch):
        raise GpuplanError(f"{c.source}: audio_config.subsampling_conv_channels must be two channel counts")
    kernel = ac.int("conv_kernel_size", default=5, note=False)
    out = ac.int("output_proj_dims", default=1536, note=False)
    c0, c1 = ch
    sub = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * ah
    block = (2 * (8 * ah * ah + 2 * ah) + ah // nh + 5 * ah * ah + 2 * ah * ah + ah * ah + ah * kernel + 2 * ah
             + 3 * ah)
    return sub + aL * block + out * ah + out + out * text_hidden


def gemma4(c: Cfg, name: str) -> ModelSpec:
    """Gemma4ForConditionalGeneration: the Gemma 4 decoder of ``text_config`` (read as gemma4_text); the vision and
    audio towers and their embedding projections, where the config has them, counted apart in ``extra_params``."""
    top = c.raw("tie_word_embeddings")
    t_cfg = c.raw("text_config", default={})
    if not isinstance(t_cfg, Mapping):
        raise GpuplanError(f"{c.source}: text_config must be a mapping of the language model's config keys")
    filled = {key: v for key, v in _GEMMA4_TEXT.items() if t_cfg.get(key) is None}
    t = Cfg({**t_cfg, **filled, **({"tie_word_embeddings": top} if top is not None else {}),
             "model_type": "gemma4_text"}, f"{c.source} text_config", "gemma4_text", c.quote)
    t.assumed += c.assumed + [f"text_config.{key} not given: using the transformers default {v}"
                              for key, v in filled.items()]
    th = t.int("hidden_size")
    towers = _gemma4_vision_params(c, th) + _gemma4_audio_params(c, th)
    if towers:
        t.assumed.append(f"model_type gemma4 (image/audio-text): the language model is costed on text; the vision and "
                         f"audio towers and their projections ({towers:,} parameters) are counted apart "
                         "(extra_params) and held frozen: their 16-bit weights on the first pipeline stage, without "
                         "gradients, optimizer state, FLOPs or activations")
    return dataclasses.replace(gemma4_text(t, name), model_type="gemma4", extra_params=towers, frozen_params=towers)


# ---- Qwen4-Exp ---------------------------------------------------------------------------------------
_QSA_KEYS = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")


def _primes_from(start: int, n: int) -> list[int]:
    """The first ``n`` primes at or above ``start`` (Qwen4ExpTextNGramEmbedding's hashed n-gram head sizes)."""
    out: list[int] = []
    p = start
    while len(out) < n:
        if p >= 2 and (p == 2 or p % 2) and all(p % q for q in range(3, math.isqrt(p) + 1, 2)):
            out.append(p)
        p += 1
    return out


def _hyper(at: str, h: int, hc: int, rank: int, combine: bool = True) -> list[Weight]:
    """Qwen4ExpTextGatedResidual: a grouped RMSNorm over the hc residual streams, a low-rank input mixer and (in
    the blocks) the inject weights; small replicated matrices (timed as a router's)."""
    return (nrm(f"{at}.hc_norm", hc * h) + lin(f"{at}.input_mix_weight_down", rank, hc * h, "router")
            + lin(f"{at}.input_mix_weight_up", hc * h, rank, "router")
            + (lin(f"{at}.block_inject_weight", hc, hc * h, "router") if combine else []))


def qwen4_exp_text(c: Cfg, name: str) -> ModelSpec:
    """Qwen4ExpForCausalLM (Qwen4-Exp's language model): Qwen3.5's gated delta-rule blocks with QSA attention
    (output-gated, q/k-normed, with a token indexer) in each full_attention_interval-th; every block a routed MoE
    with a gated shared expert; hyper-connections (hc_count residual streams mixed through a low-rank mixer before
    each mixer and MLP, and once more before the head; no final norm); on ple_layer_ids (linear blocks) a hashed
    n-gram per-layer embedding with its key/value projections, norms and a dilated depthwise convolution."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 40),
                                                       ("num_attention_heads", 16), ("vocab_size", 248320)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=2)
    hd = c.int("head_dim", default=256)
    d = SsmDims(heads=c.int("linear_num_value_heads", default=32), head_dim=c.int("linear_value_head_dim", default=128),
                groups=c.int("linear_num_key_heads", default=16), state=c.int("linear_key_head_dim", default=128),
                conv_kernel=c.int("linear_conv_kernel_dim", default=4), chunk=64)
    if d.heads % d.groups:
        raise GpuplanError(f"{c.source}: linear_num_value_heads = {d.heads} is not a multiple of "
                           f"linear_num_key_heads = {d.groups}: fix the sizes")
    E, k = c.int("num_experts", default=512), c.int("num_experts_per_tok", default=10)
    moe_ffn, shared = c.int("moe_intermediate_size", default=512), c.int("shared_expert_intermediate_size", default=512)
    hc, rank = c.int("hc_count", default=4, minimum=2), c.int("hc_lowrank", default=320)
    types = c.raw("layer_types")
    if types is None:
        every = c.int("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % every else "indexed_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("linear_attention", "indexed_attention", "full_attention") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list linear_attention or indexed_attention for each of the "
                           f"{L} layers: fix the list")
    types = ["linear_attention" if t == "linear_attention" else "indexed_attention" for t in types]
    if "indexed_attention" in types and any(c.raw(key) is None for key in _QSA_KEYS):
        raise GpuplanError(f"{c.source}: qwen4_exp_text attention layers need the QSA indexer keys "
                           f"({', '.join(_QSA_KEYS)}; transformers builds no model without them): add them from the "
                           "model's config.json")
    ab = c.flag("attention_bias", default=False)
    attention = (lin("self_attn.q_proj", 2 * nh * hd, h, "attention", ab)
                 + lin("self_attn.k_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.v_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
                 + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd))
    if "indexed_attention" in types:
        ih, ikv, idim = (c.int(key) for key in _QSA_KEYS[:3])
        attention += (lin("self_attn.indexer.index_qk_proj", (ih + ikv) * idim, h, "attention")
                      + nrm("self_attn.indexer.q_layernorm", idim) + nrm("self_attn.indexer.k_layernorm", idim))
    linear = (lin("linear_attn.in_proj_qkv", 2 * d.groups * d.state + d.inner, h, "attention")
              + lin("linear_attn.in_proj_z", d.inner, h, "attention")
              + lin("linear_attn.in_proj_b", d.heads, h, "attention")
              + lin("linear_attn.in_proj_a", d.heads, h, "attention")
              + [Weight(name="linear_attn.conv1d", shape=(2 * d.groups * d.state + d.inner, 1, d.conv_kernel),
                        group="attention")]
              + [Weight(name=f"linear_attn.{p}", shape=(d.heads,), group="attention", bias=True)
                 for p in ("dt_bias", "A_log")]
              + nrm("linear_attn.norm", d.head_dim) + lin("linear_attn.out_proj", h, d.inner, "attention"))
    mlp = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * moe_ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, moe_ffn), group="expert", count=E)]
           + gated("mlp.shared_expert", h, shared, "shared_expert") + lin("mlp.shared_expert_gate", 1, h, "router"))
    hyper = _hyper("attn_hyper_connection", h, hc, rank) + _hyper("mlp_hyper_connection", h, hc, rank)
    ple_ids = c.raw("ple_layer_ids", default=[])
    if not isinstance(ple_ids, list) or any(not isinstance(i, int) or not 1 <= i <= L or
                                            types[i - 1] != "linear_attention" for i in ple_ids):
        raise GpuplanError(f"{c.source}: ple_layer_ids must list one-indexed linear_attention layers (1..{L})")
    ple_ids = sorted(set(ple_ids))
    ple: dict[int, list[Weight]] = {}
    if ple_ids:
        n_gram, per = c.int("ngram_size", default=3), c.int("heads_per_ngram", default=8)
        heads = (n_gram - 1) * per
        dim = c.int("ple_embed_dim", default=h)
        if dim % heads:
            raise GpuplanError(f"{c.source}: ple_embed_dim = {dim} is not a multiple of the {heads} n-gram heads")
        base = c.int("ngram_vocab_size_base", default=20_000_000)
        div = c.int("make_ngram_vocab_size_divisible_by", default=128)
        primes = _primes_from(base, heads * len(ple_ids))
        kernel = c.int("ple_conv_kernel_size", default=4)
        for j, i in enumerate(ple_ids):
            rows = -(-sum(primes[j * heads:(j + 1) * heads]) // div) * div
            ple[i - 1] = (emb("ple.ple_embedding.ngram_embedding", rows, dim // heads)
                          + lin("ple.key_proj", hc * h, dim, "mlp") + lin("ple.value_proj", h, dim, "mlp")
                          + nrm("ple.norm_key", hc * h) + nrm("ple.norm_query", hc * h) + nrm("ple.norm_conv", hc * h)
                          + [Weight(name="ple.conv1d", shape=(hc * h, 1, kernel), group="mlp")])
        c.assumed.append(f"{c.mt}: the hashed n-gram per-layer embeddings on layers {ple_ids} are held in their "
                         "blocks; their lookups and dilated convolutions are not timed (their key/value projections "
                         "are)")
    mixers = {"linear_attention": (linear, "gdn"), "indexed_attention": (attention, "attention")}
    layers = [(mixers[t][0] + mlp + hyper + ple.get(i, []), True) for i, t in enumerate(types)]
    tied = tie(c, False)
    rope = c.raw("rope_parameters", default={})
    rotary = rope.get("partial_rotary_factor", 1.0) if isinstance(rope, Mapping) else 1.0
    c.assumed.append(f"{c.mt}: QSA attention (its indexer picks indexer_budget keys from compressed blocks) is costed "
                     f"as full causal attention; the attention output's sigmoid gate (q_proj's second half) with q; "
                     f"the {hc} hyper-connection residual streams' activations are not added (their mixers' weights "
                     "and matmuls are)")
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=32768), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(mixers[t][1], True) for t in types]),
                head=tuple(_hyper("hyper_connection_mixer", h, hc, rank, combine=False)
                           + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=shared, rotary_percent=float(rotary), ssm=d)


def qwen4_exp(c: Cfg, name: str) -> ModelSpec:
    """qwen4_exp: transformers' AutoModelForCausalLM builds Qwen4ExpForCausalLM from its text_config (the Qwen4-Exp
    decoder, qwen4_exp_text); the vision tower is not part of that model and not counted (noted)."""
    t_cfg = c.raw("text_config", default={})
    if not isinstance(t_cfg, Mapping):
        raise GpuplanError(f"{c.source}: text_config must be a mapping of the language model's config keys")
    top = c.raw("tie_word_embeddings")
    t = Cfg({**t_cfg, **({"tie_word_embeddings": top} if top is not None else {}), "model_type": "qwen4_exp_text"},
            f"{c.source} text_config", "qwen4_exp_text", c.quote)
    t.assumed += c.assumed + ["model_type qwen4_exp: its text_config's decoder (what AutoModelForCausalLM builds); "
                              "the vision tower is not counted"]
    return dataclasses.replace(qwen4_exp_text(t, name), model_type="qwen4_exp")


# ---- DeepSeek-V4 -------------------------------------------------------------------------------------
_DSV4_TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
_DSV4_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def _dsv4_types(c: Cfg, L: int) -> tuple[list[str], list[bool]]:
    """DeepseekV4Config's layer_types (or the legacy compress_ratios; else two heavily compressed layers, then
    compressed-sparse and heavily compressed alternating) and which MoE layers route by token hash
    (mlp_layer_types; else the first num_hash_layers, 3 by default)."""
    types = c.raw("layer_types")
    ratios = c.raw("compress_ratios")
    if types is None and ratios is not None:
        if not isinstance(ratios, list) or any(r not in _DSV4_RATIO for r in ratios):
            raise GpuplanError(f"{c.source}: compress_ratios must list 0, 4 or 128 per layer: fix the list")
        types = [_DSV4_RATIO[r] for r in ratios]
    if types is None:
        types = ["heavily_compressed_attention"] * min(L, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(L - 2, 0))]
    if not isinstance(types, list) or len(types) < L or any(t not in _DSV4_TYPES for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list one of {', '.join(_DSV4_TYPES)} for each of the {L} "
                           "layers: fix the list")
    mlp = c.raw("mlp_layer_types")
    if mlp is None:
        n_hash = c.int("num_hash_layers", default=3, minimum=0, note=False)
        mlp = ["hash_moe"] * min(L, n_hash) + ["moe"] * max(0, L - n_hash)
    if not isinstance(mlp, list) or len(mlp) < L or any(t not in ("hash_moe", "moe") for t in mlp):
        raise GpuplanError(f"{c.source}: mlp_layer_types must list hash_moe or moe for each of the {L} layers")
    return list(types[:L]), [t == "hash_moe" for t in mlp[:L]]


def _vec(name: str, size: int, group: str = "attention") -> list[Weight]:
    return [Weight(name=name, shape=(size,), group=group, bias=True)]  # type: ignore[arg-type]


def deepseek_v4(c: Cfg, name: str) -> ModelSpec:
    """DeepseekV4ForCausalLM (DeepSeek-V4): shared-KV multi-query attention (one 512-wide head read as key and value,
    a low-rank q with its norm, a grouped low-rank output projection, per-head sinks) over a sliding window, with
    a compressor of the keys every compress rate tokens (heavily compressed: 128; compressed sparse: 4, with a
    Lightning indexer picking index_topk entries); every block a routed MoE (the first num_hash_layers routed by
    token hash) with one shared expert; manifold-constrained hyper-connections (hc_mult streams) around the mixer
    and the MoE and before the head."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 4096), ("num_hidden_layers", 43),
                                                       ("num_attention_heads", 64), ("vocab_size", 129280)))
    hd, q_rank = c.int("head_dim", default=512), c.int("q_lora_rank", default=1024)
    g, o_rank = c.int("o_groups", default=8), c.int("o_lora_rank", default=1024)
    if (nh * hd) % g:
        raise GpuplanError(f"{c.source}: num_attention_heads x head_dim = {nh * hd} is not a multiple of o_groups = "
                           f"{g}: fix the sizes")
    E, k = c.int("n_routed_experts", "num_local_experts", default=256), c.int("num_experts_per_tok", default=6)
    ffn = c.int("moe_intermediate_size", "intermediate_size", default=2048)
    N = c.int("hc_mult", default=4)
    ih, idim = c.int("index_n_heads", default=64), c.int("index_head_dim", default=128)
    rates = c.raw("compress_rates", default={})
    if not isinstance(rates, Mapping):
        raise GpuplanError(f"{c.source}: compress_rates must map the compressed attention types to their rates")
    csa = int(rates.get("compressed_sparse_attention", c.raw("compress_rate_csa", default=4)))
    hca = int(rates.get("heavily_compressed_attention", c.raw("compress_rate_hca", default=128)))
    types, _hash = _dsv4_types(c, L)
    mb = c.flag("mlp_bias", default=False)
    attn = (lin("self_attn.q_a_proj", q_rank, h, "attention") + nrm("self_attn.q_a_norm", q_rank)
            + lin("self_attn.q_b_proj", nh * hd, q_rank, "attention") + lin("self_attn.kv_proj", hd, h, "attention")
            + nrm("self_attn.kv_norm", hd) + lin("self_attn.o_a_proj", g * o_rank, nh * hd // g, "attention")
            + lin("self_attn.o_b_proj", h, g * o_rank, "attention") + _vec("self_attn.sinks", nh))
    at = "self_attn.compressor."
    compressor = {
        "sliding_attention": [],
        "heavily_compressed_attention": (lin(f"{at}kv_proj", hd, h, "attention") + lin(f"{at}gate_proj", hd, h,
                                         "attention") + _vec(f"{at}position_bias", hca * hd) + nrm(f"{at}kv_norm", hd)),
        "compressed_sparse_attention": (
            lin(f"{at}kv_proj", 2 * hd, h, "attention") + lin(f"{at}gate_proj", 2 * hd, h, "attention")
            + _vec(f"{at}position_bias", csa * 2 * hd) + nrm(f"{at}kv_norm", hd)
            + lin(f"{at}indexer.kv_proj", 2 * idim, h, "attention")
            + lin(f"{at}indexer.gate_proj", 2 * idim, h, "attention")
            + _vec(f"{at}indexer.position_bias", csa * 2 * idim) + nrm(f"{at}indexer.kv_norm", idim)
            + lin(f"{at}indexer.q_b_proj", ih * idim, q_rank, "attention")
            + lin(f"{at}indexer.scorer.weights_proj", ih, h, "router")),
    }
    moe = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, ffn), group="expert", count=E)]
           + gated("mlp.shared_experts", h, ffn, "shared_expert", mb))
    hc = []
    for p in ("attn_hc", "ffn_hc"):
        hc += (lin(f"{p}.fn", (2 + N) * N, N * h, "router") + _vec(f"{p}.base", (2 + N) * N, "router")
               + _vec(f"{p}.scale", 3, "router"))
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    layers = [(attn + compressor[t] + moe + hc + norms, True) for t in types]
    tied = tie(c, False)
    head = (nrm("norm", h) + lin("hc_head.hc_fn", N, N * h, "router") + _vec("hc_head.hc_base", N, "router")
            + _vec("hc_head.hc_scale", 1, "router") + ([] if tied else emb("lm_head", V, h, "head")))
    w = c.int("sliding_window", default=128)
    c.assumed.append(f"{c.mt}: every layer's attention is costed over its {w}-token sliding window with one shared "
                     "key/value head; the compressed keys it also attends (every 128th token's compression, or the "
                     "indexer's top index_topk of every 4th's) are not (their compressor and indexer matmuls are); "
                     "attention is split over tensor-parallel ranks as usual, where transformers keeps it replicated; "
                     f"the first {sum(_hash)} layers route by token hash, costed as learned routing; the "
                     f"{N} hyper-connection streams' activations are not added; the multi-token-prediction layers "
                     "are not counted")
    rotary = c.number("partial_rotary_factor", default=None)
    if rotary is None and c.raw("qk_rope_head_dim") is not None:
        rotary = c.int("qk_rope_head_dim") / hd
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=1, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=1048576), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=ffn, shared_ffn=ffn,
                rotary_percent=rotary if rotary is not None else 64 / 512, sliding_window=w,
                window_layers=(True,) * L)


# ---- HY-V4 (Tencent Hy4) -----------------------------------------------------------------------------
def hy_v4(c: Cfg, name: str) -> ModelSpec:
    """HYV4ForCausalLM (Tencent Hy4): DeepSeek-V3's MLA with an output gate (one value-head-wide gate per head) and
    per-head sinks, DeepSeek Sparse Attention's indexer on the "full" indexer_types layers (the "shared" ones reuse the
    last one's selection), a dense SwiGLU on the "dense" mlp_layer_types layers (the first by default) and a routed +
    shared-expert MoE on the others, independent hyper-connections (hc_mult streams) around the mixer and the MLP
    and before the head."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2816), ("num_hidden_layers", 34),
                                                       ("num_attention_heads", 32), ("vocab_size", 120832)))
    ffn, moe_ffn = c.int("intermediate_size", default=6912), c.int("moe_intermediate_size", default=768)
    qr, kvr = c.int("q_lora_rank", default=1536), c.int("kv_lora_rank", default=512)
    nope, rope, vd = (c.int("qk_nope_head_dim", default=192), c.int("qk_rope_head_dim", default=64),
                      c.int("v_head_dim", default=256))
    E, k = c.int("n_routed_experts", default=256), c.int("num_experts_per_tok", default=8)
    shared = c.int("n_shared_experts", default=1, minimum=0) * moe_ffn
    N = c.int("hc_mult", default=4)
    ih, idim = c.int("index_n_heads", default=16), c.int("index_head_dim", default=128)
    mlp_types = c.raw("mlp_layer_types")
    if mlp_types is None:
        mlp_types = ["dense"] * min(1, L) + ["sparse"] * max(L - 1, 0)
    idx_types = c.raw("indexer_types")
    if idx_types is None:
        idx_types = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(L)]
    for key, v, allowed in (("mlp_layer_types", mlp_types, ("dense", "sparse")),
                            ("indexer_types", idx_types, ("full", "shared"))):
        if not isinstance(v, list) or len(v) != L or any(t not in allowed for t in v):
            raise GpuplanError(f"{c.source}: {key} must list {' or '.join(allowed)} for each of the {L} layers")
    attn = (_mla(c, h, nh, nope, rope, vd, qr, kvr) + lin("self_attn.gate_proj", nh * vd, h, "attention")
            + _vec("self_attn.sinks", nh))
    indexer = (lin("self_attn.indexer.wq_b", ih * idim, qr, "attention")
               + lin("self_attn.indexer.wk", idim, h, "attention")
               + nrm("self_attn.indexer.k_norm", idim, bias=True)
               + lin("self_attn.indexer.weights_proj", ih, h, "attention"))
    moe = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * moe_ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, moe_ffn), group="expert", count=E)]
           + (gated("mlp.shared_experts", h, shared, "shared_expert") if shared else []))
    dense = gated("mlp", h, ffn, "mlp")
    hc = []
    for p in ("attn_hc", "ffn_hc"):
        hc += lin(f"{p}.fn", 2 * N, N * h, "router") + _vec(f"{p}.base", 2 * N, "router") + _vec(f"{p}.scale", 2,
                                                                                                  "router")
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    layers = [(attn + (indexer if it == "full" else []) + (moe if mt == "sparse" else dense) + hc + norms,
               mt == "sparse") for mt, it in zip(mlp_types, idx_types, strict=True)]
    tied = tie(c, False)
    head = (nrm("norm", h) + lin("hc_head.hc_fn", N, N * h, "router") + _vec("hc_head.hc_base", N, "router")
            + _vec("hc_head.hc_scale", 1, "router") + ([] if tied else emb("lm_head", V, h, "head")))
    c.assumed.append(f"{c.mt}: attention timed as dense MLA over the whole sequence (DeepSeek Sparse Attention's "
                     f"top-{c.int('index_topk', default=2048):,} keys per query and its indexer's scores are not "
                     f"modelled; the output gate costed with the projections); the {N} hyper-connection streams' "
                     "activations are not added")
    sparse = [mt == "sparse" for mt in mlp_types]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=0 if all(sparse) else ffn, vocab=V, max_positions=c.int("max_position_embeddings", default=262144),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=tuple(head), n_experts=E if any(sparse) else 0,
                top_k=k if any(sparse) else 0, moe_ffn=moe_ffn if any(sparse) else 0,
                shared_ffn=shared if any(sparse) else 0, q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=rope)


# ---- LFM3 (Liquid AI) --------------------------------------------------------------------------------
def lfm3(c: Cfg, name: str) -> ModelSpec:
    """Lfm3ForCausalLM (LFM3): LFM2's gated short-convolution blocks with GQA attention blocks (q/k RMSNorms over the
    head, a sigmoid gate per head from the block input with use_attention_gate) on the full_attention and
    sliding_attention layers of layer_types (by default full on each 4th from the 3rd, sliding on each 4th from the
    5th), a SwiGLU MLP of intermediate_size in every block, sandwich norms (use_sandwich_norm) after the mixer and
    the MLP."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 24),
                                                       ("num_attention_heads", 16), ("vocab_size", 128000)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=4)
    hd, ffn = c.int("head_dim", default=128), c.int("intermediate_size", default=7680)
    types = c.raw("layer_types")
    if types is None:
        types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                 for i in range(L)]
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("full_attention", "sliding_attention", "conv") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list full_attention, sliding_attention or conv for each of "
                           f"the {L} layers: fix the list")
    cb, ab = c.flag("conv_bias", default=False), c.flag("attention_bias", default=False)
    conv = (lin("conv.in_proj", 3 * h, h, "attention", cb)
            + [Weight(name="conv.conv", shape=(h, 1, c.int("conv_L_cache", default=7)), group="attention")]
            + (_vec("conv.conv.bias", h) if cb else []) + lin("conv.out_proj", h, h, "attention", cb))
    attention = (lin("self_attn.q_proj", nh * hd, h, "attention", ab)
                 + lin("self_attn.k_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.v_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
                 + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd)
                 + (lin("self_attn.g_proj", nh, h, "attention") if c.flag("use_attention_gate", default=True) else []))
    sandwich = c.flag("use_sandwich_norm", default=True)
    mlp = (lin("feed_forward.w1", ffn, h, "mlp") + lin("feed_forward.w3", ffn, h, "mlp")
           + lin("feed_forward.w2", h, ffn, "mlp") + nrm("operator_norm", h) + nrm("ffn_norm", h)
           + (nrm("post_operator_norm", h) + nrm("post_ffn_norm", h) if sandwich else []))
    blocks = {"full_attention": (attention, "attention"), "sliding_attention": (attention, "attention"),
              "conv": (conv, "conv")}
    tied = tie(c, True)
    win: dict[str, Any] = {}
    if "sliding_attention" in types and not ("sliding_window" in c.d and c.d["sliding_window"] is None):
        win = {"sliding_window": c.int("sliding_window", default=256),
               "window_layers": tuple(t == "sliding_attention" for t in types)}
    if "full_attention" in types:
        c.assumed.append(f"{c.mt}: RoPE costed as the whole head's on every attention layer (the full-attention "
                         "layers rotate half of it by default)")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=128000), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(blocks[t][0] + mlp, False) for t in types], [(blocks[t][1], True) for t in types]),
                head=tuple(nrm("embedding_norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                post_norms=sandwich, **win)


# ---- Cohere 2 MoE ------------------------------------------------------------------------------------
def cohere2_moe(c: Cfg, name: str) -> ModelSpec:
    """Cohere2MoeForCausalLM: Cohere 2's parallel block (one weight-only LayerNorm, or an RMSNorm where
    rms_norm_eps is given, feeding attention and the MLP) with a top-k MoE of intermediate_size experts (and
    num_shared_experts x intermediate_size of shared expert) in place of the MLP on the "sparse" mlp_layer_types
    layers; the first first_k_dense_replace "dense" layers a SwiGLU of prefix_dense_intermediate_size with their own
    sliding-window pattern; three of four of the others attend within sliding_window (sliding_window_pattern)."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 8192), ("num_hidden_layers", 40),
                                                       ("num_attention_heads", 64), ("vocab_size", 256000)))
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d, ffn = c.int("head_dim", default=128), c.int("intermediate_size", default=22528)
    E, k = c.int("num_experts", default=8), c.int("num_experts_per_tok", default=2)
    n_shared = c.int("num_shared_experts", default=0, minimum=0, note=False)
    first = c.int("first_k_dense_replace", default=0, minimum=0, note=False)
    mlp_types = c.raw("mlp_layer_types")
    if mlp_types is None:
        mlp_types = ["dense" if i < first else "sparse" for i in range(L)]
    if not isinstance(mlp_types, list) or len(mlp_types) != L or any(t not in ("dense", "sparse") for t in mlp_types):
        raise GpuplanError(f"{c.source}: mlp_layer_types must list dense or sparse for each of the {L} layers")
    types = c.raw("layer_types")
    if types is None:
        pre, every = c.int("prefix_dense_sliding_window_pattern", default=1), c.int("sliding_window_pattern", default=4)
        n_pre = min(first, L)
        types = (["sliding_attention" if (i + 1) % pre else "full_attention" for i in range(n_pre)]
                 + ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(L - n_pre)])
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("sliding_attention", "full_attention") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list sliding_attention or full_attention for each of the "
                           f"{L} layers: fix the list")
    rms = c.raw("rms_norm_eps") is not None
    dense_ffn = c.int("prefix_dense_intermediate_size", default=ffn, note=False)
    attn = nrm("input_layernorm", h) + qkvo(h, nh, nkv, d, c.flag("attention_bias", default=False))
    moe = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, ffn), group="expert", count=E)]
           + (gated("mlp.shared_experts", h, ffn * n_shared, "shared_expert") if n_shared else []))
    dense = gated("mlp", h, dense_ffn, "mlp")
    layers = [(attn + (moe if t == "sparse" else dense), t == "sparse") for t in mlp_types]
    tied = tie(c, True)
    if n_shared and c.raw("shared_expert_combination_strategy", default="average") == "average":
        c.assumed.append(f"{c.mt}: the shared expert's output is averaged with the routed experts' (no shape)")
    win: dict[str, Any] = {}
    if "sliding_attention" in types and not ("sliding_window" in c.d and c.d["sliding_window"] is None):
        win = {"sliding_window": c.int("sliding_window", default=4096),
               "window_layers": tuple(t == "sliding_attention" for t in types)}
    sparse = [t == "sparse" for t in mlp_types]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(sparse) else dense_ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=8192), gated_mlp=True,
                norm="rmsnorm" if rms else "layernorm", tied_embeddings=tied,
                embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0, moe_ffn=ffn if any(sparse) else 0,
                shared_ffn=ffn * n_shared if any(sparse) else 0, parallel_block=True, **win)


V4_BUILDERS = {"gemma4_text": gemma4_text, "gemma4": gemma4, "qwen4_exp_text": qwen4_exp_text, "qwen4_exp": qwen4_exp,
               "deepseek_v4": deepseek_v4, "hy_v4": hy_v4, "lfm3": lfm3,
               "cohere2_moe": cohere2_moe}
