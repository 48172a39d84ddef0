"""Fit gpuplan's free constants on the open corpus — the one script that sets them — and measure
the leave-one-source-out cross-validated error.

Free constants are the ones no datasheet or paper gives (``FREE`` below, each with bounds); every
other constant in catalog/constants.json is cited and stays as it is. Objective: the mean over
sources of the mean |log(predicted / published)| of that source's rows — each source counts once,
so 139 llm-foundry rows do not outvote 3 Llama 3 rows. Throughput and GPU-hours rows fit the
runtime constants, memory rows the memory constants.

Protocol: every row's open settings are resolved once (framework default, else the planner at the
row's GPU count, with the constants at the starting point: validation/corpus_check.py) and kept fixed while the
constants move. Leave-one-source-out: for each source, fit on all the others, predict that
source's rows; the CV error is over those held-out predictions only.

    python tools/fit_constants.py            # fit, cross-validate, print
    python tools/fit_constants.py --write    # also write the fitted values into constants.json
                                             # and the CV predictions into validation/cv.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONSTANTS = ROOT / "src" / "gpuplan" / "catalog" / "constants.json"
CV_FILE = ROOT / "src" / "gpuplan" / "validation" / "cv.json"
INTERVALS = ROOT / "src" / "gpuplan" / "catalog" / "intervals.json"


@dataclass(frozen=True, slots=True)
class Free:
    """A constant the fit sets: ``name`` in constants.json (``name.key`` for one entry of a table)."""

    name: str
    low: float
    high: float
    kind: str  # "runtime" (throughput, GPU-hours rows) or "memory" (memory rows)


FREE = (  # bounds: what the physics allows, so a fit cannot hide a missing term in an absurd value
    # the share of the tensor-core kernels' (GEMM and attention) sustained rate a step reaches, beyond the clocks
    # under the power limit (measured per architecture, MSMF / MAMF: catalog/matmul.py sustained_ratio): at most 1
    Free("gemm_share_of_mamf", 0.5, 1.0, "runtime"),
    Free("comm_interference", 0.0, 1.0, "runtime"),
    Free("dp_overlap", 0.3, 1.0, "runtime"),
)
# scale_out_efficiency is not fitted: every built-in scale-out fabric carries its own efficiency
# (fabrics.json), so no corpus row reads the constant (a fit left it flat at a bound).
# Not fitted any more, set from microbenchmarks (validation/components.json, tools/derive_kernel_rates.py):
# the attention kernels' rates and per-row-block cost (attention_kernels), the streaming bandwidth
# (hbm_stream_share) and the per-kernel floor (kernel_floor_s) replace attention_achieved_share,
# attention_row_block_cost, memory_bandwidth_efficiency and kernel_launch_s.
# Not fitted, though estimates: allocator_fragmentation and cuda_context_bytes. The corpus holds 20
# measured peaks from two torchtitan documents (the ZeRO table is model states only, which neither
# touches); fitted on them, both went to their bounds and one source's cross-validated error rose.


def _category_kind(category: str) -> str:
    return "memory" if category == "memory" else "runtime"


def source_weighted_loss(rows: Sequence[dict[str, Any]]) -> float:
    """Mean over sources of the mean |log error| of the source's rows."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["source_key"], []).append(abs(math.log(max(r["predicted"], 1e-30) / r["published"])))
    return statistics.mean(statistics.mean(v) for v in by.values()) if by else 0.0


