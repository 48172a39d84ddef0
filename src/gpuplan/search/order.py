"""What the search knows of a family before sizing it: the order that lets one family's answer bound
another's, and the bisection of a prefix of micro-batches that fit (search/enumerate.py uses both)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from gpuplan.search.found import Family
from gpuplan.search.space import Shard, Split


# ---- the order of a split's families: one whose peak is never above another's comes first ------------
def dominance_order(fams: list[Family]) -> list[int]:
    """Indices of ``fams``: per (schedule, virtual stages, recompute), ZeRO-2 before ZeRO-1 and full shard before
    hybrid shard — the peak of the first of each pair is never above the second's at the same micro-batch
    (model/memory.py: ZeRO-2 shards the gradients ZeRO-1 keeps whole; full shard spreads over more ranks)."""
    groups: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for i, f in enumerate(fams):
        groups[(f.schedule, f.virtual_stages, f.recompute)].append(i)
    out: list[int] = []
    for members in groups.values():
        out += sorted(members, key=lambda i: _shard_order(fams[i].shard, i))
    return out


def _shard_order(shard: Shard, i: int) -> tuple[int, int]:
    zero, group = shard
    if zero == 2 and group is None:
        return (0, i)            # ZeRO-2 before ZeRO-1
    if zero == 1 and group is None:
        return (1, i)
    if zero == 3 and group is None:
        return (2, i)            # full shard before hybrid shard
    return (3, i)


def bound(prefix: dict[tuple[str, int, str, Shard], int], fam: Family) -> int | None:
    """How many of ``fam``'s micro-batches may fit at most: as many as fit for a family whose peak is never
    above this one's — the same schedule, virtual stages and recompute, sharded further (None: no bound)."""
    zero, group = fam.shard
    like = (fam.schedule, fam.virtual_stages, fam.recompute)
    if zero == 1 and group is None:
        return prefix.get((*like, (2, None)))
    if zero == 3 and group is not None:
        return prefix.get((*like, (3, None)))
    return None


# a family's answer kept for the next data-parallel width of its like (``from_last``): the largest ordered
# micro-batch that fit (0: none), its dp, its GPU's plain verdict there (``memory.plain_limit``: factor, usable bytes)
# or None, and every micro-batch that fit (ordered or sized on its own)
Last = tuple[int, int, tuple[float, float] | None, frozenset[int]]
NOTHING: frozenset[int] = frozenset()


def from_last(last: Last | None, normal: list[int], split: Split, plain: tuple[float, float] | None
              ) -> tuple[int | None, int, frozenset[int]]:
    """(guess, proven, fit before): how many of a family's ordered micro-batches ``normal`` fit at most as the like
    family at the previous (smaller) data-parallel width ``last`` — a guess for ``first_miss`` —, how many of them
    surely fit, and the micro-batches that surely fit because they fit there (those sized on their own too). Sure
    where a peak cannot rise with dp: everything else equal, a wider dp shards the ZeRO states over more ranks (a
    hybrid group keeps them), makes fewer micro-batches per step, so no more in flight and fewer
    torch.distributed.pipelining stage buffers, and changes nothing else model/memory.py reads — once dp × cp > 1
    (a data-parallel group and its buckets exist), experts not spread (ep 1: an ep that stops dividing dp × cp
    folds the expert tensor parallelism) and the verdict a plain comparison no stricter than before. A micro-batch
    ordered at the wider dp is ordered at the narrower one too (its count there is no smaller)."""
    if last is None:
        return None, 0, NOTHING
    fit_mb, dp, was, fitted = last
    hint = sum(1 for mb in normal if mb <= fit_mb)
    sure = split.ep == 1 and dp * split.cp > 1 and dp < split.dp and plain is not None and was is not None \
        and plain[0] <= was[0] and plain[1] >= was[1]
    return (hint, hint, fitted) if sure else (hint, 0, NOTHING)


def first_miss(fits: Callable[[int], bool | None], hi: int, hint: int | None = None, known: int = 0) -> int | None:
    """The first index in [0, hi) that does not fit, given that fitting is a prefix and nothing from ``hi`` on
    fits (hi: all fit; None: out of host memory). ``hint``: a guess of the answer (a like family's — the same
    parallel degrees at another data-parallel width): checked first at its two sides, so a right guess
    costs one or two peaks; any guess gives the same answer. Without one: the highest first, then the
    lowest — a family mostly fits whole or not at all — then bisection between. ``known``: the first ``known``
    indices fit (``from_last``'s proof), so they are not asked."""
    if hi <= 0:
        return 0
    if known >= hi:
        return hi
    if known:
        asked = fits
        fits = lambda i: True if i < known else asked(i)  # noqa: E731
    left, right = 0, hi  # the answer lies in [left, right]
    if hint is not None:
        hint = min(max(hint, 0), hi)
        if hint > 0:
            ok = fits(hint - 1)
            if ok is None:
                return None
            if not ok:
                right = hint - 1
            else:
                left = hint
        if left == hint and hint < hi:
            ok = fits(hint)
            if ok is None:
                return None
            if not ok:
                return hint
            left = hint + 1
        if left >= right:
            return left
    else:
        top = fits(hi - 1)
        if top is None:
            return None
        if top:
            return hi
        right = hi - 1
        if hi == 1:
            return 0
        low = fits(0)
        if low is None:
            return None
        if not low:
            return 0
        left = 1
    while left < right:
        mid = (left + right) // 2
        ok = fits(mid)
        if ok is None:
            return None
        if ok:
            left = mid + 1
        else:
            right = mid
    return left
