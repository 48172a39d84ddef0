"""Lara Mini (lara_mini) and Kolibri 1.1 (kolibri1_1), transformers 5.25's, and the registry of this module's and
families_v5_c_ink's (Inkling: inkling_text, inkling_mm_model; Inkling 2: inkling2_text, inkling2): every
parameter tensor the matching ``transformers`` class creates (checked against it on the meta device:
tests/golden/test_hf_families_v5_c.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import _gated_delta, gdn_dims, listed_types, scan_note
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.catalog.families_v5_c_ink import inkling2, inkling2_text, inkling_mm_model, inkling_text
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["V5C_BUILDERS", "kolibri1_1", "lara_mini"]


def _defaults(c: Cfg, defaults: Mapping[str, Any]) -> Cfg:
    """``c`` with the config class's defaults filled in for the keys it leaves out (each recorded in assumed), for
    the shared readers whose own defaults are another family's."""
    filled = {k: v for k, v in defaults.items() if c.raw(k) is None}
    t = Cfg({**c.d, **filled}, c.source, c.mt, c.quote)
    t.assumed = c.assumed + [f"{k} not given: using the transformers default {v}" for k, v in filled.items()]
    return t


def _indices(c: Cfg, key: str, L: int, default: list[int]) -> list[int]:
    """A list of layer indices (below ``L``) the config gives under ``key``, else ``default``."""
    v = c.raw(key)
    if v is None:
        return default
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < L for i in v):
        raise GpuplanError(f"{c.source}: {key} must list layer indices from 0 to {L - 1}: fix the list")
    return v


def _windowed(c: Cfg, types: list[str], window: str, default: int) -> dict[str, Any]:
    """The sliding window of the ``window`` layers of ``types`` (sliding_window, else the family's default)."""
    if window not in types or ("sliding_window" in c.d and c.d["sliding_window"] is None):
        return {}
    return {"sliding_window": c.int("sliding_window", default=default),
            "window_layers": tuple(t == window for t in types)}


