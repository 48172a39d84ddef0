"""Step time: compute per layer, exposed communication, pipeline bubble — and what follows.

Compute, per operation (every constant in catalog/constants.json, with its source):
* matmuls: roofline per weight matrix — max(2mnk / (peak · e_gemm), bytes / (HBM bw · e_bw))
  with e_gemm the achievable share of the dense peak for the GPU's architecture; the
  backward pass runs two matmuls (input and weight gradient) of the same shape;
* attention core: FlashAttention — causal FLOPs at e_attn (forward) and 2.5× the forward
  FLOPs at e_attn_bwd (Dao 2023: the backward runs five matmuls to the forward's two);
  eager attention: full s² matmuls at e_gemm plus the softmax's memory traffic;
* elementwise work (norms, residual adds, activation, RoPE, loss) at memory bandwidth;
* kernel launches; the optimizer step at memory bandwidth (28 B per local parameter).
Communication (comm.py) per micro-batch: tensor/sequence parallel (2 all-reduce-equivalents
per layer forward and 2 backward, exposed), context parallel ring exchange (overlapped with
attention), expert all-to-all (4 per MoE layer, exposed), pipeline send/recv; per step: data-
parallel gradient reduction (and ZeRO parameter gathers) overlapped with compute as in
PyTorch DDP / FSDP, exposed only beyond the compute that hides it; ZeRO-3 gathers go per block
(FSDP), per submodule (DeepSpeed) or per tensor and blocking (DeepSpeed of 2021, never hidden),
each call paying the ring latency.
Pipeline bubble (Narayanan et al. 2021): (p − 1)·(t_f + t_b), divided by the virtual stages
when interleaved, times ~1/3 for zero-bubble ZB-H1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.constants import constant, table
from gpuplan.model.comm import all_gather_s, all_reduce_s, all_to_all_s, reduce_scatter_s, send_recv_s, topology
from gpuplan.model.flops import attention_flops
from gpuplan.model.memory import micro_batches, rank_params
from gpuplan.spec import GPU, Hardware, Layout, Training
from gpuplan.spec.model import LayerGroup, ModelSpec

KERNELS_PER_LAYER = 25  # forward kernels of an unfused transformer block; backward launches twice as many


@dataclass(frozen=True, slots=True)
class Device:
    peak: float      # dense FLOP/s for the matmul precision
    e_gemm: float
    bw: float        # achievable HBM bytes/s
    e_attn_f: float
    e_attn_b: float
    sms: int
    tile: tuple[int, int]


def unsupported_precision(g: GPU, precision: str) -> str | None:
    """Why ``g`` cannot train in ``precision`` (its catalogue lists compute peaks, none for that
    number format), or None. A GPU with no published peaks at all is left to the memory estimate."""
    if not g.peak_flops:
        return None
    need = {"fp8": ("fp8",), "bf16": ("bf16",), "bf16-pure": ("bf16",), "fp16": ("fp16",),
            "fp32": ("tf32", "fp32")}[precision]
    if any(k in g.peak_flops for k in need):
        return None
    alt = "bf16" if precision == "fp8" and "bf16" in g.peak_flops else "fp16"
    what = {"fp8": "fp8 tensor cores (Hopper, Ada L4/L40S, Blackwell, MI300)", "bf16": "bf16 tensor cores",
            "bf16-pure": "bf16 tensor cores", "fp16": "fp16 tensor cores", "fp32": "an fp32/tf32 peak"}[precision]
    return f"{g.id} has no {what} in the catalogue: set training.precision: {alt}"


def device(hw: Hardware, training: Training) -> Device:
    """The GPU's achievable rates for this precision and power cap (cached by value)."""
    return _device(hw.gpu, hw.power_limit_w, training.precision)


