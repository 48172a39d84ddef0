"""What a trial run can build, checked before torchrun starts (and again in each rank)."""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec


def check_model(m: ModelSpec, tp: int) -> None:
    """Trial runs build dense Llama-family models only; tp must split the heads evenly."""
    from gpuplan.trace.model import TRACEABLE_TYPES  # imports torch, which a trial run needs anyway

    if m.model_type not in TRACEABLE_TYPES or m.moe or m.kv_lora_rank:
        kind = ("a mixture-of-experts model" if m.moe else "a latent-attention (MLA) model" if m.kv_lora_rank
                else f"a {m.model_type} model")
        raise GpuplanError(f"trial runs support dense {', '.join(TRACEABLE_TYPES)} models; {m.name} is {kind}: "
                           "profile a supported model, or use `gpuplan evaluate`")
    if tp > 1 and (m.n_heads % tp or m.n_kv_heads % tp):
        raise GpuplanError(f"tp={tp} must divide the attention heads ({m.n_heads}) and the K/V heads "
                           f"({m.n_kv_heads}) of {m.name} in a trial run: choose a smaller tp")
