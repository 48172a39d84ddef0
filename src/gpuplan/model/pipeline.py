"""Pipeline parallelism in one place: how layers are split into stages, how many micro-batches
each stage holds, which stage is the most loaded, and the bubble. Memory (model/memory.py) and
step time (model/runtime.py) both ask here, so they agree on the stages."""

from __future__ import annotations

from gpuplan.catalog.constants import constant
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
    arXiv:2401.10241, same peak as 1F1B): min(p − stage, m). Interleaved with v chunks
    (Korthikanti et al. 2022, Sec. 4.2.3: first stage holds L·(1 + (p−1)/(p·v)) layers'
    worth): p − stage + (p − 1)/v. GPipe: all m."""
    if p == 1:
        return 1
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return min(p - stage + (p - 1) / v, m)
    return min(p - stage, m)


def peak_stages(model: ModelSpec, pp: int, vstages: int) -> list[int]:
    """Stages that can be the most loaded — in memory and in time. With identical layers and an
    even split, stage 0 (embedding, p micro-batches in flight) dominates every middle stage; only
    the last (LM head, logits) can exceed it. Uneven splits and mixed layer types (DeepSeek's
    dense-then-MoE) need the neighbours too."""
    if len(model.layers) == 1 and model.n_layers % (pp * vstages) == 0:
        return sorted({0, pp - 1})
    return list(range(pp)) if pp <= 4 else sorted({0, 1, pp - 2, pp - 1})


def bubble_s(layout: Layout, per_microbatch_s: float) -> float:
    """Idle time of the pipeline per step (Narayanan et al. 2021, Sec. 2.2): (p − 1) micro-batch
    slots of the slowest stage; divided by v for the interleaved schedule; ZB-H1 (Qi et al. 2023)
    leaves a share ``zero_bubble_factor`` of it."""
    p = layout.pp
    if p == 1:
        return 0.0
    bubble = (p - 1) * per_microbatch_s
    if layout.pp_schedule == "interleaved":
        bubble /= layout.virtual_stages
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
