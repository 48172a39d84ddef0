"""Data-parallel and ZeRO/FSDP collectives of a step: the gradient reduction of DDP and ZeRO-1/2, the
parameter gathers and gradient reduce-scatters of ZeRO-3/FSDP (per block, per submodule or per tensor),
hybrid shard's replica all-reduce, and FSDP kept gathered under a pipeline — each with what the compute
hides (``Overlapped``). model/runtime.py adds them to the step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_comm import grad_bucket_params, param_gather_hidden
from gpuplan.catalog.frameworks import keeps_unsharded_under_pp
from gpuplan.model.comm import Topology, all_gather_s, all_reduce_s, reduce_scatter_s
from gpuplan.model.params import RankParams
from gpuplan.spec import LayerGroup, Layout, ModelSpec, Training
from gpuplan.spec.job import has_reference

# DeepSpeed ZeRO-3 reduces gradients in buckets of reduce_bucket_size elements (default 5e8,
# DeepSpeed config docs, "zero_optimization.reduce_bucket_size")
DEEPSPEED_REDUCE_BUCKET = 5e8


@dataclass(frozen=True, slots=True)
class Overlapped:
    """A collective's time in all, the part left exposed, and the part hidden under compute."""

    total: float
    exposed: float
    hidden: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCompute:
    """The slowest stage's compute for one micro-batch (seconds) and the parameters it holds."""

    fwd: float
    bwd: float
    recompute: float
    mm_fwd: float  # the forward's weight matmuls (what async TP hides its collectives behind)
    params: RankParams
    scan: float = 0.0  # of fwd + bwd, the recurrent mixers' scans (a borrowed kernel rate: the interval widened)

    @property
    def total(self) -> float:
        return self.fwd + self.bwd + self.recompute


def gather_calls(lg: LayerGroup, style: str, ep: int = 1, group: str | None = None) -> int:
    """Parameter all-gathers per pass over one layer under ZeRO-3: one per block (FSDP wraps each
    transformer block as a unit), one per submodule holding parameters (DeepSpeed's module hooks:
    a Linear's weight and bias go together), or one per tensor (DeepSpeed ZeRO-3 before the
    coalesced gather of PR #1188, 2021). ``group``: "expert" counts the routed experts' gathers only (they shard
    over their own data-parallel group: collectives of their own), "dense" the rest; None all."""
    weights = [w for w in lg.weights if group is None or (w.group == "expert") == (group == "expert")]
    if not weights:
        return 0
    if style == "layer":
        return 1
    per_name: dict[str, int] = {}
    for w in weights:
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


def trainable(tr: Training, rp: RankParams) -> tuple[float, float]:
    """(dense, expert) trainable parameters of the rank: all, or the LoRA adapters."""
    if tr.method == "full":
        return rp.dense, rp.expert
    return rp.adapters_dense, rp.adapters_expert


def expert_dp_group(lay: Layout) -> tuple[int, int]:
    """(ranks, stride) of the experts' data-parallel group: its replicas sit past the expert grid's tensor and
    expert-parallel ranks, etp × ep apart (Megatron-Core's expert RankGenerator, order tp-cp-ep-dp-pp with cp 1) —
    tp × ep unfolded, ep folded (Layout.expert_tp 1)."""
    return max(1, lay.expert_dp), lay.expert_tp * lay.ep


def zero3_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, n_mb: int, topo: Topology) -> Overlapped:
    """ZeRO-3 / FSDP: parameter gathers (forward, backward, and DeepSpeed's recomputed forward) and
    gradient reduction, every micro-batch."""
    rp = sc.params
    dp_n = lay.dp * lay.cp
    overlap = constant("dp_overlap") if lay.dp_overlap else 0.0
    shard = lay.zero_group or dp_n
    t_dense, t_expert = trainable(tr, rp)
    w_bytes = 2 * (rp.dense + rp.expert)
    g_bytes = _grad_reduce_bytes(tr) * (t_dense + t_expert)
    style = lay.zero3_gather
    if lay.pp > 1 and keeps_unsharded_under_pp(tr.framework):
        return _zero3_kept_comm(lay, sc, topo, w_bytes, g_bytes, overlap, shard)
    # the dense and the expert parameters gather in collectives of their own (different groups), each split into
    # its own modules' calls — the attention's few large gathers are not cut to the experts' many small ones
    kinds = [(lg, n) for lg, n in zip(m.kinds, rp.kind_layers, strict=True) if n]
    calls_d, calls_e = (sum(n * gather_calls(lg, style, lay.ep, g) for lg, n in kinds) for g in ("dense", "expert"))
    calls_d, calls_e = max(calls_d, 1), (max(calls_e, 1) if rp.expert else 0)
    calls = calls_d + calls_e
    # FSDP runs a block's recomputed forward inside its backward, on the parameters gathered
    # for it; DeepSpeed's module hooks fire again on the recomputed forward and gather anew; DPO's reference forward
    # gathers its sharded copy (or, under LoRA, the same base) once more
    gathers = 2 + (lay.recompute_share if style != "layer" else 0.0) + (1.0 if has_reference(tr) else 0.0)
    # the experts shard over their own data-parallel group (ep ranks apart, as replica_comm reduces them), the rest
    # over dp × cp: one collective each, the experts' on the wider stride
    edp, edp_stride = expert_dp_group(lay) if rp.expert else (1, 1)
    g = _grad_reduce_bytes(tr)

    def both(op: Any, w_dense: float, w_expert: float, *calls: int) -> float:
        t = op(w_dense, shard, lay.tp, topo, *calls[:1])
        return t + op(w_expert, edp, edp_stride, topo, *calls[1:]) if w_expert else t

    gather = both(all_gather_s, 2 * rp.dense, 2 * rp.expert, calls_d, calls_e)
    if style == "tensor-sync":
        # DeepSpeed ZeRO-3 of 2021: every gather blocks the compute stream (issue #1069, PR
        # #1188) and gradients are all-reduced, not reduce-scattered (issue #1173)
        grad_s = both(all_reduce_s, g * t_dense, g * t_expert)
        blocking = gathers * (gather + calls * constant("zero3_sync_call_s"))
        hidden = overlap * sc.bwd
        exposed = n_mb * (blocking + max(0.0, grad_s - hidden))
        overlapped = n_mb * min(grad_s, hidden)
        per_mb = gathers * gather + grad_s
    else:
        # FSDP reduce-scatters each block's gradients; DeepSpeed fills buckets
        rs_d, rs_e = (rp.layers, rp.layers) if style == "layer" else \
            (math.ceil(t / DEEPSPEED_REDUCE_BUCKET) for t in (t_dense, t_expert))
        per_mb = gathers * gather + both(reduce_scatter_s, g * t_dense, g * t_expert, max(rs_d, 1), max(rs_e, 1))
        hidden = overlap * sc.total
        first_gather = all_gather_s(2 * rp.dense / calls_d, shard, lay.tp, topo)  # the first module's: nothing to hide
        # it behind
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


