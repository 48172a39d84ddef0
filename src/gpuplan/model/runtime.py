"""Step time: compute of the slowest pipeline stage, exposed communication, pipeline bubble,
optimizer step — one function per concern, assembled by ``step_time``.

Compute per layer is model/compute.py. Communication (comm.py) per micro-batch: tensor/sequence
parallel (2 all-reduce-equivalents per layer forward and 2 backward, exposed unless async TP),
context parallel ring exchange (overlapped with attention), expert all-to-all (exposed),
pipeline send/recv; per step: data-parallel gradient reduction (and ZeRO parameter gathers)
overlapped with compute as in PyTorch DDP / FSDP, exposed only beyond the compute that hides it;
ZeRO-3 gathers go per block (FSDP), per submodule (DeepSpeed) or per tensor and blocking
(DeepSpeed of 2021, never hidden), each call paying the ring latency. The bubble is
model/pipeline.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.catalog.constants import constant
from gpuplan.catalog.frameworks import (
    converts_every_block_linear,
    fp8_recipe_of,
    keeps_unsharded_under_pp,
)
from gpuplan.model.comm import (
    Topology,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    reduce_scatter_s,
    send_recv_s,
    topology,
)
from gpuplan.model.compute import Device, LayerTime, device, fp8_tp_gather, layer_time, matmul_s
from gpuplan.model.flops import attention_flops
from gpuplan.model.params import RankParams, rank_params
from gpuplan.model.pipeline import bubble_s, micro_batches, peak_stages, pipeline_comm_s
from gpuplan.model.software import software
from gpuplan.spec import Hardware, LayerGroup, Layout, ModelSpec, Training
from gpuplan.spec.corrections import NONE, Corrections

# DeepSpeed ZeRO-3 reduces gradients in buckets of reduce_bucket_size elements (default 5e8,
# DeepSpeed config docs, "zero_optimization.reduce_bucket_size")
DEEPSPEED_REDUCE_BUCKET = 5e8
# Expert all-to-alls per MoE layer and pass: dispatch and combine, in the forward and again in the
# backward (Lepikhin et al. 2020, GShard; Megatron-Core token dispatcher); a recomputed forward
# dispatches and combines once more.
A2A_PER_MOE_LAYER = 4
A2A_PER_RECOMPUTED_MOE_LAYER = 2
# ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): the CPU Adam update and PCIe transfers.
PCIE_HOST_BYTES_PER_S = 25e9   # achievable host<->device PCIe 4/5 x16 copy rate (estimate)
CPU_ADAM_PARAMS_PER_S = 2e9    # DeepSpeed CPU-Adam on a multi-core host per GPU share (estimate)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCompute:
    """The slowest stage's compute for one micro-batch (seconds) and the parameters it holds."""

    fwd: float
    bwd: float
    recompute: float
    mm_fwd: float  # the forward's weight matmuls (what async TP hides its collectives behind)
    params: RankParams

    @property
    def total(self) -> float:
        return self.fwd + self.bwd + self.recompute


@dataclass(frozen=True, slots=True)
class Overlapped:
    """A collective's time in all, the part left exposed, and the part hidden under compute."""

    total: float
    exposed: float
    hidden: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTime:
    """Seconds per optimizer step and its breakdown; ``to_json`` gives the contract's keys."""

    step_s: float
    compute_s: float
    comm_exposed_s: float
    bubble_s: float
    optimizer_s: float
    microbatches: int
    recompute_s: float
    interference_s: float
    comm_detail: dict[str, float]  # tp, tp_exposed, cp, ep, pp, dp_total, dp_exposed (seconds per step)
    fp8_layers: bool = False  # precision fp8: the blocks' linears run fp8 (False: bf16, where fp8 does not pay)


