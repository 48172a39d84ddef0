"""Time of one GEMM kernel as cuBLAS / hipBLASLt run it, from the published measurements.

A library GEMM splits the m×n output into tiles, one per thread block (SM / CU), and runs them in
waves; for few tiles and a long K it splits K too (split-K / stream-K) and reduces the partial sums
(NVIDIA, 'Matrix Multiplication Background User's Guide', Sec. 2.3 and 3). Per candidate
configuration — a tile from the architecture's cited set, a split of K — the time is

    t = floor + max(waves · (K/s + k0) · 2·tm·tn / R_sm  [+ split-K reduction],  bytes / bw)

with ``floor`` the fixed time of a kernel, ``k0`` the fixed work per output tile in K elements
(the pipeline's prologue and the epilogue), R_sm the per-SM mainloop rate and bw the achievable HBM
bandwidth; the library's heuristic is taken to find the fastest configuration. The mainloop rate is
solved so that the published best shape of a sweep (MAMF, catalog/matmul.json) comes out at its
measured rate, and no shape runs faster than that best one. Dimensions that are not multiples of 16
bytes run at the cited alignment penalty. Where the catalogue holds a measured shape sweep of the
architecture and precision, the model's log-error on those shapes is interpolated to the asked shape
(a Gaussian kernel in log2 m, n, k, fading outside the swept box): inside the sweep the rate follows
the measurements, outside it the model anchored at the best shape.

A training step sustains a share of these burst rates (clocks under the power limit, concurrent
kernels): ``GemmKernel.sustain`` (model/compute.py ``step_sustain``: the measured clocks times a fitted
share); a microbenchmark runs at 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from gpuplan.catalog.constants import table
from gpuplan.catalog.matmul import KernelModel, kernel_model, mamf_row, matmul_sweep
from gpuplan.spec import GPU
from gpuplan.spec._value import ValueHashed, seal

SWEEP_SIGMA = 0.5   # octaves: the kernel width of the sweep interpolation (neighbours one octave away weigh e^-2)
FADE_SIGMA = 1.0    # octaves: how fast the sweep's correction fades beyond the swept box
SWEEP_REACH2 = 8.0  # squared octaves beyond which a sweep point weighs less than e^-16 (skipped)


@dataclass(frozen=True, slots=True, eq=False)
class GemmKernel(ValueHashed):
    """What cuBLAS-class GEMMs reach on one GPU at one precision (hashed once: the step model's caches key on
    the device holding it, and its sweep table is long)."""

    peak: float          # dense FLOP/s (clock-scaled under a power cap)
    burst: float         # the best shape's measured share of peak (MAMF)
    main: float          # mainloop share of peak, solved so that the best shape comes out at ``burst``
    sms: int
    model: KernelModel   # tiles, splits, floor, per-tile cost, alignment (catalog/matmul.json)
    bw: float            # achievable HBM bytes/s
    sweep: tuple[tuple[float, float, float, float], ...] = ()  # (log2 m, n, k, log measured/model time)
    box: tuple[tuple[float, float], ...] = ()                   # the sweep's (lo, hi) per log2 dimension
    sustain: float = 1.0  # share of the burst rate a training step sustains (1: a microbenchmark)
    _hash: tuple = field(init=False, default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        seal(self)


def _precision_key(precision: str) -> str:
    return {"fp16": "bf16", "tf32": "bf16", "fp32": "bf16", "bf16-pure": "bf16"}.get(precision, precision)


def burst_share(g: GPU, precision: str) -> tuple[float, tuple[int, int, int] | None]:
    """(best-shape share of peak, that shape) for ``g``: its own published MAMF row where there is one,
    else its architecture's; an architecture with no sweep at this precision uses the ``gemm_efficiency``
    estimate (fp8 or fp4 without a sweep: the bf16 share times ``fp8_gemm_efficiency_ratio``)."""
    from gpuplan.catalog.constants import constant

    key = _precision_key(precision)
    row = mamf_row(g.architecture, key, g.id)
    if row is not None:
        return row
    base = mamf_row(g.architecture, "bf16", g.id)
    share, shape = base if base is not None else (table("gemm_efficiency").get(g.architecture, 0.7), None)
    low = ("fp8", "fp4", "mxfp4")
    return (share * constant("fp8_gemm_efficiency_ratio"), shape) if key in low else (share, shape)


def _core_s(m: float, n: float, k: float, batch: float, kern: GemmKernel, main: float) -> float:
    """The fastest configuration's compute time (no floor), at mainloop share ``main``."""
    mod = kern.model
    rate_sm = kern.peak * main * kern.sustain / kern.sms
    best = math.inf
    for tm, tn in mod.tiles:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        for s in mod.splits:
            if s > 1 and k / s < mod.tile_depth:
                break
            t = math.ceil(tiles * s / kern.sms) * (k / s + mod.tile_k) * 2 * tm * tn / rate_sm
            if s > 1:  # partial sums in fp32: written and read back, then one more pass
                t += 2 * s * m * n * batch * 4 / kern.bw + mod.reduce_s
            best = min(best, t)
    return best


