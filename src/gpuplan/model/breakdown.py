"""The result types of the memory model: one rank's model states, its activations, a pipeline
stage's peak, the breakdown an answer shows, and the verdict the planner and ``evaluate`` both
take from ``memory.verdict`` (bytes per GPU throughout)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from gpuplan.catalog.constants import constant


class Part(Enum):
    """The parts of a peak a user can act on (report/advice.py says what to change for each)."""

    STATES = "states"
    ACTIVATIONS = "activations"
    LOGITS_AND_BUFFERS = "logits_and_buffers"


@dataclass(frozen=True, slots=True)
class ModelStates:
    """One rank's model states and what the rest of the peak derives from them (bytes, elements)."""

    weights: float
    gradients: float
    optimizer: float
    cpu_offload: float       # optimizer (and with params offload, weights and gradients) in host memory
    optimizer_params: float  # parameters whose optimizer state this rank updates (after ZeRO-1)
    buffers: float           # ZeRO-3/FSDP gather and reduce buffers, DDP buckets, QLoRA dequantisation
    params_on_rank: float
    trainable_on_rank: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer

    def mirrored(self) -> ModelStates:
        """DualPipe: each rank holds its stage and the mirrored one (stage pp−1−i), "2× parameters"
        (DeepSeek-V3, arXiv:2412.19437, Table 2) — weights, gradients and optimizer states of both."""
        return replace(self, weights=2 * self.weights, gradients=2 * self.gradients, optimizer=2 * self.optimizer,
                       cpu_offload=2 * self.cpu_offload, optimizer_params=2 * self.optimizer_params,
                       params_on_rank=2 * self.params_on_rank, trainable_on_rank=2 * self.trainable_on_rank)