def _stage_compute(m: ModelSpec, tr: Training, lay: Layout, dev: Device, dev16: Device | None, tokens: float,
                   corrections: Corrections, n_mb: int = 1) -> StageCompute:
    """The slowest of the stages that can be slowest (model/pipeline.py), one micro-batch."""
    groups = {lg.moe: lg for lg in m.layers}  # one layer of each kind (dense, MoE) sets its time
    times = {moe: layer_time(m, lg, tokens, tr.seq_len, lay, tr, dev, dev16, n_mb) for moe, lg in groups.items()}
    targets = tr.lora_targets if tr.method != "full" else None
    # the LM head stays in bf16 under fp8 (frameworks.json fp8_recipe.high_precision: torchtitan's
    # filter_fqns 'output', Megatron-Core's fp8 only inside the transformer blocks)
    head_mm = matmul_s(tokens, m.vocab / lay.tp, m.hidden, dev16 or dev)
    loss_bytes = tokens * m.vocab / lay.tp * software(tr.framework, tr.compile, m).loss_per_logit  # fwd + bwd
    best: StageCompute | None = None
    share = 1.0 / lay.recompute_every  # recompute full of every k-th block only
    for stage in peak_stages(m, lay.pp, lay.virtual_stages):
        rp = rank_params(m, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, targets, tr.lora_rank)
        f = b = r = mm = 0.0
        for moe, n in ((False, rp.dense_layers), (True, rp.moe_layers)):
            if n:
                lt: LayerTime = times[moe]
                f, b, r, mm = f + n * lt.fwd, b + n * lt.bwd, r + n * lt.recompute * share, mm + n * lt.mm
        if stage == lay.pp - 1:  # the LM head (frozen under LoRA/QLoRA: no weight gradient)
            f += head_mm + loss_bytes / 2 / dev.bw
            b += (2 if tr.method == "full" else 1) * head_mm + loss_bytes / 2 / dev.bw
        if best is None or f + b + r > best.total:
            best = StageCompute(fwd=f, bwd=b, recompute=r, mm_fwd=mm, params=rp)
    assert best is not None
    c = corrections.compute
    if c != 1.0:  # a correction fitted on the user's own measured runs
        best = StageCompute(fwd=best.fwd / c, bwd=best.bwd / c, recompute=best.recompute / c,
                            mm_fwd=best.mm_fwd / c, params=best.params)
    return best


def _tp_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, tokens: float,
             topo: Topology, fp8_layers: bool) -> tuple[float, float]:
    """(all, exposed) tensor-parallel collective seconds per micro-batch."""
    if lay.tp == 1:
        return 0.0, 0.0
    act_bytes = tokens * m.hidden * 2
    passes = 2 + lay.recompute_share  # forward, backward (+ recomputed forward)
    if fp8_layers and fp8_tp_gather(tr.framework, fp8_recipe_of(tr), lay.tp, lay.sequence_parallel):
        # the all-gathers (block inputs forward, output gradients backward) carry fp8, 1 B per
        # element; the reduce-scatters stay bf16 (frameworks.json fp8_recipe.tp_all_gather)
        per_pass = all_gather_s(act_bytes / 2, lay.tp, 1, topo) + reduce_scatter_s(act_bytes, lay.tp, 1, topo)
    else:  # an all-reduce, or its reduce-scatter + all-gather under sequence parallelism
        per_pass = all_reduce_s(act_bytes, lay.tp, 1, topo)
    tp_s = sc.params.layers * passes * 2 * per_pass
    if not lay.tp_overlap or not tp_s:
        return tp_s, tp_s
    # async TP (PyTorch, torchtitan) / Megatron --tp-comm-overlap: each all-gather / reduce-
    # scatter is split into tp steps that run under the partial matmuls that need them (Wang
    # et al. 2023, 'Overlap Communication with Dependent Computation via Decomposition',
    # ASPLOS): the first step of each stays exposed, the rest hides behind the weight matmuls
    # of forward, backward (twice the forward's) and a recomputed forward
    window = sc.mm_fwd * (1 + (2 if tr.method == "full" else 1) + lay.recompute_share)
    return tp_s, tp_s / lay.tp + max(0.0, tp_s * (lay.tp - 1) / lay.tp - window)