def replica_comm(tr: Training, lay: Layout, sc: StageCompute, topo: Topology, n_mb: int) -> Overlapped:
    """DDP / ZeRO-1/2: one gradient reduction per step (dense over dp×cp, experts over the
    expert-data-parallel group), hidden behind backward (and forward, where ZeRO reduce-scatters
    and gathers). ZeRO-2 keeps only its shard of the gradients, so it reduce-scatters them in every
    micro-batch's backward (DeepSpeed stage_1_and_2.py DeepSpeedZeroOptimizer.reduce_ready_partitions_and_remove_grads:
    ``if self.partition_gradients or self.is_gradient_accumulation_boundary``; FSDP's SHARD_GRAD_OP outside no_sync):
    the n_mb − 1 micro-batches before the last add a reduce-scatter each, under their own backward. Where the framework
    reduces in buckets (``grad_bucket_params``), each bucket is a collective of its own — at the rate its size reaches
    and with its latency — and the last starts only when the backward has ended: it is never hidden."""
    g = _grad_reduce_bytes(tr)
    t_dense, t_expert = trainable(tr, sc.params)
    dp_n = lay.dp * lay.cp
    edp, edp_stride = expert_dp_group(lay)
    overlap = constant("dp_overlap") if lay.dp_overlap else 0.0
    dense = _bucketed(tr, lay, g, t_dense, dp_n, lay.tp, topo)
    expert = _bucketed(tr, lay, g, t_expert, edp, edp_stride, topo)
    total = dense[0] + expert[0]
    last = max(dense[2], expert[2]) if overlap else 0.0
    # ZeRO-1/2 all-gather the updated parameters: under the next forward where the framework overlaps it
    window = overlap * (sc.bwd + (sc.fwd if lay.zero >= 1 and param_gather_hidden(tr.framework) else 0.0))
    exposed = min(total, max(last, total - window))
    step = Overlapped(total, exposed, total - exposed)
    if lay.zero != 2 or n_mb <= 1:
        return step
    rs = reduce_scatter_s(g * t_dense, dp_n, lay.tp, topo, dense[1]) + \
        reduce_scatter_s(g * t_expert, edp, edp_stride, topo, expert[1])
    earlier, own = n_mb - 1, overlap * sc.bwd
    return Overlapped(step.total + earlier * rs, step.exposed + earlier * max(0.0, rs - own),
                      step.hidden + earlier * min(rs, own))


def _bucketed(tr: Training, lay: Layout, g: float, params: float, n: int, stride: int, topo: Topology
              ) -> tuple[float, int, float]:
    """(seconds, collectives, seconds of the last one) of the all-reduce of ``params`` gradients of ``g`` bytes on the
    wire over ``n`` ranks: in the framework's buckets, or one collective (the last then 0: nothing known of when it
    starts)."""
    nbytes = g * params
    if n <= 1 or nbytes <= 0:
        return 0.0, 1, 0.0
    per = grad_bucket_params(tr.framework, lay.zero, lay.pp, lay.dp_overlap, n, g)
    if per is None:
        return all_reduce_s(nbytes, n, stride, topo), 1, 0.0
    calls = max(1, math.ceil(params / per))
    one = all_reduce_s(nbytes / calls, n, stride, topo)
    return calls * one, calls, one


def dp_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, n_mb: int, topo: Topology) -> Overlapped:
    """The step's data-parallel collectives: ZeRO-3/FSDP's, else DDP's and ZeRO-1/2's."""
    return zero3_comm(m, tr, lay, sc, n_mb, topo) if lay.zero == 3 else replica_comm(tr, lay, sc, topo, n_mb)
