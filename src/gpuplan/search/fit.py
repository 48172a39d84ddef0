"""``fit``: the smallest GPU count on which a training run fits, and a layout that achieves it.

Counts tried: 1 … gpus_per_node, then whole nodes (the 9th GPU means a second node).
Layouts tried at each count: every tp that divides the node and the heads, every pp that
divides the layers, ep over the experts, ZeRO 0–3, recompute none/selective/selective-op/full —
keeping whatever the scenario fixed. Among the layouts that fit at the smallest count, the
fastest by predicted step time (runtime.py) is chosen; ties go to the simpler layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model.memory import memory
from gpuplan.model.runtime import step_time, unsupported_precision
from gpuplan.spec import Layout
from gpuplan.spec.layout import check_fixed_layout, divisors, ep_choices, tp_splits_heads
from gpuplan.spec.scenario import Scenario, complete_layout


def candidate_counts(gpus_per_node: int, max_gpus: int) -> Iterator[int]:
    for n in range(1, min(gpus_per_node, max_gpus) + 1):
        yield n
    n = 2 * gpus_per_node
    while n <= max_gpus:
        yield n
        n += gpus_per_node


def layouts(sc: Scenario, gpus: int) -> Iterator[Layout]:
    """Every valid layout of ``gpus`` GPUs that keeps the scenario's fixed fields."""
    fixed = sc.layout
    m = sc.model
    per_node = sc.hardware.gpus_per_node
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in divisors(min(per_node, gpus)) if tp_splits_heads(m, t)]
    pps = [fixed["pp"]] if "pp" in fixed else [p for p in divisors(m.n_layers) if p <= gpus]
    cps = [fixed.get("cp", 1)]
    zeros = [fixed["zero"]] if "zero" in fixed else [0, 1, 2, 3]
    recs = [fixed["recompute"]] if "recompute" in fixed else ["none", "selective", "selective-op", "full"]
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                eps = [fixed["ep"]] if "ep" in fixed else ep_choices(m, dp * cp)
                for ep in eps:
                    for zero in zeros:
                        if zero and dp * cp == 1:
                            continue  # nothing to shard over
                        for rec in recs:
                            try:
                                yield complete_layout(sc.with_gpus(gpus), tp=tp, pp=pp, cp=cp, dp=dp, ep=ep,
                                                      zero=zero, recompute=rec)
                            except GpuplanError:
                                continue


def preference(lay: Layout) -> tuple:
    return (lay.offload != "none", lay.recompute == "full", lay.pp, lay.tp, lay.recompute == "selective-op",
            lay.recompute == "selective", lay.zero, lay.ep)


def _worlds(sc: Scenario) -> list[int] | None:
    """Sorted GPU counts dp·tp·pp·cp that ``layouts`` can build when the global batch bounds dp
    (dp divides it); None without a global batch."""
    gb = sc.training.global_batch
    if not gb:
        return None
    fixed, m = sc.layout, sc.model
    dps = [fixed["dp"]] if "dp" in fixed else divisors(gb)
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in divisors(sc.hardware.gpus_per_node) if tp_splits_heads(m, t)]
    pps = [fixed["pp"]] if "pp" in fixed else divisors(m.n_layers)
    cp = fixed.get("cp", 1)
    return sorted({d * t * p * cp for d in dps for t in tps for p in pps})


def fit(sc: Scenario, max_gpus: int = 16384) -> dict[str, Any]:
    """``{"min_gpus": n, "layout": Layout, "memory": {...}, "tried": k}``; min_gpus None if nothing fits."""
    check_fixed_layout(sc)
    problem = unsupported_precision(sc.hardware.gpu, sc.training.precision)
    if problem:
        raise GpuplanError(problem)
    tried = 0
    closest: tuple[float, Layout, dict] | None = None
    smallest: dict[int, float] = {}  # the least memory any layout needs, per GPU count
    # past every tp×pp split (pp ≤ layers, tp ≤ node), more GPUs only add data parallelism: once
    # doubling the count no longer lowers the least memory, no larger count will fit
    settled = 2 * sc.hardware.gpus_per_node * sc.model.n_layers
    allowed = _worlds(sc)  # with a global batch, only these counts have any layout at all
    allowed_set = set(allowed or ())
    for n in candidate_counts(sc.hardware.gpus_per_node, max_gpus):
        if allowed is not None:
            if n > allowed[-1]:
                break  # past dp = global batch with every tp and pp: no layout of more GPUs exists
            if n not in allowed_set:
                continue
        scn = sc.with_gpus(n)
        best: tuple[tuple, Layout, dict] | None = None
        for lay in layouts(scn, n):
            tried += 1
            mem = memory(scn.model, scn.hardware, scn.training, lay)
            smallest[n] = min(smallest.get(n, math.inf), mem["total"])
            if mem["fits"]:
                key = (step_time(scn.model, scn.hardware, scn.training, lay)["step_s"], preference(lay))
                if best is None or key < best[0]:
                    best = (key, lay, mem)
            elif closest is None or mem["total"] - mem["capacity"] < closest[0]:
                closest = (mem["total"] - mem["capacity"], lay, mem)
        if best is not None:
            return {"min_gpus": n, "layout": best[1], "memory": best[2], "tried": tried, "scenario": scn}
        if n >= settled and n % 2 == 0 and n in smallest and n // 2 in smallest \
                and smallest[n] >= 0.999 * smallest[n // 2]:
            break
    return {"min_gpus": None, "layout": closest[1] if closest else None,
            "memory": closest[2] if closest else None, "tried": tried, "scenario": sc}
