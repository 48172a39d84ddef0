"""A GPU count and a global batch that do not meet: every layout's data-parallel replicas take an equal
share of the batch (dp divides it) and its ranks make up the count (dp × tp × pp × cp), so a count can have
no layout at all for a batch — 96 GPUs and 1,024 sequences for a 70B model of 80 layers: dp would be 3, 12
or 24 beside tp ≤ 8 and a pipeline of a divisor of 80 or a power of two. ``plan`` asks here for the default
batch a given count can split, and for what to change when the batch is given too."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import EllipsisType

from gpuplan.catalog.frameworks import refuses_degrees
from gpuplan.search.space import MICRO_BATCHES, Split, splits
from gpuplan.spec import Hardware
from gpuplan.spec.scenario import Scenario
from gpuplan.spec.tokens_batch import TOKENS_SLACK, read_batch


@dataclass(frozen=True, slots=True)
class NoSplit:
    """No layout of ``gpus`` GPUs splits ``global_batch`` sequences: the nearest global batches that one does
    (below, above), the batch near it that keeps most layouts (``batch_for_count``), and the nearest GPU counts
    that split this batch (below, above); None where there is none."""

    gpus: int
    global_batch: int
    batches: tuple[int | None, int | None]
    suggested: int | None
    counts: tuple[int | None, int | None]


def _runnable(sc: Scenario, hw: Hardware, counts: Callable[[int], bool], max_gpus: int, global_batch: int
              ) -> Iterator[Split]:
    """The splits of search/space.py ``splits`` whose parallel degrees the framework can run at all (PyTorch FSDP
    via accelerate has no pipeline: a count only a pipeline splits does not split the batch there)."""
    tr = sc.training
    for s in splits(sc, hw, counts, max_gpus, global_batch):
        if not refuses_degrees(tr.framework, {"tp": s.tp, "pp": s.pp, "cp": s.cp, "dp": s.dp, "ep": s.ep}, tr):
            yield s


def split_count(sc: Scenario, targets: tuple[Hardware, ...], n: int, global_batch: int) -> int:
    """The parallel splits of exactly ``n`` GPUs over the GPU types of ``targets`` that the framework can run."""
    return sum(1 for hw in targets for _ in _runnable(sc, hw, lambda k: k == n, n, global_batch))


def _replicas(sc: Scenario, targets: tuple[Hardware, ...], n: int) -> list[int]:
    """What the global batch must be a multiple of for each layout of ``n`` GPUs, whatever the batch: its
    data-parallel width (a divisor of ``n``) times a fixed micro-batch."""
    unit = sc.layout.get("micro_batch", 1)
    return sorted({s.dp * unit for hw in targets for s in _runnable(sc, hw, lambda k: k == n, n, n)})


def _room(sc: Scenario, targets: tuple[Hardware, ...], n: int, global_batch: int) -> int:
    """The (split, micro-batch) pairs of ``n`` GPUs that ``global_batch`` admits: each split whose data-parallel
    width divides it, once per micro-batch the search tries (or the fixed one) that divides its replicas' share."""
    mbs = (sc.layout["micro_batch"],) if "micro_batch" in sc.layout else MICRO_BATCHES
    return sum(1 for hw in targets for s in _runnable(sc, hw, lambda k: k == n, n, global_batch)
               for mb in mbs if global_batch // s.dp % mb == 0)


def batch_for_count(sc: Scenario, targets: tuple[Hardware, ...], n: int, wanted: int) -> int | None:
    """The global batch a plan at a given count of ``n`` GPUs uses when the default rule's ``wanted`` sequences
    split over none of its layouts: of the multiples next to ``wanted`` of each possible data-parallel width
    (times 1–16, the micro-batches the search tries, and of all of them), the nearest that keeps at least half
    the layouts and micro-batches (``_room``) of the roomiest among them — within a factor of two of ``wanted``
    where one splits at all; the larger on a tie. None: no batch does (the fixed layout fields)."""
    widths = _replicas(sc, targets, n)
    steps = {d * m for d in widths for m in MICRO_BATCHES}
    if widths:
        steps.add(math.lcm(*widths) * MICRO_BATCHES[-1])
    cands = {x for d in steps for x in (max(d, wanted // d * d), math.ceil(wanted / d) * d)}
    scored = [(k, x) for x in sorted(cands) if (k := _room(sc, targets, n, x))]
    near = [(k, x) for k, x in scored if wanted / 2 <= x <= 2 * wanted] or scored
    if not near:
        return None
    most = max(k for k, _ in near)
    return min((x for k, x in near if 2 * k >= most), key=lambda x: (abs(x - wanted), -x))


def no_split(sc: Scenario, targets: tuple[Hardware, ...], n: int, global_batch: int,
             suggested: int | None | EllipsisType = ...) -> NoSplit:
    """What to change when no layout of ``n`` GPUs splits ``global_batch``: the nearest batches below and above
    that one does, the one near it that keeps most layouts (``batch_for_count``; ``suggested`` when the caller
    has it already), and the nearest counts (up to 4 × ``n``) that split this batch."""
    if suggested is ...:
        suggested = batch_for_count(sc, targets, n, global_batch)
    widths = _replicas(sc, targets, n)
    below = [global_batch // d * d for d in widths if global_batch // d * d >= d]
    above = [math.ceil(global_batch / d) * d for d in widths]
    worlds = {s.world for hw in targets for s in _runnable(sc, hw, lambda k: k != n, 4 * n, global_batch)}
    return NoSplit(gpus=n, global_batch=global_batch,
                   batches=(max(below, default=None), min(above, default=None)),
                   suggested=suggested,
                   counts=(max((w for w in worlds if w < n), default=None),
                           min((w for w in worlds if w > n), default=None)))



def _within(sc: Scenario, targets: tuple[Hardware, ...], n: int, wanted: int) -> int | None:
    """Of the batches within 5 % of a given ``wanted`` (a rounded published batch: spec/tokens_batch.py) that some
    layout of ``n`` GPUs splits, the one that keeps the most layouts and micro-batches (``_room``), the nearest on a
    tie, the larger on an equal distance; None where none does."""
    cands = {x for d in _replicas(sc, targets, n) for x in (wanted // d * d, math.ceil(wanted / d) * d)
             if x and abs(x / wanted - 1) <= TOKENS_SLACK}
    scored = [(_room(sc, targets, n, x), -abs(x - wanted), x) for x in cands]
    best = max(scored, default=None)
    return best[2] if best is not None and best[0] else None


def batch_at_count(sc: Scenario, targets: tuple[Hardware, ...], n: int, global_batch: int
                   ) -> tuple[Scenario, int, NoSplit | None]:
    """The scenario and global batch a search of exactly ``n`` GPUs uses (``plan`` and ``fit`` alike), and what
    to change when there is none: where ``global_batch`` splits over some layout, as it is; else a default batch
    moves to the one ``n`` splits (``batch_for_count``; `assumed` says so), a given one — in tokens or sequences
    — is read as it within 5 % (`read as`: a published batch is rounded), or else as the batch within 5 % that
    keeps the most layouts and micro-batches; further off, or with a fixed dp, it stays and ``NoSplit`` names the
    nearest batches and counts that split."""
    if split_count(sc, targets, n, global_batch):
        return sc, global_batch, None
    suggested = batch_for_count(sc, targets, n, global_batch)
    fitted = None if "dp" in sc.layout else suggested
    if fitted is not None and "training.global_batch" in sc.given:
        read = read_batch(sc, fitted)
        if read is None and (near := _within(sc, targets, n, global_batch)) is not None:
            read, fitted = read_batch(sc, near), near  # the roomy batch is too far: the roomiest within 5 %
        sc, fitted = (read, fitted) if read is not None else (sc, None)
    if fitted is None:
        return sc, global_batch, no_split(sc, targets, n, global_batch, suggested)
    return sc, fitted, None