def out_bytes(elem: float) -> float:
    """Bytes per output element of a GEMM whose inputs take ``elem`` bytes: an fp8 or fp4 GEMM writes 16-bit
    results (cuBLASLt's D in fp16/bf16 — the Azure/SuperBench benchmark's ``fp8e4m3`` runs
    ``<fp8e4m3, fp8e4m3, fp16>``; DeepGEMM's ``gemm_fp8_fp8_bf16_nt``; Transformer Engine's and torchao's
    ``_scaled_mm(out_dtype=bf16)``), wider inputs their own width."""
    return max(elem, 2.0)


def _model_s(m: float, n: float, k: float, batch: float, elem: float, kern: GemmKernel) -> float:
    """Physics only: floor + max(compute, memory), and the alignment rule."""
    traffic = (elem * (m * k + k * n) + out_bytes(elem) * m * n) * batch
    t = kern.model.floor_s + max(_core_s(m, n, k, batch, kern, kern.main), traffic / kern.bw)
    align = kern.model.align_bytes
    # the rule is on leading dimensions ("(op_A == N ? m : k) * sizeof(A)", the same for B and C): PyTorch's row-major
    # (m×k)·(k×n) keeps k and n contiguous, never m — a linear's token count (fractional where the busiest expert's
    # share is an expectation) is its rows
    if align and any((d * elem) % align for d in (n, k)):
        t /= kern.model.align_factor
    return t


def _correction(kern: GemmKernel, m: float, n: float, k: float) -> float:
    """The sweep's interpolated log(measured time / model time) at this shape (0 with no sweep)."""
    if not kern.sweep:
        return 0.0
    q = (math.log2(max(m, 1.0)), math.log2(max(n, 1.0)), math.log2(max(k, 1.0)))
    num = den = 0.0
    for a, b, c, r in kern.sweep:
        d2 = (q[0] - a) ** 2 + (q[1] - b) ** 2 + (q[2] - c) ** 2
        if d2 < SWEEP_REACH2:
            w = math.exp(-d2 / (2 * SWEEP_SIGMA**2))
            num, den = num + w * r, den + w
    if not den:
        return 0.0
    out2 = sum(max(0.0, lo - x, x - hi) ** 2 for x, (lo, hi) in zip(q, kern.box, strict=True))
    return num / den * math.exp(-out2 / (2 * FADE_SIGMA**2))


@lru_cache(maxsize=1 << 16)
def gemm_s(m: float, n: float, k: float, kern: GemmKernel, elem: float = 2.0, batch: float = 1.0) -> float:
    """Seconds of ``batch`` (m×k)·(k×n) GEMMs in one kernel, ``elem`` bytes per input element: the
    model corrected along the measured sweep, never faster than the best measured shape."""
    t = _model_s(m, n, k, batch, elem, kern) * math.exp(_correction(kern, m, n, k))
    return max(t, 2 * m * n * k * batch / (kern.peak * kern.burst * kern.sustain))


def _solve_main(kern: GemmKernel, shape: tuple[int, int, int] | None) -> float:
    """The mainloop share at which the best shape runs at its measured ``burst`` rate."""
    if shape is None:
        return kern.burst
    m, n, k = shape
    target = 2 * m * n * k / (kern.peak * kern.burst) - kern.model.floor_s
    main = kern.burst
    for _ in range(4):  # the compute terms scale as 1/main; the split-K reduction does not
        main *= _core_s(m, n, k, 1, kern, main) / target
    return main


@lru_cache(maxsize=256)
def gemm_kernel(g: GPU, precision: str, peak: float, bw: float, sustain: float = 1.0) -> GemmKernel:
    """The GEMM kernel model of ``g`` at ``precision`` (dense ``peak`` FLOP/s, ``bw`` B/s achievable),
    with the measured shape sweep of its architecture where the catalogue has one."""
    share, shape = burst_share(g, precision)
    base = GemmKernel(peak=peak, burst=share, main=share, sms=g.sm_count, model=kernel_model(g.architecture), bw=bw)
    base = replace(base, main=_solve_main(base, shape))
    sweep = matmul_sweep(g.architecture, _precision_key(precision))
    if sweep is not None:
        ref = _sweep_reference(g, sweep.gpu_id, precision, base)
        elem = 1.0 if _precision_key(precision) == "fp8" else 2.0
        pts = tuple((math.log2(m), math.log2(n), math.log2(k),
                     math.log(2 * m * n * k / (tf * 1e12) / _model_s(m, n, k, 1, elem, ref)))
                    for m, n, k, tf in sweep.points)
        box = tuple((min(p[i] for p in pts), max(p[i] for p in pts)) for i in range(3))
        base = replace(base, sweep=pts, box=box)
    return replace(base, sustain=sustain)


def _sweep_reference(g: GPU, gpu_id: str, precision: str, base: GemmKernel) -> GemmKernel:
    """The kernel model of the GPU the sweep was measured on (the residuals are that GPU's)."""
    from gpuplan.catalog.hardware import get_gpu

    if gpu_id == g.id:
        return base
    ref = get_gpu(gpu_id)
    key = _precision_key(precision)
    peak = ref.peak_flops.get(key) or ref.peak_flops.get("fp16") or base.peak
    share, shape = burst_share(ref, precision)
    r = GemmKernel(peak=peak, burst=share, main=share, sms=ref.sm_count, model=base.model,
                   bw=ref.memory_bw_bytes_per_s * base.bw / g.memory_bw_bytes_per_s)
    return replace(r, main=_solve_main(r, shape))