# ---- Lara Mini ---------------------------------------------------------------------------------------
# LaraMiniConfig defaults (transformers 5.25) the shared gated-delta reader takes from the config
_LARA = {"linear_num_value_heads": 16, "linear_num_key_heads": 8, "linear_key_head_dim": 128,
         "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}


def lara_mini(c: Cfg, name: str) -> ModelSpec:
    """LaraMiniForCausalLM (Lara 4 Mini): Qwen3.5's gated delta-rule blocks (split in_proj_qkv/z/b/a) and Qwen3
    attention blocks (q/k RMSNorms over the head, no output gate) as layer_types lists them (by default linear,
    sliding, linear, full, sliding, repeated); sliding layers attend within sliding_window with RoPE, full layers
    without positions; every block's MLP a top-k MoE of fused experts with one ungated shared expert."""
    c = _defaults(c, _LARA)
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 1024), ("num_hidden_layers", 34),
                                                       ("num_attention_heads", 16), ("vocab_size", 151936)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=4)
    hd, d = c.int("head_dim", default=128), gdn_dims(c)
    E, k = c.int("num_experts", "num_local_experts", default=128), c.int("num_experts_per_tok", default=4)
    ffn, shared = c.int("moe_intermediate_size", default=512), c.int("shared_expert_intermediate_size", default=512)
    pattern = ["linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention"]
    types = listed_types(c, ("linear_attention", "sliding_attention", "full_attention"), L) or \
        [pattern[i % 5] for i in range(L)]
    attention = (qkvo(h, nh, nkv, hd, c.flag("attention_bias", default=False))
                 + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd))
    mixers = {"full_attention": (attention, "attention"), "sliding_attention": (attention, "attention"),
              "linear_attention": (_gated_delta(h, d, split=True), "gdn")}
    moe = (lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
           + gated("mlp.shared_expert", h, shared, "shared_expert"))
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    tied = tie(c, True)
    if "full_attention" in types:
        c.assumed.append(f"{c.mt}: the full-attention layers use no positional encoding; RoPE is costed on them too")
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=131072), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(mixers[t][0] + norms + moe, True) for t in types],
                              [(mixers[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=ffn, shared_ffn=shared, ssm=d,
                **_windowed(c, types, "sliding_attention", 512))


# ---- Kolibri 1.1 -------------------------------------------------------------------------------------
_KOLIBRI_SOURCES = (0, 0, 0, 3, 4, 5, 5, 5, 5, 0)  # Kolibri1_1Config: the K/V source of each indexed layer


def _kolibri_layout(c: Cfg, L: int) -> tuple[list[str], list[bool]]:
    """Kolibri1_1Config's layer_types (indexed attention on each 5th layer, sliding on the others) and, per layer,
    whether it reads another layer's keys and values (kv_source_layers; by default Kolibri 1.1's layout)."""
    types = c.raw("layer_types")
    if types is None:
        types = ["indexed_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("indexed_attention", "sliding_attention") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list indexed_attention or sliding_attention for each of "
                           f"the {L} layers: fix the list")
    indexed = [i for i, t in enumerate(types) if t == "indexed_attention"]
    sources = c.raw("kv_source_layers")
    if sources is None:
        if len(indexed) > len(_KOLIBRI_SOURCES):
            raise GpuplanError(f"{c.source}: kv_source_layers must be given for more than {len(_KOLIBRI_SOURCES)} "
                               "indexed_attention layers (the default layout covers 10)")
        sources = list(range(L))
        for i, s in zip(indexed, _KOLIBRI_SOURCES, strict=False):
            sources[i] = indexed[s]
    if not isinstance(sources, list) or len(sources) != L or \
            any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= i or types[s] != types[i]
                or sources[s] != s for i, s in enumerate(sources)):
        raise GpuplanError(f"{c.source}: kv_source_layers must give, for each of the {L} layers, its own index or "
                           "that of an earlier layer of the same attention type that produces its own keys and values")
    return types, [s != i for i, s in enumerate(sources)]


def kolibri1_1(c: Cfg, name: str) -> ModelSpec:
    """Kolibri1_1ForCausalLM (Kolibri 1.1): sliding-window attention and, on each 5th layer (layer_types),
    indexed sparse attention (its indexer has no weights) with q/k RMSNorms over the head; a layer that reads an
    earlier layer's keys and values (kv_source_layers) has no k/v projections or k norm; four norms per block; a
    SwiGLU of mlp_only_intermediate_size on mlp_only_layers (the first two), elsewhere a top-k MoE of fused experts
    with a shared expert of shared_expert_intermediate_size."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2560), ("num_hidden_layers", 50),
                                                       ("num_attention_heads", 48), ("vocab_size", 128000)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=4)
    hd = c.int("head_dim", default=128)
    E, k = c.int("num_local_experts", "num_experts", default=384), c.int("num_experts_per_tok", default=6)
    ffn, shared = c.int("moe_intermediate_size", default=512), c.int("shared_expert_intermediate_size", default=512)
    types, reuse = _kolibri_layout(c, L)
    dense_layers = set(_indices(c, "mlp_only_layers", L, [i for i in (0, 1) if i < L]))
    dense_ffn = c.int("mlp_only_intermediate_size", default=3584) if dense_layers else 0
    kv = lin("self_attn.k_proj", nkv * hd, h, "attention") + lin("self_attn.v_proj", nkv * hd, h, "attention") \
        + nrm("self_attn.k_norm", hd)
    moe = (lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
           + gated("mlp.shared_experts", h, shared, "shared_expert"))
    norms = [w for n in ("input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm",
                         "post_mlp_layernorm") for w in nrm(n, h)]

    def block(i: int) -> list[Weight]:
        return (lin("self_attn.q_proj", nh * hd, h, "attention") + nrm("self_attn.q_norm", hd)
                + ([] if reuse[i] else kv) + lin("self_attn.o_proj", h, nh * hd, "attention")
                + (gated("mlp", h, dense_ffn, "mlp") if i in dense_layers else moe) + norms)

    tied = tie(c, False)
    if "indexed_attention" in types:
        c.assumed.append(f"{c.mt}: the indexed layers' sparse attention (index_topk keys of a pool chosen by a "
                         "weightless indexer, plus sink and local tokens) is costed as full causal attention")
    if any(reuse):
        c.assumed.append(f"{c.mt}: {sum(reuse)} layers read an earlier layer's keys and values (no k/v projections "
                         "of their own); their attention is costed as a full layer's")
    sparse = [i not in dense_layers for i in range(L)]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=dense_ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=262144), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(block(i), sparse[i]) for i in range(L)]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0, moe_ffn=ffn if any(sparse) else 0,
                shared_ffn=shared if any(sparse) else 0, post_norms=True,
                **_windowed(c, types, "sliding_attention", 513))


V5C_BUILDERS: dict[str, Callable[[Cfg, str], ModelSpec]] = {
    "lara_mini": lara_mini, "kolibri1_1": kolibri1_1, "inkling_text": inkling_text,
    "inkling2_text": inkling2_text, "inkling2": inkling2,
    "inkling_mm_model": inkling_mm_model,
}
