"""Compute on one GPU: the achievable rates of a device, and the time of one transformer layer's
forward, backward and recomputation.

* matmuls: model/gemm.py — the GEMM library's tiles, waves and K splits at the GPU's measured
  best-shape rate (MAMF), interpolated along the measured shape sweep where the catalogue has one;
  the backward pass runs two matmuls (input and weight gradient) of the same shape;
* attention core: model/attention.py — the kernel that runs on the GPU under the framework, at its
  measured rate by pass, mask, head dim and sequence (eager: batched matmuls and the softmax);
* memory-bound work (norms, residual adds, activation, RoPE, the loss, fp8 casts): the bytes the
  framework's kernels move (model/software.py) at the GPU's measured streaming bandwidth
  (``hbm_stream_share``), plus a measured fixed time per kernel (``kernel_floor_s``);
* under fp8, the linear layers' matmuls at the fp8 rate plus their recipe's casts, transposes and
  rescales at memory bandwidth (model/fp8.py); the LM head and attention stay 16-bit.
Microbenchmarks measure burst rates; a training step's tensor-core kernels sustain a share of them
(``Device.sustain``, ``step_sustain``): the clocks under the power limit, measured per architecture (MSMF / MAMF,
catalog/matmul.py ``sustained_ratio``), times ``gemm_share_of_mamf`` for the rest (fitted end to end).
Every constant is in catalog/constants.json or catalog/matmul.json, with its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from gpuplan.catalog.constants import constant, table
from gpuplan.catalog.frameworks import fp8_recipe_of
from gpuplan.catalog.matmul import sustained_ratio
from gpuplan.model.adapters import Adapters, AdapterWork, adapter_work, adapters_of
from gpuplan.model.amp import amp_cast_bytes
from gpuplan.model.attention import attention_core_s, attention_kernel
from gpuplan.model.flops import expert_imbalance, layer_matmul_flops, recomputed_matmul_flops
from gpuplan.model.fp8 import CastWork, Fp8Scheme, fp8_cast_bytes, fp8_cast_work, fp8_scheme, fp8_tp_gather
from gpuplan.model.gemm import GemmKernel, gemm_kernel, gemm_s
from gpuplan.model.kept import amp_of
from gpuplan.model.quantized import base_pass_bytes
from gpuplan.model.recompute_modules import modules_of, recomputed_stream_bytes
from gpuplan.model.software import MATMULS_PER_BLOCK, Software, software_of
from gpuplan.model.ssm import scan_s, stream_bytes
from gpuplan.spec import GPU, Hardware, LayerGroup, Layout, ModelSpec, Training
from gpuplan.spec._value import ValueHashed, seal
from gpuplan.spec.job import FP4_GEMM, FP4_RECIPES

__all__ = ["Device", "LayerTime", "attention_kernel", "attention_s", "device", "expert_imbalance", "fp8_cast_bytes",
           "fp8_scheme", "fp8_tp_gather", "layer_time", "matmul_s", "streamed_s", "unsupported_precision"]
# fp4 (NVFP4): an E2M1 element (0.5 B) and its share of one E4M3 block scale per 16; mxfp4: of one E8M0 scale per 32
ELEMENT_BYTES = {"fp4": 0.5625, "mxfp4": 0.53125, "fp8": 1.0, "bf16": 2.0, "fp16": 2.0, "tf32": 4.0, "fp32": 4.0}


@dataclass(frozen=True, slots=True, eq=False)
class Device(ValueHashed):
    peak: float          # dense FLOP/s for the matmul precision (clock-scaled under a power cap)
    e_gemm: float        # the most of ``peak`` a step's GEMM reaches: best-shape share x ``sustain``
    gemm: GemmKernel     # the linears' GEMMs at this precision
    gemm16: GemmKernel   # 16-bit GEMMs (attention runs in 16-bit, even under fp8)
    bw: float            # achievable HBM bytes/s (a streaming copy's share of the datasheet)
    floor_s: float       # fixed time of one short memory-bound kernel
    arch: str
    peak16: float        # dense 16-bit FLOP/s
    attn_kernel: str     # the kernel that runs the attention core (model/attention.py)
    sustain: float       # share of the burst (microbenchmark) rates a training step sustains
    elem: float = 2.0    # bytes per element of a matmul operand
    peak32: float = 0.0  # fp32 FLOP/s of the vector units (FMA = 2; clock-scaled): a non-matmul kernel's arithmetic
    # hashed once (spec/_value.py): the step model's memo tables key on devices ~10^5 times a plan
    _hash: tuple = field(init=False, default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        seal(self)


# Tensor cores that scale fp8 in 32-element blocks (OCP MX): NVIDIA Blackwell (5th-generation tensor
# cores, "Blackwell Architecture Technical Brief": MXFP8/MXFP6/MXFP4) and AMD CDNA4 (MI350 series,
# "AMD CDNA 4 Architecture" white paper: MXFP8, MXFP6, MXFP4). Hopper and CDNA3 have none.
MX_ARCHITECTURES = ("blackwell", "cdna4")


def unsupported_precision(g: GPU, precision: str, fp8_recipe: str | None = None) -> str | None:
    """Why ``g`` cannot train in ``precision`` (its catalogue lists compute peaks, none for that
    number format) or with ``fp8_recipe`` (mxfp8 needs block-scaled tensor cores), or None. A GPU
    with no published peaks at all is left to the memory estimate."""
    if not g.peak_flops:
        return None
    need = {"fp8": ("fp8",), "bf16": ("bf16",), "bf16-pure": ("bf16",), "fp16": ("fp16",),
            "fp32": ("tf32", "fp32")}[precision]
    if precision == "fp8" and fp8_recipe in FP4_RECIPES:
        return _fp4_problem(g, fp8_recipe)
    if any(k in g.peak_flops for k in need):
        if precision == "fp8" and fp8_recipe == "mxfp8" and g.architecture not in MX_ARCHITECTURES:
            return (f"{g.id} ({g.architecture}) has no MX block-scaled tensor cores for fp8_recipe mxfp8 (Blackwell, "
                    f"CDNA4): drop fp8_recipe (the framework's default) or choose a Blackwell GPU")
        return None
    alt = "bf16" if precision == "fp8" and "bf16" in g.peak_flops else "fp16"
    what = {"fp8": "fp8 tensor cores (Hopper, Ada L4/L40S, Blackwell, MI300)", "bf16": "bf16 tensor cores",
            "bf16-pure": "bf16 tensor cores", "fp16": "fp16 tensor cores", "fp32": "an fp32/tf32 peak"}[precision]
    return f"{g.id} has no {what} in the catalogue: set training.precision: {alt}"


def _fp4_problem(g: GPU, recipe: str) -> str | None:
    """Why ``g`` cannot run a 4-bit recipe: NVFP4 needs NVIDIA Blackwell's FP4 tensor cores (E4M3 block scales),
    MXFP4 any block-scaled FP4 tensor cores (Blackwell, CDNA4); None where it can."""
    ok = "fp4" in g.peak_flops and g.architecture in MX_ARCHITECTURES and (recipe != "nvfp4" or g.vendor == "nvidia")
    if ok:
        return None
    where = "NVIDIA Blackwell" if recipe == "nvfp4" else "Blackwell or CDNA4"
    return (f"{g.id} ({g.architecture}) has no {recipe} tensor cores in the catalogue (FP4 with block scales: "
            f"{where}): set training.precision: fp8 or bf16, or choose a Blackwell GPU")


def device(hw: Hardware, training: Training, precision: str | None = None) -> Device:
    """The GPU's achievable rates for this precision (or ``precision``) and power cap (cached by value); a 4-bit
    recipe (``FP4_RECIPES``) runs its GEMMs at the fp4 peak."""
    kernel = attention_kernel(training.framework, hw.gpu.architecture, training.attention)
    if precision is None and training.precision == "fp8" and training.fp8_recipe in FP4_GEMM:
        precision = FP4_GEMM[training.fp8_recipe]
    if precision is None and training.precision == "fp32" and training.tf32:
        precision = "tf32"
    return _device(hw.gpu, hw.power_limit_w, precision or training.precision, kernel, step_sustain(hw.gpu))


def step_sustain(g: GPU) -> float:
    """The share of its microbenchmarked burst rates a training step's tensor-core kernels sustain on ``g``: the
    architecture's measured sustained-to-burst matmul ratio (clocks under the power limit, MSMF / MAMF:
    catalog/matmul.py ``sustained_ratio``) times ``gemm_share_of_mamf`` (what the step loses beyond the clocks —
    shapes away from the best one, concurrent kernels: fitted end to end)."""
    return constant("gemm_share_of_mamf") * sustained_ratio(g.architecture)


def hbm_bytes_per_s(g: GPU) -> float:
    """Achievable HBM bandwidth: the datasheet's times the measured streaming-copy share of the GPU,
    else of its architecture, else the median measured share (``hbm_stream_share``)."""
    shares = table("hbm_stream_share")
    share = shares.get(g.id) or shares.get(g.architecture) or shares["default"]
    return g.memory_bw_bytes_per_s * share


def kernel_floor_s(g: GPU) -> float:
    """Fixed time of one short memory-bound kernel on ``g`` (``kernel_floor_s``: by GPU id, else
    architecture, else the default)."""
    floors = table("kernel_floor_s")
    return float(floors.get(g.id) or floors.get(g.architecture) or floors["default"])


@lru_cache(maxsize=256)
def _device(g: GPU, power_limit_w: float | None, precision: str, kernel: str = "flash2",
            sustain: float = 1.0) -> Device:
    # fp32 runs its matmuls on the vector units (PyTorch leaves TF32 off: torch.backends.cuda.matmul.allow_tf32 =
    # False since 1.12); tf32 (Training.tf32) on the TF32 tensor cores where the GPU has them
    prec = {"bf16-pure": "bf16", "fp16": "fp16"}.get(precision, precision)
    if prec == "tf32" and "tf32" not in g.peak_flops:
        prec = "fp32"  # no tf32 tensor cores (V100, MI250X): fp32 on the vector units
    peak_key = "fp4" if prec == "mxfp4" else prec  # MXFP4 runs on the FP4 tensor cores, its own measured share
    if peak_key not in g.peak_flops:
        prec = peak_key = "fp16" if "fp16" in g.peak_flops else "fp32"
    peak = g.peak_flops.get(peak_key) or g.peak_flops.get("fp32") or 1.0
    # dynamic power ~ f·V² with V ~ f under DVFS, so f ~ P^(1/3) (estimate; clock-bound work only)
    clock = (power_limit_w / g.tdp_w) ** (1 / 3) if power_limit_w and g.tdp_w and power_limit_w < g.tdp_w else 1.0
    bw = hbm_bytes_per_s(g)
    gemm = gemm_kernel(g, prec, peak * clock, bw, sustain)
    half = (g.peak_flops.get("bf16") or g.peak_flops.get("fp16") or peak) * clock
    gemm16 = gemm if prec in ("bf16", "fp16") else gemm_kernel(g, "bf16", half, bw, sustain)
    return Device(peak=peak * clock, e_gemm=gemm.burst * sustain, gemm=gemm, gemm16=gemm16, bw=bw,
                  floor_s=kernel_floor_s(g), arch=g.architecture, peak16=half, attn_kernel=kernel, sustain=sustain,
                  elem=ELEMENT_BYTES.get(prec, 2.0), peak32=(g.peak_flops.get("fp32") or 0.0) * clock)


def matmul_s(m: float, n: float, k: float, dev: Device, elem: float | None = None, batch: float = 1.0) -> float:
    """Seconds of ``batch`` (m×k)·(k×n) matmuls in one GEMM kernel at ``dev``'s rates (model/gemm.py)."""
    return gemm_s(m, n, k, dev.gemm, dev.elem if elem is None else elem, batch)


