"""JetMoE (JetMoeForCausalLM, Shen et al. 2024, arXiv:2404.07413): every block a mixture of attention heads
(MoA — a shared key/value projection, num_local_experts query/output projections of which a token takes
num_experts_per_tok, each giving num_key_value_heads heads of kv_channels) and a top-k MoE MLP of the same
experts count. Every parameter tensor transformers 5.24's class creates is listed (checked on the meta device:
tests/golden/test_hf_families_aliases.py)."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, groups, lin, nrm, spec, tie
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["jetmoe"]


def jetmoe(c: Cfg, name: str) -> ModelSpec:
    """JetMoeForCausalLM: the query/output experts and the MLP experts are routed weights (group expert: top-k of
    them per token); attention has num_key_value_heads x num_experts_per_tok query heads over num_key_value_heads
    key/value heads (JetMoeConfig sets num_attention_heads so)."""
    c.require("hidden_size", "num_hidden_layers", "vocab_size")
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    nkv, d = c.int("num_key_value_heads", default=16), c.int("kv_channels", "head_dim", default=128)
    E, k = c.int("num_local_experts", default=8), c.int("num_experts_per_tok", default=2)
    ffn = c.int("intermediate_size", default=5632)
    block = (nrm("input_layernorm", h) + lin("self_attention.kv_proj", 2 * nkv * d, h, "attention")
             + lin("self_attention.experts.input_linear", nkv * d, h, "expert", count=E)
             + lin("self_attention.experts.output_linear", h, nkv * d, "expert", count=E)
             + [Weight(name="self_attention.experts.bias", shape=(h,), group="attention", bias=True)]
             + lin("self_attention.experts.router.layer", E, h, "router") + nrm("post_attention_layernorm", h)
             + lin("mlp.input_linear", 2 * ffn, h, "expert", count=E) + lin("mlp.output_linear", h, ffn, "expert",
                                                                              count=E)
             + [Weight(name="mlp.bias", shape=(h,), group="mlp", bias=True)] + lin("mlp.router.layer", E, h, "router"))
    tied = tie(c, True)
    c.assumed.append("jetmoe: the attention experts' routing is costed with the MLP's (one dispatch per block)")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nkv * k, n_kv_heads=nkv, head_dim=d, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, True)] * L),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))), n_experts=E, top_k=k,
                moe_ffn=ffn)
