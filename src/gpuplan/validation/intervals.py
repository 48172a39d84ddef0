"""The 80 % intervals of catalog/intervals.json, from leave-one-source-out residuals (tools/fit_constants.py
calls ``build`` after its cross-validation), and how often the published value falls inside them when each
source's intervals come from the other sources only (``coverage``, reported by ``gpuplan validate``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from gpuplan.catalog.frameworks import grad_dtype_of
from gpuplan.catalog.intervals import regime, regime_key
from gpuplan.model.estimate import evaluate

# finest regime first; each needs MIN_ROWS held-out rows from MIN_SOURCES sources, else the next coarser one
# answers (the coarsest, every row, always does): rows of one source cannot tell how far sources differ — their
# own stack, their own way of measuring — which is the spread a run from another source meets. Throughput asks
# for three: two sources' medians give the spread between sources one degree of freedom (t = 3.08), so their one
# difference would set the interval (the long-context rows of two sources that miss in opposite directions gave
# -75 % ... +303 %); the corpus holds ten. Memory keeps two: its measured peaks come from two sources only.
# Throughput is split first by context (catalog/intervals.py LONG_CONTEXT): long sequences miss by more.
BACKOFF = {"throughput": (["context", "framework", "generation", "scale"], ["context", "framework", "scale"],
                          ["context", "framework"], ["context"], []),
           "memory": (["parallel"], [])}
MIN_ROWS = {"throughput": 15, "memory": 6}
MIN_SOURCES = {"throughput": 3, "memory": 2}
Z80 = 1.2816  # the standard normal's 90th percentile: an 80 % two-sided interval
KINDS = {"throughput": "throughput", "memory": "memory"}  # corpus category → interval kind


def attributes(res: Any) -> dict[str, str]:
    """A resolved corpus row's regime (validation/corpus_check.Resolved)."""
    hw, lay = res.scenario.hardware, res.layout
    return regime(res.scenario.training.framework, hw.gpu.architecture, hw.gpus, hw.gpus_per_node,
                  lay.tp > 1 or lay.pp > 1, res.scenario.training.seq_len)


def generic_ratio(res: Any, row: dict[str, Any]) -> float | None:
    """predicted as the generic stack / predicted as stated, at the row's own layout: how a run's prediction
    moves when its framework is not named. None where it cannot be told (no time, a layout generic cannot
    price)."""
    from gpuplan.validation.corpus_check import predicted_value

    sc = res.scenario
    if sc.training.framework == "generic":
        return 1.0
    tr = replace(sc.training, framework="generic", grad_dtype=None)
    if tr.precision in ("bf16", "fp8"):
        tr = replace(tr, grad_dtype=grad_dtype_of(tr))
    try:
        own = predicted_value(row, evaluate(sc, res.layout))
        gen = predicted_value(row, evaluate(replace(sc, training=tr), res.layout))
    except Exception:  # noqa: BLE001 - a row the generic variant cannot evaluate gives no residual
        return None
    return gen / own if own else None


def residuals(held: list[dict[str, Any]], info: dict[str, tuple[dict[str, str], float | None]], kind: str
              ) -> list[tuple[str, dict[str, str], float]]:
    """(source, regime attributes, log(published / predicted)) per held-out row of ``kind``; a throughput row
    also counts as generic with its prediction moved by ``generic_ratio`` (a peak's does not: the stacks differ
    in what they keep — FSDP kept gathered under a pipeline is torchtitan's — and that is structure, not
    spread)."""
    out = []
    for r in held:
        if KINDS.get(r["category"]) != kind or r["metric"] == "model_state_bytes" or r["id"] not in info:
            continue
        attrs, ratio = info[r["id"]]
        out.append((r["source_key"], attrs, math.log(r["published"] / r["predicted"])))
        if kind == "throughput" and attrs["framework"] == "named" and ratio:
            out.append((r["source_key"], {**attrs, "framework": "generic"},
                        math.log(r["published"] / (r["predicted"] * ratio))))
    return out


# Student's t, 90th percentile, by degrees of freedom 1-30 (NIST/SEMATECH e-Handbook of Statistical Methods,
# Sec. 1.3.6.7.2, "Critical values of the Student's t distribution", column 0.10); past 30, Z80
T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350, 1.345, 1.341,
       1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318, 1.316, 1.315, 1.314, 1.313, 1.311, 1.310)


def new_source_factor(k: int) -> float:
    """The 80 % half-width of where a new source's median falls, in units of the sample standard deviation of
    ``k`` sources' medians: t(0.90, k − 1) · √(1 + 1/k) — the prediction interval for one more draw from a normal
    whose mean and variance are estimated from ``k`` (a run asked about is a new source: its own stack, its own
    way of measuring). Few sources give a wide factor: 3.77 from two, 1.45 from ten."""
    t = T90[k - 2] if k - 1 <= len(T90) else Z80
    return t * math.sqrt(1 + 1 / k)


