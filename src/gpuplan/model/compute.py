"""Compute on one GPU: the achievable rates of a device, roofline matmuls with wave quantization,
and the time of one transformer layer's forward, backward and recomputation.

* matmuls: roofline per weight matrix — max(2mnk / (peak · e_gemm), bytes / (HBM bw · e_bw))
  with e_gemm the achievable share of the dense peak for the GPU's architecture; the
  backward pass runs two matmuls (input and weight gradient) of the same shape;
* attention core: FlashAttention — causal FLOPs at e_attn (forward) and 2.5× the forward
  FLOPs at e_attn_bwd (Dao 2023: the backward runs five matmuls to the forward's two);
  eager attention: full s² matmuls at e_gemm plus the softmax's memory traffic;
* elementwise work (norms, residual adds, activation, RoPE, loss) at memory bandwidth;
* under fp8, the linear layers' matmuls at the fp8 rate plus their recipe's casts, transposes and
  rescales at memory bandwidth (``Fp8Scheme``); the LM head and attention stay 16-bit;
* kernel launches.
Every constant is in catalog/constants.json, with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.constants import constant, table
from gpuplan.catalog.frameworks import (
    fp8_gathers_tp,
    fp8_input_cast_shared,
    fp8_recipe_of,
    fp8_weight_cast_per_step,
    get_framework,
)
from gpuplan.catalog.matmul import fp8_scaling_costs, matmul_profile
from gpuplan.model.flops import attention_flops
from gpuplan.model.software import Software, software
from gpuplan.spec import GPU, Hardware, LayerGroup, Layout, ModelSpec, Training


@dataclass(frozen=True, slots=True)
class Device:
    peak: float      # dense FLOP/s for the matmul precision
    e_gemm: float
    bw: float        # achievable HBM bytes/s
    e_attn_f: float
    e_attn_b: float
    sms: int
    tile: tuple[int, int]


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
    if any(k in g.peak_flops for k in need):
        if precision == "fp8" and fp8_recipe == "mxfp8" and g.architecture not in MX_ARCHITECTURES:
            return (f"{g.id} ({g.architecture}) has no MX block-scaled tensor cores for fp8_recipe mxfp8 (Blackwell, "
                    f"CDNA4): drop fp8_recipe (the framework's default) or choose a Blackwell GPU")
        return None
    alt = "bf16" if precision == "fp8" and "bf16" in g.peak_flops else "fp16"
    what = {"fp8": "fp8 tensor cores (Hopper, Ada L4/L40S, Blackwell, MI300)", "bf16": "bf16 tensor cores",
            "bf16-pure": "bf16 tensor cores", "fp16": "fp16 tensor cores", "fp32": "an fp32/tf32 peak"}[precision]
    return f"{g.id} has no {what} in the catalogue: set training.precision: {alt}"


def device(hw: Hardware, training: Training, precision: str | None = None) -> Device:
    """The GPU's achievable rates for this precision (or ``precision``) and power cap (cached by value)."""
    return _device(hw.gpu, hw.power_limit_w, precision or training.precision,
                   attention_kernel(training.framework, hw.gpu.architecture))


TE_FUSED_ATTENTION_ARCHS = ("hopper", "blackwell")


@lru_cache(maxsize=64)
def attention_kernel(framework: str, architecture: str) -> str:
    """Which FlashAttention-class kernel runs the attention core: ``cudnn`` where the framework
    attends through Transformer Engine ('te-auto' in catalog/frameworks.json) on Hopper or later —
    TE's get_attention_backend disables FlashAttention 'to give FusedAttention preference on
    Hopper+ for performance reasons' (transformer_engine/pytorch/attention/dot_product_attention/
    utils.py), i.e. cuDNN's fused attention — else ``flash2`` (FlashAttention-2, PyTorch SDPA's
    flash backend)."""
    te = get_framework(framework).attention_kernel.value == "te-auto"
    return "cudnn" if te and architecture in TE_FUSED_ATTENTION_ARCHS else "flash2"


