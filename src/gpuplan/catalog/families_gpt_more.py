"""More GPT-style decoders (LayerNorm with bias, a two-matrix MLP): GPT-Neo (local attention on alternate layers),
Persimmon (q/k LayerNorms, squared-ReLU), XGLM (sinusoidal positions) and BioGPT (learned positions). Each lists
every parameter tensor the matching ``transformers`` 5.24 class creates (tests/golden/test_hf_families_aliases.py);
CodeGen is GPT-J's block (families_gpt.gptj)."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, lin, nrm, tie
from gpuplan.catalog.families_gpt import plain_decoder
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec

__all__ = ["biogpt", "gpt_neo", "persimmon", "xglm"]


def _neo_types(c: Cfg, L: int) -> list[str]:
    """GPTNeoConfig.attention_types ([[["global", "local"], 12]]: each pattern repeated) expanded per layer."""
    spec_ = c.raw("attention_types", default=[[["global", "local"], L // 2]])
    ok = isinstance(spec_, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], list) and isinstance(p[1], int)
        and not isinstance(p[1], bool) and p[1] >= 0 for p in spec_)
    types = [t for pattern, n in spec_ for _ in range(n) for t in pattern] \
        if ok and sum(len(p[0]) * p[1] for p in spec_) == L else None
    if not types or any(t not in ("global", "local") for t in types):
        raise GpuplanError(f"{c.source}: attention_types must expand to global or local for each of the {L} layers, "
                           "e.g. [[[\"global\", \"local\"], 12]]")
    return types


def gpt_neo(c: Cfg, name: str) -> ModelSpec:
    """GPTNeoForCausalLM: GPT-2's block with bias-free q/k/v (a biased out_proj), learned positions, tied embeddings;
    the "local" layers attend within window_size (256)."""
    c.require("hidden_size", "num_layers", "num_heads")
    h, L, nh = c.int("hidden_size"), c.int("num_layers"), c.int("num_heads")
    V, P = c.int("vocab_size", default=50257), c.int("max_position_embeddings", default=2048)
    c.head_dim(h, nh)
    ffn = c.int("intermediate_size", default=4 * h, note=False)
    block = (nrm("ln_1", h, True) + lin("attn.attention.q_proj", h, h, "attention")
             + lin("attn.attention.k_proj", h, h, "attention") + lin("attn.attention.v_proj", h, h, "attention")
             + lin("attn.attention.out_proj", h, h, "attention", True) + nrm("ln_2", h, True)
             + lin("mlp.c_fc", ffn, h, "mlp", True) + lin("mlp.c_proj", h, ffn, "mlp", True))
    local = tuple(t == "local" for t in _neo_types(c, L))
    windows = {"sliding_window": c.int("window_size", default=256), "window_layers": local} if any(local) else {}
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                         embedding=emb("wte", V, h) + emb("wpe", P, h, "position"), block=block,
                         final=nrm("ln_f", h, True), activation="gelu_new", **windows)


def persimmon(c: Cfg, name: str) -> ModelSpec:
    """PersimmonForCausalLM (Adept Persimmon-8B): fused biased query_key_value and dense, LayerNorms with bias over
    each head's q and k (qk_layernorm), a biased squared-ReLU MLP, sequential residuals, partial rotary, untied."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    ffn, V = c.int("intermediate_size"), c.int("vocab_size")
    d = c.head_dim(h, nh)
    qk = nrm("self_attn.q_layernorm", d, True) + nrm("self_attn.k_layernorm", d, True) \
        if c.flag("qk_layernorm", default=True) else []
    block = (nrm("input_layernorm", h, True) + lin("self_attn.query_key_value", 3 * h, h, "attention", True)
             + lin("self_attn.dense", h, h, "attention", True) + qk + nrm("post_attention_layernorm", h, True)
             + lin("mlp.dense_h_to_4h", ffn, h, "mlp", True) + lin("mlp.dense_4h_to_h", h, ffn, "mlp", True))
    rope = c.raw("rope_parameters", default={})
    nested = Cfg(rope if isinstance(rope, dict) else {}, f"{c.source} rope_parameters", c.mt, c.quote)
    share = c.number("partial_rotary_factor", default=None) or nested.number("partial_rotary_factor", default=0.5)
    if share is None or share > 1:
        raise GpuplanError(f"{c.source}: partial_rotary_factor = {share} must be a share of the head dimension, "
                           "at most 1: fix the value")
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V,
                         max_pos=c.int("max_position_embeddings", default=16384), tied=tie(c, False),
                         embedding=emb("embed_tokens", V, h), block=block, final=nrm("final_layernorm", h, True),
                         rotary_percent=float(share), activation="relu2")


def _fairseq_block(h: int, ffn: int) -> list:
    """The fairseq-style pre-norm block of XGLM and BioGPT: biased q/k/v/out_proj, fc1/fc2, two LayerNorms."""
    return (lin("self_attn.k_proj", h, h, "attention", True) + lin("self_attn.v_proj", h, h, "attention", True)
            + lin("self_attn.q_proj", h, h, "attention", True) + lin("self_attn.out_proj", h, h, "attention", True)
            + nrm("self_attn_layer_norm", h, True) + lin("fc1", ffn, h, "mlp", True) + lin("fc2", h, ffn, "mlp", True)
            + nrm("final_layer_norm", h, True))


def xglm(c: Cfg, name: str) -> ModelSpec:
    """XGLMForCausalLM: the fairseq block, sinusoidal positions (no parameters), tied embeddings."""
    c.require("d_model", "num_layers", "attention_heads", "ffn_dim", "vocab_size")
    h, L, nh = c.int("d_model"), c.int("num_layers"), c.int("attention_heads")
    ffn, V = c.int("ffn_dim"), c.int("vocab_size")
    c.head_dim(h, nh)
    c.assumed.append("xglm: its sinusoidal positions (no parameters) are costed as absolute positions")
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V,
                         max_pos=c.int("max_position_embeddings", default=2048), tied=tie(c, True),
                         embedding=emb("embed_tokens", V, h), block=_fairseq_block(h, ffn),
                         final=nrm("layer_norm", h, True), activation="gelu", position="learned")


def biogpt(c: Cfg, name: str) -> ModelSpec:
    """BioGptForCausalLM: the fairseq block, learned positions offset by 2 (max_position_embeddings + 2 rows), tied
    output projection."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    ffn, V, P = c.int("intermediate_size"), c.int("vocab_size"), c.int("max_position_embeddings", default=1024)
    c.head_dim(h, nh)
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                         embedding=emb("embed_tokens", V, h) + emb("embed_positions", P + 2, h, "position"),
                         block=_fairseq_block(h, ffn), final=nrm("layer_norm", h, True), activation="gelu",
                         head_name="output_projection")
