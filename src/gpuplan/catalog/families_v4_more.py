"""LFM3 (lfm3) and Cohere 2 MoE (cohere2_moe), transformers 5.24's: every parameter tensor the matching
``transformers`` class creates (checked against it on the meta device: tests/golden/test_hf_families_v4.py)."""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, moe_layers, nrm, spec, tie
from gpuplan.catalog.families_hybrid import vector
from gpuplan.catalog.families_ln import qkvo
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["cohere2_moe", "lfm3"]


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
            + (vector("conv.conv.bias", h) if cb else []) + lin("conv.out_proj", h, h, "attention", cb))
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
    sparse = moe_layers(c, L, first)
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
    layers = [(attn + (moe if s else dense), s) for s in sparse]
    tied = tie(c, True)
    if n_shared and c.raw("shared_expert_combination_strategy", default="average") == "average":
        c.assumed.append(f"{c.mt}: the shared expert's output is averaged with the routed experts' (no shape)")
    win: dict[str, Any] = {}
    if "sliding_attention" in types and not ("sliding_window" in c.d and c.d["sliding_window"] is None):
        win = {"sliding_window": c.int("sliding_window", default=4096),
               "window_layers": tuple(t == "sliding_attention" for t in types)}
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(sparse) else dense_ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=8192), gated_mlp=True,
                norm="rmsnorm" if rms else "layernorm", tied_embeddings=tied,
                embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E if any(sparse) else 0, top_k=k if any(sparse) else 0, moe_ffn=ffn if any(sparse) else 0,
                shared_ffn=ffn * n_shared if any(sparse) else 0, parallel_block=True, **win)
