"""Score gpuplan on the open corpus of published runs (``corpus.json``, imported from the cited
``published_runs.yaml`` by ``tools/import_corpus.py``).

Each row states what its source states. A setting the source leaves open is taken from the
framework's documented default (catalog/frameworks.json) or, when it has none, searched by the
planner at the row's own GPU count (fixed means fixed) — the fastest layout that fits, as the
people who ran it would have picked; never chosen to match the published figure. Throughput is
compared as tokens/s per GPU: a published MFU, HFU or TFLOP/s figure is converted with
gpuplan's own FLOP count in the convention the source used (model FLOPs: PaLM's 6N + 12·L·H·Q·T,
as MosaicML, torchtitan, NeMo and Llama 3 report; hardware FLOPs add the recomputed forward,
as Megatron 2021 and BLOOM report), so the error is the same as the error in MFU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.catalog.framework_memory import logged_peak
from gpuplan.catalog.intervals import point_estimates
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.estimate import Estimate, completed_layout, evaluate
from gpuplan.search.enumerate import Search, default_global_batch
from gpuplan.search.rank import scaling_curve
from gpuplan.spec import Layout, Scenario, check_layout_fields

THROUGHPUT_METRICS = ("tokens_per_s_per_gpu", "mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                      "step_s")


def corpus_rows() -> list[dict[str, Any]]:
    return list(load_json("../validation/corpus.json")["rows"])


@dataclass(frozen=True, slots=True)
class Resolved:
    """A row as gpuplan evaluates it: the scenario with every open setting filled, and how."""

    scenario: Scenario
    layout: Layout
    how: str


def _framework_defaults(sc: Scenario) -> dict[str, Any]:
    """Layout fields the row's framework documents a default for (applied where the row is silent)."""
    from gpuplan.catalog.frameworks import get_framework
    from gpuplan.io.schema import LAYOUT_KEYS

    out = {}
    for k, fact in get_framework(sc.training.framework).defaults.items():
        if k in LAYOUT_KEYS and fact.value is not None and k not in sc.layout:
            try:
                check_layout_fields({k: fact.value})
            except GpuplanError:
                continue  # a default that is no layout value ("micro-batch = train_batch_size")
            out[k] = fact.value
    return out


def resolve(row: dict[str, Any]) -> Resolved:
    """Fill what the row leaves open: the framework's documented defaults, then the planner at the
    row's GPU count; when nothing fits at the defaults, the planner searches those fields too (the
    run did fit, so its authors did not use the default there). The run ran, so what fits is decided
    on the point estimate (no interval: catalog/intervals.point_estimates)."""
    with point_estimates():
        return _resolve(row)


def _resolve(row: dict[str, Any]) -> Resolved:
    raw = row["scenario"]
    # the run ran, so it fit: no planning margin (training.headroom 0) unless the row states one
    if "headroom" not in (raw.get("training") or {}):
        raw = {**raw, "training": {**(raw.get("training") or {}), "headroom": 0}}
    sc0 = parse_scenario(raw)
    defaults = _framework_defaults(sc0)
    if "tp_overlap" not in sc0.layout and "tp_overlap" not in (row.get("open") or ()):
        # the planner may overlap tensor-parallel collectives (search/book.py ``tp_variants``); a row that does not
        # list it as open ran its framework's default
        from gpuplan.catalog.frameworks import get_framework

        default = get_framework(sc0.training.framework).tp_comm_overlap["default"].value is True
        sc0 = replace(sc0, layout={**sc0.layout, "tp_overlap": default})
    gpus_given = "gpus" in row["scenario"].get("hardware", {})
    if not row.get("open") and gpus_given:
        return _stated(sc0, defaults, "as stated")
    tries = [(defaults, ("none",), "framework defaults")] if defaults else []
    tries += [({}, ("none",), "searched")]
    if not gpus_given:  # a count to plan: offloading is the planner's last resort there
        tries += [({}, ("optimizer", "params"), "searched, with offload")]
    for extra, offload, how in tries:
        sc = replace(sc0, layout={**extra, **sc0.layout})
        found = _search(sc, gpus_given, offload)
        if found is not None:
            return Resolved(found[0], found[1], f"open fields: {how}")
    if gpus_given:
        # the run ran on its GPUs without offloading (published runs state it when they offload) though the
        # model's memory says no layout of the stated fields fits: the stated fields with the framework's
        # defaults, completed as `evaluate` completes them — its time is what the row checks
        return _stated(sc0, defaults, "open fields: framework defaults (predicted out of memory)")
    raise GpuplanError(f"no layout with the stated fields fits on {sc0.hardware.gpus} GPUs (model predicts OOM)")