@lru_cache(maxsize=256)
def _device(g: GPU, power_limit_w: float | None, precision: str) -> Device:
    e = table("gemm_efficiency").get(g.architecture, 0.7)
    prec = {"bf16-pure": "bf16", "fp16": "fp16", "fp32": "tf32"}.get(precision, precision)
    if prec == "fp8":
        e *= constant("fp8_gemm_efficiency_ratio")
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
    tiles = table("gemm_tile")
    half = (g.peak_flops.get("bf16") or g.peak_flops.get("fp16") or peak) * clock
    # attention runs in 16-bit even under fp8 training; express its efficiency on the matmul peak
    scale = half / peak
    return Device(peak=peak, e_gemm=e, bw=g.memory_bw_bytes_per_s * constant("memory_bandwidth_efficiency"),
                  e_attn_f=att["forward"] * scale, e_attn_b=att["backward"] * scale, sms=g.sm_count,
                  tile=tuple(tiles.get(g.architecture, tiles["default"])))


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
               dev: Device) -> LayerTime:
    """One layer, one micro-batch of ``tokens`` local tokens, on one rank."""
    return _layer_time(m, lg, tokens, seq, lay.tp, lay.ep, lay.sequence_parallel, lay.recompute, tr.attention,
                       tr.dropout, tr.precision, tr.method, dev)


@lru_cache(maxsize=65536)
def _layer_time(m: ModelSpec, lg: LayerGroup, tokens: float, seq: int, tp: int, ep: int, sp: bool,
                recompute: str, attention: str, dropout: float, precision: str, method: str,
                dev: Device) -> LayerTime:
    mm_f = 0.0
    every_other = 0.0
    mats = [w for w in lg.weights if w.is_matrix and w.group in ("attention", "mlp", "shared_expert", "expert",
                                                                  "router")]
    for i, w in enumerate(mats):  # noqa: B007
        out_f, in_f = w.shape
        if w.group == "expert":
            per_expert_tokens = tokens * m.top_k * ep / m.n_experts
            t = matmul_s(per_expert_tokens, out_f / tp, in_f, dev) * w.count / ep
        elif w.group == "router":
            t = matmul_s(tokens, out_f, in_f, dev)
        else:
            t = matmul_s(tokens, out_f / tp, in_f, dev) * w.count
        mm_f += t
        if i % 2 == 1:
            every_other += t
    att_flops = tokens * attention_flops(m, seq, causal_saving=True) / tp
    if attention == "flash":
        att_f = att_flops / (dev.peak * dev.e_attn_f)
        att_b = 2.5 * att_flops / (dev.peak * dev.e_attn_b)
    else:  # eager: Q·Kᵀ and P·V as batched matmuls over the full s×s scores, plus the softmax
        heads = m.n_heads / tp * tokens / seq  # (sequences in the micro-batch) × local heads
        qk = matmul_s(seq, seq, m.head_dim, dev, batch=heads)
        pv = matmul_s(seq, m.v_head_dim, seq, dev, batch=heads)
        softmax_bytes = heads * seq * seq * 2 * (2 + (3 if dropout else 0))  # read+write (+ dropout)
        att_f = qk + pv + softmax_bytes / dev.bw
        att_b = 2 * (qk + pv) + 1.5 * softmax_bytes / dev.bw
    c = table("elementwise_bytes_per_token_layer")
    f_local = (m.moe_ffn * m.top_k + m.shared_ffn) if lg.moe else m.ffn
    per_token = (c["per_h"] * m.hidden * (1 / tp if sp else 1.0)
                 + (c["per_f_gated"] if m.gated_mlp else c["per_f_plain"]) * f_local / tp
                 + c["per_qk"] * (m.n_heads + max(m.n_kv_heads / tp, 1)) * m.head_dim / tp)
    if precision == "fp8":  # casts of each matmul input to fp8 (read 2 B, write 1 B)
        per_token += 3 * (4 * m.hidden + f_local / tp)
    elem_f = tokens * per_token / dev.bw
    launch = KERNELS_PER_LAYER * constant("kernel_launch_s")
    fwd = mm_f + att_f + elem_f + launch
    # backward: input- and weight-gradient matmuls; a frozen LoRA/QLoRA base needs only the input's
    bwd = (2 if method == "full" else 1) * mm_f + att_b + 2 * elem_f + 2 * launch
    rec = {"none": 0.0, "selective": att_f if attention != "flash" else 0.0,
           "selective-op": every_other + elem_f + launch, "full": fwd}[recompute]
    return LayerTime(fwd, bwd, rec, mm_f)