@lru_cache(maxsize=256)
def _device(g: GPU, power_limit_w: float | None, precision: str, kernel: str = "flash2") -> Device:
    prec = {"bf16-pure": "bf16", "fp16": "fp16", "fp32": "tf32"}.get(precision, precision)
    e = gemm_share(g.architecture, prec)
    if prec == "tf32" and "tf32" not in g.peak_flops:
        prec = "fp32"  # no tf32 tensor cores (V100, MI250X): fp32 on the vector units
    if prec not in g.peak_flops:
        prec = "fp16" if "fp16" in g.peak_flops else "fp32"
    peak = g.peak_flops.get(prec) or g.peak_flops.get("fp32") or 1.0
    if power_limit_w and g.tdp_w and power_limit_w < g.tdp_w:
        # dynamic power ~ f·V² with V ~ f under DVFS, so f ~ P^(1/3) (estimate; clock-bound work only)
        clock = (power_limit_w / g.tdp_w) ** (1 / 3)
        peak *= clock
    else:
        clock = 1.0
    att_all = table("attention_efficiency")
    att = att_all.get(g.architecture, att_all["default"])
    if kernel == "cudnn":
        att = table("fused_attention_efficiency").get(g.architecture, att)
    tiles = table("gemm_tile")
    half = (g.peak_flops.get("bf16") or g.peak_flops.get("fp16") or peak) * clock
    # attention runs in 16-bit even under fp8 training; express its efficiency on the matmul peak
    scale = half / peak
    # the FlashAttention-2 benchmarks' share of peak, times what of it a training step reaches (fitted);
    # never above the GEMM share: attention's matmuls are GEMMs with softmax work between them
    scale *= constant("attention_achieved_share")
    return Device(peak=peak, e_gemm=e, bw=g.memory_bw_bytes_per_s * constant("memory_bandwidth_efficiency"),
                  e_attn_f=min(att["forward"] * scale, e), e_attn_b=min(att["backward"] * scale, e),
                  sms=g.sm_count,
                  tile=tuple(tiles.get(g.architecture, tiles["default"])))


FLASH1_SLOWDOWN = 2.0
FLASH_BLOCK = 128  # FlashAttention-2's query/key block on A100/H100 for head dims <= 128 (Dao 2023, Sec. 3.3)


def attention_short_sequence_factor(seq: int) -> float:
    """How much longer a causal FlashAttention pass takes than its ideal FLOPs at the long-sequence
    rate: each of the n = ceil(s/128) query-row blocks carries a fixed cost (load Q, write O and its
    log-sum-exp, rescale) plus one fully computed diagonal block of which half is masked, and the
    rows' unequal work leaves the last wave part-idle — together ``k`` blocks' worth per row of
    n(n+1)/2 computed ones, so time ∝ 1 + k/n. Published sweeps show the shape: causal
    FlashAttention throughput rises with sequence length at fixed tokens and its causal/non-causal
    ratio goes as ~1/(1 + k/n) (cuDNN/FA4 on B200, flash-attention PR #2605: 0.64, 0.77, 0.87, 0.93,
    0.96 at 1k-16k); ``attention_row_block_cost`` (k) is fitted."""
    blocks = math.ceil(seq / FLASH_BLOCK)
    return 1 + constant("attention_row_block_cost") / blocks


def gemm_share(architecture: str, precision: str) -> float:
    """Achievable share of the dense peak for a training step's large GEMMs: the published maximum
    achievable matmul FLOPS of the architecture and precision (catalog/matmul.json: the best shape
    of a cuBLAS/hipBLASLt sweep, MAMF) times the share of it a training step sustains (clocks
    under power limits, concurrent kernels; ``gemm_share_of_mamf``, fitted). An architecture with
    no published sweep uses the ``gemm_efficiency`` estimate (fp16 and tf32 run at the bf16 share
    of their own peak; fp8 without a sweep at ``fp8_gemm_efficiency_ratio`` of it)."""
    lookup = "bf16" if precision in ("fp16", "tf32", "fp32") else precision
    prof = matmul_profile(architecture, lookup)
    if prof is not None:
        return prof.mamf_share * constant("gemm_share_of_mamf")
    base = matmul_profile(architecture, "bf16")
    e = base.mamf_share * constant("gemm_share_of_mamf") if base is not None else \
        table("gemm_efficiency").get(architecture, 0.7)
    return e * constant("fp8_gemm_efficiency_ratio") if lookup == "fp8" else e


