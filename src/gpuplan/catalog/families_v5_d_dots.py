"""dots.3 Note (transformers 5.25's dots3_note_text, and the dots3_note image/audio-text wrapper whose language model
it is): every parameter tensor the matching ``transformers`` class creates (checked against it on the meta device:
tests/golden/test_hf_families_v5_d.py); ``filled``, the config class's defaults for the keys a config leaves out,
for the families of families_v5_d too."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, moe_layers, nrm, spec, tie
from gpuplan.catalog.families_hybrid import listed_types
from gpuplan.catalog.families_mla import _mla
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.catalog.families_vlm import _checked, text_config
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["DOTS3_TEXT", "dots3_note", "dots3_note_text", "filled"]


def filled(c: Cfg, defaults: Mapping[str, Any], aliases: Mapping[str, str] | None = None,
           drop: tuple[str, ...] = ()) -> Cfg:
    """``c`` with the config class's ``defaults`` for the keys it leaves out (each recorded in ``assumed``), its
    ``aliases`` (attribute_map: a released config's own names) read as the canonical keys, ``drop`` keys the class
    ignores or recomputes left out."""
    d = {**{new: c.d[old] for old, new in (aliases or {}).items() if c.d.get(old) is not None},
         **{k: v for k, v in c.d.items() if k not in drop}}
    fill = {k: v for k, v in defaults.items() if d.get(k) is None}
    t = Cfg({**d, **fill}, c.source, c.mt, c.quote)
    t.assumed = c.assumed + [f"{k} not given: using the transformers default {v}" for k, v in fill.items()]
    return t


# Dots3NoteTextConfig defaults (transformers 5.25; checkpoint dots-studio/dots3-note-prev)
DOTS3_TEXT = {"vocab_size": 152064, "hidden_size": 5120, "intermediate_size": 13824, "moe_intermediate_size": 1536,
              "num_hidden_layers": 46, "num_attention_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
              "kv_lora_rank": 512, "q_lora_rank": 1024, "qk_rope_head_dim": 64, "v_head_dim": 128,
              "qk_nope_head_dim": 128, "num_experts_per_tok": 8, "max_position_embeddings": 524288,
              "shared_experts_intermediate_size": 1536}
_DOTS3_KEYS = {"num_local_experts": "n_routed_experts", "moe_shared_expert_intermediate_size":
               "shared_experts_intermediate_size", "sliding_window_size": "sliding_window"}
# the attention sizes a layer may override (per_layer_config) and the sliding layers' defaults (the swa_* keys)
_DIMS = ("num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
         "qk_rope_head_dim", "v_head_dim", "head_dim")
_SWA = {"num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1024, "kv_lora_rank": 1024,
        "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}
_TYPES = ("indexed_attention", "full_attention", "sliding_attention")


def _dots3_types(c: Cfg, L: int) -> list[str]:
    """Dots3NoteTextConfig.layer_types: as listed, else the first two and each 4th from the 2nd full (every one
    without use_sliding_window), the others sliding; use_dsa (true unless the config has per_layer_config) turns the
    full layers into indexed ones (false: the reverse)."""
    use_dsa = c.flag("use_dsa", default=True) if c.raw("use_dsa") is not None or c.raw("per_layer_config") is None \
        else None
    types = listed_types(c, _TYPES, L)
    if types is None:
        full = "full_attention" if use_dsa is False else "indexed_attention"
        sw = c.flag("use_sliding_window", default=True)
        types = [full if not sw or i < 2 or i % 4 == 1 else "sliding_attention" for i in range(L)]
    if use_dsa is not None:
        old, new = ("full_attention", "indexed_attention") if use_dsa else ("indexed_attention", "full_attention")
        types = [new if t == old else t for t in types]
    return types


def _dots3_sparse(c: Cfg, L: int) -> list[bool]:
    """mlp_layer_types, else sparse from first_k_dense_replace (1) on, where moe_layer_freq (an interval, or 0/1 per
    layer) says."""
    if c.raw("mlp_layer_types") is None:
        first = c.int("first_k_dense_replace", default=1, minimum=0, note=False)
        freq = c.raw("moe_layer_freq", default=1)
        if isinstance(freq, list) and len(freq) >= L:
            return [i >= first and bool(freq[i]) for i in range(L)]
        freq = c.int("moe_layer_freq", default=1, note=False)
        return [i >= first and i % freq == 0 for i in range(L)]
    return moe_layers(c, L, 0)


def _dots3_dims(c: Cfg, types: list[str]) -> list[dict[str, int]]:
    """Each layer's attention sizes: the top-level keys, overridden per layer by per_layer_config (as a saved
    config.json gives it: layer index → changed keys), else on the sliding layers by the swa_* keys (their
    defaults: 64 heads, both ranks 1024, head size 256 of which 192 unrotated, values of 128)."""
    base = {k: c.raw(k) for k in _DIMS}
    per = c.raw("per_layer_config")
    if per is None:
        swa: dict[str, Any] = {k: c.raw(f"swa_{k}", default=v) for k, v in _SWA.items()}
        if isinstance(swa["head_dim"], int) and isinstance(swa["qk_nope_head_dim"], int):
            swa["qk_rope_head_dim"] = c.raw("swa_qk_rope_head_dim", default=swa["head_dim"] - swa["qk_nope_head_dim"])
        over = {i: swa for i, t in enumerate(types) if t == "sliding_attention"}
    else:
        if not isinstance(per, Mapping):
            raise GpuplanError(f"{c.source}: per_layer_config must map layer indices to their overrides")
        over = {}
        for k, v in per.items():
            if not str(k).isdigit() or int(k) >= len(types) or not isinstance(v, Mapping) or set(v) - set(_DIMS):
                raise GpuplanError(f"{c.source}: per_layer_config key {k!r} must be a layer index below {len(types)} "
                                   f"mapped to overrides of {', '.join(_DIMS)}: fix the entry (or give {{params: N}})")
            over[int(k)] = dict(v)
    out = []
    for i in range(len(types)):
        lc = Cfg({**base, **over.get(i, {})}, f"{c.source} layer {i}", c.mt, c.quote)
        dims = {k: lc.int(k) for k in _DIMS if k != "head_dim"}
        if dims["num_key_value_heads"] != dims["num_attention_heads"]:
            raise GpuplanError(f"{c.source}: layer {i} has {dims['num_key_value_heads']} key/value heads for "
                               f"{dims['num_attention_heads']} attention heads: dots.3 Note's MLA needs as many")
        out.append(dims)
    return out


def _dots3_attention(c: Cfg, h: int, dims: dict[str, int], indexed: bool) -> list[Weight]:
    """One Dots3NoteTextAttention: MLA with a compressed query (families_mla._mla), an RMSNorm on the rotary key, a
    sigmoid gate per head (g_proj) and, on an indexed layer, DeepSeek Sparse Attention's indexer (index_n_heads query
    heads of index_head_dim from the compressed query, one key head with a biased LayerNorm, per-head weights)."""
    nh, qr, rope = dims["num_attention_heads"], dims["q_lora_rank"], dims["qk_rope_head_dim"]
    ws = (_mla(c, h, nh, dims["qk_nope_head_dim"], rope, dims["v_head_dim"], qr, dims["kv_lora_rank"])
          + nrm("self_attn.k_rope_only_layernorm", rope) + lin("self_attn.g_proj", nh, h, "attention"))
    if indexed:
        n, d = c.int("index_n_heads", default=64, note=False), c.int("index_head_dim", default=128, note=False)
        ws += [Weight(name=f"self_attn.indexer.{leaf}", shape=shape, group="attention")
               for leaf, shape in (("wq_b", (n * d, qr)), ("wk", (d, h)), ("weights_proj", (n, h)))]
        ws += nrm("self_attn.indexer.k_norm", d, bias=True)
    return ws


def _dots3_notes(c: Cfg, types: list[str], dims: list[dict[str, int]], main: dict[str, int]) -> None:
    if any(d != main for d in dims):
        c.assumed.append(f"{c.mt}: attention is costed at the main layers' MLA sizes ({main['num_attention_heads']} "
                         f"heads, ranks {main['q_lora_rank']}/{main['kv_lora_rank']}); the layers with their own "
                         "(per_layer_config, by default the sliding ones) differ only in their weights")
    if "indexed_attention" in types:
        c.assumed.append(f"{c.mt}: the indexed_attention layers are timed as dense MLA over the whole sequence; "
                         f"DeepSeek Sparse Attention's top-{c.int('index_topk', default=2048, note=False):,} keys per "
                         "query and its indexer's scores are not modelled")
    c.assumed.append(f"{c.mt}: the attention output's per-head sigmoid gate (g_proj) is costed as a projection only")


def dots3_note_text(c: Cfg, name: str) -> ModelSpec:
    """Dots3NoteForCausalLM (dots.3 Note's language model): multi-head latent attention (a compressed query, the joint
    key/value latent, a normed rotary key, a per-head output gate) on every layer, with its own sizes on the sliding
    layers and DeepSeek Sparse Attention's indexer on the indexed ones; a SwiGLU MLP on the dense layers (the first
    by default), elsewhere n_routed_experts sigmoid-routed fused experts of moe_intermediate_size (an fp32 router, the
    score-correction bias a buffer) beside n_shared_experts x shared_experts_intermediate_size of shared expert."""
    t = filled(c, DOTS3_TEXT, _DOTS3_KEYS)
    h, L, V = t.int("hidden_size"), t.int("num_hidden_layers"), t.int("vocab_size")
    if t.raw("num_key_value_heads") is None:
        t.d = {**t.d, "num_key_value_heads": t.d["num_attention_heads"]}
    types = _dots3_types(t, L)
    dims = _dots3_dims(t, types)
    sparse = _dots3_sparse(t, L)
    E, k, moe_ffn = t.int("n_routed_experts"), t.int("num_experts_per_tok"), t.int("moe_intermediate_size")
    n_shared = t.int("n_shared_experts")
    shared = n_shared * t.int("shared_experts_intermediate_size")
    ffn = t.int("intermediate_size")
    moe = (lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, moe_ffn, E)
           + gated("mlp.shared_experts", h, shared, "shared_expert"))
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    dense = gated("mlp", h, ffn, "mlp")
    layers = [(_dots3_attention(t, h, d, ty == "indexed_attention") + norms + (moe if s else dense), s)
              for d, ty, s in zip(dims, types, sparse, strict=True)]
    main = next((d for d, ty in zip(dims, types, strict=True) if ty != "sliding_attention"), dims[0])
    _dots3_notes(t, types, dims, main)
    tied = tie(t, False)
    win: dict[str, Any] = {}
    if "sliding_attention" in types:
        win = {"sliding_window": t.int("sliding_window", default=512),
               "window_layers": tuple(ty == "sliding_attention" for ty in types)}
    nh, rope = main["num_attention_heads"], main["qk_rope_head_dim"]
    return spec(t, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=main["qk_nope_head_dim"] + rope,
                v_head_dim=main["v_head_dim"], ffn=0 if all(sparse) else ffn, vocab=V,
                max_positions=t.int("max_position_embeddings"), gated_mlp=True, norm="rmsnorm", tied_embeddings=tied,
                embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0, moe_ffn=moe_ffn if any(sparse) else 0,
                shared_ffn=shared if any(sparse) else 0, q_lora_rank=main["q_lora_rank"],
                kv_lora_rank=main["kv_lora_rank"], qk_rope_dim=rope, **win)


# ---- the dots3_note wrapper's towers ------------------------------------------------------------------
# Dots3NoteVisionConfig / Dots3NoteAudioConfig defaults (transformers 5.25) and their released configs' own names
_VISION = {"hidden_size": 1536, "intermediate_size": 4224, "num_hidden_layers": 42, "num_attention_heads": 24,
           "num_channels": 3, "patch_size": 14, "moe_intermediate_size": 2112, "num_local_experts": 64,
           "adapter_merge_size": 2, "adapter_out_dim": 5120}
_VISION_KEYS = {"embed_dim": "hidden_size", "num_heads": "num_attention_heads", "use_bias": "attention_bias"}
_PYRAMID = [-1] * 25 + list(range(4, 65, 4)) + [64]  # routed experts per vision block (-1: a dense MLP)
_AUDIO = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_attention_heads": 20,
          "feature_size": 128, "downsample_hidden_size": 480, "adapter_out_dim": 5120}
_WHISPER = {"d_model": "hidden_size", "encoder_attention_heads": "num_attention_heads",
            "encoder_layers": "num_hidden_layers", "encoder_ffn_dim": "intermediate_size",
            "num_mel_bins": "feature_size"}


def _tower(c: Cfg, key: str, kind: str, defaults: Mapping[str, Any], aliases: Mapping[str, str]) -> Cfg:
    raw = c.raw(key, default={})
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{c.source}: {key} must be a mapping of the tower's config keys")
    d = {**{new: raw[old] for old, new in aliases.items() if raw.get(old) is not None},
         **{k: x for k, x in raw.items() if x is not None and k not in aliases}}
    return Cfg({**defaults, **d}, f"{c.source} {key}", kind, c.quote)


def _vision_experts(v: Cfg, L: int) -> list[int]:
    """Routed experts of each vision block (0: a dense MLP): pyramid_num_routed (the released config's; by default
    25 dense blocks, then 4, 8, ... 64, 64), else mlp_layer_types with per_layer_config's num_local_experts."""
    pyramid = v.raw("pyramid_num_routed", default=None if v.raw("mlp_layer_types") is not None else _PYRAMID)
    if pyramid is not None:
        if not isinstance(pyramid, list) or len(pyramid) != L or not all(isinstance(n, int) for n in pyramid):
            raise GpuplanError(f"{v.source}: pyramid_num_routed must give a count of experts (-1: dense) for each of "
                               f"the {L} blocks")
        kinds = ["sparse" if n > 0 else "dense" for n in pyramid]
        per: Any = {str(i): {"num_local_experts": n} for i, n in enumerate(pyramid) if n > 0}
    else:
        kinds, per = v.raw("mlp_layer_types"), v.raw("per_layer_config", default={})
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("dense", "sparse") for k in kinds):
            raise GpuplanError(f"{v.source}: mlp_layer_types must list dense or sparse for each of the {L} blocks")
    if not isinstance(per, Mapping) or not all(isinstance(o, Mapping) for o in per.values()):
        raise GpuplanError(f"{v.source}: per_layer_config must map block indices to their overrides")
    over = {str(i): o for i, o in per.items()}
    return [Cfg({**v.d, **over.get(str(i), {})}, f"{v.source} block {i}", v.mt, v.quote).int("num_local_experts")
            if k == "sparse" else 0 for i, k in enumerate(kinds)]


