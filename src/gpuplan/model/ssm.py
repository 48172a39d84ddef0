"""The recurrent token mixers of hybrid models: Mamba-2's state-space layer and the gated delta rule (Mamba-1's
selective scan, which has no matmul, is model/selective_scan.py; the functions here dispatch to it).

Both train with a chunked algorithm that turns the recurrence into small matmuls inside chunks of ``Q``
tokens plus a pass of states between chunks:

* Mamba-2 (Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060, Sec. 6 and Listing 1; the Triton
  kernels of state-spaces/mamba ``mamba_ssm/ops/triton/ssd_combined.py`` that Megatron-Core's MambaMixer and
  Hugging Face call): per chunk, C·Bᵀ for each group of heads (``_bmm_chunk_fwd``, Q×Q×N), the masked
  (L∘CBᵀ)·X for each head (``_chunk_scan_fwd``, Q×Q×P), each head's chunk state Bᵀ·X (``_chunk_state_fwd``,
  N×Q×P, fp32) and the output from the passed states C·h (Q×N×P). The backward recomputes C·Bᵀ and the chunk
  states (``_mamba_chunk_scan_combined_bwd`` calls the forward's kernels again) and runs two matmuls for each
  forward one.
* Gated delta rule (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", arXiv:2412.06464, Sec. 3.3, the
  WY form of the chunkwise delta rule; flash-linear-attention's ``chunk_gated_delta_rule``, chunk 64, that
  Qwen3-Next runs): per chunk and value head, β·K·Kᵀ (C×C×d_k), its triangular inverse (counted as one
  C×C×C matmul), W = A·K and U = A·V, the state recurrence (W·h and Kᵀ·V_new, d_k×d_v per chunk) and the output
  (Q·h, Q·Kᵀ, and that times V_new). The backward recomputes W, U and the states.

Time: each pass is a fused kernel, at the larger of its matmul FLOPs over the measured rate of the published
fused chunk-scan kernel (``scan_kernel_share`` of the GPU's 16-bit peak: tile-ai/tilelang's Mamba-2 chunk_scan
benchmark, 126-136 TFLOP/s on an H800 over 1K-32K tokens; validation/components.json, component ``scan``) times
the step's sustained share, and of the bytes it reads and writes (inputs, outputs, fp32 cumulative decays, the
chunk states written and read back) at streaming bandwidth, plus a floor per kernel. The masked intra-chunk
product counts half its FLOPs (the kernels skip the blocks above the diagonal; TileLang's FLOP count). That
rate is one kernel's (TileLang's, not the mamba-ssm Triton kernels Megatron-Core runs, nor the backward or the
gated delta rule's), so the answer widens the throughput interval for the scans' share (catalog/intervals.py
``widened``) and says so in ``assumed``.

Activations (per token, 16-bit ``e``): the block norm's input and the in-projection's input, the in-projection's
output (the kernels keep slices of it: z, the convolution's input, dt), the convolution's output (the
scan's x, B, C — or q, k, v), the scan's output (kept by the scan and by the gated norm), the gated norm's
output (the out-projection's input), fp32 per-head cumulative decays; the delta rule adds its per-chunk
triangular matrix A (C values per head and token) and β.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gpuplan.catalog.constants import constant
from gpuplan.model import selective_scan
from gpuplan.spec.model import ModelSpec, SsmDims

if TYPE_CHECKING:
    from gpuplan.model.compute import Device

# kernels of one forward pass of the chunked scan (mamba_ssm: chunk cumsum, chunk state, state passing, C·Bᵀ,
# chunk scan; fla: g cumsum, β·K·Kᵀ, solve_tril, recompute W/U, states, output) and of its backward
SCAN_KERNELS = {"mamba2": (5, 12), "gdn": (6, 14)}


@dataclass(frozen=True, slots=True)
class Widths:
    """Per-token widths of one recurrent layer (whole model, before tensor parallelism)."""

    in_proj: int   # the in-projection's output
    conv: int      # the causal depthwise convolution's channels
    inner: int     # the scan's output (value width)
    heads: int
    extra: int     # further 16-bit values kept per token (the delta rule's A rows and β)


def widths(m: ModelSpec, mixer: str) -> Widths:
    d = _dims(m)
    key = d.groups * d.state
    if mixer == "mamba2":  # z, x, B, C, dt (NemotronHMamba2Mixer: intermediate + conv_dim + heads)
        return Widths(2 * d.inner + 2 * key + d.heads, d.inner + 2 * key, d.inner, d.heads, 0)
    # q, k, v, z and b, a (Qwen3NextGatedDeltaNet: in_proj_qkvz + in_proj_ba); the convolution over q, k, v
    return Widths(2 * key + 2 * d.inner + 2 * d.heads, 2 * key + d.inner, d.inner, d.heads,
                  d.heads * (d.chunk + 1))


def _dims(m: ModelSpec) -> SsmDims:
    assert m.ssm is not None
    return m.ssm


Gemm = tuple[float, float, float, float, bool]


def _gemms(m: ModelSpec, mixer: str, tokens: float, tp: int) -> tuple[list[Gemm], int]:
    """The forward's matmuls as (m, n, k, batch, masked) over ``tokens`` local tokens — masked: a causal product
    inside the chunk, whose blocks above the diagonal the kernel skips — and how many of the first of them the
    backward recomputes."""
    d = _dims(m)
    q, n, p = d.chunk, d.state, d.head_dim
    chunks = max(tokens / q, 1.0)
    heads, groups = chunks * d.heads / tp, chunks * max(d.groups / tp, 1.0)
    if mixer == "mamba2":
        return [(q, q, n, groups, False),      # C·Bᵀ per group
                (n, p, q, heads, False),       # chunk states Bᵀ·X
                (q, p, q, heads, True),        # (L∘CBᵀ)·X
                (q, p, n, heads, False)], 2    # C·h from the passed states
    return [(q, q, n, heads, False),           # β·K·Kᵀ
            (q, q, q, heads, True),            # its triangular inverse
            (q, n, q, heads, True),            # W = A·K
            (q, p, q, heads, True),            # U = A·V
            (q, p, n, heads, False),           # W·h
            (n, p, q, heads, False),           # Kᵀ·V_new (the state update)
            (q, p, n, heads, False),           # Q·h
            (q, q, n, heads, False),           # Q·Kᵀ
            (q, p, q, heads, True)], 6         # (QKᵀ∘mask)·V_new


@lru_cache(maxsize=64)
def scan_flops(m: ModelSpec, mixer: str) -> float:
    """Forward FLOPs per token of one recurrent layer's chunked scan (its projections are weight matmuls); none for
    Mamba-1's selective scan, whose arithmetic runs on the vector units (model/selective_scan.py) and, like the norms
    and activations, is not a model FLOP."""
    if mixer == "mamba1":
        return 0.0
    tokens = float(_dims(m).chunk * 64)
    return sum(2 * a * b * c * n for a, b, c, n, _ in _gemms(m, mixer, tokens, 1)[0]) / tokens


def _state_bytes(m: ModelSpec, tp: int) -> float:
    """Bytes per token of the chunk states the forward writes and reads back: fp32 written, read by the state
    passing, 16-bit written and read by the output kernel (12 B per state element per chunk)."""
    d = _dims(m)
    return 12 * d.heads / tp * d.head_dim * d.state / d.chunk


def scan_s(m: ModelSpec, mixer: str, tokens: float, tp: int, dev: Device) -> tuple[float, float]:
    """(forward, backward) seconds of one recurrent layer's chunked scan over ``tokens`` local tokens (Mamba-1's
    selective scan: model/selective_scan.py)."""
    if mixer == "mamba1":
        return selective_scan.scan_s(m, tokens, tp, dev)
    gemms, recomputed = _gemms(m, mixer, tokens, tp)
    flops = [2 * a * b * c * n * (0.5 if masked else 1.0) for a, b, c, n, masked in gemms]
    w = widths(m, mixer)
    io = tokens * (2 * (w.conv + 2 * w.inner + w.heads + w.extra) / tp + 12 * w.heads / tp + _state_bytes(m, tp))
    k_fwd, k_bwd = SCAN_KERNELS[mixer]
    fwd = fused_kernel_s(sum(flops), io, k_fwd, dev)
    bwd = fused_kernel_s(sum(flops[:recomputed]) + 2 * sum(flops), 2 * io, k_bwd, dev)
    return fwd, bwd


def fused_kernel_s(flops: float, nbytes: float, kernels: float, dev: Device) -> float:
    """Seconds of fused scan kernels: their matmul FLOPs at the measured fused chunk-scan rate
    (``scan_kernel_share`` of the 16-bit peak, times the share a step sustains) or their bytes at streaming
    bandwidth, whichever is longer, plus each kernel's fixed time."""
    rate = constant("scan_kernel_share") * dev.peak16 * dev.sustain
    return max(flops / rate, nbytes / dev.bw) + kernels * dev.floor_s