def wave_efficiency(m: float, n: float, dev: Device) -> float:
    """Share of the SMs busy over a GEMM's waves of output tiles (wave quantization)."""
    tiles = math.ceil(m / dev.tile[0]) * math.ceil(n / dev.tile[1])
    return tiles / (math.ceil(tiles / dev.sms) * dev.sms)


def matmul_s(m: float, n: float, k: float, dev: Device, elem: float = 2.0, batch: float = 1.0) -> float:
    """Roofline time of ``batch`` (m×k)·(k×n) matmuls, with wave quantization."""
    flops = 2 * m * n * k * batch
    traffic = elem * (m * k + k * n + m * n) * batch
    eff = dev.e_gemm * wave_efficiency(m * batch, n, dev)
    return max(flops / (dev.peak * eff), traffic / dev.bw)


@dataclass(frozen=True, slots=True)
class LayerTime:
    fwd: float
    bwd: float
    recompute: float
    mm: float = 0.0  # the forward's weight matmuls (what async tensor parallelism hides its collectives behind)


def layer_time(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, lay: Layout, tr: Training,
               dev: Device, dev16: Device | None = None, microbatches: int = 1) -> LayerTime:
    """One layer, one micro-batch of ``tokens`` local tokens, on one rank. Under fp8 (``dev16`` the
    same GPU in bf16) the block's linear layers run the run's fp8 recipe (``fp8_scheme``; a weight
    cast once per step is spread over the step's ``microbatches``); without ``dev16`` the layer runs
    at ``dev``'s rates with no fp8 work (runtime.step_time decides which)."""
    sw = software(tr.framework, tr.compile, m)
    args = (m, lg, tokens, seq, lay.tp, lay.ep, lay.sequence_parallel, lay.recompute, tr.attention, tr.dropout,
            tr.method, sw)
    if tr.precision != "fp8" or dev16 is None:
        return _layer_time(*args, None, dev, None)
    scheme = fp8_scheme(fp8_recipe_of(tr), tr.framework, tr.compile, lay.tp, lay.sequence_parallel,
                        microbatches)
    return _layer_time(*args, scheme, dev, dev16)


@dataclass(frozen=True, slots=True)
class Fp8Scheme:
    """What one fp8 recipe costs around each linear layer, beyond its matmuls at the fp8 rate.

    * ``act`` / ``weight``: bytes read and written per element of a matmul input or output
      gradient / of a weight (both fwd+bwd) by the amax, cast and transpose kernels — torchao's
      roofline of its own kernels per recipe and tensor role (catalog/matmul.json
      ``fp8_scaling_overhead``; the input's first read fused into the producing op under
      torch.compile), Transformer Engine's one read + one write for delayed scaling;
    * ``rescale``: rowwise scaling runs the two backward GEMMs (slow accumulation) as cuBLAS
      tensorwise GEMMs and applies the row and column scales to their output in a separate kernel
      — read and write the bf16 output, 4 B per element (torchao float8_ops.addmm_float8_unwrapped:
      "the rowwise CUTLASS-based kernel is so slow without fast-accum", pytorch/ao PR #1325; the
      extra kernel per GEMM, pytorch/ao issue #2184, 2025);
    * ``grad_weight_hp``: rowwise_with_gw_hp keeps the weight-gradient GEMM in bf16 (torchao
      roofline_utils.get_gemm_time_sympy);
    * ``shard_cast``: where the framework's sequence-parallel all-gathers carry fp8
      (frameworks.json ``fp8_recipe.tp_all_gather``: torchtitan's Float8ColwiseParallel /
      Float8RowwiseParallel for tensorwise only, Transformer Engine's per-tensor and MXFP8
      quantizers), a gathered operand is cast on its 1/tp shard, gathered in fp8 and transposed
      whole for the weight-gradient GEMM; otherwise it is gathered in bf16 and cast whole;
    * ``shared_input``: linears that read the same input (q/k/v, gate/up) cast it once
      (``fp8_recipe.input_cast``: Megatron-Core's fused TE linears; torchtitan under fp8 TP);
    * ``weight_share``: the share of micro-batches that cast the weights (1, or 1/micro-batches
      where the fp8 weights are cached across a step: ``fp8_recipe.weight_cast``)."""

    recipe: str
    act: float
    weight: float
    rescale: bool = False
    grad_weight_hp: bool = False
    shard_cast: bool = False
    shared_input: bool = False
    weight_share: float = 1.0

