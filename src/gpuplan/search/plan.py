"""``plan()``: search GPU type × count × layout (search/enumerate.py), keep what fits, rank by
time or cost; min GPUs per type, scaling curve and compute equilibrium, Pareto frontier, the
closest miss and the user's own layout beside the best. Results only: the words are report/."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.hardware import gpus as catalogue_gpus
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import unsupported_precision
from gpuplan.model.estimate import Estimate, evaluate
from gpuplan.search.enumerate import Candidate, Miss, Search, default_global_batch, hardware_for, search_gpu
from gpuplan.search.rank import Equilibrium, ScalingPoint, choose, cost_horizon, pareto, scaling_curve
from gpuplan.spec import GPU, check_fixed_layout
from gpuplan.spec.defaults import gpu_limit
from gpuplan.spec.scenario import Scenario, complete_layout


@dataclass(frozen=True, slots=True, kw_only=True)
class UserLayout:
    """The scenario's own (fixed) layout on its own GPUs, beside the best the search finds there."""

    estimate: Estimate | None      # None when the layout is not valid here (``error`` says why)
    error: str | None
    best_same_count: Candidate | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    scenario: Scenario
    gpu_types: tuple[GPU, ...]
    objective: str
    deadline_s: float | None
    budget: float | None
    global_batch: int
    candidates: tuple[Candidate, ...]   # every (GPU type, count)'s fastest layout that fits
    ranked: tuple[Candidate, ...]       # those that meet the deadline/budget, best first
    top_k: int
    searched: int
    rejected: dict[str, int]
    closest: Miss | None
    main_gpu: str
    scaling: dict[str, tuple[ScalingPoint, ...]]
    equilibrium: dict[str, Equilibrium]
    user_layout: UserLayout | None
    estimates: dict[tuple[str, int], Estimate]  # full estimates of the candidates the answer shows
    # --objective cost with no deadline or budget: the horizon the cheapest run must finish within,
    # and whether any did (else ``ranked`` is fastest-first)
    horizon_s: float | None = None
    horizon_met: bool = True

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def min_gpus(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for g in self.gpu_types:
            counts = [c.gpus for c in self.candidates if c.gpu == g.id]
            out[g.id] = min(counts) if counts else None
        return out

    def pareto(self) -> list[Candidate]:
        return pareto(list(self.candidates))

    def estimate(self, c: Candidate) -> Estimate:
        """The full estimate of a shown candidate (best, top candidates, the main GPU's curve)."""
        return self.estimates[(c.gpu, c.gpus)]


def candidate_estimate(sc: Scenario, c: Candidate, global_batch: int) -> Estimate:
    """A candidate's full estimate, with the global batch it was searched at."""
    accum = global_batch // (c.layout.dp * c.layout.micro_batch)
    tr = replace(sc.training, global_batch=c.layout.dp * c.layout.micro_batch * accum)
    return evaluate(replace(sc, hardware=c.hw, training=tr), c.layout)


def _check(sc: Scenario, types: list[GPU], objective: str, deadline_s: float | None, budget: float | None,
           threshold: float) -> int:
    """The arguments' own rules; returns the global batch the search uses."""
    if objective not in ("time", "cost"):
        raise GpuplanError(f"--objective must be time or cost, got {objective!r}")
    if not 0 < threshold <= 1:
        raise GpuplanError(f"--threshold must be in (0, 1], got {threshold}")
    check_fixed_layout(sc)
    if (deadline_s is not None or budget is not None) and sc.training.tokens is None and sc.training.steps is None:
        raise GpuplanError(f"{'--deadline' if deadline_s is not None else '--budget'} needs the length of the run: "
                           "give training.tokens (e.g. --tokens 1T) or training.steps")
    if objective == "cost" or budget is not None:
        unpriced = [g.id for g in types if hardware_for(sc, g).price_per_gpu_hour is None]
        if len(unpriced) == len(types):
            raise GpuplanError(f"{'--budget' if budget is not None else '--objective cost'} needs a price: the "
                               f"catalogue has none for {', '.join(unpriced)}; give --price (USD per GPU-hour)")
    gb = default_global_batch(sc)
    mb, dp = sc.layout.get("micro_batch", 1), sc.layout.get("dp", 1)
    if gb % (mb * dp):
        raise GpuplanError(f"the global batch of {gb} sequences"
                           f"{'' if sc.training.global_batch else ' (the default: ~4M tokens)'} is not a multiple "
                           f"of the fixed dp×micro_batch = {dp}×{mb}: change training.global_batch or the layout")
    return gb


def _skip_reason(sc: Scenario, g: GPU, priced: bool) -> str | None:
    """Why GPU type ``g`` is not searched at all, or None."""
    if not any(k in g.peak_flops for k in ("bf16", "fp16")):
        return f"{g.id}: no published compute peak (runtime and cost cannot be predicted)"
    problem = unsupported_precision(g, sc.training.precision, sc.training.fp8_recipe)
    if problem:
        return problem
    if priced and hardware_for(sc, g).price_per_gpu_hour is None:
        return f"{g.id}: no price in the catalogue (give --price to rank it by cost)"
    return None


def types_to_search(sc: Scenario, names: list[str] | None) -> list[GPU]:
    """The GPU types to search: ``["all"]`` is every catalogue type with compute peaks."""
    if names == ["all"]:
        return [g for g in catalogue_gpus() if g.peak_flops]
    return [get_gpu(g) for g in names] if names else [sc.hardware.gpu]


def plan(sc: Scenario, *, gpu_types: list[str] | None = None, max_gpus: int | None = None, objective: str = "time",
         deadline_s: float | None = None, budget: float | None = None, top_k: int = 5,
         threshold: float = 0.8, progress: Callable[[float, str], None] | None = None) -> PlanResult:
    """``progress(fraction, label)``, when given, is called once per GPU type searched. A given
    ``hardware.gpus`` is the answer's count; smaller counts are searched as context (the curve)."""
    types = types_to_search(sc, gpu_types)
    gb = _check(sc, types, objective, deadline_s, budget, threshold)
    limit, fixed_n = gpu_limit(sc, max_gpus)
    search = Search(sc)
    for i, g in enumerate(types):
        if progress is not None:
            progress(i / len(types), g.id)
        why = _skip_reason(sc, g, objective == "cost" or budget is not None)
        if why:
            search.rejected[why] += 1
            continue
        search_gpu(search, hardware_for(sc, g), limit, gb)
    cands = list(search.best.values())
    pool = [c for c in cands if fixed_n is None or c.gpus == fixed_n]
    horizon_s, met = None, True
    if objective == "cost" and deadline_s is None and budget is None:
        ranked, horizon_s, met = cost_horizon(pool)
    else:
        ranked = choose(pool, objective, deadline_s, budget)
    curves = {g.id: scaling_curve(search.best, g.id, threshold) for g in types}
    fixed = {"tp", "pp", "dp", "cp", "zero", "recompute", "micro_batch"} & set(sc.layout)
    main_gpu = ranked[0].gpu if ranked else types[0].id
    shown = ranked[:top_k] + [p.candidate for p in curves[main_gpu][0]]
    return PlanResult(
        scenario=sc, gpu_types=tuple(types), objective=objective, deadline_s=deadline_s, budget=budget,
        global_batch=gb, candidates=tuple(cands), ranked=tuple(ranked), top_k=top_k, searched=search.searched,
        rejected=dict(search.rejected), closest=search.closest, main_gpu=main_gpu,
        scaling={g: c[0] for g, c in curves.items()}, equilibrium={g: c[1] for g, c in curves.items()},
        user_layout=_user_layout(sc, gb) if fixed and ranked else None,
        estimates={(c.gpu, c.gpus): candidate_estimate(sc, c, gb) for c in shown},
        horizon_s=horizon_s, horizon_met=met)


def _user_layout(sc: Scenario, gb: int) -> UserLayout:
    """The user's own layout evaluated, and the fastest the free search finds on the same GPUs."""
    try:
        est = evaluate(sc, complete_layout(sc))
    except GpuplanError as err:
        return UserLayout(estimate=None, error=str(err), best_same_count=None)
    free = Search(replace(sc, layout={}))
    free.run_gpu(sc.hardware, sc.hardware.gpus, gb, ("none",))
    same = [c for c in free.best.values() if c.gpus == sc.hardware.gpus]
    best = max(same, key=lambda c: c.tokens_per_s) if same else None
    return UserLayout(estimate=est, error=None, best_same_count=best)
