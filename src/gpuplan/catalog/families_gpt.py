"""GPT-style decoder families (LayerNorm with bias, a two-matrix GeLU/ReLU MLP, learned, ALiBi or rotary
positions): GPT-2, BLOOM, OPT, Falcon, MPT, GPT-NeoX, GPT-J,
GPT-BigCode (StarCoder, SantaCoder). Each lists every parameter tensor the matching
``transformers`` class creates (see ``families``)."""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.builder_parts import Cfg, emb, groups, lin, nrm, spec, tie
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["bloom", "falcon", "gpt2", "gpt_bigcode", "gpt_neox", "gptj", "mpt", "opt", "plain_decoder"]


def plain_decoder(c: Cfg, name: str, *, L: int, h: int, nh: int, nkv: int, ffn: int, V: int, max_pos: int,
           tied: bool, embedding: list[Weight], block: list[Weight], final: list[Weight],
           head_name: str = "lm_head", head_in: int | None = None, **arch: Any) -> ModelSpec:
    head = final + ([] if tied else emb(head_name, V, head_in or h, "head"))
    arch.setdefault("position", "learned" if any(w.group == "position" for w in embedding) else "rope")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=h // nh, ffn=ffn, vocab=V,
                max_positions=max_pos, gated_mlp=False, norm="layernorm", tied_embeddings=tied,
                embedding=tuple(embedding), layers=groups([(block, False)] * L), head=tuple(head), **arch)


def gpt2(c: Cfg, name: str) -> ModelSpec:
    c.require(("n_layer", "num_hidden_layers"), ("n_embd", "hidden_size"), ("n_head", "num_attention_heads"))
    L, h = c.int("n_layer", "num_hidden_layers"), c.int("n_embd", "hidden_size")
    nh = c.int("n_head", "num_attention_heads")
    c.head_dim(h, nh)
    V, P = c.int("vocab_size", default=50257), c.int("n_positions", "max_position_embeddings", default=1024)
    ffn = c.int("n_inner", default=4 * h, note=False)
    block = (nrm("ln_1", h, True) + lin("attn.c_attn", 3 * h, h, "attention", True)
             + lin("attn.c_proj", h, h, "attention", True) + nrm("ln_2", h, True)
             + lin("mlp.c_fc", ffn, h, "mlp", True) + lin("mlp.c_proj", h, ffn, "mlp", True))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                  embedding=emb("wte", V, h) + emb("wpe", P, h, "position"), block=block,
                  final=nrm("ln_f", h, True), activation="gelu_new")


def bloom(c: Cfg, name: str) -> ModelSpec:
    c.require(("n_layer", "num_hidden_layers"), ("hidden_size", "n_embed"), ("n_head", "num_attention_heads"),
              "vocab_size")
    L, h = c.int("n_layer", "num_hidden_layers"), c.int("hidden_size", "n_embed")
    nh, V = c.int("n_head", "num_attention_heads"), c.int("vocab_size")
    c.head_dim(h, nh)
    block = (nrm("input_layernorm", h, True)
             + lin("self_attention.query_key_value", 3 * h, h, "attention", True)
             + lin("self_attention.dense", h, h, "attention", True) + nrm("post_attention_layernorm", h, True)
             + lin("mlp.dense_h_to_4h", 4 * h, h, "mlp", True)
             + lin("mlp.dense_4h_to_h", h, 4 * h, "mlp", True))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=4 * h, V=V, max_pos=c.int("seq_length", default=2048),
                  tied=tie(c, True),
                  embedding=emb("word_embeddings", V, h) + nrm("word_embeddings_layernorm", h, True),
                  block=block, final=nrm("ln_f", h, True), position="alibi", activation="gelu")


