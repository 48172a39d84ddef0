"""A plan in words: the contract's ``plan --json`` object (DESIGN.md §4), the compute equilibrium
as a sentence, and advice — what to change when nothing fits, when no plan meets the deadline
or budget, and how the user's own layout compares with the best on the same GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuplan.spec.defaults import assumed, searched_fields
from gpuplan.units import GiB, fmt_duration, fmt_usd

if TYPE_CHECKING:  # the result types only: report never runs the search
    from gpuplan.search.enumerate import Candidate
    from gpuplan.search.plan import PlanResult, UserLayout
    from gpuplan.search.rank import Equilibrium


def equilibrium_json(eq: Equilibrium) -> dict[str, Any]:
    if eq.gpus is None:
        return {"gpus": None, "why": f"nothing fits on {eq.gpu}"}
    base = eq.base_gpus or 1
    why = (f"up to {eq.gpus} {eq.gpu} GPUs each added GPU still buys ≥{eq.threshold:.0%} of proportional speed-up "
           f"(parallel efficiency {eq.efficiency:.0%} vs {base} GPU{'s' if base > 1 else ''}); "
           f"at {eq.last_gpus} it is {eq.last_efficiency:.0%}")
    return {"gpus": eq.gpus, "why": why, "threshold": eq.threshold}


def layout_summary(c: Candidate) -> dict[str, Any]:
    lay = c.layout
    return {"gpu": c.gpu, "gpus": c.gpus, "tokens_per_s": c.tokens_per_s, "train_s": c.train_s, "usd": c.usd,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "zero": lay.zero,
                       "zero_group": lay.zero_group, "micro_batch": lay.micro_batch, "recompute": lay.recompute,
                       "pp_schedule": lay.pp_schedule, "virtual_stages": lay.virtual_stages,
                       "offload": lay.offload}}


def plan_json(r: PlanResult) -> dict[str, Any]:
    """The contract's plan object: best, candidates, rejections, min GPUs, scaling, equilibrium, advice."""
    eqs = {g: equilibrium_json(e) for g, e in r.equilibrium.items()}
    return {
        "best": r.estimate(r.ranked[0]).to_json() if r.ranked else None,
        "candidates": [r.estimate(c).to_json() for c in r.ranked[:r.top_k]],
        "searched": r.searched,
        "rejected": dict(r.rejected),
        "min_gpus": r.min_gpus(),
        "scaling": [{"gpus": p.gpus, "gpu": r.main_gpu, "best": r.estimate(p.candidate).to_json(),
                     "speedup": p.speedup, "efficiency": p.efficiency, "improves": p.improves}
                    for p in r.scaling[r.main_gpu]],
        "equilibrium": eqs[r.main_gpu] | {"gpu": r.main_gpu},
        "equilibrium_by_gpu": eqs,
        "pareto": [layout_summary(c) for c in r.pareto()],
        "horizon_s": r.horizon_s,
        "global_batch": r.global_batch,
        "assumed": assumed(r.scenario, replace(r.scenario.training, global_batch=r.global_batch), None, True),
        "searched_fields": searched_fields(r.scenario),
        "advice": advice(r),
        "closest_miss": closest_miss_json(r),
    }


def closest_miss_json(r: PlanResult) -> dict[str, Any] | None:
    """The rejected layout that came nearest to fitting, and what filled its memory."""
    if r.closest is None:
        return None
    miss, lay = r.closest, r.closest.layout
    mem = miss.memory
    parts = mem.parts()
    return {"gpu": miss.hw.gpu.id, "gpus": miss.hw.gpus, "over_bytes": miss.over_bytes, "total": mem.total,
            "capacity": mem.capacity, "largest": max(parts, key=lambda k: parts[k]), "parts": parts,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "zero": lay.zero,
                       "micro_batch": lay.micro_batch, "recompute": lay.recompute}}


_FIXES = {
    "model states": lambda lay: ["more GPUs", "zero 3" if lay.zero < 3 else "", "a GPU with more memory",
                                 "offload" if lay.offload == "none" else ""],
    "activations": lambda lay: ["recompute=full" if lay.recompute != "full" else "",
                                "micro_batch=1" if lay.micro_batch > 1 else "", "more tp or cp", "a shorter sequence"],
    "logits and buffers": lambda lay: ["micro_batch=1" if lay.micro_batch > 1 else "",
                                       "more tp (vocab-parallel logits)", "a fused/chunked loss"],
}


