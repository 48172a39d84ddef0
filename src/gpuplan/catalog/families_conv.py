"""Decoders whose token mixer is mostly a gated short convolution: LFM2 (Liquid AI; Lfm2ForCausalLM) — conv blocks
(in_proj to B, C, x; B·x through a depthwise causal convolution of conv_L_cache taps; times C; out_proj) with GQA
attention (q/k RMSNorms over the head) on the layers layer_types or full_attn_idxs name, a SwiGLU MLP in every
block (LFM2-MoE, lfm2_moe: a top-k MoE after the first num_dense_layers blocks). Every parameter tensor the
``transformers`` 5.24 class creates is listed (checked on the meta device: tests/golden/test_hf_families_hybrid.py);
the MLP width follows Lfm2MLP's block_auto_adjust_ff_dim rule (LFM2-MoE: intermediate_size as given)."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import listed_types
from gpuplan.catalog.families_moe import Moe, fused_experts
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["lfm2"]  # lfm2 and lfm2_moe


def _ffn(c: Cfg) -> int:
    """Lfm2MLP: with block_auto_adjust_ff_dim, 2/3 of intermediate_size times block_ffn_dim_multiplier, rounded up to
    block_multiple_of."""
    ffn = c.int("intermediate_size", "block_ff_dim", default=12288)
    if not c.flag("block_auto_adjust_ff_dim", default=True):
        return ffn
    ffn = int(2 * ffn / 3)
    mult = c.number("block_ffn_dim_multiplier", default=1.0)
    if mult is not None:
        step = c.int("block_multiple_of", default=256)
        ffn = step * ((int(mult * ffn) + step - 1) // step)
    return ffn


def _types(c: Cfg, L: int) -> list[str]:
    """Lfm2Config: layer_types, else full attention on full_attn_idxs (every layer when neither is given)."""
    types = listed_types(c, ("full_attention", "conv"), L)
    if types is not None:
        return types
    idxs = c.raw("full_attn_idxs", default=list(range(L)))
    if not isinstance(idxs, list) or any(not isinstance(i, int) for i in idxs):
        raise GpuplanError(f"{c.source}: full_attn_idxs must list layer indices")
    return ["full_attention" if i in idxs else "conv" for i in range(L)]


def lfm2(c: Cfg, name: str) -> ModelSpec:
    """Lfm2ForCausalLM (see the module doc)."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    V = c.int("vocab_size", default=65536)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    hd = c.head_dim(h, nh)
    cb = c.flag("conv_bias", default=False)
    conv = (lin("conv.in_proj", 3 * h, h, "attention", cb)
            + [Weight(name="conv.conv", shape=(h, 1, c.int("conv_L_cache", default=3)), group="attention")]
            + ([Weight(name="conv.conv.bias", shape=(h,), group="attention", bias=True)] if cb else [])
            + lin("conv.out_proj", h, h, "attention", cb))
    attention = (lin("self_attn.q_proj", nh * hd, h, "attention") + lin("self_attn.k_proj", nkv * hd, h, "attention")
                 + lin("self_attn.v_proj", nkv * hd, h, "attention")
                 + lin("self_attn.out_proj", h, nh * hd, "attention")
                 + nrm("self_attn.q_layernorm", hd) + nrm("self_attn.k_layernorm", hd))
    ffn = c.int("intermediate_size", default=7168) if c.mt == "lfm2_moe" else _ffn(c)
    norms = nrm("operator_norm", h) + nrm("ffn_norm", h)
    mlp = (lin("feed_forward.w1", ffn, h, "mlp") + lin("feed_forward.w3", ffn, h, "mlp")
           + lin("feed_forward.w2", h, ffn, "mlp") + norms)
    moe = _moe(c, h, L)
    types = _types(c, L)
    # Lfm2Config reads the released files' tie_embedding as tie_word_embeddings
    tied = c.flag("tie_embedding", default=True) if c.raw("tie_embedding") is not None else tie(c, True)
    blocks = {"full_attention": (attention, "attention"), "conv": (conv, "conv")}
    layers = [(blocks[t][0] + (moe.mlp + norms if s else mlp), s) for t, s in zip(types, moe.sparse, strict=True)]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=128000), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(blocks[t][1], True) for t in types]),
                head=tuple(nrm("embedding_norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=moe.experts, top_k=moe.top_k, moe_ffn=moe.ffn)


def _moe(c: Cfg, h: int, L: int) -> Moe:
    """Lfm2MoeConfig (LFM2-8B-A1B): after num_dense_layers dense blocks, a top-k MoE of num_experts experts of
    moe_intermediate_size (fused gate/up; the router's expert bias a buffer), no shared expert."""
    if c.mt != "lfm2_moe":
        return Moe(experts=0, top_k=0, ffn=0, shared=0, sparse=[False] * L, mlp=[])
    E, k = c.int("num_experts", default=32), c.int("num_experts_per_tok", default=4)
    f, first = c.int("moe_intermediate_size", default=1792), c.int("num_dense_layers", default=2, minimum=0)
    mlp = fused_experts("feed_forward.experts", h, f, E) + lin("feed_forward.gate", E, h, "router")
    return Moe(experts=E, top_k=k, ffn=f, shared=0, sparse=[i >= first for i in range(L)], mlp=mlp)
