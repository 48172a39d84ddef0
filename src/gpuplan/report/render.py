"""Typed results → the contract's JSON (README "Commands", "Web page and API"): an estimate's object, keys in their
documented order, its notes in words (report/words.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.report.words import no_peak_text, note_text
from gpuplan.spec.defaults import assumed
from gpuplan.spec.scenario import normalized

if TYPE_CHECKING:  # the result type only: report never runs the model
    from gpuplan.model.estimate import Estimate

TIME_KEYS = ("step_s", "compute_s", "comm_exposed_s", "bubble_s", "tokens_per_s", "tokens_per_s_per_gpu",
             "model_flops_per_token", "mfu", "hfu", "train_s", "gpu_hours")


def estimate_json(est: Estimate) -> dict[str, Any]:
    """The contract's estimate object."""
    sc, model = est.scenario, est.scenario.model
    tr = sc.training
    out: dict[str, Any] = {
        "scenario": normalized(sc, est.layout),
        "model": {
            "name": model.name, "params": model.params, "params_active": model.params_active,
            "params_trainable": est.params_trainable, "params_source": model.params_source,
            "params_by_group": model.params_by_group(), "assumed": list(model.assumed),
        },
        "notes": [note_text(n, est) for n in est.notes],
        "assumed": assumed(sc, tr, est.layout, est.searched, est.layout_rules),
        "memory": est.memory.to_json(),
    }
    if est.alternatives and est.time is not None:  # what naming the framework would change
        out["framework_alternatives"] = {name: {"tokens_per_s": tps, "ratio": tps / est.time.tokens_per_s}
                                         for name, tps in est.alternatives}
    if est.time is None:
        why = no_peak_text(sc.hardware.gpu.id)
        out["time"] = {k: None for k in TIME_KEYS} | {"note": why}
        out["cost"] = {"usd": None, "usd_per_gpu_hour": est.cost.usd_per_gpu_hour, "note": why}
    else:
        out["time"] = est.time.to_json()
        out["cost"] = {"usd": est.cost.usd, "usd_per_gpu_hour": est.cost.usd_per_gpu_hour,
                       "usd_with_failures": est.cost.usd_with_failures, "interval": _cost_interval(est)}
    m = sc.hardware.market
    if m is not None:  # the price row the plan chose: provider, region, pricing, dated and sourced
        out["cost"]["market"] = {"provider": m.provider, "region": m.region, "geo": m.geo, "pricing": m.pricing,
                                 "usd_per_gpu_hour": m.usd_per_gpu_hour, "date": m.date, "age_days": m.age_days,
                                 "stale": m.stale, "source": m.source, "instance": m.instance,
                                 "preemption_overhead": est.time.preemption_overhead if est.time else None}
    return out


def _cost_interval(est: Estimate) -> dict[str, dict[str, float]] | None:
    """Cost follows the GPU-hours: its 80 % interval is theirs times the price."""
    t, price = est.time, est.cost.usd_per_gpu_hour
    iv = t.intervals() if t is not None else None
    if iv is None or price is None or "gpu_hours" not in iv:
        return None
    return {"usd": {k: v * price for k, v in iv["gpu_hours"].items()}}