def _nothing_fits(r: PlanResult) -> list[str]:
    out: list[str] = []
    if r.closest is not None:
        lay, hw, mem = r.closest.layout, r.closest.hw, r.closest.memory
        parts = mem.parts()
        top = max(parts, key=lambda k: parts[k])
        fix = ", ".join(f for f in _FIXES[top](lay) if f)
        out.append(f"nothing fits: the closest layout ({hw.gpus}× {hw.gpu.id}, tp={lay.tp} pp={lay.pp} "
                   f"zero={lay.zero} recompute={lay.recompute}) needs {mem.total / GiB:.1f} GiB of "
                   f"{mem.capacity / GiB:.1f} GiB: {top} {parts[top] / GiB:.1f} GiB — try {fix}")
    else:  # no GPU type was searched at all: say why
        out.extend(f"nothing was searched: {why}" for why in r.rejected)
    if r.rejected.get("out of host memory: offloaded state"):
        host = r.scenario.hardware.host_memory_bytes or 0.0
        out.append(f"offloading was tried but the offloaded state exceeds the node's host memory "
                   f"({host / GiB:,.0f} GiB): more host memory or more GPUs")
    return out


def _missed_targets(r: PlanResult) -> list[str]:
    out: list[str] = []
    cands = list(r.candidates)
    fastest = max(cands, key=lambda c: c.tokens_per_s)
    priced = [c for c in cands if c.usd is not None]
    cheapest = min(priced, key=lambda c: c.usd or 0.0) if priced else None
    if r.deadline_s is not None:
        out.append(f"no configuration finishes within {fmt_duration(r.deadline_s)}: the fastest, {fastest.gpus}× "
                   f"{fastest.gpu}, takes {fmt_duration(fastest.train_s)} — extend the deadline, allow more "
                   "GPUs (--max-gpus) or other GPU types")
    if r.budget is not None and cheapest is not None:
        out.append(f"no configuration fits a budget of {fmt_usd(r.budget)}: the cheapest, {cheapest.gpus}× "
                   f"{cheapest.gpu}, costs {fmt_usd(cheapest.usd)} and takes {fmt_duration(cheapest.train_s)}")
    return out


def advice(r: PlanResult) -> list[str]:
    if not r.candidates:
        return _nothing_fits(r)
    out: list[str] = []
    if (r.deadline_s is not None or r.budget is not None) and not r.ranked:
        out.extend(_missed_targets(r))
    if r.horizon_s is not None and r.ranked:
        best = r.ranked[0]
        if r.horizon_met:
            out.append(f"--objective cost without a deadline: the cheapest run that finishes within the default "
                       f"horizon of {fmt_duration(r.horizon_s)} ({best.gpus}× {best.gpu}, "
                       f"{fmt_duration(best.train_s)}); give --deadline for another horizon — the pareto list "
                       "shows every time/cost trade-off")
        else:
            out.append(f"--objective cost without a deadline: no run finishes within the default horizon of "
                       f"{fmt_duration(r.horizon_s)}, so the fastest is shown ({best.gpus}× {best.gpu}, "
                       f"{fmt_duration(best.train_s)}); give --deadline to choose another horizon")
    if r.user_layout is not None:
        out.extend(_compare_user_layout(r, r.user_layout))
    return out


def _compare_user_layout(r: PlanResult, u: UserLayout) -> list[str]:
    """How far the user's own layout is from the best one on the same GPUs."""
    if u.estimate is None:
        return [f"your layout is not valid here: {u.error}"]
    sc, est, best = r.scenario, u.estimate, u.best_same_count
    n = sc.hardware.gpus
    if best is None or est.time is None or not est.time.tokens_per_s:
        return []  # e.g. a GPU with no published compute peak
    lay = best.layout
    ratio = best.tokens_per_s / est.time.tokens_per_s
    if not est.memory.fits:
        return [f"your layout does not fit ({est.memory.total / GiB:.1f} GiB); on the same "
                f"{n} GPUs tp={lay.tp} pp={lay.pp} zero={lay.zero} recompute={lay.recompute} mb={lay.micro_batch} "
                f"fits and runs {best.tokens_per_s / n:,.0f} tokens/s per GPU"]
    if ratio < 1.15:
        return [f"your layout is within {ratio - 1:.0%} of the best found on {n} GPUs"]
    why = ""
    if est.time.step.comm_detail["tp"] > 0.2 * est.time.step_s and \
            sc.layout.get("tp", 1) * sc.layout.get("cp", 1) > sc.hardware.gpus_per_node:
        why = f"tp={sc.layout['tp']} crosses nodes on {sc.hardware.scale_out.id if sc.hardware.scale_out else '-'}; "
    return [f"{why}tp={lay.tp} pp={lay.pp} zero={lay.zero} recompute={lay.recompute} mb={lay.micro_batch} is "
            f"{ratio:.1f}× faster than your layout on the same {n} GPUs"]
