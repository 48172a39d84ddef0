"""Decoders with hyper-connections (several residual streams mixed around each sublayer) among transformers 5.24's
newest: Qwen4-Exp (qwen4_exp_text, qwen4_exp), DeepSeek-V4 (deepseek_v4) and HY-V4 (hy_v4). Each builder lists every
parameter tensor the matching ``transformers`` 5.24 class creates (checked against it on the meta device:
tests/golden/test_hf_families_v4.py); what the time model has no representation for (the extra residual streams,
compressed or sparse attention) is mapped to the closest block it has and said in ``assumed``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import gdn_dims, scan_note
from gpuplan.catalog.families_mla import _mla
from gpuplan.catalog.families_vlm import text_config
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["deepseek_v4", "hy_v4", "qwen4_exp", "qwen4_exp_text"]


# ---- Qwen4-Exp ---------------------------------------------------------------------------------------
_QSA_KEYS = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")


def _primes_from(start: int, n: int) -> list[int]:
    """The first ``n`` primes at or above ``start`` (Qwen4ExpTextNGramEmbedding's hashed n-gram head sizes)."""
    out: list[int] = []
    p = start
    while len(out) < n:
        if p >= 2 and (p == 2 or p % 2) and all(p % q for q in range(3, math.isqrt(p) + 1, 2)):
            out.append(p)
        p += 1
    return out


def _hyper(at: str, h: int, hc: int, rank: int, combine: bool = True) -> list[Weight]:
    """Qwen4ExpTextGatedResidual: a grouped RMSNorm over the hc residual streams, a low-rank input mixer and (in
    the blocks) the inject weights; small replicated matrices (timed as a router's)."""
    return (nrm(f"{at}.hc_norm", hc * h) + lin(f"{at}.input_mix_weight_down", rank, hc * h, "router")
            + lin(f"{at}.input_mix_weight_up", hc * h, rank, "router")
            + (lin(f"{at}.block_inject_weight", hc, hc * h, "router") if combine else []))


def _qwen4_types(c: Cfg, L: int) -> list[str]:
    """Qwen4ExpTextConfig.layer_types (full_attention read as indexed_attention), else QSA attention on each
    full_attention_interval-th layer."""
    types = c.raw("layer_types")
    if types is None:
        every = c.int("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % every else "indexed_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or \
            any(t not in ("linear_attention", "indexed_attention", "full_attention") for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list linear_attention or indexed_attention for each of the "
                           f"{L} layers: fix the list")
    types = ["linear_attention" if t == "linear_attention" else "indexed_attention" for t in types]
    if "indexed_attention" in types and any(c.raw(key) is None for key in _QSA_KEYS):
        raise GpuplanError(f"{c.source}: qwen4_exp_text attention layers need the QSA indexer keys "
                           f"({', '.join(_QSA_KEYS)}; transformers builds no model without them): add them from the "
                           "model's config.json")
    return types


def _qwen4_mixers(c: Cfg, h: int, nh: int, nkv: int, hd: int, d: SsmDims) -> dict[str, tuple[list[Weight], str]]:
    """Qwen4ExpTextAttention (q_proj twice wide: the output gate; q/k norms; the QSA indexer's joint q/k projection
    and norms) and Qwen4ExpTextGatedDeltaNet (Qwen3.5's)."""
    ab = c.flag("attention_bias", default=False)
    attention = (lin("self_attn.q_proj", 2 * nh * hd, h, "attention", ab)
                 + lin("self_attn.k_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.v_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
                 + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd))
    if all(c.raw(key) is not None for key in _QSA_KEYS):
        ih, ikv, idim = (c.int(key) for key in _QSA_KEYS[:3])
        attention += (lin("self_attn.indexer.index_qk_proj", (ih + ikv) * idim, h, "attention")
                      + nrm("self_attn.indexer.q_layernorm", idim) + nrm("self_attn.indexer.k_layernorm", idim))
    conv = 2 * d.groups * d.state + d.inner
    linear = (lin("linear_attn.in_proj_qkv", conv, h, "attention")
              + lin("linear_attn.in_proj_z", d.inner, h, "attention")
              + lin("linear_attn.in_proj_b", d.heads, h, "attention")
              + lin("linear_attn.in_proj_a", d.heads, h, "attention")
              + [Weight(name="linear_attn.conv1d", shape=(conv, 1, d.conv_kernel), group="attention")]
              + [Weight(name=f"linear_attn.{p}", shape=(d.heads,), group="attention", bias=True)
                 for p in ("dt_bias", "A_log")]
              + nrm("linear_attn.norm", d.head_dim) + lin("linear_attn.out_proj", h, d.inner, "attention"))
    return {"linear_attention": (linear, "gdn"), "indexed_attention": (attention, "attention")}


def _qwen4_ple(c: Cfg, h: int, hc: int, types: list[str]) -> dict[int, list[Weight]]:
    """Qwen4ExpTextPLELayer on each of ple_layer_ids (one-indexed, linear blocks): the hashed n-gram table (its
    rows: the heads' consecutive primes from ngram_vocab_size_base, padded), key/value projections, three grouped
    norms and a dilated depthwise convolution over the hc streams."""
    L = len(types)
    ids = c.raw("ple_layer_ids", default=[])
    if not isinstance(ids, list) or any(not isinstance(i, int) or not 1 <= i <= L or
                                        types[i - 1] != "linear_attention" for i in ids):
        raise GpuplanError(f"{c.source}: ple_layer_ids must list one-indexed linear_attention layers (1..{L})")
    ids = sorted(set(ids))
    if not ids:
        return {}
    heads = (c.int("ngram_size", default=3) - 1) * c.int("heads_per_ngram", default=8)
    dim = c.int("ple_embed_dim", default=h)
    if heads < 1 or dim % heads:
        raise GpuplanError(f"{c.source}: ple_embed_dim = {dim} is not a multiple of the {heads} n-gram heads")
    div = c.int("make_ngram_vocab_size_divisible_by", default=128)
    primes = _primes_from(c.int("ngram_vocab_size_base", default=20_000_000), heads * len(ids))
    kernel = c.int("ple_conv_kernel_size", default=4)
    ple = {}
    for j, i in enumerate(ids):
        rows = -(-sum(primes[j * heads:(j + 1) * heads]) // div) * div
        ple[i - 1] = (emb("ple.ple_embedding.ngram_embedding", rows, dim // heads)
                      + lin("ple.key_proj", hc * h, dim, "mlp") + lin("ple.value_proj", h, dim, "mlp")
                      + nrm("ple.norm_key", hc * h) + nrm("ple.norm_query", hc * h) + nrm("ple.norm_conv", hc * h)
                      + [Weight(name="ple.conv1d", shape=(hc * h, 1, kernel), group="mlp")])
    c.assumed.append(f"{c.mt}: the hashed n-gram per-layer embeddings on layers {ids} are held in their blocks; their "
                     "lookups and dilated convolutions are not timed (their key/value projections are)")
    return ple


def qwen4_exp_text(c: Cfg, name: str) -> ModelSpec:
    """Qwen4ExpForCausalLM (Qwen4-Exp's language model): Qwen3.5's gated delta-rule blocks with QSA attention
    (output-gated, q/k-normed, with a token indexer) in each full_attention_interval-th; every block a routed MoE
    with a gated shared expert; hyper-connections (hc_count residual streams mixed through a low-rank mixer before
    each mixer and MLP, and once more before the head; no final norm); on ple_layer_ids (linear blocks) a hashed
    n-gram per-layer embedding with its key/value projections, norms and a dilated depthwise convolution."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2048), ("num_hidden_layers", 40),
                                                       ("num_attention_heads", 16), ("vocab_size", 248320)))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=2)
    hd = c.int("head_dim", default=256)
    d = gdn_dims(c)
    E, k = c.int("num_experts", default=512), c.int("num_experts_per_tok", default=10)
    moe_ffn, shared = c.int("moe_intermediate_size", default=512), c.int("shared_expert_intermediate_size", default=512)
    hc, rank = c.int("hc_count", default=4, minimum=2), c.int("hc_lowrank", default=320)
    types = _qwen4_types(c, L)
    mixers = _qwen4_mixers(c, h, nh, nkv, hd, d)
    mlp = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * moe_ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, moe_ffn), group="expert", count=E)]
           + gated("mlp.shared_expert", h, shared, "shared_expert") + lin("mlp.shared_expert_gate", 1, h, "router"))
    hyper = _hyper("attn_hyper_connection", h, hc, rank) + _hyper("mlp_hyper_connection", h, hc, rank)
    ple = _qwen4_ple(c, h, hc, types)
    layers = [(mixers[t][0] + mlp + hyper + ple.get(i, []), True) for i, t in enumerate(types)]
    tied = tie(c, False)
    rope = c.raw("rope_parameters", default={})
    rotary = rope.get("partial_rotary_factor", 1.0) if isinstance(rope, Mapping) else 1.0
    c.assumed.append(f"{c.mt}: QSA attention (its indexer picks indexer_budget keys from compressed blocks) is costed "
                     f"as full causal attention; the attention output's sigmoid gate (q_proj's second half) with q; "
                     f"the {hc} hyper-connection residual streams' activations are not added (their mixers' weights "
                     "and matmuls are)")
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=32768), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(mixers[t][1], True) for t in types]),
                head=tuple(_hyper("hyper_connection_mixer", h, hc, rank, combine=False)
                           + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=shared, rotary_percent=float(rotary), ssm=d)


def qwen4_exp(c: Cfg, name: str) -> ModelSpec:
    """qwen4_exp: transformers' AutoModelForCausalLM builds Qwen4ExpForCausalLM from its text_config (the Qwen4-Exp
    decoder, qwen4_exp_text); the vision tower is not part of that model and not counted (noted)."""
    top = c.raw("tie_word_embeddings")
    t = text_config(c, "qwen4_exp_text", {}, overrides={"tie_word_embeddings": top} if top is not None else None)
    t.assumed.append("model_type qwen4_exp: its text_config's decoder (what AutoModelForCausalLM builds); the vision "
                     "tower is not counted")
    return dataclasses.replace(qwen4_exp_text(t, name), model_type="qwen4_exp")


# ---- DeepSeek-V4 -------------------------------------------------------------------------------------
_DSV4_TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
_DSV4_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def _dsv4_types(c: Cfg, L: int) -> tuple[list[str], list[bool]]:
    """DeepseekV4Config's layer_types (or the legacy compress_ratios; else two heavily compressed layers, then
    compressed-sparse and heavily compressed alternating) and which MoE layers route by token hash
    (mlp_layer_types; else the first num_hash_layers, 3 by default)."""
    types = c.raw("layer_types")
    ratios = c.raw("compress_ratios")
    if types is None and ratios is not None:
        if not isinstance(ratios, list) or any(r not in _DSV4_RATIO for r in ratios):
            raise GpuplanError(f"{c.source}: compress_ratios must list 0, 4 or 128 per layer: fix the list")
        types = [_DSV4_RATIO[r] for r in ratios]
    if types is None:
        types = ["heavily_compressed_attention"] * min(L, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(L - 2, 0))]
    if not isinstance(types, list) or len(types) < L or any(t not in _DSV4_TYPES for t in types):
        raise GpuplanError(f"{c.source}: layer_types must list one of {', '.join(_DSV4_TYPES)} for each of the {L} "
                           "layers: fix the list")
    mlp = c.raw("mlp_layer_types")
    if mlp is None:
        n_hash = c.int("num_hash_layers", default=3, minimum=0, note=False)
        mlp = ["hash_moe"] * min(L, n_hash) + ["moe"] * max(0, L - n_hash)
    if not isinstance(mlp, list) or len(mlp) < L or any(t not in ("hash_moe", "moe") for t in mlp):
        raise GpuplanError(f"{c.source}: mlp_layer_types must list hash_moe or moe for each of the {L} layers")
    return list(types[:L]), [t == "hash_moe" for t in mlp[:L]]


def _vec(name: str, size: int, group: str = "attention") -> list[Weight]:
    return [Weight(name=name, shape=(size,), group=group, bias=True)]  # type: ignore[arg-type]


def _dsv4_attention(c: Cfg, h: int, nh: int, hd: int, q_rank: int) -> tuple[list[Weight], dict[str, list[Weight]]]:
    """DeepseekV4Attention's own weights (low-rank q, the one shared key/value head, the grouped low-rank output
    projection, sinks) and, per layer type, its compressor's (heavily compressed: key/value and gate projections, a
    position bias per slot of the compress rate; compressed sparse: twice as wide, with the Lightning indexer's own
    compressor, query projection and per-head scorer)."""
    g, o_rank = c.int("o_groups", default=8), c.int("o_lora_rank", default=1024)
    if (nh * hd) % g:
        raise GpuplanError(f"{c.source}: num_attention_heads x head_dim = {nh * hd} is not a multiple of o_groups = "
                           f"{g}: fix the sizes")
    ih, idim = c.int("index_n_heads", default=64), c.int("index_head_dim", default=128)
    rates = c.raw("compress_rates", default={})
    if not isinstance(rates, Mapping):
        raise GpuplanError(f"{c.source}: compress_rates must map the compressed attention types to their rates")
    csa = int(rates.get("compressed_sparse_attention", c.raw("compress_rate_csa", default=4)))
    hca = int(rates.get("heavily_compressed_attention", c.raw("compress_rate_hca", default=128)))
    attn = (lin("self_attn.q_a_proj", q_rank, h, "attention") + nrm("self_attn.q_a_norm", q_rank)
            + lin("self_attn.q_b_proj", nh * hd, q_rank, "attention") + lin("self_attn.kv_proj", hd, h, "attention")
            + nrm("self_attn.kv_norm", hd) + lin("self_attn.o_a_proj", g * o_rank, nh * hd // g, "attention")
            + lin("self_attn.o_b_proj", h, g * o_rank, "attention") + _vec("self_attn.sinks", nh))
    at = "self_attn.compressor."
    compressor = {
        "sliding_attention": [],
        "heavily_compressed_attention": (lin(f"{at}kv_proj", hd, h, "attention") + lin(f"{at}gate_proj", hd, h,
                                         "attention") + _vec(f"{at}position_bias", hca * hd) + nrm(f"{at}kv_norm", hd)),
        "compressed_sparse_attention": (
            lin(f"{at}kv_proj", 2 * hd, h, "attention") + lin(f"{at}gate_proj", 2 * hd, h, "attention")
            + _vec(f"{at}position_bias", csa * 2 * hd) + nrm(f"{at}kv_norm", hd)
            + lin(f"{at}indexer.kv_proj", 2 * idim, h, "attention")
            + lin(f"{at}indexer.gate_proj", 2 * idim, h, "attention")
            + _vec(f"{at}indexer.position_bias", csa * 2 * idim) + nrm(f"{at}indexer.kv_norm", idim)
            + lin(f"{at}indexer.q_b_proj", ih * idim, q_rank, "attention")
            + lin(f"{at}indexer.scorer.weights_proj", ih, h, "router")),
    }
    return attn, compressor


def deepseek_v4(c: Cfg, name: str) -> ModelSpec:
    """DeepseekV4ForCausalLM (DeepSeek-V4): shared-KV multi-query attention (one 512-wide head read as key and value,
    a low-rank q with its norm, a grouped low-rank output projection, per-head sinks) over a sliding window, with
    a compressor of the keys every compress rate tokens (heavily compressed: 128; compressed sparse: 4, with a
    Lightning indexer picking index_topk entries); every block a routed MoE (the first num_hash_layers routed by
    token hash) with one shared expert; manifold-constrained hyper-connections (hc_mult streams) around the mixer
    and the MoE and before the head."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 4096), ("num_hidden_layers", 43),
                                                       ("num_attention_heads", 64), ("vocab_size", 129280)))
    hd, q_rank = c.int("head_dim", default=512), c.int("q_lora_rank", default=1024)
    E, k = c.int("n_routed_experts", "num_local_experts", default=256), c.int("num_experts_per_tok", default=6)
    ffn = c.int("moe_intermediate_size", "intermediate_size", default=2048)
    N = c.int("hc_mult", default=4)
    types, _hash = _dsv4_types(c, L)
    mb = c.flag("mlp_bias", default=False)
    attn, compressor = _dsv4_attention(c, h, nh, hd, q_rank)
    moe = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, ffn), group="expert", count=E)]
           + gated("mlp.shared_experts", h, ffn, "shared_expert", mb))
    hc = []
    for p in ("attn_hc", "ffn_hc"):
        hc += (lin(f"{p}.fn", (2 + N) * N, N * h, "router") + _vec(f"{p}.base", (2 + N) * N, "router")
               + _vec(f"{p}.scale", 3, "router"))
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    layers = [(attn + compressor[t] + moe + hc + norms, True) for t in types]
    tied = tie(c, False)
    head = (nrm("norm", h) + lin("hc_head.hc_fn", N, N * h, "router") + _vec("hc_head.hc_base", N, "router")
            + _vec("hc_head.hc_scale", 1, "router") + ([] if tied else emb("lm_head", V, h, "head")))
    w = c.int("sliding_window", default=128)
    c.assumed.append(f"{c.mt}: every layer's attention is costed over its {w}-token sliding window with one shared "
                     "key/value head; the compressed keys it also attends (every 128th token's compression, or the "
                     "indexer's top index_topk of every 4th's) are not (their compressor and indexer matmuls are); "
                     "attention is split over tensor-parallel ranks as usual, where transformers keeps it replicated; "
                     f"the first {sum(_hash)} layers route by token hash, costed as learned routing; the "
                     f"{N} hyper-connection streams' activations are not added; the multi-token-prediction layers "
                     "are not counted")
    rotary = c.number("partial_rotary_factor", default=None)
    if rotary is None and c.raw("qk_rope_head_dim") is not None:
        rotary = c.int("qk_rope_head_dim") / hd
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=1, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=1048576), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=ffn, shared_ffn=ffn,
                rotary_percent=rotary if rotary is not None else 64 / 512, sliding_window=w,
                window_layers=(True,) * L)


