"""A plan in words: the contract's ``plan --json`` object (README "Commands"), the compute equilibrium
as a sentence, and advice — what to change when nothing fits, when no plan meets the deadline
or budget, and how the user's own layout compares with the best on the same GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuplan.report.batch_words import batch_cap, no_split_json, no_split_words
from gpuplan.report.render import estimate_json
from gpuplan.report.risk import budget_risk, deadline_risk
from gpuplan.report.words import PART_WORDS, parts_in_words, rejection_text
from gpuplan.spec.defaults import SAME_SPEED, assumed, searched_fields
from gpuplan.units import GiB, fmt_duration, fmt_usd

if TYPE_CHECKING:  # the result types only: report never runs the search
    from gpuplan.model.estimate import Estimate
    from gpuplan.search.enumerate import Candidate
    from gpuplan.search.fit import FitResult
    from gpuplan.search.plan import PlanResult, UserLayout
    from gpuplan.search.rank import Equilibrium


def equilibrium_json(eq: Equilibrium) -> dict[str, Any]:
    """The equilibrium and the sentence that says what it measures: the parallel efficiency (throughput per
    GPU against the smallest count that fits) at every count up to it, and the marginal efficiency of the
    last step there and of the next (search/rank.py: marginal_efficiency)."""
    if eq.gpus is None:
        return {"gpus": None, "why": f"nothing fits on {eq.gpu}"}
    base = eq.base_gpus or 1
    measure = (f"the parallel efficiency (throughput per GPU against the smallest count that fits, {base} "
               f"GPU{'s' if base > 1 else ''}) stays ≥{eq.threshold:.0%}")
    if eq.marginal is None:
        why = f"{eq.gpus} {eq.gpu} GPUs, the smallest count that fits: at no larger count {measure}"
    else:
        added = eq.gpus - (eq.from_gpus or 0)
        why = (f"up to {eq.gpus} {eq.gpu} GPUs {measure}: {eq.efficiency:.0%} at {eq.gpus}; the {added:,} GPUs "
               f"added from {eq.from_gpus} to {eq.gpus} bring {eq.marginal:.0%} of the throughput per GPU at "
               f"{eq.from_gpus} (marginal efficiency)")
    if eq.next_gpus is not None and eq.next_efficiency is not None and eq.next_marginal is not None:
        why += f"; at {eq.next_gpus} it falls to {eq.next_efficiency:.0%} ({eq.next_marginal:.0%} marginal)"
    return {"gpus": eq.gpus, "why": why, "threshold": eq.threshold, "efficiency": eq.efficiency,
            "marginal_efficiency": eq.marginal, "next_gpus": eq.next_gpus,
            "next_efficiency": eq.next_efficiency, "next_marginal_efficiency": eq.next_marginal}


# layout fields whose change lets a larger count do less work per token than the smallest one
_CHEAPER = ("recompute", "micro_batch", "offload", "zero", "pp", "tp", "cp", "pp_schedule")


def efficiency_note(rows: list[dict[str, Any]]) -> str | None:
    """Why parallel efficiency exceeds 100% where it does (the scaling rows of ``plan_json``): the larger
    count holds the model states on more GPUs, so its best layout can skip work the smallest count must do
    (recompute, offload, pipeline bubbles, small micro-batches); it is the layouts that differ, not a
    measurement. None when no row is above 100%."""
    over = [r for r in rows if r["efficiency"] > 1.0005]
    if not rows or not over:
        return None
    base = rows[0]["best"]["scenario"]["layout"]
    top = max(over, key=lambda r: r["efficiency"])
    lay = top["best"]["scenario"]["layout"]
    changed = ", ".join(f"{k} {base[k]}→{lay[k]}" for k in _CHEAPER if base.get(k) != lay.get(k))
    counts = ", ".join(str(r["gpus"]) for r in over)
    return (f"parallel efficiency above 100% (at {counts} GPUs) is superlinear scaling: the larger count "
            f"spreads the model states over more GPUs, so its best layout avoids costs the {rows[0]['gpus']}-GPU "
            "layout must pay (tensor-parallel communication, recomputation, offload, pipeline bubbles, small "
            "micro-batches)" + (f" — at {top['gpus']}: {changed}" if changed else "") + "; the layout changes, "
            "the GPUs do not get faster")


def layout_summary(c: Candidate) -> dict[str, Any]:
    lay = c.layout
    return {"gpu": c.gpu, "gpus": c.gpus, "tokens_per_s": c.tokens_per_s, "train_s": c.train_s, "usd": c.usd,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "zero": lay.zero,
                       "zero_group": lay.zero_group, "micro_batch": lay.micro_batch, "recompute": lay.recompute,
                       "pp_schedule": lay.pp_schedule, "virtual_stages": lay.virtual_stages,
                       "offload": lay.offload}}


def recommendation_json(r: PlanResult) -> dict[str, Any]:
    """The rule the headline answer follows (search/rank.py RULES), stated with its numbers, and the fastest
    option beside it: its speed-up, the parallel efficiency of going there and the extra cost."""
    from gpuplan.spec.options import RULES

    out: dict[str, Any] = {"rule": r.rule, "objective": r.objective, "threshold": r.options.threshold,
                           "statement": RULES[r.rule], "gpu": None, "gpus": None, "fastest": None}
    if r.one_node:
        out["space"] = ("a fine-tune: one node searched" + (f" (nothing fit on one {', '.join(r.widened)} node: "
                        "more searched)" if r.widened else "; --max-gpus or --deadline searches more"))
    if not r.ranked:
        out["text"] = f"{RULES[r.rule]}: no configuration qualifies"
        return out
    best = r.ranked[0]
    out |= {"gpu": best.gpu, "gpus": best.gpus}
    head = f"{best.gpus}× {best.gpu}"
    if r.rule == "equilibrium":
        eq = r.equilibrium.get(best.gpu)
        eff = f" ({eq.efficiency:.0%} parallel efficiency at {eq.gpus})" if eq and eq.efficiency else ""
        head = f"{head}, the compute equilibrium at ≥{r.options.threshold:.0%}{eff}" if eq and eq.gpus == best.gpus \
            else f"{head}, within the compute equilibrium ({r.objective} ranks inside it)"
    fast = r.fastest
    if fast is not None and (fast.gpu, fast.gpus, fast.layout) != (best.gpu, best.gpus, best.layout) \
            and fast.tokens_per_s > best.tokens_per_s * (1 + SAME_SPEED):  # one speed to the model: not named
        out["fastest"] = _beside(best, fast)
        shown, label = out["fastest"], "the fastest"
        if r.rule != "equilibrium" and out["fastest"]["efficiency"] < r.options.threshold:
            # past the compute equilibrium more GPUs stop paying: beside a deadline's or budget's answer the
            # alternative worth naming is the equilibrium, where the speed-up still pays for itself
            eq = r.equilibrium.get(best.gpu)
            at_eq = next((c for c in r.candidates if eq and c.gpu == best.gpu and c.gpus == eq.gpus), None)
            if at_eq is not None and at_eq.tokens_per_s > best.tokens_per_s:
                out["equilibrium_alternative"] = _beside(best, at_eq)
                shown, label = out["equilibrium_alternative"], "the compute equilibrium"
        head += _beside_words(shown, label)
    out["text"] = f"{head} — rule: {RULES[r.rule]}"
    if r.rule in ("deadline", "pareto") and r.options.deadline_s is not None:
        risk = deadline_risk(r, best)
        if risk is not None:
            out["deadline_risk"] = risk
            out["text"] += risk["text"]
    if r.rule in ("budget", "pareto") and r.options.budget_usd is not None:
        over = budget_risk(r, best)
        if over is not None:
            out["budget_risk"] = over
            out["text"] += over["text"]
    if r.tight:
        where = f"on {best.gpus} GPU{'s' if best.gpus > 1 else ''}" if r.rule == "fixed" else "at any count searched"
        out["text"] = (f"TIGHT: no layout's 80% memory interval fits {where}; {best.gpus}× {best.gpu}'s predicted "
                       "peak does — runs like it have run and have run out of memory: measure it with `gpuplan "
                       f"profile` before paying for the cluster. {out['text']}")
    return out


def _beside(best: Candidate, other: Candidate) -> dict[str, Any]:
    """A faster option set beside the answer: its speed-up, the parallel efficiency of going there, the extra cost."""
    speedup = other.tokens_per_s / best.tokens_per_s
    extra = other.usd - best.usd if other.usd is not None and best.usd is not None else None
    return {"gpu": other.gpu, "gpus": other.gpus, "speedup": speedup, "efficiency": speedup * best.gpus / other.gpus,
            "extra_usd": extra, "train_s": other.train_s, "from_gpu": best.gpu, "from_gpus": best.gpus}


def _beside_words(b: dict[str, Any], label: str) -> str:
    """The words for an option _beside computed."""
    extra = b["extra_usd"]
    # a parallel efficiency compares counts of one GPU type (throughput per GPU against the answer's); across types
    # it would mix the GPUs' own speeds
    scaling = (f" at {b['efficiency']:.0%} parallel efficiency from {b['from_gpus']:,} GPU{'s' * (b['from_gpus'] != 1)}"
               if b.get("from_gpu", b["gpu"]) == b["gpu"] else "")
    return (f"; {label}, {b['gpus']}× {b['gpu']}, is {b['speedup']:.2f}× faster{scaling}"
            + (f" for {fmt_usd(extra)} more" if extra is not None and extra > 0 else
               f", {fmt_usd(-extra)} cheaper" if extra is not None and extra < 0 else ""))


def plan_json(r: PlanResult) -> dict[str, Any]:
    """The contract's plan object: best, candidates, rejections, min GPUs, scaling, equilibrium, advice."""
    eqs = {g: equilibrium_json(e) for g, e in r.equilibrium.items()}
    scaling = [{"gpus": p.gpus, "gpu": r.main_gpu, "best": estimate_json(r.estimate(p.candidate)),
                "speedup": p.speedup, "efficiency": p.efficiency, "marginal_efficiency": p.marginal,
                "improves": p.improves} for p in r.scaling[r.main_gpu]]
    return {
        "best": estimate_json(r.estimate(r.ranked[0])) if r.ranked else None,
        "tight": r.tight,
        "recommendation": recommendation_json(r),
        "candidates": [estimate_json(r.estimate(c)) for c in r.ranked[:r.top_k]],
        "searched": r.searched,
        "rejected": rejected_json(r.rejected),
        "not_searched": r.not_searched,
        "min_gpus": r.min_gpus(),
        "scaling": scaling,
        "scaling_note": efficiency_note(scaling),
        "equilibrium": eqs[r.main_gpu] | {"gpu": r.main_gpu},
        "equilibrium_by_gpu": eqs,
        "pareto": [layout_summary(c) for c in r.pareto()],
        "horizon_s": r.horizon_s,
        "global_batch": r.global_batch,
        "assumed": _assumed_of(r, r.ranked[0] if r.ranked else None),
        "assumed_by_gpu": {c.gpu: _assumed_of(r, c) for c in _best_per_type(r)},
        "searched_fields": searched_fields(r.scenario),
        "advice": advice(r),
        "closest_miss": closest_miss_json(r),
        "no_split": no_split_json(r.no_split),
    }


