"""The time PyTorch AMP over fp32 parameters adds to a layer (model/kept.py ``amp_fp32``; docs/amp.md): the
casts autocast and autograd run around each linear, as memory-bound kernels at the streaming bandwidth.

Forward: each matrix is cast fp32 → bf16 once per micro-batch (read 4 B, write 2 B per parameter), and each
linear casts its fp32 input itself (q, k, v and gate, up: ``normed_readers``), 6 B per element. Backward: each
bf16 weight gradient is cast back to fp32 (6 B per parameter) and, from the second micro-batch of a step on,
added into the fp32 ``.grad`` (read 4 + 4, write 4); each input cast's bf16 gradient is cast to fp32 (6 B per
element) and the readers' fp32 gradients summed into the stream's (one 12-byte add per reader past the first of
each stream)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.model.kept import normed_readers
from gpuplan.spec import LayerGroup, ModelSpec
from gpuplan.spec.model import BLOCK_MATRIX_GROUPS

CAST_BYTES = 6.0    # one fp32 → bf16 (or bf16 → fp32) cast: 4 B read + 2 B written, or 2 read + 4 written
FP32_ADD_BYTES = 12.0  # an fp32 a + b into a new or the same tensor: 4 + 4 read, 4 written


@dataclass(frozen=True, slots=True)
class AmpCasts:
    """One layer's AMP casts for one micro-batch: bytes moved and kernels launched, forward and backward."""
    fwd_bytes: float
    bwd_bytes: float
    fwd_kernels: int
    bwd_kernels: int


def amp_cast_bytes(m: ModelSpec, lg: LayerGroup, tokens: float, accumulating: bool) -> AmpCasts:
    """One layer's AMP casts for one micro-batch of ``tokens`` on one GPU (AMP runs without model parallelism);
    ``accumulating``: the step has more than one micro-batch, so each weight gradient is added into the kept
    one."""
    mats = [w for w in lg.weights if w.is_matrix and w.group in BLOCK_MATRIX_GROUPS]
    params = sum(w.numel for w in mats)
    casts = sum(w.count for w in mats)
    attn, mlp = normed_readers(m)
    readers = attn + mlp
    stream = tokens * m.hidden
    fwd = CAST_BYTES * (params + readers * stream)
    bwd = CAST_BYTES * (params + readers * stream) + FP32_ADD_BYTES * (readers - 2) * stream
    if accumulating:
        bwd += FP32_ADD_BYTES * params
    return AmpCasts(fwd, bwd, casts + readers, casts * (2 if accumulating else 1) + 2 * readers - 2)
