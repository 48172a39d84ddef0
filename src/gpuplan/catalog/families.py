"""Per-architecture builders: a Hugging Face ``config.json`` mapping → ``ModelSpec``.

Each builder lists every parameter tensor the matching ``transformers`` model class creates, with
its exact shape, so ``ModelSpec.params`` equals ``sum(p.numel() for p in model.parameters())``.
Weight names are module paths inside one block (``self_attn.q_proj``); the leaf is the module name
PEFT matches (``q_proj``), and a bias carries the same name as its matrix with ``bias=True``.
Defaults are those of the ``transformers`` config class; any default that shapes the weights is
recorded in ``ModelSpec.assumed`` so nothing is assumed silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.spec.model import LayerGroup, ModelSpec, Weight

_MISSING = object()
# Upper bounds of a model description: far above any real model, low enough that a typo or a
# runaway value (num_hidden_layers: 1e7, hidden_size: 2**40) is an error instead of a hang.
MAX_PARAMS = 10**15     # parameters (the largest published models: ~2e12)
MAX_LAYERS = 10_000     # blocks (the deepest trained transformers: DeepNet's 1,000)
MAX_HIDDEN = 2**20      # hidden size (the widest: ~25k)
MAX_VOCAB = 2**24       # vocabulary (the largest: ~262k)
MAX_CONFIG_INT = 2**31 - 1  # any other size in a config.json
_MAXIMA = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "n_layers": MAX_LAYERS,
           "hidden_size": MAX_HIDDEN, "n_embd": MAX_HIDDEN, "n_embed": MAX_HIDDEN, "d_model": MAX_HIDDEN,
           "vocab_size": MAX_VOCAB}


class Cfg:
    """Typed, validated reads from a config mapping; every error is one line naming the source."""

    def __init__(self, data: Mapping[str, Any], source: str, model_type: str):
        self.d, self.source, self.mt = data, source, model_type
        self.assumed: list[str] = []

    def raw(self, *keys: str, default: Any = None) -> Any:
        for k in keys:
            if self.d.get(k) is not None:
                return self.d[k]
        return default

    def require(self, *specs: str | tuple[str, ...]) -> None:
        missing = ["/".join(s) if isinstance(s, tuple) else s for s in specs
                   if self.raw(*((s,) if isinstance(s, str) else s)) is None]
        if missing:
            raise GpuplanError(f"{self.source}: missing required key(s) {', '.join(missing)} for "
                               f"model_type '{self.mt}': add them (see the model's config.json)")

    def int(self, *keys: str, default: Any = _MISSING, minimum: int = 1, note: bool = True) -> int:
        v = self.raw(*keys)
        if v is None:
            if default is _MISSING:
                self.require(keys)
            if note and default is not None:
                self.assumed.append(f"{keys[0]} not given: using the transformers default {default}")
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or int(v) != v:
            raise GpuplanError(f"{self.source}: {keys[0]} = {v!r} is not a whole number: give an integer")
        if v < minimum:
            raise GpuplanError(f"{self.source}: {keys[0]} = {v} must be at least {minimum}: fix the value")
        key = next(k for k in keys if self.d.get(k) is not None)
        limit = _MAXIMA.get(key, MAX_CONFIG_INT)
        if v > limit:
            raise GpuplanError(f"{self.source}: {key} = {v:,.0f} is more than the limit {limit:,} "
                               f"(far above any real model): fix the value")
        return int(v)

    def flag(self, *keys: str, default: bool) -> bool:
        v = self.raw(*keys)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise GpuplanError(f"{self.source}: {keys[0]} = {v!r} must be true or false")
        return v

    def head_dim(self, hidden: int, heads: int, default: int | None = None) -> int:
        if self.raw("head_dim") is not None:
            return self.int("head_dim")
        if default is not None:
            self.assumed.append(f"head_dim not given: using the transformers default {default}")
            return default
        if hidden % heads:
            raise GpuplanError(f"{self.source}: hidden size {hidden} is not divisible by {heads} attention "
                               f"heads: fix the sizes or give head_dim explicitly")
        return hidden // heads

    def kv_heads(self, heads: int, *keys: str) -> int:
        kv = self.int(*keys, default=heads, note=False)
        if heads % kv:
            raise GpuplanError(f"{self.source}: {heads} attention heads are not a multiple of {kv} "
                               f"key/value heads: fix {keys[0]}")
        return kv


# ---- weight helpers ----------------------------------------------------------------------------
def lin(name: str, out: int, inp: int, group: str, bias: bool = False, count: int = 1) -> list[Weight]:
    ws = [Weight(name=name, shape=(out, inp), group=group, count=count)]  # type: ignore[arg-type]
    if bias:
        ws.append(Weight(name=name, shape=(out,), group=group,  # type: ignore[arg-type]
                         count=count, bias=True))
    return ws


def nrm(name: str, size: int, bias: bool = False) -> list[Weight]:
    ws = [Weight(name=name, shape=(size,), group="norm")]
    if bias:
        ws.append(Weight(name=name, shape=(size,), group="norm", bias=True))
    return ws


def emb(name: str, rows: int, dim: int, group: str = "embedding") -> list[Weight]:
    return [Weight(name=name, shape=(rows, dim), group=group)]  # type: ignore[arg-type]


def gated(prefix: str, h: int, ffn: int, group: str, bias: bool = False, count: int = 1,
          names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> list[Weight]:
    g, u, d = names
    return (lin(f"{prefix}.{g}", ffn, h, group, bias, count)
            + lin(f"{prefix}.{u}", ffn, h, group, bias, count)
            + lin(f"{prefix}.{d}", h, ffn, group, bias, count))


def groups(layers: list[tuple[list[Weight], bool]]) -> tuple[LayerGroup, ...]:
    """Run-length encode consecutive identical blocks into LayerGroups (keeps layer order)."""
    out: list[LayerGroup] = []
    for ws, moe in layers:
        t = tuple(ws)
        if out and out[-1].weights == t and out[-1].moe == moe:
            out[-1] = LayerGroup(count=out[-1].count + 1, weights=t, moe=moe)
        else:
            out.append(LayerGroup(count=1, weights=t, moe=moe))
    return tuple(out)


def tie(c: Cfg, default: bool) -> bool:
    v = c.raw("tie_word_embeddings")
    if v is None:
        c.assumed.append(f"tie_word_embeddings not given: using the {c.mt} default {str(default).lower()}")
        return default
    return c.flag("tie_word_embeddings", default=default)


def spec(c: Cfg, name: str, **kw: Any) -> ModelSpec:
    kw.setdefault("v_head_dim", kw["head_dim"])
    experts, top_k = kw.get("n_experts", 0), kw.get("top_k", 0)
    if experts and top_k > experts:
        raise GpuplanError(f"{c.source}: num_experts_per_tok = {top_k} is more than the {experts} experts "
                           f"(a token is routed to at most all of them): give at most {experts}")
    return ModelSpec(name=name, model_type=c.mt, assumed=tuple(c.assumed), **kw)


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
    "gemma": dict(tie=True, qkv="attention_bias", o="attention_bias", hd=256),
    "gemma2": dict(tie=True, qkv="attention_bias", o="attention_bias", hd=256, norms=4),
    "gemma3_text": dict(tie=True, qkv="attention_bias", o="attention_bias", hd=256, norms=4, qk=True),
    "phi3": dict(tie=False, fused=True),
}


def _bias(c: Cfg, key: Any, default: bool = False) -> bool:
    return key if isinstance(key, bool) else (c.flag(key, default=default) if key else False)


def llama_like(c: Cfg, name: str) -> ModelSpec:
    f = _LLAMA_LIKE[c.mt]
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
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    if f.get("norms", 2) == 4:
        norms += nrm("pre_feedforward_layernorm", h) + nrm("post_feedforward_layernorm", h)
    if f.get("fused"):
        dense_mlp = lin("mlp.gate_up_proj", 2 * ffn, h, "mlp") + lin("mlp.down_proj", h, ffn, "mlp")
    else:
        dense_mlp = gated("mlp", h, ffn, "mlp", mlp_b)
    E = k = moe_ffn = shared = 0
    sparse = [False] * L
    if moe == "mixtral":
        E, moe_ffn = c.int("num_local_experts"), ffn
        k = c.int("num_experts_per_tok", default=2)
        sparse = [True] * L
        moe_mlp = (lin("block_sparse_moe.gate", E, h, "router")
                   + gated("block_sparse_moe.experts", h, moe_ffn, "expert", count=E,
                           names=("w1", "w3", "w2")))
    elif moe:
        E, moe_ffn = c.int("num_experts"), c.int("moe_intermediate_size")
        k = c.int("num_experts_per_tok")
        step = c.int("decoder_sparse_step", default=1, note=False)
        only = c.raw("mlp_only_layers", default=[])
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise GpuplanError(f"{c.source}: mlp_only_layers must be a list of layer indices")
        sparse = [i not in only and (i + 1) % step == 0 for i in range(L)]
        moe_mlp = lin("mlp.gate", E, h, "router") + gated("mlp.experts", h, moe_ffn, "expert", count=E)
        if moe == "qwen2_moe":
            shared = c.int("shared_expert_intermediate_size")
            moe_mlp += gated("mlp.shared_expert", h, shared, "shared_expert")
            moe_mlp += lin("mlp.shared_expert_gate", 1, h, "router")
    if not all(sparse) and ffn == 0:
        c.require("intermediate_size")
    layers = [(attn + norms + (moe_mlp if s else dense_mlp), s) for s in sparse]
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(sparse) else ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=shared)


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
           head_name: str = "lm_head", head_in: int | None = None) -> ModelSpec:
    head = final + ([] if tied else emb(head_name, V, head_in or h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=h // nh, ffn=ffn, vocab=V,
                max_positions=max_pos, gated_mlp=False, norm="layernorm", tied_embeddings=tied,
                embedding=tuple(embedding), layers=groups([(block, False)] * L), head=tuple(head))


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
                  final=nrm("ln_f", h, True))


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
                  block=block, final=nrm("ln_f", h, True))


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
                  embedding=embedding, block=block, final=final, head_in=pd)


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
                  embedding=emb("word_embeddings", V, h), block=block, final=nrm("ln_f", h, True))


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
                  final=nrm("norm_f", h, b))


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
                  head_name="embed_out")


BUILDERS: dict[str, Callable[[Cfg, str], ModelSpec]] = {
    **{mt: llama_like for mt in _LLAMA_LIKE},
    "deepseek_v2": deepseek, "deepseek_v3": deepseek,
    "gpt2": gpt2, "bloom": bloom, "opt": opt,
    "falcon": falcon, "RefinedWeb": falcon, "RefinedWebModel": falcon,
    "mpt": mpt, "gpt_neox": gpt_neox,
}
