"""Inkling (inkling_text), transformers 5.25's Thinking Machines decoder: every parameter tensor the matching
``transformers`` class creates (checked against it on the meta device: tests/golden/test_hf_families_v5_c.py)."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["inkling_text"]


def conv(name: str, channels: int, kernel: int) -> list[Weight]:
    """A bias-free depthwise causal Conv1d over ``channels`` (Inkling's short convolutions)."""
    return [Weight(name=f"{name}.conv1d", shape=(channels, 1, kernel), group="attention")]


def scalar(name: str) -> list[Weight]:
    """A one-element learned scale (replicated)."""
    return [Weight(name=name, shape=(1,), group="norm", bias=True)]


def _inkling_types(c: Cfg, L: int) -> tuple[list[str], list[str]]:
    """InklingTextConfig's layer_types (hybrid_sliding on local_layer_ids, by default all but each 6th layer; hybrid:
    full attention) and mlp_layer_types (dense on the first dense_mlp_idx layers, sparse after)."""
    types = c.raw("layer_types")
    if types is None:
        local = c.raw("local_layer_ids")
        if local is not None and (not isinstance(local, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                                                     for i in local)):
            raise GpuplanError(f"{c.source}: local_layer_ids must list layer indices")
        local = set(local) if local is not None else {i for i in range(L) if (i + 1) % 6}
        types = ["hybrid_sliding" if i in local else "hybrid" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("hybrid", "hybrid_sliding") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list hybrid or hybrid_sliding for each of the {L} layers: "
                           "fix the list")
    mlp = c.raw("mlp_layer_types")
    if mlp is None:
        first = c.int("dense_mlp_idx", default=0, minimum=0, note=False)
        mlp = ["dense" if i < first else "sparse" for i in range(L)]
    if not isinstance(mlp, list) or len(mlp) != L or any(t not in ("dense", "sparse") for t in mlp):
        raise GpuplanError(f"{c.source}: mlp_layer_types must list dense or sparse for each of the {L} layers: "
                           "fix the list")
    return types, mlp


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
    types, mlp_types = _inkling_types(c, L)
    attention = {t: _inkling_attention(c, h, t == "hybrid_sliding", kernel) for t in set(types)}
    moe = (lin("mlp.gate", E + S, h, "router") + scalar("mlp.gate.global_scale")
           + fused_experts("mlp.experts", h, moe_ffn, E) + gated("mlp.shared_experts", h, moe_ffn, "shared_expert",
                                                                count=S))
    dense = scalar("mlp.global_scale") + gated("mlp", h, ffn, "mlp")
    rest = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h) + conv("attn_sconv", h, kernel) \
        + conv("mlp_sconv", h, kernel)
    layers = [(attention[t][0] + (moe if m == "sparse" else dense) + rest, m == "sparse")
              for t, m in zip(types, mlp_types, strict=True)]
    nh, nkv, hd = attention["hybrid_sliding" if "hybrid_sliding" in types else "hybrid"][1]
    if len({a[1] for a in attention.values()}) > 1:
        full = attention["hybrid"][1]
        c.assumed.append(f"{c.mt}: attention costed with the sliding layers' {nh} heads ({nkv} key/value) of {hd}; "
                         f"the full layers' own ({full[0]} heads, {full[1]} key/value, of {full[2]}) only in the "
                         "weights")
    c.assumed.append(f"{c.mt}: the learned relative-position bias and the short convolutions are not costed as "
                     "FLOPs (their weights are counted); no RoPE")
    if c.raw("num_mtp_layers") is not None:
        c.assumed.append(f"{c.mt}: the multi-token-prediction layers are not built by transformers and not counted")
    win = {}
    if "hybrid_sliding" in types:
        win = {"sliding_window": c.int("sliding_window_size", "sliding_window", default=512),
               "window_layers": tuple(t == "hybrid_sliding" for t in types)}
    sparse = [m == "sparse" for m in mlp_types]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                ffn=0 if all(sparse) else ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", "model_max_length", default=131072), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=False,
                embedding=tuple(emb("embed_tokens", V, h) + nrm("embed_tokens.embed_norm", h)),
                layers=groups(layers), head=tuple(nrm("norm", h) + emb("lm_head", V, h, "head")),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0,
                moe_ffn=moe_ffn if any(sparse) else 0, shared_ffn=moe_ffn * S if any(sparse) else 0,
                position="none", **win)