def stream_bytes(m: ModelSpec, mixer: str, tp: int) -> tuple[float, int]:
    """(bytes per token, kernels) of a recurrent layer's forward memory-bound work besides the scan: the causal
    convolution with its SiLU (read and write its channels, 16-bit), the gated RMSNorm (read the scan's output
    and z, write the normed product); the delta rule's q/k L2 norms and its a/b gates (β = sigmoid(b), g); Mamba-1's
    convolution alone (model/selective_scan.py)."""
    if mixer == "mamba1":
        return selective_scan.stream_bytes(m, tp)
    w = widths(m, mixer)
    conv = 4 * w.conv / tp
    norm = 6 * w.inner / tp
    if mixer == "mamba2":
        return conv + norm, 2
    d = _dims(m)
    l2 = 8 * d.groups * d.state / tp
    gates = 8 * w.heads / tp
    return conv + norm + l2 + gates, 4


def ssm_terms(m: ModelSpec, mixer: str, sb: float, t: int, rep: float, e: float, norm: float,
              linear_in: float) -> dict[str, float]:
    """Bytes a recurrent layer keeps for its backward pass over ``sb`` local tokens (see module doc; Mamba-1:
    model/selective_scan.py)."""
    if mixer == "mamba1":
        return selective_scan.terms(m, sb, t, rep, e, norm, linear_in)
    w = widths(m, mixer)
    h = m.hidden
    return {
        "mixer_norm_input": norm * sb * h * rep,
        "qkv_input": linear_in * sb * h * rep,           # the in-projection's input
        "in_proj_output": e * sb * w.in_proj / t,        # z, the convolution's input and dt
        "conv_output": e * sb * w.conv / t,              # the scan's x, B, C (q, k, v)
        "scan_output": e * sb * w.inner / t,             # kept by the scan and the gated norm
        "ssm_out_proj_input": linear_in * sb * w.inner / t,  # the gated norm's output
        "decays": 4 * sb * w.heads / t + e * sb * w.extra / t,
    }
