"""Per-architecture builders: a Hugging Face ``config.json`` mapping → ``ModelSpec``.

Each builder lists every parameter tensor the matching ``transformers`` model class creates, with
its exact shape, so ``ModelSpec.params`` equals ``sum(p.numel() for p in model.parameters())``.
Weight names are module paths inside one block (``self_attn.q_proj``); the leaf is the module name
PEFT matches (``q_proj``), and a bias carries the same name as its matrix with ``bias=True``.
Defaults are those of the ``transformers`` config class; any default that shapes the weights is
recorded in ``ModelSpec.assumed`` so nothing is assumed silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.catalog.builder_parts import (
    MAX_CONFIG_INT,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_PARAMS,
    MAX_VOCAB,
    Cfg,
    emb,
    gated,
    groups,
    lin,
    nrm,
    spec,
    tie,
)
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["BUILDERS", "GENERIC_DECODERS", "MAX_CONFIG_INT", "MAX_HIDDEN", "MAX_LAYERS", "MAX_PARAMS", "MAX_VOCAB",
           "Cfg", "bloom", "deepseek", "emb", "falcon", "gated", "gpt2", "gpt_neox", "groups", "lin", "llama_like",
           "mpt", "nrm", "opt", "spec", "tie"]


# ---- Llama-like decoders (RMSNorm, RoPE, SwiGLU/GeGLU) -----------------------------------------
# tie: transformers default of tie_word_embeddings; qkv/o: bias key or fixed bool; norms: per block;
# qk: q_norm/k_norm; hd: default head_dim of the config class (None: hidden // heads)
_LLAMA_LIKE: dict[str, dict[str, Any]] = {
    "llama": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias"),
    "mistral": dict(tie=False),
    "mixtral": dict(tie=False, moe="mixtral"),
    "qwen2": dict(tie=False, qkv=True),
    "qwen2_moe": dict(tie=False, qkv="qkv_bias", qkv_default=True, moe="qwen2_moe"),
    "qwen3": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128),
    "qwen3_moe": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, moe="qwen3_moe"),
    "gemma": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256),
    "gemma2": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256, norms=4),
    "gemma3_text": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256,
                        norms=4, qk=True),
    "phi3": dict(tie=False, fused=True),
    # The generic decoder mapping: Hugging Face families that are plain Llama-shaped decoders (RMSNorm, RoPE,
    # SwiGLU MLP, q/k/v/o projections, the Llama config keys) are read as Llama; ``generic`` is the note
    # printed with every answer (ModelSpec.assumed) saying what the mapping leaves out.
    "olmo2": dict(tie=False, qkv="attention_bias", o="attention_bias", post=True,
                  generic="its q/k RMSNorm weights (h + kv_heads·head_dim per block, < 0.01% of the parameters) are "
                  "not counted; its norms follow attention and MLP (post-norm), which memory and time do not see"),
    "olmo3": dict(tie=False, qkv="attention_bias", o="attention_bias", post=True,
                  generic="as OLMo 2 (q/k norms not counted, post-norm); its sliding-window layers are costed as "
                  "full attention"),
    "olmo": dict(tie=False, qkv="attention_bias", o="attention_bias",
                 generic="OLMo's LayerNorm has no weights: the 2·h norm weights per block counted here are not in "
                 "the model (< 0.01%)"),
    "granite": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                    generic="Granite's embedding, residual, attention and logits multipliers change no shape or "
                    "FLOP count"),
    "smollm3": dict(tie=True, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                    generic="SmolLM3's RoPE-free layers (no_rope_layers) cost the same as the others"),
    "helium": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                   generic="Helium is read as Llama"),
}
GENERIC_DECODERS = tuple(mt for mt, f in _LLAMA_LIKE.items() if "generic" in f)


def _bias(c: Cfg, key: Any, default: bool = False) -> bool:
    return key if isinstance(key, bool) else (c.flag(key, default=default) if key else False)


def llama_like(c: Cfg, name: str) -> ModelSpec:
    f = _LLAMA_LIKE[c.mt]
    if "generic" in f:
        c.assumed.append(f"model_type {c.mt} read through the generic Llama-shaped decoder mapping (RMSNorm, RoPE, "
                         f"SwiGLU, the Llama config keys): {f['generic']}")
    moe = f.get("moe")
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
              *(("num_local_experts",) if moe == "mixtral" else ()),
              *(("num_experts", "moe_intermediate_size") if moe in ("qwen2_moe", "qwen3_moe") else ()),
              *(("shared_expert_intermediate_size",) if moe == "qwen2_moe" else ()),
              *(("intermediate_size",) if moe != "qwen3_moe" else ()))
    h, L, nh, V = (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
                   c.int("vocab_size"))
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh, None if c.raw("head_dim") is not None else f.get("hd"))
    qkv_b = _bias(c, f.get("qkv"), f.get("qkv_default", False))
    o_b, mlp_b = _bias(c, f.get("o")), _bias(c, f.get("mlp"))
    tied = tie(c, f["tie"])
    ffn = c.int("intermediate_size", default=0, minimum=0 if moe == "qwen3_moe" else 1, note=False)
    attn = _llama_attention(f, h, nh, nkv, d, qkv_b, o_b)
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    if f.get("norms", 2) == 4:
        norms += nrm("pre_feedforward_layernorm", h) + nrm("post_feedforward_layernorm", h)
    if f.get("fused"):
        dense_mlp = lin("mlp.gate_up_proj", 2 * ffn, h, "mlp") + lin("mlp.down_proj", h, ffn, "mlp")
    else:
        dense_mlp = gated("mlp", h, ffn, "mlp", mlp_b)
    m = _llama_moe(c, moe, h, L, ffn)
    if not all(m.sparse) and ffn == 0:
        c.require("intermediate_size")
    layers = [(attn + norms + (m.mlp if s else dense_mlp), s) for s in m.sparse]
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(m.sparse) else ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=m.experts, top_k=m.top_k, moe_ffn=m.ffn, shared_ffn=m.shared,
                activation=f.get("act", "silu"), post_norms=f.get("norms", 2) == 4 or f.get("post", False))


def _llama_attention(f: dict[str, Any], h: int, nh: int, nkv: int, d: int, qkv_b: bool,
                     o_b: bool) -> list[Weight]:
    """Self-attention weights of one block: q/k/v (or fused qkv), o, and q/k norms where the family has them."""
    attn: list[Weight] = []
    if f.get("fused"):
        attn += lin("self_attn.qkv_proj", (nh + 2 * nkv) * d, h, "attention", qkv_b)
    else:
        attn += (lin("self_attn.q_proj", nh * d, h, "attention", qkv_b)
                 + lin("self_attn.k_proj", nkv * d, h, "attention", qkv_b)
                 + lin("self_attn.v_proj", nkv * d, h, "attention", qkv_b))
    attn += lin("self_attn.o_proj", h, nh * d, "attention", o_b)
    if f.get("qk"):
        attn += nrm("self_attn.q_norm", d) + nrm("self_attn.k_norm", d)
    return attn


@dataclass(frozen=True, slots=True)
class _Moe:
    """The mixture-of-experts part of a Llama-like model (all zero and no sparse layer when dense)."""
    experts: int
    top_k: int
    ffn: int
    shared: int
    sparse: list[bool]      # per layer: does it use ``mlp`` (the MoE block) instead of the dense MLP
    mlp: list[Weight]


def _llama_moe(c: Cfg, moe: str | None, h: int, L: int, ffn: int) -> _Moe:
    """Experts, routing and the MoE MLP weights of Mixtral / Qwen2-MoE / Qwen3-MoE."""
    if moe == "mixtral":
        E, k = c.int("num_local_experts"), c.int("num_experts_per_tok", default=2)
        mlp = (lin("block_sparse_moe.gate", E, h, "router")
               + gated("block_sparse_moe.experts", h, ffn, "expert", count=E, names=("w1", "w3", "w2")))
        return _Moe(experts=E, top_k=k, ffn=ffn, shared=0, sparse=[True] * L, mlp=mlp)
    if not moe:
        return _Moe(experts=0, top_k=0, ffn=0, shared=0, sparse=[False] * L, mlp=[])
    E, moe_ffn = c.int("num_experts"), c.int("moe_intermediate_size")
    k = c.int("num_experts_per_tok")
    step = c.int("decoder_sparse_step", default=1, note=False)
    only = c.raw("mlp_only_layers", default=[])
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise GpuplanError(f"{c.source}: mlp_only_layers must be a list of layer indices")
    sparse = [i not in only and (i + 1) % step == 0 for i in range(L)]
    mlp = lin("mlp.gate", E, h, "router") + gated("mlp.experts", h, moe_ffn, "expert", count=E)
    shared = 0
    if moe == "qwen2_moe":
        shared = c.int("shared_expert_intermediate_size")
        mlp += gated("mlp.shared_expert", h, shared, "shared_expert")
        mlp += lin("mlp.shared_expert_gate", 1, h, "router")
    return _Moe(experts=E, top_k=k, ffn=moe_ffn, shared=shared, sparse=sparse, mlp=mlp)


# ---- DeepSeek V2/V3: multi-head latent attention + fine-grained MoE ----------------------------
def deepseek(c: Cfg, name: str) -> ModelSpec:
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size",
              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    h, L, nh, V = (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
                   c.int("vocab_size"))
    ffn, kvr = c.int("intermediate_size"), c.int("kv_lora_rank")
    nope, rope, vd = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim"), c.int("v_head_dim")
    qr = c.int("q_lora_rank", default=0, minimum=0, note=False)
    ab = c.flag("attention_bias", default=False)
    tied = tie(c, False)
    attn: list[Weight] = []
    if qr:
        attn += (lin("self_attn.q_a_proj", qr, h, "attention", ab) + nrm("self_attn.q_a_layernorm", qr)
                 + lin("self_attn.q_b_proj", nh * (nope + rope), qr, "attention"))
    else:
        attn += lin("self_attn.q_proj", nh * (nope + rope), h, "attention")
    attn += (lin("self_attn.kv_a_proj_with_mqa", kvr + rope, h, "attention", ab)
             + nrm("self_attn.kv_a_layernorm", kvr)
             + lin("self_attn.kv_b_proj", nh * (nope + vd), kvr, "attention")
             + lin("self_attn.o_proj", h, nh * vd, "attention", ab))
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    dense = attn + norms + gated("mlp", h, ffn, "mlp")
    E = c.int("n_routed_experts", default=0, minimum=0, note=False)
    k = moe_ffn = n_shared = 0
    sparse = [False] * L
    moe_block: list[Weight] = []
    if E:
        moe_ffn, k = c.int("moe_intermediate_size"), c.int("num_experts_per_tok")
        n_shared = c.int("n_shared_experts", default=0, minimum=0, note=False)
        first, freq = c.int("first_k_dense_replace", default=0, minimum=0), c.int("moe_layer_freq", default=1)
        sparse = [i >= first and i % freq == 0 for i in range(L)]
        router = lin("mlp.gate", E, h, "router")
        if c.mt == "deepseek_v3" or c.raw("topk_method") == "noaux_tc":
            router.append(Weight(name="mlp.gate.e_score_correction_bias", shape=(E,), group="router",
                                 bias=True))
        moe_block = attn + norms + router + gated("mlp.experts", h, moe_ffn, "expert", count=E)
        if n_shared:
            moe_block += gated("mlp.shared_experts", h, moe_ffn * n_shared, "shared_expert")
    layers = [(moe_block if s else dense, s) for s in sparse]
    # Multi-token prediction (V3): per module embed_tokens, enorm, hnorm, eh_proj, one decoder block,
    # shared_head.norm and shared_head.head, as stored in the released checkpoint (layers L..L+n-1).
    n_mtp = c.int("num_nextn_predict_layers", default=0, minimum=0, note=False)
    mtp_block = moe_block if E else dense
    extra = n_mtp * (sum(w.numel for w in mtp_block) + 2 * V * h + 2 * h * h + 3 * h)
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=ffn if not all(sparse) else 0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=moe_ffn * n_shared,
                q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=rope, extra_params=extra)


# ---- GPT-style decoders (LayerNorm with bias, GeLU/ReLU MLP) ------------------------------------
def _plain(c: Cfg, name: str, *, L: int, h: int, nh: int, nkv: int, ffn: int, V: int, max_pos: int,
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
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
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
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=4 * h, V=V, max_pos=c.int("seq_length", default=2048),
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
    final = (nrm("final_layer_norm", h, True) if c.flag("do_layer_norm_before", default=True)
             and not c.flag("_remove_final_layer_norm", default=False) else [])
    if pd != h:
        final += lin("project_out", pd, h, "head")
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V, max_pos=P, tied=tie(c, True),
                  embedding=embedding, block=block, final=final, head_in=pd, activation="relu")


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
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nkv, ffn=ffn, V=V,
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
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nkv, ffn=ffn, V=V, max_pos=P,
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
    return _plain(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=ffn, V=V,
                  max_pos=c.int("max_position_embeddings", default=2048), tied=tie(c, False),
                  embedding=emb("embed_in", V, h), block=block, final=nrm("final_layer_norm", h, True),
                  head_name="embed_out", rotary_percent=0.25, activation="gelu",
                  parallel_block=c.flag("use_parallel_residual", default=True))


BUILDERS: dict[str, Callable[[Cfg, str], ModelSpec]] = {
    **{mt: llama_like for mt in _LLAMA_LIKE},
    "deepseek_v2": deepseek, "deepseek_v3": deepseek,
    "gpt2": gpt2, "bloom": bloom, "opt": opt,
    "falcon": falcon, "RefinedWeb": falcon, "RefinedWebModel": falcon,
    "mpt": mpt, "gpt_neox": gpt_neox,
}
