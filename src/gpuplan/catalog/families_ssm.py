"""Decoders with no attention at all: every block one norm and one state-space mixer — Mamba-2
(Mamba2ForCausalLM: Mamba-Codestral, the state-spaces/mamba2-* checkpoints). Each lists every parameter tensor the
matching ``transformers`` 5.24 class creates (checked against it on the meta device:
tests/golden/test_hf_families_ssm.py); the mixers are costed in model/ssm.py."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, groups, nrm, spec, tie
from gpuplan.catalog.families_hybrid import mamba2_mixer, scan_note
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims

__all__ = ["mamba2"]


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
