"""The one search of layouts, used by ``fit`` and ``plan`` alike.

Every layout of the space (search/space.py) is classified — refused by the framework, out of host
memory, out of memory, or fitting — by the model's own functions (``memory.peak_bytes`` and
``memory.verdict``: the decision ``evaluate`` reports as ``fits``), and the fastest fitting layout is
kept per (GPU type, count), timed and priced by ``estimate.assess``, the function ``evaluate`` calls.
Counts are exact over the whole space; work is skipped only where a proof says the answer cannot change:

1. a (split, schedule, sharding) whose peak floor (``memory.peak_floor``: its least model states) does not
   fit: every layout of it is out of memory — counted, not built;
2. within a (schedule, recompute, sharding) family the peak never falls as the micro-batch grows (one GPU
   without ZeRO taking its whole batch in one micro-batch is the exception, and is evaluated on its own):
   the fitting micro-batches are a prefix, found from its ends and by bisection;
   and it never rises as the data-parallel width grows (``order.from_last``): those that fit the like family at
   the previous dp fit here unasked;
3. the ZeRO-1 peak is never below ZeRO-2's, nor hybrid shard's below full shard's, at the same schedule,
   recompute and micro-batch: the second bounds the first's prefix;
4. the fitting layouts of a GPU type and count are timed in the order of their step floor
   (``runtime.step_floor``: compute, bubble and optimizer only); once the floor is above the best step
   found, no later one can win.

A tie in throughput goes to the layout first in the space's canonical order, so the answer, every count
and the closest miss equal an exhaustive evaluation of every layout (tests/property/test_search_exhaustive.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpuplan.model.memory import peak_floor
from gpuplan.search.book import Plain, Where
from gpuplan.search.codes import OUT_OF_HOST_MEMORY, OUT_OF_MEMORY, WORK_LIMIT, ZERO_GROUP, Rejection
from gpuplan.search.found import Candidate, Family, Miss
from gpuplan.search.order import Last, bound, dominance_order, first_miss, from_last
from gpuplan.search.space import (
    Shard,
    Split,
    micro_batches,
    offload_passes,
    ordered_micro_batches,
    own_peak,
    recomputes,
    schedules,
    shardings,
    splits,
)
from gpuplan.search.timing import Timing
from gpuplan.spec import Hardware, Layout, Training
from gpuplan.spec.defaults import default_global_batch as _default_batch
from gpuplan.spec.hardware import tp_domain
from gpuplan.spec.scenario import Scenario

__all__ = ["MAX_SPLITS", "Candidate", "Miss", "Search", "default_global_batch", "same_space", "search_gpu",
           "search_types"]

# Parallel splits one fit or plan examines at most: Llama-3.1-405B over every catalogue GPU type (44) up to
# 16,384 GPUs takes 22,817 (~9 s of one core) — searched whole: cut at 15,000 it left 7,817 splits of the last
# types unsearched and recommended 2,048 B300 where 6,144 GB200 are faster. Past this, cut, counted as not
# searched, and said so.
MAX_SPLITS = 40_000



def default_global_batch(sc: Scenario) -> int:
    """The global batch (sequences) the search uses: as given, else spec/defaults.py's rule."""
    return _default_batch(sc.training)


