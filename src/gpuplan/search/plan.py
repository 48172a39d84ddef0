"""``plan()``: search GPU type × count × layout (search/enumerate.py), keep what fits, rank by
time or cost; min GPUs per type, scaling curve and compute equilibrium, Pareto frontier, the
closest miss and the user's own layout beside the best. Results only: the words are report/."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.catalog.intervals import intervals_on, point_estimates
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import unsupported_precision
from gpuplan.model.ep_comm import unsupported_dispatcher
from gpuplan.model.estimate import Estimate, evaluate, has_compute_peak
from gpuplan.model.recompute_modules import unsupported_modules
from gpuplan.search.batch import NoSplit, batch_at_count
from gpuplan.search.codes import WORK_LIMIT, Reason, Rejection
from gpuplan.search.enumerate import Candidate, Miss, Search, same_space, search_types
from gpuplan.search.quiet import collector_paused
from gpuplan.search.rank import Equilibrium, ScalingPoint, pareto, rank_by_rule, rule_of, scaling_curve
from gpuplan.spec import GPU, Hardware, Layout, check_fixed_layout
from gpuplan.spec.defaults import default_global_batch, gpu_limit, is_fine_tune
from gpuplan.spec.options import PlanOptions
from gpuplan.spec.scenario import Scenario


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
    options: PlanOptions
    global_batch: int
    candidates: tuple[Candidate, ...]   # every (GPU type, count)'s fastest layout that fits
    ranked: tuple[Candidate, ...]       # those that meet the deadline/budget, best first
    searched: int                       # layouts classified (evaluated, or by proof: search/enumerate.py)
    rejected: dict[Rejection, int]
    closest: Miss | None                # when nothing fits: the layout nearest to fitting
    main_gpu: str
    scaling: dict[str, tuple[ScalingPoint, ...]]
    equilibrium: dict[str, Equilibrium]
    user_layout: UserLayout | None
    estimates: dict[tuple[str, int, Layout], Estimate]  # full estimates of the candidates the answer shows
    # --objective cost with no deadline or budget: the horizon the cheapest run must finish within,
    # and whether any did (else ``ranked`` is fastest-first)
    horizon_s: float | None = None
    horizon_met: bool = True
    rule: str = "equilibrium"            # search/rank.py RULES: what the headline answer (``best``) follows
    fastest: Candidate | None = None     # the fastest candidate of the pool, whatever the rule
    one_node: bool = False               # a fine-tune searched on one node (``widened``: types where none fit)
    widened: tuple[str, ...] = ()
    # no layout's 80 % memory interval fits where the answer is asked: the search kept those whose point
    # estimate fits (each answer's memory says TIGHT)
    tight: bool = False
    # the given count has no layout for the given global batch: the nearest batches and counts that do
    no_split: NoSplit | None = None

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def objective(self) -> str:
        return self.options.objective

    @property
    def deadline_s(self) -> float | None:
        return self.options.deadline_s

    @property
    def budget(self) -> float | None:
        return self.options.budget_usd

    @property
    def top_k(self) -> int:
        return self.options.top

    @property
    def not_searched(self) -> int:
        """Parallel splits past the search's work limit (counted, not searched)."""
        return self.rejected.get(WORK_LIMIT, 0)

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
        return self.estimates[(c.gpu, c.gpus, c.layout)]


def candidate_estimate(sc: Scenario, c: Candidate, global_batch: int) -> Estimate:
    """A candidate's full estimate: ``evaluate`` of its layout on its GPUs at the global batch it was
    searched at — the same functions the search timed and sized it with (``memory.verdict``,
    ``estimate.assess``), so the numbers are the candidate's."""
    return evaluate(replace(sc, hardware=c.hw, training=replace(sc.training, global_batch=global_batch)), c.layout)


