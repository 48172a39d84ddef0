"""``fit``: the smallest GPU count on which a training run fits, and the fastest layout there.

Counts tried: 1 … gpus_per_node, then whole nodes (the 9th GPU means a second node). At each
count the layouts are the plan's own (search/enumerate.py: the same enumerator, the same rules,
the same global batch — at a given count, the batch ``plan`` takes there: search/batch.py ``batch_at_count``),
so ``fit`` and ``plan`` cannot disagree about what fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpuplan.catalog.intervals import point_estimates
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import unsupported_precision
from gpuplan.model.ep_comm import unsupported_dispatcher
from gpuplan.model.recompute_modules import unsupported_modules
from gpuplan.search.batch import NoSplit, batch_at_count
from gpuplan.search.codes import WORK_LIMIT
from gpuplan.search.enumerate import Candidate, Miss, Search, default_global_batch
from gpuplan.search.quiet import collector_paused
from gpuplan.search.space import degrees, offload_passes
from gpuplan.spec import Layout, check_fixed_layout, divisors
from gpuplan.spec.defaults import gpu_limit
from gpuplan.spec.hardware import tp_domain
from gpuplan.spec.scenario import Scenario


@dataclass(frozen=True, slots=True)
class FitResult:
    """``min_gpus`` None when nothing fits on up to ``max_gpus``; then ``closest`` is the nearest miss."""

    scenario: Scenario        # at ``min_gpus`` when something fits
    min_gpus: int | None
    best: Candidate | None
    closest: Miss | None
    tried: int
    global_batch: int
    max_gpus: int = 0  # the largest count tried (the fixed hardware.gpus when given)
    not_searched: int = 0  # parallel splits past the work limit (enumerate.MAX_SPLITS): counted, not searched
    # the smallest count (below ``min_gpus``, or at all when nothing fits) where the peak's point estimate
    # fits, though its 80 % interval's upper end does not (TIGHT there: runs like it have run and have run
    # out of memory); None when there is none
    at_point: int | None = None
    # with offload left open and ``min_gpus`` found without it: the smallest count that offloading fits, and
    # its fastest layout (said beside the answer; offloading trades GPUs for host memory and PCIe time)
    with_offload: Candidate | None = None
    default_batch: int = 0  # the global batch before the given count moved it (search/batch.py); 0: not moved
    no_split: NoSplit | None = None  # the given count splits the given batch over no layout: what would

    @property
    def layout(self) -> Layout | None:
        return self.best.layout if self.best is not None else None


def candidate_counts(gpus_per_node: int, max_gpus: int) -> Iterator[int]:
    for n in range(1, min(gpus_per_node, max_gpus) + 1):
        yield n
    n = 2 * gpus_per_node
    while n <= max_gpus:
        yield n
        n += gpus_per_node


def _worlds(sc: Scenario, global_batch: int) -> set[int]:
    """GPU counts dp·tp·pp·cp that the enumerator can build (dp divides the global batch)."""
    dps = [sc.layout["dp"]] if "dp" in sc.layout else divisors(global_batch)
    tps, pps, cps = degrees(sc, tp_domain(sc.hardware))
    return {d * t * p * c for d in dps for t in tps for p in pps for c in cps}


@collector_paused()
def fit(sc: Scenario, max_gpus: int | None = None) -> FitResult:
    """The smallest count of ``sc``'s GPU type that fits, searching what the scenario leaves open
    (a given ``hardware.gpus``: whether it fits there). Offloading is searched only when nothing
    fits without it (as ``plan`` does)."""
    check_fixed_layout(sc)
    max_gpus, fixed_n = gpu_limit(sc, max_gpus)
    problem = unsupported_precision(sc.hardware.gpu, sc.training.precision, sc.training.fp8_recipe) \
        or unsupported_dispatcher(sc.model, sc.hardware, sc.training) \
        or unsupported_modules(sc.training.framework, sc.layout)
    if problem:
        raise GpuplanError(problem)
    gb = asked = default_global_batch(sc)
    if fixed_n is not None:  # the batch plan takes at the given count, or what would split it (search/batch.py)
        sc, gb, gap = batch_at_count(sc, (sc.hardware,), fixed_n, gb)
        if gap is not None:
            return FitResult(sc, None, None, None, 0, gb, max_gpus, no_split=gap)
    default = asked if gb != asked else 0
    search = Search(sc, gb)
    passes = offload_passes(sc)
    for offload in passes:
        n = _smallest(search, max_gpus, offload, fixed_n)
        if n is not None:
            # fewer GPUs with offload (when offload is open and this answer offloads nothing): said, not taken
            fewer = _with_offload(sc, n - 1, (("optimizer",), ("params",))) \
                if fixed_n is None and "offload" not in sc.layout and offload == ("none",) else None
            return FitResult(sc.with_gpus(n), n, search.best[(sc.hardware.gpu.id, n)], None,
                             search.searched, gb, max_gpus, search.rejected[WORK_LIMIT],
                             at_point=None if fixed_n is not None else _at_point(sc, gb, n - 1, None, (offload,)),
                             with_offload=fewer, default_batch=default)
    return FitResult(sc, None, None, search.closest(), search.searched, gb, max_gpus, search.rejected[WORK_LIMIT],
                     at_point=_at_point(sc, gb, max_gpus, fixed_n, offload_passes(sc)), default_batch=default)


def _with_offload(sc: Scenario, upto: int, passes: tuple[tuple[str, ...], ...]) -> Candidate | None:
    """The fastest layout on the smallest count up to ``upto`` that fits by offloading the optimizer state (else
    the parameters too) — within the node's host memory where the scenario gives it."""
    if upto < 1 or not passes:
        return None
    search = Search(sc)
    for offload in passes:
        n = _smallest(search, upto, offload, None)
        if n is not None:
            return search.best[(sc.hardware.gpu.id, n)]
    return None


def _at_point(sc: Scenario, gb: int, upto: int, fixed_n: int | None, passes: Iterable[tuple[str, ...]]
              ) -> int | None:
    """The smallest count up to ``upto`` (only ``fixed_n`` when given) where the peak's point estimate fits,
    offloading as the answer does (the answer's interval aside)."""
    if upto < 1:
        return None
    with point_estimates():
        search = Search(sc, gb)
        for offload in passes:
            n = _smallest(search, upto, offload, fixed_n)
            if n is not None:
                return n
    return None


def _smallest(search: Search, max_gpus: int, offload: tuple[str, ...], only: int | None) -> int | None:
    """The first count on the ladder where a layout fits, or None."""
    sc = search.sc
    worlds = _worlds(sc, search.gb)
    largest = max(worlds)
    # past every tp×pp split, more GPUs only add data parallelism: once doubling the count no
    # longer lowers the least peak floor any split has (memory.peak_floor), no larger count will fit
    settled = 2 * sc.hardware.gpus_per_node * sc.model.n_layers
    for n in ([only] if only is not None else candidate_counts(sc.hardware.gpus_per_node, max_gpus)):
        if n > largest:
            break  # past dp = global batch with every tp and pp: no layout of more GPUs exists
        if n not in worlds:
            continue
        search.run_gpu(sc.hardware, n, offload, counts=lambda k, n=n: k == n)
        if (sc.hardware.gpu.id, n) in search.best:
            return n
        least = search.least_floor
        if n >= settled and n % 2 == 0 and n in least and n // 2 in least and least[n] >= 0.999 * least[n // 2]:
            break
    return None