class Search(Timing):
    """Classifies the layouts of one scenario; keeps the counts, the best per (GPU, count) and the least
    peak floor per count (``fit`` stops on it); ``closest()`` finds the nearest miss when nothing fits."""

    def __init__(self, sc: Scenario, global_batch: int | None = None, keep: int = 1) -> None:
        self.sc = sc
        # ``keep`` > 1: also the ``keep`` fastest layouts per (GPU, count) in ``top`` (plan --top K at a fixed
        # count), timed until the floor passes the keep-th best step
        self.keep = keep
        self.top: dict[tuple[str, int], list[tuple[float, tuple[int, ...], Candidate]]] = {}
        self.gb = global_batch if global_batch is not None else default_global_batch(sc)
        self.tr: Training = replace(sc.training, global_batch=self.gb)
        self.searched = 0
        self.rejected: Counter[Rejection] = Counter()
        self.best: dict[tuple[str, int], Candidate] = {}
        self.least_floor: dict[int, float] = {}
        self.splits_done = 0
        # a layout's rank in canonical order: (GPU type searched, split, family, micro-batch); ties go to the first
        self._run = 0
        self._ranks: dict[tuple[str, int], tuple[int, ...]] = {}
        # this run's fitting layouts per (GPU type, count): (step floor, rank, layout, hardware)
        self._fitting: dict[tuple[str, int], list[tuple[float, tuple[int, ...], Where, Hardware]]] = {}
        self._visited: list[tuple[tuple[int, ...], Hardware, Where]] | None = []  # for the closest miss
        # per (GPU type, parallel degrees but dp, family kind, offload): the largest micro-batch that fit last
        # (0: none), at which dp and verdict — the guess and proof for the next data-parallel width's (``from_last``)
        self._hints: dict[tuple, Last] = {}
        self._book(sc, self.tr)

    # ---- the space, split by split ---------------------------------------------------------------
    def run_gpu(self, hw0: Hardware, max_gpus: int, offload: tuple[str, ...],
                counts: Callable[[int], bool] = lambda n: True) -> None:
        """Every split of up to ``max_gpus`` GPUs of ``hw0``'s type whose count ``counts`` admits."""
        self.run_types((hw0,), max_gpus, offload, counts)

    def run_types(self, types: tuple[Hardware, ...], max_gpus: int, offload: tuple[str, ...],
                  counts: Callable[[int], bool] = lambda n: True) -> None:
        """GPU types whose spaces are the same (``same_space``), as if searched one after the other: per split
        the offload choices in order, stopping (per type) at the first under which something fits; then the
        fastest fitting layout per type and count. A peak is the same on every GPU type, so each split's
        layouts are sized once for all of them; only the capacity differs."""
        runs = list(range(self._run, self._run + len(types)))
        self._run += len(types)
        space = list(splits(self.sc, types[0], counts, max_gpus, self.gb))
        budgets = []  # the work limit, reached as a search of the types one after the other would reach it
        for _ in types:
            budgets.append(max(0, min(len(space), MAX_SPLITS - self.splits_done)))
            self.splits_done += budgets[-1]
            self.rejected[WORK_LIMIT] += len(space) - budgets[-1]
        sized: dict[tuple[int, int], Hardware] = {}  # each type at each count, built once for its splits
        for k, split in enumerate(space):
            live = [t for t in range(len(types)) if k < budgets[t]]
            if not live:
                break
            shards = shardings(self.sc, split, types[0].gpus_per_node)
            if not shards:
                self.rejected[ZERO_GROUP] += len(live)
                continue
            hws = {t: _sized(sized, types, t, split.world) for t in live}
            for off in offload:
                found = self._split(hws, split, shards, off, {t: (runs[t], k) for t in hws})
                hws = {t: hw for t, hw in hws.items() if t not in found}
                if not hws:
                    break
        self.rejected = +self.rejected  # no reason counted zero times
        self._time_fitting()

    def _families(self, split: Split, shards: tuple[Shard, ...], off: str) -> list[Family]:
        out = []
        for sched, v in schedules(self.sc, split.pp):
            mbs = micro_batches(self.sc, split, sched, self.gb)
            if not mbs:
                continue
            for rec in recomputes(self.sc):
                out += [Family(sched, v, mbs, rec, sh) for sh in shards if off != "params" or sh[0] == 3]
        return out

    def _split(self, hws: dict[int, Hardware], split: Split, shards: tuple[Shard, ...], off: str,
               ranks: dict[int, tuple[int, int]]) -> set[int]:
        """Classify one split's layouts under offload ``off`` on each GPU type of ``hws``; the types where any
        fits."""
        fams = self._families(split, shards, off)
        if not fams:
            return set()
        sp = self._sp and split.tp > 1
        plains: dict[tuple, Any] = {}  # the split's ``_plain_of`` per (type, irregularity), and per (v, sharding, ..)
        fits_floor = self._floors_fit(hws, split, fams, sp, off, plains)
        found: set[int] = set()
        prefix: dict[tuple[str, int, str, Shard], int] = {}  # one GPU type: micro-batches that fit, per family
        # per type: this split's step floors (``_floors_of``) and its count's fitting layouts (``_time_fitting``)
        bins: dict[int, tuple[dict[tuple, float] | None, list]] = {}
        layouts: dict[tuple, Layout] = {}  # and the layouts they were timed on, the same on every GPU type
        lives: dict[tuple[int, Shard], dict[int, Hardware]] = {}  # the types whose floor fits, per (v, sharding)
        for i in (dominance_order(fams) if len(hws) == 1 else range(len(fams))):
            fam = fams[i]
            where0 = (split, fam, fam.micro_batches[0], sp, off)
            if self._visited is not None:  # something fitting ends the closest-miss bookkeeping
                for t, hw in hws.items():
                    self._remember((*ranks[t], i), hw, where0)
            key = (fam.virtual_stages, fam.shard)
            live = lives.get(key)
            if live is None:
                live = lives[key] = {t: hw for t, hw in hws.items() if fits_floor.get((t, *key), True)}
            if len(live) < len(hws):
                self._count_out(fam, split, sp, off, len(hws) - len(live))
                prefix[(fam.schedule, fam.virtual_stages, fam.recompute, fam.shard)] = 0
            if not live:
                continue
            floor_key = (fam.schedule, fam.virtual_stages, fam.recompute, fam.shard[0] >= 1)
            wheres: list[Where] = []  # per micro-batch: its layout and floor key, the same on every type
            for t, js in self._fitting_of(live, split, fam, sp, off, prefix, plains):
                if not wheres:
                    wheres = [(split, fam, mb, sp, off) for mb in fam.micro_batches]
                    keys = [(*floor_key, mb) for mb in fam.micro_batches]
                found.add(t)
                hw, (run, k) = live[t], ranks[t]
                steps, fitting = bins[t] if t in bins else \
                    bins.setdefault(t, (self._floors_of(hw, split), self._fitting.setdefault((hw.gpu.id, hw.gpus), [])))
                for j in js:
                    floor = 0.0 if steps is None else steps.get(keys[j])
                    if floor is None:
                        floor = self._floor(steps, layouts, keys[j], wheres[j], hw)  # type: ignore[arg-type]
                    fitting.append((floor, (run, k, i, j), wheres[j], hw))
        if found:
            self._visited = None  # something fits: there will be no closest miss to find
        return found

    def _fitting_of(self, hws: dict[int, Hardware], split: Split, fam: Family, sp: bool, off: str,
                    prefix: dict[tuple[str, int, str, Shard], int], plains: dict[tuple, Any]
                    ) -> list[tuple[int, list[int]]]:
        """Classify a family on each GPU type; the fitting layouts as (type, their micro-batches' indices)."""
        if "micro_batch" in self._rules:  # refusals per micro-batch: one by one
            fits = [(t, [j for j, _ in self._family(hw, split, fam, sp, off)]) for t, hw in hws.items()]
            return [(t, js) for t, js in fits if js]
        if len(hws) == 1:
            (t, hw), = hws.items()
            fitting, fit_count = self._classify(hw, split, fam, sp, off, bound(prefix, fam))
            if fit_count is not None:
                prefix[(fam.schedule, fam.virtual_stages, fam.recompute, fam.shard)] = fit_count
            return [(t, [j for j, _ in fitting])] if fitting else []
        return self._classify_types(hws, split, fam, sp, off, plains)

    def _classify_types(self, hws: dict[int, Hardware], split: Split, fam: Family, sp: bool, off: str,
                        plains: dict[tuple, Any]) -> list[tuple[int, list[int]]]:
        """Several GPU types: every micro-batch's peak once (the same on every type), then each type's
        verdict on each — exact without any ordering of the peaks."""
        mbs = fam.micro_batches
        n = len(mbs)
        self.searched += n * len(hws)
        why = self._refusal(self._layout(split, fam, mbs[0], sp, off)) if self._rules else None
        if why is not None:
            self.rejected[why] += n * len(hws)
            return []
        irregular = self._irregular(fam, off)
        typed = plains.get((fam.virtual_stages, fam.shard, irregular))  # the split's ``_plain_of`` per type
        if typed is None:
            typed = plains[(fam.virtual_stages, fam.shard, irregular)] = [
                (t, hw, self._plain_in(plains, t, hw, split, off, irregular)) for t, hw in hws.items()]
        peaks = self._peaks_within(split, fam, sp, off, [plain for _, _, plain in typed])
        totals = [total for total, _ in peaks]
        least = min(totals)
        out: list[tuple[int, list[int]]] = []
        oom, compared = 0, False  # out of memory by comparison, counted at once (in the order reasons first came)
        for t, hw, plain in typed:
            if plain is not None:  # the verdict is a comparison: ``_fits_peak`` without its lookups per peak
                factor, limit = plain
                compared = True
                if least * factor > limit:  # a product never falls as the peak grows: none fits
                    oom += n
                    continue
                fit = [j for j, total in enumerate(totals) if total * factor <= limit]
                if fit:
                    out.append((t, fit))
                oom += n - len(fit)
                continue
            if compared:
                self.rejected[OUT_OF_MEMORY] += oom
                oom = 0
            fit = []
            for j, peak in enumerate(peaks):
                fits = self._fits_peak(hw, peak, split, off, irregular)
                if fits:
                    fit.append(j)
                else:
                    self.rejected[OUT_OF_HOST_MEMORY if fits is None else OUT_OF_MEMORY] += 1
            if fit:
                out.append((t, fit))
        if compared:
            self.rejected[OUT_OF_MEMORY] += oom
        return out

    def _floors_fit(self, hws: dict[int, Hardware], split: Split, fams: list[Family], sp: bool, off: str,
                    plains: dict[tuple, Plain]) -> dict[tuple[int, int, Shard], bool]:
        """Whether each (type, virtual stages, sharding)'s peak floor fits (none where host memory could fail:
        the floor bounds the GPU's peak only); the least floor of the count, for ``fit``'s stop."""
        if self._hosts(off) and any(hw.host_memory_bytes is not None for hw in hws.values()):
            return {}
        out, least, base = {}, math.inf, None
        typed = [(t, hw, self._plain_in(plains, t, hw, split, off, False)) for t, hw in hws.items()]
        for v, shard in dict.fromkeys((f.virtual_stages, f.shard) for f in fams):
            floor = self._floor_table.get((split, v, shard, off))  # it reads no GPU type
            if floor is None:
                base = base or self._layout(split, fams[0], fams[0].micro_batches[0], sp, off)
                floor = self._floor_table[(split, v, shard, off)] = peak_floor(self.sc.model, self.tr, base, (shard,),
                                                                               (v,))
            least = min(least, floor)
            for t, hw, plain in typed:  # nothing offloaded: the host holds it, the verdict is True or False
                out[(t, v, shard)] = floor * plain[0] <= plain[1] if plain is not None else \
                    bool(self._fits_peak(hw, (floor, 0.0), split, off, False))  # the least factor
        n = split.world
        self.least_floor[n] = min(self.least_floor.get(n, math.inf), least)
        return out

    def _count_out(self, fam: Family, split: Split, sp: bool, off: str, types: int = 1) -> None:
        """Every layout of a family whose floor does not fit (on ``types`` GPU types): refused by the framework,
        else out of memory."""
        n = len(fam.micro_batches) * types
        self.searched += n
        if not self._rules:
            self.rejected[OUT_OF_MEMORY] += n
            return
        per_mb = "micro_batch" in self._rules
        for mb in (fam.micro_batches if per_mb else fam.micro_batches[:1]):
            why = self._refusal(self._layout(split, fam, mb, sp, off))
            self.rejected[why if why is not None else OUT_OF_MEMORY] += types if per_mb else n

    def _family(self, hw: Hardware, split: Split, fam: Family, sp: bool, off: str) -> list[tuple[int, int]]:
        """Classify a family's micro-batches one by one (refusals that read the micro-batch); the fitting
        ones as (index, micro-batch)."""
        blocked, fitting = False, []
        for j, mb in enumerate(fam.micro_batches):
            self.searched += 1
            why = self._refusal(self._layout(split, fam, mb, sp, off))
            if why is not None:
                self.rejected[why] += 1
            elif blocked and not own_peak(split, fam.schedule, fam.virtual_stages, fam.shard, self.gb, mb):
                self.rejected[OUT_OF_MEMORY] += 1  # a larger micro-batch than one that did not fit
            else:
                fits = self._fits(hw, (split, fam, mb, sp, off))
                if fits:
                    fitting.append((j, mb))
                else:
                    self.rejected[OUT_OF_HOST_MEMORY if fits is None else OUT_OF_MEMORY] += 1
                    blocked = blocked or fits is False
        return fitting

    def _classify(self, hw: Hardware, split: Split, fam: Family, sp: bool, off: str,
                  bound: int | None) -> tuple[list[tuple[int, int]], int | None]:
        """Classify a family whose refusal does not read the micro-batch: the fitting micro-batches as
        (index, micro-batch), and how many of the monotone ones fit — None when refused or out of host
        memory (then it bounds no other family). Those that fit are a prefix (``own_peak``
        aside, evaluated on its own) of at most ``bound`` (as many as fit for a family whose peak is
        never above this one's)."""
        mbs = fam.micro_batches
        self.searched += len(mbs)
        why = self._refusal(self._layout(split, fam, mbs[0], sp, off)) if self._rules else None
        if why is not None:
            self.rejected[why] += len(mbs)
            return [], None
        normal = ordered_micro_batches(split, fam.schedule, fam.virtual_stages, fam.shard, self.gb, mbs)
        if self._hosts(off) and hw.host_memory_bytes is not None:
            bound = None  # whether the host holds the offloaded state is this family's own question (None below)
        hi = len(normal) if bound is None else min(bound, len(normal))
        like = (hw.gpu.id, split.tp, split.pp, split.cp, split.ep, fam.schedule, fam.virtual_stages, fam.recompute,
                fam.shard, sp, off)
        plain = self._plain_of(hw, split, off, self._irregular(fam, off))
        hint, known, fit_before = from_last(self._hints.get(like), [mbs[j] for j in normal], split, plain)
        left = first_miss(lambda i: self._fits(hw, (split, fam, mbs[normal[i]], sp, off)), hi, hint, min(known, hi))
        if left is None:  # offloaded state beyond the host memory: the same for every micro-batch
            self.rejected[OUT_OF_HOST_MEMORY] += len(mbs)
            return [], None
        self.rejected[OUT_OF_MEMORY] += len(normal) - left
        fitting = [(j, mbs[j]) for j in normal[:left]]
        for j, mb in enumerate(mbs) if len(normal) < len(mbs) else ():
            if j not in normal:  # a peak not ordered with the others' (``own_peak``): sized on its own
                fits = mb in fit_before or self._fits(hw, (split, fam, mb, sp, off))
                if fits:
                    fitting.append((j, mb))
                else:
                    self.rejected[OUT_OF_HOST_MEMORY if fits is None else OUT_OF_MEMORY] += 1
        self._hints[like] = (mbs[normal[left - 1]] if left else 0, split.dp, plain, frozenset(mb for _, mb in fitting))
        return fitting, left