# ---- HY-V4 (Tencent Hy4) -----------------------------------------------------------------------------
def hy_v4(c: Cfg, name: str) -> ModelSpec:
    """HYV4ForCausalLM (Tencent Hy4): DeepSeek-V3's MLA with an output gate (one value-head-wide gate per head) and
    per-head sinks, DeepSeek Sparse Attention's indexer on the "full" indexer_types layers (the "shared" ones reuse the
    last one's selection), a dense SwiGLU on the "dense" mlp_layer_types layers (the first by default) and a routed +
    shared-expert MoE on the others, independent hyper-connections (hc_mult streams) around the mixer and the MLP
    and before the head."""
    h, L, nh, V = (c.int(k, default=v) for k, v in (("hidden_size", 2816), ("num_hidden_layers", 34),
                                                       ("num_attention_heads", 32), ("vocab_size", 120832)))
    ffn, moe_ffn = c.int("intermediate_size", default=6912), c.int("moe_intermediate_size", default=768)
    qr, kvr = c.int("q_lora_rank", default=1536), c.int("kv_lora_rank", default=512)
    nope, rope, vd = (c.int("qk_nope_head_dim", default=192), c.int("qk_rope_head_dim", default=64),
                      c.int("v_head_dim", default=256))
    E, k = c.int("n_routed_experts", default=256), c.int("num_experts_per_tok", default=8)
    shared = c.int("n_shared_experts", default=1, minimum=0) * moe_ffn
    N = c.int("hc_mult", default=4)
    ih, idim = c.int("index_n_heads", default=16), c.int("index_head_dim", default=128)
    mlp_types = c.raw("mlp_layer_types")
    if mlp_types is None:
        mlp_types = ["dense"] * min(1, L) + ["sparse"] * max(L - 1, 0)
    idx_types = c.raw("indexer_types")
    if idx_types is None:
        idx_types = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(L)]
    for key, v, allowed in (("mlp_layer_types", mlp_types, ("dense", "sparse")),
                            ("indexer_types", idx_types, ("full", "shared"))):
        if not isinstance(v, list) or len(v) != L or any(t not in allowed for t in v):
            raise GpuplanError(f"{c.source}: {key} must list {' or '.join(allowed)} for each of the {L} layers")
    attn = (_mla(c, h, nh, nope, rope, vd, qr, kvr) + lin("self_attn.gate_proj", nh * vd, h, "attention")
            + _vec("self_attn.sinks", nh))
    indexer = (lin("self_attn.indexer.wq_b", ih * idim, qr, "attention")
               + lin("self_attn.indexer.wk", idim, h, "attention")
               + nrm("self_attn.indexer.k_norm", idim, bias=True)
               + lin("self_attn.indexer.weights_proj", ih, h, "attention"))
    moe = (lin("mlp.gate", E, h, "router")
           + [Weight(name="mlp.experts.gate_up_proj", shape=(2 * moe_ffn, h), group="expert", count=E),
              Weight(name="mlp.experts.down_proj", shape=(h, moe_ffn), group="expert", count=E)]
           + (gated("mlp.shared_experts", h, shared, "shared_expert") if shared else []))
    dense = gated("mlp", h, ffn, "mlp")
    hc = []
    for p in ("attn_hc", "ffn_hc"):
        hc += lin(f"{p}.fn", 2 * N, N * h, "router") + _vec(f"{p}.base", 2 * N, "router") + _vec(f"{p}.scale", 2,
                                                                                                  "router")
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    layers = [(attn + (indexer if it == "full" else []) + (moe if mt == "sparse" else dense) + hc + norms,
               mt == "sparse") for mt, it in zip(mlp_types, idx_types, strict=True)]
    tied = tie(c, False)
    head = (nrm("norm", h) + lin("hc_head.hc_fn", N, N * h, "router") + _vec("hc_head.hc_base", N, "router")
            + _vec("hc_head.hc_scale", 1, "router") + ([] if tied else emb("lm_head", V, h, "head")))
    c.assumed.append(f"{c.mt}: attention timed as dense MLA over the whole sequence (DeepSeek Sparse Attention's "
                     f"top-{c.int('index_topk', default=2048):,} keys per query and its indexer's scores are not "
                     f"modelled; the output gate costed with the projections); the {N} hyper-connection streams' "
                     "activations are not added")
    sparse = [mt == "sparse" for mt in mlp_types]
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=0 if all(sparse) else ffn, vocab=V, max_positions=c.int("max_position_embeddings", default=262144),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=tuple(head), n_experts=E if any(sparse) else 0,
                top_k=k if any(sparse) else 0, moe_ffn=moe_ffn if any(sparse) else 0,
                shared_ffn=shared if any(sparse) else 0, q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=rope)
