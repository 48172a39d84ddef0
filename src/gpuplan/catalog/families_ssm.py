"""Decoders with no attention at all: every block one norm and one state-space mixer — Mamba-1 (MambaForCausalLM,
the state-spaces/mamba-* checkpoints; FalconMambaForCausalLM, Falcon Mamba) and Mamba-2 (Mamba2ForCausalLM:
Mamba-Codestral, the state-spaces/mamba2-* checkpoints) — and Jamba (JambaForCausalLM: Mamba-1 blocks with attention
on every attn_layer_period-th, a top-k MoE on every expert_layer_period-th). Each lists every parameter tensor the
matching ``transformers`` 5.24 class creates (checked against it on the meta device:
tests/golden/test_hf_families_ssm.py); the mixers are costed in model/ssm.py."""

from __future__ import annotations

import math

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import mamba2_mixer, scan_note, vector
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["jamba", "mamba", "mamba1_dims", "mamba1_mixer", "mamba2"]


def mamba1_dims(inner: int, state: int, conv_kernel: int) -> SsmDims:
    """A Mamba-1 mixer in SsmDims' terms: every inner channel its own state of ``state`` values, B and C shared by
    all of them (one group); the selective scan keeps its states per 2,048-token chunk."""
    return SsmDims(heads=inner, head_dim=1, groups=1, state=state, conv_kernel=conv_kernel, chunk=2048)


def mamba1_mixer(h: int, d: SsmDims, rank: int, bias: bool, conv_bias: bool, at: str = "mixer.") -> list[Weight]:
    """MambaMixer (FalconMambaMixer, JambaMambaMixer the same tensors): in_proj to x and z, a depthwise causal conv1d
    over x, x_proj to Δ's rank and B and C, dt_proj (with its bias) back to the inner width, A_log (inner x N) and D,
    out_proj. Falcon Mamba's RMS norms of B, C and Δ, and Jamba's, carry no weight in FalconMamba; Jamba's do
    (added by its builder)."""
    ws = lin(f"{at}in_proj", 2 * d.inner, h, "attention", bias)
    ws.append(Weight(name=f"{at}conv1d", shape=(d.inner, 1, d.conv_kernel), group="attention"))
    if conv_bias:
        ws += vector(f"{at}conv1d.bias", d.inner)
    ws += lin(f"{at}x_proj", rank + 2 * d.state, d.inner, "attention") + lin(f"{at}dt_proj", d.inner, rank,
                                                                            "attention", True)
    ws.append(Weight(name=f"{at}A_log", shape=(d.inner, d.state), group="attention", bias=True))
    return ws + vector(f"{at}D", d.inner) + lin(f"{at}out_proj", h, d.inner, "attention", bias)


