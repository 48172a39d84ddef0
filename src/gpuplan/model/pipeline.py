"""Pipeline parallelism in one place: how layers are split into stages, how many micro-batches
each stage holds, which stage is the most loaded, and the bubble. Memory (model/memory.py) and
step time (model/runtime.py) both ask here, so they agree on the stages."""

from __future__ import annotations

from functools import lru_cache

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_memory import keeps_stage_buffers
from gpuplan.model.activations import ACT_BYTES
from gpuplan.model.comm import Topology, send_recv_s
from gpuplan.spec import Hardware, Layout, ModelSpec, Training


def chunk_sizes(n_layers: int, chunks: int) -> list[int]:
    """Layers per pipeline chunk. Even when ``chunks`` divides the layers; otherwise the
    remainder goes to the middle chunks so the first and last (which also hold the embedding
    and the LM head) get fewer — what Llama 3 did for 126 layers on 16 stages (Dubey et al.
    2024, Sec. 3.3.2) and Megatron's ``decoder_first/last_pipeline_num_layers`` allow."""
    base, extra = divmod(n_layers, chunks)
    sizes = [base] * chunks
    start = 1 if extra <= chunks - 2 else 0
    for i in range(start, start + extra):
        sizes[i] += 1
    return sizes


def layer_owners(n_layers: int, pp: int, vstages: int) -> list[int]:
    """The stage that holds each layer: chunks go round-robin over the stages (interleaved)."""
    return [c % pp for c, size in enumerate(chunk_sizes(n_layers, pp * vstages)) for _ in range(size)]


def micro_batches(training: Training, layout: Layout) -> int:
    """Micro-batches per optimizer step per pipeline (gradient accumulation steps)."""
    return micro_batch_count(training.global_batch, layout.dp, layout.micro_batch, layout.pp)


def micro_batch_count(global_batch: int | None, dp: int, mb: int, pp: int) -> int:
    """``micro_batches`` from plain numbers; with no global batch, enough to fill the pipeline."""
    if global_batch is None:
        return pp if pp > 1 else 1
    return global_batch // (dp * mb)


def flight_of(p: int, schedule: str, v: int, stage: int, m: int) -> float:
    """Micro-batches whose activations stage ``stage`` of ``p`` holds at its peak (``m`` per step).
    1F1B (Narayanan et al. 2021, PipeDream-flush) and zero-bubble ZB-H1 (Qi et al. 2023,
    arXiv:2401.10241, same peak as 1F1B): min(p − stage, m). DualPipe: p + 1 on every rank.
    Interleaved with v chunks: rank r runs 2(p − r − 1) + (v − 1)·p warm-up chunk forwards before its first
    backward (Megatron-Core schedules.py, microbatch_group_size_per_vp_stage defaulting to p; torch.distributed.
    pipelining ScheduleInterleaved1F1B the same), so (that + 1)/v micro-batches' worth: p + (p − 1)/v on the first
    stage (Korthikanti et al. 2022, Sec. 4.2.3: L·(1 + (p−1)/(p·v)) layers' worth), p − (p − 1)/v on the last.
    GPipe: all m."""
    if p == 1:
        return 1
    if schedule == "dualpipe":  # DeepSeek-V3, arXiv:2412.19437, Table 2: activation PP + 1
        return min(p + 1, m)
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return min((2 * (p - stage - 1) + (v - 1) * p + 1) / v, m)
    return min(p - stage, m)


def stage_io_bytes(model: ModelSpec, training: Training, lay: Layout, stage: int, mb: int, n_mb: int,
                   flight: float) -> float:
    """What a torch.distributed.pipelining rank keeps for its stages' inputs and outputs beyond the activations
    (frameworks.json ``memory.pp_stage_buffers``; 0 for other frameworks and without a pipeline), in units of
    one stage input B (micro-batch × sequence × hidden, over tp under sequence parallelism). Per stage of the
    rank (``virtual_stages`` of them): a receive buffer per micro-batch of the step, those in flight being the
    input its first block keeps (n_mb − f more), a gradient receive buffer per micro-batch (n_mb) and the outputs
    of those in flight (f) — 2·n_mb for a stage in the middle; the pipeline's first stage receives nothing
    (n_mb + f, f its micro-batches in flight), its last sends nothing (n_mb − 1)."""
    p, v = lay.pp, lay.virtual_stages
    if p == 1 or not keeps_stage_buffers(training.framework):
        return 0.0
    unit = ACT_BYTES[training.precision] * mb * training.seq_len / lay.cp * model.hidden \
        / (lay.tp if lay.sequence_parallel else 1)
    units = 2 * v * n_mb - (stage == 0) * (n_mb - min(flight, n_mb)) - (stage == p - 1) * (n_mb + 1)
    return unit * units