def golden(f: Callable[[float], float], low: float, high: float, iters: int = 18) -> float:
    """Minimum of a unimodal ``f`` on [low, high] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def coordinate_descent(loss: Callable[[dict[str, float]], float], start: dict[str, float],
                       bounds: dict[str, tuple[float, float]], sweeps: int = 3) -> dict[str, float]:
    """Minimise ``loss`` one constant at a time (golden section within its bounds), ``sweeps`` times."""
    x = dict(start)
    for _ in range(sweeps):
        for name, (lo, hi) in bounds.items():
            x[name] = golden(lambda v, n=name: loss({**x, n: v}), lo, hi)
    return x


def _scorer(rows: list[dict[str, Any]], cache: dict) -> Callable[[dict[str, float]], list[dict[str, Any]]]:
    """A function of constant values → scored rows (resolutions cached, constants overridden)."""
    from gpuplan.catalog.constants import override
    from gpuplan.validation.corpus_check import score_corpus

    def run(values: dict[str, float]) -> list[dict[str, Any]]:
        with override(values):
            return score_corpus(rows, cache)["rows"]

    return run


def fit(rows: list[dict[str, Any]], cache: dict, start: dict[str, float], sweeps: int = 2) -> dict[str, float]:
    """Fitted values of the FREE constants on ``rows``."""
    out = dict(start)
    for kind in ("runtime", "memory"):
        free = [f for f in FREE if f.kind == kind]
        sub = [r for r in rows if _category_kind(r["category"]) == kind]
        if not free or not sub:
            continue
        run = _scorer(sub, cache)
        out = coordinate_descent(lambda v, run=run: source_weighted_loss(run(v)), out,
                                 {f.name: (f.low, f.high) for f in free}, sweeps)
    return out


def cross_validate(rows: list[dict[str, Any]], cache: dict, start: dict[str, float],
                   sweeps: int = 2) -> list[dict[str, Any]]:
    """Leave one source out: each source's rows predicted by constants fitted on the others."""
    held: list[dict[str, Any]] = []
    for source in sorted({r["source_key"] for r in rows}):
        train = [r for r in rows if r["source_key"] != source]
        test = [r for r in rows if r["source_key"] == source]
        values = fit(train, cache, start, sweeps)
        for r in _scorer(test, cache)(values):
            held.append({**r, "fold": source})
        print(f"  fold {source}: {len(test)} rows held out", file=sys.stderr)
    return held


def starting_point() -> dict[str, float]:
    """Where every fit starts: the middle of each constant's bounds — not the shipped values, so the
    script's answer depends on the corpus alone and a rerun reproduces the shipped constants."""
    return {f.name: (f.low + f.high) / 2 for f in FREE}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="write fitted constants and CV predictions")
    p.add_argument("--sweeps", type=int, default=2)
    p.add_argument("--report", help="also write the whole report (JSON) to this file")
    p.add_argument("--intervals-only", action="store_true",
                   help="rebuild catalog/intervals.json from the written validation/cv.json and the shipped "
                        "constants (no refit)")
    args = p.parse_args(argv)
    if args.intervals_only:
        return _intervals_only()
    from gpuplan.catalog.constants import override
    from gpuplan.validation.corpus_check import corpus_rows, score_corpus, summarize

    cache: dict = {}
    start = starting_point()
    with override(start):  # resolves every row's open settings once, at the starting point
        base = score_corpus(None, cache)
    rows = [r for r in corpus_rows() if not r.get("skip") and r["id"] in cache]
    fitted = fit(rows, cache, start, args.sweeps)
    print("fitted:", json.dumps({k: round(v, 6) for k, v in fitted.items()}))
    held = cross_validate(rows, cache, start, args.sweeps)
    in_sample = _scorer(rows, cache)(fitted)
    intervals = interval_table(rows, cache, held, fitted)
    report = {"fitted": fitted, "in_sample": summarize(in_sample), "cross_validated": summarize(held),
              "skipped": base["skipped"], "interval_coverage": {k: intervals[k]["coverage"]
                                                                for k in ("throughput", "memory")}}
    print(summary_text(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1) + "\n")
    if args.write:
        write_constants(fitted)
        INTERVALS.write_text(json.dumps(intervals, indent=1) + "\n")
        CV_FILE.write_text(json.dumps({"_comment": "written by tools/fit_constants.py: leave-one-source-out "
                                                   "predictions (each row predicted by constants fitted on the "
                                                   "other sources)",
                                       "fitted": fitted,
                                       "rows": [{k: r[k] for k in ("id", "category", "source_key", "metric",
                                                                  "published", "predicted", "error", "fold")}
                                                for r in held]}, indent=1) + "\n")
    return 0