# Megatron's RowParallelLinear layers (Shoeybi et al. 2019, Sec. 3: the attention output projection
# and the MLP's second linear), by their checkpoint names across the catalogue's model families
ROW_PARALLEL = frozenset({"o_proj", "down_proj", "c_proj", "dense", "dense_4h_to_h", "out_proj", "w2", "fc2"})
RESCALE_BYTES = 4.0  # read and write one bf16 output element
TRANSPOSE_BYTES = 2.0  # read and write one fp8 element


@lru_cache(maxsize=256)
def fp8_scheme(recipe: str, framework: str, compile_: bool, tp: int, sp: bool = True,
               microbatches: int = 1) -> Fp8Scheme:
    costs = {c.role: c for c in fp8_scaling_costs(recipe)}  # catalog/matmul.json has every FP8_RECIPES entry
    act_cost = costs.get("input_or_grad_output") or costs["any"]
    w_cost = costs.get("weight") or costs["any"]
    fused = act_cost.bytes_per_element_fused_with_prev
    act = fused if compile_ and fused is not None else act_cost.bytes_per_element
    shard = fp8_tp_gather(framework, recipe, tp, sp)
    return Fp8Scheme(recipe=recipe, act=act, weight=w_cost.bytes_per_element,
                     rescale=recipe == "rowwise", grad_weight_hp=recipe == "rowwise_with_gw_hp",
                     shard_cast=shard, shared_input=fp8_input_cast_shared(framework, shard),
                     weight_share=1 / max(1, microbatches) if fp8_weight_cast_per_step(framework) else 1.0)


def fp8_tp_gather(framework: str, recipe: str, tp: int, sp: bool) -> bool:
    """Whether the tensor-parallel all-gathers carry fp8: under sequence parallelism, where the
    framework casts before gathering (catalog.frameworks.fp8_gathers_tp). The casts (``Fp8Scheme``)
    and the collectives (runtime._tp_comm) both follow it."""
    return tp > 1 and sp and fp8_gathers_tp(framework, recipe)


def _operand_cast_bytes(elements: float, gathered: bool, tp: int, s: Fp8Scheme) -> float:
    """Bytes to cast one matmul operand of ``elements``: all of it, or — a gathered operand under
    ``shard_cast`` — its 1/tp shard before the fp8 all-gather, then one transpose of the whole for the
    weight-gradient GEMM (_scaled_mm takes its second operand column-major): 1 B read + 1 B written."""
    if gathered and s.shard_cast:
        return elements / tp * s.act + TRANSPOSE_BYTES * elements
    return elements * s.act