def _assumed_of(r: PlanResult, c: Candidate | None) -> list[dict[str, Any]]:
    """What the answer filled in, on the hardware of ``c`` (its GPU type's fabric, price and nodes)."""
    sc = replace(r.scenario, hardware=c.hw) if c is not None else r.scenario
    return assumed(sc, replace(r.scenario.training, global_batch=r.global_batch), None, True)


def _best_per_type(r: PlanResult) -> list[Candidate]:
    """Each GPU type's first candidate in the answer's order (else its fastest)."""
    out: dict[str, Candidate] = {}
    for c in [*r.ranked, *sorted(r.candidates, key=lambda c: -c.tokens_per_s)]:
        out.setdefault(c.gpu, c)
    return list(out.values())


def rejected_json(rejected: dict[Any, int]) -> dict[str, int]:
    """The search's counts by reason, the reasons in words (most first)."""
    out: dict[str, int] = {}
    for why, n in sorted(rejected.items(), key=lambda kv: -kv[1]):
        key = rejection_text(why)
        out[key] = out.get(key, 0) + n
    return out


def fit_json(r: FitResult, best: Estimate | None) -> dict[str, Any]:
    """``gpuplan fit --json``: the smallest count that fits, the fastest layout there, what was tried."""
    row: dict[str, Any] = {"gpu": r.scenario.hardware.gpu.id, "min_gpus": r.min_gpus, "tried": r.tried,
                           "max_gpus": r.max_gpus, "global_batch": r.global_batch}
    if r.default_batch and r.default_batch != r.global_batch and "training.global_batch" not in r.scenario.given:
        row["batch_moved"] = {"from": r.default_batch, "to": r.global_batch, "why": (
            f"the default of {r.default_batch:,} sequences splits over no layout of {r.min_gpus or r.max_gpus:,} "
            "GPUs (each data-parallel replica takes an equal share): the nearest batch that keeps most layouts and "
            "micro-batches there (search/batch.py)")}
    if r.no_split is not None:
        row["no_split"] = no_split_json(r.no_split)
        row["no_split_why"] = no_split_words(r.no_split)
    row["best"] = estimate_json(best) if best is not None else None
    if r.not_searched:  # the work limit cut the search: "nothing fits" would not be known
        row["not_searched"] = r.not_searched
    row["min_gpus_at_point"] = r.at_point if r.at_point is not None else r.min_gpus
    w = r.with_offload
    row["with_offload"] = None if w is None else {
        "gpus": w.gpus, "offload": w.layout.offload, "tokens_per_s": w.tokens_per_s, "train_s": w.train_s,
        "usd": w.usd, "layout": layout_summary(w)["layout"]}
    if best is None:
        row["closest_total"] = r.closest.memory.total if r.closest else None
        row["closest_high"] = r.closest.memory.high if r.closest else None
        row["capacity"] = r.scenario.hardware.gpu.usable_memory_bytes
    return row