def _dots3_vision(c: Cfg) -> int:
    """Dots3NoteVisionModel: a biased patch convolution and its RMSNorm; blocks of two RMSNorms, a fused qkv and a
    projection (biased with attention_bias), per-head q/k RMSNorms, and a SwiGLU MLP (biased with mlp_bias) or
    sigmoid-routed fused experts of moe_intermediate_size (an fp32 router, its bias a buffer); the patch merger (a
    LayerNorm, two biased linears from adapter_merge_size² patches to adapter_out_dim); a final RMSNorm."""
    v = _tower(c, "vision_config", "dots3_note_vision_encoder", _VISION, _VISION_KEYS)
    h, f, L, nh = (v.int(k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"))
    p, mf = v.int("patch_size"), v.int("moe_intermediate_size")
    ab, mb = v.flag("attention_bias", default=False), v.flag("mlp_bias", default=False)
    block = 4 * h * h + 4 * h * ab + 2 * h + 2 * (h // nh)
    mlps = sum(E * h * (1 + 3 * mf) if E else 3 * h * f + mb * (2 * f + h) for E in _vision_experts(v, L))
    merged, out = h * v.int("adapter_merge_size") ** 2, v.int("adapter_out_dim")
    merger = 2 * h + merged * merged + merged + merged * out + out
    return v.int("num_channels") * p * p * h + 2 * h + L * block + mlps + merger + h


def _dots3_audio(c: Cfg) -> int:
    """Dots3NoteAudioModel: the convolutional stem (three biased 3x3 convolutions of downsample_hidden_size
    channels, a bias-free projection of their feature_size / 8 rows); blocks of two RMSNorms, q/v/o (biased with
    attention_bias) and a bias-free k, a biased fused gate_up MLP; a final RMSNorm; the adapter (a LayerNorm, two
    biased linears to adapter_out_dim). A released config's whisper_config sizes win."""
    raw = c.raw("audio_config", default={})
    whisper = raw.get("whisper_config") if isinstance(raw, Mapping) else None
    a = _tower(c, "audio_config", "dots3_note_audio_encoder", _AUDIO,
               {"whisper_adapter_out_dim": "adapter_out_dim", "adapter_output_size": "adapter_out_dim"})
    if whisper is not None:
        if not isinstance(whisper, Mapping):
            raise GpuplanError(f"{a.source}: whisper_config must be a mapping of the encoder's sizes")
        a.d = {**a.d, **{new: whisper[old] for old, new in _WHISPER.items() if whisper.get(old) is not None}}
    h, f, L, nh = (a.int(k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"))
    D, out, ab = a.int("downsample_hidden_size"), a.int("adapter_out_dim"), a.flag("attention_bias", default=True)
    q = nh * (h // nh)
    stem = 10 * D + 2 * (9 * D * D + D) + D * ((a.int("feature_size") + 7) // 8) * h
    block = 2 * h + (q * h + q * ab) + h * h + (q * h + q * ab) + (h * q + h * ab) + (2 * f * h + 2 * f) + (f * h + h)
    return stem + L * block + h + 2 * h + (h * out + out) + (out * out + out)


def dots3_note(c: Cfg, name: str) -> ModelSpec:
    """Dots3NoteForConditionalGeneration: the dots.3 Note decoder of ``text_config`` (a published config.json gives
    its keys at the top level), its LM head tied where the wrapper's tie_word_embeddings says (false by default); the
    vision tower (a ViT whose later blocks route to experts) and the audio encoder with their adapters counted apart,
    in ``extra_params``."""
    top = c.flag("tie_word_embeddings", default=False)
    t = text_config(c, "dots3_note_text", {}, flat=c.raw("text_config") is None,
                    overrides={"tie_word_embeddings": top})
    towers = _checked(c, _dots3_vision(c) + _dots3_audio(c))
    t.assumed.append(f"model_type {c.mt} (image/audio-text): the language model is costed on text; the vision and "
                     f"audio towers and their adapters ({towers:,} parameters) are counted apart (extra_params) and "
                     "held frozen: their 16-bit weights on the first pipeline stage, without gradients, optimizer "
                     "state, FLOPs or activations")
    return dataclasses.replace(dots3_note_text(t, name), model_type=c.mt, extra_params=towers, frozen_params=towers)
