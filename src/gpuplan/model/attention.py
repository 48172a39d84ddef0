"""The attention core: which kernel runs it on which GPU, and its time per pass from measured curves.

Kernels (``KERNELS``): FlashAttention-2 (PyTorch SDPA's flash backend, flash-attn), FlashAttention v1 and
its Triton kernel (flash-attn 1.x flash_attn_triton.py: llm-foundry's and MPT's ``attn_impl: triton``, at the
measured rates of the Triton fused-attention kernel it starts from),
cuDNN fused attention (Transformer Engine's FusedAttention on Hopper+), FlashAttention-3 and -4,
PyTorch SDPA's memory-efficient kernel (the one fused backend before sm80), the ROCm Composable
Kernel and Triton (AOTriton) ports, and eager attention (batched matmuls over the full s×s scores).

A fused kernel's rate is its measured share of the GPU's dense 16-bit peak at a long sequence,
per pass, mask and head dim (catalog/constants.json ``attention_kernels``), shaped by a fixed cost
of c blocks' work per 128-row query block: with n = ceil(s/128) blocks of keys per row block,

    non-causal: rate = plateau · n / (n + c)        causal: rate = plateau · n / (n + 1 + 2c)

(a causal row block i computes i + 1 blocks of which the diagonal one is half masked, n(n+1)/2
blocks in all for the n²/2 that the published FLOP count credits). Rates are in the FlashAttention
benchmarks' convention: forward 4·b·s²·h·d FLOPs, halved when causal, backward 2.5×.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuplan.catalog.constants import table
from gpuplan.catalog.frameworks import get_framework
from gpuplan.model.gemm import gemm_s

if TYPE_CHECKING:
    from gpuplan.model.compute import Device

KERNELS = ("flash2", "flash1", "flash1_triton", "cudnn", "flash3", "flash4", "sdpa_mem_efficient", "rocm_ck",
           "rocm_triton", "eager")
ROCM = ("cdna2", "cdna3", "cdna4")
# Transformer Engine prefers cuDNN's FusedAttention on Hopper and later (TE dot_product_attention/utils.py:
# "Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance reasons")
TE_FUSED_ATTENTION_ARCHS = ("hopper", "blackwell")
BWD_FLOPS = 2.5  # the backward's FLOPs over the forward's (five matmuls to two: Dao 2023)
# Eager attention's passes over the s×s scores are timed as measured (catalog/constants.json
# ``attention_kernels.eager``); a softmax alone (the memory-bound component's check) reads and writes
# 16-bit scores. Dropout reads the probabilities and writes them and a mask (2 x 3 B, 1.5x that
# backward: the model's count before the kernels were split out).
SOFTMAX_FWD_BYTES, FUSED_SOFTMAX_BWD_BYTES = 4.0, 6.0
DROPOUT_FWD_BYTES, DROPOUT_BWD_BYTES = 6.0, 9.0
# A soft-cap on the scores, cap·tanh(x/cap), as transformers' eager attention runs it (three elementwise kernels over
# the 16-bit scores: the division, tanh and the product, each reading and writing them: 3 x 4 B); backward the
# product's and the division's gradients (4 B each) and tanh's (reading dy and y, writing dx: 6 B)
SOFTCAP_FWD_BYTES, SOFTCAP_BWD_BYTES = 12.0, 14.0


def _doc() -> dict[str, Any]:
    return table("attention_kernels")  # type: ignore[return-value]


def runs_on(kernel: str, architecture: str) -> bool:
    """Whether the kernel runs on the architecture (the cited support lists); eager runs anywhere."""
    return kernel == "eager" or architecture in _doc()["kernels"][kernel]["runs_on"]


@lru_cache(maxsize=64)
def attention_kernel(framework: str, architecture: str, attention: str = "flash") -> str:
    """Which kernel runs the attention core. ``eager``: eager attention. On ROCm: the Composable Kernel
    port where the framework attends through flash-attn or Transformer Engine (flash-attn's ROCm
    default backend; TE's ROCm fused attention), else PyTorch SDPA's AOTriton kernels. On NVIDIA:
    FlashAttention v1 (or its Triton kernel, measured on Ampere) where asked and supported, cuDNN
    where Transformer Engine attends on Hopper or later, FlashAttention-2 elsewhere from sm80, and
    before sm80 (V100, T4) SDPA's memory-efficient kernel — the one fused kernel PyTorch runs there
    (flash and cuDNN need sm80+)."""
    if attention == "eager":
        return "eager"
    fact = get_framework(framework).attention_kernel.value
    if architecture in ROCM:
        return "rocm_ck" if fact in ("te-auto", "flash") else "rocm_triton"
    if attention == "flash1-triton" and runs_on("flash1_triton", architecture):
        return "flash1_triton"
    if attention in ("flash1", "flash1-triton"):  # the Triton kernel is measured on Ampere only: v1's rates elsewhere
        return "flash1" if runs_on("flash1", architecture) else "sdpa_mem_efficient"
    if fact == "te-auto" and architecture in TE_FUSED_ATTENTION_ARCHS:
        return "cudnn"
    return "flash2" if runs_on("flash2", architecture) else "sdpa_mem_efficient"


def _shape(n: int, c: float, causal: bool) -> float:
    """The share of the plateau rate reached with n key blocks per query row block."""
    return n / (n + 1 + 2 * c) if causal else n / (n + c)


def _peak16(gpu_id: str) -> float:
    from gpuplan.catalog.hardware import get_gpu

    g = get_gpu(gpu_id)
    return g.peak_flops.get("bf16") or g.peak_flops["fp16"]


@lru_cache(maxsize=32)
def _measured(kernel: str) -> dict[tuple[str, str, bool, int], float]:
    """{(architecture, pass, causal, head dim): plateau share} as measured (passes fwd, fwd_bwd)."""
    from gpuplan.catalog.hardware import get_gpu

    spec = _doc()["kernels"][kernel]
    c, block = spec["row_block_cost"], _doc()["block"]
    out = {}
    for r in spec.get("measured", ()):
        arch = get_gpu(r["gpu"]).architecture
        share = r["tflops"] * 1e12 / _peak16(r["gpu"]) / _shape(math.ceil(r["seq"] / block), c, r["causal"])
        out[(arch, r["pass"], r["causal"], r["head_dim"])] = share
    return out


def _lookup(kernel: str, arch: str, pass_: str, causal: bool, hd: int) -> float | None:
    """A measured plateau share, interpolated in log2 head dim and clamped; the other mask's where
    this one is not measured; None if the architecture has no measurement of the pass."""
    rows = _measured(kernel)
    for mask in (causal, not causal):
        hds = sorted(h for (a, p, cz, h) in rows if (a, p, cz) == (arch, pass_, mask))
        if hds:
            lo = max([h for h in hds if h <= hd], default=hds[0])
            hi = min([h for h in hds if h >= hd], default=hds[-1])
            if lo == hi:
                return rows[(arch, pass_, mask, lo)]
            w = (math.log2(hd) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return rows[(arch, pass_, mask, lo)] ** (1 - w) * rows[(arch, pass_, mask, hi)] ** w
    return None


@lru_cache(maxsize=1024)
def plateau(kernel: str, architecture: str, pass_: str, causal: bool, head_dim: int) -> float:
    """The kernel's long-sequence share of the dense 16-bit peak for one pass (``fwd`` or ``bwd``)."""
    spec = _doc()["kernels"][kernel]
    arch = architecture if any(k[0] == architecture for k in _measured(kernel)) else \
        spec.get("borrow", {}).get(architecture, next(iter(_measured(kernel)))[0])
    f, fb = (_lookup(kernel, arch, p, causal, head_dim) for p in ("fwd", "fwd_bwd"))
    if f is None:  # forward + backward only: split at the backward/forward ratio of ``split_as`` (or its own)
        rho = _ratio(spec.get("split_as", kernel), causal, head_dim)
        return fb * (1 + BWD_FLOPS / rho) / (1 + BWD_FLOPS) * (1.0 if pass_ == "fwd" else rho)
    if pass_ == "fwd":
        return f
    if fb is not None:  # both passes measured: the backward is what the forward leaves of the total
        return BWD_FLOPS / ((1 + BWD_FLOPS) / fb - 1 / f)
    if "bwd_times" in spec:
        other, factor = spec["bwd_times"]
        return factor * plateau(other, arch, "bwd", causal, head_dim)
    return f * _ratio(spec["bwd_ratio_as"], causal, head_dim)


def _ratio(kernel: str, causal: bool, head_dim: int) -> float:
    """A kernel's backward/forward plateau ratio where both passes are measured (its first such architecture)."""
    arch = next(a for (a, p, _, _) in _measured(kernel) if p == "fwd")
    return plateau(kernel, arch, "bwd", causal, head_dim) / plateau(kernel, arch, "fwd", causal, head_dim)


def attention_core_s(dev: Device, kernel: str, causal: bool, pass_: str, *, tokens: float, seq: int, heads: float,
                     head_dim: int, v_head_dim: int | None = None, dropout: float = 0.0,
                     fused_softmax: bool = False, softcap: bool = False) -> float:
    """Seconds of the attention core on ``dev`` with ``kernel`` for one pass (``fwd``, ``bwd`` or
    ``fwd_bwd``): ``tokens`` tokens in sequences of ``seq``, ``heads`` query heads of ``head_dim``
    (values ``v_head_dim``). A fused kernel runs its FLOPs at its measured rate for the pass, mask,
    head dim and sequence (never above the GPU's best GEMM share), times the step's sustained share.
    ``fused_softmax``: eager attention as Megatron runs it (``_eager_s``); ``softcap``: the scores soft-capped
    (Gemma 2; a fused kernel caps them inside, eager runs three more passes)."""
    if pass_ == "fwd_bwd":
        kw = {"tokens": tokens, "seq": seq, "heads": heads, "head_dim": head_dim, "v_head_dim": v_head_dim,
              "dropout": dropout, "fused_softmax": fused_softmax, "softcap": softcap}
        return sum(attention_core_s(dev, kernel, causal, p, **kw) for p in ("fwd", "bwd"))
    vd = v_head_dim or head_dim
    if kernel == "eager":
        return _eager_s(dev, causal, pass_ == "bwd", tokens, seq, heads, head_dim, vd, dropout, fused_softmax,
                        softcap)
    flops = 2 * tokens * seq * heads * (head_dim + vd) / (2 if causal else 1) * (BWD_FLOPS if pass_ == "bwd" else 1)
    share = min(rate(kernel, dev.arch, pass_, causal, head_dim, seq), dev.gemm16.burst)
    return flops / (dev.peak16 * dev.sustain * share)


def rate(kernel: str, architecture: str, pass_: str, causal: bool, head_dim: int, seq: int) -> float:
    """A fused kernel's share of the dense 16-bit peak for one pass at sequence ``seq``: the plateau
    shaped by the per-row-block cost, never above the rate measured at the longest published sequence."""
    spec, block = _doc()["kernels"][kernel], _doc()["block"]
    ref = math.ceil(max(r["seq"] for r in spec["measured"]) / block)
    c = spec["row_block_cost"]
    return plateau(kernel, architecture, pass_, causal, head_dim) * _shape(min(math.ceil(seq / block), ref), c, causal)


def _eager_s(dev: Device, causal: bool, backward: bool, tokens: float, seq: int, heads: float, head_dim: int,
             v_head_dim: int, dropout: float, fused_softmax: bool = False, softcap: bool = False) -> float:
    """Eager attention: Q·Kᵀ and P·V as batched GEMMs over the full s×s scores whatever the mask — the
    backward's four (dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q) —, the passes over the scores, and
    the copies that lay out the activations for the batched GEMMs and back, each kernel with its fixed time.

    As PyTorch runs it (the FlashAttention benchmarks' baseline; Hugging Face eager attention has the
    same passes): softmax, the causal mask's add and the softmax backward at their measured cost per
    score element (``attention_kernels.eager``); copies of q, k, v forward, of dO, the scaling of dQ and
    dK and the stacking of dQ, dK, dV backward. With ``fused_softmax`` (Megatron-LM's
    FusedScaleMaskSoftmax over baddbmm of strided views): one kernel that reads the scores and writes
    the probabilities (4 B), its backward reading P and dP and writing dS (6 B), and only the context's
    permute copied each way."""
    spec = _doc()["eager"]
    per_score, copy = spec["score_pass_bytes"], spec["layout_copy_bytes"]
    bh = heads * tokens / seq  # score matrices: sequences × heads
    pv = gemm_s(seq, v_head_dim, seq, dev.gemm16, 2.0, bh)
    if backward:
        gemms = (gemm_s(seq, seq, v_head_dim, dev.gemm16, 2.0, bh) + pv
                 + 2 * gemm_s(seq, head_dim, seq, dev.gemm16, 2.0, bh))
        passes = [FUSED_SOFTMAX_BWD_BYTES if fused_softmax else per_score["softmax_bwd"]]
        passes += [DROPOUT_BWD_BYTES] if dropout else []
        passes += [SOFTCAP_BWD_BYTES / 3] * 3 if softcap else []
        copied, copies = (v_head_dim, 1) if fused_softmax else (4 * head_dim + 2 * v_head_dim, 4)
    else:
        gemms = gemm_s(seq, seq, head_dim, dev.gemm16, 2.0, bh) + pv
        passes = [SOFTMAX_FWD_BYTES] if fused_softmax else \
            [per_score["softmax_fwd"]] + ([per_score["mask_add"]] if causal else [])
        passes += [DROPOUT_FWD_BYTES] if dropout else []
        passes += [SOFTCAP_FWD_BYTES / 3] * 3 if softcap else []
        copied, copies = (v_head_dim, 1) if fused_softmax else (2 * head_dim + v_head_dim, 3)
    moved = bh * seq * seq * sum(passes) + copy * tokens * heads * copied
    return gemms + moved / dev.bw + (len(passes) + copies) * dev.floor_s