def _sized(sized: dict[tuple[int, int], Hardware], types: tuple[Hardware, ...], t: int, n: int) -> Hardware:
    """GPU type ``t`` of ``types`` at ``n`` GPUs, kept in ``sized``."""
    hw = sized.get((t, n))
    if hw is None:
        hw = sized[(t, n)] = replace(types[t], gpus=n)
    return hw


def search_gpu(search: Search, hw: Hardware, max_gpus: int, counts: Callable[[int], bool] = lambda n: True) -> None:
    """One GPU type: without offload; with offload only when nothing fits (or as the scenario fixes it)."""
    search_types(search, (hw,), max_gpus, counts)


def same_space(hw: Hardware) -> tuple[int, int]:
    """What of a GPU type shapes its layout space: its node (whole nodes past one) and tensor-parallel domain."""
    return hw.gpus_per_node, tp_domain(hw)


def search_types(search: Search, types: tuple[Hardware, ...], max_gpus: int,
                 counts: Callable[[int], bool] = lambda n: True) -> None:
    """GPU types of the same space (``same_space``): without offload; with offload for the types where
    nothing fits without (or as the scenario fixes it)."""
    for i, offload in enumerate(offload_passes(search.sc)):
        if i:
            fitted = {g for g, _ in search.best}
            types = tuple(hw for hw in types if hw.gpu.id not in fitted)  # something fits without offloading
            if not types:
                break
        search.run_types(types, max_gpus, offload, counts)