def fp8_cast_bytes(m: ModelSpec, lg: LayerGroup, tokens: float, tp: int, ep: int, s: Fp8Scheme,
                   method: str = "full") -> tuple[float, float]:
    """(forward, backward) bytes of one layer's fp8 casts (and rowwise rescales) for one micro-batch
    on one rank. The attention output and second MLP projections are row-parallel under tensor
    parallelism (``ROW_PARALLEL``): input sharded, output gradient whole (gathered); the others are
    column-parallel: input whole (gathered), output gradient sharded. Expert matrices see the
    busiest rank's routed tokens (tokens · top_k · ``expert_imbalance``). The router (a tiny GEMM)
    is left out. A frozen LoRA/QLoRA base runs no weight-gradient GEMM, so nothing rescales one."""
    fwd = bwd = 0.0
    cast_inputs: set[tuple[str, int]] = set()
    busiest = expert_imbalance(tokens, m.top_k, ep) if lg.moe else 1.0
    for w in lg.weights:
        if not w.is_matrix or w.group not in ("attention", "mlp", "shared_expert", "expert"):
            continue
        out_f, in_f = w.shape
        row = w.name.rsplit(".", 1)[-1] in ROW_PARALLEL
        if w.group == "expert":
            tok, mats = tokens * m.top_k * busiest, w.count / ep
        else:
            tok, mats = tokens * w.count, w.count
        x_el, dy_el = tok * (in_f / tp if row else in_f), tok * (out_f if row else out_f / tp)
        w_el = mats * out_f * in_f / tp
        shared = not row and s.shared_input and (w.group, in_f) in cast_inputs
        cast_inputs.add((w.group, in_f))
        # the gathered operand is the column-parallel input or the row-parallel output gradient
        fwd += (0.0 if shared else _operand_cast_bytes(x_el, not row, tp, s)) + w_el * s.weight * s.weight_share / 2
        bwd += _operand_cast_bytes(dy_el, row, tp, s) + w_el * s.weight * s.weight_share / 2
        if s.rescale:  # the grad_input (x-sized) and, training the weight, grad_weight outputs
            bwd += RESCALE_BYTES * (x_el + (w_el if method == "full" else 0.0))
    return fwd, bwd


def expert_imbalance(tokens: float, top_k: int, ep: int) -> float:
    """The busiest expert-parallel rank's load over the mean, for a router balanced in expectation:
    each rank receives a Binomial(ep·tokens·top_k, 1/ep) share of the routed tokens (mean
    μ = tokens·top_k, variance μ(1 − 1/ep)) and the largest of ep such shares exceeds the mean by
    about √(2 ln ep) standard deviations (the Gaussian extreme-value bound). A floor: a router's
    systematic preferences add to it and are not modelled."""
    mean = tokens * top_k
    if ep <= 1 or mean <= 0:
        return 1.0
    return 1.0 + math.sqrt(2 * math.log(ep) * (1 - 1 / ep) / mean)


def _matmuls(m: ModelSpec, lg: LayerGroup, tokens: float, tp: int, ep: int, dev: Device) -> tuple[float, float]:
    """(forward seconds of the layer's weight matmuls, of its 2nd, 4th … ones). Expert matmuls run
    at the busiest expert-parallel rank's pace (``expert_imbalance``)."""
    mm_f = every_other = 0.0
    busiest = expert_imbalance(tokens, m.top_k, ep) if lg.moe else 1.0
    mats = [w for w in lg.weights if w.is_matrix and w.group in ("attention", "mlp", "shared_expert", "expert",
                                                                  "router")]
    for i, w in enumerate(mats):
        out_f, in_f = w.shape
        if w.group == "expert":
            per_expert_tokens = tokens * m.top_k * ep / m.n_experts
            t = matmul_s(per_expert_tokens * busiest, out_f / tp, in_f, dev) * w.count / ep
        elif w.group == "router":
            t = matmul_s(tokens, out_f, in_f, dev)
        else:
            t = matmul_s(tokens, out_f / tp, in_f, dev) * w.count
        mm_f += t
        if i % 2 == 1:
            every_other += t
    return mm_f, every_other


