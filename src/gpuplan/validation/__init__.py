"""Published results (the open corpus, ``corpus.json``) and the code that scores gpuplan on them.

``scores()`` is what ``gpuplan validate`` prints: the in-sample error (every row scored with the
shipped constants) beside the leave-one-source-out cross-validated error that
``tools/fit_constants.py`` measured and wrote to ``cv.json`` (each source's rows predicted by
constants fitted on the other sources only).
"""

from __future__ import annotations

from typing import Any


def cross_validated() -> dict[str, Any] | None:
    """The CV predictions the fitting script wrote (None before it has been run)."""
    from gpuplan.catalog import load_json
    from gpuplan.errors import GpuplanError

    try:
        return load_json("../validation/cv.json")  # type: ignore[no-any-return]
    except (FileNotFoundError, GpuplanError):
        return None


def scores() -> dict[str, Any]:
    """In-sample and cross-validated error on the open corpus, by category and by source."""
    from gpuplan.validation.corpus_check import score_corpus, summarize

    live = score_corpus()
    cv = cross_validated()
    return {"in_sample": live["summary"], "rows": live["rows"], "skipped": live["skipped"],
            "cross_validated": summarize(cv["rows"]) if cv else None,
            "cv_rows": cv["rows"] if cv else None, "fitted": cv["fitted"] if cv else None,
            "interval_coverage": interval_coverage(), "baseline": baseline(live["rows"])}


def baseline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The constant-efficiency calculator's error on the rows both it and gpuplan answer (corpus_check.py
    ``baseline_value``), summarized as gpuplan's own (``summarize``: per category, all rows and by source)."""
    from gpuplan.validation.corpus_check import BASELINE_EFFICIENCY, summarize

    return {"efficiency": BASELINE_EFFICIENCY,
            **summarize([r for r in rows if "baseline_error" in r], key="baseline_error")}


def interval_coverage() -> dict[str, Any] | None:
    """How often the published value fell inside the 80 % interval built without its own source
    (catalog/intervals.json, written by tools/fit_constants.py); None before the first fit."""
    from gpuplan.catalog import load_json
    from gpuplan.errors import GpuplanError

    try:
        table = load_json("intervals.json")
    except (FileNotFoundError, GpuplanError):
        return None
    return {k: {**table[k]["coverage"], "unwidened": table[k].get("coverage_unwidened")}
            for k in ("throughput", "memory") if k in table}