def peak_stages(model: ModelSpec, pp: int, vstages: int) -> list[int]:
    """Stages that can be the most loaded — in memory and in time. With identical layers and an
    even split, stage 0 (embedding, p micro-batches in flight) dominates every middle stage; only
    the last (LM head, logits) can exceed it. Uneven splits and mixed layer types (DeepSeek's
    dense-then-MoE) need the neighbours too."""
    if len(model.layers) == 1 and model.n_layers % (pp * vstages) == 0:
        return sorted({0, pp - 1})
    if pp <= 4:
        return list(range(pp))
    return _mixed_peak_stages(model, pp, vstages) if len(model.layers) > 1 else sorted({0, 1, pp - 2, pp - 1})


@lru_cache(maxsize=1024)
def _mixed_peak_stages(model: ModelSpec, pp: int, vstages: int) -> list[int]:
    """Mixed layer kinds: besides the ends, the first stage of each mix of layers (e.g. 2 dense +
    2 MoE, 4 MoE; a hybrid's Mamba, attention and MLP blocks) — the first holds the most micro-batches in
    flight among stages like it."""
    kinds = [model.kind_index(lg) for lg in model.layers for _ in range(lg.count)]
    mix: dict[tuple[int, ...], int] = {}
    for stage, layers in enumerate(_stage_layers(model.n_layers, pp, vstages)):
        key = tuple(sum(1 for i in layers if kinds[i] == k) for k in range(len(model.kinds)))
        mix.setdefault(key, stage)
    return sorted({0, 1, pp - 2, pp - 1, *mix.values()})


def _stage_layers(n_layers: int, pp: int, vstages: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(pp)]
    for i, owner in enumerate(layer_owners(n_layers, pp, vstages)):
        out[owner].append(i)
    return out


# DualPipe's bubble (DeepSeek-V3, arXiv:2412.19437, Table 2): (PP/2 − 1)(F&B + B − 3W) against
# 1F1B's (PP − 1)(F + B), B the whole backward. With the backward twice the forward and its
# weight half W = F (Qi et al. 2023, arXiv:2401.10241, Sec. 2), and no credit for the overlap
# inside a paired F&B chunk (F&B = F + B = 3F): (3F + 2F − 3F) / (F + B) = 2/3 of a micro-batch slot.
DUALPIPE_BUBBLE_SHARE = 2 / 3


def bubble_s(layout: Layout, per_microbatch_s: float) -> float:
    """Idle time of the pipeline per step (Narayanan et al. 2021, Sec. 2.2): (p − 1) micro-batch
    slots of the slowest stage; divided by v for the interleaved schedule; ZB-H1 (Qi et al. 2023)
    leaves a share ``zero_bubble_factor`` of it; DualPipe (p/2 − 1) × ``DUALPIPE_BUBBLE_SHARE``."""
    p = layout.pp
    if p == 1:
        return 0.0
    bubble = (p - 1) * per_microbatch_s
    if layout.pp_schedule == "interleaved":
        bubble /= layout.virtual_stages
    elif layout.pp_schedule == "dualpipe":
        bubble = (p / 2 - 1) * per_microbatch_s * DUALPIPE_BUBBLE_SHARE
    elif layout.pp_schedule == "zero-bubble":
        bubble *= constant("zero_bubble_factor")
    return bubble


def pipeline_comm_s(m: ModelSpec, hw: Hardware, lay: Layout, tokens: float, topo: Topology) -> float:
    """Pipeline send/recv seconds per micro-batch: the forward activation and the backward gradient,
    once per model chunk — interleaving v chunks multiplies the traffic by v (Narayanan et al. 2021,
    Sec. 2.2.2). Stages are the outermost rank dimension; once the job spans domains some stage
    boundary crosses the network, and the pipeline moves at the pace of its slowest hop."""
    if lay.pp == 1:
        return 0.0
    act_bytes = tokens * m.hidden * 2
    crosses = hw.gpus > topo.domain
    return 2 * lay.virtual_stages * send_recv_s(act_bytes / (lay.tp if lay.sequence_parallel else 1), crosses, topo)