def _check(sc: Scenario, targets: tuple[Hardware, ...], options: PlanOptions) -> int:
    """The options' rules against the scenario; returns the global batch the search uses."""
    check_fixed_layout(sc)
    problem = unsupported_modules(sc.training.framework, sc.layout)
    if problem:
        raise GpuplanError(problem)
    deadline, budget = options.deadline_s, options.budget_usd
    if (deadline is not None or budget is not None) and sc.training.tokens is None and sc.training.steps is None:
        raise GpuplanError(f"{'--deadline' if deadline is not None else '--budget'} needs the length of the run: "
                           "give training.tokens (e.g. --tokens 1T) or training.steps")
    if options.market and all(hw.price_per_gpu_hour is None for hw in targets):
        unpriced = ", ".join(hw.gpu.id for hw in targets)
        asked = " ".join(x for x in (options.pricing or "on_demand", " or ".join(options.providers),
                                      f"in {options.region}" if options.region else "") if x)
        raise GpuplanError(f"no {asked} price for {unpriced} in the price catalogue (`gpuplan prices` lists them): "
                           "change --provider, --region or --pricing, or add your own row with --catalog")
    if options.priced and all(hw.price_per_gpu_hour is None for hw in targets):
        unpriced = ", ".join(hw.gpu.id for hw in targets)
        raise GpuplanError(f"{'--budget' if budget is not None else '--objective cost'} needs a price: the "
                           f"catalogue has none for {unpriced}; give --price (USD per GPU-hour)")
    mb, dp = sc.layout.get("micro_batch", 1), sc.layout.get("dp", 1)
    # as given, else the default rounded down to a multiple of a fixed dp × micro_batch (as ``evaluate`` does)
    gb = default_global_batch(sc.training, dp * mb)
    if gb % (mb * dp):
        raise GpuplanError(f"the global batch of {gb} sequences"
                           f"{'' if sc.training.global_batch else ' (the default: ~4M tokens)'} is not a multiple "
                           f"of the fixed dp×micro_batch = {dp}×{mb}: change training.global_batch or the layout")
    return gb


def skipped(sc: Scenario, hw: Hardware, priced: bool) -> Rejection | None:
    """Why a GPU type is not searched at all, or None: no compute peak, no tensor cores for the
    precision (the check ``evaluate`` raises), no price where cost ranks the plan."""
    g = hw.gpu
    if not has_compute_peak(g):
        return Rejection(Reason.NO_COMPUTE_PEAK, gpu=g.id)
    problem = unsupported_precision(g, sc.training.precision, sc.training.fp8_recipe)
    if problem:
        return Rejection(Reason.PRECISION, gpu=g.id, detail=problem)
    problem = unsupported_dispatcher(sc.model, hw, sc.training)
    if problem:
        return Rejection(Reason.DISPATCHER, gpu=g.id, detail=problem)
    if priced and hw.price_per_gpu_hour is None:
        return Rejection(Reason.NO_PRICE, gpu=g.id)
    return None


@collector_paused()
def plan(sc: Scenario, options: PlanOptions | None = None, targets: tuple[Hardware, ...] | None = None,
         progress: Callable[[float, str], None] | None = None) -> PlanResult:
    """Search the GPU types of ``targets`` (each type's hardware: io/options.py resolves the names of
    ``options.gpu_types`` at the edge; None: the scenario's own). ``progress(fraction, label)``, when
    given, is called once per group of GPU types searched together (the same layout space: node and
    tensor-parallel domain). A given ``hardware.gpus`` is the answer's count; smaller counts are searched
    as context (the curve)."""
    options = options or PlanOptions()
    targets = targets or (sc.hardware,)
    gb = _check(sc, targets, options)
    limit, fixed_n = gpu_limit(sc, options.max_gpus)
    gap = None
    if fixed_n is not None:  # a batch the given count splits, or what would split (search/batch.py)
        sc, gb, gap = batch_at_count(sc, targets, fixed_n, gb)
    # a fine-tune is a one-node job (issue 22): one node unless nothing fits there, or a deadline or
    # --max-gpus asks for more
    one_node = fixed_n is None and options.max_gpus is None and options.deadline_s is None \
        and is_fine_tune(sc.training)
    search, widened = _search(sc, options, targets, gb, limit, fixed_n, one_node, progress)
    tight, closest = False, search.closest()
    if not _answers(search, fixed_n) and gap is None:
        # nothing surely fits (the peak's 80 % interval, memory.verdict): the best whose point estimate fits,
        # marked TIGHT — runs like it have run, and others have run out of memory (issue 26: a published run
        # that ran is answered, never "no layout fits" while its predicted peak fits)
        with point_estimates():
            at_point, widened_p = _search(sc, options, targets, gb, limit, fixed_n, one_node, progress)
            closest = at_point.closest()
        # nothing fits even so: the closest miss by its point estimate ("needs X of Y GiB")
        tight = _answers(at_point, fixed_n)
        search, widened = at_point, widened_p
    res = replace(_result(sc, options, targets, search, fixed_n, closest), tight=tight, no_split=gap)
    return replace(res, one_node=one_node, widened=tuple(widened)) if one_node else res


def _answers(search: Search, fixed_n: int | None) -> bool:
    """Whether the search found a layout where the answer is asked: the given count, or any when it is open."""
    return any(fixed_n is None or c.gpus == fixed_n for c in search.best.values())