def closest_miss_json(r: PlanResult) -> dict[str, Any] | None:
    """The rejected layout that came nearest to fitting, and what filled its memory."""
    if r.closest is None:
        return None
    miss, lay = r.closest, r.closest.layout
    mem = miss.memory
    parts = parts_in_words(mem.parts())
    return {"gpu": miss.hw.gpu.id, "gpus": miss.hw.gpus, "over_bytes": miss.over_bytes, "total": mem.total,
            "capacity": mem.capacity, "largest": max(parts, key=lambda k: parts[k]), "parts": parts,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "zero": lay.zero,
                       "micro_batch": lay.micro_batch, "recompute": lay.recompute}}


_FIXES = {  # by model/breakdown.py Part
    "states": lambda lay: ["more GPUs", "zero 3" if lay.zero < 3 else "", "a GPU with more memory",
                                 "offload" if lay.offload == "none" else ""],
    "activations": lambda lay: ["recompute=full" if lay.recompute != "full" else "",
                                "micro_batch=1" if lay.micro_batch > 1 else "", "more tp or cp", "a shorter sequence"],
    "logits_and_buffers": lambda lay: ["micro_batch=1" if lay.micro_batch > 1 else "",
                                       "more tp (vocab-parallel logits)", "a fused/chunked loss"],
}