def _stated(sc0: Scenario, defaults: dict[str, Any], how: str) -> Resolved:
    """The row's stated fields with its framework's documented defaults, completed as ``evaluate`` completes them."""
    sc = replace(sc0, layout={**defaults, **sc0.layout})
    return Resolved(sc, completed_layout(sc)[0], how)


def _search(sc: Scenario, gpus_given: bool, offload: tuple[str, ...]) -> tuple[Scenario, Layout] | None:
    """The planner's best layout for the open fields: at the stated GPU count, or — count open — at
    the planner's compute equilibrium."""
    gb = default_global_batch(sc)
    sc = replace(sc, training=replace(sc.training, global_batch=gb))
    search = Search(sc, gb)
    if "offload" in sc.layout:
        offload = (sc.layout["offload"],)
    if gpus_given:
        n = sc.hardware.gpus
        search.run_gpu(sc.hardware, n, offload, counts=lambda k: k == n)
        best = search.best.get((sc.hardware.gpu.id, n))
        return (sc, best.layout) if best is not None else None
    search.run_gpu(sc.hardware, 16384, offload)
    if not search.best:
        return None
    # the count the planner recommends: its compute equilibrium (the last count at which each added GPU
    # still buys >= 80 % of proportional speed-up)
    curve, eq = scaling_curve(search.best, sc.hardware.gpu.id, 0.8)
    best = next(p.candidate for p in curve if p.gpus == eq.gpus)
    return sc.with_gpus(best.gpus), best.layout


def published_value(row: dict[str, Any], est: Estimate) -> float:
    """The published figure in gpuplan's comparison unit: tokens/s per GPU for throughput rows,
    GPU-hours, or bytes."""
    metric, value = row["published"]["metric"], row["published"]["value"]
    t = est.time
    if metric in ("gpu_hours", "peak_memory_bytes", "model_state_bytes", "tokens_per_s_per_gpu"):
        return float(value)
    assert t is not None
    if metric == "mfu":
        return value * t.peak_flops / t.flops.model
    if metric == "hfu":
        return value * t.peak_flops / t.flops.hardware
    if metric == "model_tflops_per_gpu":
        return value * 1e12 / t.flops.model
    if metric == "hardware_tflops_per_gpu":
        return value * 1e12 / t.flops.hardware
    if metric == "step_s":
        return t.tokens_per_step / value / est.scenario.hardware.gpus
    raise GpuplanError(f"row {row['id']}: unknown metric {metric!r}")


def predicted_value(row: dict[str, Any], est: Estimate) -> float:
    metric = row["published"]["metric"]
    if metric == "peak_memory_bytes":  # as the run's log measured it (frameworks.json memory.logged_peak)
        reserved = logged_peak(est.scenario.training.framework) == "reserved"
        return est.memory.reserved if reserved else est.memory.total
    if metric == "model_state_bytes":
        return est.memory.weights + est.memory.gradients + est.memory.optimizer
    assert est.time is not None
    if metric == "gpu_hours":  # published GPU-hours are what the run consumed: failures and restarts too
        hours, fail = est.time.gpu_hours, est.time.failure_overhead
        if hours is None:
            raise GpuplanError(f"row {row['id']}: no training length")
        return hours * (1 + (fail or 0.0))
    return est.time.tokens_per_s / est.scenario.hardware.gpus


