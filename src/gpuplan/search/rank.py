"""Ranking what fits: by time or cost under a deadline or budget, the time/cost Pareto frontier,
and the scaling curve with its compute equilibrium (numbers; report/ says them in words)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.search.enumerate import Candidate


def usd_per_token(c: Candidate) -> float:
    """Dollars per token of a candidate (infinite without a price)."""
    price = c.hw.price_per_gpu_hour
    return c.gpus * price / c.tokens_per_s if price else math.inf


def choose(cands: list[Candidate], objective: str, deadline_s: float | None, budget: float | None) -> list[Candidate]:
    """Rank: time (fastest), cost (cheapest); with a deadline the cheapest that finishes in time,
    with a budget the fastest that stays within it."""
    pool = cands
    if deadline_s is not None:
        pool = [c for c in pool if c.train_s is not None and c.train_s <= deadline_s]
        objective = "cost"
    if budget is not None:
        pool = [c for c in pool if c.usd is not None and c.usd <= budget]
        objective = "time" if deadline_s is None else objective

    def cost_key(c: Candidate) -> float:
        return c.usd if c.usd is not None else usd_per_token(c)

    return sorted(pool, key=cost_key if objective == "cost" else (lambda c: -c.tokens_per_s))


# ``--objective cost`` without a deadline: the cheapest run that finishes within this horizon. A
# quarter — the span of a typical GPU reservation; cost always falls with fewer GPUs run longer,
# so without a horizon the cheapest plan is a multi-year run on a handful of GPUs.
DEFAULT_COST_HORIZON_S = 90 * 86400.0


def cost_horizon(cands: list[Candidate]) -> tuple[list[Candidate], float | None, bool]:
    """(ranked, horizon used, met): the cheapest that finish within ``DEFAULT_COST_HORIZON_S``;
    when none does, the fastest first (``met`` False). Runs of unknown length are ranked by $/token."""
    if not any(c.train_s is not None for c in cands):
        return choose(cands, "cost", None, None), None, True
    within = choose(cands, "cost", DEFAULT_COST_HORIZON_S, None)
    if within:
        return within, DEFAULT_COST_HORIZON_S, True
    return choose(cands, "time", None, None), DEFAULT_COST_HORIZON_S, False


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both time (tokens/s) and cost ($ per token)."""
    priced = [c for c in cands if c.hw.price_per_gpu_hour]
    priced.sort(key=lambda c: (-c.tokens_per_s, usd_per_token(c)))
    front, best_cost = [], math.inf
    for c in priced:
        cost = usd_per_token(c)
        if cost < best_cost:
            front.append(c)
            best_cost = cost
    return front


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingPoint:
    candidate: Candidate
    speedup: float      # tokens/s against the smallest count that fits
    efficiency: float   # speedup × smallest count / count
    improves: bool      # faster than every smaller count

    @property
    def gpus(self) -> int:
        return self.candidate.gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class Equilibrium:
    """The compute equilibrium of one GPU type: the largest count up to which every step keeps at
    least ``threshold`` of proportional speed-up; None when nothing fits."""

    gpu: str
    gpus: int | None
    threshold: float
    base_gpus: int | None = None
    efficiency: float | None = None       # at the equilibrium, against the base
    last_gpus: int | None = None
    last_efficiency: float | None = None


def scaling_curve(best: dict[tuple[str, int], Candidate], gpu: str,
                  threshold: float) -> tuple[tuple[ScalingPoint, ...], Equilibrium]:
    """Best throughput per count for one GPU type, speedup and parallel efficiency against the
    smallest count that fits, and the compute equilibrium. A count slower than some smaller
    count stays on the curve (``improves: false``) but is skipped by the equilibrium, and so is a
    count that a larger one beats on both throughput and efficiency: nobody would rent either,
    and they must not hide that larger counts scale again (a 3-GPU pipeline between 2 and 4 GPUs,
    say)."""
    rows = sorted((c for (g, _), c in best.items() if g == gpu), key=lambda c: c.gpus)
    if not rows:
        return (), Equilibrium(gpu=gpu, gpus=None, threshold=threshold)
    base = rows[0]
    eq = base
    broken = False
    fastest = 0.0
    curve: list[ScalingPoint] = []
    effs = [c.tokens_per_s / base.tokens_per_s * base.gpus / c.gpus for c in rows]
    better_later = [max(effs[i + 1:], default=0.0) > effs[i] for i in range(len(rows))]
    for i, c in enumerate(rows):
        speedup = c.tokens_per_s / base.tokens_per_s
        eff = speedup * base.gpus / c.gpus
        improves = c.tokens_per_s > fastest
        fastest = max(fastest, c.tokens_per_s)
        curve.append(ScalingPoint(candidate=c, speedup=speedup, efficiency=eff, improves=improves))
        if not improves or c is base or better_later[i]:
            continue
        if not broken and eff >= threshold:
            eq = c
        else:
            broken = True
    last = curve[-1]
    return tuple(curve), Equilibrium(
        gpu=gpu, gpus=eq.gpus, threshold=threshold, base_gpus=base.gpus,
        efficiency=eq.tokens_per_s / base.tokens_per_s * base.gpus / eq.gpus,
        last_gpus=last.gpus, last_efficiency=last.efficiency)