def _search(sc: Scenario, options: PlanOptions, targets: tuple[Hardware, ...], gb: int, limit: int,
            fixed_n: int | None, one_node: bool, progress: Callable[[float, str], None] | None
            ) -> tuple[Search, list[str]]:
    """The search over ``targets``, GPU types of the same layout space together; the types widened past
    one node (a fine-tune where nothing fit on one)."""
    search = Search(sc, gb, keep=options.top if fixed_n is not None else 1)
    groups: dict[tuple[int, int], list[Hardware]] = {}  # GPU types of the same layout space, searched together
    for hw in targets:
        why = skipped(sc, hw, options.priced)
        if why is not None:
            search.rejected[why] += 1
        else:
            groups.setdefault(same_space(hw), []).append(hw)
    done, widened = 0, []
    for group in groups.values():
        if progress is not None:
            progress(done / len(targets), ", ".join(hw.gpu.id for hw in group[:3]) + (" …" if len(group) > 3 else ""))
        node = group[0].gpus_per_node
        search_types(search, tuple(group), min(limit, node) if one_node else limit)
        rest = tuple(hw for hw in group if one_node and not any(g == hw.gpu.id for g, _ in search.best))
        if rest and limit > node and intervals_on():
            # a fine-tune whose peak's point estimate fits one node is answered there, TIGHT (plan's re-search at
            # the point estimate), not on the many nodes that hold its interval's upper end: runs like it have run
            rest = _none_at_point(sc, rest, gb, node)
        if rest and limit > node:
            search_types(search, rest, limit, counts=lambda n, node=node: n > node)
            widened += [hw.gpu.id for hw in rest]
        done += len(group)
    return search, widened


def _none_at_point(sc: Scenario, types: tuple[Hardware, ...], gb: int, node: int) -> tuple[Hardware, ...]:
    """The GPU types of ``types`` (one layout space) on one node of which no layout fits even at the peak's point
    estimate."""
    with point_estimates():
        probe = Search(sc, gb)
        search_types(probe, types, node)
    return tuple(hw for hw in types if not any(g == hw.gpu.id for g, _ in probe.best))


def _result(sc: Scenario, options: PlanOptions, targets: tuple[Hardware, ...], search: Search,
            fixed_n: int | None, closest: Miss | None) -> PlanResult:
    cands = list(search.best.values())
    pool = [c for c in cands if fixed_n is None or c.gpus == fixed_n]
    if fixed_n is not None and search.keep > 1:  # --top K on a fixed count: K layouts of that count
        pool = [c for (g, n), kept in search.top.items() if n == fixed_n for _, _, c in kept]
    types = tuple(hw.gpu for hw in targets)
    curves = {g.id: scaling_curve(search.best, g.id, options.threshold) for g in types}
    rule = rule_of(fixed_n, options.deadline_s, options.budget_usd)
    ranked, horizon_s, met = rank_by_rule(rule, pool, options.objective, options.deadline_s, options.budget_usd,
                                          {g: c[1] for g, c in curves.items()})
    fastest = max(pool, key=lambda c: c.tokens_per_s, default=None)
    fixed = {"tp", "pp", "dp", "cp", "zero", "recompute", "micro_batch"} & set(sc.layout)
    main_gpu = ranked[0].gpu if ranked else types[0].id
    shown = ranked[:options.top] + [p.candidate for p in curves[main_gpu][0]] + ([fastest] if fastest else [])
    gb = search.gb
    return PlanResult(
        scenario=sc, gpu_types=types, options=options, global_batch=gb, candidates=tuple(cands),
        ranked=tuple(ranked), searched=search.searched, rejected=dict(search.rejected), closest=closest,
        main_gpu=main_gpu, scaling={g: c[0] for g, c in curves.items()},
        equilibrium={g: c[1] for g, c in curves.items()},
        user_layout=_user_layout(sc, gb) if fixed and ranked else None,
        estimates={(c.gpu, c.gpus, c.layout): candidate_estimate(sc, c, gb) for c in shown},
        horizon_s=horizon_s, horizon_met=met, rule=rule, fastest=fastest)


def _user_layout(sc: Scenario, gb: int) -> UserLayout:
    """The user's own layout evaluated, and the fastest the free search finds on the same GPUs."""
    try:
        est = evaluate(sc)  # as `gpuplan evaluate` reads it: its open ZeRO stage and recomputation settled
    except GpuplanError as err:
        return UserLayout(estimate=None, error=str(err), best_same_count=None)
    if not has_compute_peak(sc.hardware.gpu):  # no time to compare with
        return UserLayout(estimate=est, error=None, best_same_count=None)
    free = Search(replace(sc, layout={}), gb)
    free.run_gpu(sc.hardware, sc.hardware.gpus, ("none",))
    same = [c for c in free.best.values() if c.gpus == sc.hardware.gpus]
    best = max(same, key=lambda c: c.tokens_per_s) if same else None
    return UserLayout(estimate=est, error=None, best_same_count=best)