def score_row(row: dict[str, Any], res: Resolved) -> dict[str, Any]:
    est = evaluate(res.scenario, res.layout)
    pub, pred = published_value(row, est), predicted_value(row, est)
    out = {"id": row["id"], "category": row["category"], "source_key": row["source_key"],
           "metric": row["published"]["metric"], "published": pub, "predicted": pred, "error": pred / pub - 1,
           "how": res.how, "gpu": res.scenario.hardware.gpu.id, "framework": res.scenario.training.framework,
           "gpus": res.scenario.hardware.gpus}
    if est.time is not None:
        out["mfu_predicted"] = est.time.mfu
        if row["category"] in BASELINE_CATEGORIES:
            out["baseline_error"] = baseline_value(row, est) / pub - 1
    return out


BASELINE_EFFICIENCY = 0.5  # issue "Accuracy from the kernels up": the calculator gpuplan must beat by 1.5x
BASELINE_CATEGORIES = ("throughput", "gpu_hours")


def baseline_value(row: dict[str, Any], est: Estimate) -> float:
    """What a constant-efficiency calculator answers for the row: every GPU at ``BASELINE_EFFICIENCY`` of its dense
    peak for the run's precision, over the model FLOPs per token (6·N plus attention, what MFU counts) — tokens/s per
    GPU, or the GPU-hours of the row's tokens at that rate. No layout, framework or network enters."""
    t = est.time
    assert t is not None
    per_gpu = BASELINE_EFFICIENCY * t.peak_flops / t.flops.model
    if row["published"]["metric"] != "gpu_hours":
        return per_gpu
    tokens = est.scenario.training.tokens
    if tokens is None:
        raise GpuplanError(f"row {row['id']}: no training length")
    return tokens / per_gpu / 3600


def score_corpus(rows: Iterable[dict[str, Any]] | None = None,
                 resolved: dict[str, Resolved] | None = None) -> dict[str, Any]:
    """Every expressible row scored; ``resolved`` caches the filled-in scenarios across calls (the
    fitting script re-scores the same resolutions under other constants)."""
    cache = resolved if resolved is not None else {}
    scored, skipped = [], []
    for row in (corpus_rows() if rows is None else rows):
        if row.get("skip"):
            skipped.append({"id": row["id"], "why": row["skip"]})
            continue
        try:
            res = cache.get(row["id"]) or resolve(row)
            cache[row["id"]] = res
            scored.append(score_row(row, res))
        except GpuplanError as err:
            skipped.append({"id": row["id"], "why": str(err)})
    return {"rows": scored, "skipped": skipped, "summary": summarize(scored)}


def error_stats(errors: list[float]) -> dict[str, Any]:
    """Median |error|, share within ±15 % and ±25 %, max |error|, median signed error."""
    if not errors:
        return {"n": 0, "median_abs_error": None, "within_15pct": None, "within_25pct": None,
                "max_abs_error": None, "median_error": None}
    a = [abs(e) for e in errors]
    return {"n": len(a), "median_abs_error": statistics.median(a), "within_15pct": sum(x <= 0.15 for x in a) / len(a),
            "within_25pct": sum(x <= 0.25 for x in a) / len(a), "max_abs_error": max(a),
            "median_error": statistics.median(errors)}


def summarize(rows: list[dict[str, Any]], key: str = "error") -> dict[str, Any]:
    """By category, by source within each category, and for memory by what was published (ZeRO's model-state table
    beside measured peaks: the exact table would hide the peaks' error)."""
    out: dict[str, Any] = {}
    for cat in sorted({r["category"] for r in rows}):
        sub = [r for r in rows if r["category"] == cat]
        by_source = {s: error_stats([r[key] for r in sub if r["source_key"] == s])
                     for s in sorted({r["source_key"] for r in sub})}
        metrics = sorted({r.get("metric") for r in sub if r.get("metric")})
        by_metric = {m: error_stats([r[key] for r in sub if r.get("metric") == m]) for m in metrics} \
            if cat == "memory" and len(metrics) > 1 else {}
        out[cat] = {"all": error_stats([r[key] for r in sub]), "by_source": by_source, "by_metric": by_metric}
    return out


def log_error(r: dict[str, Any]) -> float:
    """|log(predicted / published)|: symmetric in over- and under-prediction (the fit's objective)."""
    return abs(math.log(max(r["predicted"], 1e-30) / r["published"]))
