"""Decoders of transformers 5.24's newest families: Gemma 4 (gemma4_text, and the gemma4 image/audio-text wrapper
whose language model it is) here; Qwen4-Exp, DeepSeek-V4 and HY-V4 in families_v4_hc, LFM3 and Cohere 2 MoE in
families_v4_more; ``V4_BUILDERS`` registers them all. Each builder lists every parameter tensor the matching
``transformers`` 5.24 class creates (checked against it on the meta device: tests/golden/test_hf_families_v4.py);
defaults are those of the config class, recorded in ``assumed`` where they shape the weights. What the time model
has no representation for is mapped to the closest block it has and said in ``assumed``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_v4_hc import deepseek_v4, hy_v4, qwen4_exp, qwen4_exp_text
from gpuplan.catalog.families_v4_more import cohere2_moe, lfm3
from gpuplan.catalog.families_vlm import text_config
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["V4_BUILDERS", "gemma4", "gemma4_text"]


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


def _gemma4_block(c: Cfg, h: int, nh: int, ffn: int, hd: int, kv: int, full: bool, reuse: bool,
                  moe: tuple[int, int] | None) -> list[Weight]:
    """One Gemma4TextDecoderLayer: attention (no k/v weights where it reuses an earlier layer's, no v_proj on a full
    layer with attention_k_eq_v), the GeGLU MLP (doubled on a reusing layer with use_double_wide_mlp), four norms,
    the per-layer-embedding gate, projection and norm, and with ``moe`` (experts, expert width) the router, the
    experts and their three norms."""
    ab = c.flag("attention_bias", default=False)
    ws = lin("self_attn.q_proj", nh * hd, h, "attention", ab) + nrm("self_attn.q_norm", hd)
    if not reuse:
        ws += nrm("self_attn.k_norm", hd) + lin("self_attn.k_proj", kv * hd, h, "attention", ab)
        if not (full and c.flag("attention_k_eq_v", default=False)):
            ws += lin("self_attn.v_proj", kv * hd, h, "attention", ab)
    ws += lin("self_attn.o_proj", h, nh * hd, "attention", ab)
    width = ffn * (2 if reuse and c.flag("use_double_wide_mlp", default=False) else 1)
    ws += gated("mlp", h, width, "shared_expert" if moe else "mlp")
    ws += (nrm("input_layernorm", h) + nrm("post_attention_layernorm", h) + nrm("pre_feedforward_layernorm", h)
           + nrm("post_feedforward_layernorm", h))
    hpl = c.int("hidden_size_per_layer_input", default=256, minimum=0, note=False)
    if hpl:
        ws += (lin("per_layer_input_gate", hpl, h, "mlp") + lin("per_layer_projection", h, hpl, "mlp")
               + nrm("post_per_layer_input_norm", h))
    if moe:
        E, f = moe
        ws += (lin("router.proj", E, h, "router") + nrm("router.scale", h)
               + [Weight(name="router.per_expert_scale", shape=(E,), group="router", bias=True)]
               + [Weight(name="experts.gate_up_proj", shape=(2 * f, h), group="expert", count=E),
                  Weight(name="experts.down_proj", shape=(h, f), group="expert", count=E)]
               + nrm("post_feedforward_layernorm_1", h) + nrm("post_feedforward_layernorm_2", h)
               + nrm("pre_feedforward_layernorm_2", h))
    return ws


def _gemma4_embedding(c: Cfg, V: int, h: int, L: int) -> list[Weight]:
    """The token embedding and, with hidden_size_per_layer_input, the packed per-layer-embedding table, its
    projection from the hidden state and its norm."""
    embedding = emb("embed_tokens", V, h)
    hpl = c.int("hidden_size_per_layer_input", default=256, minimum=0)
    if hpl:
        Vpl = c.int("vocab_size_per_layer_input", default=262144)
        embedding += (emb("embed_tokens_per_layer", Vpl, L * hpl) + lin("per_layer_model_projection", L * hpl, h, "mlp")
                      + nrm("per_layer_projection_norm", hpl))
        c.assumed.append(f"{c.mt}: the per-layer embeddings (PLE: a {Vpl:,} x {L * hpl:,} table and its projection "
                         "from the hidden state) are held with the token embedding; their lookup and projection are "
                         "not timed (the blocks' PLE gate and projection are)")
    return embedding


def _gemma4_notes(c: Cfg, types: list[str], per: list[tuple[int, int]], d: int, nkv: int, shared: int,
                  ffn: int) -> None:
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
    if c.flag("attention_k_eq_v", default=False):
        c.assumed.append(f"{c.mt}: attention_k_eq_v: the full layers' values are their keys (no v_proj); their "
                         "attention is costed as with separate values")
    if c.flag("enable_moe_block", default=False):
        c.assumed.append(f"{c.mt}: every block runs its dense GeGLU MLP ({ffn}) beside the routed experts: costed as "
                         "an always-active shared expert")


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
    moe = None
    k = 0
    if c.flag("enable_moe_block", default=False):
        c.require("num_experts", "top_k_experts", "moe_intermediate_size")
        moe, k = (c.int("num_experts"), c.int("moe_intermediate_size")), c.int("top_k_experts")
    layers = [(_gemma4_block(c, h, nh, ffn, hd, kv, t == "full_attention", i >= L - shared, moe), moe is not None)
              for i, (t, (hd, kv)) in enumerate(zip(types, per, strict=True))]
    embedding = _gemma4_embedding(c, V, h, L)
    tied = tie(c, True)
    _gemma4_notes(c, types, per, d, nkv, shared, ffn)
    E, moe_ffn = moe or (0, 0)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d, ffn=0 if moe else ffn,
                vocab=V, max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(embedding), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))), n_experts=E, top_k=k,
                moe_ffn=moe_ffn, shared_ffn=ffn if moe else 0, activation="gelu_pytorch_tanh", post_norms=True,
                **_gemma4_windows(c, types))


def _gemma4_windows(c: Cfg, types: list[str]) -> dict[str, Any]:
    w = c.int("sliding_window", default=512)
    pattern = tuple(t == "sliding_attention" for t in types)
    return {"sliding_window": w, "window_layers": pattern} if any(pattern) else {}


def _tower(c: Cfg, key: str, kind: str, what: str) -> Cfg | None:
    """A tower's config (``vision_config``, ``audio_config``) read as ``kind``; None where the wrapper has none."""
    raw = c.raw(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{c.source}: {key} must be a mapping of the {what}'s config keys")
    return Cfg(raw, f"{c.source} {key}", kind, c.quote)


def _gemma4_vision_params(c: Cfg, text_hidden: int) -> int:
    """Gemma4VisionModel (patch embedder with its 2-D position table, encoder of q/k-normed attention and GeGLU
    blocks with four norms; the pooler holds no weights) and the embedding projection into the text width."""
    vc = _tower(c, "vision_config", "gemma4_vision", "vision tower")
    if vc is None:
        return 0
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
    ac = _tower(c, "audio_config", "gemma4_audio", "audio tower")
    if ac is None:
        return 0
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
    t = text_config(c, "gemma4_text", _GEMMA4_TEXT, overrides={"tie_word_embeddings": top} if top is not None else None)
    th = t.int("hidden_size")
    towers = _gemma4_vision_params(c, th) + _gemma4_audio_params(c, th)
    if towers:
        t.assumed.append(f"model_type gemma4 (image/audio-text): the language model is costed on text; the vision and "
                         f"audio towers and their projections ({towers:,} parameters) are counted apart "
                         "(extra_params) and held frozen: their 16-bit weights on the first pipeline stage, without "
                         "gradients, optimizer state, FLOPs or activations")
    return dataclasses.replace(gemma4_text(t, name), model_type="gemma4", extra_params=towers, frozen_params=towers)


V4_BUILDERS = {"gemma4_text": gemma4_text, "gemma4": gemma4, "qwen4_exp_text": qwen4_exp_text, "qwen4_exp": qwen4_exp,
               "deepseek_v4": deepseek_v4, "hy_v4": hy_v4, "lfm3": lfm3, "cohere2_moe": cohere2_moe}