def streamed_s(nbytes: float, kernels: float, dev: Device) -> float:
    """Seconds of memory-bound work: ``nbytes`` at the achievable bandwidth plus each kernel's fixed time."""
    return nbytes / dev.bw + kernels * dev.floor_s


def fp8_cast_s(work: CastWork, s: Fp8Scheme, dev: Device) -> tuple[float, float]:
    """(forward, backward) seconds of fp8 scaling work: its bytes at the recipe's share of the streaming bandwidth
    (``Fp8Scheme.share``), each kernel's fixed time beside them."""
    return (streamed_s(work.fwd_bytes / s.share, work.fwd_kernels, dev),
            streamed_s(work.bwd_bytes / s.share, work.bwd_kernels, dev))


def sp_layout_copies_s(act_bytes: float, gathered: float, micro_batch: int, dev: Device) -> float:
    """The copies one sequence-parallel all-gather and reduce-scatter make where the activations are sharded on a
    dimension past the first (catalog.framework_comm.sp_layout_copies): the reduce-scatter's whole input rearranged
    into contiguous chunks before the collective, the all-gather's whole output after it (a view instead where the
    local micro-batch is 1) — each read and written once, a memory-bound kernel at the streaming rate."""
    copied = act_bytes + (gathered if micro_batch > 1 else 0.0)
    return streamed_s(2 * copied, 1 + (micro_batch > 1), dev)


