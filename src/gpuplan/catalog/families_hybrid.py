"""Hybrid decoders whose blocks are not all softmax attention: Nemotron-H (Mamba-2, attention, MLP and MoE
blocks in the order of its layer pattern), Qwen3-Next and Qwen3.5 (gated delta-rule linear attention in three of
each four blocks, gated softmax attention in the fourth), Granite 4.0 H and Bamba (Mamba-2 or attention, then an
MLP or MoE) and OLMo Hybrid (gated delta rule and OLMo 2 attention blocks). Each lists
every parameter tensor the matching ``transformers`` 5.24 class creates (checked against it on the meta device:
tests/golden/test_hf_families_hybrid.py); defaults are those of the config class, recorded in ``assumed``
where they shape the weights. The blocks' mixers are costed in model/ssm.py."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_moe import llama_moe
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "olmo_hybrid", "qwen3_next"]

# NemotronHConfig: the pattern's letters (hybrid_override_pattern) and the layer types they stand for
_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def vector(name: str, size: int) -> list[Weight]:
    """A per-channel parameter of a recurrent mixer (split with its heads under tensor parallelism)."""
    return [Weight(name=name, shape=(size,), group="attention", bias=True)]


def mamba2_mixer(c: Cfg, h: int, d: SsmDims, bias: bool, at: str = "mixer.", gated_norm: bool = True,
            out_bias: bool | None = None) -> list[Weight]:
    """NemotronHMamba2Mixer (GraniteMoeHybridMambaLayer, BambaMixer, FalconH1Mixer the same): in_proj to z, x, B, C
    and dt; a depthwise causal conv1d over x, B, C; dt_bias, A_log, D per head; the gated RMSNorm over the inner
    width (Falcon-H1: only with mamba_rms_norm); out_proj."""
    conv = d.inner + 2 * d.groups * d.state
    ws = lin(f"{at}in_proj", d.inner + conv + d.heads, h, "attention", bias)
    ws.append(Weight(name=f"{at}conv1d", shape=(conv, 1, d.conv_kernel), group="attention"))
    if c.flag("use_conv_bias", "mamba_conv_bias", default=True):
        ws += vector(f"{at}conv1d.bias", conv)
    ws += vector(f"{at}dt_bias", d.heads) + vector(f"{at}A_log", d.heads) + vector(f"{at}D", d.heads)
    if gated_norm:
        ws += vector(f"{at}norm", d.inner)
    return ws + lin(f"{at}out_proj", h, d.inner, "attention", bias if out_bias is None else out_bias)


# transformers' configuration_utils._LEGACY_LAYER_TYPE_REMAP: the names released configs use for the new ones
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}


def listed_types(c: Cfg, allowed: tuple[str, ...], n: int | None = None) -> list[str] | None:
    """The config's per-layer block types (layers_block_type / layer_types, legacy names read as transformers
    remaps them), None when it gives none."""
    key = next((k for k in ("layers_block_type", "layer_types") if c.raw(k) is not None), None)
    if key is None:
        return None
    types = c.raw(key)
    if isinstance(types, list):
        types = [_LEGACY.get(t, t) if isinstance(t, str) else t for t in types]
    if not isinstance(types, list) or not types or any(t not in allowed for t in types) or \
            (n is not None and len(types) != n):
        count = f" for each of the {n} layers" if n is not None else " per layer"
        raise GpuplanError(f"{c.source}: {key} must list one of {', '.join(allowed)}{count}: fix the list")
    return types


def _layer_types(c: Cfg) -> list[str]:
    types = listed_types(c, tuple(_PATTERN.values()))
    if types is None:
        pattern = c.raw("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or any(ch not in _PATTERN for ch in pattern):
            raise GpuplanError(f"{c.source}: nemotron_h needs hybrid_override_pattern (a string of M, *, - and E, "
                               f"one letter per layer) or layers_block_type: add it from the model's config.json")
        return [_PATTERN[ch] for ch in pattern]
    return types


def _nemotron_moe(c: Cfg, h: int) -> tuple[list[Weight], dict[str, int]]:
    """NemotronHMoE: non-gated (up, down) experts, optionally behind a latent projection, a top-k router (its
    score-correction bias a buffer) and a shared expert MLP."""
    E, k = c.int("n_routed_experts", default=8), c.int("num_experts_per_tok", default=2)
    ffn = c.int("moe_intermediate_size", default=7688)
    shared = c.int("moe_shared_expert_intermediate_size", default=7688)
    latent = c.int("moe_latent_size", default=None, note=False)
    width = latent or h
    mb = c.flag("mlp_bias", default=False)
    ws = (lin("mixer.experts.up_proj", ffn, width, "expert", count=E)
          + lin("mixer.experts.down_proj", width, ffn, "expert", count=E)
          + lin("mixer.gate", E, h, "router")
          + lin("mixer.shared_experts.up_proj", shared, h, "shared_expert", mb)
          + lin("mixer.shared_experts.down_proj", h, shared, "shared_expert", mb))
    if latent:
        ws += (lin("mixer.fc1_latent_proj", latent, h, "shared_expert", mb)
               + lin("mixer.fc2_latent_proj", h, latent, "shared_expert", mb))
    return ws, {"n_experts": E, "top_k": k, "moe_ffn": ffn, "shared_ffn": shared}


def nemotron_h(c: Cfg, name: str) -> ModelSpec:
    """NemotronHForCausalLM: each block one pre-RMSNorm and one mixer — Mamba-2 (M), attention without
    positional encoding (*), a squared-ReLU MLP (-) or a MoE (E) — as hybrid_override_pattern orders them."""
    c.require("hidden_size", "vocab_size")
    h, V = c.int("hidden_size"), c.int("vocab_size")
    types = _layer_types(c)
    nh = c.int("num_attention_heads", default=32)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    hd = c.int("head_dim", "attention_head_dim", default=128)
    ffn = c.int("intermediate_size", default=21504)
    d = SsmDims(heads=c.int("mamba_num_heads", default=128), head_dim=c.int("mamba_head_dim", default=64),
                groups=c.int("n_groups", "mamba_n_groups", default=8), state=c.int("ssm_state_size", default=128),
                conv_kernel=c.int("conv_kernel", "mamba_d_conv", default=4),
                chunk=c.int("chunk_size", "mamba_chunk_size", default=128))
    if d.heads % d.groups:
        raise GpuplanError(f"{c.source}: mamba_num_heads = {d.heads} is not a multiple of n_groups = {d.groups}: "
                           f"fix the sizes")
    norm = nrm("norm", h)
    mb = c.flag("mlp_bias", default=False)
    moe_ws, moe = _nemotron_moe(c, h) if "moe" in types else ([], {})
    blocks = {
        "linear_attention": (norm + mamba2_mixer(c, h, d, c.flag("use_bias", default=False)), False, ("mamba2", False)),
        "full_attention": (norm + lin("mixer.q_proj", nh * hd, h, "attention") + lin("mixer.k_proj", nkv * hd, h,
                           "attention") + lin("mixer.v_proj", nkv * hd, h, "attention")
                           + lin("mixer.o_proj", h, nh * hd, "attention"), False, ("attention", False)),
        "mlp": (norm + lin("mixer.up_proj", ffn, h, "mlp", mb) + lin("mixer.down_proj", h, ffn, "mlp", mb), False,
                ("none", True)),
        "moe": (norm + moe_ws, True, ("none", True)),
    }
    if c.flag("tie_word_embeddings", default=False):  # NemotronHForCausalLM._tied_weights_keys is empty
        c.assumed.append("tie_word_embeddings true: transformers' NemotronH keeps its own lm_head (counted)")
    tied = False
    head = tuple(nrm("norm_f", h) + emb("lm_head", V, h, "head"))
    layers = groups([blocks[t][:2] for t in types], [blocks[t][2] for t in types])  # type: ignore[misc]
    scan_note(c)
    if c.int("num_nextn_predict_layers", default=0, minimum=0, note=False):
        c.assumed.append("the multi-token-prediction layers are not counted (num_nextn_predict_layers)")
    return spec(c, name, n_layers=len(types), hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096), gated_mlp=False, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embeddings", V, h)), layers=layers, head=head,
                activation=str(c.raw("mlp_hidden_act", default="relu2")), position="none", ssm=d, **moe)


def _gated_delta(h: int, d: SsmDims, split: bool, olmo: bool = False) -> list[Weight]:
    """Qwen3NextGatedDeltaNet: in_proj_qkvz and in_proj_ba (Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b,
    in_proj_a; OLMo Hybrid: q, k, v, g, a, b and o projections — the same sizes), a depthwise causal conv1d over
    q, k, v (no bias), dt_bias and A_log per value head, the gated RMSNorm over one value head's width (shared by
    the heads), out_proj."""
    key = d.groups * d.state
    conv = 2 * key + d.inner
    if olmo:
        at = "linear_attn."
        return (lin(f"{at}q_proj", key, h, "attention") + lin(f"{at}k_proj", key, h, "attention")
                + lin(f"{at}v_proj", d.inner, h, "attention") + lin(f"{at}a_proj", d.heads, h, "attention")
                + lin(f"{at}b_proj", d.heads, h, "attention") + lin(f"{at}g_proj", d.inner, h, "attention")
                + lin(f"{at}o_proj", h, d.inner, "attention")
                + [Weight(name=f"{at}conv1d", shape=(conv, 1, d.conv_kernel), group="attention")]
                + vector(f"{at}A_log", d.heads) + vector(f"{at}dt_bias", d.heads) + nrm(f"{at}o_norm", d.head_dim))
    if split:
        proj = (lin("linear_attn.in_proj_qkv", 2 * key + d.inner, h, "attention")
                + lin("linear_attn.in_proj_z", d.inner, h, "attention")
                + lin("linear_attn.in_proj_b", d.heads, h, "attention")
                + lin("linear_attn.in_proj_a", d.heads, h, "attention"))
    else:
        proj = (lin("linear_attn.in_proj_qkvz", 2 * key + 2 * d.inner, h, "attention")
                + lin("linear_attn.in_proj_ba", 2 * d.heads, h, "attention"))
    return (proj + [Weight(name="linear_attn.conv1d", shape=(conv, 1, d.conv_kernel), group="attention")]
            + vector("linear_attn.dt_bias", d.heads) + vector("linear_attn.A_log", d.heads)
            + nrm("linear_attn.norm", d.head_dim) + lin("linear_attn.out_proj", h, d.inner, "attention"))


def _gdn_types(c: Cfg, L: int) -> list[str]:
    types = listed_types(c, ("linear_attention", "full_attention"), L)
    if types is None:
        every = c.int("full_attention_interval", default=4)
        return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(L)]
    return types


# the config classes' defaults (transformers 5.24): key/value heads, head size, dense MLP width, MoE or not
_GDN = {"qwen3_next": (2, 256, 5632, True), "qwen3_5_text": (4, 256, 12288, False),
        "qwen3_5_moe_text": (2, 256, 0, True)}



def gdn_dims(c: Cfg) -> SsmDims:
    """The gated delta rule's shapes as Qwen3-Next-style configs give them (``linear_*`` keys; 64-token chunks)."""
    d = SsmDims(heads=c.int("linear_num_value_heads", default=32), head_dim=c.int("linear_value_head_dim", default=128),
                groups=c.int("linear_num_key_heads", default=16), state=c.int("linear_key_head_dim", default=128),
                conv_kernel=c.int("linear_conv_kernel_dim", default=4), chunk=64)
    if d.heads % d.groups:
        raise GpuplanError(f"{c.source}: linear_num_value_heads = {d.heads} is not a multiple of "
                           f"linear_num_key_heads = {d.groups}: fix the sizes")
    return d

