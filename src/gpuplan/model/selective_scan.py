"""Mamba-1's selective scan (Gu & Dao 2023, "Mamba", arXiv:2312.00752, Sec. 3.3.2 and Appendix D: the hardware-aware
scan that keeps the expanded state, d_inner x N per token, in SRAM; state-spaces/mamba ``csrc/selective_scan``, which
Hugging Face's MambaMixer and FalconMambaMixer call through ``mamba_inner_fn`` when they train on CUDA, as do Jamba's).

Unlike Mamba-2's chunked scan it runs no matmul. Per token, inner channel and state element the forward kernel
(``selective_scan_fwd_kernel.cuh``) forms exp(Δ·A) and Δ·u·B, combines the pairs in a block-wide inclusive scan
(``SSMScanOp``: (a, b)∘(a', b') = (a·a', a'·b + b'), a multiply and an FMA, once in each thread's sequential pass
over its items and once more to write every prefix) and adds C·h into the output: 7 issue slots of the fp32
vector units (two multiplies, two combines, the output FMA; the exponential runs on the special-function units
beside them). The backward kernel (``selective_scan_bwd_kernel.cuh``) recomputes those pairs and the forward scan
inside each chunk (6), runs the reverse scan of the state gradient (4) and forms the products that feed the
gradients of Δ, u, A, B and C (6): 16 slots. One slot is one fp32 lane-instruction: the fp32 peak (which counts an
FMA as 2 FLOPs) issues peak / 2 of them per second.

Memory: the forward reads u, Δ and z (16-bit, d_inner each), B and C (N each) and writes the gated output, plus the
chunk states it keeps for the backward (2·N fp32 per channel per chunk, SsmDims.chunk: 2,048 tokens, the kernel's
kNThreads 128 x kNItems 16);
the backward reads them again with the output gradient and writes the gradients of u, Δ, z, B and C — counted as
twice the forward's bytes.

Time: the larger of the slots at the fp32 vector peak (times the step's sustained share) and the bytes at streaming
bandwidth, plus one kernel's floor per pass (a GPU without a catalogued fp32 peak — A10, B300, MI355X — is timed by
the bytes alone). No published measurement of this kernel was found
(validation/components.json holds none), so the throughput interval is widened for the scans' share as for the
chunked scans (catalog/intervals.py ``widened``) and the answer says so in ``assumed``.

Activations (``mamba_inner_fn`` at its default checkpoint_lvl 1: the convolution's output and Δ are recomputed in
the backward): the in-projection's output (x and z, 2·d_inner), x_proj's output (dt_rank + 2N), the scan's ungated
output (the gated one, out_proj's input, is recomputed from it and z) and the chunk states, with the block norm's and
in_proj's inputs — under LoRA too (a frozen out_proj still needs its input rebuilt for the gradient of z).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.spec.model import ModelSpec, SsmDims

if TYPE_CHECKING:
    from gpuplan.model.compute import Device

FWD_SLOTS = 7     # fp32 issue slots per token, channel and state element in the forward kernel (module doc)
BWD_SLOTS = 16    # in the backward kernel


def _dims(m: ModelSpec) -> SsmDims:
    assert m.ssm is not None
    return m.ssm


def dt_rank(m: ModelSpec) -> int:
    """x_proj's Δ width, read off the block's dt_proj weight (dt_proj: dt_rank -> d_inner)."""
    for lg in m.layers:
        for w in lg.weights:
            if w.name.endswith("dt_proj") and len(w.shape) == 2:
                return w.shape[1]
    return 0


def scan_s(m: ModelSpec, tokens: float, tp: int, dev: Device) -> tuple[float, float]:
    """(forward, backward) seconds of one Mamba-1 layer's selective scan over ``tokens`` local tokens."""
    d = _dims(m)
    elements = tokens * d.inner / tp * d.state
    slots_per_s = dev.peak32 / 2 * dev.sustain
    io = tokens * (2 * 4 * d.inner / tp + 2 * 2 * d.state + 8 * d.state * d.inner / tp / d.chunk)

    def one(slots: float, nbytes: float) -> float:
        compute = elements * slots / slots_per_s if slots_per_s > 0 else 0.0
        return max(compute, nbytes / dev.bw) + dev.floor_s

    return one(FWD_SLOTS, io), one(BWD_SLOTS, 2 * io)


def stream_bytes(m: ModelSpec, tp: int) -> tuple[float, int]:
    """(bytes per token, kernels) of the forward's memory-bound work besides the scan: the causal depthwise
    convolution with its SiLU over x (read and write d_inner, 16-bit; Δ's softplus and the z gate are fused into the
    scan)."""
    return 4 * _dims(m).inner / tp, 1


def terms(m: ModelSpec, sb: float, t: int, rep: float, e: float, norm: float, linear_in: float) -> dict[str, float]:
    """Bytes a Mamba-1 layer keeps for its backward over ``sb`` local tokens (module doc)."""
    d = _dims(m)
    h = m.hidden
    return {
        "mixer_norm_input": norm * sb * h * rep,
        "qkv_input": linear_in * sb * h * rep,              # the in-projection's input
        "in_proj_output": e * sb * 2 * d.inner / t,         # x and z
        "conv_output": e * sb * (dt_rank(m) + 2 * d.state),  # x_proj's output (Δ's rank, B, C): replicated
        "scan_output": e * sb * d.inner / t,                # the ungated scan output (out_z recomputed from it)
        "decays": 8 * sb * d.state * d.inner / t / d.chunk,   # the chunk states (fp32 pairs)
    }