@dataclass(frozen=True, slots=True)
class StageActivations:
    per_microbatch: float  # activations one micro-batch leaves for backward
    held: float            # held at the peak: per micro-batch × in flight + the working sets held once
    logits: float          # the LM head's logits and loss buffers (last stage)


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePeak:
    """Everything one pipeline stage's peak is made of (bytes per GPU)."""

    stage: int
    total: float
    states: ModelStates
    activations_per_microbatch: float
    activations: float       # held at the forward/backward peak
    logits: float
    buffers: float
    optimizer_step: float    # the optimizer step's temporaries
    fragmentation: float
    runtime: float           # CUDA context, cuBLAS workspace, NCCL communicators
    train_phase_peak: bool   # the peak is in forward/backward (else in the optimizer step)
    microbatches_in_flight: float
    gradients_held: float    # gradients alive at the peak (one GPU, one micro-batch: see stage_peak)

    @property
    def outside(self) -> float:
        """What of ``runtime`` lives outside PyTorch's caching allocator: the CUDA context and NCCL's buffers (the
        cuBLAS workspace is allocated through it)."""
        return self.runtime - constant("cublas_workspace_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Per-GPU memory of the most loaded rank; ``to_json`` is the contract's ``memory`` block."""

    peak: StagePeak
    total: float
    capacity: float
    calibration: float          # bytes added by a fitted memory correction (0 without one)
    cpu_offload_per_node: float
    host_memory: float | None
    fits: bool
    headroom_share: float = 0.0  # training.headroom: the share of capacity kept free
    low: float = 0.0             # the 80 % interval of the peak (``fits`` is decided at ``high``)
    high: float = 0.0            # with CUDA graphs' allowance (``graphs``) included
    graphs: float = 0.0          # training.cuda_graphs: the documented allowance for their buffers (not modelled)

    @property
    def weights(self) -> float:
        return self.peak.states.weights

    @property
    def gradients(self) -> float:
        return self.peak.states.gradients

    @property
    def optimizer(self) -> float:
        return self.peak.states.optimizer

    @property
    def activations(self) -> float:
        return self.peak.activations if self.peak.train_phase_peak else 0.0

    @property
    def other(self) -> float:
        return self.total - self.peak.states.total - self.activations

    @property
    def tight(self) -> bool:
        """Does not fit at the interval's upper end with the headroom kept, yet its low end fits the GPU:
        runs like it ran, and others ran out of memory."""
        return not self.fits and self.low <= self.capacity

    @property
    def headroom(self) -> float:
        return self.capacity - self.total

    @property
    def reserved(self) -> float:
        """The caching allocator's reserved peak (``torch.cuda.max_memory_reserved``): the peak without what lives
        outside the allocator."""
        return self.peak.total - self.peak.outside

    def parts(self) -> dict[Part, float]:
        """The peak in the three parts a user can act on (the largest says what to change):
        fragmentation and the fixed runtime follow the others and are no lever of their own."""
        d = self.detail()
        return {Part.STATES: self.weights + self.gradients + self.optimizer,
                Part.ACTIVATIONS: self.activations, Part.LOGITS_AND_BUFFERS: d["logits"] + d["comm_buffers"]}

    def detail(self) -> dict[str, float]:
        p, train = self.peak, self.peak.train_phase_peak
        out = {
            "logits": p.logits if train else 0.0,
            "comm_buffers": p.buffers if train else 0.0,
            "optimizer_step": p.optimizer_step if not train else 0.0,
            # One GPU, one micro-batch (stage_peak): gradients are listed at full size, but the peak
            # comes before backward has allocated them (negative: the part not held) or at its end
            # with a tied embedding's second gradient and their sum beside them (positive).
            "backward_timing": p.gradients_held - p.states.gradients if train else 0.0,
            "runtime": p.runtime,
            "fragmentation": p.fragmentation,
        }
        if self.calibration:
            out["calibration"] = self.calibration
        return out

    def to_json(self) -> dict:
        p = self.peak
        return {
            "weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
            "activations": self.activations, "other": self.other, "total": self.total,
            "capacity": self.capacity, "fits": self.fits, "headroom": self.headroom,
            "headroom_share": self.headroom_share, "usable": self.capacity * (1 - self.headroom_share),
            "tight": self.tight, "interval": {"total": {"p10": self.low, "p90": self.high}},
            **({"cuda_graphs_allowance": self.graphs} if self.graphs else {}),
            "allocated": p.total - p.fragmentation - p.outside, "reserved": self.reserved,
            "detail": self.detail(),
            "peak_phase": "forward/backward" if p.train_phase_peak else "optimizer step",
            "stage": p.stage, "microbatches_in_flight": p.microbatches_in_flight,
            "activations_per_microbatch": p.activations_per_microbatch, "cpu_offload": p.states.cpu_offload,
            "cpu_offload_per_node": self.cpu_offload_per_node, "host_memory": self.host_memory,
            "params_on_rank": p.states.params_on_rank,
            "model_state_bytes_per_param": p.states.total / p.states.params_on_rank if p.states.params_on_rank
            else 0.0,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryVerdict:
    """Whether one peak fits on one GPU (``memory.verdict``): what ``evaluate`` reports as ``fits`` and the
    planner keeps or rejects by."""

    total: float                 # the peak with the user's fitted memory correction (bytes)
    calibration: float           # the bytes that correction added (0 without one)
    usable: float                # the GPU's usable memory less the headroom kept free
    cpu_offload_per_node: float  # offloaded state in the node's host memory
    host_ok: bool                # it fits there (True when the host memory is not given)
    low: float                   # the 80 % interval of the peak (catalog/intervals.py; total, total without one)
    high: float
    graphs: float = 0.0          # CUDA graphs' allowance above ``high`` (model/graphs.py; 0 without)

    @property
    def upper(self) -> float:
        """The upper end of what the GPU may hold: the peak's interval end and CUDA graphs' allowance."""
        return self.high + self.graphs

    @property
    def fits(self) -> bool:
        """The interval's upper end, with CUDA graphs' allowance, fits with the headroom kept free (a prediction
        is not a promise); compared as ``memory.plain_limit`` compares, the allowance taken off the usable bytes."""
        return self.high <= self.usable - self.graphs and self.host_ok