def _nothing_fits(r: PlanResult) -> list[str]:
    out: list[str] = []
    if r.closest is not None:
        lay, hw, mem = r.closest.layout, r.closest.hw, r.closest.memory
        parts = mem.parts()
        top = max(parts, key=lambda k: parts[k])
        fix = ", ".join(f for f in _FIXES[top.value](lay) if f)
        out.append(f"nothing fits: the closest layout ({hw.gpus}× {hw.gpu.id}, tp={lay.tp} pp={lay.pp} "
                   f"zero={lay.zero} recompute={lay.recompute}) needs {mem.total / GiB:.1f} GiB of "
                   f"{mem.capacity / GiB:.1f} GiB: {PART_WORDS[top.value]} {parts[top] / GiB:.1f} GiB — try {fix}")
    else:  # no GPU type was searched at all: say why
        out.extend(f"nothing was searched: {rejection_text(why)}" for why in r.rejected)
    if any(why.reason.value == "out_of_host_memory" for why in r.rejected):
        host = r.scenario.hardware.host_memory_bytes or 0.0
        out.append(f"offloading was tried but the offloaded state exceeds the node's host memory "
                   f"({host / GiB:,.0f} GiB): more host memory or more GPUs")
    return out


def _missed_targets(r: PlanResult) -> list[str]:
    """Which target no run meets: the deadline (the fastest is too slow), the budget (the cheapest costs more), or —
    each met alone — the two together, with what meeting each one costs of the other."""
    out: list[str] = []
    cands = list(r.candidates)
    fastest = max(cands, key=lambda c: c.tokens_per_s)
    priced = [c for c in cands if c.usd is not None]
    cheapest = min(priced, key=lambda c: c.usd or 0.0) if priced else None
    late = r.deadline_s is not None and (fastest.train_s is None or fastest.train_s > r.deadline_s)
    dear = r.budget is not None and cheapest is not None and (cheapest.usd or 0.0) > r.budget
    if late:
        out.append(f"no configuration finishes within {fmt_duration(r.deadline_s)}: the fastest, {fastest.gpus}× "
                   f"{fastest.gpu}, takes {fmt_duration(fastest.train_s)} — extend the deadline, allow more "
                   "GPUs (--max-gpus) or other GPU types" + batch_cap(r, fastest))
    if dear and cheapest is not None:
        out.append(f"no configuration fits a budget of {fmt_usd(r.budget)}: the cheapest, {cheapest.gpus}× "
                   f"{cheapest.gpu}, costs {fmt_usd(cheapest.usd)} and takes {fmt_duration(cheapest.train_s)}")
    if r.deadline_s is not None and r.budget is not None and not late and not dear:
        on_time = min((c for c in priced if c.train_s is not None and c.train_s <= r.deadline_s),
                      key=lambda c: c.usd or 0.0, default=None)
        in_budget = min((c for c in priced if (c.usd or 0.0) <= r.budget and c.train_s is not None),
                        key=lambda c: c.train_s or 0.0, default=None)
        if on_time is not None and in_budget is not None:
            out.append(f"each target is met alone, not both: within {fmt_duration(r.deadline_s)} the cheapest, "
                       f"{on_time.gpus}× {on_time.gpu}, costs {fmt_usd(on_time.usd)}; within {fmt_usd(r.budget)} the "
                       f"fastest, {in_budget.gpus}× {in_budget.gpu}, takes {fmt_duration(in_budget.train_s)} — "
                       "raise the budget or extend the deadline")
    return out


def _no_split(r: PlanResult) -> list[str]:
    """Why the given count has no layout at all for the batch, and the nearest batches and counts that do."""
    return [] if r.no_split is None else [no_split_words(r.no_split)]


def advice(r: PlanResult) -> list[str]:
    if not r.candidates:
        return _no_split(r) + _nothing_fits(r)
    out: list[str] = _no_split(r)
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