@dataclass(frozen=True, slots=True)
class LayerTime:
    fwd: float
    bwd: float
    recompute: float
    mm: float = 0.0  # the forward's weight matmuls (what async tensor parallelism hides its collectives behind)
    scan: float = 0.0  # forward and backward of a recurrent mixer's scan, at a borrowed kernel rate (interval widened)
    adapters: float = 0.0  # of fwd, the LoRA adapters' (DoRA's rebuild too): what a frozen reference's forward skips


def layer_time(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, lay: Layout, tr: Training,
               dev: Device, dev16: Device | None = None, microbatches: int = 1) -> LayerTime:
    """One layer, one micro-batch of ``tokens`` local tokens, on one rank. Under fp8 (``dev16`` the
    same GPU in bf16) the block's linear layers run the run's fp8 recipe (``fp8_scheme``; a weight
    cast once per step is spread over the step's ``microbatches``); without ``dev16`` the layer runs
    at ``dev``'s rates with no fp8 work (runtime.step_time decides which)."""
    sw = software_of(tr, m)
    args = (m, lg, tokens, seq, lay.tp, lay.ep, lay.sequence_parallel, lay.recompute_mode, tr.attention, tr.dropout,
            tr.method, sw, amp_of(tr, lay), microbatches > 1)
    # async TP / --tp-comm-overlap: each all-gather's and reduce-scatter's matmul runs as tp pieces of tokens / tp
    chunks = lay.tp if lay.tp_overlap and lay.tp > 1 else 1
    ad = adapters_of(tr, lay.zero)
    if tr.precision != "fp8" or dev16 is None:
        return _layer_time(*args, None, dev, None, lay.folded_etp, chunks, ad)
    scheme = fp8_scheme(fp8_recipe_of(tr), tr.framework, tr.compile, lay.tp, lay.sequence_parallel,
                        microbatches)
    return _layer_time(*args, scheme, dev, dev16, lay.folded_etp, chunks, ad)