def interval(values: list[tuple[str, float]], width: float = 1.0) -> tuple[float, float]:
    """The 80 % interval of log residuals that come by source, about the prediction: sources differ (their own
    stack, their own way of measuring) and rows differ within a source, so the half-width adds the spread of a new
    source's median (``new_source_factor`` times the sample standard deviation of the sources' medians), the
    within-source spread and their median (a bias the model has not explained is uncertainty, not a correction),
    the last two at Z80; ``width`` widens it (``calibrated_width``). Returned as factors − 1 on the prediction."""
    by: dict[str, list[float]] = {}
    for source, r in values:
        by.setdefault(source, []).append(r)
    medians = {s: statistics.median(v) for s, v in by.items()}
    centre = statistics.median(medians.values())
    k = len(medians)
    between = new_source_factor(k) * statistics.stdev(medians.values()) if k > 1 else 0.0
    within = statistics.pstdev([r - medians[s] for s, r in values])
    half = math.sqrt(between ** 2 + (Z80 * within) ** 2 + (Z80 * centre) ** 2)
    return math.exp(-width * half) - 1, math.exp(width * half) - 1


def table(rows: list[tuple[str, dict[str, str], float]], kind: str, width: float = 1.0) -> dict[str, Any]:
    """Regime key → {p10, p90, n} for every regime of every backoff level with enough rows."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for source, attrs, r in rows:
        for level in BACKOFF[kind]:
            groups.setdefault(regime_key(attrs, level), []).append((source, r))
    out = {}
    coarsest = regime_key({}, BACKOFF[kind][-1])
    for key, values in sorted(groups.items()):
        sources = len({s for s, _ in values})
        if len(values) >= MIN_ROWS[kind] and (sources >= MIN_SOURCES[kind] or key == coarsest):
            lo, hi = interval(values, width)
            out[key] = {"p10": round(lo, 4), "p90": round(hi, 4), "n": len(values), "sources": sources}
    return out


def lookup(regimes: dict[str, Any], attrs: dict[str, str], kind: str) -> dict[str, Any] | None:
    for level in BACKOFF[kind]:
        hit = regimes.get(regime_key(attrs, level))
        if hit is not None:
            return hit
    return None


def coverage(rows: list[tuple[str, dict[str, str], float]], kind: str, width: float = 1.0) -> dict[str, Any]:
    """How often a row's residual lies inside the 80 % interval built from the other sources' rows only."""
    inside = total = 0
    for source in sorted({s for s, _, _ in rows}):
        regimes = table([x for x in rows if x[0] != source], kind, width)
        for _, attrs, r in (x for x in rows if x[0] == source):
            hit = lookup(regimes, attrs, kind)
            if hit is not None:
                total += 1
                inside += math.log1p(hit["p10"]) <= r <= math.log1p(hit["p90"])
    return {"n": total, "inside": inside, "share": inside / total if total else None, "width": width}


# If intervals built without a source hold fewer than 80 % of its rows, they are widened until they do; where
# too few held-out rows can be checked that way (MIN_CHECKED), they stay as the variances give them.
WIDTHS = tuple(round(1 + 0.1 * i, 1) for i in range(21))  # 1.0 ... 3.0
TARGET_COVERAGE = 0.8
MIN_CHECKED = 30


def calibrated_width(rows: list[tuple[str, dict[str, str], float]], kind: str) -> float:
    """The least width whose leave-one-source-out coverage reaches 80 % (1 where it cannot be checked)."""
    for w in WIDTHS:
        c = coverage(rows, kind, w)
        if c["n"] < MIN_CHECKED or c["share"] >= TARGET_COVERAGE:
            return w
    return WIDTHS[-1]


def build(held: list[dict[str, Any]], info: dict[str, tuple[dict[str, str], float | None]]) -> dict[str, Any]:
    """The contents of catalog/intervals.json."""
    out: dict[str, Any] = {"_comment": "written by tools/fit_constants.py: 80 % intervals (p10, p90 as published "
                                       "/ predicted - 1) of its leave-one-source-out predictions by regime, "
                                       "about the prediction: +- the root of (t(0.90, k-1) x sqrt(1 + 1/k) x the "
                                       "sample s.d. of the k sources' median log residuals)^2 + 1.28^2 x (the "
                                       "within-source variance + the median^2), x 'width' (the least that makes "
                                       "intervals built without a source hold 80 % of its rows, where enough can "
                                       "be checked); a regime needs 'min_rows' rows from 'min_sources' sources, "
                                       "else the next coarser one answers (gpuplan/validation/intervals.py). "
                                       "'coverage': that leave-one-source-out share."}
    for kind in ("throughput", "memory"):
        rows = residuals(held, info, kind)
        width = calibrated_width(rows, kind)
        out[kind] = {"backoff": [list(level) for level in BACKOFF[kind]], "min_rows": MIN_ROWS[kind],
                     "min_sources": MIN_SOURCES[kind], "width": width, "regimes": table(rows, kind, width),
                     "coverage": coverage(rows, kind, width), "coverage_unwidened": coverage(rows, kind)}
    return out
