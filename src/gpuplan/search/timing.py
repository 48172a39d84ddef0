"""The fastest fitting layout per GPU type and count: a search's fitting layouts timed and priced by
``estimate.assess`` in the order of their step floor (``runtime.step_floor``) until the floor is above the best
step found (search/enumerate.py's Search builds on this)."""

from __future__ import annotations

import math
from heapq import heapify, heappop

from gpuplan.model.estimate import Cost, assess, has_compute_peak
from gpuplan.model.runtime import FLOOR_SLACK
from gpuplan.search.book import Book, Where
from gpuplan.search.found import Candidate
from gpuplan.spec import Hardware, Layout

UNPRICED = Cost(usd=None, usd_per_gpu_hour=None, usd_with_failures=None)


class Timing(Book):
    """Times a search's fitting layouts: per (GPU type, count) the fastest in ``best`` (``keep`` > 1: the
    ``keep`` fastest in ``top`` too)."""

    keep: int
    top: dict[tuple[str, int], list[tuple[float, tuple[int, ...], Candidate]]]
    _ranks: dict[tuple[str, int], tuple[int, ...]]
    # this run's fitting layouts per (GPU type, count): (step floor, rank, layout, hardware)
    _fitting: dict[tuple[str, int], list[tuple[float, tuple[int, ...], Where, Hardware]]]

    def _time_fitting(self) -> None:
        """Time this run's fitting layouts, per GPU type and count in the order of their step floor, until
        the floor is above the best step found; a tie goes to the first in canonical order."""
        by_count, self._fitting = self._fitting, {}
        for key, items in by_count.items():
            if not has_compute_peak(items[0][3].gpu):  # no time to rank by: the first that fits
                _, rank, where, hw = min(items, key=lambda it: it[1])
                self.best[key] = Candidate(hw.gpu.id, hw.gpus, self._layout(*where), None, UNPRICED, hw)
                self._ranks[key] = rank
                continue
            # ordered by (step floor, rank) as taken — ranks are unique within a count: only the few timed are sorted
            heapify(items)
            kept = self.top.setdefault(key, []) if self.keep > 1 else None
            while items:
                floor, rank, where, hw = heappop(items)
                best = self.best.get(key)
                bar = best.step_s if best is not None and kept is None else \
                    kept[-1][2].step_s if kept is not None and len(kept) >= self.keep else math.inf
                if floor > bar * (1 + FLOOR_SLACK):
                    break  # no later layout can be faster (than the keep-th fastest)
                cand = self._timed_candidate(self._layout(*where), hw)
                tps = cand.tokens_per_s
                if best is None or tps > best.tokens_per_s or (tps == best.tokens_per_s and rank < self._ranks[key]):
                    self.best[key] = cand
                    self._ranks[key] = rank
                if kept is not None:
                    kept.append((-tps, rank, cand))
                    kept.sort(key=lambda k: (k[0], k[1]))
                    del kept[self.keep:]
        if self.best:
            self._visited = None  # something fits: there is no closest miss to find

    def _timed_candidate(self, lay: Layout, hw: Hardware) -> Candidate:
        """A fitting layout timed and priced by ``estimate.assess`` — the faster of its variants (``tp_variants``)."""
        cands = []
        for v in self.tp_variants(lay):
            a = assess(self.sc.model, hw, self.tr, v, self.sc.corrections, fits=True)
            cands.append(Candidate(hw.gpu.id, hw.gpus, v, a.time, a.cost, hw))
        return cands[0] if len(cands) == 1 else _faster(cands)


def _faster(cands: list[Candidate]) -> Candidate:
    """The fastest of a layout's variants (``Book.tp_variants``), a tie to the first."""
    best = cands[0]
    for c in cands[1:]:
        if c.tokens_per_s > best.tokens_per_s:
            best = c
    return best