def _attention(m: ModelSpec, tokens: float, seq: int, tp: int, attention: str, dropout: float,
               dev: Device) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core."""
    att_flops = tokens * attention_flops(m, seq, causal_saving=True) / tp
    if attention in ("flash", "flash1"):
        att_flops *= attention_short_sequence_factor(seq)
        # FlashAttention v1 runs at about half of FlashAttention-2's throughput (Dao 2023,
        # arXiv:2307.08691, abstract and Fig. 4-6: "around 2x faster than FlashAttention")
        slow = FLASH1_SLOWDOWN if attention == "flash1" else 1.0
        return (slow * att_flops / (dev.peak * dev.e_attn_f), slow * 2.5 * att_flops / (dev.peak * dev.e_attn_b))
    # eager: Q·Kᵀ and P·V as batched matmuls over the full s×s scores, plus the softmax
    heads = m.n_heads / tp * tokens / seq  # (sequences in the micro-batch) × local heads
    qk = matmul_s(seq, seq, m.head_dim, dev, batch=heads)
    pv = matmul_s(seq, m.v_head_dim, seq, dev, batch=heads)
    softmax_bytes = heads * seq * seq * 2 * (2 + (3 if dropout else 0))  # read+write (+ dropout)
    return qk + pv + softmax_bytes / dev.bw, 2 * (qk + pv) + 1.5 * softmax_bytes / dev.bw


def _dequantize_s(m: ModelSpec, lg: LayerGroup, tp: int, ep: int, dev: Device) -> float:
    """QLoRA: every pass over a frozen NF4 weight first dequantizes it to bf16 (bitsandbytes
    ``dequantize_4bit`` before the matmul: read the 4-bit codes and their scales, write 2 B per
    parameter — Dettmers et al. 2023, QLoRA, Sec. 3), at HBM bandwidth."""
    params = sum(w.numel / (ep if w.group == "expert" else 1) for w in lg.weights
                 if w.is_matrix and w.group in ("attention", "mlp", "shared_expert", "expert")) / tp
    return params * (constant("nf4_bytes_per_param") + 2) / dev.bw


@lru_cache(maxsize=65536)
def _layer_time(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, tp: int, ep: int, sp: bool,
                recompute: str, attention: str, dropout: float, method: str, sw: Software, fp8: Fp8Scheme | None,
                dev: Device, dev16: Device | None) -> LayerTime:
    mm_f, every_other = _matmuls(m, lg, tokens, tp, ep, dev)
    # the weight-gradient matmuls: in bf16 under rowwise_with_gw_hp, else as the forward's
    mm_w = _matmuls(m, lg, tokens, tp, ep, dev16)[0] if fp8 and fp8.grad_weight_hp and dev16 else mm_f
    att_f, att_b = _attention(m, tokens, seq, tp, attention, dropout, dev)
    f_local = (m.moe_ffn * m.top_k + m.shared_ffn) if lg.moe else m.ffn
    per_token = (sw.per_h * m.hidden * (1 / tp if sp else 1.0)
                 + (sw.per_f_gated if m.gated_mlp else sw.per_f_plain) * f_local / tp
                 + sw.per_qk * (m.n_heads + max(m.n_kv_heads / tp, 1)) * m.head_dim / tp)
    kernels = sw.kernels
    if lg.moe:
        # the token dispatcher's permute and unpermute (Megatron-Core moe_utils.permute/unpermute):
        # each copies the hidden state of every routed token — read h, write top_k·h, and back
        per_token += 2 * 2 * m.hidden * (1 + m.top_k)
        kernels += 4  # router softmax/top-k, permute, unpermute, probability scaling
        if not sw.grouped_experts:  # SequentialMLP: one GEMM per local expert and matrix
            expert_mats = sum(1 for w in lg.weights if w.is_matrix and w.group == "expert")
            kernels += expert_mats * max(0, m.n_experts // ep - 1)
    elem_f = tokens * per_token / dev.bw
    cast_f, cast_b = fp8_cast_bytes(m, lg, tokens, tp, ep, fp8, method) if fp8 else (0.0, 0.0)
    cast_f, cast_b = cast_f / dev.bw, cast_b / dev.bw
    launch = kernels * constant("kernel_launch_s")
    dq = _dequantize_s(m, lg, tp, ep, dev) if method == "qlora" else 0.0
    fwd = mm_f + att_f + elem_f + cast_f + launch + dq
    # backward: input- and weight-gradient matmuls; a frozen LoRA/QLoRA base needs only the input's
    bwd = mm_f + (mm_w if method == "full" else 0.0) + att_b + 2 * elem_f + cast_b + 2 * launch + dq
    rec = {"none": 0.0, "selective": att_f if attention == "eager" else 0.0,
           "selective-op": every_other + elem_f + launch, "full": fwd}[recompute]
    return LayerTime(fwd, bwd, rec, mm_f)