# DeepSpeed ZeRO-3 reduces gradients in buckets of reduce_bucket_size elements (default 5e8,
# DeepSpeed config docs, "zero_optimization.reduce_bucket_size")
DEEPSPEED_REDUCE_BUCKET = 5e8


def gather_calls(lg: LayerGroup, style: str, ep: int = 1) -> int:
    """Parameter all-gathers per pass over one layer under ZeRO-3: one per block (FSDP wraps each
    transformer block as a unit), one per submodule holding parameters (DeepSpeed's module hooks:
    a Linear's weight and bias go together), or one per tensor (DeepSpeed ZeRO-3 before the
    coalesced gather of PR #1188, 2021)."""
    if style == "layer":
        return 1
    per_name: dict[str, int] = {}
    for w in lg.weights:
        n = max(1, w.count // ep) if w.group == "expert" else w.count
        if style == "tensor-sync":
            per_name[w.name] = per_name.get(w.name, 0) + n
        else:
            per_name.setdefault(w.name, n)
    return sum(per_name.values())


def _grad_reduce_bytes(tr: Training) -> float:
    """Bytes per gradient element on the wire: fp32 under bf16/fp8 mixed precision (Megatron
    accumulates and all-reduces bf16 gradients in fp32; FSDP2's default reduce_dtype in
    torchtitan is fp32), the parameter dtype otherwise."""
    return {"bf16": 4, "fp8": 4, "fp16": 2, "bf16-pure": 2, "fp32": 4}[tr.precision]


def step_time(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout) -> dict:
    """Seconds per optimizer step and its breakdown, for the slowest pipeline stage."""
    dev = device(hw, tr)
    topo = topology(hw)
    seq = tr.seq_len
    tokens = lay.micro_batch * seq / lay.cp  # local tokens of one micro-batch
    n_mb = micro_batches(tr, lay)
    groups = {lg.moe: lg for lg in m.layers}
    times = {moe: layer_time(m, lg, tokens, seq, lay, tr, dev) for moe, lg in groups.items()}
    targets = tr.lora_targets if tr.method != "full" else None

    # ---- the slowest stage's compute per micro-batch -----------------------------------------
    head_mm = matmul_s(tokens, m.vocab / lay.tp, m.hidden, dev)
    loss_bytes = tokens * m.vocab / lay.tp * 12 * 2  # fp32 upcast, log-softmax, grads (fwd + bwd)
    best = None
    for stage in sorted({0, lay.pp - 1, min(1, lay.pp - 1)}):
        rp = rank_params(m, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, targets, tr.lora_rank)
        f = b = r = mm = 0.0
        for moe, n in ((False, rp.dense_layers), (True, rp.moe_layers)):
            if n:
                lt = times[moe]
                f, b, r, mm = f + n * lt.fwd, b + n * lt.bwd, r + n * lt.recompute, mm + n * lt.mm
        if stage == lay.pp - 1:
            f += head_mm + loss_bytes / 2 / dev.bw
            b += 2 * head_mm + loss_bytes / 2 / dev.bw
        if best is None or f + b + r > best[0] + best[1] + best[2]:
            best = (f, b, r, rp, mm)
    t_f, t_b, t_r, rp, mm_f = best
    if hw.compute_factor != 1.0:  # a correction fitted on the user's own measured runs
        t_f, t_b, t_r = t_f / hw.compute_factor, t_b / hw.compute_factor, t_r / hw.compute_factor
        mm_f /= hw.compute_factor
    layers_here = rp.dense_layers + rp.moe_layers

    # ---- communication per micro-batch --------------------------------------------------------
    act_bytes = tokens * m.hidden * 2
    passes = 3 if lay.recompute == "full" else 2  # forward, backward (+ recomputed forward)
    tp_s = layers_here * passes * 2 * all_reduce_s(act_bytes, lay.tp, 1, topo) if lay.tp > 1 else 0.0
    tp_exposed = tp_s
    if lay.tp_overlap and tp_s:
        # async TP (PyTorch, torchtitan) / Megatron --tp-comm-overlap: each all-gather / reduce-
        # scatter is split into tp steps that run under the partial matmuls that need them (Wang
        # et al. 2023, 'Overlap Communication with Dependent Computation via Decomposition',
        # ASPLOS): the first step of each stays exposed, the rest hides behind the weight matmuls
        # of forward, backward (twice the forward's) and a recomputed forward
        window = mm_f * (1 + (2 if tr.method == "full" else 1) + (1 if lay.recompute == "full" else 0))
        tp_exposed = tp_s / lay.tp + max(0.0, tp_s * (lay.tp - 1) / lay.tp - window)
    cp_s = 0.0
    if lay.cp > 1:
        kv_bytes = tokens * 2 * max(m.n_kv_heads / lay.tp, 1) * m.head_dim * 2
        ring = (lay.cp - 1) * send_recv_s(kv_bytes, lay.tp * lay.cp > topo.domain, topo)
        att = tokens * attention_flops(m, seq, True) / lay.tp / (dev.peak * dev.e_attn_f)
        cp_s = layers_here * (max(0.0, ring - att) + max(0.0, 2 * ring - 2.5 * att))
    ep_s = 0.0
    if lay.ep > 1 and rp.moe_layers:
        a2a = all_to_all_s(tokens * m.top_k * m.hidden * 2 / lay.tp, lay.ep, lay.tp * lay.cp, topo)
        ep_s = rp.moe_layers * (4 + (2 if lay.recompute == "full" else 0)) * a2a
    pp_s = 0.0
    if lay.pp > 1:
        # stages are the outermost rank dimension; once the job spans domains some stage boundary
        # crosses the network, and the pipeline moves at the pace of its slowest hop
        crosses = hw.gpus > topo.domain
        # forward activation and backward gradient per micro-batch, once per model chunk: interleaving
        # v chunks multiplies the traffic by v (Narayanan et al. 2021, Sec. 2.2.2)
        pp_s = 2 * lay.virtual_stages * send_recv_s(act_bytes / (lay.tp if lay.sequence_parallel else 1),
                                                    crosses, topo)
    per_mb_comm = tp_exposed + ep_s + cp_s + pp_s

    # ---- data parallel / ZeRO, per step -------------------------------------------------------
    g = _grad_reduce_bytes(tr)
    trainable_dense = rp.dense if tr.method == "full" else rp.adapters_dense
    trainable_expert = rp.expert if tr.method == "full" else rp.adapters_expert
    dp_n = lay.dp * lay.cp
    edp_n = max(1, dp_n // lay.ep)
    overlap = constant("dp_overlap") if lay.dp_overlap else 0.0
    if lay.zero == 3:
        shard = lay.zero_group or dp_n
        w_bytes = 2 * (rp.dense + rp.expert)
        g_bytes = g * (trainable_dense + trainable_expert)
        style = lay.zero3_gather
        calls = sum(n * gather_calls(groups[moe], style, lay.ep)
                    for moe, n in ((False, rp.dense_layers), (True, rp.moe_layers)) if n) or 1
        # FSDP runs a block's recomputed forward inside its backward, on the parameters gathered
        # for it; DeepSpeed's module hooks fire again on the recomputed forward and gather anew
        gathers = 3 if style != "layer" and lay.recompute == "full" else 2
        gather = all_gather_s(w_bytes, shard, lay.tp, topo, calls)
        if style == "tensor-sync":
            # DeepSpeed ZeRO-3 of 2021: every gather blocks the compute stream (issue #1069, PR
            # #1188) and gradients are all-reduced, not reduce-scattered (issue #1173)
            grad_s = all_reduce_s(g_bytes, shard, lay.tp, topo)
            blocking = gathers * (gather + calls * constant("zero3_sync_call_s"))
            hidden = overlap * t_b
            dp_exposed = n_mb * (blocking + max(0.0, grad_s - hidden))
            overlapped = n_mb * min(grad_s, hidden)
            per_mb = gathers * gather + grad_s
        else:
            # FSDP reduce-scatters each block's gradients; DeepSpeed fills buckets
            rs_calls = layers_here if style == "layer" else \
                math.ceil((trainable_dense + trainable_expert) / DEEPSPEED_REDUCE_BUCKET)
            per_mb = gathers * gather + reduce_scatter_s(g_bytes, shard, lay.tp, topo, max(rs_calls, 1))
            hidden = overlap * (t_f + t_b + t_r)
            first_gather = all_gather_s(w_bytes / calls, shard, lay.tp, topo)  # nothing to hide it behind
            dp_exposed = n_mb * (max(0.0, per_mb - hidden) + first_gather)
            overlapped = n_mb * min(per_mb, hidden)
        if lay.zero_group and dp_n > lay.zero_group:  # hybrid shard: all-reduce the shards across replicas
            dp_exposed += all_reduce_s(g_bytes / shard, dp_n // lay.zero_group, lay.tp * shard, topo)
        dp_comm = n_mb * per_mb
    else:
        dp_comm = (all_reduce_s(g * trainable_dense, dp_n, lay.tp, topo)
                   + all_reduce_s(g * trainable_expert, edp_n, lay.tp * lay.ep, topo))
        window = overlap * (t_b + (t_f if lay.zero >= 1 else 0.0))
        dp_exposed = max(0.0, dp_comm - window)
        overlapped = min(dp_comm, window)

    # ---- optimizer step ---------------------------------------------------------------------
    local_params = (trainable_dense / (dp_n if lay.zero >= 1 else 1)
                    + trainable_expert / (edp_n if lay.zero >= 1 else 1))
    if lay.offload == "none":
        opt_s = local_params * constant("optimizer_bytes_per_param") / dev.bw
    else:  # grads down and weights up over PCIe, the update on the host CPU
        opt_s = local_params * (4 + 2) / (PCIE_HOST_BYTES_PER_S) + local_params / CPU_ADAM_PARAMS_PER_S

    compute_per_mb = t_f + t_b + t_r
    p, v = lay.pp, lay.virtual_stages
    bubble = 0.0
    if p > 1:
        bubble = (p - 1) * (compute_per_mb + per_mb_comm - pp_s)  # the send/recv is counted once, below
        if lay.pp_schedule == "interleaved":
            bubble /= v
        elif lay.pp_schedule == "zero-bubble":
            bubble *= constant("zero_bubble_factor")
    # Overlapped collectives are not free: NCCL kernels take SMs and HBM bandwidth from the
    # compute they hide behind (interference, see constants.json "comm_interference").
    interference = constant("comm_interference") * (overlapped + n_mb * (tp_s - tp_exposed))
    compute_s = n_mb * compute_per_mb + interference
    comm_exposed = n_mb * per_mb_comm + dp_exposed
    step = compute_s + comm_exposed + bubble + opt_s
    return {"step_s": step, "compute_s": compute_s, "comm_exposed_s": comm_exposed, "bubble_s": bubble,
            "optimizer_s": opt_s, "microbatches": n_mb,
            "comm_detail": {"tp": n_mb * tp_s, "tp_exposed": n_mb * tp_exposed, "cp": n_mb * cp_s,
                            "ep": n_mb * ep_s, "pp": n_mb * pp_s, "dp_total": dp_comm, "dp_exposed": dp_exposed},
            "recompute_s": n_mb * t_r, "interference_s": interference}


# ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): the CPU Adam update and PCIe transfers.
PCIE_HOST_BYTES_PER_S = 25e9   # achievable host<->device PCIe 4/5 x16 copy rate (estimate)
CPU_ADAM_PARAMS_PER_S = 2e9    # DeepSpeed CPU-Adam on a multi-core host per GPU share (estimate)