def mamba(c: Cfg, name: str) -> ModelSpec:
    """MambaForCausalLM / FalconMambaForCausalLM: embeddings, blocks of one RMSNorm and a Mamba-1 mixer (no
    attention, no MLP), norm_f and the LM head (tied by default). The inner width is intermediate_size when given,
    else expand x hidden_size; Δ's rank time_step_rank, "auto" = ceil(hidden_size / 16) (MambaConfig)."""
    c.require("hidden_size", "num_hidden_layers", "vocab_size")
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    expand = c.number("expand", default=2)
    assert expand is not None
    inner = c.int("intermediate_size", default=int(expand * h), note=False)
    rank = _rank(c, "time_step_rank", h, "auto")
    d = mamba1_dims(inner, c.int("state_size", default=16), c.int("conv_kernel", default=4))
    block = nrm("norm", h) + mamba1_mixer(h, d, rank, c.flag("use_bias", default=False),
                                          c.flag("use_conv_bias", default=True))
    tied = tie(c, True)
    _scan1_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=inner, n_kv_heads=inner, head_dim=1, ffn=0, vocab=V,
                max_positions=0, gated_mlp=False, norm="rmsnorm", tied_embeddings=tied,
                embedding=tuple(emb("embeddings", V, h)), layers=groups([(block, False)] * L, [("mamba1", False)] * L),
                head=tuple(nrm("norm_f", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                activation=str(c.raw("hidden_act", default="silu")), position="none", ssm=d)


def _mamba2_dims(c: Cfg, h: int) -> SsmDims:
    """Mamba2Config: num_heads heads of head_dim over the inner width expand x hidden_size (Mamba2Mixer takes the
    width from expand and reshapes it by head_dim, so the two must agree)."""
    expand = c.number("expand", default=2)
    assert expand is not None
    inner = int(expand * h)
    heads, head_dim = c.int("num_heads", default=128), c.int("head_dim", default=64)
    if heads * head_dim != inner:
        raise GpuplanError(f"{c.source}: num_heads x head_dim = {heads} x {head_dim} is not expand x hidden_size = "
                           f"{inner}: fix the sizes")
    d = SsmDims(heads=heads, head_dim=head_dim, groups=c.int("n_groups", default=8),
                state=c.int("state_size", default=128), conv_kernel=c.int("conv_kernel", default=4),
                chunk=c.int("chunk_size", default=256))
    if d.heads % d.groups:
        raise GpuplanError(f"{c.source}: num_heads = {d.heads} is not a multiple of n_groups = {d.groups}: fix the "
                           "sizes")
    return d


def mamba2(c: Cfg, name: str) -> ModelSpec:
    """Mamba2ForCausalLM: embeddings, blocks of one RMSNorm and a Mamba-2 mixer (no attention, no MLP), norm_f and
    the LM head."""
    c.require("hidden_size", "num_hidden_layers", "vocab_size")
    h, L, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("vocab_size")
    d = _mamba2_dims(c, h)
    block = nrm("norm", h) + mamba2_mixer(c, h, d, c.flag("use_bias", default=False))
    tied = tie(c, False)
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=d.heads, n_kv_heads=d.heads, head_dim=d.head_dim, ffn=0,
                vocab=V, max_positions=c.int("max_position_embeddings", default=0, minimum=0, note=False),
                gated_mlp=False, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embeddings", V, h)),
                layers=groups([(block, False)] * L, [("mamba2", False)] * L),
                head=tuple(nrm("norm_f", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                activation=str(c.raw("hidden_act", default="silu")), position="none", ssm=d)


def _scan1_note(c: Cfg) -> None:
    c.assumed.append(f"{c.mt}: the selective scan (Mamba-1) is timed from its kernel's arithmetic at the fp32 vector "
                     "peak or its memory traffic (model/selective_scan.py): no measured rate of the kernel was found, "
                     "so the throughput interval is widened for it")


def _rank(c: Cfg, key: str, h: int, default: int | str) -> int:
    """Δ's rank: as given, "auto" = ceil(hidden_size / 16) (MambaConfig, JambaConfig)."""
    raw = c.raw(key, default=default)
    return math.ceil(h / 16) if raw == "auto" else c.int(key, default=default)


def jamba(c: Cfg, name: str) -> ModelSpec:
    """JambaForCausalLM (AI21 Jamba, Jamba 1.5): each block an RMSNorm, attention without positional encoding on
    layers i % attn_layer_period == attn_layer_offset and a Mamba-1 mixer (with RMSNorms over Δ, B and C) on the
    others, then an RMSNorm and an MLP — a top-k MoE of num_experts experts of intermediate_size on layers
    i % expert_layer_period == expert_layer_offset, a SwiGLU MLP on the others (JambaConfig's defaults: Jamba 1.5
    Mini's shapes)."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    h, L, nh, V = (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
                   c.int("vocab_size"))
    nkv = c.kv_heads(nh, "num_key_value_heads", default=8)
    ffn, E = c.int("intermediate_size", default=14336), c.int("num_experts", default=16)
    k = c.int("num_experts_per_tok", default=2)
    ap, ao = c.int("attn_layer_period", default=8), c.int("attn_layer_offset", default=4, minimum=0)
    xp, xo = c.int("expert_layer_period", default=2), c.int("expert_layer_offset", default=1, minimum=0)
    d = mamba1_dims(c.int("mamba_expand", default=2) * h, c.int("mamba_d_state", default=16),
                    c.int("mamba_d_conv", default=4))
    rank = _rank(c, "mamba_dt_rank", h, "auto")
    mixers = {"attention": qkvo(h, nh, nkv, h // nh, False),
              "mamba1": (mamba1_mixer(h, d, rank, c.flag("mamba_proj_bias", default=False),
                                      c.flag("mamba_conv_bias", default=True), "mamba.")
                         + nrm("mamba.dt_layernorm", rank) + nrm("mamba.b_layernorm", d.state)
                         + nrm("mamba.c_layernorm", d.state))}
    moe = lin("feed_forward.router", E, h, "router") + fused_experts("feed_forward.experts", h, ffn, E)
    norms = nrm("input_layernorm", h) + nrm("pre_ff_layernorm", h)
    kinds = ["attention" if i % ap == ao else "mamba1" for i in range(L)]
    sparse = [E > 1 and i % xp == xo for i in range(L)]
    layers = [(mixers[t] + norms + (moe if s else gated("feed_forward", h, ffn, "mlp")), s)
              for t, s in zip(kinds, sparse, strict=True)]
    tied = tie(c, False)
    _scan1_note(c)
    experts = E if any(sparse) else 0
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=h // nh,
                ffn=ffn if not all(sparse) else 0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=262144, note=False), gated_mlp=True,
                norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(t, True) for t in kinds]),
                head=tuple(nrm("final_layernorm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=experts, top_k=k if experts else 0, moe_ffn=ffn if experts else 0, position="none", ssm=d)