def _matmuls(m: ModelSpec, lg: LayerGroup, tokens: float, tp: int, ep: int, dev: Device,
             grouped: bool = True, etp: int | None = None, chunks: int = 1) -> tuple[float, float]:
    """(forward seconds of the layer's weight matmuls, of its 2nd, 4th … ones). Expert matmuls run
    at the busiest expert-parallel rank's pace (``expert_imbalance``), the rank's experts in one
    grouped GEMM or, where the framework loops over them (``grouped`` False), one GEMM each; folded
    (``etp`` 1, Layout.folded_etp), each rank routes its sequence-parallel shard to whole experts."""
    mm_f = every_other = 0.0
    etp = tp if etp is None else etp
    routed = tokens * etp / tp  # the tokens a rank routes: its tensor-parallel group's, or its own shard folded
    busiest = expert_imbalance(routed, m.top_k, ep) if lg.moe else 1.0
    mats = [w for w in lg.weights if w.is_matrix and w.group in ("attention", "mlp", "shared_expert", "expert",
                                                                  "router")]
    for i, w in enumerate(mats):
        out_f, in_f = w.shape
        if w.group == "expert":
            per_expert_tokens = routed * m.top_k * ep / m.n_experts * busiest
            local = w.count / ep
            t = matmul_s(per_expert_tokens, out_f / etp, in_f, dev, batch=local) if grouped else \
                matmul_s(per_expert_tokens, out_f / etp, in_f, dev) * local
        elif w.group == "router":
            t = matmul_s(tokens, out_f, in_f, dev)
        else:  # ``chunks`` pieces of tokens / chunks rows each where a collective is decomposed under them
            t = matmul_s(tokens / chunks, out_f / tp, in_f, dev) * w.count * chunks
        mm_f += t
        if i % 2 == 1:
            every_other += t
    return mm_f, every_other