def qwen3_next(c: Cfg, name: str) -> ModelSpec:
    """Qwen3NextForCausalLM and Qwen3.5's text models (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM): gated
    delta-rule blocks with full (output-gated, q/k-normed, partially rotary) attention in every
    full_attention_interval-th (or as layer_types lists them); each block's MLP a Qwen2-MoE-style routed + gated
    shared-expert MoE (a dense SwiGLU on mlp_only_layers) or, Qwen3.5 dense, a SwiGLU."""
    nkv_default, hd_default, ffn_default, moe = _GDN[c.mt]
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    h, L, nh, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"), c.int("vocab_size")
    nkv = c.kv_heads(nh, "num_key_value_heads", default=nkv_default)
    hd = c.head_dim(h, nh, default=hd_default)
    d = gdn_dims(c)
    ab = c.flag("attention_bias", default=False)
    attention = (lin("self_attn.q_proj", 2 * nh * hd, h, "attention", ab) + lin("self_attn.k_proj", nkv * hd, h,
                 "attention", ab) + lin("self_attn.v_proj", nkv * hd, h, "attention", ab)
                 + lin("self_attn.o_proj", h, nh * hd, "attention", ab)
                 + nrm("self_attn.q_norm", hd) + nrm("self_attn.k_norm", hd))
    mixers = {"full_attention": (attention, "attention"),
              "linear_attention": (_gated_delta(h, d, c.mt != "qwen3_next"), "gdn")}
    ffn = c.int("intermediate_size", default=ffn_default, minimum=0 if moe else 1) if ffn_default or not moe else 0
    if moe:
        c.require("num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok")
    m = llama_moe(c, "qwen2_moe" if moe else None, h, L, ffn)
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    types = _gdn_types(c, L)
    layers = [(mixers[t][0] + norms + (m.mlp if sparse else gated("mlp", h, ffn, "mlp")), sparse)
              for t, sparse in zip(types, m.sparse, strict=True)]
    tied = tie(c, False)
    c.assumed.append(f"{c.mt}: the attention output's sigmoid gate (q_proj's second half) is costed with q; the "
                     "multi-token-prediction layer is not counted")
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                ffn=0 if all(m.sparse) else ffn, vocab=V, max_positions=c.int("max_position_embeddings", default=32768),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(mixers[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=m.experts, top_k=m.top_k, moe_ffn=m.ffn, shared_ffn=m.shared, rotary_percent=0.25, ssm=d)


def scan_note(c: Cfg) -> None:
    c.assumed.append("the recurrent layers' chunked scans (Mamba-2 SSD / gated delta rule) are timed at TileLang's "
                     "published Mamba-2 chunk-scan rate or their memory traffic (model/ssm.py): no measured kernel "
                     "rate backs the kernels these stacks run, so the throughput interval is widened for them")


def _mamba_dims(c: Cfg, h: int, inner: int | None = None) -> SsmDims:
    """Mamba-2 sizes in the mamba_* keys of Granite 4.0 H, Bamba and Falcon-H1 (their config classes' defaults):
    the inner width mamba_expand x hidden_size unless given, mamba_d_head "auto" that width / mamba_n_heads."""
    inner = inner or c.int("mamba_expand", default=2) * h
    heads = c.int("mamba_n_heads", default=128)
    head_dim = inner // heads if c.raw("mamba_d_head", default="auto") == "auto" else c.int("mamba_d_head")
    if heads * head_dim != inner:
        raise GpuplanError(f"{c.source}: mamba_n_heads x mamba_d_head = {heads} x {head_dim} is not mamba_expand x "
                           f"hidden_size = {inner}: fix the sizes")
    return SsmDims(heads=heads, head_dim=head_dim, groups=c.int("mamba_n_groups", default=1),
                   state=c.int("mamba_d_state", default=256), conv_kernel=c.int("mamba_d_conv", default=4),
                   chunk=c.int("mamba_chunk_size", default=256))


def bamba(c: Cfg, name: str) -> ModelSpec:
    """BambaForCausalLM (IBM Bamba): Mamba-2 blocks with attention (half the head dimension rotated) on
    attn_layer_indices, a SwiGLU MLP in every block."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    V, ffn = c.int("vocab_size", default=128000), c.int("intermediate_size", default=14336)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    hd = c.head_dim(h, nh)
    d = _mamba_dims(c, h)
    at = c.raw("attn_layer_indices", default=[])
    if not isinstance(at, list) or any(not isinstance(i, int) or not 0 <= i < L for i in at):
        raise GpuplanError(f"{c.source}: attn_layer_indices must list layer indices below {L}")
    norms = nrm("input_layernorm", h) + nrm("pre_ff_layernorm", h)
    mlp = gated("feed_forward", h, ffn, "mlp", c.flag("mlp_bias", default=False))
    mamba = mamba2_mixer(c, h, d, c.flag("mamba_proj_bias", default=False), "mamba.")
    attention = qkvo(h, nh, nkv, hd, c.flag("attention_bias", default=False))
    kinds = [i in at for i in range(L)]
    tied = tie(c, False)
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=262144), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([((attention if a else mamba) + norms + mlp, False) for a in kinds],
                              [("attention" if a else "mamba2", True) for a in kinds]),
                head=tuple(nrm("final_layernorm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                rotary_percent=0.5, ssm=d)


def granitemoehybrid(c: Cfg, name: str) -> ModelSpec:
    """GraniteMoeHybridForCausalLM (IBM Granite 4.0 H): each block Mamba-2 or attention (layer_types; no positional
    encoding where position_embedding_type is nope), then a top-k MoE of intermediate_size experts beside a gated
    shared MLP of shared_intermediate_size (the shared MLP alone with 0 experts)."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    h, L, nh, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"), c.int("vocab_size")
    nkv = c.kv_heads(nh, "num_key_value_heads")
    hd = c.head_dim(h, nh)
    types = listed_types(c, ("linear_attention", "full_attention"), L) or ["linear_attention"] * L
    # Granite 4.0's dense models (micro) list attention alone: no Mamba block, so no Mamba key is read
    d = _mamba_dims(c, h) if "linear_attention" in types else None
    mixers = {"full_attention": (qkvo(h, nh, nkv, hd, c.flag("attention_bias", default=False)), "attention")}
    if d is not None:
        mixers["linear_attention"] = (mamba2_mixer(c, h, d, c.flag("mamba_proj_bias", default=False), "mamba."),
                                      "mamba2")
    E = c.int("num_local_experts", default=8, minimum=0)
    k = c.int("num_experts_per_tok", default=2) if E else 0
    ffn = c.int("intermediate_size", default=11008) if E else 0
    shared = c.int("shared_intermediate_size", default=1024)
    moe = (lin("block_sparse_moe.router", E, h, "router")
           + gated("block_sparse_moe.experts", h, ffn, "expert", count=E)) if E else []
    mlp = moe + lin("shared_mlp.input_linear", 2 * shared, h, "shared_expert" if E else "mlp") \
        + lin("shared_mlp.output_linear", h, shared, "shared_expert" if E else "mlp")
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    tied = tie(c, False)
    if d is not None:
        scan_note(c)
    nope = c.raw("position_embedding_type") == "nope"
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0 if E else shared,
                vocab=V, max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(mixers[t][0] + norms + mlp, bool(E)) for t in types],
                              [(mixers[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=ffn, shared_ffn=shared if E else 0, ssm=d,
                **({"position": "none"} if nope else {}))


def olmo_hybrid(c: Cfg, name: str) -> ModelSpec:
    """OlmoHybridForCausalLM (OLMo Hybrid): gated delta-rule blocks (pre-norm) and OLMo 2 attention blocks (norms
    after attention and MLP, whole-width q/k norms) as layer_types orders them (every 4th attention by default),
    a SwiGLU MLP in every block; the delta rule's heads default to the attention heads, key head size to
    0.75·hidden / key heads, value head size to twice that (OlmoHybridConfig)."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    V, ffn = c.int("vocab_size", default=100352), c.int("intermediate_size")
    nkv = c.kv_heads(nh, "num_key_value_heads")
    hd = c.head_dim(h, nh)
    nk = c.int("linear_num_key_heads", default=nh)
    dk = c.int("linear_key_head_dim", default=int(0.75 * h / nk))
    d = SsmDims(heads=c.int("linear_num_value_heads", default=nh),
                head_dim=c.int("linear_value_head_dim", default=2 * dk), groups=nk, state=dk,
                conv_kernel=c.int("linear_conv_kernel_dim", default=4), chunk=64)
    if d.heads % d.groups:
        raise GpuplanError(f"{c.source}: linear_num_value_heads = {d.heads} is not a multiple of "
                           f"linear_num_key_heads = {d.groups}: fix the sizes")
    types = listed_types(c, ("linear_attention", "full_attention"), L)
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
    ab = c.flag("attention_bias", default=False)
    attention = (qkvo(h, nh, nkv, hd, ab) + nrm("self_attn.q_norm", nh * hd) + nrm("self_attn.k_norm", nkv * hd)
                 + nrm("post_attention_layernorm", h) + nrm("post_feedforward_layernorm", h))
    linear = _gated_delta(h, d, True, olmo=True) + nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    mlp = gated("mlp", h, ffn, "mlp")
    blocks = {"full_attention": (attention, "attention"), "linear_attention": (linear, "gdn")}
    tied = tie(c, False)
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=65536), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(blocks[t][0] + mlp, False) for t in types], [(blocks[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))), post_norms=True, ssm=d)


def falcon_h1(c: Cfg, name: str) -> ModelSpec:
    """FalconH1ForCausalLM (TII Falcon-H1): every block attention and Mamba-2 side by side on one normed input, their
    outputs summed, then a SwiGLU MLP; the Mamba inner width mamba_d_ssm (1,024 by default) unless null."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads")
    h, L, nh = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    V, ffn = c.int("vocab_size", default=128000), c.int("intermediate_size", default=14336)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    hd = c.head_dim(h, nh)
    inner = None if "mamba_d_ssm" in c.d and c.d["mamba_d_ssm"] is None else c.int("mamba_d_ssm", default=1024)
    d = _mamba_dims(c, h, inner)
    mamba = mamba2_mixer(c, h, d, c.flag("mamba_proj_bias", default=False), "mamba.",
                    gated_norm=c.flag("mamba_rms_norm", default=False),
                    out_bias=c.flag("projectors_bias", default=False))
    block = (qkvo(h, nh, nkv, hd, c.flag("attention_bias", default=False)) + mamba
             + gated("feed_forward", h, ffn, "mlp", c.flag("mlp_bias", default=False))
             + nrm("input_layernorm", h) + nrm("pre_ff_layernorm", h))
    tied = tie(c, False)
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=8192), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(block, False)] * L, [("attention+mamba2", True)] * L),
                head=tuple(nrm("final_layernorm", h) + ([] if tied else emb("lm_head", V, h, "head"))), ssm=d)
