"""One pipeline stage, traced with its in-flight micro-batches.

A pipeline of p stages is traced as ONE stage's ranks (the most loaded one, as the analytic model says:
``model.memory.worst_stage``): ``PipelineStageLM`` holds that stage's layers only — in v model chunks
when interleaved, chunk j of stage s being the model's chunk s + j·p (``model.pipeline.chunk_sizes``,
the split the formula uses) — the embedding on the first stage, the final norm and LM head on the last
(untied: the last stage keeps its own copy of a tied matrix, as Megatron-LM does).

The stage runs the schedule of its rank (``stage_schedule``), written after
``torch.distributed.pipelining``'s ``Schedule1F1B`` and ``ScheduleInterleaved1F1B`` (torch 2.13):
1F1B runs min(m, p − s) warm-up forwards whose activations are all kept, then one backward and one
forward in turn (Narayanan et al. 2021, PipeDream-flush), so stage s holds min(p − s, m) micro-batches
at its peak; interleaved runs (v − 1)·(m/rounds) + 2·(p − 1 − s) warm-up chunk forwards, then one
forward and one backward in turn. What the other stages would send is made here: a received
activation is a fresh tensor that requires grad (the next stage's input gradient is its ``.grad``,
freed once "sent"), a received output gradient a fresh tensor shaped like the output. As in
``PipelineStage.forward_one_chunk``, each micro-batch's stage output is kept with its inputs until its
backward (``fwd_cache``); unlike it, receive buffers are not pre-allocated for every micro-batch.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from gpuplan.errors import GpuplanError
from gpuplan.model.memory import worst_stage
from gpuplan.model.pipeline import chunk_sizes, micro_batch_count
from gpuplan.spec import Layout
from gpuplan.spec.defaults import default_global_batch
from gpuplan.spec.model import ModelSpec
from gpuplan.spec.scenario import Scenario
from gpuplan.trace.model import Block, RMSNorm, block_options, causal_lm_loss, inv_freq, rope_tables

Op = tuple[str, int, int]  # ("F" | "B", local chunk, micro-batch)


@dataclass(slots=True, kw_only=True)
class StagePlan:
    """The pipeline stage a trace runs: which, its schedule, micro-batches per step and traced."""

    stage: int
    vstages: int
    ops: list[Op]
    microbatches: int
    traced: int
    feed: StageFeed | None = None


def plan_stage(sc: Scenario, lay: Layout, module: str | None, stage: int | None, max_layers: int) -> StagePlan:
    """Stage ``stage`` (default: the most loaded) and its schedule. The steady state of 1F1B repeats
    itself, so a stage traces min(m, p − s + 1) of the step's m micro-batches (its peak, with the
    gradients of a finished backward beside the in-flight activations), interleaved min(m, 2p)."""
    if module is not None:
        raise GpuplanError("trace splits its own Llama-family models into pipeline stages; with --module set "
                           "layout.pp: 1")
    p, v = lay.pp, lay.virtual_stages if lay.pp_schedule == "interleaved" else 1
    training = sc.training
    if training.global_batch is None:
        training = replace(training, global_batch=default_global_batch(training, lay.dp * lay.micro_batch))
    m = micro_batch_count(training.global_batch, lay.dp, lay.micro_batch, p)
    if stage is None:
        stage = worst_stage(sc.model, training, lay, sc.corrections.on(sc.hardware.gpu.id)).stage
    elif not 0 <= stage < p:
        raise GpuplanError(f"pipeline stage {stage} does not exist: layout.pp={p} has stages 0 to {p - 1}")
    traced = min(m, p - stage + 1) if v == 1 else min(m, 2 * p)
    ops = stage_schedule(p, stage, v, traced)
    sizes = chunk_sizes(sc.model.n_layers, p * v)
    passes = sum(sizes[stage + chunk * p] for kind, chunk, _ in ops if kind == "F")
    if passes > max_layers:
        raise GpuplanError(f"trace runs every layer of every traced micro-batch in one process; stage {stage}'s "
                           f"schedule runs {passes:,} layer forwards ({traced} micro-batches), more than "
                           f"{max_layers}: trace more stages (pp) or a smaller model of that class")
    return StagePlan(stage=stage, vstages=v, ops=ops, microbatches=m, traced=traced)


class PipelineStageLM(nn.Module):
    """``forward(x, chunk)``: token ids (the model's first chunk) or a received activation → the chunk's
    output: the next stage's input, or the logits (the model's last chunk)."""

    def __init__(self, m: ModelSpec, *, pp: int, vstages: int, stage: int, eager: bool = False,
                 hf_norm: bool = False, fused_glu: bool = False) -> None:
        super().__init__()
        qkv_bias, qk_norm = block_options(m)
        sizes = chunk_sizes(m.n_layers, pp * vstages)
        self.spec_name = m.name
        self.chunks = [stage + j * pp for j in range(vstages)]  # the model's chunks this stage holds
        self.last_chunk = pp * vstages - 1
        self.bounds: list[tuple[int, int]] = []
        start = 0
        for c in self.chunks:
            self.bounds.append((start, start + sizes[c]))
            start += sizes[c]
        if stage == 0:
            self.embed_tokens = nn.Embedding(m.vocab, m.hidden)
        self.layers = nn.ModuleList(Block(m, qkv_bias, qk_norm, eager, hf_norm, fused_glu) for _ in range(start))
        if stage == pp - 1:
            self.norm = RMSNorm(m.hidden, hf_eager=hf_norm)
            self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)
        self.register_buffer("inv_freq", inv_freq(m), persistent=False)

    def takes_ids(self, chunk: int) -> bool:
        return self.chunks[chunk] == 0

    def gives_logits(self, chunk: int) -> bool:
        return self.chunks[chunk] == self.last_chunk

    def forward(self, x: torch.Tensor, chunk: int = 0, seq_len: int | None = None) -> torch.Tensor:
        if self.takes_ids(chunk):
            x = self.embed_tokens(x)
        cos, sin = rope_tables(self.inv_freq, seq_len or x.shape[1], x.dtype)
        a, b = self.bounds[chunk]
        for block in self.layers[a:b]:
            x = block(x, cos, sin)
        if self.gives_logits(chunk):
            x = self.lm_head(self.norm(x))
        return x


def stage_schedule(p: int, stage: int, v: int, m: int) -> list[Op]:
    """The forward and backward passes stage ``stage`` of ``p`` runs for ``m`` micro-batches, in order:
    torch's Schedule1F1B (v = 1) or ScheduleInterleaved1F1B (v > 1; rounds of p micro-batches)."""
    if v == 1:
        warm = min(m, p - stage)
        ops: list[Op] = [("F", 0, i) for i in range(warm)]
        for b in range(m):  # 1B1F: one backward, then the next forward
            ops.append(("B", 0, b))
            if warm + b < m:
                ops.append(("F", 0, warm + b))
        return ops
    rounds = max(1, m // p)
    if m % rounds:
        raise GpuplanError(f"the interleaved schedule runs the micro-batches in rounds of about pp: {m} micro-batches "
                           f"do not split into {rounds} rounds (torch's ScheduleInterleaved1F1B): choose a global "
                           "batch whose micro-batch count is a multiple of pp")
    per_round, total = m // rounds, m * v
    warm = min((v - 1) * per_round + 2 * (p - 1 - stage), total)
    done = {"F": [0] * v, "B": [0] * v}
    ops = []

    def add(kind: str, chunk: int) -> None:
        ops.append((kind, chunk, done[kind][chunk]))
        done[kind][chunk] += 1

    for op in range(total + warm):
        if op < total:
            add("F", (op // per_round) % v)
        if op >= warm:
            add("B", v - 1 - ((op - warm) // per_round) % v)
    return ops


def in_flight_peak(ops: list[Op], v: int) -> float:
    """Most micro-batches (in stage units: chunk passes / v) whose activations the schedule holds at once."""
    held = most = 0
    for kind, _c, _mb in ops:
        held += 1 if kind == "F" else -1
        most = max(most, held)
    return most / v


def warm_up_ops(v: int) -> list[Op]:
    """One micro-batch through every chunk and back: lazy optimizer state and FSDP initialisation."""
    return [("F", j, 0) for j in range(v)] + [("B", j, 0) for j in reversed(range(v))]


def run_schedule(model: PipelineStageLM, ops: list[Op], feed: Any, tracker: Any) -> None:
    """Run ``ops`` on ``model``; ``feed`` makes each micro-batch's inputs (``StageFeed``)."""
    kept: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    for kind, chunk, mb in ops:
        if tracker is not None:
            tracker.set_phase("forward" if kind == "F" else "backward", f"{kind}{mb}" + (f".{chunk}" if
                                                                                      len(model.chunks) > 1 else ""))
        if kind == "F":
            x = feed.ids() if model.takes_ids(chunk) else feed.received()
            out = model(x, chunk, feed.seq_len)
            if model.gives_logits(chunk):
                with tracker.loss_scope() if tracker is not None else nullcontext():
                    out = causal_lm_loss(out, feed.labels())
            kept[(chunk, mb)] = (out, x)
            del out, x
            continue
        out, x = kept.pop((chunk, mb))
        if out.dim() == 0:
            out.backward()
        else:
            torch.autograd.backward(out, torch.empty_like(out))  # the gradient the next stage sends back
        del out, x  # x.grad (the input gradient) is sent to the previous stage and freed


class StageFeed:
    """Each micro-batch's inputs: token ids and labels (fresh per micro-batch, as a data loader gives
    them) and the activations a previous stage would send."""

    def __init__(self, *, vocab: int, micro_batch: int, seq_len: int, received_shape: tuple[int, ...],
                 dtype: torch.dtype, device: torch.device) -> None:
        self.vocab, self.mb, self.seq_len = vocab, micro_batch, seq_len
        self.shape, self.dtype, self.device = received_shape, dtype, device

    def ids(self) -> torch.Tensor:
        return torch.randint(0, self.vocab, (self.mb, self.seq_len), device=self.device)

    labels = ids

    def received(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.dtype, device=self.device, requires_grad=True)