def attention_s(m: ModelSpec, tokens: float, seq: int, tp: int, dropout: float, dev: Device,
                fused_softmax: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's causal attention core over ``tokens`` local tokens,
    on the kernel ``dev`` runs it with (model/attention.py); ``fused_softmax``: eager attention's scale,
    mask and softmax run as one kernel (``Software.fused_softmax``)."""
    heads = m.n_heads / tp
    args = (dev, dev.attn_kernel, True)
    kw = {"tokens": tokens, "seq": seq, "heads": heads, "head_dim": m.head_dim, "v_head_dim": m.v_head_dim,
          "dropout": dropout, "fused_softmax": fused_softmax, "softcap": m.attn_softcap > 0}
    return attention_core_s(*args, "fwd", **kw), attention_core_s(*args, "bwd", **kw)


# a gated short convolution's forward memory traffic per token per hidden unit (LFM2's Lfm2ShortConv): B·x reads two
# and writes one, the depthwise convolution reads and writes one, C·y reads two and writes one — 8 elements of 2 B
CONV_MIXER_BYTES = 16.0


@dataclass(frozen=True, slots=True)
class _Mixer:
    """A block's token-mixing core (forward, backward seconds), its forward memory-bound bytes per token and
    kernels, the seconds of its recurrent scan (forward and backward) and of its attention's forward."""

    fwd: float = 0.0
    bwd: float = 0.0
    nbytes: float = 0.0
    kernels: float = 0.0
    scan: float = 0.0
    attention_fwd: float = 0.0


def _mixer_s(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, tp: int, dropout: float, sw: Software,
             dev: Device, dev16: Device | None) -> _Mixer:
    """Softmax attention with its rotary embedding, a recurrent layer's chunked scan with its convolution and
    gated norm (model/ssm.py, in 16-bit under fp8 too), both side by side (Falcon-H1), or nothing (an MLP-only
    block)."""
    f = b = nbytes = 0.0
    if lg.mixer == "conv":  # B·x, the depthwise causal convolution, C·y: 16-bit reads and writes of width h each
        return _Mixer(nbytes=CONV_MIXER_BYTES * m.hidden / tp, kernels=3.0)
    if lg.attends:
        f, b = attention_s(m, tokens, seq, tp, dropout, dev, sw.fused_softmax)
        nbytes = sw.per_qk * (m.n_heads + max(m.n_kv_heads / tp, 1)) * m.head_dim / tp
    if not lg.scan:
        return _Mixer(f, b, nbytes, 0.0, 0.0, f)
    sf, sb = scan_s(m, lg.scan, tokens, tp, dev16 or dev)
    s_bytes, s_kernels = stream_bytes(m, lg.scan, tp)
    return _Mixer(f + sf, b + sb, nbytes + s_bytes, float(s_kernels), sf + sb, f)


@lru_cache(maxsize=65536)
def _layer_time(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, tp: int, ep: int, sp: bool,
                recompute: str, attention: str, dropout: float, method: str, sw: Software, amp: bool,
                accumulating: bool, fp8: Fp8Scheme | None, dev: Device, dev16: Device | None,
                etp: int | None = None, chunks: int = 1, ad: Adapters | None = None) -> LayerTime:
    # forward and input-gradient matmuls: decomposed into ``chunks`` under an overlapped tp collective
    mm_f, every_other = _matmuls(m, lg, tokens, tp, ep, dev, sw.grouped_experts, etp, chunks)
    # the weight-gradient matmuls, whole: in bf16 under rowwise_with_gw_hp, else at the forward's rates
    w_dev = dev16 if fp8 and fp8.grad_weight_hp and dev16 else dev
    mm_w = mm_f if w_dev is dev and chunks == 1 else _matmuls(m, lg, tokens, tp, ep, w_dev, sw.grouped_experts, etp)[0]
    mix = _mixer_s(m, lg, tokens, seq, tp, dropout, sw, dev, dev16)
    att_f, att_b = mix.fwd, mix.bwd
    f_local = ((m.moe_ffn * m.top_k + m.shared_ffn) if lg.moe else m.ffn) if lg.mlp else 0.0
    # the block's norms and residual adds (per branch: a hybrid's blocks may have one), its MLP activation
    per_token = (sw.per_h * m.hidden * (1 / tp if sp else 1.0) * lg.sublayers / 2
                 + (sw.per_f_gated if m.gated_mlp else sw.per_f_plain) * f_local / tp + mix.nbytes)
    # memory-bound kernels: the block's, less its matmuls and the attention core (timed above)
    kernels = (sw.kernels - MATMULS_PER_BLOCK - 1) * lg.sublayers / 2 + mix.kernels
    if lg.moe:
        copies, copy_kernels = _dispatch_copies(m)
        per_token, kernels = per_token + copies, kernels + copy_kernels
    elem_f = streamed_s(tokens * per_token, kernels, dev)
    cast_f, cast_b = fp8_cast_s(fp8_cast_work(m, lg, tokens, tp, ep, fp8, method, etp), fp8, dev) if fp8 else (0.0, 0.0)
    if amp:  # PyTorch AMP over fp32 weights: the weight and input casts (model/amp.py)
        c = amp_cast_bytes(m, lg, tokens, accumulating)
        cast_f += streamed_s(c.fwd_bytes, c.fwd_kernels, dev)
        cast_b += streamed_s(c.bwd_bytes, c.bwd_kernels, dev)
    q = base_pass_bytes(m, lg, tp, ep, method, ad.stream if ad else 2.0)  # a quantized base (model/quantized.py)
    q8_f, q8_b = streamed_s(tokens * q.per_token, q.kernels, dev) + q.fwd / dev.bw, q.bwd / dev.bw
    if q.fp32_dgrad and dev.peak32:  # lora-int8's fp32 input gradients, beyond their 16-bit time in mm_f
        q8_b += sum(c * max(0.0, 2 * tokens * n * k / dev.peak32 - matmul_s(tokens, k, n, dev)) for n, k, c in
                    q.fp32_dgrad)
    # a LoRA/QLoRA layer's adapters (model/adapters.py), in 16 bits under fp8 too
    ad_f, ad_b = adapters_s(adapter_work(lg, ad, tp), tokens, dev16 or dev) if ad is not None else (0.0, 0.0)
    fwd = mm_f + att_f + elem_f + cast_f + q8_f + ad_f
    # backward: input- and weight-gradient matmuls; a frozen LoRA/QLoRA base needs only the input's
    bwd = mm_f + (mm_w if method == "full" else 0.0) + att_b + 2 * elem_f + cast_b + q8_b + ad_b
    # the attention core's forward again, whatever its kernel: a checkpointed core reruns it in backward (Megatron-Core
    # attention.py _checkpointed_attention_forward around the core, flash or not — with flash it saves little memory)
    core_f = mix.attention_fwd
    modules = modules_of(recompute) if recompute.startswith("selective:") else None
    if modules is not None:  # Megatron-Core's recompute_modules (model/recompute_modules.py)
        rec = _modules_s(m, lg, modules, tokens, tp, sp, mm_f, dev) + (core_f if "core_attn" in modules else 0.0)
    else:
        rec = {"none": 0.0, "selective": core_f, "selective-op": every_other + elem_f, "full": fwd}[recompute]
    return LayerTime(fwd, bwd, rec, mm_f, mix.scan, ad_f)


def _modules_s(m: ModelSpec, lg: LayerGroup, modules: frozenset[str], tokens: float, tp: int, sp: bool, mm_f: float,
               dev: Device) -> float:
    """Seconds of the named modules' forward run again in backward: their matmuls at the block's matmul pace (their
    share of its forward matmul FLOPs), their memory-bound kernels streamed (16-bit activations)."""
    total = layer_matmul_flops(m, lg)
    mm = mm_f * recomputed_matmul_flops(m, lg, modules) / total if total else 0.0
    per_token, kernels = recomputed_stream_bytes(m, lg, modules, tp, sp, 2.0)  # 16-bit activations
    if lg.moe and "moe" in modules:  # a whole MoE layer again: its dispatcher's copies too
        copies, copy_kernels = _dispatch_copies(m)
        per_token, kernels = per_token + copies, kernels + copy_kernels
    return mm + (streamed_s(tokens * per_token, kernels, dev) if kernels else 0.0)


def _dispatch_copies(m: ModelSpec) -> tuple[float, int]:
    """(bytes per token, kernels) of a MoE layer's memory-bound routing work: the token dispatcher's permute and
    unpermute (Megatron-Core moe_utils.permute/unpermute), each copying the hidden state of every routed token — read
    h, write top_k·h, and back —, and its kernels: router softmax/top-k, permute, unpermute, probability scaling."""
    return 2 * 2 * m.hidden * (1 + m.top_k), 4


def adapters_s(w: AdapterWork, tokens: float, dev: Device) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's LoRA adapters over ``tokens``: their thin GEMMs at the GEMM model's
    rates — an fp32 one (PEFT's fp32 adapters without autocast) no faster than the fp32 vector units
    (torch.backends.cuda.matmul.allow_tf32 is off by default) — and their memory-bound kernels streamed."""
    def gemm(m: float, n: float, k: float, count: float, elem: float) -> float:
        t = matmul_s(m, n, k, dev, elem)
        if elem == 4.0 and dev.peak32:
            t = max(t, 2 * m * n * k / dev.peak32)
        return t * count

    fwd = sum(gemm(tokens, n, k, c, e) for n, k, c, e in w.fwd_gemms)
    if w.per_pass is not None:  # DoRA's weight rebuild: per forward pass, whatever the tokens (model/dora.py)
        fwd += sum(gemm(m, n, k, c, e) for m, n, k, c, e in w.per_pass.gemms) \
            + streamed_s(w.per_pass.nbytes, w.per_pass.kernels, dev)
    bwd = sum(gemm(tokens, n, k, c, e) for n, k, c, e in w.dgrad_gemms) \
        + sum(gemm(m, n, tokens, c, e) for m, n, c, e in w.wgrad_gemms)
    return (fwd + streamed_s(tokens * w.fwd_bytes, w.fwd_kernels, dev),
            bwd + streamed_s(tokens * w.bwd_bytes, w.bwd_kernels, dev))


def kernel_device(g: GPU, precision: str, attention_kernel_id: str = "flash2") -> Device:
    """``g``'s rates for one kernel run alone, as a microbenchmark times it: burst rates (no sustained
    share), no power cap — what validation/components.json measures."""
    return _device(g, None, precision, attention_kernel_id, 1.0)