def _cp_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, tokens: float, dev: Device,
             topo: Topology) -> float:
    """Exposed context-parallel ring exchange of K/V per micro-batch (hidden under attention)."""
    if lay.cp == 1:
        return 0.0
    kv_bytes = tokens * 2 * max(m.n_kv_heads / lay.tp, 1) * m.head_dim * 2
    ring = (lay.cp - 1) * send_recv_s(kv_bytes, lay.tp * lay.cp > topo.domain, topo)
    att = tokens * attention_flops(m, tr.seq_len, True) / lay.tp / (dev.peak * dev.e_attn_f)
    return sc.params.layers * (max(0.0, ring - att) + max(0.0, 2 * ring - 2.5 * att))


def _ep_hidden(lay: Layout) -> bool:
    return lay.ep_overlap or lay.pp_schedule == "dualpipe"


def _ep_comm(m: ModelSpec, lay: Layout, sc: StageCompute, tokens: float, topo: Topology) -> tuple[float, float]:
    """(all, exposed) expert all-to-all seconds per micro-batch. Exposed, unless ``ep_overlap``: then
    one micro-batch's dispatch and combine run under another's compute (DeepSeek-V3's DualPipe,
    Liu et al. 2024, arXiv:2412.19437, Sec. 3.2.1: forward and backward chunks paired so that
    all-to-all hides under computation; Megatron-Core ``--overlap-moe-expert-parallel-comm``) and
    only what exceeds the stage's compute stays exposed."""
    if lay.ep == 1 or not sc.params.moe_layers:
        return 0.0, 0.0
    a2a = all_to_all_s(tokens * m.top_k * m.hidden * 2 / lay.tp, lay.ep, lay.tp * lay.cp, topo)
    calls = A2A_PER_MOE_LAYER + A2A_PER_RECOMPUTED_MOE_LAYER * lay.recompute_share
    total = sc.params.moe_layers * calls * a2a
    if not _ep_hidden(lay):
        return total, total
    return total, max(0.0, total - sc.total)


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


def _trainable(tr: Training, rp: RankParams) -> tuple[float, float]:
    """(dense, expert) trainable parameters of the rank: all, or the LoRA adapters."""
    if tr.method == "full":
        return rp.dense, rp.expert
    return rp.adapters_dense, rp.adapters_expert


def _zero3_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, n_mb: int, topo: Topology) -> Overlapped:
    """ZeRO-3 / FSDP: parameter gathers (forward, backward, and DeepSpeed's recomputed forward) and
    gradient reduction, every micro-batch."""
    rp = sc.params
    dp_n = lay.dp * lay.cp
    overlap = constant("dp_overlap") if lay.dp_overlap else 0.0
    shard = lay.zero_group or dp_n
    t_dense, t_expert = _trainable(tr, rp)
    w_bytes = 2 * (rp.dense + rp.expert)
    g_bytes = _grad_reduce_bytes(tr) * (t_dense + t_expert)
    style = lay.zero3_gather
    if lay.pp > 1 and keeps_unsharded_under_pp(tr.framework):
        return _zero3_kept_comm(lay, sc, topo, w_bytes, g_bytes, overlap, shard)
    groups = {lg.moe: lg for lg in m.layers}
    calls = sum(n * gather_calls(groups[moe], style, lay.ep)
                for moe, n in ((False, rp.dense_layers), (True, rp.moe_layers)) if n) or 1
    # FSDP runs a block's recomputed forward inside its backward, on the parameters gathered
    # for it; DeepSpeed's module hooks fire again on the recomputed forward and gather anew
    gathers = 2 + (lay.recompute_share if style != "layer" else 0.0)
    gather = all_gather_s(w_bytes, shard, lay.tp, topo, calls)
    if style == "tensor-sync":
        # DeepSpeed ZeRO-3 of 2021: every gather blocks the compute stream (issue #1069, PR
        # #1188) and gradients are all-reduced, not reduce-scattered (issue #1173)
        grad_s = all_reduce_s(g_bytes, shard, lay.tp, topo)
        blocking = gathers * (gather + calls * constant("zero3_sync_call_s"))
        hidden = overlap * sc.bwd
        exposed = n_mb * (blocking + max(0.0, grad_s - hidden))
        overlapped = n_mb * min(grad_s, hidden)
        per_mb = gathers * gather + grad_s
    else:
        # FSDP reduce-scatters each block's gradients; DeepSpeed fills buckets
        rs_calls = rp.layers if style == "layer" else math.ceil((t_dense + t_expert) / DEEPSPEED_REDUCE_BUCKET)
        per_mb = gathers * gather + reduce_scatter_s(g_bytes, shard, lay.tp, topo, max(rs_calls, 1))
        hidden = overlap * sc.total
        first_gather = all_gather_s(w_bytes / calls, shard, lay.tp, topo)  # nothing to hide it behind
        exposed = n_mb * (max(0.0, per_mb - hidden) + first_gather)
        overlapped = n_mb * min(per_mb, hidden)
    exposed += _hybrid_shard_s(lay, g_bytes, shard, topo)
    return Overlapped(n_mb * per_mb, exposed, overlapped)


