"""``plan()``: the search (search.py) turned into the contract's answer (DESIGN.md §4):
best, ranked candidates, rejections with reasons, min GPUs per type, scaling curve,
compute equilibrium, Pareto frontier, and advice in words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.hardware import gpus as catalogue_gpus
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import evaluate
from gpuplan.model.runtime import unsupported_precision
from gpuplan.search.enumerate import (
    DEFAULT_BATCH_TOKENS,
    Candidate,
    Search,
    _hardware_for,
    choose,
    pareto,
    scaling_curve,
)
from gpuplan.spec.layout import check_fixed_layout
from gpuplan.spec.scenario import Scenario, complete_layout
from gpuplan.units import fmt_duration, fmt_usd


def _estimate(sc: Scenario, c: Candidate) -> dict:
    tr = replace(sc.training, global_batch=c.layout.dp * c.layout.micro_batch * _accum(sc, c))
    return evaluate(replace(sc, hardware=c.hw, training=tr), c.layout)


def _accum(sc: Scenario, c: Candidate) -> int:
    gb = sc.training.global_batch or _default_batch(sc)
    return gb // (c.layout.dp * c.layout.micro_batch)


def _default_batch(sc: Scenario) -> int:
    return max(1, DEFAULT_BATCH_TOKENS // sc.training.seq_len)


def plan(sc: Scenario, *, gpu_types: list[str] | None = None, max_gpus: int = 16384, objective: str = "time",
         deadline_s: float | None = None, budget: float | None = None, top_k: int = 5,
         threshold: float = 0.8, progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """``progress(fraction, label)``, when given, is called once per GPU type searched."""
    if objective not in ("time", "cost"):
        raise GpuplanError(f"--objective must be time or cost, got {objective!r}")
    if not 0 < threshold <= 1:
        raise GpuplanError(f"--threshold must be in (0, 1], got {threshold}")
    if gpu_types == ["all"]:
        types = [g for g in catalogue_gpus() if g.peak_flops]
    else:
        types = [get_gpu(g) for g in gpu_types] if gpu_types else [sc.hardware.gpu]
    check_fixed_layout(sc)
    if (deadline_s is not None or budget is not None) and sc.training.tokens is None and sc.training.steps is None:
        raise GpuplanError(f"{'--deadline' if deadline_s is not None else '--budget'} needs the length of the run: "
                           "give training.tokens (e.g. --tokens 1T) or training.steps")
    if objective == "cost" or budget is not None:
        unpriced = [g.id for g in types if _hardware_for(sc, g).price_per_gpu_hour is None]
        if len(unpriced) == len(types):
            raise GpuplanError(f"{'--budget' if budget is not None else '--objective cost'} needs a price: the "
                               f"catalogue has none for {', '.join(unpriced)}; give --price (USD per GPU-hour)")
    gb = sc.training.global_batch or _default_batch(sc)
    mb, dp = sc.layout.get("micro_batch", 1), sc.layout.get("dp", 1)
    if gb % (mb * dp):
        raise GpuplanError(f"the global batch of {gb} sequences"
                           f"{'' if sc.training.global_batch else ' (the default: ~4M tokens)'} is not a multiple "
                           f"of the fixed dp×micro_batch = {dp}×{mb}: change training.global_batch or the layout")
    search = Search(sc)
    for i, g in enumerate(types):
        if progress is not None:
            progress(i / len(types), g.id)
        if not any(k in g.peak_flops for k in ("bf16", "fp16")):
            search.rejected[f"{g.id}: no published compute peak (runtime and cost cannot be predicted)"] += 1
            continue
        problem = unsupported_precision(g, sc.training.precision)
        if problem:
            search.rejected[problem] += 1
            continue
        if (objective == "cost" or budget is not None) and _hardware_for(sc, g).price_per_gpu_hour is None:
            search.rejected[f"{g.id}: no price in the catalogue (give --price to rank it by cost)"] += 1
            continue
        hw = _hardware_for(sc, g)
        if "offload" in sc.layout:  # the scenario's own choice
            search.run_gpu(hw, max_gpus, gb, (sc.layout["offload"],))
            continue
        before = len(search.best)
        search.run_gpu(hw, max_gpus, gb, ("none",))
        if len(search.best) == before:  # nothing fits: try offloading
            search.run_gpu(hw, max_gpus, gb, ("optimizer", "params"))
    cands = list(search.best.values())
    ranked = choose(cands, objective, deadline_s, budget)
    min_gpus = {}
    for g in types:
        counts = [c.gpus for c in cands if c.gpu == g.id]
        min_gpus[g.id] = min(counts) if counts else None
    scaling: dict[str, Any] = {}
    equilibrium: dict[str, Any] = {}
    for g in types:
        curve, eq = scaling_curve(search.best, g.id, threshold)
        scaling[g.id] = curve
        equilibrium[g.id] = eq
    main_gpu = ranked[0].gpu if ranked else types[0].id
    out: dict[str, Any] = {
        "best": _estimate(sc, ranked[0]) if ranked else None,
        "candidates": [_estimate(sc, c) for c in ranked[:top_k]],
        "searched": search.searched,
        "rejected": dict(search.rejected),
        "min_gpus": min_gpus,
        "scaling": [{"gpus": r["gpus"], "gpu": main_gpu, "best": _estimate(sc, r["candidate"]),
                     "speedup": r["speedup"], "efficiency": r["efficiency"], "improves": r["improves"]}
                    for r in scaling[main_gpu]],
        "equilibrium": equilibrium[main_gpu] | {"gpu": main_gpu},
        "equilibrium_by_gpu": equilibrium,
        "pareto": [_summary(c) for c in pareto(cands)],
        "global_batch": gb,
        "advice": advice(sc, search, cands, ranked, deadline_s, budget),
        "closest_miss": _closest_miss(search),
    }
    return out


def _closest_miss(search: Search) -> dict | None:
    """The rejected layout that came nearest to fitting, and what filled its memory."""
    if search.closest is None:
        return None
    over, lay, hw, mem = search.closest
    parts = _memory_parts(mem)
    return {"gpu": hw.gpu.id, "gpus": hw.gpus, "over_bytes": over, "total": mem["total"],
            "capacity": mem["capacity"], "largest": max(parts, key=parts.get), "parts": parts,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "zero": lay.zero,
                       "micro_batch": lay.micro_batch, "recompute": lay.recompute}}


def _memory_parts(mem: dict) -> dict[str, float]:
    """A memory breakdown in the three parts advice names (the largest says what to change)."""
    # the same three parts as the search's rejection reasons: logits plus communication buffers
    # (fragmentation and the fixed runtime follow the others and are not a lever of their own)
    d = mem["detail"]
    return {"model states": mem["weights"] + mem["gradients"] + mem["optimizer"],
            "activations": mem["activations"], "logits and buffers": d["logits"] + d["comm_buffers"]}


def _summary(c: Candidate) -> dict:
    lay = c.layout
    return {"gpu": c.gpu, "gpus": c.gpus, "tokens_per_s": c.tokens_per_s, "train_s": c.train_s, "usd": c.usd,
            "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "zero": lay.zero,
                       "zero_group": lay.zero_group, "micro_batch": lay.micro_batch, "recompute": lay.recompute,
                       "pp_schedule": lay.pp_schedule, "virtual_stages": lay.virtual_stages,
                       "offload": lay.offload}}


def advice(sc: Scenario, search: Search, cands: list[Candidate], ranked: list[Candidate],
           deadline_s: float | None, budget: float | None) -> list[str]:
    out: list[str] = []
    if not cands:
        if search.closest is not None:
            _over, lay, hw, mem = search.closest
            parts = _memory_parts(mem)
            top = max(parts, key=parts.get)
            fixes = {"model states": ["more GPUs", "zero 3" if lay.zero < 3 else "", "a GPU with more memory",
                                      "offload" if lay.offload == "none" else ""],
                     "activations": ["recompute=full" if lay.recompute != "full" else "",
                                     "micro_batch=1" if lay.micro_batch > 1 else "", "more tp or cp",
                                     "a shorter sequence"],
                     "logits and buffers": ["micro_batch=1" if lay.micro_batch > 1 else "",
                                            "more tp (vocab-parallel logits)", "a fused/chunked loss"]}[top]
            fix = ", ".join(f for f in fixes if f)
            out.append(f"nothing fits: the closest layout ({hw.gpus}× {hw.gpu.id}, tp={lay.tp} pp={lay.pp} "
                       f"zero={lay.zero} recompute={lay.recompute}) needs {mem['total'] / 2**30:.1f} GiB of "
                       f"{mem['capacity'] / 2**30:.1f} GiB: {top} {parts[top] / 2**30:.1f} GiB — try {fix}")
        if search.closest is None:  # no GPU type was searched at all: say why
            out.extend(f"nothing was searched: {why}" for why in search.rejected)
        if search.rejected.get("out of host memory: offloaded state"):
            out.append(f"offloading was tried but the offloaded state exceeds the node's host memory "
                       f"({sc.hardware.host_memory_bytes / 2**30:,.0f} GiB): more host memory or more GPUs")
        return out
    if (deadline_s is not None or budget is not None) and not ranked:
        fastest = max(cands, key=lambda c: c.tokens_per_s)
        priced = [c for c in cands if c.usd is not None]
        cheapest = min(priced, key=lambda c: c.usd) if priced else None
        if deadline_s is not None:
            out.append(f"no configuration finishes within {fmt_duration(deadline_s)}: the fastest, {fastest.gpus}× "
                       f"{fastest.gpu}, takes {fmt_duration(fastest.train_s)} — extend the deadline, allow more "
                       "GPUs (--max-gpus) or other GPU types")
        if budget is not None and cheapest is not None:
            out.append(f"no configuration fits a budget of {fmt_usd(budget)}: the cheapest, {cheapest.gpus}× "
                       f"{cheapest.gpu}, costs {fmt_usd(cheapest.usd)} and takes {fmt_duration(cheapest.train_s)}")
    fixed_keys = {"tp", "pp", "dp", "cp", "zero", "recompute", "micro_batch"} & set(sc.layout)
    if fixed_keys and ranked:
        out.extend(_compare_user_layout(sc, ranked))
    return out


def _compare_user_layout(sc: Scenario, ranked: list[Candidate]) -> list[str]:
    """How far the user's own layout is from the best one on the same GPUs."""
    try:
        lay = complete_layout(sc)
        est = evaluate(sc, lay)
    except GpuplanError as err:
        return [f"your layout is not valid here: {err}"]
    free = Search(replace(sc, layout={}))
    gb = sc.training.global_batch or _default_batch(sc)
    free.run_gpu(sc.hardware, sc.hardware.gpus, gb, ("none",))
    same = [c for c in free.best.values() if c.gpus == sc.hardware.gpus]
    if not same or not est["time"].get("tokens_per_s"):  # e.g. a GPU with no published compute peak
        return []
    best = max(same, key=lambda c: c.tokens_per_s)
    ratio = best.tokens_per_s / est["time"]["tokens_per_s"]
    if not est["memory"]["fits"]:
        return [f"your layout does not fit ({est['memory']['total'] / 2**30:.1f} GiB); on the same "
                f"{sc.hardware.gpus} GPUs tp={best.layout.tp} pp={best.layout.pp} zero={best.layout.zero} "
                f"recompute={best.layout.recompute} mb={best.layout.micro_batch} fits and runs "
                f"{best.tokens_per_s / sc.hardware.gpus:,.0f} tokens/s per GPU"]
    if ratio < 1.15:
        return [f"your layout is within {ratio - 1:.0%} of the best found on {sc.hardware.gpus} GPUs"]
    comm = est["time"]["comm_detail"]
    why = ""
    if comm["tp"] > 0.2 * est["time"]["step_s"] and sc.layout.get("tp", 1) * sc.layout.get("cp", 1) > \
            sc.hardware.gpus_per_node:
        why = f"tp={sc.layout['tp']} crosses nodes on {sc.hardware.scale_out.id}; "
    return [f"{why}tp={best.layout.tp} pp={best.layout.pp} zero={best.layout.zero} "
            f"recompute={best.layout.recompute} mb={best.layout.micro_batch} is {ratio:.1f}× faster than your "
            f"layout on the same {sc.hardware.gpus} GPUs"]
