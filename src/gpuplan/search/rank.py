"""Ranking what fits: by time or cost under a deadline or budget, the time/cost Pareto frontier,
and the scaling curve with its compute equilibrium (numbers; report/ says them in words)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.search.enumerate import Candidate
from gpuplan.spec.defaults import SAME_SPEED


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

    if objective == "cost":
        return sorted(pool, key=cost_key)
    ranked = sorted(pool, key=lambda c: -c.tokens_per_s)
    # throughputs within SAME_SPEED of the fastest are one speed to the model: the cheapest first, unpriced last
    near = [c for c in ranked if c.tokens_per_s >= ranked[0].tokens_per_s * (1 - SAME_SPEED)]
    return sorted(near, key=cost_key) + ranked[len(near):]


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
    efficiency: float   # speedup × smallest count / count (overall, against the smallest count)
    improves: bool      # faster than every smaller count
    marginal: float | None = None  # marginal efficiency of the step from the previous count the equilibrium
    #                                weighs (``marginal_efficiency``); None at the smallest count

    @property
    def gpus(self) -> int:
        return self.candidate.gpus


def marginal_efficiency(prev: Candidate, c: Candidate) -> float:
    """What the GPUs one step adds bring, as a share of what they would bring at ``prev``'s per-GPU rate:
    (ΔT / T_prev) / (Δn / n_prev) for throughput T on n GPUs. 1 = the added GPUs are as productive as
    the ones before; 0.5 = each added GPU buys half of its proportional speed-up."""
    return (c.tokens_per_s / prev.tokens_per_s - 1.0) / (c.gpus / prev.gpus - 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Equilibrium:
    """The compute equilibrium of one GPU type: the largest count up to which the parallel efficiency
    (throughput per GPU against the smallest count that fits) stays at least ``threshold`` at every
    count the curve weighs; None when nothing fits. Beside it, the marginal efficiency of the step that
    reached it and of the next step (``marginal_efficiency``), which the sentence states too."""

    gpu: str
    gpus: int | None
    threshold: float
    base_gpus: int | None = None
    efficiency: float | None = None       # at the equilibrium, overall against the base
    last_gpus: int | None = None
    last_efficiency: float | None = None
    marginal: float | None = None         # of the step that reached the equilibrium (None: it is the base)
    from_gpus: int | None = None          # where that step started
    next_gpus: int | None = None          # the first weighed count below the threshold, if any
    next_efficiency: float | None = None
    next_marginal: float | None = None


def scaling_curve(best: dict[tuple[str, int], Candidate], gpu: str,
                  threshold: float) -> tuple[tuple[ScalingPoint, ...], Equilibrium]:
    """Best throughput per count for one GPU type, speedup and overall parallel efficiency against the
    smallest count that fits, the marginal efficiency of each step, and the compute equilibrium. A count
    slower than some smaller count stays on the curve (``improves: false``) but is skipped by the
    equilibrium, and so is a count that a larger one beats on both throughput and efficiency: nobody
    would rent either, and they must not hide that larger counts scale again (a 3-GPU pipeline between
    2 and 4 GPUs, say). Each step's marginal efficiency is taken from the previous count not skipped."""
    rows = sorted((c for (g, _), c in best.items() if g == gpu), key=lambda c: c.gpus)
    if not rows:
        return (), Equilibrium(gpu=gpu, gpus=None, threshold=threshold)
    base = rows[0]
    effs = [c.tokens_per_s / base.tokens_per_s * base.gpus / c.gpus for c in rows]
    better_later = [max(effs[i + 1:], default=0.0) > effs[i] for i in range(len(rows))]
    curve: list[ScalingPoint] = []
    eq, prev, fastest = base, base, 0.0
    step: tuple[int, float] | None = None          # (from count, marginal) of the step that reached eq
    failed: tuple[int, float, float] | None = None  # (count, efficiency, marginal) of the first below
    for i, c in enumerate(rows):
        improves = c.tokens_per_s > fastest
        fastest = max(fastest, c.tokens_per_s)
        marginal = marginal_efficiency(prev, c) if c is not base else None
        curve.append(ScalingPoint(candidate=c, speedup=c.tokens_per_s / base.tokens_per_s, efficiency=effs[i],
                                  improves=improves, marginal=marginal))
        if not improves or c is base or better_later[i] or marginal is None:
            continue
        if failed is None and effs[i] >= threshold:
            eq, step = c, (prev.gpus, marginal)
        elif failed is None:
            failed = (c.gpus, effs[i], marginal)
        prev = c
    return tuple(curve), Equilibrium(
        gpu=gpu, gpus=eq.gpus, threshold=threshold, base_gpus=base.gpus,
        efficiency=eq.tokens_per_s / base.tokens_per_s * base.gpus / eq.gpus,
        last_gpus=curve[-1].gpus, last_efficiency=curve[-1].efficiency,
        marginal=step[1] if step else None, from_gpus=step[0] if step else None,
        next_gpus=failed[0] if failed else None, next_efficiency=failed[1] if failed else None,
        next_marginal=failed[2] if failed else None)


def rule_of(fixed_n: int | None, deadline_s: float | None, budget: float | None) -> str:
    """Which of the rules (spec/options.py ``RULES``) a plan follows."""
    if fixed_n is not None:
        return "fixed"
    if deadline_s is not None and budget is not None:
        return "pareto"
    if deadline_s is not None:
        return "deadline"
    if budget is not None:
        return "budget"
    return "equilibrium"


def within_equilibrium(cands: list[Candidate], equilibria: dict[str, Equilibrium]) -> list[Candidate]:
    """The candidates at or below their GPU type's compute equilibrium (the counts the rule may recommend)."""
    eq = {g: e.gpus for g, e in equilibria.items()}
    return [c for c in cands if eq.get(c.gpu) is not None and c.gpus <= eq[c.gpu]]


def rank_by_rule(rule: str, pool: list[Candidate], objective: str, deadline_s: float | None, budget: float | None,
                 equilibria: dict[str, Equilibrium]) -> tuple[list[Candidate], float | None, bool]:
    """(ranked, cost horizon used, horizon met): ``pool`` filtered and ordered by ``rule`` — the objective
    ranks inside the rule (under ``equilibrium``, cost ranks by the cheapest run within the default horizon)."""
    if rule == "equilibrium":
        pool = within_equilibrium(pool, equilibria)
    if rule == "pareto":  # the deadline's answer (the cheapest in time) within the budget: a budget the deadline's
        # answer already meets changes nothing; the frontier of the runs that meet both, cheapest first
        return choose(pareto(choose(pool, "cost", deadline_s, budget)), "cost", None, None), None, True
    if objective == "cost" and deadline_s is None and budget is None:
        return cost_horizon(pool)
    return choose(pool, objective, deadline_s, budget), None, True