def _hybrid_shard_s(lay: Layout, g_bytes: float, shard: int, topo: Topology) -> float:
    """Hybrid shard (``zero_group`` < dp×cp): the all-reduce of the gradient shards across the
    replicas, once per step (0 without hybrid sharding)."""
    dp_n = lay.dp * lay.cp
    if not lay.zero_group or dp_n <= lay.zero_group:
        return 0.0
    return all_reduce_s(g_bytes / shard, dp_n // lay.zero_group, lay.tp * shard, topo)


def _zero3_kept_comm(lay: Layout, sc: StageCompute, topo: Topology, w_bytes: float, g_bytes: float,
                     overlap: float, shard: int) -> Overlapped:
    """FSDP under a pipeline that keeps the stage gathered (catalog.frameworks.keeps_unsharded_under_pp):
    one all-gather per step, prefetched block by block under the first micro-batch's forward (the
    first block's exposed), and one reduce-scatter at the last micro-batch's backward."""
    blocks = max(sc.params.layers, 1)
    gather = all_gather_s(w_bytes, shard, lay.tp, topo, blocks)
    first = all_gather_s(w_bytes / blocks, shard, lay.tp, topo)
    rs = reduce_scatter_s(g_bytes, shard, lay.tp, topo, blocks)
    exposed = first + max(0.0, gather - overlap * sc.fwd) + max(0.0, rs - overlap * sc.bwd)
    exposed += _hybrid_shard_s(lay, g_bytes, shard, topo)
    total = gather + rs
    return Overlapped(total, exposed, min(total, max(0.0, total - exposed)))


def _replica_comm(tr: Training, lay: Layout, sc: StageCompute, topo: Topology) -> Overlapped:
    """DDP / ZeRO-1/2: one gradient reduction per step (dense over dp×cp, experts over the
    expert-data-parallel group), hidden behind backward (and forward, where ZeRO reduce-scatters
    and gathers)."""
    g = _grad_reduce_bytes(tr)
    t_dense, t_expert = _trainable(tr, sc.params)
    dp_n = lay.dp * lay.cp
    edp_n = max(1, dp_n // lay.ep)
    overlap = constant("dp_overlap") if lay.dp_overlap else 0.0
    total = (all_reduce_s(g * t_dense, dp_n, lay.tp, topo)
             + all_reduce_s(g * t_expert, edp_n, lay.tp * lay.ep, topo))
    window = overlap * (sc.bwd + (sc.fwd if lay.zero >= 1 else 0.0))
    return Overlapped(total, max(0.0, total - window), min(total, window))


def _optimizer_s(tr: Training, lay: Layout, rp: RankParams, dev: Device) -> float:
    """The optimizer step: at HBM bandwidth on the GPU, or over PCIe and on the host CPU when offloaded."""
    t_dense, t_expert = _trainable(tr, rp)
    dp_n = lay.dp * lay.cp
    edp_n = max(1, dp_n // lay.ep)
    local = t_dense / (dp_n if lay.zero >= 1 else 1) + t_expert / (edp_n if lay.zero >= 1 else 1)
    if lay.offload == "none":
        return local * constant("optimizer_bytes_per_param") / dev.bw
    # grads down and weights up over PCIe, the update on the host CPU
    return local * (4 + 2) / PCIE_HOST_BYTES_PER_S + local / CPU_ADAM_PARAMS_PER_S


def step_time(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections = NONE,
              allow_bf16: bool = True) -> StepTime:
    """Seconds per optimizer step and its breakdown, for the slowest pipeline stage. Under fp8 the
    blocks' linear layers run the fp8 recipe; a framework that runs every one of them in fp8
    (frameworks.json ``fp8_recipe.scope``: torchtitan, Megatron-Core) does so even where that is
    slower; otherwise (``allow_bf16``) the step runs them in bf16 where fp8 does not pay, as
    Transformer Engine users leave layers out of ``fp8_autocast`` — ``fp8_layers`` says which."""
    st = _step_time(m, hw, tr, lay, corrections, fp8_layers=tr.precision == "fp8")
    if allow_bf16 and tr.precision == "fp8" and not converts_every_block_linear(tr.framework):
        st16 = _step_time(m, hw, tr, lay, corrections, fp8_layers=False)
        if st16.step_s < st.step_s:
            return st16
    return st


def _step_time(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
               fp8_layers: bool) -> StepTime:
    dev16 = device(hw, tr, "bf16") if tr.precision == "fp8" else None
    dev = device(hw, tr) if fp8_layers or dev16 is None else dev16
    topo = topology(hw)
    tokens = lay.micro_batch * tr.seq_len / lay.cp  # local tokens of one micro-batch
    n_mb = micro_batches(tr, lay)
    sc = _stage_compute(m, tr, lay, dev, dev16 if fp8_layers else None, tokens, corrections.on(hw.gpu.id), n_mb)
    tp_s, tp_exposed = _tp_comm(m, tr, lay, sc, tokens, topo, fp8_layers)
    cp_s = _cp_comm(m, tr, lay, sc, tokens, dev, topo)
    ep_s, ep_exposed = _ep_comm(m, lay, sc, tokens, topo)
    pp_s = pipeline_comm_s(m, hw, lay, tokens, topo)
    # DualPipe hides the send/recv under the paired forward/backward chunk (arXiv:2412.19437, Sec. 3.2.1)
    pp_exposed = 0.0 if lay.pp_schedule == "dualpipe" else pp_s
    per_mb_comm = tp_exposed + ep_exposed + cp_s + pp_exposed
    dp = _zero3_comm(m, tr, lay, sc, n_mb, topo) if lay.zero == 3 else _replica_comm(tr, lay, sc, topo)
    opt_s = _optimizer_s(tr, lay, sc.params, dev)
    bubble = bubble_s(lay, sc.total + per_mb_comm - pp_exposed)  # the send/recv is counted once, below
    # Overlapped collectives are not free: NCCL kernels take SMs and HBM bandwidth from the
    # compute they hide behind (interference, see constants.json "comm_interference").
    interference = constant("comm_interference") * (dp.hidden + n_mb * (tp_s - tp_exposed + ep_s - ep_exposed
                                                                        + pp_s - pp_exposed))
    compute_s = n_mb * sc.total + interference
    comm_exposed = n_mb * per_mb_comm + dp.exposed
    return StepTime(
        step_s=compute_s + comm_exposed + bubble + opt_s, compute_s=compute_s, comm_exposed_s=comm_exposed,
        bubble_s=bubble, optimizer_s=opt_s, microbatches=n_mb, recompute_s=n_mb * sc.recompute,
        interference_s=interference,
        comm_detail={"tp": n_mb * tp_s, "tp_exposed": n_mb * tp_exposed, "cp": n_mb * cp_s, "ep": n_mb * ep_s,
                     **({"ep_exposed": n_mb * ep_exposed} if _ep_hidden(lay) else {}),
                     "pp": n_mb * pp_s, "dp_total": dp.total, "dp_exposed": dp.exposed},
        fp8_layers=fp8_layers)