def opt(c: Cfg, name: str) -> ModelSpec:
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim", "vocab_size")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    ffn, V, P = c.int("ffn_dim"), c.int("vocab_size"), c.int("max_position_embeddings", default=2048)
    c.head_dim(h, nh)
    pd = c.int("word_embed_proj_dim", default=h, note=False)
    b = c.flag("enable_bias", default=True)
    ln = c.flag("layer_norm_elementwise_affine", default=True)
    block = (lin("self_attn.q_proj", h, h, "attention", b) + lin("self_attn.k_proj", h, h, "attention", b)
             + lin("self_attn.v_proj", h, h, "attention", b) + lin("self_attn.out_proj", h, h, "attention", b)
             + (nrm("self_attn_layer_norm", h, True) if ln else [])
             + lin("fc1", ffn, h, "mlp", b) + lin("fc2", h, ffn, "mlp", b)
             + (nrm("final_layer_norm", h, True) if ln else []))
    embedding = emb("embed_tokens", V, pd) + emb("embed_positions", P + 2, h, "position")  # OPT offsets by 2
    if pd != h:
        embedding += lin("project_in", h, pd, "embedding")
    # the final LayerNorm follows layer_norm_elementwise_affine too (modeling_opt.py): Galactica's has no weights;
    # OPT-350m is post-LN (do_layer_norm_before false): each block's norms follow its sublayers, no final norm
    pre_ln = c.flag("do_layer_norm_before", default=True)
    final = (nrm("final_layer_norm", h, True) if ln and pre_ln
             and not c.flag("_remove_final_layer_norm", default=False) else [])
    if pd != h:
        # project_out (hidden -> word_embed_proj_dim, no bias; modeling_opt.py OPTDecoder) is the embedding
        # projection's mirror, not the LM head: a tied OPT-350m still has no head matrix
        final += lin("project_out", pd, h, "embedding")
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                  embedding=embedding, block=block, final=final, head_in=pd, activation="relu",
                  post_norms=not pre_ln)


def falcon(c: Cfg, name: str) -> ModelSpec:
    c.require(("hidden_size", "n_embed"), ("num_hidden_layers", "n_layer"), ("num_attention_heads", "n_head"),
              "vocab_size")
    h, L = c.int("hidden_size", "n_embed"), c.int("num_hidden_layers", "n_layer")
    nh, V = c.int("num_attention_heads", "n_head"), c.int("vocab_size")
    new = c.flag("new_decoder_architecture", default=c.mt == "RefinedWeb")
    d = c.head_dim(h, nh)
    if new:
        nkv = c.kv_heads(nh, "num_kv_heads", "n_head_kv")
    else:
        nkv = 1 if c.flag("multi_query", default=True) else nh
    b = c.flag("bias", default=False)
    ffn = c.int("ffn_hidden_size", default=4 * h, note=False)
    n_ln = c.int("num_ln_in_parallel_attn", default=2 if new else 1, note=False)
    parallel = c.flag("parallel_attn", default=True)
    if new and n_ln == 2:
        norms = nrm("ln_attn", h, True) + nrm("ln_mlp", h, True)
    else:
        norms = nrm("input_layernorm", h, True)
        if not parallel:
            norms += nrm("post_attention_layernorm", h, True)
    block = (norms + lin("self_attention.query_key_value", (nh + 2 * nkv) * d, h, "attention", b)
             + lin("self_attention.dense", h, h, "attention", b)
             + lin("mlp.dense_h_to_4h", ffn, h, "mlp", b) + lin("mlp.dense_4h_to_h", h, ffn, "mlp", b))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nkv, ffn=ffn, V=V,
                  max_pos=c.int("max_position_embeddings", default=2048), tied=tie(c, True),
                  embedding=emb("word_embeddings", V, h), block=block, final=nrm("ln_f", h, True),
                  position="alibi" if c.flag("alibi", default=False) else "rope", parallel_block=parallel,
                  activation="gelu")


def mpt(c: Cfg, name: str) -> ModelSpec:
    c.require(("d_model", "hidden_size"), ("n_layers", "num_hidden_layers"),
              ("n_heads", "num_attention_heads"), "vocab_size")
    h, L = c.int("d_model", "hidden_size"), c.int("n_layers", "num_hidden_layers")
    nh, V = c.int("n_heads", "num_attention_heads"), c.int("vocab_size")
    d = c.head_dim(h, nh)
    attn_cfg, ffn_cfg = c.raw("attn_config", default={}), c.raw("ffn_config", default={})
    if not isinstance(attn_cfg, dict) or not isinstance(ffn_cfg, dict):
        raise GpuplanError(f"{c.source}: attn_config and ffn_config must be mappings")
    nkv = nh
    if attn_cfg.get("attn_type") == "grouped_query_attention":
        nkv = Cfg(attn_cfg, c.source + " attn_config", c.mt).kv_heads(nh, "kv_n_heads")
    elif attn_cfg.get("attn_type") == "multiquery_attention":
        nkv = 1
    ffn = ffn_cfg.get("ffn_hidden_size") or int(c.raw("expansion_ratio", default=4) * h)
    b = not c.flag("no_bias", default=False)
    P = c.int("max_seq_len", default=2048)
    block = (nrm("norm_1", h, b) + lin("attn.Wqkv", (nh + 2 * nkv) * d, h, "attention", b)
             + lin("attn.out_proj", h, h, "attention", b) + nrm("norm_2", h, b)
             + lin("ffn.up_proj", ffn, h, "mlp", b) + lin("ffn.down_proj", h, ffn, "mlp", b))
    embedding = emb("wte", V, h)
    if (c.flag("learned_pos_emb", default=True) and not attn_cfg.get("alibi", False)
            and not attn_cfg.get("rope", False)):
        embedding += emb("wpe", P, h, "position")
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nkv, ffn=ffn, V=V, max_pos=P,
                  tied=c.flag("tie_word_embeddings", default=True), embedding=embedding, block=block,
                  final=nrm("norm_f", h, b), activation="gelu",
                  position="alibi" if attn_cfg.get("alibi") else "rope" if attn_cfg.get("rope") else
                  "learned" if len(embedding) > 1 else "none")