def interval_table(rows: list[dict[str, Any]], cache: dict, held: list[dict[str, Any]],
                   fitted: dict[str, float]) -> dict[str, Any]:
    """catalog/intervals.json: the 80 % intervals of the held-out residuals by regime (gpuplan/validation/
    intervals.py), a row also counted as the generic stack at its own layout, under the fitted constants."""
    from gpuplan.catalog.constants import override
    from gpuplan.validation.intervals import attributes, build, generic_ratio

    info = {}
    with override(fitted):
        for row in rows:
            res = cache.get(row["id"])
            if res is not None and row["category"] in ("throughput", "memory"):
                info[row["id"]] = (attributes(res), generic_ratio(res, row))
    return build(held, info)


def _intervals_only() -> int:
    from gpuplan.catalog.constants import entries
    from gpuplan.validation.corpus_check import corpus_rows, score_corpus

    cv = json.loads(CV_FILE.read_text())
    cache: dict = {}
    with override_start():
        score_corpus(None, cache)
    rows = [r for r in corpus_rows() if not r.get("skip") and r["id"] in cache]
    fitted = {f.name: entries()[f.name]["value"] for f in FREE}
    intervals = interval_table(rows, cache, cv["rows"], fitted)
    INTERVALS.write_text(json.dumps(intervals, indent=1) + "\n")
    print(json.dumps({k: intervals[k]["coverage"] for k in ("throughput", "memory")}))
    return 0


def override_start() -> Any:
    """The starting point's constants: where the corpus rows are resolved (as the full fit resolves them)."""
    from gpuplan.catalog.constants import override

    return override(starting_point())


def summary_text(report: dict[str, Any]) -> str:
    lines = [f"interval coverage (leave one source out): {json.dumps(report.get('interval_coverage'))}"]
    for part in ("in_sample", "cross_validated"):
        lines.append(f"== {part}")
        for cat, v in report[part].items():
            a = v["all"]
            lines.append(f"{cat:11s} n {a['n']:3d}  median |e| {a['median_abs_error']:.3f}  within 15% "
                         f"{a['within_15pct']:.2f}  within 25% {a['within_25pct']:.2f}  "
                         f"signed {a['median_error']:+.3f}")
            for s, b in v["by_source"].items():
                lines.append(f"    {s:22s} n {b['n']:3d}  median |e| {b['median_abs_error']:.3f}  "
                             f"signed {b['median_error']:+.3f}  within 25% {b['within_25pct']:.2f}")
    return "\n".join(lines)


FITTED_BY = ("tools/fit_constants.py on validation/corpus.json (the open corpus), objective mean over sources of "
             "mean |log error|; leave-one-source-out CV in validation/cv.json")


def write_constants(values: dict[str, float]) -> None:
    """Each fitted value into its entry of constants.json, in place: the file's own layout (its compact
    tables) is kept, only the entry's value, status and fitted_by change."""
    text = CONSTANTS.read_text()
    for name, v in values.items():
        start = text.index(f'\n  "{name}": {{')
        end = text.index("\n  }", start)
        entry = json.loads(text[start + len(f'\n  "{name}": '):end + 4])
        entry.update(value=float(f"{v:.4g}"), status="fitted", fitted_by=FITTED_BY)
        body = ",\n".join(f"    {json.dumps(k)}: {json.dumps(x, ensure_ascii=False)}" for k, x in entry.items())
        text = f"{text[:start]}\n  {json.dumps(name)}: {{\n{body}\n  }}{text[end + 4:]}"
    json.loads(text)  # still JSON
    CONSTANTS.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
