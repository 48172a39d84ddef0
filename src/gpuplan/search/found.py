"""What a search finds: the fastest layout per GPU type and count, and the nearest miss."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.model.estimate import Cost, TimeEstimate
from gpuplan.model.memory import MemoryBreakdown
from gpuplan.search.space import Shard
from gpuplan.spec import Hardware, Layout


@dataclass(frozen=True, slots=True)
class Candidate:
    """The fastest layout found for one GPU type and count, timed and priced by ``estimate.assess`` (on a GPU
    with no published compute peak: the first that fits, untimed — ``fit`` still answers its count)."""

    gpu: str
    gpus: int
    layout: Layout
    time: TimeEstimate | None  # None on a GPU with no published compute peak (the first layout that fits)
    cost: Cost
    hw: Hardware

    @property
    def step_s(self) -> float:
        return self.time.step_s if self.time is not None else math.inf

    @property
    def tokens_per_s(self) -> float:
        return self.time.tokens_per_s if self.time is not None else 0.0

    @property
    def train_s(self) -> float | None:
        return self.time.train_s if self.time is not None else None

    @property
    def usd(self) -> float | None:
        return self.cost.usd


@dataclass(frozen=True, slots=True)
class Miss:
    """The layout out of memory that came nearest to fitting (reported when nothing fits)."""

    over_bytes: float
    layout: Layout
    hw: Hardware
    memory: MemoryBreakdown


@dataclass(frozen=True, slots=True)
class Family:
    """Layouts of one split and offload choice that differ only in their micro-batch."""

    schedule: str
    virtual_stages: int
    micro_batches: tuple[int, ...]
    recompute: str
    shard: Shard
