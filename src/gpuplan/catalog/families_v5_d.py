"""Decoders of transformers 5.25's newest families: Param2 MoE (param2moe, which transformers builds as GLM-4.5's
Glm4MoeForCausalLM), Cohere Compass (cohere_compass_text, and the cohere_compass image-text wrapper whose language
model it is) and MiniMax-M3 (minimax_m3_vl_text, minimax_m3_vl) here; dots.3 Note (dots3_note_text, dots3_note) in
families_v5_d_dots; ``V5D_BUILDERS`` registers them all. Each builder lists every parameter tensor the matching
``transformers`` 5.25 class creates (checked against it on the meta device: tests/golden/test_hf_families_v5_d.py);
defaults are those of the config class, recorded in ``assumed`` where they shape the weights. What the time model
has no representation for is mapped to the closest block it has and said in ``assumed``.

HRM-Text (hrm_text) is not read: HrmTextModel runs its two stacks of blocks (L_module, H_module) H_cycles x
(L_cycles + 1) times per forward pass with the same weights, some of the passes without gradients, and a ModelSpec
block is costed once per its weights (no weight reuse across passes): its parameters could be listed exactly but its
FLOPs and activations would be a fraction of the real ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import listed_types
from gpuplan.catalog.families_ln import cohere
from gpuplan.catalog.families_moe import fused_experts, llama_moe
from gpuplan.catalog.families_v5_d_dots import dots3_note, dots3_note_text, filled
from gpuplan.catalog.families_vlm import _checked, _encoder_layer, qwen3_vl_vision_params, text_config, vision_note
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["V5D_BUILDERS", "cohere_compass", "cohere_compass_text", "minimax_m3_vl", "minimax_m3_vl_text",
           "param2moe"]


def _head(V: int, h: int, tied: bool) -> tuple[Weight, ...]:
    return tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head")))


# ---- Param2 MoE ---------------------------------------------------------------------------------------
# Param2MoeConfig defaults (transformers 5.25; checkpoint bharatgenai/Param2-17B-A2.4B-Thinking)
_PARAM2MOE = {"vocab_size": 128000, "hidden_size": 2048, "intermediate_size": 9216, "num_hidden_layers": 21,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "n_routed_experts": 64,
              "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "n_shared_experts": 2,
              "first_k_dense_replace": 1, "use_qk_norm": True, "tie_word_embeddings": True,
              "max_position_embeddings": 32768, "rope_theta": 500000.0}
_PARAM2MOE_KEYS = {"num_experts": "n_routed_experts", "num_local_experts": "n_routed_experts",
                   "num_shared_experts": "n_shared_experts", "use_qkv_bias": "attention_bias"}


def param2moe(c: Cfg, name: str) -> ModelSpec:
    """Param2 MoE, built by transformers as Glm4MoeForCausalLM (GLM-4.5's block): GQA with q/k/v biases under
    attention_bias (o_proj without), q/k RMSNorms over the head (use_qk_norm, on by default), SwiGLU MLPs on the
    first first_k_dense_replace layers, then n_routed_experts routed experts of moe_intermediate_size (top
    num_experts_per_tok; the router's score-correction bias a buffer) beside n_shared_experts shared ones; tied
    embeddings by default; no multi-token-prediction layers are built (num_mtp_layers)."""
    t = filled(c, _PARAM2MOE, _PARAM2MOE_KEYS, drop=("mlp_layer_types",))
    h, L, nh, V, ffn = (t.int(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                           "intermediate_size"))
    nkv, d = t.kv_heads(nh, "num_key_value_heads"), t.int("head_dim")
    ab = t.flag("attention_bias", default=False)
    attn = (lin("self_attn.q_proj", nh * d, h, "attention", ab) + lin("self_attn.k_proj", nkv * d, h, "attention", ab)
            + lin("self_attn.v_proj", nkv * d, h, "attention", ab) + lin("self_attn.o_proj", h, nh * d, "attention"))
    if t.flag("use_qk_norm", default=True):
        attn += nrm("self_attn.q_norm", d) + nrm("self_attn.k_norm", d)
    attn += nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    m = llama_moe(t, "shared_routed", h, L, ffn)
    tied = tie(t, True)
    layers = [(attn + (m.mlp if s else gated("mlp", h, ffn, "mlp")), s) for s in m.sparse]
    return spec(t, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(m.sparse) else ffn, vocab=V, max_positions=t.int("max_position_embeddings"),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=_head(V, h, tied), n_experts=m.experts, top_k=m.top_k, moe_ffn=m.ffn,
                shared_ffn=m.shared)


# ---- Cohere Compass ---------------------------------------------------------------------------------
# CohereCompassTextConfig defaults (transformers 5.25; checkpoint CohereLabs/North-Micro-Vision-Instruct)
_COMPASS_TEXT = {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
                 "num_attention_heads": 64}


def _compass_windows(c: Cfg, L: int) -> dict[str, Any]:
    """The sliding_attention layers of layer_types (none by default: every layer full) attend within
    sliding_window (4096 by default; null: none)."""
    types = listed_types(c, ("full_attention", "sliding_attention"), L)
    if types is None or "sliding_attention" not in types or ("sliding_window" in c.d and c.d["sliding_window"] is None):
        return {}
    return {"sliding_window": c.int("sliding_window", default=4096),
            "window_layers": tuple(t == "sliding_attention" for t in types)}


def cohere_compass_text(c: Cfg, name: str) -> ModelSpec:
    """CohereCompassForCausalLM (North's language model): Cohere's parallel block — one weight-only LayerNorm feeding
    GQA attention (head_dim, by default hidden_size / num_attention_heads) and the SwiGLU MLP —, tied
    embeddings by default, the layer_types' sliding_attention layers within sliding_window; its multimodal RoPE
    sections and RoPE-free layers (a layer type whose rope_parameters entry is null) change no shape."""
    t = filled(c, _COMPASS_TEXT)
    L = t.int("num_hidden_layers")
    rope = t.raw("rope_parameters")
    if isinstance(rope, Mapping) and any(v is None for v in rope.values()):
        t.assumed.append(f"{c.mt}: the RoPE-free layer types (rope_parameters null) are costed as rotary ones")
    return dataclasses.replace(cohere(t, name), **_compass_windows(t, L))


def cohere_compass(c: Cfg, name: str) -> ModelSpec:
    """CohereCompassForConditionalGeneration: the Cohere Compass decoder of ``text_config``, its LM head tied where
    the wrapper's tie_word_embeddings says (false by default); Qwen3-VL's vision transformer with its patch merger
    and DeepStack mergers (CohereCompassVisionModel, the same tensors) counted apart, in ``extra_params``."""
    top = c.flag("tie_word_embeddings", default=False)
    t = text_config(c, "cohere_compass_text", _COMPASS_TEXT, overrides={"tie_word_embeddings": top})
    vision = qwen3_vl_vision_params(c)
    vision_note(t, c.mt, vision)
    return dataclasses.replace(cohere_compass_text(t, name), model_type=c.mt, extra_params=vision,
                               frozen_params=vision)


# ---- MiniMax-M3 -----------------------------------------------------------------------------------------
# MiniMaxM3VLTextConfig defaults (transformers 5.25; checkpoint MiniMaxAI/MiniMax-M3)
_M3_TEXT = {"vocab_size": 200064, "hidden_size": 6144, "intermediate_size": 3072, "num_hidden_layers": 60,
            "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_local_experts": 128,
            "num_experts_per_tok": 4, "dense_intermediate_size": 12288, "shared_intermediate_size": 3072,
            "rotary_dim": 64, "max_position_embeddings": 524288}


def _m3_types(c: Cfg, L: int) -> tuple[list[str], list[str]]:
    """Each layer's attention (layer_types, else the legacy sparse_attention_config.sparse_attention_freq; full by
    default) and MLP (mlp_layer_types, else the legacy moe_layer_freq; sparse by default)."""
    sparse_cfg = c.raw("sparse_attention_config", default={})
    if not isinstance(sparse_cfg, Mapping):
        raise GpuplanError(f"{c.source}: sparse_attention_config must be a mapping of the sparse attention's keys")
    types = listed_types(c, ("full_attention", "minimax_m3_sparse"), L)
    freq = sparse_cfg.get("sparse_attention_freq")
    if types is None and freq is not None:
        if not isinstance(freq, list) or len(freq) != L:
            raise GpuplanError(f"{c.source}: sparse_attention_config.sparse_attention_freq must give 0 or 1 for each "
                               f"of the {L} layers")
        types = ["minimax_m3_sparse" if f else "full_attention" for f in freq]
    mlp = c.raw("mlp_layer_types")
    if mlp is None and c.raw("moe_layer_freq") is not None:
        freq = c.raw("moe_layer_freq")
        mlp = ["sparse" if f else "dense" for f in freq] if isinstance(freq, list) else freq
    mlp = ["sparse"] * L if mlp is None else mlp
    if not isinstance(mlp, list) or len(mlp) != L or any(m not in ("dense", "sparse") for m in mlp):
        raise GpuplanError(f"{c.source}: mlp_layer_types (or moe_layer_freq) must give dense or sparse for each of the "
                           f"{L} layers: fix the list")
    return types or ["full_attention"] * L, mlp


def minimax_m3_vl_text(c: Cfg, name: str) -> ModelSpec:
    """MiniMaxM3VLForCausalLM (MiniMax-M3's language model): GQA without biases, Gemma-style (1 + w) RMSNorms on each
    query and key head, RoPE over rotary_dim of the head; on the minimax_m3_sparse layers a lightning indexer (a
    query projection of index_n_heads x index_head_dim, one key head, their norms); on the sparse layers a
    sigmoid-routed MoE of num_local_experts fused experts of intermediate_size (the score-correction bias a buffer)
    beside a shared expert of shared_intermediate_size, on the dense ones a fused gate_up MLP of
    dense_intermediate_size; SwiGLU-OAI (clamped, swiglu_alpha) everywhere."""
    t = filled(c, _M3_TEXT, {"num_experts": "num_local_experts"})
    h, L, nh, V, ffn = (t.int(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                           "intermediate_size"))
    nkv, d = t.kv_heads(nh, "num_key_value_heads"), t.int("head_dim")
    E, k = t.int("num_local_experts"), t.int("num_experts_per_tok")
    dense_ffn, shared = t.int("dense_intermediate_size"), t.int("shared_intermediate_size")
    types, mlp_types = _m3_types(t, L)
    attn = (lin("self_attn.q_proj", nh * d, h, "attention") + lin("self_attn.k_proj", nkv * d, h, "attention")
            + lin("self_attn.v_proj", nkv * d, h, "attention") + lin("self_attn.o_proj", h, nh * d, "attention")
            + nrm("self_attn.q_norm", d) + nrm("self_attn.k_norm", d)
            + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h))
    legacy = t.raw("sparse_attention_config", default={})  # its sparse_* keys win over the flat ones
    ic = Cfg({"index_n_heads": legacy.get("sparse_num_index_heads", t.raw("index_n_heads", default=4)),
              "index_head_dim": legacy.get("sparse_index_dim", t.raw("index_head_dim", default=128))},
             t.source, t.mt, t.quote)
    n_idx, d_idx = ic.int("index_n_heads"), ic.int("index_head_dim")
    indexer = (lin("self_attn.indexer.q_proj", n_idx * d_idx, h, "attention")
               + lin("self_attn.indexer.k_proj", d_idx, h, "attention")
               + nrm("self_attn.indexer.q_norm", d_idx) + nrm("self_attn.indexer.k_norm", d_idx))
    moe = (lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
           + lin("mlp.shared_experts.gate_up_proj", 2 * shared, h, "shared_expert")
           + lin("mlp.shared_experts.down_proj", h, shared, "shared_expert"))
    dense = lin("mlp.gate_up_proj", 2 * dense_ffn, h, "mlp") + lin("mlp.down_proj", h, dense_ffn, "mlp")
    layers = [(attn + (indexer if a == "minimax_m3_sparse" else []) + (moe if m == "sparse" else dense), m == "sparse")
              for a, m in zip(types, mlp_types, strict=True)]
    t.assumed.append(f"{c.mt}: the SwiGLU-OAI MLPs (clamped gate and up, a sigmoid of gain swiglu_alpha) are costed as "
                     "SwiGLU")
    if "minimax_m3_sparse" in types:
        t.assumed.append(f"{c.mt}: the minimax_m3_sparse layers are timed as full attention over the whole sequence; "
                         "the indexer's block scores and its top-block selection are not modelled")
    tied = tie(t, False)
    any_sparse = "sparse" in mlp_types
    return spec(t, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=dense_ffn if "dense" in mlp_types else 0, vocab=V, max_positions=t.int("max_position_embeddings"),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=_head(V, h, tied), n_experts=E if any_sparse else 0,
                top_k=k if any_sparse else 0, moe_ffn=ffn if any_sparse else 0, shared_ffn=shared if any_sparse else 0,
                rotary_percent=t.int("rotary_dim") / d)


# MiniMaxM3VLVisionConfig defaults (transformers 5.25)
_M3_VISION = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_channels": 3,
              "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2}


def _m3_vision_params(c: Cfg, text_hidden: int) -> int:
    """MiniMaxM3VLVisionModel (a bias-free Conv3d patch embedding, a pre-LayerNorm, CLIP-like blocks of two
    LayerNorms, biased q/k/v/out and a biased fc1/fc2 MLP; no final norm) and the multi-modal projector (two biased
    linears through projector_hidden_size to the text width per patch, two more from spatial_merge_size² of them)."""
    raw = c.raw("vision_config", default={})
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{c.source}: vision_config must be a mapping of the vision tower's config keys")
    v = Cfg({**_M3_VISION, **{k: x for k, x in raw.items() if x is not None}}, f"{c.source} vision_config",
            "minimax_m3_vl_vision", c.quote)
    h, f, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    tower = v.int("num_channels") * v.int("temporal_patch_size") * p * p * h + 2 * h \
        + v.int("num_hidden_layers") * _encoder_layer(h, f)
    P = c.int("projector_hidden_size", default=6144, note=False)
    merged = text_hidden * v.int("spatial_merge_size") ** 2
    projector = (h + 1) * P + (P + 1) * text_hidden + (merged + 1) * P + (P + 1) * text_hidden
    return _checked(c, tower + projector)


def minimax_m3_vl(c: Cfg, name: str) -> ModelSpec:
    """MiniMaxM3SparseForConditionalGeneration: the MiniMax-M3 decoder of ``text_config`` (its LM head tied where
    either the wrapper's or the text config's tie_word_embeddings is true); the vision tower and the multi-modal
    projector counted apart, in ``extra_params``."""
    top = c.flag("tie_word_embeddings", default=False)
    # num_local_experts is left to minimax_m3_vl_text, which reads the released configs' num_experts for it
    defaults = {k: v for k, v in _M3_TEXT.items() if k != "num_local_experts"}
    t = text_config(c, "minimax_m3_vl_text", defaults, overrides={"tie_word_embeddings": True} if top else None)
    vision = _m3_vision_params(c, t.int("hidden_size"))
    vision_note(t, c.mt, vision)
    return dataclasses.replace(minimax_m3_vl_text(t, name), model_type=c.mt, extra_params=vision,
                               frozen_params=vision)


V5D_BUILDERS = {"param2moe": param2moe, "cohere_compass_text": cohere_compass_text, "cohere_compass": cohere_compass,
                "minimax_m3_vl_text": minimax_m3_vl_text, "minimax_m3_vl": minimax_m3_vl,
                "dots3_note_text": dots3_note_text,
                "dots3_note": dots3_note}