def gpt_neox(c: Cfg, name: str) -> ModelSpec:
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    ffn, V = c.int("intermediate_size"), c.int("vocab_size")
    c.head_dim(h, nh)
    b = c.flag("attention_bias", default=True)
    block = (nrm("input_layernorm", h, True) + nrm("post_attention_layernorm", h, True)
             + lin("attention.query_key_value", 3 * h, h, "attention", b)
             + lin("attention.dense", h, h, "attention", b)
             + lin("mlp.dense_h_to_4h", ffn, h, "mlp", True) + lin("mlp.dense_4h_to_h", h, ffn, "mlp", True))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V,
                  max_pos=c.int("max_position_embeddings", default=2048), tied=tie(c, False),
                  embedding=emb("embed_in", V, h), block=block, final=nrm("final_layer_norm", h, True),
                  head_name="embed_out", rotary_percent=0.25, activation="gelu",
                  parallel_block=c.flag("use_parallel_residual", default=True))


def gptj(c: Cfg, name: str) -> ModelSpec:
    """GPTJForCausalLM: one LayerNorm feeding attention and the MLP in parallel (x + attn(n) + mlp(n)), q/k/v/out
    without bias, fc_in → gelu_new → fc_out with biases, rotary on ``rotary_dim`` of each head, an untied
    LM head with a bias (GPTJConfig: n_inner 4·h, tie_word_embeddings false)."""
    c.require("n_embd", "n_layer", "n_head", "vocab_size")
    h, L, nh, V = c.int("n_embd"), c.int("n_layer"), c.int("n_head"), c.int("vocab_size")
    d = c.head_dim(h, nh)
    ffn = c.int("n_inner", default=4 * h, note=False)
    rotary = c.int("rotary_dim", default=64)
    block = (nrm("ln_1", h, True) + lin("attn.q_proj", h, h, "attention") + lin("attn.k_proj", h, h, "attention")
             + lin("attn.v_proj", h, h, "attention") + lin("attn.out_proj", h, h, "attention")
             + lin("mlp.fc_in", ffn, h, "mlp", True) + lin("mlp.fc_out", h, ffn, "mlp", True))
    tied = tie(c, False)
    final = nrm("ln_f", h, True) + ([] if tied else [Weight(name="lm_head", shape=(V,), group="head", bias=True)])
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=c.int("n_positions", default=2048),
                  tied=tied, embedding=emb("wte", V, h), block=block, final=final, parallel_block=True,
                  rotary_percent=min(rotary, d) / d, activation="gelu_new")


def gpt_bigcode(c: Cfg, name: str) -> ModelSpec:
    """GPTBigCodeForCausalLM (StarCoder, SantaCoder): GPT-2's block with multi-query attention — c_attn
    projects h + 2·head_dim (one key/value head) unless ``multi_query`` is false —, learned positions, tied
    embeddings (GPTBigCodeConfig: multi_query true, n_inner 4·h, gelu_pytorch_tanh)."""
    c.require(("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
              "vocab_size")
    h, L = c.int("n_embd", "hidden_size"), c.int("n_layer", "num_hidden_layers")
    nh, V = c.int("n_head", "num_attention_heads"), c.int("vocab_size")
    d = c.head_dim(h, nh)
    nkv = 1 if c.flag("multi_query", default=True) else nh
    P = c.int("n_positions", "max_position_embeddings", default=1024)
    ffn = c.int("n_inner", default=4 * h, note=False)
    block = (nrm("ln_1", h, True) + lin("attn.c_attn", h + 2 * nkv * d, h, "attention", True)
             + lin("attn.c_proj", h, h, "attention", True) + nrm("ln_2", h, True)
             + lin("mlp.c_fc", ffn, h, "mlp", True) + lin("mlp.c_proj", h, ffn, "mlp", True))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nkv, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                  embedding=emb("wte", V, h) + emb("wpe", P, h, "position"), block=block,
                  final=nrm("ln_f", h, True), activation="gelu_pytorch_tanh")
